"""Answers on a dense histogram over an enumerable domain."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp.domain import DataError
from jaxdp.queries import (
    all_kway,
    check_enumerable,
    downward_closure,
    from_cliques,
    histogram_marginals,
    marginal_counts,
)
from tests.queries import _reference as ref

SIZES = (3, 2, 4, 2)
_hist = jax.jit(histogram_marginals, static_argnums=1)


def test_histogram_marginals_match_brute_force():
    w = downward_closure(from_cliques(SIZES, [(0, 2, 3), (1, 2), (0, 1, 2, 3)]))
    hist = np.random.default_rng(0).random(SIZES).astype(np.float32)
    want = ref.histogram_marginals(hist.astype(np.float64), w.cliques)
    np.testing.assert_allclose(np.asarray(_hist(hist, w)), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(_hist(hist.reshape(-1), w)), want, rtol=1e-5)


def test_histogram_of_records_gives_their_counts():
    w = all_kway(SIZES, 2)
    rng = np.random.default_rng(1)
    codes = np.stack([rng.integers(0, s, 50) for s in SIZES], axis=1).astype(np.int32)
    hist = np.zeros(SIZES, np.float32)
    for row in codes:
        hist[tuple(row)] += 1
    counts = jax.jit(marginal_counts, static_argnums=1)(codes, w)
    np.testing.assert_array_equal(np.asarray(_hist(hist, w)), np.asarray(counts))


def test_domains_too_large_to_enumerate_are_refused_with_their_size():
    sizes = (1000, 1000, 1000)
    with pytest.raises(DataError, match=r"1,000,000,000 cells \(1000 x 1000 x 1000; 3\.7 GiB"):
        check_enumerable(sizes)
    with pytest.raises(DataError, match="1,000,000,000 cells"):
        histogram_marginals(jnp.zeros(1), all_kway(sizes, 1))
    assert check_enumerable(SIZES) == 48
    with pytest.raises(DataError, match="48 cells"):
        check_enumerable(SIZES, max_cells=47)


def test_wrong_histogram_shape_is_refused():
    with pytest.raises(ValueError, match="shape"):
        histogram_marginals(jnp.zeros((3, 2)), all_kway(SIZES, 1))
