"""Update solvers of the histogram family: PEP's entropy projection and MWEM's multiplicative
weights, over all measurements so far. Pure post-processing of released measurements.

A measurement is either a whole marginal (its cells partition the support, so it is one block
of constraints) or a single cell. For a block the exact relative-entropy projection onto
"marginal = target" is a rescaling of each cell by target/current (iterative proportional
fitting); for a single cell c it is the two-block rescaling of Algorithm 4 in the PEP paper
(cell c by a/q, the rest by (1-a)/(1-q)). Each is an exact coordinate step on PEP's dual loss,
so that loss never increases.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.families.histogram import MarginalPadding, Measurements, probabilities
from jaxdp.types import Array

_FLOOR = 1e-9  # keeps log-ratios finite where a target or current answer is zero


def measured_answers(support, padding: MarginalPadding, log_weights: Array, meas: Measurements) -> Array:
    """(capacity, max_cells) the current distribution's answers to every measured marginal.

    Only filled slots are computed (one marginal each), so early rounds, with few measurements,
    cost little.
    """
    probs = probabilities(log_weights)
    empty = jnp.zeros(padding.max_cells, probs.dtype)

    def one(slot):
        return jax.lax.cond(
            meas.filled[slot], lambda: support.marginal_answers(probs, meas.marginal[slot]), lambda: empty
        )

    return jax.lax.map(one, jnp.arange(meas.filled.shape[0]))


def measurement_errors(current: Array, padding: MarginalPadding, meas: Measurements) -> Array:
    """(capacity,) the error of each measurement: max cell error, or the single cell's error."""
    valid = padding.valid[meas.marginal]
    cell_error = jnp.where(valid, jnp.abs(meas.target - current), 0.0)
    single = jnp.take_along_axis(cell_error, jnp.maximum(meas.cell, 0)[:, None], axis=1)[:, 0]
    error = jnp.where(meas.cell >= 0, single, cell_error.max(axis=1))
    return jnp.where(meas.filled, error, -jnp.inf)


def _projection_factors(current: Array, target: Array, valid: Array, cell: Array) -> Array:
    q = jnp.maximum(current, _FLOOR)
    a = jnp.maximum(target, _FLOOR)
    block = jnp.log(a) - jnp.log(q)
    is_cell = jnp.arange(current.shape[0]) == cell
    qc = jnp.clip(current[jnp.maximum(cell, 0)], _FLOOR, 1 - _FLOOR)
    ac = jnp.clip(target[jnp.maximum(cell, 0)], _FLOOR, 1 - _FLOOR)
    two_block = jnp.where(is_cell, jnp.log(ac) - jnp.log(qc), jnp.log1p(-ac) - jnp.log1p(-qc))
    return jnp.where(valid, jnp.where(cell >= 0, two_block, block), 0.0)


def entropy_projection(
    support,
    padding: MarginalPadding,
    log_weights: Array,
    meas: Measurements,
    *,
    max_steps: int,
    tolerance: float,
    per_cell: bool = True,
) -> Array:
    """PEP's iterative projection (the paper's Algorithm 4).

    Each step projects onto the measured constraint with the largest error, until every error
    is at most `tolerance` or `max_steps` steps were taken. With `per_cell` (Algorithm 4 as
    written) a constraint is one measured cell, so each step fixes the worst cell; otherwise a
    whole measured marginal is projected onto at once, which fits every noisy cell.

    Args:
        support: a histogram support (`DenseSupport` or `PublicSupport`).
        padding: the workload's `MarginalPadding`.
        log_weights: (n_support,) the current distribution.
        meas: measurements so far.
        max_steps: T_max, projection steps.
        tolerance: gamma, the error at which a constraint counts as satisfied.
        per_cell: project onto single cells (default) or whole marginals.

    Returns:
        (n_support,) log-weights after the projection.
    """

    def body(_, lw):
        current = measured_answers(support, padding, lw, meas)
        valid = padding.valid[meas.marginal]
        if per_cell:
            cell_error = jnp.abs(meas.target - current)
            single = jnp.arange(current.shape[1])[None, :] == meas.cell[:, None]
            usable = valid & meas.filled[:, None] & ((meas.cell[:, None] < 0) | single)
            cell_error = jnp.where(usable, cell_error, -jnp.inf)
            flat = jnp.argmax(cell_error)
            j, c = flat // current.shape[1], flat % current.shape[1]
            error = cell_error[j, c]
        else:
            errors = measurement_errors(current, padding, meas)
            j = jnp.argmax(errors)
            c, error = meas.cell[j], errors[j]
        factors = _projection_factors(current[j], meas.target[j], valid[j], c)
        updated = support.add_to_marginal(lw, meas.marginal[j], factors)
        return jnp.where(error > tolerance, updated, lw)

    return jax.lax.fori_loop(0, max_steps, body, log_weights)


def multiplicative_weights(
    support,
    padding: MarginalPadding,
    log_weights: Array,
    meas: Measurements,
    slot: Array,
    *,
    step_size: float,
) -> Array:
    """MWEM's update for one measurement: weights *= exp(step_size * (target - current)) on its
    cells (all cells of a whole-marginal measurement, or the single measured cell)."""
    i = meas.marginal[slot]
    current = support.marginal_answers(probabilities(log_weights), i)
    valid = padding.valid[i]
    cell = meas.cell[slot]
    is_cell = jnp.arange(current.shape[0]) == cell
    mask = jnp.where(cell >= 0, is_cell, valid)
    factors = jnp.where(mask, step_size * (meas.target[slot] - current), 0.0)
    return jnp.where(meas.filled[slot], support.add_to_marginal(log_weights, i, factors), log_weights)


def replay_multiplicative_weights(
    support,
    padding: MarginalPadding,
    log_weights: Array,
    meas: Measurements,
    *,
    passes: int,
    step_size: float,
) -> Array:
    """`passes` sweeps of the MW update over every filled measurement, oldest first."""
    capacity = meas.filled.shape[0]

    def body(k, lw):
        return multiplicative_weights(support, padding, lw, meas, k % capacity, step_size=step_size)

    return jax.lax.fori_loop(0, passes * capacity, body, log_weights)
