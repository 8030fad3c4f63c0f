"""AIM's selection rule and privacy filter (McKenna et al., VLDB 2022, Algorithms 2-4): the
model-independent half of the `AIM` driver, whatever model it fits (a Private-PGM graphical model
for `jaxdp.aim`, a GEM generator for `jaxdp.aim_gem`).

What is shared, and the same in both:
- candidates: the downward closure W+ of the workload, weights w_r = sum_s c_s |r ∩ s|;
- round 0 (Algorithm 3): one Gaussian measurement of every 1-way candidate marginal;
- integer counts measured with exact discrete Gaussian noise and selection by the exact
  exponential mechanism (`noise="discrete"`, the default), or float32 noise and Gumbel-max
  (`noise="float"`, see `jaxdp.noise`);
- round t: quality score q_r = w_r (||M_r(D) - M_r(model)||_1 - sqrt(2/pi) sigma_t n_r) with
  sensitivity Delta_t = L1 * max_{r in C_t} w_r, exponential mechanism at epsilon_t;
- budget annealing (Algorithm 4): sigma halves and epsilon doubles when the last measurement moved
  the model's answer on the selected marginal by at most its expected noise sqrt(2/pi) sigma n_r;
- the privacy filter (Theorem 1): when what is left cannot pay two more rounds, the next round
  spends exactly the rest and is the last.

The host class `AnnealedSelection` holds these as methods; the `AIM` driver mixes it in, and its
pluggable model (`aim.AimModel`) supplies the model side (how it fits the measurements, its
answers on every candidate, C_t's mask).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxdp import _checks, noise, samplers
from jaxdp.accounting import (
    MEASURE_PRIMITIVE,
    SELECT_PRIMITIVE,
    Plan,
    PlannedCharge,
    charge_rho,
    float32_ceil,
    gumbel_scale,
)
from jaxdp.domain import DataError, Dataset
from jaxdp.families.pgm import padded_length
from jaxdp.keys import Stream, stream_key
from jaxdp.mechanisms._common import count_sigma, private_counts, require_categorical
from jaxdp.noise import NOISES
from jaxdp.queries import (
    MarginalWorkload,
    aim_weights,
    downward_closure,
    marginal_counts,
    marginal_sensitivity,
)
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

counts = jax.jit(marginal_counts, static_argnums=1)


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


class SelectionSettings(NamedTuple):
    """What an AIM-style factory fixes before anything runs (all public)."""

    answers: Sensitive  # true int32 counts of every candidate marginal, concatenated
    candidates: MarginalWorkload
    weights: tuple[float, ...]
    rounds: int  # T + 1: round 0 measures the 1-way marginals
    alpha: float
    l1_sensitivity: float
    l2_sensitivity: float


def selection_settings(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    name: str,
    relation: Neighboring,
    max_rounds: int | None,
    alpha: float,
    noise: str,
    mesh: Mesh | None = None,
) -> SelectionSettings:
    """Validate and fix the selection side of an AIM-style mechanism named `name`.

    Counts under both relations (n is public under replace-one, so counts and fractions carry the
    same information): the sensitivities are n times the fraction ones there.

    With a `mesh` (one axis "records", `jaxdp.queries.records_mesh()`) the records are split over
    its devices and counted there, one psum adding the per-device counts: the only pass over the
    records. The exact counts then sit on this host's first device of the mesh, and everything
    after (selection, noise, fitting) is the single-device computation: the same release as on
    one device with the same key.

    Raises:
        ValueError: alpha outside (0, 1), max_rounds below the workload's attribute count, or
        `noise` not one of `jaxdp.noise.NOISES`; DataError: numeric columns or a workload over
        another domain.
    """
    _checks.one_of(noise, NOISES, "noise")
    require_categorical(data, name)
    if workload.sizes != data.domain.sizes:
        raise DataError("workload was built for a different domain than the data's")
    d = len(data.domain.sizes)
    max_rounds = 16 * d if max_rounds is None else _checks.positive_int(max_rounds, "max_rounds")
    alpha = _checks.fraction(alpha, "alpha")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    candidates = downward_closure(workload)
    one_way = sum(len(c) == 1 for c in candidates.cliques)
    if max_rounds < one_way:
        # Theorem 1 needs T >= d: the initial 1-way measurements cost alpha rho d1 / T <= rho.
        raise ValueError(
            f"max_rounds must be >= {one_way} (the attributes in the workload), got {max_rounds}"
        )
    n = len(data)
    l1, l2 = marginal_sensitivity(relation, n)
    scale = 1.0 if relation is Neighboring.ADD_REMOVE else float(n)
    answers = private_counts(data, candidates, mesh)
    if mesh is not None:
        local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
        answers = answers.map(jax.device_put, local[0])
    return SelectionSettings(
        answers=answers,
        candidates=candidates,
        weights=tuple(float(w) for w in aim_weights(workload, candidates)),
        rounds=max_rounds + 1,
        alpha=alpha,
        l1_sensitivity=l1 * scale,
        l2_sensitivity=l2 * scale,
    )


# Measurements shorter than this share one padded length (the exact sampler's compile costs
# seconds; sampling 2^15 entries costs tens of milliseconds).
SHARED_MEASUREMENT_LENGTH = 2**15


def measurement_length(n: int, largest: int) -> int:
    """The public padded length of an n-entry measurement when the largest measurement a run can
    make (a candidate marginal, or round 0's 1-way marginals together) has `largest` entries: one
    length, the power of two holding it (at most `SHARED_MEASUREMENT_LENGTH`), serves every
    measurement that fits; longer ones take powers of four above it."""
    length = min(padded_length(largest), SHARED_MEASUREMENT_LENGTH)
    while length < n:
        length *= 4
    return length


@jax.jit
def _padded_gather(answers: Array, index: Array, count: Array) -> Array:
    """answers[index], with every position >= count set to 0 (a public constant, an integer
    like the counts)."""
    return jnp.where(jnp.arange(index.shape[0]) < count, answers[index], jnp.zeros((), answers.dtype))


@jax.jit
def _candidate_l1(true_counts: Array, model_counts: Array, segments: Array, template: Array) -> Array:
    """(n_candidates,) ||M_r(D) - M_r(p_hat)||_1; `template` only carries the output length."""
    return jax.ops.segment_sum(
        jnp.abs(true_counts - model_counts), segments, num_segments=template.shape[0], indices_are_sorted=True
    )


def quality_scores(
    true_counts: Array, model_counts: Array, candidates: MarginalWorkload, weights: Array, sigma: float
) -> Array:
    """(n_candidates,) AIM's q_r = w_r (||M_r(D) - M_r(model)||_1 - sqrt(2/pi) sigma n_r).

    Args:
        true_counts, model_counts: (candidates.n_queries,) counts of every candidate cell.
        weights: (n_candidates,) w_r; sigma: the round's measurement noise scale.
    """
    segments = jnp.asarray(candidates.marginal_of_query())
    template = jnp.zeros(len(candidates), jnp.float32)
    penalty = SQRT_2_OVER_PI * sigma * np.asarray(candidates.cells, np.float64)
    true_counts = jnp.asarray(true_counts, jnp.float32)  # exact: counts are below 2^24
    l1 = _candidate_l1(true_counts, jnp.asarray(model_counts, jnp.float32), segments, template)
    return jnp.asarray(weights, jnp.float32) * (l1 - jnp.asarray(penalty, jnp.float32))


# Exact quality scores (noise="discrete"), on the host in int64. The L1 error is counted in
# steps of 1 / COUNT_STEPS counts, the weights w_r / w_max in steps of 2^-WEIGHT_BITS; see
# `grid_quality_scores` for the bound.
COUNT_STEPS = 64
WEIGHT_BITS = 16
_MODEL_TOTAL_LIMIT = 2.0**32  # a marginal's public model counts are scaled to sum to at most this
_PENALTY_LIMIT = 2**40


def grid_quality_scores(
    true_counts: np.ndarray,
    model_counts: np.ndarray,
    candidates: MarginalWorkload,
    weights: np.ndarray,
    mask: np.ndarray,
    sigma: float,
    l1_sensitivity: float,
) -> np.ndarray:
    """(n_candidates,) int32 `grid_quality_steps` relative to the best eligible one: max(Q_r,
    best - 2^30) - best, in [-2^30, 0] (masked candidates get -2^30), what the sampler takes."""
    mask = np.asarray(mask, bool)
    quality = grid_quality_steps(true_counts, model_counts, candidates, weights, mask, sigma, l1_sensitivity)
    best = quality[mask].max()
    relative = np.maximum(quality, best - noise.GRID_LIMIT) - best
    return np.where(mask, relative, -noise.GRID_LIMIT).astype(np.int32)


def grid_quality_steps(
    true_counts: np.ndarray,
    model_counts: np.ndarray,
    candidates: MarginalWorkload,
    weights: np.ndarray,
    mask: np.ndarray,
    sigma: float,
    l1_sensitivity: float,
) -> np.ndarray:
    """(n_candidates,) int64 AIM quality scores Q_r in grid steps of Delta_t / GRID_STEPS,
    computed exactly from the true counts (0 for masked candidates).

    With K = COUNT_STEPS, L = l1_sensitivity (a marginal's L1 sensitivity in counts: 2 under
    replace-one, 1 under add-remove), W_r = floor(2^16 w_r / w_max) over the eligible candidates
    (w_max = max_{r in C_t} w_r, so Delta_t = L w_max) and D = 2^16 K L / GRID_STEPS:

        E_r = sum_cells |K c - M|,  M = round(K mu) (public model counts mu, clipped to >= 0 and
              scaled to sum to at most 2^32 per marginal),
        P_r = round(K sqrt(2/pi) sigma n_r)  (public),
        Q_r = floor(W_r (E_r - P_r) / D)  ~  q_r / (Delta_t / GRID_STEPS).

    A neighbouring dataset moves c by +-1 in at most two cells of a marginal (replace-one) or one
    (add-remove): E_r moves by at most K L, W_r (E_r - P_r) by at most 2^16 K L = GRID_STEPS D,
    and the floor of a quotient by D by at most GRID_STEPS (floor(x) - floor(y) < x - y + 1 with
    x - y <= GRID_STEPS). The best eligible Q moves by at most GRID_STEPS too, so max(Q_r,
    best - 2^30) does (a max of two such functions), and subtracting the best from every
    candidate leaves the exponential mechanism's law unchanged (`grid_quality_scores`). Every
    product stays below 2^58.

    Args:
        true_counts: (candidates.n_queries,) the true integer counts (private).
        model_counts: (candidates.n_queries,) the model's counts (public).
        weights: (n_candidates,) w_r; mask: (n_candidates,) bool C_t; sigma: the round's noise.
        l1_sensitivity: L, the declared L1 sensitivity of a marginal in counts (a multiple of
            2^-16; the bound above holds if the true one is at most L).
    """
    steps = noise.GRID_STEPS
    # D = 2^16 K L / GRID_STEPS must be a whole number: L a multiple of 2^-16 counts (in practice
    # 2 or 1; (2 / n) * n may miss 2 by an ulp, hence the rounding)
    scaled_ell = 2**WEIGHT_BITS * COUNT_STEPS * float(l1_sensitivity) / steps
    divisor = round(scaled_ell)
    if divisor < 1 or abs(divisor - scaled_ell) > 1e-9 * divisor:
        raise ValueError(
            "exact AIM scores need an L1 sensitivity that is a multiple of 2^-16 counts, "
            f"got {l1_sensitivity!r}"
        )
    segments = candidates.marginal_of_query()
    cells = np.asarray(candidates.cells, np.int64)
    mu = np.clip(np.asarray(model_counts, np.float64), 0.0, _MODEL_TOTAL_LIMIT)
    totals = np.bincount(segments, weights=mu, minlength=len(candidates))
    mu = mu * np.minimum(1.0, _MODEL_TOTAL_LIMIT / np.maximum(totals, 1.0))[segments]
    model = np.rint(COUNT_STEPS * mu).astype(np.int64)
    errors = np.abs(COUNT_STEPS * np.asarray(true_counts, np.int64) - model)
    l1 = np.add.reduceat(errors, np.asarray(candidates.offsets, np.int64))  # <= K (n + 2^32 + cells) < 2^40
    penalty = np.rint(np.minimum(COUNT_STEPS * SQRT_2_OVER_PI * float(sigma) * cells, _PENALTY_LIMIT))
    mask = np.asarray(mask, bool)
    weights = np.asarray(weights, np.float64)
    w_max = float(weights[mask].max())
    scaled = np.where(mask, np.floor(weights * 2.0**WEIGHT_BITS / w_max), 0.0).astype(np.int64)
    return (scaled * (l1 - penalty.astype(np.int64))) // divisor  # floor division, |.| < 2^57


class AnnealedSelection:
    """AIM's selection, annealing and filter as host methods (see the module docstring).

    The mechanism that mixes this in has the fields of `SelectionSettings` plus `plan` and
    `noise` (its primitives: "discrete" or "float"), and a state with sigma, epsilon (None: the
    filter's final round comes next), rho_spent, rounds_done, done and charges ((primitive
    code, sensitivity, scale) of every primitive invoked, in order: the realised plan).
    """

    @property
    def max_rounds(self) -> int:
        """T: the paper's 16 d, the count the initial sigma and epsilon are calibrated for."""
        return self.rounds - 1

    def _one_way(self) -> list[int]:
        return [i for i, c in enumerate(self.candidates.cliques) if len(c) == 1]

    def _span(self, i: int) -> slice:
        start = self.candidates.offsets[i]
        return slice(start, start + self.candidates.cells[i])

    @property
    def _measure_primitive(self) -> str:
        return MEASURE_PRIMITIVE[self.noise]

    @property
    def _select_primitive(self) -> str:
        return SELECT_PRIMITIVE[self.noise]

    def _measure(
        self, key: Key, index: np.ndarray, *, sigma: float, sensitivity: float
    ) -> tuple[np.ndarray, Charge]:
        """Gaussian measurement of the true counts at `index` (host, float64), with its Charge.

        The int32 counts are gathered into a vector padded with integer zeros to a public length
        (`measurement_length`), noise is added to all of it and the padding dropped: the exact
        sampler compiles once per length, and most runs use one length. This is sound because
        the padding is a public constant (zeros whatever the data), so the padded vector has the
        same L2 sensitivity as the answers and each kept coordinate still receives its own iid
        noise of scale sigma; the dropped coordinates are discarded unseen (and would be safe to
        release anyway). The Charge is unchanged.

        Privacy:
            Reads the true counts; one Gaussian measurement (`noise.measure_counts`).
        """
        largest = max(max(self.candidates.cells), sum(self.candidates.cells[i] for i in self._one_way()))
        padded_index = np.zeros(measurement_length(len(index), largest), np.int32)
        padded_index[: len(index)] = index
        answers = self.answers.map(_padded_gather, jnp.asarray(padded_index), jnp.int32(len(index)))
        noisy, charge = noise.measure_counts(
            stream_key(key, Stream.MEASURE), answers, sigma=sigma, sensitivity=sensitivity, noise=self.noise
        )
        return np.asarray(noisy, np.float64)[: len(index)], charge

    def _measure_sigma(self, rho: float) -> float:
        """sigma (counts) of a marginal's measurement costing at most `rho`."""
        return count_sigma(self.l2_sensitivity, rho, self.noise)

    def _measure_marginal(self, key: Key, i: int, sigma: float) -> tuple[np.ndarray, Charge]:
        """Gaussian measurement of candidate marginal `i` (counts, float64), with its Charge."""
        span = self._span(i)
        return self._measure(
            key, np.arange(span.start, span.stop), sigma=sigma, sensitivity=self.l2_sensitivity
        )

    def _initial_parameters(self) -> tuple[float, float]:
        """(sigma_0, epsilon_0) calibrated as if the run lasted T rounds (Algorithm 2, line 3)."""
        sigma0 = self.l2_sensitivity * math.sqrt(self.max_rounds / (2.0 * self.alpha * self.plan.rho_budget))
        epsilon0 = math.sqrt(8.0 * (1.0 - self.alpha) * self.plan.rho_budget / self.max_rounds)
        return sigma0, epsilon0

    def _round_cost(self, sigma: float, epsilon: float) -> float:
        return self.l2_sensitivity**2 / (2.0 * sigma**2) + epsilon**2 / 8.0

    def _final_parameters(self, remaining: float) -> tuple[float, float]:
        """(sigma, epsilon) that spend `remaining` (split alpha to measure, 1 - alpha to select)."""
        sigma = self.l2_sensitivity / math.sqrt(2.0 * self.alpha * remaining)
        epsilon = math.sqrt(8.0 * (1.0 - self.alpha) * remaining)
        return sigma, epsilon

    def _round_parameters(self, state) -> tuple[float, float, float, float, bool]:
        """(sigma, epsilon, rho_select, rho_measure, final) of the next adaptive round."""
        final = state.epsilon is None
        sigma, epsilon = state.sigma, state.epsilon
        if final:  # the filter's last round: spend exactly what is left
            sigma, epsilon = self._final_parameters(self.plan.rho_budget - state.rho_spent)
        return sigma, epsilon, epsilon**2 / 8.0, self.l2_sensitivity**2 / (2.0 * sigma**2), final

    def finished(self, state) -> bool:
        """True once the filter has spent the budget (the loop stops calling `step`)."""
        return bool(state.done)

    def realised_plan(self, state) -> Plan:
        """The plan the filter followed: one charge per primitive invoked, within the budget."""
        plan = Plan(self.plan.rho_budget, self.plan.epsilon, self.plan.delta, self.plan.conversion)
        for i, (code, sensitivity, scale) in enumerate(state.charges):
            primitive = noise.PRIMITIVES[code]
            label = "measure 1-way marginals" if i == 0 else f"{primitive} (round {(i + 1) // 2})"
            plan = plan.with_charge(PlannedCharge(label, primitive, sensitivity, scale))
        return plan.check()

    def _measure_one_way(self, key: Key, sigma: float) -> tuple[np.ndarray, Charge, tuple, float]:
        """Round 0: the 1-way candidates measured together (L2 sensitivity sqrt(d1) times a
        marginal's; the paper's d1 separate measurements, same noise and cost).

        Returns:
            (noisy counts of the 1-way candidates concatenated, float64; the Charge; the charge
            triple for `state.charges`; rho spent).
        """
        ones = self._one_way()
        sensitivity = math.sqrt(len(ones)) * self.l2_sensitivity
        sigma = float32_ceil(sigma)
        if self.noise == "discrete":  # the exact sampler's floor; a larger sigma costs less
            sigma = max(sigma, samplers.SIGMA_MIN)
        index = np.concatenate([np.arange(self._span(i).start, self._span(i).stop) for i in ones])
        noisy, charge = self._measure(key, index, sigma=sigma, sensitivity=sensitivity)
        primitive = self._measure_primitive
        spent = charge_rho(primitive, sensitivity, sigma)
        return noisy, charge, (noise.PRIMITIVES.index(primitive), sensitivity, sigma), spent

    def _select(
        self, key: Key, model_counts: np.ndarray, mask: np.ndarray, sigma: float, rho_select: float
    ) -> tuple[int, Charge, float, float]:
        """Exponential mechanism over the masked candidates C_t on AIM's quality score.

        Returns:
            (selected candidate index, Charge, Delta_t, selection scale 2 Delta_t / epsilon_t).

        Privacy:
            Reads the true counts; one exponential mechanism (`noise.select`).
        """
        weights = np.asarray(self.weights)
        delta_t = self.l1_sensitivity * float(weights[mask].max())
        scale = gumbel_scale(delta_t, rho_select)
        settings = dict(scale=scale, sensitivity=delta_t, noise=self.noise, mask=jnp.asarray(mask))
        if self.noise == "discrete":  # exact int64 scores on the host (`grid_quality_scores`)
            steps = self.answers.map(
                lambda c: jnp.asarray(
                    grid_quality_scores(
                        np.asarray(c),
                        model_counts,
                        self.candidates,
                        weights,
                        mask,
                        sigma,
                        self.l1_sensitivity,
                    )
                )
            )
            choice, charge = noise.select_grid(stream_key(key, Stream.SELECT), steps, **settings)
        else:
            scores = self.answers.map(quality_scores, model_counts, self.candidates, weights, sigma)
            choice, charge = noise.select(stream_key(key, Stream.SELECT), scores, **settings)
        return int(choice), charge, delta_t, scale

    def _round_accounts(
        self, state, delta_t: float, scale: float, sigma: float
    ) -> tuple[float, tuple[tuple, ...]]:
        """(rho spent after a select + measure round, the charges so far with its two)."""
        select, measure = self._select_primitive, self._measure_primitive
        spent = (
            state.rho_spent
            + charge_rho(select, delta_t, scale)
            + charge_rho(measure, self.l2_sensitivity, sigma)
        )
        charges = (
            *state.charges,
            (noise.PRIMITIVES.index(select), delta_t, scale),
            (noise.PRIMITIVES.index(measure), self.l2_sensitivity, sigma),
        )
        return spent, charges

    def _idle_round(self) -> tuple[Charge, Charge]:
        """The (selection, measurement) charges of a round that draws neither (count 0)."""
        return idle(self._select_primitive), idle(self._measure_primitive)

    @staticmethod
    def _learned(after: np.ndarray, before: np.ndarray, sigma: float) -> bool:
        """Algorithm 4's test: did the model's answer on the selected marginal move by more than
        the measurement's expected L1 noise sqrt(2/pi) sigma n_r?"""
        moved = float(np.abs(np.asarray(after, np.float64) - np.asarray(before, np.float64)).sum())
        return moved > SQRT_2_OVER_PI * sigma * len(before)

    def _anneal_or_finish(self, state, *, changed: bool):
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


def idle(primitive: str) -> Charge:
    """A charge with count 0: the primitive did not run (the ledger skips it)."""
    return Charge(
        primitive=jnp.asarray(noise.PRIMITIVES.index(primitive), jnp.int32),
        sensitivity=jnp.asarray(1.0, jnp.float32),
        scale=jnp.asarray(1.0, jnp.float32),
        count=jnp.asarray(0, jnp.int32),
    )
