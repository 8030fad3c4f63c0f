"""AIM: workload-adaptive selection with Private-PGM estimation (McKenna et al., VLDB 2022).

Round 0 measures every 1-way marginal of the downward closure W+ (Algorithm 3). Each later round
(Algorithm 2) keeps the candidates of W+ whose junction tree stays under
`max_model_size * rho_used / rho` megabytes, selects one with the exponential mechanism on
q_r = w_r (||M_r(D) - M_r(p_hat)||_1 - sqrt(2/pi) sigma_t n_r), measures it with Gaussian noise,
refits the graphical model (mirror descent, warm-started), and anneals (sigma, epsilon) by
Algorithm 4. A privacy filter ends the run: when the remaining budget cannot pay two more rounds,
the next round spends exactly what is left, and the run stops.

AIM is data-adaptive in how many rounds it runs and at what noise scales, so it cannot be one
compiled scan: it runs as a Python loop of `step(state, key)` (`jittable = False`) and its
realised plan (one charge per primitive actually invoked, each decided from public quantities
before it was spent) is checked by `jaxdp.loop.run` against the ledger and the budget.

Candidate scoring is fast because the model side is exact and compiles nothing per candidate:
marginals of the fitted model come from its junction-tree beliefs (`families.pgm.ModelMarginals`,
host NumPy), and the private side (the true counts of every candidate, computed once) meets them
in one jitted segment-sum whose shapes never change between rounds.

Uncertainty quantification (Section 5): `error_bounds` gives, for every workload marginal, an
upper confidence bound on the L1 error of the synthetic data: Theorem 2/3 + Corollary 1 when the
marginal is supported by a measurement, else Theorem 4 + Corollary 2 from the last round in which
it was a candidate. The bounds use only released quantities: they cost no privacy.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, noise
from jaxdp.accounting import Plan, PlannedCharge, charge_rho, float32_ceil, gaussian_sigma, gumbel_scale
from jaxdp.domain import DataError, Dataset
from jaxdp.families import pgm
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import (
    RoundInfo,
    as_relation,
    make_plan,
    private_codes,
    require_categorical,
)
from jaxdp.queries import (
    MarginalWorkload,
    aim_weights,
    downward_closure,
    marginal_counts,
    marginal_sensitivity,
)
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field

logger = logging.getLogger(__name__)

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GAUSSIAN = noise.PRIMITIVES.index("gaussian")
_EXPONENTIAL = noise.PRIMITIVES.index("exponential")


class RoundRecord(NamedTuple):
    """What round t of AIM released about its selection (all public).

    selected: candidate index r_t; sigma, epsilon: the round's noise scale and selection epsilon;
    score_sensitivity: Delta_t = max_{r in C_t} w_r (times the relation's L1 sensitivity);
    n_eligible: |C_t|; selected_error: ||M_{r_t}(p_hat_{t-1}) - y_t||_1 (counts).
    """

    selected: int
    sigma: float
    epsilon: float
    score_sensitivity: float
    n_eligible: int
    selected_error: float


class AIMState(NamedTuple):
    """measurements: the released noisy marginals; model: the fitted graphical model (None before
    round 0); sigma, epsilon: the next round's parameters; rho_spent; rounds_done; done: the
    filter has spent the budget; charges: (primitive code, sensitivity, scale) of every
    primitive invoked, in order (the realised plan); records: one RoundRecord per selection round;
    last_round: (len(workload),) the last selection round in which each workload marginal was a
    candidate (-1: never); last_model_counts: (workload.n_queries,) M_r(p_hat_{t-1}) of that round.
    """

    measurements: tuple
    model: Any
    sigma: float
    epsilon: float
    rho_spent: float
    rounds_done: int
    done: bool
    charges: tuple
    records: tuple
    last_round: np.ndarray
    last_model_counts: np.ndarray


class ErrorBounds(NamedTuple):
    """Per workload marginal: `bound` on ||M_r(D) - M_r(D_hat)||_1 in counts, holding with
    probability >= `confidence` for each marginal; `supported`: True where Theorem 2/3 +
    Corollary 1 applied (else Theorem 4 + Corollary 2); `normalised`: bound / estimated total."""

    bound: np.ndarray
    supported: np.ndarray
    normalised: np.ndarray
    confidence: float


_counts = jax.jit(marginal_counts, static_argnums=1)


@jax.jit
def _padded_gather(answers: Array, index: Array, count: Array) -> Array:
    """answers[index], with every position >= count set to 0 (a public constant)."""
    return jnp.where(jnp.arange(index.shape[0]) < count, answers[index], 0.0)


@jax.jit
def _candidate_l1(true_counts: Array, model_counts: Array, segments: Array, template: Array) -> Array:
    """(n_candidates,) ||M_r(D) - M_r(p_hat)||_1; `template` only carries the output length."""
    return jax.ops.segment_sum(
        jnp.abs(true_counts - model_counts), segments, num_segments=template.shape[0], indices_are_sorted=True
    )


@pytree_dataclass
class AIM:
    """AIM with Private-PGM (see the module docstring).

    Privacy:
        Relation: add/remove (n private; counts: a marginal's L2 and L1 sensitivity are 1) as in
        the paper, or replace-one (n public; counts move by L2 sqrt(2), L1 2). Round 0: one
        Gaussian measurement of the d1 one-way marginals together (L2 sensitivity sqrt(d1) times
        a marginal's, scale sigma_0: the paper's d1 separate measurements, same noise and cost).
        Round t >= 1: exponential mechanism (Gumbel-max) on q_r with sensitivity
        Delta_t = L1 * max_{r in C_t} w_r at epsilon_t, epsilon_t^2 / 8 zCDP (Cesar & Rogers
        2021), then a Gaussian measurement at sigma_t, L2^2 / (2 sigma_t^2) zCDP. The filter
        (Theorem 1; Feldman & Zrnic 2021, Rogers et al. 2016) keeps the realised sum <= rho.
        Keys: MEASURE of round 0; SELECT and MEASURE of every later round; UPDATE unused (the
        estimation is deterministic); RELEASE for sampling records.
    """

    answers: Sensitive  # true counts of every candidate marginal, concatenated
    workload: MarginalWorkload = static_field()
    candidates: MarginalWorkload = static_field()
    weights: tuple[float, ...] = static_field()
    relation: Neighboring = static_field()
    n_records: int = static_field()
    plan: Plan = static_field()
    rounds: int = static_field()
    alpha: float = static_field()
    max_model_size: float = static_field()
    iters: int = static_field()
    final_iters: int = static_field()
    tol: float | None = static_field()
    l1_sensitivity: float = static_field()
    l2_sensitivity: float = static_field()

    jittable = False

    # -- plan helpers (host maths on public quantities) ----------------------------------------

    @property
    def max_rounds(self) -> int:
        """T: the paper's 16 d, the count the initial sigma and epsilon are calibrated for."""
        return self.rounds - 1

    def _one_way(self) -> list[int]:
        return [i for i, c in enumerate(self.candidates.cliques) if len(c) == 1]

    def _round_cost(self, sigma: float, epsilon: float) -> float:
        return self.l2_sensitivity**2 / (2.0 * sigma**2) + epsilon**2 / 8.0

    def _final_parameters(self, remaining: float) -> tuple[float, float]:
        """(sigma, epsilon) that spend `remaining` (split alpha to measure, 1 - alpha to select)."""
        sigma = self.l2_sensitivity / math.sqrt(2.0 * self.alpha * remaining)
        epsilon = math.sqrt(8.0 * (1.0 - self.alpha) * remaining)
        return sigma, epsilon

    def finished(self, state: AIMState) -> bool:
        """True once the filter has spent the budget (the loop stops calling `step`)."""
        return bool(state.done)

    def realised_plan(self, state: AIMState) -> Plan:
        """The plan the filter followed: one charge per primitive invoked, within the budget."""
        plan = Plan(self.plan.rho_budget, self.plan.epsilon, self.plan.delta, self.plan.conversion)
        for i, (code, sensitivity, scale) in enumerate(state.charges):
            primitive = noise.PRIMITIVES[code]
            label = "measure 1-way marginals" if i == 0 else f"{primitive} (round {(i + 1) // 2})"
            plan = plan.with_charge(PlannedCharge(label, primitive, sensitivity, scale))
        return plan.check()

    # -- init / step / release ----------------------------------------------------------------

    def init(self, key: Key) -> AIMState:
        require_key(key)
        sigma0 = self.l2_sensitivity * math.sqrt(self.max_rounds / (2.0 * self.alpha * self.plan.rho_budget))
        epsilon0 = math.sqrt(8.0 * (1.0 - self.alpha) * self.plan.rho_budget / self.max_rounds)
        return AIMState(
            measurements=(),
            model=None,
            sigma=sigma0,
            epsilon=epsilon0,
            rho_spent=0.0,
            rounds_done=0,
            done=False,
            charges=(),
            records=(),
            last_round=np.full(len(self.workload), -1, np.int32),
            last_model_counts=np.zeros(self.workload.n_queries, np.float32),
        )

    def _measure(
        self, key: Key, index: np.ndarray, *, sigma: float, sensitivity: float
    ) -> tuple[np.ndarray, Charge]:
        """Gaussian measurement of the true counts at `index` (host, float64), with its Charge.

        The answers are gathered into a vector padded with zeros to a power-of-two length, noise
        is added to all of it and the padding dropped: one compiled program per length bucket,
        not per marginal shape. This is sound because the padding is a public constant (zeros
        whatever the data), so the padded vector has the same L2 sensitivity as the answers and
        each kept coordinate still receives its own iid N(0, sigma^2); the dropped coordinates
        are discarded unseen (and would be safe to release anyway). The Charge is unchanged.
        """
        length = pgm.padded_length(len(index))
        padded_index = np.zeros(length, np.int32)
        padded_index[: len(index)] = index
        answers = self.answers.map(_padded_gather, jnp.asarray(padded_index), jnp.int32(len(index)))
        noisy, charge = noise.gaussian(
            stream_key(key, Stream.MEASURE), answers, sigma=sigma, sensitivity=sensitivity
        )
        return np.asarray(noisy, np.float64)[: len(index)], charge

    def _known_total(self) -> float | None:
        return float(self.n_records) if self.relation is Neighboring.REPLACE_ONE else None

    def _fit(self, measurements, warm_start, iters):
        return pgm.estimate(
            self.candidates.sizes,
            measurements,
            total=self._known_total(),
            iters=iters,
            warm_start=warm_start,
            tol=self.tol,
        )

    def step(self, state: AIMState, key: Key) -> tuple[AIMState, RoundInfo]:
        require_key(key)
        if state.done:
            return state, RoundInfo(charges=(_idle("exponential"), _idle("gaussian")))
        if state.rounds_done == 0:
            return self._initialise(state, key)
        return self._adaptive_round(state, key)

    def _initialise(self, state: AIMState, key: Key) -> tuple[AIMState, RoundInfo]:
        ones = self._one_way()
        sensitivity = math.sqrt(len(ones)) * self.l2_sensitivity
        sigma = float32_ceil(state.sigma)
        index = np.concatenate([np.arange(self._span(i).start, self._span(i).stop) for i in ones])
        noisy, charge = self._measure(key, index, sigma=sigma, sensitivity=sensitivity)
        bounds = np.cumsum([0] + [self.candidates.cells[i] for i in ones])
        measurements = tuple(
            pgm.Measurement(self.candidates.cliques[i], noisy[bounds[j] : bounds[j + 1]], sigma)
            for j, i in enumerate(ones)
        )
        model = self._fit(measurements, None, self.iters)
        spent = charge_rho("gaussian", sensitivity, sigma)
        new = state._replace(
            measurements=measurements,
            model=model,
            rho_spent=spent,
            rounds_done=1,
            charges=((_GAUSSIAN, sensitivity, sigma),),
        )
        return self._anneal_or_finish(new, changed=True), RoundInfo(charges=(_idle("exponential"), charge))

    def _span(self, i: int) -> slice:
        start = self.candidates.offsets[i]
        return slice(start, start + self.candidates.cells[i])

    def eligible(self, state: AIMState, rho_used: float) -> np.ndarray:
        """(n_candidates,) bool: candidates whose model stays under the size the budget allows."""
        limit = self.max_model_size * rho_used / self.plan.rho_budget
        measured = list({m.clique for m in state.measurements})
        return np.array(
            [
                pgm.model_size_mb(self.candidates.sizes, [*measured, c]) <= limit
                for c in self.candidates.cliques
            ]
        )

    def model_counts(self, model: Any, mask: np.ndarray) -> np.ndarray:
        """(candidates.n_queries,) counts of every masked candidate under `model` (0 elsewhere)."""
        marginals = _marginals_of(model)
        out = np.zeros(self.candidates.n_queries, np.float32)
        for i in np.flatnonzero(mask):
            out[self._span(i)] = marginals.total * marginals.marginal(self.candidates.cliques[i])
        return out

    def _adaptive_round(self, state: AIMState, key: Key) -> tuple[AIMState, RoundInfo]:
        t = state.rounds_done
        final = state.epsilon is None
        sigma, epsilon = state.sigma, state.epsilon
        if final:  # the filter's last round: spend exactly what is left
            sigma, epsilon = self._final_parameters(self.plan.rho_budget - state.rho_spent)
        rho_select = epsilon**2 / 8.0
        rho_measure = self.l2_sensitivity**2 / (2.0 * sigma**2)
        rho_used = state.rho_spent + rho_select + rho_measure

        started = time.perf_counter()
        mask = self.eligible(state, rho_used)
        if not mask.any():  # nothing fits the model yet: the 1-way marginals always do
            mask[self._one_way()] = True
        filter_s = time.perf_counter() - started
        started = time.perf_counter()
        model_counts = self.model_counts(state.model, mask)
        weights = np.asarray(self.weights)
        cells = np.asarray(self.candidates.cells, np.float64)
        delta_t = self.l1_sensitivity * float(weights[mask].max())
        penalty = _SQRT_2_OVER_PI * sigma * cells
        segments = jnp.asarray(self.candidates.marginal_of_query())
        template = jnp.zeros(len(self.candidates), jnp.float32)
        scores = self.answers.map(
            lambda a: (
                jnp.asarray(weights, jnp.float32)
                * (
                    _candidate_l1(a, jnp.asarray(model_counts), segments, template)
                    - jnp.asarray(penalty, jnp.float32)
                )
            )
        )
        scale = gumbel_scale(delta_t, rho_select)
        choice, select_charge = noise.exponential(
            stream_key(key, Stream.SELECT), scores, scale=scale, sensitivity=delta_t, mask=jnp.asarray(mask)
        )
        choice = int(choice)
        score_s = time.perf_counter() - started

        clique = self.candidates.cliques[choice]
        sigma_used = gaussian_sigma(self.l2_sensitivity, rho_measure)
        span = self._span(choice)
        noisy, measure_charge = self._measure(
            key, np.arange(span.start, span.stop), sigma=sigma_used, sensitivity=self.l2_sensitivity
        )
        before = model_counts[self._span(choice)].astype(np.float64)
        measurements = (*state.measurements, pgm.Measurement(clique, noisy, sigma_used))
        started = time.perf_counter()
        last = final or t + 1 >= self.rounds
        model = self._fit(measurements, state.model, self.final_iters if last else self.iters)
        fit_s = time.perf_counter() - started
        after = _marginals_of(model)
        after_counts = after.total * after.marginal(clique)
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
                last_model_counts[w_start : w_start + self.workload.cells[j]] = model_counts[self._span(i)]

        spent = (
            state.rho_spent
            + charge_rho("exponential", delta_t, scale)
            + charge_rho("gaussian", self.l2_sensitivity, sigma_used)
        )
        record = RoundRecord(
            selected=choice,
            sigma=sigma_used,
            epsilon=2.0 * delta_t / scale,
            score_sensitivity=delta_t,
            n_eligible=int(mask.sum()),
            selected_error=float(np.abs(before - noisy).sum()),
        )
        new = state._replace(
            measurements=measurements,
            model=model,
            sigma=sigma,
            epsilon=epsilon,
            rho_spent=spent,
            rounds_done=t + 1,
            done=last,
            charges=(
                *state.charges,
                (_EXPONENTIAL, delta_t, scale),
                (_GAUSSIAN, self.l2_sensitivity, sigma_used),
            ),
            records=(*state.records, record),
            last_round=last_round,
            last_model_counts=last_model_counts,
        )
        if not last:
            changed = float(np.abs(after_counts - before).sum()) > _SQRT_2_OVER_PI * sigma * len(noisy)
            new = self._anneal_or_finish(new, changed=changed)
        return new, RoundInfo(charges=(select_charge, measure_charge))

    @property
    def _candidate_index(self) -> dict[tuple[int, ...], int]:
        return {c: i for i, c in enumerate(self.candidates.cliques)}

    def _anneal_or_finish(self, state: AIMState, *, changed: bool) -> AIMState:
        """Algorithm 4: halve sigma and double epsilon when the last measurement taught the model
        little; switch to the final round when the rest cannot pay for two more rounds (or the
        next round is the last the loop allows). epsilon=None marks the final round."""
        sigma, epsilon = state.sigma, state.epsilon
        if not changed:
            sigma, epsilon = sigma / 2.0, epsilon * 2.0
        remaining = self.plan.rho_budget - state.rho_spent
        if remaining <= 2.0 * self._round_cost(sigma, epsilon) or state.rounds_done + 1 >= self.rounds:
            return state._replace(sigma=sigma, epsilon=None)
        return state._replace(sigma=sigma, epsilon=epsilon)

    def default_rows(self, state: AIMState) -> int:
        """n under replace-one (public); under add/remove the model's estimated total."""
        if self.relation is Neighboring.REPLACE_ONE:
            return self.n_records
        return max(1, round(float(state.model.total)))

    def release(self, state: AIMState, key: Key, rows: int | None = None) -> Array:
        """Synthetic records, (rows, d) int32 codes, sampled from the final model."""
        require_key(key)
        if state.model is None:
            raise ValueError("run the mechanism before releasing (the state holds no model)")
        rows = self.default_rows(state) if rows is None else _checks.positive_int(rows, "rows")
        plan = _marginals_of(state.model).sampling_plan()
        return pgm.sample(key, plan, self.candidates.sizes, rows)

    # -- uncertainty quantification ---------------------------------------------------------

    def error_bounds(
        self, state: AIMState, confidence: float = 0.95, synthetic: np.ndarray | None = None
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
        final = _marginals_of(state.model)
        if synthetic is None:
            synth = final.counts(self.workload.cliques)
            total = final.total
        else:
            synth = np.asarray(_counts(jnp.asarray(synthetic, jnp.int32), self.workload), np.float64)
            total = float(len(synthetic))
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
            w_r = self.weights[self._candidate_index[clique]]
            w_sel = self.weights[rec.selected]
            n_sel = self.candidates.cells[rec.selected]
            b_r = (
                w_sel * rec.selected_error
                + _SQRT_2_OVER_PI * rec.sigma * (w_r * n_r - w_sel * n_sel)
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


_last_marginals: list = [None, None]


def _marginals_of(model: Any) -> pgm.ModelMarginals:
    """The model's exact marginals, reused while the same model object is asked again (each
    fitted model is scored in the next round after the annealing check of this one)."""
    if _last_marginals[0] is not model:
        _last_marginals[:] = [model, pgm.ModelMarginals(model)]
    return _last_marginals[1]


def _idle(primitive: str) -> Charge:
    """A charge with count 0: the primitive did not run (the ledger skips it)."""
    return Charge(
        primitive=jnp.asarray(noise.PRIMITIVES.index(primitive), jnp.int32),
        sensitivity=jnp.asarray(1.0, jnp.float32),
        scale=jnp.asarray(1.0, jnp.float32),
        count=jnp.asarray(0, jnp.int32),
    )


def aim(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    relation: Neighboring | str = Neighboring.ADD_REMOVE,
    conversion: str = "exact",
    max_model_size: float = 80.0,
    max_rounds: int | None = None,
    alpha: float = 0.9,
    iters: int = 1000,
    final_iters: int = 3000,
    tol: float | None = 1e-2,
) -> AIM:
    """Build AIM for a weighted marginal workload on a categorical dataset.

    Args:
        data: the private records.
        workload: the marginals (and weights c_s) the synthetic data should preserve.
        epsilon, delta: the (epsilon, delta)-DP budget, converted to rho by `conversion`.
        rho: alternatively, a zCDP budget.
        relation: "add-remove" (default, as in the paper: n private, counts) or "replace-one".
        conversion: "exact" or "simple" (see `jaxdp.accounting`).
        max_model_size: junction-tree size cap in megabytes (the paper's MAX-SIZE, 80 MB).
        max_rounds: T, the rounds the initial sigma and epsilon are calibrated for (default
            16 d, at least the workload's attributes); also the most adaptive rounds the filter
            will run.
        alpha: share of each round's budget spent on measurement (the rest on selection).
        iters: mirror-descent iterations per round (warm-started); final_iters for the last.
            Both are caps: see `tol`.
        tol: each fit stops early once two consecutive blocks of 50 iterations each lower the
            loss by at most this fraction of it; None runs every iteration. The default 1e-2
            cut ~40% of the iterations on 6-attribute ADULT at unchanged workload error
            (bench/bench_aim.py). Post-processing only: it changes no privacy cost.

    Raises:
        ValueError: bad arguments; DataError: numeric columns, empty data, or a workload over
        another domain. ImportError: `mbi` is not installed (pip install "jaxdp[pgm]").
    """
    pgm.require_mbi()
    plan = make_plan(epsilon, delta, rho, conversion)
    relation = as_relation(relation)
    require_categorical(data, "aim")
    if workload.sizes != data.domain.sizes:
        raise DataError("workload was built for a different domain than the data's")
    d = len(data.domain.sizes)
    max_rounds = 16 * d if max_rounds is None else _checks.positive_int(max_rounds, "max_rounds")
    alpha = _checks.fraction(alpha, "alpha")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    _checks.positive_finite(max_model_size, "max_model_size")
    iters = _checks.positive_int(iters, "iters")
    final_iters = _checks.positive_int(final_iters, "final_iters")
    if tol is not None:
        tol = _checks.positive_finite(tol, "tol")
    candidates = downward_closure(workload)
    one_way = sum(len(c) == 1 for c in candidates.cliques)
    if max_rounds < one_way:
        # Theorem 1 needs T >= d: the initial 1-way measurements cost alpha rho d1 / T <= rho.
        raise ValueError(
            f"max_rounds must be >= {one_way} (the attributes in the workload), got {max_rounds}"
        )
    weights = tuple(float(w) for w in aim_weights(workload, candidates))
    n = len(data)
    # Work in counts under both relations (n is public under replace-one, so counts and fractions
    # carry the same information): the sensitivities are n times the fraction ones.
    l1, l2 = marginal_sensitivity(relation, n)
    scale = 1.0 if relation is Neighboring.ADD_REMOVE else float(n)
    answers = private_codes(data).map(_counts, candidates)
    return AIM(
        answers=answers,
        workload=workload,
        candidates=candidates,
        weights=weights,
        relation=relation,
        n_records=n,
        plan=plan,
        rounds=max_rounds + 1,
        alpha=alpha,
        max_model_size=float(max_model_size),
        iters=iters,
        final_iters=final_iters,
        tol=tol,
        l1_sensitivity=l1 * scale,
        l2_sensitivity=l2 * scale,
    )
