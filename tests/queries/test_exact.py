"""Exact answers on records against brute-force loops; batching, chunking, tracing, sensitivity."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import datasets
from jaxdp.queries import (
    all_kway,
    counting_query_answers,
    downward_closure,
    exact_plan,
    from_cliques,
    marginal_counts,
    marginal_fractions,
    marginal_sensitivity,
    record_answers,
    workload_queries,
)
from jaxdp.queries.exact import host_marginal_counts
from jaxdp.types import Neighboring
from tests.queries import _reference as ref

SIZES = (3, 2, 5, 2, 4)

# Kernels are not jitted internally; eager execution of their loops would dominate test time.
_counts = jax.jit(marginal_counts, static_argnums=(1, 2), static_argnames=("row_chunk",))
_fractions = jax.jit(marginal_fractions, static_argnums=1)


def _codes(n, sizes=SIZES, seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, s, n) for s in sizes], axis=1).astype(np.int32)


WORKLOADS = {
    "all-3way": all_kway(SIZES, 3),
    "closure": downward_closure(from_cliques(SIZES, [(0, 2, 4), (1, 3), (0, 1, 2, 3)])),
    "repeats": from_cliques(SIZES, [(2, 4), (0,), (2, 4), (0, 1, 2, 3, 4)]),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_marginal_counts_match_brute_force(name):
    w = WORKLOADS[name]
    codes = _codes(57)
    want = ref.marginal_counts(codes, w.sizes, w.cliques)
    got = jax.jit(lambda c: marginal_counts(c, w, jnp.int32))(codes)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got), want)
    frac = jax.jit(lambda c: marginal_fractions(c, w))(codes)
    np.testing.assert_allclose(np.asarray(frac), want / 57, rtol=1e-6)


@pytest.mark.parametrize("row_chunk", [1, 7, 57, 1000])
def test_row_chunking_does_not_change_counts(row_chunk):
    w = WORKLOADS["closure"]
    codes = _codes(57, seed=1)
    got = _counts(codes, w, row_chunk=row_chunk)
    np.testing.assert_array_equal(np.asarray(got), ref.marginal_counts(codes, w.sizes, w.cliques))


def test_bundled_adult_sample_matches_brute_force():
    data = datasets.load("adult-reduced")
    codes = data.codes[:1500]
    w = all_kway(data.domain.sizes, 3)
    got = jax.jit(lambda c: marginal_counts(c, w, jnp.int32))(codes)
    np.testing.assert_array_equal(np.asarray(got), ref.marginal_counts(codes, w.sizes, w.cliques))


def test_batched_paths_equal_the_one_record_form():
    w = WORKLOADS["closure"]
    codes = _codes(23, seed=2)
    queries = workload_queries(w)
    per_record = jax.jit(jax.vmap(record_answers, in_axes=(0, None)))(codes, queries)
    assert per_record.shape == (23, w.n_queries)
    assert set(np.unique(np.asarray(per_record))) <= {0.0, 1.0}
    one_record_sum = np.asarray(per_record).sum(axis=0)
    np.testing.assert_array_equal(np.asarray(_counts(codes, w)), one_record_sum)
    general = jax.jit(counting_query_answers, static_argnames=("row_chunk", "query_chunk"))(
        codes, queries, row_chunk=5, query_chunk=16
    )
    np.testing.assert_array_equal(np.asarray(general), one_record_sum)


def test_counting_query_answers_on_a_subset():
    w = WORKLOADS["all-3way"]
    codes = _codes(40, seed=3)
    ids = jnp.array([0, 17, 5, w.n_queries - 1])
    got = jax.jit(counting_query_answers, static_argnums=2)(codes, workload_queries(w).take(ids), jnp.int32)
    want = ref.marginal_counts(codes, w.sizes, w.cliques)[np.asarray(ids)]
    np.testing.assert_array_equal(np.asarray(got), want)


def test_two_workloads_of_the_same_shapes_compile_once():
    sizes = (3, 3, 3, 3)
    w1 = from_cliques(sizes, [(0, 1, 2), (1, 3)])
    w2 = from_cliques(sizes, [(1, 2, 3), (0, 2)])
    codes = _codes(31, sizes, seed=4)
    traces = []

    @jax.jit
    def answer(c, plan):
        traces.append(1)
        return marginal_counts(c, plan, jnp.int32)

    for w in (w1, w2):
        got = answer(codes, exact_plan(w))
        np.testing.assert_array_equal(np.asarray(got), ref.marginal_counts(codes, sizes, w.cliques))
    assert len(traces) == 1


def test_program_size_does_not_grow_with_the_workload():
    # One loop over the marginals: 286 of ADULT's 3-way marginals lower to the same number of
    # scatters as 2 of them (a loop per marginal, or per histogram size, would grow with them).
    sizes = datasets.domain("adult").sizes
    codes = jnp.zeros((10, len(sizes)), jnp.int32)

    def n_scatters(workload):
        text = (
            jax.jit(marginal_counts, static_argnums=2).lower(codes, exact_plan(workload), jnp.int32).as_text()
        )
        return text.count("stablehlo.scatter")

    assert n_scatters(all_kway(sizes, 3)) == n_scatters(from_cliques(sizes, [(0, 1), (2, 3)])) >= 1


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_host_counts_match_brute_force(name):
    """`host_marginal_counts` (NumPy, for released records) against the loops, exactly."""
    w = WORKLOADS[name]
    codes = np.asarray(_codes(57))
    got = host_marginal_counts(codes, w)
    np.testing.assert_array_equal(got, ref.marginal_counts(codes, w.sizes, w.cliques))
    with pytest.raises(ValueError, match="shape"):
        host_marginal_counts(codes[:, :2], w)


def test_repeated_marginals_are_counted_once_and_gathered():
    plan = exact_plan(WORKLOADS["repeats"])
    assert plan.attrs.shape[0] == 3 and plan.flat_index is not None
    assert exact_plan(WORKLOADS["all-3way"]).flat_index is None  # no repeats: no gather


@pytest.mark.parametrize("seed", range(5))
def test_neighbouring_datasets_move_each_marginal_by_its_sensitivity(seed):
    w = downward_closure(all_kway(SIZES, 3))
    rng = np.random.default_rng(100 + seed)
    codes = _codes(30, seed=200 + seed)
    n = codes.shape[0]
    replaced = codes.copy()
    replaced[rng.integers(n)] = _codes(1, seed=300 + seed)[0]
    removed = np.delete(codes, rng.integers(n), axis=0)

    frac = np.asarray(_fractions(codes, w), np.float64)
    frac_replaced = np.asarray(_fractions(replaced, w), np.float64)
    counts = np.asarray(_counts(codes, w, jnp.int32))
    counts_removed = np.asarray(_counts(removed, w, jnp.int32))
    l1_rep, l2_rep = marginal_sensitivity(Neighboring.REPLACE_ONE, n)
    l1_add, l2_add = marginal_sensitivity(Neighboring.ADD_REMOVE)
    for off, cells in zip(w.offsets, w.cells, strict=True):
        d = frac[off : off + cells] - frac_replaced[off : off + cells]
        assert np.abs(d).sum() <= l1_rep + 1e-6
        assert math.sqrt((d**2).sum()) <= l2_rep + 1e-6
        e = counts[off : off + cells] - counts_removed[off : off + cells]
        assert np.abs(e).sum() == l1_add  # removing a record always moves exactly one cell by 1
        assert math.sqrt((e**2).sum()) == l2_add


def test_bad_codes_are_refused():
    w = WORKLOADS["all-3way"]
    with pytest.raises(ValueError, match="shape"):
        marginal_counts(np.zeros((4, 3), np.int32), w)
    with pytest.raises(TypeError, match="integers"):
        marginal_counts(np.zeros((4, 5), np.float32), w)
    with pytest.raises(ValueError, match="no records"):
        marginal_counts(np.zeros((0, 5), np.int32), w)
