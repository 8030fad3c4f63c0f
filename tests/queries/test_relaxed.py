"""Relaxed answers on probability rows: brute force, one-hot parity, paths, gradients, tracing."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp.domain import Categorical, Domain, Numeric
from jaxdp.queries import (
    all_kway,
    categorical_columns,
    downward_closure,
    from_cliques,
    marginal_counts,
    product_query_answers,
    random_kway,
    relaxed_marginals,
    relaxed_plan,
    row_answers,
    workload_queries,
)
from tests.queries import _reference as ref

SIZES = (3, 2, 5, 2, 4)
WORKLOADS = {
    "all-3way": all_kway(SIZES, 3),
    "all-2way": all_kway(SIZES, 2),
    "closure": downward_closure(from_cliques(SIZES, [(0, 2, 4), (1, 3), (0, 1, 2, 3)])),
    "mixed-k": from_cliques(SIZES, [(2, 4), (0,), (2, 4), (0, 1, 2, 3, 4), (1, 2, 4), (3,)]),
}

_relaxed = jax.jit(relaxed_marginals, static_argnums=1, static_argnames=("row_chunk",))
_gather = jax.jit(product_query_answers, static_argnames=("row_chunk", "query_chunk"))


def _probs(n, sizes=SIZES, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.dirichlet(np.ones(s), n) for s in sizes], axis=1).astype(dtype)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_relaxed_marginals_match_brute_force(name):
    w = WORKLOADS[name]
    probs = _probs(6)
    want = ref.relaxed_marginals(probs.astype(np.float64), w.sizes, w.cliques)
    np.testing.assert_allclose(np.asarray(_relaxed(probs, w)), want, rtol=2e-5, atol=1e-7)


def test_one_hot_rows_give_exact_fractions():
    w = WORKLOADS["closure"]
    rng = np.random.default_rng(1)
    codes = np.stack([rng.integers(0, s, 40) for s in SIZES], axis=1).astype(np.int32)
    one_hot = np.concatenate([np.eye(s, dtype=np.float32)[codes[:, a]] for a, s in enumerate(SIZES)], 1)
    counts = jax.jit(marginal_counts, static_argnums=1)(codes, w)
    np.testing.assert_allclose(np.asarray(_relaxed(one_hot, w)), np.asarray(counts) / 40, atol=1e-6)


@pytest.mark.parametrize("row_chunk", [1, 4, 7, 1000])
def test_row_chunking_does_not_change_answers(row_chunk):
    w = WORKLOADS["mixed-k"]
    probs = _probs(9, seed=2)
    want = ref.relaxed_marginals(probs.astype(np.float64), w.sizes, w.cliques)
    got = _relaxed(probs, w, row_chunk=row_chunk)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-7)


def test_row_weights():
    w = WORKLOADS["closure"]
    probs = _probs(5, seed=3)
    weights = np.array([0.1, 0.4, 0.0, 0.3, 0.2], np.float32)
    want = ref.relaxed_marginals(probs.astype(np.float64), w.sizes, w.cliques, weights)
    got = jax.jit(functools.partial(relaxed_marginals, workload=w, row_chunk=2))(probs, row_weights=weights)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-7)
    gathered = _gather(probs, workload_queries(w), row_weights=weights)
    np.testing.assert_allclose(np.asarray(gathered), want, rtol=2e-5, atol=1e-7)


def test_gather_path_and_one_row_form_equal_the_pivot_path():
    w = WORKLOADS["closure"]
    probs = _probs(11, seed=4)
    queries = workload_queries(w)
    pivot = np.asarray(_relaxed(probs, w))
    gathered = _gather(probs, queries, row_chunk=4, query_chunk=32)
    np.testing.assert_allclose(np.asarray(gathered), pivot, rtol=2e-5, atol=1e-7)
    per_row = jax.jit(jax.vmap(row_answers, in_axes=(0, None)))(probs, queries)
    np.testing.assert_allclose(np.asarray(per_row).mean(axis=0), pivot, rtol=2e-5, atol=1e-7)
    ids = jnp.array([3, 0, w.n_queries - 1])
    subset = _gather(probs, queries.take(ids))
    np.testing.assert_allclose(np.asarray(subset), pivot[np.asarray(ids)], rtol=2e-5, atol=1e-7)


def _finite_difference_check(loss, x, coords, eps=1e-6):
    grad = np.asarray(jax.grad(loss)(x))
    for idx in coords:
        step = np.zeros_like(x)
        step[idx] = eps
        numeric = (float(loss(x + step)) - float(loss(x - step))) / (2 * eps)
        assert grad[idx] == pytest.approx(numeric, rel=1e-6, abs=1e-9)
    return grad


def test_gradients_match_finite_differences():
    w = WORKLOADS["mixed-k"]
    with jax.enable_x64(True):
        probs = _probs(7, seed=5, dtype=np.float64)
        rng = np.random.default_rng(6)
        target = rng.random(w.n_queries) * 0.05
        weights = rng.random(w.n_queries)

        @jax.jit
        def loss(p):
            a = relaxed_marginals(p, w, row_chunk=3)  # chunked: scan + custom VJP
            return jnp.sum(weights * (a - target) ** 2)

        coords = [tuple(rng.integers(0, n) for n in probs.shape) for _ in range(12)]
        grad = _finite_difference_check(loss, probs, coords)

        @jax.jit
        def gather_loss(p):
            a = product_query_answers(p, workload_queries(w), row_chunk=3, query_chunk=64)
            return jnp.sum(weights * (a - target) ** 2)

        np.testing.assert_allclose(np.asarray(jax.grad(gather_loss)(probs)), grad, rtol=1e-9, atol=1e-12)


def test_gradient_with_row_weights_matches_finite_differences():
    w = WORKLOADS["closure"]
    with jax.enable_x64(True):
        probs = _probs(4, seed=7, dtype=np.float64)
        target = np.random.default_rng(8).random(w.n_queries) * 0.05

        @jax.jit
        def loss(v):
            a = relaxed_marginals(probs, w, row_weights=jax.nn.softmax(v), row_chunk=3)
            return jnp.sum((a - target) ** 2)

        _finite_difference_check(loss, np.array([0.3, -0.2, 0.1, 0.5]), [(0,), (1,), (2,), (3,)])


def test_two_workloads_of_the_same_shapes_compile_once():
    sizes = (3, 3, 3, 3)
    # Same pivot layout (one pivot of size 3 with heads {(), one attribute} and one last
    # attribute), different attributes: the attribute indices are array leaves of the plan.
    w1 = from_cliques(sizes, [(0, 1, 2), (1, 2)])
    w2 = from_cliques(sizes, [(1, 2, 3), (2, 3)])
    probs = _probs(5, sizes, seed=9)
    traces = []

    @jax.jit
    def answer(p, plan):
        traces.append(1)
        return relaxed_marginals(p, plan)

    for w in (w1, w2):
        want = ref.relaxed_marginals(probs.astype(np.float64), sizes, w.cliques)
        np.testing.assert_allclose(np.asarray(answer(probs, relaxed_plan(w))), want, rtol=2e-5)
    assert len(traces) == 1


def test_one_matmul_per_pivot_attribute():
    plan = relaxed_plan(all_kway((9, 16, 7, 15, 6, 5, 2, 42, 2, 10, 13, 6, 10), 3))
    assert len(plan.pivot_sizes) == 11  # pivots are the 2nd..12th attributes, not 286 marginals


def test_bad_probs_are_refused():
    w = WORKLOADS["all-2way"]
    with pytest.raises(ValueError, match="shape"):
        relaxed_marginals(np.zeros((3, 4), np.float32), w)
    with pytest.raises(TypeError, match="floating"):
        relaxed_marginals(np.zeros((3, sum(SIZES)), np.int32), w)
    with pytest.raises(ValueError, match="row_weights"):
        relaxed_marginals(_probs(3), w, row_weights=np.ones(2, np.float32))


def test_categorical_columns_of_a_mixed_domain():
    dom = Domain((Categorical("a", 3), Numeric("x", 0.0, 1.0), Categorical("b", 2)))
    assert categorical_columns(dom).tolist() == [0, 1, 2, 4, 5]


@pytest.mark.parametrize("k", [1, 2, 4])
def test_size_one_attributes_and_single_kind_workloads(k):
    sizes = (1, 3, 2, 1)
    w = all_kway(sizes, k)
    probs = _probs(6, sizes, seed=10)
    want = ref.relaxed_marginals(probs.astype(np.float64), sizes, w.cliques)
    np.testing.assert_allclose(np.asarray(_relaxed(probs, w)), want, rtol=2e-5, atol=1e-7)


# private-pgm's 14-attribute ADULT (../shared/data/private-pgm/adult-domain.json), sizes only.
ADULT14_SIZES = (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2)


def _value_and_grad_program(workload, rows: int):
    """The lowered value-and-grad of an L2 loss (plan and targets are arguments) and how many
    programs its first call builds."""
    from tests.conftest import programs_built

    def loss(p, plan, target):
        return jnp.sum((relaxed_marginals(p, plan, row_chunk=rows // 2) - target) ** 2)

    vg = jax.jit(jax.value_and_grad(loss))
    args = (
        _probs(rows, workload.sizes, seed=2),
        relaxed_plan(workload),
        np.zeros(workload.n_queries, np.float32),
    )
    with programs_built() as built:
        jax.block_until_ready(vg(*args))
    return vg.lower(*args).as_text(), len(built)


def test_value_and_grad_program_stays_flat_in_the_number_of_marginals():
    # The kernel is unrolled per pivot attribute, never per marginal: 35 or all 364 3-way
    # marginals of ADULT-14 give programs of the same size, and one program each (two chunks, so
    # the chunk loop and its backward loop are in it).
    few = random_kway(jax.random.key(3), ADULT14_SIZES, 3, 35)
    every = all_kway(ADULT14_SIZES, 3)
    (text_few, built_few), (text_every, built_every) = (_value_and_grad_program(w, 16) for w in (few, every))
    assert built_few == built_every == 1
    ops_few, ops_every = (len(re.findall(r"^\s*%\S+ = ", t, re.MULTILINE)) for t in (text_few, text_every))
    assert max(ops_few, ops_every) <= 1.5 * min(ops_few, ops_every), (ops_few, ops_every)
    # Three matmuls per pivot attribute (ADULT-14 has 12): one forward, two backward.
    assert text_every.count("dot_general") == 3 * 12
    # Two scatter-adds whatever the pivots: the gradient of the one gather of every block, and of
    # the answers' gather from the pivots' sums (a gather per block compiled 25 here).
    assert text_every.count('"stablehlo.scatter"') == 2
