"""Threshold queries: brute force, one-record forms, sigmoid convergence, gradients, key families."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp.domain import DataError
from jaxdp.queries import (
    LinearThresholdQueries,
    linear_threshold_answers,
    linear_threshold_on_record,
    linear_threshold_relaxed,
    mixed_marginal_answers,
    mixed_marginal_grid,
    mixed_query_on_record,
    mixed_query_relaxed,
    random_linear_thresholds,
    random_mixed_marginals,
    relaxed_linear_threshold_answers,
    relaxed_mixed_marginal_answers,
    soft_leq,
    tempered_sigmoid,
)

SIZES = (3, 2, 4)
N_NUM = 3
OFFSETS = np.concatenate([[0], np.cumsum(SIZES)[:-1]])

_mixed = jax.jit(mixed_marginal_answers, static_argnames=("row_chunk", "query_chunk"))
_mixed_relaxed = jax.jit(relaxed_mixed_marginal_answers, static_argnames=("row_chunk", "query_chunk"))
_linear = jax.jit(linear_threshold_answers, static_argnames=("row_chunk", "query_chunk"))
_linear_relaxed = jax.jit(relaxed_linear_threshold_answers, static_argnames=("row_chunk", "query_chunk"))


def _records(n, seed=0):
    rng = np.random.default_rng(seed)
    codes = np.stack([rng.integers(0, s, n) for s in SIZES], axis=1).astype(np.int32)
    return codes, rng.random((n, N_NUM)).astype(np.float32)


def _relaxed_rows(n, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    probs = np.concatenate([rng.dirichlet(np.ones(s), n) for s in SIZES], axis=1)
    return probs.astype(dtype), rng.random((n, N_NUM)).astype(dtype)


def _one_hot(codes):
    return np.concatenate([np.eye(s, dtype=np.float32)[codes[:, a]] for a, s in enumerate(SIZES)], 1)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# -- brute-force references (loops over records) --------------------------------------------------


def _ref_mixed(codes, numeric, q):
    ca, cv, na, th = (np.asarray(x) for x in (q.cat_attrs, q.cat_values, q.num_attrs, q.thresholds))
    out = np.zeros(len(ca))
    for i in range(len(ca)):
        for r in range(len(codes)):
            cat = all(codes[r, a] == v for a, v in zip(ca[i], cv[i], strict=True))
            num = all(numeric[r, a] <= t for a, t in zip(na[i], th[i], strict=True))
            out[i] += cat and num
    return out


def _ref_mixed_relaxed(probs, numeric, q, sigma):
    ca, cv, na, th = (np.asarray(x) for x in (q.cat_attrs, q.cat_values, q.num_attrs, q.thresholds))
    out = np.zeros(len(ca))
    for i in range(len(ca)):
        for r in range(len(probs)):
            value = 1.0
            for a, v in zip(ca[i], cv[i], strict=True):
                value *= probs[r, OFFSETS[a] + v]
            for a, t in zip(na[i], th[i], strict=True):
                value *= _sigmoid(sigma * (float(t) - float(numeric[r, a])))
            out[i] += value
    return out / len(probs)


def _ref_scores(numeric, theta, attrs):
    scores = np.zeros((len(numeric), len(theta)))
    for r in range(len(numeric)):
        for i in range(len(theta)):
            scores[r, i] = sum(float(t) * float(numeric[r, a]) for t, a in zip(theta[i], attrs, strict=True))
    return scores


def _ref_linear(codes, numeric, q):
    la, lv, theta, tau = (np.asarray(x) for x in (q.label_attr, q.label_value, q.theta, q.tau))
    scores = _ref_scores(numeric, theta, q.num_attrs)
    out = np.zeros(len(la))
    for i in range(len(la)):
        for r in range(len(codes)):
            out[i] += scores[r, i] <= tau[i] and codes[r, la[i]] == lv[i]
    return out, scores


def _ref_linear_relaxed(probs, numeric, q, sigma):
    la, lv, theta, tau = (np.asarray(x) for x in (q.label_attr, q.label_value, q.theta, q.tau))
    scores = _ref_scores(numeric, theta, q.num_attrs)
    out = np.zeros(len(la))
    for i in range(len(la)):
        for r in range(len(probs)):
            out[i] += probs[r, OFFSETS[la[i]] + lv[i]] * _sigmoid(sigma * (tau[i] - scores[r, i]))
    return out / len(probs)


# -- mixed marginals ------------------------------------------------------------------------------


def test_mixed_marginal_grid_order():
    q = mixed_marginal_grid(SIZES, N_NUM, [2, 0], [1, 2], [[0.2, 0.5], [0.7]])
    assert len(q) == 3 * 4 * 2 * 1
    ca, cv, th = np.asarray(q.cat_attrs), np.asarray(q.cat_values), np.asarray(q.thresholds)
    assert (ca == [0, 2]).all() and (np.asarray(q.num_attrs) == [1, 2]).all()
    assert cv[:4].tolist() == [[0, 0], [0, 0], [0, 1], [0, 1]]  # cells row-major, thresholds minor
    np.testing.assert_allclose(th[:2], [[0.2, 0.7], [0.5, 0.7]])
    with pytest.raises(DataError):
        mixed_marginal_grid(SIZES, N_NUM, [0, 0], [1], [0.5])
    with pytest.raises(DataError):
        mixed_marginal_grid(SIZES, N_NUM, [0], [3], [0.5])


@pytest.mark.parametrize("kc, kr, chunked", [(2, 1, True), (0, 2, False), (3, 3, False)])
def test_mixed_marginals_match_brute_force(kc, kr, chunked):
    q = random_mixed_marginals(jax.random.key(kc * 10 + kr), SIZES, N_NUM, 37, kc, kr)
    chunks = {"row_chunk": 8, "query_chunk": 16} if chunked else {}
    codes, numeric = _records(29, seed=kc + kr)
    want = _ref_mixed(codes, numeric, q)
    np.testing.assert_array_equal(np.asarray(_mixed(codes, numeric, q, **chunks)), want)
    probs, num = _relaxed_rows(6, seed=kc)
    want_relaxed = _ref_mixed_relaxed(probs, num, q, 7.0)
    got_relaxed = _mixed_relaxed(probs, num, q, 7.0, **chunks)
    np.testing.assert_allclose(np.asarray(got_relaxed), want_relaxed, rtol=1e-5, atol=1e-8)


def test_mixed_batched_paths_equal_one_record_forms():
    q = random_mixed_marginals(jax.random.key(21), SIZES, N_NUM, 37, 2, 1)
    codes, numeric = _records(15, seed=3)
    args = (q.cat_attrs, q.cat_values, q.num_attrs, q.thresholds)
    per = jax.jit(jax.vmap(jax.vmap(mixed_query_on_record, (0, 0, 0, 0, None, None)), (None,) * 4 + (0, 0)))
    np.testing.assert_array_equal(
        np.asarray(per(*args, codes, numeric)).sum(0), np.asarray(_mixed(codes, numeric, q))
    )
    probs, num = _relaxed_rows(9, seed=4)
    offsets = jnp.asarray(OFFSETS, jnp.int32)
    per_r = jax.jit(
        jax.vmap(
            jax.vmap(mixed_query_relaxed, (0, 0, 0, 0, None, None, None, None)),
            (None,) * 4 + (0, 0, None, None),
        )
    )
    np.testing.assert_allclose(
        np.asarray(per_r(*args, probs, num, 5.0, offsets)).mean(0),
        np.asarray(_mixed_relaxed(probs, num, q, 5.0)),
        rtol=1e-5,
    )


# -- linear thresholds ----------------------------------------------------------------------------


def _family(m=40, seed=0):
    return random_linear_thresholds(jax.random.key(seed), SIZES, N_NUM, m, label_attrs=(0, 2))


def test_linear_thresholds_match_brute_force():
    fam = _family()
    q = fam.materialize()
    codes, numeric = _records(33, seed=5)
    want, scores = _ref_linear(codes, numeric, q)
    # A float32 score may round across tau only for a record sitting on the threshold.
    near = np.abs(scores - np.asarray(q.tau)[None]).min(axis=0) < 1e-5
    got = np.asarray(_linear(codes, numeric, fam, row_chunk=8, query_chunk=16))
    np.testing.assert_array_equal(got[~near], want[~near])
    probs, num = _relaxed_rows(7, seed=6)
    want_relaxed = _ref_linear_relaxed(probs, num, q, 4.0)
    for queries in (q, fam):  # explicit arrays and the key-defined family give the same answers
        got_relaxed = _linear_relaxed(probs, num, queries, 4.0, row_chunk=3, query_chunk=16)
        np.testing.assert_allclose(np.asarray(got_relaxed), want_relaxed, rtol=1e-5, atol=1e-8)


def test_linear_batched_paths_equal_one_record_forms():
    q = _family(seed=1).materialize()
    codes, numeric = _records(12, seed=7)
    attrs = jnp.asarray(q.num_attrs, jnp.int32)
    args = (q.label_attr, q.label_value, q.theta, q.tau)
    per = jax.jit(
        jax.vmap(
            jax.vmap(linear_threshold_on_record, (0, 0, 0, 0, None, None, None)),
            (None,) * 4 + (0, 0, None),
        )
    )
    np.testing.assert_array_equal(
        np.asarray(per(*args, codes, numeric, attrs)).sum(0),
        np.asarray(_linear(codes, numeric, q)),
    )
    probs, num = _relaxed_rows(8, seed=8)
    per_r = jax.jit(
        jax.vmap(
            jax.vmap(linear_threshold_relaxed, (0, 0, 0, 0, None, None, None, None, None)),
            (None,) * 4 + (0, 0, None, None, None),
        )
    )
    offsets = jnp.asarray(OFFSETS, jnp.int32)
    np.testing.assert_allclose(
        np.asarray(per_r(*args, probs, num, attrs, 3.0, offsets)).mean(0),
        np.asarray(_linear_relaxed(probs, num, q, 3.0)),
        rtol=1e-5,
    )


def test_random_family_is_key_defined_and_stores_nothing_per_query():
    fam = _family(200_000, seed=3)
    assert len(jax.tree_util.tree_leaves(fam)) == 1  # only the key
    params = jax.jit(lambda f, i: f.params(i))
    ids = jnp.array([0, 5, 199_999])
    a = params(fam, ids)
    b = params(_family(200_000, seed=3), ids)
    c = params(_family(200_000, seed=4), ids)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert not np.array_equal(np.asarray(a[2]), np.asarray(c[2]))


@pytest.mark.slow
def test_200k_random_queries_answer_in_bounded_memory():
    fam = _family(200_000, seed=3)
    codes, numeric = _records(16, seed=9)
    counts = np.asarray(_linear(codes, numeric, fam, query_chunk=8192))
    assert counts.shape == (200_000,) and counts.min() >= 0 and counts.max() <= 16
    ids = np.array([0, 77_777, 199_999])
    la, lv, theta, tau = (np.asarray(x) for x in jax.jit(fam.params)(jnp.asarray(ids)))
    subset = LinearThresholdQueries(la, lv, theta, tau, fam.num_attrs, fam.sizes, fam.n_numeric)
    want, _ = _ref_linear(codes, numeric, subset)
    np.testing.assert_array_equal(counts[ids], want)


def test_random_family_distribution():
    # RAP++ 5.1: theta ~ N(0, I)/sqrt(|R|), tau ~ N(0, 1), labels uniform. With 20,000 draws the
    # standard errors are ~0.004 (means) and ~0.01 relative (variances); 6 SE bounds fail by
    # chance with probability < 1e-8 per check.
    m = 20_000
    fam = _family(m, seed=11)
    la, lv, theta, tau = (np.asarray(x) for x in jax.jit(fam.params)(jnp.arange(m)))
    r = N_NUM
    assert abs(theta.mean()) < 6 * math.sqrt(1 / r / (m * r))
    assert abs(theta.var() * r - 1) < 6 * math.sqrt(2 / (m * r))
    assert abs(tau.mean()) < 6 / math.sqrt(m) and abs(tau.var() - 1) < 6 * math.sqrt(2 / m)
    assert abs((la == 0).mean() - 0.5) < 6 * 0.5 / math.sqrt(m)
    assert set(np.unique(lv[la == 2])) == {0, 1, 2, 3} and set(np.unique(lv[la == 0])) == {0, 1, 2}


def test_family_validation():
    with pytest.raises(DataError):
        random_linear_thresholds(jax.random.key(0), SIZES, N_NUM, 10, label_attrs=())
    with pytest.raises(DataError):
        random_linear_thresholds(jax.random.key(0), SIZES, N_NUM, 10, (0,), num_attrs=(3,))
    with pytest.raises(TypeError):
        random_linear_thresholds(7, SIZES, N_NUM, 10, (0,))


# -- the tempered sigmoid -------------------------------------------------------------------------


def test_tempered_sigmoid_definition():
    x, tau = jnp.array([0.1, 0.5, 0.9]), 0.5
    np.testing.assert_allclose(tempered_sigmoid(x, tau, 8.0), _sigmoid(8.0 * (np.array(x) - 0.5)))
    np.testing.assert_allclose(soft_leq(x, tau, 8.0), 1 - np.asarray(tempered_sigmoid(x, tau, 8.0)))


def test_sigmoid_relaxation_converges_to_the_hard_threshold():
    codes, numeric = _records(40, seed=12)
    # Keep every value at least 0.03 from the mixed thresholds 0.25, 0.5, 0.75.
    rng = np.random.default_rng(17)
    base = np.array([0.1, 0.2, 0.35, 0.4, 0.6, 0.65, 0.85, 0.9])
    numeric = (rng.choice(base, numeric.shape) + rng.uniform(-0.02, 0.02, numeric.shape)).astype(np.float32)
    probs = _one_hot(codes)
    mixed = mixed_marginal_grid(SIZES, N_NUM, [0], [1, 2], [0.25, 0.5, 0.75])
    full = _family(seed=13).materialize()
    _, scores = _ref_linear(codes, numeric, full)
    margins = np.abs(scores - np.asarray(full.tau)[None]).min(axis=0)
    keep = margins > 0.01  # drop queries with a record right at the threshold
    linear = LinearThresholdQueries(
        *(np.asarray(x)[keep] for x in (full.label_attr, full.label_value, full.theta, full.tau)),
        full.num_attrs,
        full.sizes,
        full.n_numeric,
    )
    exact_mixed = np.asarray(_mixed(codes, numeric, mixed)) / 40
    exact_linear = np.asarray(_linear(codes, numeric, linear)) / 40
    # Each row's relaxed value differs from its hard value by at most sigmoid(-sigma * margin)
    # per soft factor, where margin is the row's distance to the threshold.
    margin_mixed = np.abs(numeric[:, 1:3, None] - np.array([0.25, 0.5, 0.75])).min()
    margin_linear = margins[keep].min()
    assert margin_mixed > 0.029 and keep.sum() > 10
    errors = []
    for sigma in (10.0, 100.0, 1000.0, 10000.0):
        e_m = np.abs(np.asarray(_mixed_relaxed(probs, numeric, mixed, sigma)) - exact_mixed).max()
        e_l = np.abs(np.asarray(_linear_relaxed(probs, numeric, linear, sigma)) - exact_linear).max()
        assert e_m <= 2 * _sigmoid(-sigma * margin_mixed) + 1e-6
        assert e_l <= _sigmoid(-sigma * margin_linear) + 1e-6
        errors.append(max(e_m, e_l))
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-6


# -- gradients ------------------------------------------------------------------------------------


def _finite_difference_check(loss, x, coords, eps=1e-6):
    grad = np.asarray(jax.jit(jax.grad(loss))(x))
    for idx in coords:
        step = np.zeros_like(x)
        step[idx] = eps
        numeric = (float(loss(x + step)) - float(loss(x - step))) / (2 * eps)
        assert grad[idx] == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_threshold_gradients_match_finite_differences():
    # Queries are drawn outside x64 mode (their parameters are data, not what is differentiated).
    mixed = random_mixed_marginals(jax.random.key(2), SIZES, N_NUM, 37, 2, 1)
    linear = _family(seed=15).materialize()
    with jax.enable_x64(True):
        probs, num = _relaxed_rows(5, seed=14, dtype=np.float64)
        rng = np.random.default_rng(16)
        target = rng.random(77) * 0.2
        coords_p = [tuple(rng.integers(0, n) for n in probs.shape) for _ in range(6)]
        coords_x = [tuple(rng.integers(0, n) for n in num.shape) for _ in range(6)]

        def answers(p, x):
            a = relaxed_mixed_marginal_answers(p, x, mixed, 6.0)
            b = relaxed_linear_threshold_answers(p, x, linear, 6.0)
            return jnp.concatenate([a, b])

        loss = jax.jit(lambda p, x: jnp.sum((answers(p, x) - target) ** 2))
        _finite_difference_check(lambda p: loss(p, num), probs, coords_p)
        _finite_difference_check(lambda x: loss(probs, x), num, coords_x)
