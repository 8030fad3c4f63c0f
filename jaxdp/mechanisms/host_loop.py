"""The driver of a rule that schedules its rounds from the host (a `jaxdp.selection.HostRule`):
what `jaxdp.adaptive` builds when the selection is AIM's (`jaxdp.selection.AIMSelection`), MST's
(`jaxdp.selection.MSTSelection`) or PrivBayes's (`jaxdp.selection.PrivBayesSelection`).

Round 0 measures the rule's opening marginals (`HostRule.opening`): every 1-way marginal of the
candidates for AIM (its Algorithm 3) and MST (its first step), one drawn at random for PrivBayes.
Each later round keeps the candidates C_t the family admits (`Family.eligible`: Private-PGM's model
size filter) and the rule allows (`HostRule.allowed`: MST's pairs that join two components of its
tree, PrivBayes's families of an unplaced child and a maximal parent set), selects one with the
exponential mechanism on the rule's score, measures it with Gaussian noise, and has the family
record it. AIM refits the family to every measurement so far after each round and anneals
(sigma, epsilon) by Algorithm 4, and a privacy filter ends its run: when the remaining budget
cannot pay two more rounds, the next round spends exactly what is left, and the run stops. MST
scores every round against round 0's model, PrivBayes against the data alone;
neither refits the model until its last round, both spend a budget fixed in advance, and both
stop after d rounds.

The run is data-adaptive (AIM: how many rounds, at what noise scales; all: which candidates are
left), so it cannot be one compiled scan: it runs as a Python loop of `step(state, key)`
(`jittable = False`) and its realised plan (one charge per primitive actually invoked, each
decided from public quantities before it was spent) is checked by `jaxdp.loop.run` against the
ledger and the budget. A family whose methods trace (PEP, MW, RAP, GEM) is called through compiled
programs that take it as an argument; a host family (Private-PGM's `GraphicalModel`, AIM-GEM's
`GeneratorModel`) directly.

Uncertainty quantification (AIM's Section 5): `error_bounds` gives, for every workload marginal,
an upper confidence bound on the L1 error of the synthetic data (`jaxdp.mechanisms.error_bounds`).
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
from jaxdp.domain import Dataset, Domain
from jaxdp.families import pgm, polish
from jaxdp.families.base import ClassShape, Family, Measured
from jaxdp.families.compression import CompressedDomain, Compression
from jaxdp.families.graphical import host_measurements
from jaxdp.keys import Stream, require_key, split_keys, stream_key
from jaxdp.measurement import measure_on_host
from jaxdp.mechanisms._candidates import candidate_index, gathered_cells, workload_mask, workload_spans
from jaxdp.mechanisms._common import private_counts, record_count, require_categorical
from jaxdp.mechanisms.error_bounds import ErrorBounds, bounds_of
from jaxdp.queries import MarginalWorkload
from jaxdp.selection.aim import WIDE, estimated_total
from jaxdp.selection.host_rule import HostRule
from jaxdp.selection.records import RoundRecord, Schedule
from jaxdp.types import MARGINALS, Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field

logger = logging.getLogger("jaxdp.mechanisms.aim")


class AnnealedState(NamedTuple):
    """model: the family's state; schedule: the annealing state (sigma, epsilon, rho spent, the
    charges invoked, done); measurements: the released noisy marginals (`pgm.Measurement`, in
    order); rounds_done; records: one RoundRecord per selection round; last_round:
    (len(workload),) the last selection round in which each workload marginal was a candidate
    (-1: never); last_model_counts: M_r(p_hat_{t-1}) of that round, over the run's domain;
    compressed: the domain compression decided after round 0 (None: the declared domain)."""

    model: Any
    schedule: Schedule
    measurements: tuple[pgm.Measurement, ...]
    rounds_done: int
    records: tuple[RoundRecord, ...]
    last_round: np.ndarray
    last_model_counts: np.ndarray
    compressed: CompressedDomain | None = None


class Parts(NamedTuple):
    """What a run works with over its domain (the declared one, or the compressed one after
    round 0): the bound rule (its candidates W+), the bound family, the candidates' true counts
    (private), and the workload W over that domain."""

    selection: HostRule
    family: Family
    counts: Sensitive
    workload: MarginalWorkload


class AnnealedInfo(NamedTuple):
    """charges: the round's (selection, measurement, second 1-way measurement) charges (count 0
    for a primitive that did not run: round 0 selects nothing, and measures the 1-way marginals
    a second time only where the rule tops them up, `HostRule.one_way_top_up`; later rounds
    measure once; rounds after the filter's last draw nothing)."""

    charges: tuple[Charge, Charge, Charge]


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
    """A mechanism driven by a host rule (module docstring), built by `jaxdp.adaptive`.

    Privacy:
        See the rule (`jaxdp.selection.AIMSelection`: rho-zCDP by the filter;
        `jaxdp.selection.MSTSelection`: by its fixed plan), for `relation`. Keys: INIT
        for the family's public randomness; MEASURE of round 0; SELECT and MEASURE of every
        later round; UPDATE for the family's update; RELEASE for sampling records. The
        family's fit, answers and samples are post-processing of released values.
    """

    counts: Sensitive  # true int32 counts of every candidate marginal, concatenated
    selection: HostRule
    family: Family
    workload: MarginalWorkload = static_field()
    relation: Neighboring = static_field()
    n_records: int = static_field()
    plan: Plan = static_field()
    rounds: int = static_field()
    noise: str = static_field()
    name: str = static_field(default="aim")
    domain: Domain | None = static_field(default=None)
    compression: Compression | None = static_field(default=None)

    jittable = False

    @property
    def candidates(self) -> MarginalWorkload:
        return self.selection.candidates

    # -- the run's domain ---------------------------------------------------------------------

    @functools.cached_property
    def _declared(self) -> Parts:
        return Parts(self.selection, self.family, self.counts, self.workload)

    @functools.cached_property
    def _compressed_parts(self) -> dict[bytes, Parts]:
        return {}

    def parts(self, state: AnnealedState) -> Parts:
        """The rule, family, true counts and workload over the run's domain in `state`."""
        compressed = state.compressed
        if compressed is None:
            return self._declared
        key = b"".join(np.packbits(k).tobytes() + b"|" for k in compressed.kept)
        if key not in self._compressed_parts:
            self._compressed_parts[key] = self._rebind(compressed)
        return self._compressed_parts[key]

    def _rebind(self, compressed: CompressedDomain) -> Parts:
        """Rule and family bound over the compressed domain, and the candidates' counts summed
        into its cells (the same records, a coarser histogram: post-processing of nothing)."""
        workload = compressed.workload(self.workload)
        selection = self.selection.bind(
            workload,
            relation=self.relation,
            n_records=self.n_records,
            rounds=self.selection.max_rounds,
            noise=self.noise,
            rho_budget=self.plan.rho_budget,
        )
        family = self.family.bind(
            (_class_shape(selection),),
            domain=Domain.from_sizes(dict(zip(self.domain.names, compressed.sizes, strict=True))),
            public=None,
            n_records=self.n_records if self.relation is Neighboring.REPLACE_ONE else None,
        )
        cells = compressed.cell_map(self.candidates)
        n_queries = selection.candidates.n_queries
        counts = self.counts.map(_cell_sums, cells, n_queries)
        return Parts(selection, family, counts, workload)

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
            select, measure = self.selection.idle()
            return state, AnnealedInfo(charges=(select, measure, measure))
        if state.rounds_done == 0:
            return self._initialise(state, key)
        return self._adaptive_round(state, key)

    def finished(self, state: AnnealedState) -> bool:
        """True once the filter has spent the budget (the loop stops calling `step`)."""
        return bool(state.schedule.done)

    def realised_plan(self, state: AnnealedState) -> Plan:
        """The plan the filter followed: one charge per primitive invoked, within the budget."""
        return self.selection.realised_plan(state.schedule, self.plan)

    def _measured(
        self, parts: Parts, chosen: list[int], index: np.ndarray, noisy: np.ndarray, sigma
    ) -> Measured:
        """The picks' measurements (`noisy` at the flat positions `index` of the candidates'
        answers) in the padded form every family reads: (k, width) noisy counts (float64, the
        host's) and their positions. `sigma`: one scale, or one per entry of `noisy`."""
        candidates = parts.selection.candidates
        gather = gathered_cells(candidates)[np.asarray(chosen, np.int32)]
        flat = np.zeros(candidates.n_queries + 1, np.float64)  # the last entry: the padding
        flat[index] = noisy
        if np.ndim(sigma):
            scales = np.ones(candidates.n_queries + 1, np.float64)
            scales[index] = sigma
            sigma = scales[gather]
        picks = np.asarray(chosen, np.int32)
        return Measured(picks, picks, np.full(len(chosen), -1, np.int32), gather, flat[gather], sigma)

    def _fit(self, parts: Parts, model, measured: Measured, current, t: int, key: Key, last: bool):
        """The family's record of one round and its update (compiled for a traced family); a
        rule that scores against round 0's model (`refits` False) has it updated only after
        round 0 and the last round."""
        update_key = stream_key(key, Stream.UPDATE)
        family = parts.family
        refit = parts.selection.refits or last or t == 0
        if not family.jittable:
            model = family.record(model, measured, current, t)
            return family.update(model, t, update_key, last)[0] if refit else model
        current = np.zeros(parts.selection.candidates.n_queries) if current is None else current
        t = jnp.asarray(t, jnp.int32)
        model = _record(family, model, measured, jnp.asarray(current, jnp.float32), t)
        return _update(family, model, t, update_key, last)[0] if refit else model

    def _answers(self, parts: Parts, model, eligible: np.ndarray) -> np.ndarray:
        """(candidates.n_queries,) float64 the family's answers of the eligible candidates in
        counts (fractions times the public n under replace-one), 0 elsewhere."""
        if parts.family.jittable:
            answers = np.asarray(_answers(parts.family, model), np.float64)
        else:
            answers = np.asarray(parts.family.candidate_answers(model, eligible), np.float64)
        if self.relation is Neighboring.REPLACE_ONE:
            answers = answers * self.n_records
        cells = parts.selection.candidates.cells
        return np.where(np.repeat(np.asarray(eligible, bool), cells), answers, 0.0)

    def _initialise(self, state: AnnealedState, key: Key) -> tuple[AnnealedState, AnnealedInfo]:
        """Round 0: every 1-way candidate measured in one draw (and a second where the rule tops
        it up from the first's released counts, `HostRule.one_way_top_up`: the two averaged by
        their inverse variances); then, with `compression`, the domain compressed by their noisy
        counts (post-processing) and the run's parts rebound."""
        rule = self.selection
        rule.prefetch()  # compiled while round 0 measures and fits
        ones = rule.opening(stream_key(key, Stream.SELECT))
        sensitivity, sigma = rule.one_way_measurement(state.schedule.sigma, len(ones))
        index = np.concatenate([np.arange(rule.span(i).start, rule.span(i).stop) for i in ones])
        noisy, charge = self._measure(self._declared, key, index, sigma=sigma, sensitivity=sensitivity)
        schedule = rule.after_one_way(state.schedule, sensitivity, sigma)
        bounds = np.cumsum([0] + [rule.candidates.cells[i] for i in ones])
        if self.relation is Neighboring.REPLACE_ONE:
            total = float(self.n_records)  # public
        else:
            total = estimated_total([noisy[bounds[j] : bounds[j + 1]] for j in range(len(ones))])
        # the smallest noisy count of a wide attribute (where a value can be merged or lost)
        wide = [
            noisy[bounds[j] : bounds[j + 1]] for j in range(len(ones)) if bounds[j + 1] - bounds[j] >= WIDE
        ]
        smallest = min((float(np.min(counts)) for counts in wide), default=math.inf)
        top_up = rule.one_way_top_up(schedule, total, smallest, sigma, len(ones), self.plan.rho_budget)
        top_up_charge = rule.idle()[1]
        if top_up is not None:
            second, schedule = top_up
            again, top_up_charge = self._measure(
                self._declared, key, index, sigma=second, sensitivity=sensitivity, again=True
            )
            precision = sigma**-2 + second**-2
            noisy = (noisy * sigma**-2 + again * second**-2) / precision
            sigma = precision**-0.5
        compressed, model, scales = None, state.model, sigma
        if self.compression is not None:
            attributes = [rule.candidates.cliques[i][0] for i in ones]
            per_attribute: list = list(self.workload.sizes)  # unmeasured attributes: kept whole
            for j, a in enumerate(attributes):
                per_attribute[a] = noisy[bounds[j] : bounds[j + 1]]
            compressed = self.compression.of(per_attribute, sigma)
            if compressed.changed:
                parts = self.parts(state._replace(compressed=compressed))
                merged = [compressed.one_way(a, per_attribute[a], sigma) for a in attributes]
                noisy = np.concatenate([counts for counts, _ in merged])
                scales = np.concatenate([cell_scales for _, cell_scales in merged])
                spans = [parts.selection.span(i) for i in ones]
                index = np.concatenate([np.arange(span.start, span.stop) for span in spans])
                model = parts.family.init(stream_key(key, Stream.INIT))  # over the compressed domain
            else:
                compressed = None
        parts = self.parts(state._replace(compressed=compressed))
        measured = self._measured(parts, ones, index, noisy, scales)
        new = state._replace(
            model=self._fit(parts, model, measured, None, 0, key, False),
            schedule=rule.anneal_or_finish(
                schedule, changed=True, rho_budget=self.plan.rho_budget, rounds_done=1, rounds=self.rounds
            ),
            measurements=host_measurements(measured, parts.selection.candidates),
            rounds_done=1,
            last_model_counts=np.zeros(parts.workload.n_queries, np.float32),
            compressed=compressed,
        )
        return new, AnnealedInfo(charges=(rule.idle()[0], charge, top_up_charge))

    def _measure(
        self,
        parts: Parts,
        key: Key,
        index: np.ndarray,
        *,
        sigma: float,
        sensitivity: float,
        again: bool = False,
    ):
        """Gaussian counts of the candidates' cells at `index` from the round key's MEASURE stream
        (`again`: a second measurement in the round, from its own MEASURE_AGAIN stream: no word
        of it is derived from the first's key, whatever the PRNG's partitioning)."""
        return measure_on_host(
            stream_key(key, Stream.MEASURE_AGAIN if again else Stream.MEASURE),
            parts.counts,
            index,
            sigma=sigma,
            sensitivity=sensitivity,
            noise=self.noise,
            largest=self.selection.largest_measurement,
        )

    def _adaptive_round(self, state: AnnealedState, key: Key) -> tuple[AnnealedState, AnnealedInfo]:
        parts = self.parts(state)
        rule, workload, t = parts.selection, parts.workload, state.rounds_done
        sigma, epsilon, rho_select, rho_measure, final = rule.round_parameters(
            state.schedule, self.plan.rho_budget
        )
        rho_used = state.schedule.rho_spent + rho_select + rho_measure

        started = time.perf_counter()
        if rule.reads_scores(state.schedule):
            mask = self._eligible(parts, state, rho_used / self.plan.rho_budget)
            filter_s = time.perf_counter() - started
            started = time.perf_counter()
            answered = self._answers(parts, state.model, mask)
        else:  # a pick fixed by earlier releases: no filter, no answers
            mask = np.ones(len(rule.candidates), bool)
            answered = np.zeros(rule.candidates.n_queries, np.float64)
            filter_s = 0.0
        model_counts = answered.astype(np.float32)
        selected = rule(
            stream_key(key, Stream.SELECT),
            parts.counts,
            model_counts,
            mask,
            sigma,
            rho_select,
            measured=[m.clique for m in state.measurements],
            schedule=state.schedule,
        )
        choice = selected.choice
        score_s = time.perf_counter() - started

        sigma_used = rule.measure_sigma(rho_measure if selected.measure_rho is None else selected.measure_rho)
        span = rule.span(choice)
        index = np.arange(span.start, span.stop)
        noisy, measure_charge = self._measure(
            parts, key, index, sigma=sigma_used, sensitivity=rule.l2_sensitivity
        )
        before = model_counts[span].astype(np.float64)
        measured = self._measured(parts, [choice], index, noisy, sigma_used)
        measurements = (*state.measurements, *host_measurements(measured, rule.candidates))
        started = time.perf_counter()
        last = final or selected.last or t + 1 >= self.rounds
        current = answered / self.n_records if self.relation is Neighboring.REPLACE_ONE else answered
        fitted = self._fit(parts, state.model, measured, current, t, key, last)
        fit_s = time.perf_counter() - started
        after = self._answers(parts, fitted, _one_hot(choice, len(rule.candidates)))[span]
        # Timings go to the log (bench/bench_aim.py reads them), never into State or Info,
        # which must be identical across runs with the same key.
        timing = {
            "mechanism": self.name,
            "round": t,
            "eligible": int(mask.sum()),
            "filter_s": filter_s,
            "score_s": score_s,
            "fit_s": fit_s,
        }
        logger.debug(
            "%(mechanism)s round %(round)d: |C_t|=%(eligible)d filter %(filter_s).3fs score %(score_s).3fs "
            "fit %(fit_s).3fs",
            timing,
            extra={"aim_timing": timing},
        )

        # remember, for each workload marginal that was a candidate, this round's model answers
        index = candidate_index(rule.candidates)
        last_round = state.last_round.copy()
        last_model_counts = state.last_model_counts.copy()
        for j, wc in enumerate(workload.cliques):
            i = index[wc]
            if mask[i]:
                last_round[j] = len(state.records)
                w_start = workload.offsets[j]
                last_model_counts[w_start : w_start + workload.cells[j]] = model_counts[rule.span(i)]

        schedule = rule.after_round(state.schedule, selected, sigma_used)
        record = RoundRecord(
            selected=choice,
            sigma=sigma_used,
            epsilon=selected.epsilon,
            score_sensitivity=0.0 if selected.entry is None else selected.entry[1],
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
        return new, AnnealedInfo(charges=(selected.charge, measure_charge, rule.idle()[1]))

    def _eligible(self, parts: Parts, state: AnnealedState, budget_used: float) -> np.ndarray:
        """C_t: the candidates the family admits (its size filter) that the rule allows."""
        rule = parts.selection
        mask = np.ones(len(rule.candidates), bool)
        for allowed in (
            parts.family.eligible(state.model, budget_used),
            rule.allowed([m.clique for m in state.measurements]),
        ):
            if allowed is not None:
                mask &= np.asarray(allowed, bool)
        if not mask.any():
            raise ValueError(
                f"{self.name}: no candidate is left that both {type(rule).__name__} allows and "
                f"{type(parts.family).__name__}'s model size admits (raise max_model_size)"
            )
        return mask

    def default_rows(self, state: AnnealedState) -> int:
        """n under replace-one (public); under add/remove the family's estimated total."""
        if self.relation is Neighboring.REPLACE_ONE:
            return self.n_records
        return self.parts(state).family.default_rows(state.model)

    def relaxed_answers(self, state: AnnealedState) -> Array:
        """(workload.n_queries,) the fitted model's own answers (fractions) over the declared
        domain, before sampling (a compressed domain's merged cells spread as the release
        spreads them)."""
        parts = self.parts(state)
        flat = np.asarray(parts.family.output_answers(state.model), np.float64)
        answers = workload_spans(flat, parts.selection.candidates, parts.workload)
        if state.compressed is not None:
            answers = state.compressed.answers(answers, self.workload)
        return jax.device_put(answers)

    answers = relaxed_answers

    def release(self, state: AnnealedState, key: Key, rows: int | None = None) -> Array:
        """Synthetic records, (rows, d) int32 codes over the declared domain, sampled from the
        final model (a merged code spread over its values, `CompressedDomain.records`), then
        each value revisited toward the model's workload marginals (`families.polish`)."""
        require_key(key)
        if state.rounds_done == 0:
            raise ValueError("run the mechanism before releasing (the state holds no fitted model)")
        rows = self.default_rows(state) if rows is None else _checks.positive_int(rows, "rows")
        family = self.parts(state).family
        model_key, spread_key, polish_key = split_keys(key, 3)
        polish.start_compiling(polish_key, self.workload, rows)
        codes = family.release(state.model, model_key, rows)
        if state.compressed is not None:
            codes = state.compressed.records(spread_key, codes)
        return polish.polish(polish_key, codes, np.asarray(self.relaxed_answers(state)), self.workload)

    def conditioned(
        self, state: AnnealedState, weights: dict[int, np.ndarray]
    ) -> tuple[AnnealedState, float] | None:
        """(the state whose release is this one's conditional given evidence over the declared
        domain, the evidence's probability), or None where the family has no exact conditional.

        Over a compressed domain a kept value keeps its weight; the merged code weighs the share
        of its spread the evidence keeps (sum of spread(v) w(v)), and its spread becomes that
        share, renormalised: P(v) = P(merged) spread(v), so the conditional is exact.

        Privacy:
            Post-processing of the released state only.
        """
        compressed, family_weights = state.compressed, dict(weights)
        if compressed is not None:
            spread = list(compressed.spread)
            for a, weight in weights.items():
                weight = np.asarray(weight, np.float64)
                keep = compressed.kept[a]
                coarse = np.zeros(compressed.sizes[a])
                coarse[: keep.sum()] = weight[keep]
                if not keep.all():
                    share = compressed.spread[a] * np.where(keep, 0.0, weight)
                    coarse[-1] = share.sum()
                    if share.sum() > 0:
                        spread[a] = share / share.sum()
                family_weights[a] = coarse
            compressed = CompressedDomain(compressed.kept, tuple(spread))
        out = self.parts(state).family.conditioned(state.model, family_weights)
        if out is None:
            return None
        model, probability = out
        return state._replace(model=model, compressed=compressed), probability

    def compression_report(self, state: AnnealedState) -> dict[str, Any] | None:
        """The report's `compression` (None without it): the threshold (in sigmas), the spread,
        and `merged`, {attribute: the declared codes that share its merged code} for every
        attribute the run compressed. Publishable: a function of noisy counts."""
        if self.compression is None:
            return None
        merged = {}
        if state.compressed is not None:
            for a, name in enumerate(self.domain.names):
                if state.compressed.merged(a):
                    merged[name] = state.compressed.merged(a)
        return {
            "threshold_sigmas": self.compression.threshold,
            "spread": self.compression.spread,
            "merged": merged,
        }

    # -- uncertainty quantification ---------------------------------------------------------

    def error_bounds(
        self, state: AnnealedState, confidence: float = 0.95, synthetic: np.ndarray | None = None
    ) -> ErrorBounds:
        """Per-marginal upper confidence bounds on the L1 error of the synthetic data (Sec. 5).

        With a compressed domain the bounds are those of the workload's marginals over it (an
        attribute's merged values counted as one cell): how a merged count spreads over its
        values is not measured, so nothing bounds it.

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
        if not self.selection.has_error_bounds:
            raise ValueError(
                f"{self.name}: error bounds are AIM's (its Section 5 bounds what its own selection "
                f"score left unmeasured); {type(self.selection).__name__} has none"
            )
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        parts = self.parts(state)
        rule, workload = parts.selection, parts.workload
        answered = None
        if synthetic is None:
            answered = self._answers(parts, state.model, workload_mask(rule.candidates, workload))
        return bounds_of(rule, workload, state, confidence, answered=answered, synthetic=synthetic)


def _cell_sums(counts: Array, cells: np.ndarray, n_cells: int) -> np.ndarray:
    """(n_cells,) the sums of `counts` by cell, on the host, where the rounds read them (the
    selection's scores and the measurements: `types.array_module`)."""
    sums = np.zeros(n_cells, np.int64)
    np.add.at(sums, cells, np.asarray(counts))
    return sums.astype(counts.dtype)


def _class_shape(rule: HostRule) -> ClassShape:
    """What a family bound under a filter rule is told: its candidates W+, at most `max_rounds`
    rounds of one pick after round 0's 1-way marginals."""
    capacity = len(rule.one_way()) + rule.max_rounds - 1  # round 0 measures every 1-way marginal
    return ClassShape(rule.candidates, rule.max_rounds, None, MARGINALS, capacity)


def _one_hot(i: int, n: int) -> np.ndarray:
    mask = np.zeros(n, bool)
    mask[i] = True
    return mask


def annealed(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    select: HostRule,
    family: Family,
    rounds: int | None,
    plan: Plan,
    relation: Neighboring,
    noise: str,
    public: Dataset | None,
    mesh: Mesh | None,
    name: str,
    compress: Compression | None = None,
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
            f"{type(family).__name__} does not fit {type(select).__name__}: it measures whole marginals and "
            "releases records"
        )
    if compress is not None:
        compress = compress.checked()
        if public is not None:
            raise ValueError("compress: a compressed domain cannot use public data over the declared one")
    n = record_count(data, mesh)
    rule = select.bind(
        workload, relation=relation, n_records=n, rounds=rounds, noise=noise, rho_budget=plan.rho_budget
    )
    plan = rule.planned(plan)
    family = family.bind(
        (_class_shape(rule),),
        domain=data.domain,
        public=public,
        n_records=n if relation is Neighboring.REPLACE_ONE else None,
    )
    counts = private_counts(data, rule.candidates, mesh)
    if mesh is not None:
        local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
        counts = counts.map(jax.device_put, local[0])
    return Annealed(
        counts, rule, family, workload, relation, n, plan, rule.max_rounds, noise, name, data.domain, compress
    )
