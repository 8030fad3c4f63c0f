"""The only place private values meet randomness.

Every function here takes a `Sensitive` value, a required typed key and a noise scale that was
fixed on the host, releases a noisy or selected output, and returns a `Charge` describing the
invocation, which the mechanism puts in its round's Info so the ledger records it. Costs are
computed by `jaxdp.accounting.charge_rho` from what is recorded here.

A scale is given as a Python float, or as a `GaussianScale` / `SelectionScale` built from one on
the host (`gaussian_scale`, `selection_scale`): the float and the exact sampler's integer
parameters for it, as arrays. A mechanism holds its scales in that second form, as data, so that
one compiled program serves every budget and an epsilon grid runs as one program
(`jaxdp.loop.run_many`); the scale is still fixed before the data is read, never computed from it.

Two kinds of primitive (the `noise=` option of every mechanism, `NOISES`):
- "discrete" (the default): integer counts plus exact discrete Gaussian or discrete Laplace
  noise, and selection by an exponential mechanism on scores on a public grid, all sampled
  exactly with integer arithmetic (`jaxdp.samplers`, Canonne, Kamath & Steinke 2020). Scores
  computed exactly as int32 grid steps go to `grid_exponential` / `grid_top_k` (`select_grid`,
  `select_top_k_grid`); float scores to `discrete_exponential` / `discrete_top_k`, which
  quantise them with a stated allowance.
- "float": float32 Gaussian/Laplace noise and Gumbel-max selection. Faster, but floating-point
  noise does not meet the delta it states (Mironov 2012; docs/privacy.md measures by how much):
  kept for speed experiments only.
jax.random is not a vetted CSPRNG (docs/privacy.md).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import samplers
from jaxdp.accounting import gaussian_sigma
from jaxdp.keys import fold_in, require_key, split_keys
from jaxdp.types import Array, Charge, Key, Sensitive, array_module, pytree_dataclass, static_field

PRIMITIVES = (
    "gaussian",
    "laplace",
    "exponential",
    "gumbel_top_k",
    "discrete_gaussian",
    "discrete_laplace",
    "discrete_exponential",
    "discrete_top_k",
)
NOISES = ("discrete", "float")

# Selection works on a grid of sensitivity / GRID_STEPS. Two ways in:
# - `grid_exponential` / `grid_top_k` take int32 scores already in grid steps whose sensitivity
#   the caller has proven to be at most GRID_STEPS steps (computed exactly, in integers): no
#   allowance, the rate per step is epsilon / (2 GRID_STEPS).
# - `discrete_exponential` / `discrete_top_k` take float scores and quantise them. Flooring adds
#   at most one step to the quantised scores' sensitivity, and float32 evaluation of score *
#   GRID_STEPS / sensitivity at most one more (half a step each way) because the scaled scores
#   are clipped to +-2^23 steps, where float32 resolves half-steps: the exact sampler uses
#   GRID_STEPS + 2 steps. The clip saturates scores beyond 2^17 sensitivities from zero; clipping
#   never increases sensitivity. This allowance covers the quantisation only: it holds when the
#   float scores *as computed* move by at most `sensitivity` between neighbours, which float32
#   arithmetic on counts does not guarantee in general (docs/privacy.md, Known limitations).
GRID_STEPS = 64
_QUANTISED_SENSITIVITY = GRID_STEPS + 2
_SCORE_LIMIT = 2**23
# Grid scores are clipped to +-2^30 steps and floored at best - 2^30: both maps are 1-Lipschitz
# (a max of two functions that each move by at most GRID_STEPS, the best eligible score being
# one), so the sensitivity stays GRID_STEPS steps and gaps fit in [0, 2^30].
GRID_LIMIT = 2**30


def _static_positive(value: object, name: str) -> float:
    if isinstance(value, jax.core.Tracer) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a Python number fixed before tracing, got {type(value)}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


@pytree_dataclass
class GaussianScale:
    """A Gaussian measurement's noise scale, fixed on the host (`gaussian_scale`) and carried as
    data: sigma (a float64 scalar array, in the measurement's units; float32 once traced) and,
    for discrete noise, the exact sampler's parameters for it (`samplers.gaussian_params`).
    Measuring with it draws what measuring with the float draws. Build it with `gaussian_scale`,
    which derives both fields from one float: the ledger records `sigma`, the draws use `exact`."""

    sigma: Array
    exact: samplers.GaussianParams | None = None


@pytree_dataclass
class SelectionScale:
    """An exponential mechanism's scale 2 sensitivity / epsilon, fixed on the host
    (`selection_scale`) and carried as data: the Gumbel scale (a float64 scalar array; float32
    once traced) and, for discrete noise, the exact sampler's rate per grid step for scores of
    sensitivity `steps` grid steps (GRID_STEPS: exact int32 scores; GRID_STEPS + 2: quantised
    float scores). Selecting with it draws what selecting with the float draws. Build it with
    `selection_scale`, which derives both from one float: the ledger records `scale`, the draws
    use `rate`, which also depends on the score sensitivity it was built for (`sensitivity`, a
    setting: a call declaring another is refused)."""

    scale: Array
    rate: samplers.DyadicRate | None = None
    steps: int = static_field(default=GRID_STEPS)
    sensitivity: float = static_field(default=0.0)


def gaussian_scale(sigma: float, noise: str) -> GaussianScale:
    """The `GaussianScale` of `sigma` under the `noise` option.

    Raises:
        ValueError: sigma not finite and > 0, outside the exact sampler's range, or an unknown noise.
    """
    sigma = _static_positive(sigma, "sigma")
    _check_noise(noise)
    exact = samplers.gaussian_params(samplers.gaussian_lattice(sigma)) if noise == "discrete" else None
    return GaussianScale(np.asarray(sigma, np.float64), exact)


def selection_scale(scale: float, sensitivity: float, noise: str, *, exact_scores: bool) -> SelectionScale:
    """The `SelectionScale` of `scale` for scores of `sensitivity` under the `noise` option:
    `exact_scores` for int32 grid scores (`select_grid`), else float scores (`select`)."""
    scale = _static_positive(scale, "scale")
    sensitivity = _static_positive(sensitivity, "sensitivity")
    _check_noise(noise)
    steps = GRID_STEPS if exact_scores else _QUANTISED_SENSITIVITY
    rate = samplers.dyadic_rate(*_selection_rate(scale, sensitivity, steps)) if noise == "discrete" else None
    return SelectionScale(np.asarray(scale, np.float64), rate, steps, sensitivity)


def _gaussian(sigma: float | GaussianScale, noise: str) -> GaussianScale:
    if isinstance(sigma, GaussianScale):
        if noise == "discrete" and sigma.exact is None:
            raise ValueError("this GaussianScale was built for float noise: it has no exact parameters")
        return sigma
    return gaussian_scale(sigma, noise)


def _selection(scale: float | SelectionScale, sensitivity: float, noise: str, steps: int) -> SelectionScale:
    if isinstance(scale, SelectionScale):
        if scale.sensitivity != sensitivity:
            raise ValueError(
                f"this SelectionScale was built for scores of sensitivity {scale.sensitivity!r}, and "
                f"the selection declares {sensitivity!r}: its rate would not match its charge"
            )
        if noise == "discrete" and (scale.rate is None or scale.steps != steps):
            raise ValueError(
                f"this SelectionScale's rate is for scores of sensitivity {scale.steps} grid steps "
                f"(or for float noise), not {steps}: build it with selection_scale(..., exact_scores=...) "
                "as the scores are computed"
            )
        return scale
    return selection_scale(scale, sensitivity, noise, exact_scores=steps == GRID_STEPS)


def _charge(primitive: str, sensitivity: float, scale: float | Array, count: int = 1) -> Charge:
    # NumPy scalars where nothing is traced: a JAX scalar built outside a trace compiles a program
    xp = jnp if isinstance(scale, jax.core.Tracer) else np
    return Charge(
        primitive=np.asarray(PRIMITIVES.index(primitive), np.int32),
        sensitivity=np.asarray(sensitivity, np.float32),
        scale=xp.asarray(scale, np.float32),
        count=np.asarray(count, np.int32),
    )


def count_sigma(sensitivity: float, rho: float, noise: str) -> float:
    """The Gaussian scale, in counts, of a measurement of L2 sensitivity `sensitivity` (counts)
    costing at most `rho`: `accounting.gaussian_sigma`, raised under discrete noise to the exact
    sampler's smallest scale (`samplers.SIGMA_MIN`, 1/64 of a count). Huge budgets ask for less;
    raising sigma only lowers the cost, and below it the integer noise is zero with probability
    1 - exp(-2048) anyway."""
    sigma = gaussian_sigma(sensitivity, rho)
    return max(sigma, samplers.SIGMA_MIN) if noise == "discrete" else sigma


def idle(primitive: str) -> Charge:
    """The Charge of a primitive that did not run this round (count 0: the ledger skips it), for
    rounds whose Info must keep one structure whatever they drew."""
    return _charge(primitive, 0.0, 0.0, count=0)


def _reveal(value: Sensitive, name: str) -> Array:
    if not isinstance(value, Sensitive):
        raise TypeError(f"{name} must be wrapped in Sensitive (it is computed from private data)")
    return value._value


def gaussian(
    key: Key, value: Sensitive, *, sigma: float | GaussianScale, sensitivity: float
) -> tuple[Array, Charge]:
    """Release `value + N(0, sigma^2 I)`.

    Args:
        key: typed key (use a MEASURE stream key).
        value: the private answers, any float array shape.
        sigma: noise standard deviation, fixed by the plan (a float or its `GaussianScale`).
        sensitivity: L2 sensitivity of `value` under the mechanism's neighbouring relation.

    Returns:
        (noisy answers with the shape of value, Charge).

    Privacy:
        rho = sensitivity^2 / (2 sigma^2) zCDP.
    """
    key = require_key(key)
    sigma = _gaussian(sigma, "float").sigma
    sensitivity = _static_positive(sensitivity, "sensitivity")
    x = _reveal(value, "value")
    noisy = x + sigma * jax.random.normal(key, jnp.shape(x), jnp.float32)
    return noisy, _charge("gaussian", sensitivity, sigma)


def laplace(key: Key, value: Sensitive, *, scale: float, sensitivity: float) -> tuple[Array, Charge]:
    """Release `value + Laplace(0, scale)` i.i.d. per entry.

    Privacy:
        (sensitivity / scale)-DP for L1 sensitivity `sensitivity`, i.e. rho = epsilon^2 / 2.
    """
    key = require_key(key)
    scale = _static_positive(scale, "scale")
    sensitivity = _static_positive(sensitivity, "sensitivity")
    x = _reveal(value, "value")
    noisy = x + scale * jax.random.laplace(key, jnp.shape(x), jnp.float32)
    return noisy, _charge("laplace", sensitivity, scale)


def _noisy_logits(key: Key, scores: Array, scale: Array, mask: Array | None) -> Array:
    # mode="high" draws the uniform with more random bits, so the Gumbel tail is not truncated
    # at the float32 resolution of the uniform (see docs/privacy.md).
    gumbel = jax.random.gumbel(key, jnp.shape(scores), jnp.float32, mode="high")
    logits = scores / scale + gumbel
    if mask is not None:
        logits = jnp.where(mask, logits, -jnp.inf)
    return logits


def exponential(
    key: Key,
    scores: Sensitive,
    *,
    scale: float | SelectionScale,
    sensitivity: float,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """Exponential mechanism by Gumbel-max: sample i with probability ~ exp(score_i / scale).

    Args:
        key: typed key (use a SELECT stream key).
        scores: (n_candidates,) private quality scores (higher is better).
        scale: Gumbel scale 2 * sensitivity / epsilon, fixed by the plan
            (`accounting.gumbel_scale`).
        sensitivity: sensitivity of each score under the neighbouring relation.
        mask: optional (n_candidates,) bool of eligible candidates (public, e.g. "not measured
            yet"). At least one must be True: with none, index 0 is returned. Callers guarantee
            it (factories refuse more rounds than candidates).

    Returns:
        (int32 index of the selected candidate, Charge).

    Privacy:
        epsilon = 2 sensitivity / scale exponential mechanism, epsilon^2 / 8 zCDP
        (bounded range, Cesar & Rogers 2021).
    """
    key = require_key(key)
    sensitivity = _static_positive(sensitivity, "sensitivity")
    scale = _selection(scale, sensitivity, "float", _QUANTISED_SENSITIVITY).scale
    logits = _noisy_logits(key, _reveal(scores, "scores"), scale, mask)
    return jnp.argmax(logits).astype(jnp.int32), _charge("exponential", sensitivity, scale)


def gumbel_top_k(
    key: Key,
    scores: Sensitive,
    *,
    k: int,
    scale: float | SelectionScale,
    sensitivity: float,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """One-shot report-noisy-top-k with Gumbel noise: the k largest of score/scale + Gumbel.

    Equivalent in distribution to k exponential mechanisms run in sequence without replacement
    (Durfee & Rogers 2019). `mask`, if given, must leave at least k candidates eligible; with
    fewer, masked candidates fill the remaining places (callers guarantee it, as factories
    refuse plans that select more than there are).

    Returns:
        ((k,) int32 indices, best first; Charge with count k).

    Privacy:
        k * epsilon^2 / 8 zCDP with epsilon = 2 sensitivity / scale (Cesar & Rogers 2021).
    """
    key = require_key(key)
    sensitivity = _static_positive(sensitivity, "sensitivity")
    scale = _selection(scale, sensitivity, "float", _QUANTISED_SENSITIVITY).scale
    x = _reveal(scores, "scores")
    if not isinstance(k, int) or not 1 <= k <= x.shape[-1]:
        raise ValueError(f"k must be an integer in [1, {x.shape[-1]}] (the candidates), got {k!r}")
    logits = _noisy_logits(key, x, scale, mask)
    _, indices = jax.lax.top_k(logits, k)
    return indices.astype(jnp.int32), _charge("gumbel_top_k", sensitivity, scale, k)


# --- exact primitives ----------------------------------------------------------------------------


def _integer_counts(value: Sensitive, name: str) -> np.ndarray | Array:
    x = _reveal(value, name)
    x = array_module(x).asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise TypeError(
            f"{name} must be integer counts (got dtype {x.dtype}); discrete noise "
            "is added to integers, and fractions are formed after the noise"
        )
    return x.astype(np.int32)


def discrete_gaussian(
    key: Key, counts: Sensitive, *, sigma: float | GaussianScale, sensitivity: float
) -> tuple[Array, Charge]:
    """Release `counts + Y`, Y i.i.d. discrete Gaussian N_Z(0, s^2) with s^2 >= sigma^2 (exact).

    Args:
        key: typed key (use a MEASURE stream key).
        counts: integer counts, any shape (int32).
        sigma: the planned noise scale in counts, fixed on the host (a float or its
            `GaussianScale`). The sampler's variance parameter is the rational
            `samplers.gaussian_lattice(sigma).variance`, sigma^2 rounded up by at most a relative
            2^-10 (over the whole supported range).
        sensitivity: L2 sensitivity of `counts` under the mechanism's neighbouring relation.

    Returns:
        (int32 noisy counts with the shape of counts, Charge); NumPy counts give NumPy noisy
        counts (the same draws: the host loop's measurements stay on the host).

    Privacy:
        rho = sensitivity^2 / (2 sigma^2) zCDP (Canonne, Kamath & Steinke 2020, Thm. 4 for one
        integer coordinate; for a vector, Renyi divergences of independent coordinates add, so
        the same bound holds with the L2 sensitivity). Sampled exactly from the law conditioned
        on |Y| <= cap, the largest y with y^2 / (2 s^2) < 2^14 (181 sigma for sigma >= 1, at
        least 120 sigma down to sigma = 2^-6; the mass beyond is below exp(-16000)):
        `jaxdp.samplers`, docs/privacy.md.
    """
    key = require_key(key)
    sigma = _gaussian(sigma, "discrete")
    sensitivity = _static_positive(sensitivity, "sensitivity")
    x = _integer_counts(counts, "counts")
    noisy = x + array_module(x).asarray(samplers.discrete_gaussian(key, x.shape, sigma.exact))
    return noisy, _charge("discrete_gaussian", sensitivity, sigma.sigma)


def discrete_laplace(
    key: Key, counts: Sensitive, *, scale: float, sensitivity: float
) -> tuple[Array, Charge]:
    """Release `counts + Y`, Y i.i.d. discrete Laplace Lap_Z(b), P(y) ~ exp(-|y| / b), b >= scale.

    Privacy:
        (sensitivity / scale)-DP for L1 sensitivity `sensitivity` (integer-valued queries), i.e.
        rho = epsilon^2 / 2.
    """
    key = require_key(key)
    scale = _static_positive(scale, "scale")
    sensitivity = _static_positive(sensitivity, "sensitivity")
    x = _integer_counts(counts, "counts")
    t, s = samplers.laplace_lattice(scale)
    noisy = x + samplers.discrete_laplace(key, x.shape, t, s)
    return noisy, _charge("discrete_laplace", sensitivity, scale)


def _selection_rate(scale: float, sensitivity: float, steps: int = _QUANTISED_SENSITIVITY) -> tuple[int, int]:
    """The exponent per grid step as a rational rate_numerator / rate_denominator, rounded down.

    The ideal mechanism samples with probability ~ exp(score / scale), epsilon = 2 sensitivity /
    scale. On grid scores of sensitivity `steps` steps (GRID_STEPS for exact integer scores,
    _QUANTISED_SENSITIVITY for quantised float scores), the same epsilon allows epsilon /
    (2 steps) per step: sensitivity / (scale * steps).
    """
    rate = sensitivity / (scale * steps)
    denominator = 2**12
    while rate * denominator < 2**12 and denominator < 2**31:
        denominator *= 2
    numerator = math.floor(rate * denominator * (1.0 - 1e-12))
    if not 1 <= numerator < 2**32:
        # reached from a user's budget: say which way it is out of range in the budget's terms
        epsilon = 2 * sensitivity / scale
        remedy = "more budget: a larger epsilon or fewer rounds" if numerator < 1 else "less budget"
        raise ValueError(
            f"a selection at epsilon {epsilon:.3g} (scale {scale:.3g}, sensitivity {sensitivity:.3g}) is "
            "outside the exact sampler's range (a rate per grid step in [2^-31, 2^20)): give each "
            f"selection {remedy}"
        )
    return numerator, denominator


def _quantised_gaps(scores: Array, sensitivity: float, mask: Array | None) -> tuple[Array, Array]:
    """(gaps below the best eligible quantised score, eligible) for the exact sampler."""
    scaled = jnp.clip(
        scores.astype(jnp.float32) * jnp.float32(GRID_STEPS / sensitivity), -_SCORE_LIMIT, _SCORE_LIMIT
    )
    # within +-2^23 steps, so `_grid_gaps`' clip and floor at best - 2^30 leave them as they are
    return _grid_gaps(jnp.floor(scaled).astype(jnp.int32), mask)


def _grid_gaps(steps: Array, mask: Array | None) -> tuple[Array, Array]:
    """(gaps below the best eligible grid score, eligible) for int32 scores in grid steps."""
    xp = array_module(steps)
    clipped = xp.clip(steps, -GRID_LIMIT, GRID_LIMIT)
    eligible = xp.ones(clipped.shape, bool) if mask is None else xp.asarray(mask, bool)
    best = xp.max(xp.where(eligible, clipped, -GRID_LIMIT))
    floored = xp.maximum(clipped, best - GRID_LIMIT)
    return xp.where(eligible, best - floored, 0).astype(np.uint32), eligible


def _grid_steps(steps: Sensitive, name: str) -> np.ndarray | Array:
    x = _reveal(steps, name)
    x = array_module(x).asarray(x)
    if x.dtype != jnp.int32:
        raise TypeError(
            f"{name} must be int32 scores in grid steps (got dtype {x.dtype}): only integer scores "
            "computed exactly are taken as on the grid; float scores go through "
            "discrete_exponential / discrete_top_k, which quantise them with an allowance"
        )
    return x


def discrete_exponential(
    key: Key,
    scores: Sensitive,
    *,
    scale: float | SelectionScale,
    sensitivity: float,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """Exponential mechanism sampled exactly on scores quantised to a public grid.

    Scores are floored to multiples of g = sensitivity / GRID_STEPS; candidate i is drawn with
    probability exactly proportional to exp(-rate * gap_i), gap_i its distance in steps below the
    best eligible candidate, by integer rejection sampling (`samplers.exponential_choice`).

    Args:
        key: typed key (use a SELECT stream key).
        scores: (n_candidates,) private float scores (higher is better).
        scale: 2 * sensitivity / epsilon, fixed by the plan (`accounting.gumbel_scale`).
        sensitivity: sensitivity of each score under the neighbouring relation.
        mask: optional (n_candidates,) bool of eligible candidates (public); at least one True.

    Returns:
        (int32 index of the selected candidate, Charge).

    Privacy:
        If the float scores as passed move by at most `sensitivity` between neighbouring
        datasets, the quantised scores have sensitivity GRID_STEPS + 2 steps (flooring adds one,
        float32 evaluation of the scaling at most one more, the scaled scores being clipped to
        +-2^23 steps, i.e. scores saturate beyond 2^17 sensitivities from zero); the rate per
        step is rounded down from epsilon / (2 (GRID_STEPS + 2)), so the sampled law is exactly
        an epsilon'-exponential mechanism with epsilon' <= epsilon = 2 sensitivity / scale:
        epsilon-DP and epsilon^2 / 8 zCDP (bounded range, Cesar & Rogers 2021). The allowance
        does not cover rounding in the caller's own computation of the scores: scores computed
        in float32 from counts can move by more than `sensitivity`. Callers that can compute
        their scores exactly in integers use `grid_exponential` instead (no allowance).
    """
    key = require_key(key)
    sensitivity = _static_positive(sensitivity, "sensitivity")
    scale = _selection(scale, sensitivity, "discrete", _QUANTISED_SENSITIVITY)
    gaps, eligible = _quantised_gaps(_reveal(scores, "scores"), sensitivity, mask)
    choice = samplers.exponential_choice_at(key, gaps, eligible, scale.rate)
    return choice, _charge("discrete_exponential", sensitivity, scale.scale)


def discrete_top_k(
    key: Key,
    scores: Sensitive,
    *,
    k: int,
    scale: float | SelectionScale,
    sensitivity: float,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """k exact exponential-mechanism selections without replacement (`discrete_exponential`, in
    sequence, each masking out those chosen before).

    Returns:
        ((k,) int32 indices in the order chosen; Charge with count k).

    Privacy:
        k selections at epsilon = 2 sensitivity / scale each: k epsilon^2 / 8 zCDP.
    """
    key = require_key(key)
    sensitivity = _static_positive(sensitivity, "sensitivity")
    scale = _selection(scale, sensitivity, "discrete", _QUANTISED_SENSITIVITY)
    x = _reveal(scores, "scores")
    k = _check_k(k, x.shape[-1])
    gaps_of = lambda ok: _quantised_gaps(x, sensitivity, ok)  # noqa: E731
    chosen = _sequential_picks(key, gaps_of, k, scale.rate, x.shape, mask)
    return chosen, _charge("discrete_top_k", sensitivity, scale.scale, k)


def _sequential_picks(
    key: Key, gaps_of, k: int, rate: samplers.DyadicRate, shape, mask: Array | None
) -> Array:
    """k exact selections in sequence, each masking out those chosen before; `gaps_of(eligible)`
    gives (gaps, eligible) of the remaining candidates."""
    eligible = jnp.ones(shape, bool) if mask is None else jnp.asarray(mask, bool)
    base = split_keys(key, 1)[0]  # uses `key` once; pick i consumes fold_in(base, i)

    def pick(eligible, i):
        gaps, ok = gaps_of(eligible)
        choice = samplers.exponential_choice_at(fold_in(base, i), gaps, ok, rate)
        return eligible.at[choice].set(False), choice

    _, chosen = jax.lax.scan(pick, eligible, jnp.arange(k))
    return chosen.astype(jnp.int32)


def _check_k(k: object, n_candidates: int) -> int:
    if not isinstance(k, int) or not 1 <= k <= n_candidates:
        raise ValueError(f"k must be an integer in [1, {n_candidates}] (the candidates), got {k!r}")
    return k


def grid_exponential(
    key: Key,
    steps: Sensitive,
    *,
    scale: float | SelectionScale,
    sensitivity: float,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """Exponential mechanism sampled exactly on int32 scores already in grid steps.

    The caller computed each candidate's score exactly as an integer number of steps of
    g = sensitivity / GRID_STEPS and guarantees it moves by at most GRID_STEPS between
    neighbouring datasets (e.g. `jaxdp.selection`'s integer cell errors). Candidate i is drawn
    with probability exactly proportional to exp(rate * steps_i), rate = epsilon / (2 GRID_STEPS)
    rounded down, by integer rejection sampling (`samplers.exponential_choice`). Only an int32
    array is accepted: float scores are never taken as on the grid (use `discrete_exponential`).

    Args:
        key: typed key (use a SELECT stream key).
        steps: (n_candidates,) private int32 scores in grid steps (higher is better).
        scale: 2 * sensitivity / epsilon, fixed by the plan (`accounting.gumbel_scale`).
        sensitivity: the score's sensitivity in score units (GRID_STEPS steps).
        mask: optional (n_candidates,) bool of eligible candidates (public); at least one True.

    Returns:
        (int32 index of the selected candidate, Charge): the same primitive and charge as
        `discrete_exponential`.

    Raises:
        TypeError: `steps` not an int32 array wrapped in `Sensitive`.

    Privacy:
        Scores are clipped to +-2^30 steps and floored at (best eligible - 2^30): each map is
        1-Lipschitz in the scores, so the clipped scores still move by at most GRID_STEPS. With
        rate <= epsilon / (2 GRID_STEPS) the sampled law is exactly an epsilon'-exponential
        mechanism with epsilon' <= epsilon = 2 sensitivity / scale: epsilon-DP and
        epsilon^2 / 8 zCDP (bounded range, Cesar & Rogers 2021). Exact only if the caller's
        GRID_STEPS bound is.
    """
    key = require_key(key)
    sensitivity = _static_positive(sensitivity, "sensitivity")
    scale = _selection(scale, sensitivity, "discrete", GRID_STEPS)
    gaps, eligible = _grid_gaps(_grid_steps(steps, "steps"), mask)
    choice = samplers.exponential_choice_at(key, gaps, eligible, scale.rate)
    return choice, _charge("discrete_exponential", sensitivity, scale.scale)


def grid_top_k(
    key: Key,
    steps: Sensitive,
    *,
    k: int,
    scale: float | SelectionScale,
    sensitivity: float,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """k `grid_exponential` selections without replacement, in sequence (int32 grid scores).

    Returns:
        ((k,) int32 indices in the order chosen; Charge with count k, as `discrete_top_k`).

    Privacy:
        k selections at epsilon = 2 sensitivity / scale each: k epsilon^2 / 8 zCDP, provided the
        scores move by at most GRID_STEPS steps (see `grid_exponential`).
    """
    key = require_key(key)
    sensitivity = _static_positive(sensitivity, "sensitivity")
    scale = _selection(scale, sensitivity, "discrete", GRID_STEPS)
    x = _grid_steps(steps, "steps")
    k = _check_k(k, x.shape[-1])
    chosen = _sequential_picks(key, lambda ok: _grid_gaps(x, ok), k, scale.rate, x.shape, mask)
    return chosen, _charge("discrete_top_k", sensitivity, scale.scale, k)


# --- dispatch on the noise option ----------------------------------------------------------------


def measure_counts(
    key: Key, counts: Sensitive, *, sigma: float | GaussianScale, sensitivity: float, noise: str
) -> tuple[Array, Charge]:
    """Gaussian measurement of integer counts: float32 noisy counts and the Charge.

    noise="discrete": `discrete_gaussian` (integers, exact); noise="float": `gaussian` on the
    counts cast to float32. sigma and sensitivity are in counts.
    """
    if noise == "discrete":
        noisy, charge = discrete_gaussian(key, counts, sigma=sigma, sensitivity=sensitivity)
        return noisy.astype(np.float32), charge
    _check_noise(noise)
    return gaussian(
        key, counts.map(lambda c: jnp.asarray(c, jnp.float32)), sigma=sigma, sensitivity=sensitivity
    )


def select(
    key: Key,
    scores: Sensitive,
    *,
    scale: float | SelectionScale,
    sensitivity: float,
    noise: str,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """One exponential-mechanism selection: `discrete_exponential` or (float) `exponential`."""
    if noise == "discrete":
        return discrete_exponential(key, scores, scale=scale, sensitivity=sensitivity, mask=mask)
    _check_noise(noise)
    return exponential(key, scores, scale=scale, sensitivity=sensitivity, mask=mask)


def select_top_k(
    key: Key,
    scores: Sensitive,
    *,
    k: int,
    scale: float | SelectionScale,
    sensitivity: float,
    noise: str,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """k selections without replacement: `discrete_top_k` or (float) `gumbel_top_k`."""
    if noise == "discrete":
        return discrete_top_k(key, scores, k=k, scale=scale, sensitivity=sensitivity, mask=mask)
    _check_noise(noise)
    return gumbel_top_k(key, scores, k=k, scale=scale, sensitivity=sensitivity, mask=mask)


def _steps_as_scores(steps: Sensitive, sensitivity: float) -> Sensitive:
    """Grid scores back in score units, for the float (Gumbel-max) option."""
    return steps.map(
        lambda x: _grid_steps(Sensitive(x), "steps").astype(jnp.float32) * (sensitivity / GRID_STEPS)
    )


def select_grid(
    key: Key,
    steps: Sensitive,
    *,
    scale: float | SelectionScale,
    sensitivity: float,
    noise: str,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """One selection on int32 grid scores: `grid_exponential` or (float) `exponential` on
    steps * sensitivity / GRID_STEPS."""
    if noise == "discrete":
        return grid_exponential(key, steps, scale=scale, sensitivity=sensitivity, mask=mask)
    _check_noise(noise)
    scores = _steps_as_scores(steps, sensitivity)
    return exponential(key, scores, scale=scale, sensitivity=sensitivity, mask=mask)


def select_top_k_grid(
    key: Key,
    steps: Sensitive,
    *,
    k: int,
    scale: float | SelectionScale,
    sensitivity: float,
    noise: str,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """k selections without replacement on int32 grid scores: `grid_top_k` or (float)
    `gumbel_top_k` on steps * sensitivity / GRID_STEPS."""
    if noise == "discrete":
        return grid_top_k(key, steps, k=k, scale=scale, sensitivity=sensitivity, mask=mask)
    _check_noise(noise)
    scores = _steps_as_scores(steps, sensitivity)
    return gumbel_top_k(key, scores, k=k, scale=scale, sensitivity=sensitivity, mask=mask)


def _check_noise(noise: str) -> None:
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
