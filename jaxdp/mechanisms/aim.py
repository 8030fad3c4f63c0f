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

import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxdp import _checks
from jaxdp.accounting import Plan
from jaxdp.domain import Dataset
from jaxdp.families import pgm
from jaxdp.keys import require_key
from jaxdp.mechanisms._aim_selection import SQRT_2_OVER_PI as _SQRT_2_OVER_PI
from jaxdp.mechanisms._aim_selection import AnnealedSelection, RoundRecord, selection_settings
from jaxdp.mechanisms._aim_selection import counts as _counts
from jaxdp.mechanisms._common import RoundInfo, as_relation, make_plan
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array, Key, Neighboring, Sensitive, pytree_dataclass, static_field

logger = logging.getLogger(__name__)


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


@pytree_dataclass
class AIM(AnnealedSelection):
    """AIM with Private-PGM (see the module docstring).

    Privacy:
        Relation: add/remove (n private; counts: a marginal's L2 and L1 sensitivity are 1) as in
        the paper, or replace-one (n public; counts move by L2 sqrt(2), L1 2). Measurements add
        noise to the int32 counts. Round 0: one Gaussian measurement of the d1 one-way marginals
        together (L2 sensitivity sqrt(d1) times a marginal's, scale sigma_0: the paper's d1
        separate measurements, same noise and cost). Round t >= 1: exponential mechanism (exact;
        Gumbel-max under noise="float") on q_r with sensitivity
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
    noise: str = static_field()

    jittable = False

    # -- init / step / release ----------------------------------------------------------------

    def init(self, key: Key) -> AIMState:
        require_key(key)
        sigma0, epsilon0 = self._initial_parameters()
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
            return state, RoundInfo(charges=self._idle_round())
        if state.rounds_done == 0:
            return self._initialise(state, key)
        return self._adaptive_round(state, key)

    def _initialise(self, state: AIMState, key: Key) -> tuple[AIMState, RoundInfo]:
        ones = self._one_way()
        noisy, charge, charged, spent = self._measure_one_way(key, state.sigma)
        sigma = charged[2]
        bounds = np.cumsum([0] + [self.candidates.cells[i] for i in ones])
        measurements = tuple(
            pgm.Measurement(self.candidates.cliques[i], noisy[bounds[j] : bounds[j + 1]], sigma)
            for j, i in enumerate(ones)
        )
        model = self._fit(measurements, None, self.iters)
        new = state._replace(
            measurements=measurements,
            model=model,
            rho_spent=spent,
            rounds_done=1,
            charges=(charged,),
        )
        return self._anneal_or_finish(new, changed=True), RoundInfo(charges=(self._idle_round()[0], charge))

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
        sigma, epsilon, rho_select, rho_measure, final = self._round_parameters(state)
        rho_used = state.rho_spent + rho_select + rho_measure

        started = time.perf_counter()
        mask = self.eligible(state, rho_used)
        if not mask.any():  # nothing fits the model yet: the 1-way marginals always do
            mask[self._one_way()] = True
        filter_s = time.perf_counter() - started
        started = time.perf_counter()
        model_counts = self.model_counts(state.model, mask)
        choice, select_charge, delta_t, scale = self._select(key, model_counts, mask, sigma, rho_select)
        score_s = time.perf_counter() - started

        clique = self.candidates.cliques[choice]
        sigma_used = self._measure_sigma(rho_measure)
        noisy, measure_charge = self._measure_marginal(key, choice, sigma_used)
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

        spent, charges = self._round_accounts(state, delta_t, scale, sigma_used)
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
            charges=charges,
            records=(*state.records, record),
            last_round=last_round,
            last_model_counts=last_model_counts,
        )
        if not last:
            new = self._anneal_or_finish(new, changed=self._learned(after_counts, before, sigma))
        return new, RoundInfo(charges=(select_charge, measure_charge))

    @property
    def _candidate_index(self) -> dict[tuple[int, ...], int]:
        return {c: i for i, c in enumerate(self.candidates.cliques)}

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
    noise: str = "discrete",
    mesh: Mesh | None = None,
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
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).
        mesh: split the records over this mesh's devices to count them (one axis "records",
            `jaxdp.queries.records_mesh()`; one psum); the rest of the run and the release are
            those of one device with the same key.

    Raises:
        ValueError: bad arguments; DataError: numeric columns, empty data, or a workload over
        another domain. ImportError: `mbi` is not installed (pip install "jaxdp[pgm]").
    """
    pgm.require_mbi()
    plan = make_plan(epsilon, delta, rho, conversion)
    relation = as_relation(relation)
    settings = selection_settings(
        data,
        workload,
        name="aim",
        relation=relation,
        max_rounds=max_rounds,
        alpha=alpha,
        noise=noise,
        mesh=mesh,
    )
    _checks.positive_finite(max_model_size, "max_model_size")
    iters = _checks.positive_int(iters, "iters")
    final_iters = _checks.positive_int(final_iters, "final_iters")
    if tol is not None:
        tol = _checks.positive_finite(tol, "tol")
    return AIM(
        answers=settings.answers,
        workload=workload,
        candidates=settings.candidates,
        weights=settings.weights,
        relation=relation,
        n_records=len(data),
        plan=plan,
        rounds=settings.rounds,
        alpha=settings.alpha,
        max_model_size=float(max_model_size),
        iters=iters,
        final_iters=final_iters,
        tol=tol,
        l1_sensitivity=settings.l1_sensitivity,
        l2_sensitivity=settings.l2_sensitivity,
        noise=noise,
    )
