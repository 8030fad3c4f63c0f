"""Threshold queries on mixed-type data (RAP++, Vietri et al. 2022, Sections 2.1 and 3): the
tempered sigmoid, and class-conditional linear thresholds; mixed marginals are in
`jaxdp.queries.mixed`.

Numeric columns live in [0, 1] (the domain's declared [lower, upper] normalised), categorical
columns are codes. Records are `(codes (n, n_cat) int, numeric (n, n_num) float)`; relaxed rows
are `(probs (K, sum of cat sizes), numeric (K, n_num))`.

Two query classes, each with an exact form on records (hard thresholds, answers are counts) and a
relaxed form on relaxed rows (tempered sigmoids, answers are means over rows):

- mixed marginals (Definition 3): 1{x_C = y} * prod_{j in R} 1{x_j <= tau_j};
- class-conditional linear thresholds (Definition 4): 1{<theta, x_R> <= tau and x_i = y}.

Relaxation: RAP++ Definition 11 defines the tempered sigmoid f^[sigma]_tau(x) = 1 / (1 +
exp(-sigma (x - tau))), a smooth 1{x >= tau}. The queries here count x <= tau, so they use
1 - f^[sigma]_tau(x) = sigmoid(sigma (tau - x)) (`soft_leq`), which tends to 1{x <= tau} for every
x != tau as sigma grows. Categorical conditions become products of probabilities, as in product
queries.

Random families follow RAP++ Section 5.1: theta ~ N(0, I) / sqrt(|R|), tau ~ N(0, 1), a label
attribute i uniform over the given labels and y uniform over its values. `RandomLinearThresholds`
holds only a key: each query's parameters are regenerated from fold_in(key, q) inside the kernel,
so 200,000 queries cost no memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.domain import DataError
from jaxdp.keys import fold_in, require_key
from jaxdp.queries._chunks import DEFAULT_QUERY_CHUNK, DEFAULT_ROW_CHUNK, sum_over_rows
from jaxdp.types import Array, Key, pytree_dataclass, static_field

_HIGHEST = jax.lax.Precision.HIGHEST


def tempered_sigmoid(x: Array, tau: Array, sigma: Array | float) -> Array:
    """RAP++ Definition 11: f^[sigma]_tau(x) = 1 / (1 + exp(-sigma (x - tau))), a soft 1{x >= tau}."""
    return jax.nn.sigmoid(sigma * (x - tau))


def soft_leq(x: Array, tau: Array, sigma: Array | float) -> Array:
    """1 - f^[sigma]_tau(x) = sigmoid(sigma (tau - x)): the relaxation of 1{x <= tau}."""
    return jax.nn.sigmoid(sigma * (tau - x))


def _leq(x: Array, tau: Array, sigma: Array | float | None) -> Array:
    """soft_leq at inverse temperature sigma, or the hard 1{x <= tau} when sigma is None."""
    if sigma is None:
        return (x <= tau).astype(jnp.float32)
    return soft_leq(x, tau, sigma)


def _offsets(sizes: Sequence[int]) -> Array:
    return jnp.asarray(np.concatenate([[0], np.cumsum(sizes)[:-1]]), jnp.int32)


def _check_rows(a: Array, b: Array, n_a: int, n_b: int, names: tuple[str, str]) -> None:
    if a.ndim != 2 or a.shape[1] != n_a:
        raise ValueError(f"{names[0]} must have shape (n_rows, {n_a}), got {tuple(a.shape)}")
    if b.ndim != 2 or b.shape[1] != n_b or b.shape[0] != a.shape[0]:
        raise ValueError(f"{names[1]} must have shape ({a.shape[0]}, {n_b}), got {tuple(b.shape)}")
    if a.shape[0] == 0:
        raise ValueError("no rows given")


# -- mixed marginals ------------------------------------------------------------------------------


# -- class-conditional linear thresholds ----------------------------------------------------------


@pytree_dataclass
class LinearThresholdQueries:
    """Explicit class-conditional linear threshold queries 1{<theta, x_R> <= tau and x_i = y}.

    Attributes:
        label_attr: (m,) int32 categorical attribute i.
        label_value: (m,) int32 value y.
        theta: (m, |R|) float32 weights over the numeric attributes R.
        tau: (m,) float32 thresholds.
        num_attrs: the numeric attributes R (static, shared by all queries).
        sizes: categorical sizes (static).
        n_numeric: number of numeric attributes (static).
    """

    label_attr: Array
    label_value: Array
    theta: Array
    tau: Array
    num_attrs: tuple[int, ...] = static_field()
    sizes: tuple[int, ...] = static_field()
    n_numeric: int = static_field()

    @property
    def n_queries(self) -> int:
        return int(self.label_attr.shape[0])

    def __len__(self) -> int:
        return self.n_queries

    def take(self, ids: Array) -> LinearThresholdQueries:
        """The queries at `ids` (traceable, fixed shape)."""
        la, lv, theta, tau = self.params(ids)
        return LinearThresholdQueries(la, lv, theta, tau, self.num_attrs, self.sizes, self.n_numeric)

    def params(self, ids: Array) -> tuple[Array, Array, Array, Array]:
        """(label_attr, label_value, theta, tau) of the queries at `ids`."""
        ids = jnp.asarray(ids)
        return (
            jnp.asarray(self.label_attr)[ids],
            jnp.asarray(self.label_value)[ids],
            jnp.asarray(self.theta)[ids],
            jnp.asarray(self.tau)[ids],
        )


@pytree_dataclass
class RandomLinearThresholds:
    """A key-defined family of class-conditional linear threshold queries (RAP++ Section 5.1).

    Query q's parameters come from fold_in(key, q): label i uniform over `label_attrs`, y uniform
    over its values, theta ~ N(0, I) / sqrt(|R|), tau ~ N(0, 1). Nothing per query is stored.
    The key defines a public query set (not noise): use a key of its own, not a mechanism's root.

    Attributes:
        key: typed JAX key.
        n_queries: number of queries (static).
        label_attrs: candidate label attributes (static).
        num_attrs: the numeric attributes R (static).
        sizes: categorical sizes (static).
        n_numeric: number of numeric attributes (static).
    """

    key: Key
    n_queries: int = static_field()
    label_attrs: tuple[int, ...] = static_field()
    num_attrs: tuple[int, ...] = static_field()
    sizes: tuple[int, ...] = static_field()
    n_numeric: int = static_field()

    def __len__(self) -> int:
        return self.n_queries

    def params(self, ids: Array) -> tuple[Array, Array, Array, Array]:
        """(label_attr, label_value, theta, tau) of the queries at `ids`, regenerated."""
        labels = jnp.asarray(self.label_attrs, jnp.int32)
        label_sizes = jnp.asarray([self.sizes[a] for a in self.label_attrs], jnp.int32)
        r = len(self.num_attrs)

        def one(q):
            # One uniform draw per query keeps the regenerated program small and fast: normals by
            # inverse CDF (u >= 2^-24, so never infinite), label and value by floor(u * size).
            u = jax.random.uniform(fold_in(self.key, q), (r + 3,), minval=2.0**-24)
            z = math.sqrt(2.0) * jax.lax.erf_inv(2.0 * u[: r + 1] - 1.0)
            which = jnp.minimum(jnp.floor(u[r + 1] * labels.shape[0]), labels.shape[0] - 1)
            which = which.astype(jnp.int32)
            size = label_sizes[which]
            y = jnp.minimum(jnp.floor(u[r + 2] * size).astype(jnp.int32), size - 1)
            return labels[which], y, z[:r] / math.sqrt(r), z[r]

        return jax.vmap(one)(jnp.asarray(ids, jnp.int32))

    def materialize(self) -> LinearThresholdQueries:
        """The explicit arrays of every query (small families and tests)."""
        la, lv, th, tau = _materialize(self)
        return LinearThresholdQueries(la, lv, th, tau, self.num_attrs, self.sizes, self.n_numeric)


@jax.jit
def _materialize(family: RandomLinearThresholds):
    # Jitted (host-side constructor): one compile instead of op-by-op dispatch of the generator.
    return family.params(jnp.arange(family.n_queries, dtype=jnp.int32))


def random_linear_thresholds(
    key: Key,
    sizes: Sequence[int],
    n_numeric: int,
    n_queries: int,
    label_attrs: Sequence[int],
    num_attrs: Sequence[int] | None = None,
) -> RandomLinearThresholds:
    """A key-defined family of `n_queries` class-conditional linear threshold queries.

    Args:
        key: typed JAX key (public query-set key).
        sizes: categorical sizes.
        n_numeric: number of numeric attributes.
        n_queries: family size.
        label_attrs: categorical attributes a query may condition on (RAP++'s label columns L).
        num_attrs: numeric attributes R (default: all).

    Raises:
        DataError: on empty or out-of-range attribute lists.
    """
    key = require_key(key)
    sizes = tuple(int(s) for s in sizes)
    labels = tuple(int(a) for a in label_attrs)
    num = tuple(range(n_numeric)) if num_attrs is None else tuple(int(a) for a in num_attrs)
    if not labels or any(not 0 <= a < len(sizes) for a in labels) or len(set(labels)) != len(labels):
        raise DataError(f"label attributes {labels} must be distinct and in [0, {len(sizes)})")
    if not num or any(not 0 <= a < n_numeric for a in num) or len(set(num)) != len(num):
        raise DataError(f"numeric attributes {num} must be distinct, non-empty, in [0, {n_numeric})")
    if n_queries < 1:
        raise DataError("n_queries must be >= 1")
    return RandomLinearThresholds(key, int(n_queries), labels, num, sizes, int(n_numeric))


def linear_threshold_on_record(
    label_attr: Array,
    label_value: Array,
    theta: Array,
    tau: Array,
    code_row: Array,
    num_row: Array,
    num_attrs: Array,
) -> Array:
    """One linear threshold query on one record: () float32 in {0, 1}."""
    score = jnp.dot(theta, num_row[num_attrs], precision=_HIGHEST)
    return ((score <= tau) & (code_row[label_attr] == label_value)).astype(jnp.float32)


def linear_threshold_relaxed(
    label_attr: Array,
    label_value: Array,
    theta: Array,
    tau: Array,
    p_row: Array,
    num_row: Array,
    num_attrs: Array,
    sigma: Array | float,
    offsets: Array,
) -> Array:
    """RAP++ Definition 12 for "<=": p[i = y] * soft_leq(<theta, x_R>, tau)."""
    score = jnp.dot(theta, num_row[num_attrs], precision=_HIGHEST)
    return p_row[offsets[label_attr] + label_value] * soft_leq(score, tau, sigma)


LinearThresholdFamily = LinearThresholdQueries | RandomLinearThresholds


def linear_threshold_answers(
    codes: Array,
    numeric: Array,
    queries: LinearThresholdFamily,
    dtype=jnp.float32,
    *,
    row_chunk: int = DEFAULT_ROW_CHUNK,
    query_chunk: int = DEFAULT_QUERY_CHUNK,
) -> Array:
    """Exact counts of class-conditional linear threshold queries on records (hard threshold).

    Parameters of a random family are regenerated per query chunk, never stored.

    Args:
        codes: (n_records, n_cat) integer codes.
        numeric: (n_records, n_num) values in [0, 1].
        queries: explicit queries or a key-defined family.
        dtype: output dtype (counting is exact in int32).

    Returns:
        (n_queries,) counts.

    Privacy:
        Reads the private records; each query has sensitivity 1 under add/remove-one.
    """
    codes, numeric = jnp.asarray(codes), jnp.asarray(numeric)
    _check_rows(codes, numeric, len(queries.sizes), queries.n_numeric, ("codes", "numeric"))
    r_attrs = jnp.asarray(queries.num_attrs, jnp.int32)

    def block(rows, w, ids):
        c, x = rows
        la, lv, theta, tau = queries.params(ids)
        score = jnp.dot(x[:, r_attrs], theta.T, precision=_HIGHEST)  # (r, q)
        ok = (score <= tau[None]) & (c[:, la] == lv[None])
        return jnp.sum(ok.astype(jnp.int32) * w.astype(jnp.int32)[:, None], axis=0)

    counts = sum_over_rows(
        block,
        (codes.astype(jnp.int32), numeric),
        len(queries),
        row_chunk=row_chunk,
        query_chunk=query_chunk,
        dtype=jnp.int32,
    )
    return counts.astype(dtype)


def relaxed_linear_threshold_answers(
    probs: Array,
    numeric: Array,
    queries: LinearThresholdFamily,
    sigma: Array | float | None,
    *,
    row_chunk: int = DEFAULT_ROW_CHUNK,
    query_chunk: int = DEFAULT_QUERY_CHUNK,
) -> Array:
    """Relaxed linear threshold answers (means over rows); differentiable in probs and numeric.

    Args:
        probs: (K, sum of cat sizes) probability blocks.
        numeric: (K, n_num) numeric values.
        queries: explicit queries or a key-defined family.
        sigma: inverse temperature (may be traced, e.g. annealed); None for hard thresholds
            (the exact answers of the relaxed rows, used to judge an annealed fit).

    Returns:
        (n_queries,) answers.
    """
    probs, numeric = jnp.asarray(probs), jnp.asarray(numeric)
    _check_rows(probs, numeric, sum(queries.sizes), queries.n_numeric, ("probs", "numeric"))
    offsets = _offsets(queries.sizes)
    r_attrs = jnp.asarray(queries.num_attrs, jnp.int32)
    n = probs.shape[0]

    def block(rows, w, ids):
        p, x = rows
        la, lv, theta, tau = queries.params(ids)
        score = jnp.dot(x[:, r_attrs], theta.T, precision=_HIGHEST)  # (r, q)
        val = p[:, offsets[la] + lv] * _leq(score, tau[None], sigma)
        return jnp.sum(val * w[:, None], axis=0)

    total = sum_over_rows(
        block,
        (probs, numeric),
        len(queries),
        row_chunk=row_chunk,
        query_chunk=query_chunk,
        dtype=probs.dtype,
    )
    return total / n
