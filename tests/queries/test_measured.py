"""The measured-marginals path (`jaxdp.queries.measured`) against the dense kernel and brute force:
the masked loss and its gradient, GEM's ranking, which marginals are active, and the fits that
take this path past `DENSE_MAX_QUERIES`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp.queries import from_cliques, measured, relaxed_marginals
from tests.queries import _reference as ref

SIZES = (3, 2, 5, 2, 4)
# 1-, 2-, 3-, 4- and 5-way marginals, one repeated, with the largest block first, inside and last,
# and two whose largest blocks tie in size ((1, 3): 2 and 2; (0, 3, 4): none ties, (1, 3, 4) does)
WORKLOAD = from_cliques(
    SIZES,
    [(2, 4), (0,), (2, 4), (0, 1, 2, 3, 4), (1, 2, 4), (3,), (0, 2), (2, 3), (0, 1, 3, 4), (1, 3), (1, 3, 4)],
)


def _probs(n, seed):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.dirichlet(np.ones(s), n) for s in SIZES], axis=1).astype(np.float32)


def _mask(seed, marginals):
    """Cells masked at random within the given marginals only (some marginals partly)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(WORKLOAD.n_queries, bool)
    for i in marginals:
        start, cells = WORKLOAD.offsets[i], WORKLOAD.cells[i]
        mask[start : start + cells] = rng.random(cells) < 0.7
        mask[start] = True  # at least one cell
    return mask


def _dense_loss(probs, targets, weights):
    return jnp.sum(weights * (relaxed_marginals(probs, WORKLOAD) - targets) ** 2)


def _sparse_loss(probs, targets, weights, active):
    return measured.squared_error(WORKLOAD, probs, targets, weights, active)


@pytest.mark.parametrize("seed", range(3))
def test_the_loss_and_its_gradient_equal_the_dense_kernels(seed):
    """Float32 sums over 7 rows of products of at most 5 factors in [0, 1] and at most 240 cells:
    a relative 1e-5 covers the rounding of either summation order."""
    rng = np.random.default_rng(seed)
    probs = _probs(7, seed)
    mask = _mask(seed, rng.choice(len(WORKLOAD), 4, replace=False))
    targets = (rng.random(WORKLOAD.n_queries) * mask).astype(np.float32)
    weights = (rng.random(WORKLOAD.n_queries) * mask).astype(np.float32)
    active = measured.active_marginals(jnp.asarray(mask), WORKLOAD)
    want, want_grad = jax.jit(jax.value_and_grad(_dense_loss))(probs, targets, weights)
    got, got_grad = jax.jit(jax.value_and_grad(_sparse_loss))(probs, targets, weights, active)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(got_grad), np.asarray(want_grad), rtol=1e-5, atol=1e-7)
    assert np.any(np.asarray(got_grad) != 0)


def test_the_loss_matches_brute_force_and_skips_inactive_marginals():
    """Against NumPy loops in float64; the negative control: switching one active marginal off
    drops exactly its cells' term."""
    probs = _probs(5, 7)
    mask = _mask(7, range(len(WORKLOAD)))
    rng = np.random.default_rng(7)
    targets = (rng.random(WORKLOAD.n_queries) * mask).astype(np.float32)
    weights = mask.astype(np.float32)
    answers = ref.relaxed_marginals(probs.astype(np.float64), WORKLOAD.sizes, WORKLOAD.cliques)
    terms = weights * (answers - targets) ** 2
    active = np.ones(len(WORKLOAD), bool)
    loss = jax.jit(_sparse_loss)
    np.testing.assert_allclose(float(loss(probs, targets, weights, active)), terms.sum(), rtol=1e-5)
    active[3] = False
    span = slice(WORKLOAD.offsets[3], WORKLOAD.offsets[3] + WORKLOAD.cells[3])
    np.testing.assert_allclose(
        float(loss(probs, targets, weights, active)), terms.sum() - terms[span].sum(), rtol=1e-5
    )


def test_active_marginals_are_those_with_a_masked_cell():
    rng = np.random.default_rng(3)
    for _ in range(20):
        mask = rng.random(WORKLOAD.n_queries) < rng.choice([0.0, 0.01, 0.1])
        want = [mask[o : o + c].any() for o, c in zip(WORKLOAD.offsets, WORKLOAD.cells, strict=True)]
        got = np.asarray(measured.active_marginals(jnp.asarray(mask), WORKLOAD))
        np.testing.assert_array_equal(got, want)


_largest = jax.jit(measured.largest_errors, static_argnums=(0, 6))


@pytest.mark.parametrize("k", [1, 5, 40, WORKLOAD.n_queries])
def test_largest_errors_rank_as_the_dense_top_k(k):
    """The same values (to float rounding) and, for distinct errors, the same queries as
    `lax.top_k` over the dense errors masked and floored as GEM's update masks them."""
    probs = _probs(6, 11)
    mask = _mask(11, [0, 3, 4, 7])
    rng = np.random.default_rng(11)
    targets = (rng.random(WORKLOAD.n_queries) * mask).astype(np.float32)
    floor = np.float32(0.2)
    error = np.abs(np.asarray(relaxed_marginals(probs, WORKLOAD)) - targets)
    want_value, want_index = jax.lax.top_k(np.where(mask & (error >= floor), error, -1.0), k)
    active = measured.active_marginals(jnp.asarray(mask), WORKLOAD)
    value, index = _largest(WORKLOAD, probs, targets, mask, active, floor, k)
    np.testing.assert_allclose(np.asarray(value), np.asarray(want_value), rtol=1e-5, atol=1e-6)
    chosen = np.asarray(want_value) >= 0
    assert chosen.sum() > 0
    np.testing.assert_array_equal(np.sort(np.asarray(index)[chosen]), np.sort(np.asarray(want_index)[chosen]))


@pytest.mark.parametrize("k", [1, 3, 30])
def test_tied_errors_pick_the_same_queries_as_the_dense_top_k(k):
    """Marginals 0 and 2 are the same marginal: every error of one ties with the other's, and
    `lax.top_k` takes the lower index first, on either path."""
    probs = _probs(6, 13)
    mask = _mask(13, [0, 2])
    targets = np.zeros(WORKLOAD.n_queries, np.float32)
    error = np.abs(np.asarray(relaxed_marginals(probs, WORKLOAD)) - targets)
    start = WORKLOAD.offsets[2]
    error[start : start + WORKLOAD.cells[2]] = error[: WORKLOAD.cells[0]]  # exact ties
    want_value, want_index = jax.lax.top_k(np.where(mask, error, -1.0), k)
    active = measured.active_marginals(jnp.asarray(mask), WORKLOAD)
    value, index = _largest(WORKLOAD, probs, targets, mask, active, np.float32(0.0), k)
    np.testing.assert_allclose(np.asarray(value), np.asarray(want_value), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(index), np.asarray(want_index))


def test_only_workloads_past_the_threshold_take_this_path():
    assert not measured.by_marginal(WORKLOAD)
    large = from_cliques((110, 100, 100), [(0, 1, 2)])
    assert large.n_queries > measured.DENSE_MAX_QUERIES and measured.by_marginal(large)
