"""AIM's quality score of a candidate marginal, w_r (||M_r(D) - M_r(model)||_1 - sqrt(2/pi) sigma n_r),
on floats (`quality_scores`) and exactly on the integer grid the discrete exponential mechanism
selects on (`grid_quality_steps`): counts in steps of 1/COUNT_STEPS, weights in WEIGHT_BITS bits.
Every score reads the true counts: only the exponential mechanism (`jaxdp.noise`) releases a pick
from them."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import noise
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


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
# `grid_quality_steps` for the bound.
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
    return relative_to_best(quality, mask)


def relative_to_best(quality: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(n,) int32 integer scores `quality` relative to the best masked one, max(Q_r, best - 2^30)
    - best in [-2^30, 0] (-2^30 where masked out): what the exact sampler takes. If each Q_r
    moves by at most GRID_STEPS between neighbours, so does each of these (a max of two such
    functions, less one), and the shift by the best leaves the exponential mechanism's law
    unchanged."""
    best = quality[mask].max()
    relative = np.maximum(quality, best - noise.GRID_LIMIT) - best
    return np.where(mask, relative, -noise.GRID_LIMIT).astype(np.int32)


def candidate_l1_steps(
    true_counts: np.ndarray, model_counts: np.ndarray, candidates: MarginalWorkload, steps: int
) -> np.ndarray:
    """(n_candidates,) int64 E_r = sum_cells |K c - round(K mu)| with K = `steps`: each candidate's
    L1 error in steps of 1 / K counts, exact (the true counts c, private; the model's counts mu,
    public, clipped to >= 0 and scaled to sum to at most 2^32 per marginal, so E_r < 2^40 for
    K <= 64). A neighbour moves c by 1 in at most L1 cells (the relation's L1 sensitivity), so
    E_r moves by at most K L1."""
    segments = candidates.marginal_of_query()
    mu = np.clip(np.asarray(model_counts, np.float64), 0.0, _MODEL_TOTAL_LIMIT)
    totals = np.bincount(segments, weights=mu, minlength=len(candidates))
    mu = mu * np.minimum(1.0, _MODEL_TOTAL_LIMIT / np.maximum(totals, 1.0))[segments]
    model = np.rint(steps * mu).astype(np.int64)
    errors = np.abs(steps * np.asarray(true_counts, np.int64) - model)
    return np.add.reduceat(errors, np.asarray(candidates.offsets, np.int64))


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
    cells = np.asarray(candidates.cells, np.int64)
    l1 = candidate_l1_steps(true_counts, model_counts, candidates, COUNT_STEPS)
    penalty = np.rint(np.minimum(COUNT_STEPS * SQRT_2_OVER_PI * float(sigma) * cells, _PENALTY_LIMIT))
    mask = np.asarray(mask, bool)
    weights = np.asarray(weights, np.float64)
    w_max = float(weights[mask].max())
    scaled = np.where(mask, np.floor(weights * 2.0**WEIGHT_BITS / w_max), 0.0).astype(np.int64)
    return (scaled * (l1 - penalty.astype(np.int64))) // divisor  # floor division, |.| < 2^57
