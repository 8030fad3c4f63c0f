"""AIM: workload-adaptive selection with a fitted model (McKenna et al., VLDB 2022).

Round 0 measures every 1-way marginal of the downward closure W+ (Algorithm 3). Each later round
(Algorithm 2) keeps the candidates C_t of W+ the model allows, selects one with the exponential
mechanism on q_r = w_r (||M_r(D) - M_r(p_hat)||_1 - sqrt(2/pi) sigma_t n_r), measures it with
Gaussian noise, refits the model to every measurement so far, and anneals (sigma, epsilon) by
Algorithm 4. A privacy filter ends the run: when the remaining budget cannot pay two more rounds,
the next round spends exactly what is left, and the run stops.

One driver (`AIM`), a pluggable model (`AimModel`): `jaxdp.aim` fits Private-PGM's graphical
model (`GraphicalModel`: mirror descent over a junction tree, warm-started; C_t = the candidates
whose junction tree stays under `max_model_size * rho_used / rho` megabytes), `jaxdp.aim_gem`
GEM's generator (`aim_gem.GeneratorModel`; C_t = W+). Selection, measurement, annealing and the
filter are the model-independent parts (`_aim_selection`).

AIM is data-adaptive in how many rounds it runs and at what noise scales, so it cannot be one
compiled scan: it runs as a Python loop of `step(state, key)` (`jittable = False`) and its
realised plan (one charge per primitive actually invoked, each decided from public quantities
before it was spent) is checked by `jaxdp.loop.run` against the ledger and the budget. It
compiles a few programs per run, none per round: the graphical model's fit is one program whatever
the measured cliques (`families._junction`), measurements share one padded length, and scoring
meets the model's marginals (host NumPy: `families.pgm.ModelMarginals`) with the true counts of
every candidate (computed once) in one jitted segment-sum whose shapes never change.

Uncertainty quantification (Section 5): `error_bounds` gives, for every workload marginal, an
upper confidence bound on the L1 error of the synthetic data: Theorem 2/3 + Corollary 1 when the
marginal is supported by a measurement, else Theorem 4 + Corollary 2 from the last round in which
it was a candidate. The bounds use only released quantities: they cost no privacy.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

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


class AimModel(Protocol):
    """The model side of AIM: what it fits to the released measurements, and how it answers.

    Everything here is post-processing of released values: a model never sees the private
    counts. `GraphicalModel` (Private-PGM, `jaxdp.aim`) and `jaxdp.mechanisms.aim_gem.
    GeneratorModel` (GEM's generator, `jaxdp.aim_gem`) plug into the one `AIM` driver.
    """

    def init(self, key: Key) -> Any:
        """The model before round 0 (`key`: public randomness, e.g. initial parameters)."""

    def fit(self, fitted: Any, measurements: tuple[pgm.Measurement, ...], *, final: bool) -> Any:
        """The model refitted to every measurement so far, warm-started from `fitted`."""

    def marginals(self, fitted: Any, cliques: Sequence[tuple[int, ...]]) -> np.ndarray:
        """Concatenated probabilities of `cliques` (ascending attributes, row-major)."""

    def total(self, fitted: Any) -> float:
        """The record count the model's counts are scaled to."""

    def eligible(self, measurements: tuple[pgm.Measurement, ...], budget_used: float) -> np.ndarray:
        """(n_candidates,) bool: the candidates C_t this round may select, after a fraction
        `budget_used` of rho is spent (rho_used / rho of Algorithm 2)."""

    def sample(self, fitted: Any, key: Key, rows: int) -> Array:
        """(rows, d) int32 synthetic records."""


class AIMState(NamedTuple):
    """measurements: the released noisy marginals (`pgm.Measurement`, in order); model: the
    fitted model (its `AimModel`'s own state); sigma, epsilon: the next round's parameters;
    rho_spent; rounds_done; done: the filter has spent the budget; charges: (primitive code,
    sensitivity, scale) of every primitive invoked, in order (the realised plan); records: one
    RoundRecord per selection round; last_round: (len(workload),) the last selection round in
    which each workload marginal was a candidate (-1: never); last_model_counts:
    (workload.n_queries,) M_r(p_hat_{t-1}) of that round.
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
class GraphicalModel:
    """Private-PGM's model for AIM: a graphical model fitted by mirror descent (warm-started,
    `iters` iterations a round and `final_iters` in the last, early stop `tol`), C_t = the
    candidates whose junction tree stays under `max_model_size * rho_used / rho` megabytes.

    Args:
        candidates: AIM's candidates W+; known_total: n when it is public (replace-one), else
            None (estimated from the measurements).
    """

    candidates: MarginalWorkload = static_field()
    known_total: float | None = static_field()
    max_model_size: float = static_field()
    iters: int = static_field()
    final_iters: int = static_field()
    tol: float | None = static_field()

    def init(self, key: Key) -> None:
        return None

    def fit(self, fitted: pgm.Model | None, measurements, *, final: bool) -> pgm.Model:
        return pgm.estimate(
            self.candidates.sizes,
            measurements,
            total=self.known_total,
            iters=self.final_iters if final else self.iters,
            warm_start=fitted,
            tol=self.tol,
        )

    def marginals(self, fitted: pgm.Model, cliques) -> np.ndarray:
        if not cliques:
            return np.zeros(0)
        marginals = _marginals_of(fitted)
        return np.concatenate([marginals.marginal(c) for c in cliques])

    def total(self, fitted: pgm.Model) -> float:
        return float(fitted.total)

    def eligible(self, measurements, budget_used: float) -> np.ndarray:
        limit = self.max_model_size * budget_used
        measured = list({m.clique for m in measurements})
        mask = np.array(
            [
                pgm.model_size_mb(self.candidates.sizes, [*measured, c]) <= limit
                for c in self.candidates.cliques
            ]
        )
        if not mask.any():  # nothing fits the model yet: the 1-way marginals always do
            mask[[i for i, c in enumerate(self.candidates.cliques) if len(c) == 1]] = True
        return mask

    def sample(self, fitted: pgm.Model, key: Key, rows: int) -> Array:
        return pgm.sample(key, _marginals_of(fitted).sampling_plan(), self.candidates.sizes, rows)


@pytree_dataclass
class AIM(AnnealedSelection):
    """AIM: the selection and filter of McKenna et al. with a pluggable model (see the module
    docstring): `jaxdp.aim` fits a Private-PGM graphical model (`GraphicalModel`),
    `jaxdp.aim_gem` a GEM generator (`aim_gem.GeneratorModel`).

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
        C_t depends on released values only. Keys: INIT for the model's public randomness (the
        generator's initial parameters and latent batch; unused by the graphical model); MEASURE
        of round 0; SELECT and MEASURE of every later round; UPDATE unused (fitting is
        deterministic); RELEASE for sampling records. The model's fit, answers and samples are
        post-processing of released values.
    """

    answers: Sensitive  # true counts of every candidate marginal, concatenated
    model: Any  # an AimModel
    workload: MarginalWorkload = static_field()
    candidates: MarginalWorkload = static_field()
    weights: tuple[float, ...] = static_field()
    relation: Neighboring = static_field()
    n_records: int = static_field()
    plan: Plan = static_field()
    rounds: int = static_field()
    alpha: float = static_field()
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
            model=self.model.init(key),
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
        new = state._replace(
            measurements=measurements,
            model=self.model.fit(state.model, measurements, final=False),
            rho_spent=spent,
            rounds_done=1,
            charges=(charged,),
        )
        return self._anneal_or_finish(new, changed=True), RoundInfo(charges=(self._idle_round()[0], charge))

    def counts(self, state: AIMState, cliques) -> np.ndarray:
        """Concatenated counts of `cliques` under the state's model (its marginals times its
        total)."""
        return self.model.total(state.model) * self.model.marginals(state.model, cliques)

    def model_counts(self, state: AIMState, mask: np.ndarray) -> np.ndarray:
        """(candidates.n_queries,) counts of every masked candidate under the state's model (0
        elsewhere)."""
        mask = np.asarray(mask, bool)
        out = np.zeros(self.candidates.n_queries, np.float32)
        # the candidates' spans are contiguous and in candidate order, as `counts` concatenates
        flat = self.counts(state, [self.candidates.cliques[i] for i in np.flatnonzero(mask)])
        out[np.repeat(mask, self.candidates.cells)] = flat
        return out

    def _adaptive_round(self, state: AIMState, key: Key) -> tuple[AIMState, RoundInfo]:
        t = state.rounds_done
        sigma, epsilon, rho_select, rho_measure, final = self._round_parameters(state)
        rho_used = state.rho_spent + rho_select + rho_measure

        started = time.perf_counter()
        mask = self.model.eligible(state.measurements, rho_used / self.plan.rho_budget)
        filter_s = time.perf_counter() - started
        started = time.perf_counter()
        model_counts = self.model_counts(state, mask)
        choice, select_charge, delta_t, scale = self._select(key, model_counts, mask, sigma, rho_select)
        score_s = time.perf_counter() - started

        clique = self.candidates.cliques[choice]
        sigma_used = self._measure_sigma(rho_measure)
        noisy, measure_charge = self._measure_marginal(key, choice, sigma_used)
        before = model_counts[self._span(choice)].astype(np.float64)
        measurements = (*state.measurements, pgm.Measurement(clique, noisy, sigma_used))
        started = time.perf_counter()
        last = final or t + 1 >= self.rounds
        fitted = self.model.fit(state.model, measurements, final=last)
        fit_s = time.perf_counter() - started
        after = self.model.total(fitted) * self.model.marginals(fitted, [clique])
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
            model=fitted,
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
            new = self._anneal_or_finish(new, changed=self._learned(after, before, sigma))
        return new, RoundInfo(charges=(select_charge, measure_charge))

    @property
    def _candidate_index(self) -> dict[tuple[int, ...], int]:
        return {c: i for i, c in enumerate(self.candidates.cliques)}

    def default_rows(self, state: AIMState) -> int:
        """n under replace-one (public); under add/remove the model's estimated total."""
        if self.relation is Neighboring.REPLACE_ONE:
            return self.n_records
        return max(1, round(self.model.total(state.model)))

    def relaxed_answers(self, state: AIMState) -> Array:
        """(workload.n_queries,) the fitted model's own answers (fractions), before sampling."""
        return jnp.asarray(self.model.marginals(state.model, self.workload.cliques))

    def release(self, state: AIMState, key: Key, rows: int | None = None) -> Array:
        """Synthetic records, (rows, d) int32 codes, sampled from the final model."""
        require_key(key)
        if state.rounds_done == 0:
            raise ValueError("run the mechanism before releasing (the state holds no fitted model)")
        rows = self.default_rows(state) if rows is None else _checks.positive_int(rows, "rows")
        return self.model.sample(state.model, key, rows)

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
        if synthetic is None:
            synth = self.counts(state, self.workload.cliques)
            total = self.model.total(state.model)
        else:
            synth = np.asarray(_counts(jnp.asarray(synthetic, jnp.int32), self.workload), np.float64)
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
            w_r = self.weights[index[clique]]
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
    pgm.prefetch()  # the first fit compiles while the records are counted
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
    if tol is not None:
        tol = _checks.positive_finite(tol, "tol")
    model = GraphicalModel(
        candidates=settings.candidates,
        known_total=float(len(data)) if relation is Neighboring.REPLACE_ONE else None,
        max_model_size=float(max_model_size),
        iters=_checks.positive_int(iters, "iters"),
        final_iters=_checks.positive_int(final_iters, "final_iters"),
        tol=tol,
    )
    return with_model(
        settings, model, workload=workload, relation=relation, n_records=len(data), plan=plan, noise=noise
    )


def with_model(
    settings, model: AimModel, *, workload, relation: Neighboring, n_records: int, plan: Plan, noise: str
) -> AIM:
    """The AIM driver with `model`, from a factory's validated `selection_settings`."""
    return AIM(
        answers=settings.answers,
        model=model,
        workload=workload,
        candidates=settings.candidates,
        weights=settings.weights,
        relation=relation,
        n_records=n_records,
        plan=plan,
        rounds=settings.rounds,
        alpha=settings.alpha,
        l1_sensitivity=settings.l1_sensitivity,
        l2_sensitivity=settings.l2_sensitivity,
        noise=noise,
    )
