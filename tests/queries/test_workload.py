"""Workloads, counting-query arrays and growing query subsets."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp.domain import DataError, Domain
from jaxdp.queries import (
    MarginalWorkload,
    ProductQueries,
    QuerySubset,
    aim_weights,
    all_kway,
    downward_closure,
    expand_marginal_mask,
    from_cliques,
    from_names,
    marginal_sensitivity,
    random_kway,
    workload_queries,
)
from jaxdp.types import Neighboring

SIZES = (3, 2, 4, 2)


def test_cell_order_is_row_major_over_ascending_attributes():
    w = from_cliques(SIZES, [(2, 0)])
    assert w.cliques == ((0, 2),)
    codes = w.cell_codes(0)
    assert codes.shape == (12, 2)
    for r, (a, b) in enumerate(codes):
        assert r == np.ravel_multi_index((a, b), (3, 4))
    assert w.strides(0) == (4, 1)


def test_offsets_and_marginal_of_query():
    w = all_kway(SIZES, 2)
    assert w.cells == tuple(SIZES[a] * SIZES[b] for a, b in itertools.combinations(range(4), 2))
    assert w.n_queries == sum(w.cells)
    moq = w.marginal_of_query()
    for i, (off, n) in enumerate(zip(w.offsets, w.cells, strict=True)):
        assert (moq[off : off + n] == i).all()


def test_random_kway_is_a_pure_function_of_the_key():
    a = random_kway(jax.random.key(3), SIZES, 2, 4)
    b = random_kway(jax.random.key(3), SIZES, 2, 4)
    c = random_kway(jax.random.key(4), SIZES, 2, 4)
    assert a == b
    assert len(set(a.cliques)) == 4 and list(a.cliques) == sorted(a.cliques)
    assert all(len(q) == 2 for q in a.cliques)
    assert a.cliques != c.cliques or random_kway(jax.random.key(5), SIZES, 2, 4) != a


def test_random_kway_large_domain_uses_rejection_sampling():
    sizes = (2,) * 40  # C(40, 5) = 658,008 < limit; C(40, 6) > 10^6
    w = random_kway(jax.random.key(0), sizes, 6, 50)
    assert len(set(w.cliques)) == 50 and all(len(c) == 6 for c in w.cliques)
    assert w == random_kway(jax.random.key(0), sizes, 6, 50)


@pytest.mark.parametrize("k, m", [(0, 1), (5, 1), (2, 0), (2, 7)])
def test_random_kway_rejects_bad_sizes(k, m):
    with pytest.raises(DataError):
        random_kway(jax.random.key(0), SIZES, k, m)


def test_random_kway_requires_a_typed_key():
    with pytest.raises(TypeError, match="typed JAX key"):
        random_kway(0, SIZES, 2, 2)


def test_from_cliques_and_from_names():
    dom = Domain.from_sizes({"a": 3, "b": 2, "c": 4})
    assert from_names(dom, [("c", "a")]).cliques == ((0, 2),)
    with pytest.raises(DataError, match="repeats"):
        from_cliques((3, 2), [(1, 1)])
    with pytest.raises(DataError):
        from_cliques((3, 2), [(0, 2)])
    w = from_cliques((3, 2), [(1, 0)], weights=[2.5])
    assert w.weights == (2.5,) and w.with_weights(None).weights is None


def test_downward_closure_lists_every_subset_once():
    w = from_cliques(SIZES, [(0, 1, 2), (1, 3)])
    closure = downward_closure(w)
    expected = {s for c in w.cliques for r in (1, 2, 3) for s in itertools.combinations(c, r)}
    assert set(closure.cliques) == expected
    assert len(closure.cliques) == len(expected)
    assert [len(c) for c in closure.cliques] == sorted(len(c) for c in closure.cliques)


def test_aim_weights_match_definition():
    w = from_cliques(SIZES, [(0, 1, 2), (1, 3)], weights=[2.0, 0.5])
    cand = downward_closure(w)
    got = aim_weights(w, cand)
    for r, wr in zip(cand.cliques, got, strict=True):
        want = 2.0 * len(set(r) & {0, 1, 2}) + 0.5 * len(set(r) & {1, 3})
        assert wr == pytest.approx(want)


def test_marginal_sensitivity():
    assert marginal_sensitivity(Neighboring.ADD_REMOVE) == (1.0, 1.0)
    l1, l2 = marginal_sensitivity(Neighboring.REPLACE_ONE, 50)
    assert l1 == pytest.approx(2 / 50) and l2 == pytest.approx(math.sqrt(2) / 50)
    with pytest.raises(ValueError):
        marginal_sensitivity(Neighboring.REPLACE_ONE)


def test_workload_queries_follow_flat_order():
    w = from_cliques(SIZES, [(1,), (0, 2), (1, 2, 3)])
    q = workload_queries(w)
    assert isinstance(q, ProductQueries) and len(q) == w.n_queries
    attrs, values = np.asarray(q.attrs), np.asarray(q.values)
    for i, (c, off) in enumerate(zip(w.cliques, w.offsets, strict=True)):
        for r, cell in enumerate(w.cell_codes(i)):
            k = len(c)
            assert tuple(attrs[off + r, :k]) == c
            assert (attrs[off + r, k:] == -1).all()
            assert tuple(values[off + r, :k]) == tuple(cell)
    cols = np.asarray(q.columns())
    offsets = np.concatenate([[0], np.cumsum(SIZES)[:-1]])
    assert cols[0, 0] == offsets[1] and (cols[0, 1:] == sum(SIZES)).all()
    sub = q.take(jnp.array([5, 0]))
    assert np.array_equal(np.asarray(sub.attrs), attrs[[5, 0]])


def test_query_subset_grows_without_retracing():
    traces = []

    @jax.jit
    def add(s, ids):
        traces.append(1)
        return s.add(ids)

    s = QuerySubset.empty(5)
    s = add(s, jnp.array([7, 2]))
    s = add(s, jnp.array([4, 9]))
    assert len(traces) == 1
    assert int(s.count) == 4
    assert np.asarray(s.ids).tolist()[:4] == [7, 2, 4, 9]
    assert np.asarray(s.mask).tolist() == [True] * 4 + [False]
    s = add(s, jnp.array([1, 3]))  # one over capacity: dropped, count capped
    assert int(s.count) == 5 and np.asarray(s.ids).tolist() == [7, 2, 4, 9, 1]
    dense = np.asarray(s.dense_mask(10))
    assert dense.tolist() == [i in (7, 2, 4, 9, 1) for i in range(10)]
    values = jnp.arange(10.0) * 10
    assert np.asarray(QuerySubset.empty(3).add(jnp.array([4])).gather(values)).tolist() == [40, 0, 0]


def test_query_subset_rejects_zero_capacity():
    with pytest.raises(ValueError):
        QuerySubset.empty(0)


def test_expand_marginal_mask():
    w = from_cliques(SIZES, [(0,), (1, 2)])
    mask = np.asarray(expand_marginal_mask(w, jnp.array([False, True])))
    assert mask.tolist() == [False] * 3 + [True] * 8


def test_workload_validation_messages():
    with pytest.raises(DataError, match="empty"):
        MarginalWorkload((2,), ())
    with pytest.raises(DataError, match="weights"):
        MarginalWorkload((2, 2), ((0,),), (-1.0,))
