"""The driver of a rule with budget annealing and a privacy filter (AIM's, McKenna et al., VLDB
2022): what `jaxdp.adaptive` builds when the selection is `jaxdp.selection.AIMSelection`.

Round 0 measures every 1-way marginal of the candidates W+ (Algorithm 3). Each later round
(Algorithm 2) keeps the candidates C_t the family allows (`Family.eligible`: Private-PGM's model
size filter), selects one with the exponential mechanism on AIM's quality score, measures it with
Gaussian noise, has the family record it and refit to every measurement so far, and anneals
(sigma, epsilon) by Algorithm 4. A privacy filter ends the run: when the remaining budget cannot
pay two more rounds, the next round spends exactly what is left, and the run stops.

The run is data-adaptive in how many rounds it runs and at what noise scales, so it cannot be one
compiled scan: it runs as a Python loop of `step(state, key)` (`jittable = False`) and its
realised plan (one charge per primitive actually invoked, each decided from public quantities
before it was spent) is checked by `jaxdp.loop.run` against the ledger and the budget. A family
whose methods trace (PEP, MW, RAP, GEM) is called through compiled programs that take it as an
argument; a host family (Private-PGM's `GraphicalModel`, AIM-GEM's `GeneratorModel`) directly.

Uncertainty quantification (Section 5): `error_bounds` gives, for every workload marginal, an
upper confidence bound on the L1 error of the synthetic data: Theorem 2/3 + Corollary 1 when the
marginal is supported by a measurement, else Theorem 4 + Corollary 2 from the last round in which
it was a candidate. The bounds use only released quantities: they cost no privacy.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxdp import _checks
from jaxdp.accounting import Plan
from jaxdp.domain import Dataset
from jaxdp.families import pgm
from jaxdp.families.base import ClassShape, Family, Measured
from jaxdp.families.graphical import host_measurements
from jaxdp.families.histogram import MarginalPadding
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.measurement import measure_on_host
from jaxdp.mechanisms._common import private_counts, require_categorical
from jaxdp.queries import MarginalWorkload, marginal_counts
from jaxdp.selection.annealed import SQRT_2_OVER_PI, AIMSelection, RoundRecord, Schedule
from jaxdp.types import MARGINALS, Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field

logger = logging.getLogger("jaxdp.mechanisms.aim")


class AnnealedState(NamedTuple):
    """model: the family's state; schedule: the annealing state (sigma, epsilon, rho spent, the
    charges invoked, done); measurements: the released noisy marginals (`pgm.Measurement`, in
    order); rounds_done; records: one RoundRecord per selection round; last_round:
    (len(workload),) the last selection round in which each workload marginal was a candidate
    (-1: never); last_model_counts: (workload.n_queries,) M_r(p_hat_{t-1}) of that round."""

    model: Any
    schedule: Schedule
    measurements: tuple[pgm.Measurement, ...]
    rounds_done: int
    records: tuple[RoundRecord, ...]
    last_round: np.ndarray
    last_model_counts: np.ndarray


class AnnealedInfo(NamedTuple):
    """charges: the round's (selection, measurement) charges (count 0 for a primitive that did
    not run: round 0 selects nothing; rounds after the filter's last draw nothing)."""

    charges: tuple[Charge, Charge]


class ErrorBounds(NamedTuple):
    """Per workload marginal: `bound` on ||M_r(D) - M_r(D_hat)||_1 in counts, holding with
    probability >= `confidence` for each marginal; `supported`: True where Theorem 2/3 +
    Corollary 1 applied (else Theorem 4 + Corollary 2); `normalised`: bound / estimated total."""

    bound: np.ndarray
    supported: np.ndarray
    normalised: np.ndarray
    confidence: float


# A traced family's methods, compiled once per shape with the family as an argument.
@jax.jit
def _record(family: Family, model, measured: Measured, current: Array, r: Array):
    return family.record(model, measured, current, r)


@functools.partial(jax.jit, static_argnames="last")
def _update(family: Family, model, t: Array, key: Key, last: bool):
    return family.update(model, t, key, last)


@jax.jit
def _answers(family: Family, model):
    return family.answers(model)


@pytree_dataclass
class Annealed:
    """A mechanism driven by a filter rule (module docstring), built by `jaxdp.adaptive`.

    Privacy:
        See `jaxdp.selection.AIMSelection`: rho-zCDP by the filter, for `relation`. Keys: INIT
        for the family's public randomness; MEASURE of round 0; SELECT and MEASURE of every
        later round; UPDATE for the family's update; RELEASE for sampling records. The
        family's fit, answers and samples are post-processing of released values.
    """

    counts: Sensitive  # true int32 counts of every candidate marginal, concatenated
    selection: AIMSelection
    family: Family
    workload: MarginalWorkload = static_field()
    relation: Neighboring = static_field()
    n_records: int = static_field()
    plan: Plan = static_field()
    rounds: int = static_field()
    noise: str = static_field()
    name: str = static_field(default="aim")

    jittable = False

    @property
    def candidates(self) -> MarginalWorkload:
        return self.selection.candidates

    # -- init / step / release ----------------------------------------------------------------

    def init(self, key: Key) -> AnnealedState:
        require_key(key)
        return AnnealedState(
            model=self.family.init(key),
            schedule=self.selection.start(self.plan.rho_budget),
            measurements=(),
            rounds_done=0,
            records=(),
            last_round=np.full(len(self.workload), -1, np.int32),
            last_model_counts=np.zeros(self.workload.n_queries, np.float32),
        )

    def step(self, state: AnnealedState, key: Key) -> tuple[AnnealedState, AnnealedInfo]:
        require_key(key)
        if state.schedule.done:
            return state, AnnealedInfo(charges=self.selection.idle())
        if state.rounds_done == 0:
            return self._initialise(state, key)
        return self._adaptive_round(state, key)

    def finished(self, state: AnnealedState) -> bool:
        """True once the filter has spent the budget (the loop stops calling `step`)."""
        return bool(state.schedule.done)

    def realised_plan(self, state: AnnealedState) -> Plan:
        """The plan the filter followed: one charge per primitive invoked, within the budget."""
        return self.selection.realised_plan(state.schedule, self.plan)

    @functools.cached_property
    def _gather(self) -> np.ndarray:
        """(n_candidates, width) each candidate's cells in the flat answers, padded with n_queries
        (`MarginalPadding`, as the fixed-budget measurement lays them out)."""
        return np.asarray(MarginalPadding.of(self.candidates).gather)

    def _measured(self, chosen: list[int], index: np.ndarray, noisy: np.ndarray, sigma: float) -> Measured:
        """The picks' measurements (`noisy` at the flat positions `index`) in the padded form every
        family reads: (k, width) noisy counts (float64, the host's) and their positions."""
        flat = np.zeros(self.candidates.n_queries + 1, np.float64)  # the last entry: the padding
        flat[index] = noisy
        picks = np.asarray(chosen, np.int32)
        gather = self._gather[picks]
        return Measured(picks, picks, np.full(len(chosen), -1, np.int32), gather, flat[gather], sigma)

    def _fit(self, model, measured: Measured, current, t: int, key: Key, last: bool):
        """The family's record and update of one round (compiled for a traced family)."""
        update_key = stream_key(key, Stream.UPDATE)
        if not self.family.jittable:
            model = self.family.record(model, measured, current, t)
            return self.family.update(model, t, update_key, last)[0]
        current = np.zeros(self.candidates.n_queries) if current is None else current
        t = jnp.asarray(t, jnp.int32)
        model = _record(self.family, model, measured, jnp.asarray(current, jnp.float32), t)
        return _update(self.family, model, t, update_key, last)[0]

    def _answers(self, model, eligible: np.ndarray) -> np.ndarray:
        """(candidates.n_queries,) float64 the family's answers of the eligible candidates in
        counts (fractions times the public n under replace-one), 0 elsewhere."""
        if self.family.jittable:
            answers = np.asarray(_answers(self.family, model), np.float64)
        else:
            answers = np.asarray(self.family.candidate_answers(model, eligible), np.float64)
        if self.relation is Neighboring.REPLACE_ONE:
            answers = answers * self.n_records
        return np.where(np.repeat(np.asarray(eligible, bool), self.candidates.cells), answers, 0.0)

    def _initialise(self, state: AnnealedState, key: Key) -> tuple[AnnealedState, AnnealedInfo]:
        rule = self.selection
        ones = rule.one_way()
        sensitivity, sigma = rule.one_way_measurement(state.schedule.sigma)
        index = np.concatenate([np.arange(rule.span(i).start, rule.span(i).stop) for i in ones])
        noisy, charge = self._measure(key, index, sigma=sigma, sensitivity=sensitivity)
        measured = self._measured(ones, index, noisy, sigma)
        schedule = rule.after_one_way(state.schedule, sensitivity, sigma)
        new = state._replace(
            model=self._fit(state.model, measured, None, 0, key, False),
            schedule=rule.anneal_or_finish(
                schedule, changed=True, rho_budget=self.plan.rho_budget, rounds_done=1, rounds=self.rounds
            ),
            measurements=host_measurements(measured, self.candidates),
            rounds_done=1,
        )
        return new, AnnealedInfo(charges=(rule.idle()[0], charge))

    def _measure(self, key: Key, index: np.ndarray, *, sigma: float, sensitivity: float):
        return measure_on_host(
            stream_key(key, Stream.MEASURE),
            self.counts,
            index,
            sigma=sigma,
            sensitivity=sensitivity,
            noise=self.noise,
            largest=self.selection.largest_measurement,
        )

    def _adaptive_round(self, state: AnnealedState, key: Key) -> tuple[AnnealedState, AnnealedInfo]:
        rule, t = self.selection, state.rounds_done
        sigma, epsilon, rho_select, rho_measure, final = rule.round_parameters(
            state.schedule, self.plan.rho_budget
        )
        rho_used = state.schedule.rho_spent + rho_select + rho_measure

        started = time.perf_counter()
        mask = self._eligible(state.model, rho_used / self.plan.rho_budget)
        filter_s = time.perf_counter() - started
        started = time.perf_counter()
        answered = self._answers(state.model, mask)
        model_counts = answered.astype(np.float32)
        choice, select_charge, delta_t, scale = rule(
            stream_key(key, Stream.SELECT), self.counts, model_counts, mask, sigma, rho_select
        )
        score_s = time.perf_counter() - started

        sigma_used = rule.measure_sigma(rho_measure)
        span = rule.span(choice)
        index = np.arange(span.start, span.stop)
        noisy, measure_charge = self._measure(key, index, sigma=sigma_used, sensitivity=rule.l2_sensitivity)
        before = model_counts[span].astype(np.float64)
        measured = self._measured([choice], index, noisy, sigma_used)
        measurements = (*state.measurements, *host_measurements(measured, self.candidates))
        started = time.perf_counter()
        last = final or t + 1 >= self.rounds
        current = answered / self.n_records if self.relation is Neighboring.REPLACE_ONE else answered
        fitted = self._fit(state.model, measured, current, t, key, last)
        fit_s = time.perf_counter() - started
        after = self._answers(fitted, _one_hot(choice, len(self.candidates)))[span]
        # Timings go to the log (bench/bench_aim.py reads them), never into State or Info,
        # which must be identical across runs with the same key.
        timing = {
            "round": t,
            "eligible": int(mask.sum()),
            "filter_s": filter_s,
            "score_s": score_s,
            "fit_s": fit_s,
        }
        logger.debug(
            "aim round %(round)d: |C_t|=%(eligible)d filter %(filter_s).3fs score %(score_s).3fs "
            "fit %(fit_s).3fs",
            timing,
            extra={"aim_timing": timing},
        )

        # remember, for each workload marginal that was a candidate, this round's model answers
        index = self._candidate_index
        last_round = state.last_round.copy()
        last_model_counts = state.last_model_counts.copy()
        for j, wc in enumerate(self.workload.cliques):
            i = index[wc]
            if mask[i]:
                last_round[j] = len(state.records)
                w_start = self.workload.offsets[j]
                last_model_counts[w_start : w_start + self.workload.cells[j]] = model_counts[rule.span(i)]

        schedule = rule.after_round(state.schedule, delta_t, scale, sigma_used)
        record = RoundRecord(
            selected=choice,
            sigma=sigma_used,
            epsilon=2.0 * delta_t / scale,
            score_sensitivity=delta_t,
            n_eligible=int(mask.sum()),
            selected_error=float(np.abs(before - noisy).sum()),
        )
        schedule = schedule._replace(sigma=sigma, epsilon=epsilon, done=last)
        if not last:
            schedule = rule.anneal_or_finish(
                schedule,
                changed=rule.learned(after, before, sigma),
                rho_budget=self.plan.rho_budget,
                rounds_done=t + 1,
                rounds=self.rounds,
            )
        new = state._replace(
            model=fitted,
            schedule=schedule,
            measurements=measurements,
            rounds_done=t + 1,
            records=(*state.records, record),
            last_round=last_round,
            last_model_counts=last_model_counts,
        )
        return new, AnnealedInfo(charges=(select_charge, measure_charge))

    def _eligible(self, model, budget_used: float) -> np.ndarray:
        mask = self.family.eligible(model, budget_used)
        return np.ones(len(self.candidates), bool) if mask is None else np.asarray(mask, bool)

    @functools.cached_property
    def _candidate_index(self) -> dict[tuple[int, ...], int]:
        return {c: i for i, c in enumerate(self.candidates.cliques)}

    def _workload_mask(self) -> np.ndarray:
        mask = np.zeros(len(self.candidates), bool)
        mask[[self._candidate_index[c] for c in self.workload.cliques]] = True
        return mask

    def _workload_spans(self, flat: np.ndarray) -> np.ndarray:
        """The workload's marginals, in its order, out of the candidates' flat answers."""
        spans = [flat[self.selection.span(self._candidate_index[c])] for c in self.workload.cliques]
        return np.concatenate(spans)

    def default_rows(self, state: AnnealedState) -> int:
        """n under replace-one (public); under add/remove the family's estimated total."""
        if self.relation is Neighboring.REPLACE_ONE:
            return self.n_records
        return self.family.default_rows(state.model)

    def relaxed_answers(self, state: AnnealedState) -> Array:
        """(workload.n_queries,) the fitted model's own answers (fractions), before sampling."""
        return jnp.asarray(self._workload_spans(np.asarray(self.family.output_answers(state.model))))

    answers = relaxed_answers

    def release(self, state: AnnealedState, key: Key, rows: int | None = None) -> Array:
        """Synthetic records, (rows, d) int32 codes, sampled from the final model."""
        require_key(key)
        if state.rounds_done == 0:
            raise ValueError("run the mechanism before releasing (the state holds no fitted model)")
        rows = self.default_rows(state) if rows is None else _checks.positive_int(rows, "rows")
        return self.family.release(state.model, key, rows)

    # -- uncertainty quantification ---------------------------------------------------------

    def error_bounds(
        self, state: AnnealedState, confidence: float = 0.95, synthetic: np.ndarray | None = None
    ) -> ErrorBounds:
        """Per-marginal upper confidence bounds on the L1 error of the synthetic data (Sec. 5).

        Args:
            state: the final state of a run.
            confidence: each marginal's bound holds with at least this probability.
            synthetic: (rows, d) released codes D_hat; default the final model itself (its
                marginals scaled to its total), which the corollaries also cover.

        Returns:
            ErrorBounds over the workload's marginals, in counts and normalised by the estimated
            total (n itself under replace-one).

        Privacy:
            Post-processing of released values only (noisy measurements, selection records).
        """
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        failure = 1.0 - confidence
        lam = math.sqrt(math.log(1.0 / failure))  # Theorem 3: 1 - exp(-lambda^2)
        lam1 = math.sqrt(2.0 * math.log(2.0 / failure))  # Theorem 4, failure split evenly
        lam2 = math.log(2.0 / failure)
        if synthetic is None:
            synth = self._workload_spans(self._answers(state.model, self._workload_mask()))
            total = float(synth[: self.workload.cells[0]].sum())
        else:
            synth = np.asarray(_workload_counts(jnp.asarray(synthetic, jnp.int32), self.workload), np.float64)
            total = float(len(synthetic))
        index = self._candidate_index
        bounds, supported = [], []
        for j, clique in enumerate(self.workload.cliques):
            span = slice(self.workload.offsets[j], self.workload.offsets[j] + self.workload.cells[j])
            n_r = self.workload.cells[j]
            estimate = _weighted_average(clique, state.measurements, self.workload.sizes)
            if estimate is not None:
                y_bar, sigma_bar = estimate
                bound = (
                    np.abs(synth[span] - y_bar).sum()
                    + math.sqrt(2.0 * math.log(2.0)) * sigma_bar * n_r
                    + lam * sigma_bar * math.sqrt(2.0 * n_r)
                )
                bounds.append(bound)
                supported.append(True)
                continue
            t = int(state.last_round[j])
            if t < 0:
                bounds.append(math.inf)
                supported.append(False)
                continue
            rec = state.records[t]
            w_r = self.selection.weights[index[clique]]
            w_sel = self.selection.weights[rec.selected]
            n_sel = self.candidates.cells[rec.selected]
            b_r = (
                w_sel * rec.selected_error
                + SQRT_2_OVER_PI * rec.sigma * (w_r * n_r - w_sel * n_sel)
                + 2.0 * rec.score_sensitivity / rec.epsilon * math.log(rec.n_eligible)
            )
            theorem4 = (
                b_r + lam1 * rec.sigma * math.sqrt(n_sel) + lam2 * 2.0 * rec.score_sensitivity / rec.epsilon
            ) / w_r
            model_before = state.last_model_counts[span].astype(np.float64)
            bounds.append(np.abs(synth[span] - model_before).sum() + theorem4)
            supported.append(False)
        bound = np.asarray(bounds, np.float64)
        return ErrorBounds(bound, np.asarray(supported), bound / max(total, 1.0), confidence)


def _one_hot(i: int, n: int) -> np.ndarray:
    mask = np.zeros(n, bool)
    mask[i] = True
    return mask


_workload_counts = jax.jit(marginal_counts, static_argnums=1)


def _weighted_average(clique, measurements, sizes) -> tuple[np.ndarray, float] | None:
    """Theorem 2: inverse-variance average of every measurement containing `clique`, projected
    onto it; None if no measurement contains it."""
    n_r = math.prod(sizes[a] for a in clique)
    total, precision = None, 0.0
    for m in measurements:
        if not set(clique) <= set(m.clique):
            continue
        shape = [sizes[a] for a in m.clique]
        drop = tuple(i for i, a in enumerate(m.clique) if a not in clique)
        projected = np.asarray(m.noisy, np.float64).reshape(shape).sum(axis=drop).reshape(-1)
        n_m = math.prod(shape)
        weight = n_r / (n_m * m.sigma**2)  # 1 / per-cell variance of the projection
        total = projected * weight if total is None else total + projected * weight
        precision += weight
    if total is None:
        return None
    return total / precision, math.sqrt(1.0 / precision)


def annealed(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    select: AIMSelection,
    family: Family,
    rounds: int | None,
    plan: Plan,
    relation: Neighboring,
    noise: str,
    public: Dataset | None,
    mesh: Mesh | None,
    name: str,
) -> Annealed:
    """`jaxdp.adaptive` for a filter rule (its arguments, the family's relation and the workload's
    domain checked there): the rule bound to the workload's downward closure W+ for at most
    `rounds` rounds, round 0 included (None: 16 d), the family bound to W+, the true counts of
    every candidate.

    With a `mesh` (one axis "records", `jaxdp.queries.records_mesh()`) the records are split over
    its devices and counted there, one psum adding the per-device counts: the only pass over the
    records. The exact counts then sit on this host's first device of the mesh, and everything
    after (selection, noise, fitting) is the single-device computation: the same release as on
    one device with the same key.

    Raises:
        ValueError: parts that do not fit together, bad settings; DataError: numeric columns or a
        workload over another domain.
    """
    if not isinstance(workload, MarginalWorkload):
        raise TypeError(f"{name} selects marginals of a MarginalWorkload, got {type(workload).__name__}")
    require_categorical(data, name)
    if MARGINALS not in family.candidates or not family.needs_measurements or family.releases != "records":
        raise ValueError(
            f"{type(family).__name__} does not fit AIMSelection: it measures whole marginals and "
            "releases records"
        )
    n = len(data)
    rule = select.bind(workload, relation=relation, n_records=n, rounds=rounds, noise=noise)
    capacity = len(rule.one_way()) + rule.max_rounds - 1  # round 0 measures every 1-way marginal
    shape = ClassShape(rule.candidates, rule.max_rounds, None, MARGINALS, capacity)
    family = family.bind(
        (shape,),
        domain=data.domain,
        public=public,
        n_records=n if relation is Neighboring.REPLACE_ONE else None,
    )
    counts = private_counts(data, rule.candidates, mesh)
    if mesh is not None:
        local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
        counts = counts.map(jax.device_put, local[0])
    return Annealed(counts, rule, family, workload, relation, n, plan, rule.max_rounds, noise, name)
