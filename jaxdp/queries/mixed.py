"""Mixed marginal queries on mixed-type data (RAP++, Vietri et al. 2022, Definition 3):
1{x_C = y} * prod_{j in R} 1{x_j <= tau_j}, exactly on records (hard thresholds, counts) and
relaxed on relaxed rows (tempered sigmoids, `jaxdp.queries.threshold.soft_leq`, means over rows).
Records and relaxed rows are laid out as in `jaxdp.queries.threshold`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.domain import DataError
from jaxdp.keys import fold_in, require_key
from jaxdp.queries._chunks import DEFAULT_QUERY_CHUNK, DEFAULT_ROW_CHUNK, sum_over_rows
from jaxdp.queries.threshold import _check_rows, _leq, _offsets, soft_leq
from jaxdp.types import Array, Key, pytree_dataclass, static_field


@pytree_dataclass
class MixedMarginalQueries:
    """A batch of mixed-marginal queries 1{x_C = y} * prod_j 1{x_{R_j} <= tau_j}.

    Attributes:
        cat_attrs: (m, kc) int32 categorical attribute indices (kc may be 0).
        cat_values: (m, kc) int32 required codes.
        num_attrs: (m, kr) int32 numeric attribute indices (kr may be 0).
        thresholds: (m, kr) float32 thresholds in normalised [0, 1] units.
        sizes: categorical sizes (static).
        n_numeric: number of numeric attributes (static).
    """

    cat_attrs: Array
    cat_values: Array
    num_attrs: Array
    thresholds: Array
    sizes: tuple[int, ...] = static_field()
    n_numeric: int = static_field()

    def __len__(self) -> int:
        return int(self.cat_attrs.shape[0])

    def take(self, ids: Array) -> MixedMarginalQueries:
        """The queries at `ids` (traceable, fixed shape)."""
        ids = jnp.asarray(ids)
        return MixedMarginalQueries(
            jnp.asarray(self.cat_attrs)[ids],
            jnp.asarray(self.cat_values)[ids],
            jnp.asarray(self.num_attrs)[ids],
            jnp.asarray(self.thresholds)[ids],
            self.sizes,
            self.n_numeric,
        )


def mixed_marginal_grid(
    sizes: Sequence[int],
    n_numeric: int,
    cat_attrs: Sequence[int],
    num_attrs: Sequence[int],
    thresholds: Sequence[float] | Sequence[Sequence[float]],
) -> MixedMarginalQueries:
    """All queries of one mixed marginal: every cell of C times every threshold combination.

    Order (documented, like marginal cells): categorical cells row-major over the ascending
    attributes C; within a cell, thresholds row-major over the numeric attributes in the given
    order (the last one varies fastest), each attribute's thresholds in the given order.

    Args:
        sizes: categorical sizes.
        n_numeric: number of numeric attributes.
        cat_attrs: categorical attribute indices C (any order; sorted ascending).
        num_attrs: numeric attribute indices R.
        thresholds: one grid shared by all of R, or one grid per attribute of R (values in [0, 1]).

    Raises:
        DataError: on an attribute out of range or repeated.
    """
    sizes = tuple(int(s) for s in sizes)
    cat = sorted(int(a) for a in cat_attrs)
    num = [int(a) for a in num_attrs]
    if len(set(cat)) != len(cat) or any(not 0 <= a < len(sizes) for a in cat):
        raise DataError(f"categorical attributes {cat} must be distinct and in [0, {len(sizes)})")
    if len(set(num)) != len(num) or any(not 0 <= a < n_numeric for a in num):
        raise DataError(f"numeric attributes {num} must be distinct and in [0, {n_numeric})")
    if num and thresholds and np.ndim(thresholds[0]) == 0:
        grids = [[float(t) for t in thresholds]] * len(num)
    else:
        grids = [[float(t) for t in g] for g in thresholds]
    if len(grids) != len(num):
        raise DataError("give one threshold grid, or one per numeric attribute")
    cells = list(itertools.product(*[range(sizes[a]) for a in cat]))
    combos = list(itertools.product(*grids))
    m = len(cells) * len(combos)
    ca = np.tile(np.asarray(cat, np.int32), (m, 1)).reshape(m, len(cat))
    cv = np.repeat(np.asarray(cells, np.int32).reshape(len(cells), len(cat)), len(combos), axis=0)
    na = np.tile(np.asarray(num, np.int32), (m, 1)).reshape(m, len(num))
    th = np.tile(np.asarray(combos, np.float32).reshape(len(combos), len(num)), (len(cells), 1))
    return MixedMarginalQueries(ca, cv, na, th, sizes, int(n_numeric))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _draw_mixed(key, sizes, n_numeric, n_queries, n_cat, n_num):
    # Jitted (a host-side constructor): one compile beats dispatching the generator op by op.
    # One uniform draw per query: argsort of uniforms picks distinct attributes uniformly.
    d = len(sizes)
    size_arr = jnp.asarray(sizes if sizes else (1,), jnp.int32)

    def one(q):
        u = jax.random.uniform(fold_in(key, q), (d + n_numeric + n_cat + n_num,))
        ca = jnp.sort(jnp.argsort(u[:d])[:n_cat]).astype(jnp.int32)
        na = jnp.sort(jnp.argsort(u[d : d + n_numeric])[:n_num]).astype(jnp.int32)
        v = u[d + n_numeric :]
        cv = jnp.minimum(jnp.floor(v[:n_cat] * size_arr[ca]).astype(jnp.int32), size_arr[ca] - 1)
        return ca, cv, na, v[n_cat:]

    return jax.vmap(one)(jnp.arange(n_queries, dtype=jnp.int32))


def random_mixed_marginals(
    key: Key,
    sizes: Sequence[int],
    n_numeric: int,
    n_queries: int,
    n_cat: int,
    n_num: int,
) -> MixedMarginalQueries:
    """Random mixed marginals: n_cat distinct categorical attributes with uniform values, n_num
    distinct numeric attributes with thresholds ~ U[0, 1]; query q drawn from fold_in(key, q).

    Raises:
        DataError: if there are fewer attributes than asked for.
    """
    key = require_key(key)
    sizes = tuple(int(s) for s in sizes)
    if not 0 <= n_cat <= len(sizes) or not 0 <= n_num <= n_numeric or n_cat + n_num == 0:
        raise DataError(f"need 0 <= n_cat <= {len(sizes)}, 0 <= n_num <= {n_numeric} and n_cat + n_num >= 1")
    ca, cv, na, th = _draw_mixed(key, sizes, int(n_numeric), int(n_queries), n_cat, n_num)
    return MixedMarginalQueries(ca, cv, na, th, sizes, int(n_numeric))


def mixed_query_on_record(
    cat_attrs: Array,
    cat_values: Array,
    num_attrs: Array,
    thresholds: Array,
    code_row: Array,
    num_row: Array,
) -> Array:
    """One mixed-marginal query on one record: () float32 in {0, 1}."""
    cat_ok = jnp.all(code_row[cat_attrs] == cat_values)
    num_ok = jnp.all(num_row[num_attrs] <= thresholds)
    return (cat_ok & num_ok).astype(jnp.float32)


def mixed_query_relaxed(
    cat_attrs: Array,
    cat_values: Array,
    num_attrs: Array,
    thresholds: Array,
    p_row: Array,
    num_row: Array,
    sigma: Array | float,
    offsets: Array,
) -> Array:
    """One mixed-marginal query on one relaxed row: prod p[C = y] * prod soft_leq(x_R, tau)."""
    cat = jnp.prod(p_row[offsets[cat_attrs] + cat_values])
    return cat * jnp.prod(soft_leq(num_row[num_attrs], thresholds, sigma))


def mixed_marginal_answers(
    codes: Array,
    numeric: Array,
    queries: MixedMarginalQueries,
    dtype=jnp.float32,
    *,
    row_chunk: int = DEFAULT_ROW_CHUNK,
    query_chunk: int = DEFAULT_QUERY_CHUNK,
) -> Array:
    """Exact counts of mixed-marginal queries on records (hard thresholds).

    Args:
        codes: (n_records, n_cat) integer codes.
        numeric: (n_records, n_num) values in [0, 1].
        queries: the queries.
        dtype: output dtype (counting is exact in int32).

    Returns:
        (n_queries,) counts.

    Privacy:
        Reads the private records; each query has sensitivity 1 under add/remove-one (divide by
        the public n for fractions: 1/n under replace-one).
    """
    codes, numeric = jnp.asarray(codes), jnp.asarray(numeric)
    _check_rows(codes, numeric, len(queries.sizes), queries.n_numeric, ("codes", "numeric"))
    ca, cv = jnp.asarray(queries.cat_attrs), jnp.asarray(queries.cat_values)
    na, th = jnp.asarray(queries.num_attrs), jnp.asarray(queries.thresholds)

    def block(rows, w, ids):
        c, x = rows
        ok = jnp.all(c[:, ca[ids]] == cv[ids][None], axis=-1)  # (r, q)
        ok = ok & jnp.all(x[:, na[ids]] <= th[ids][None], axis=-1)
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


def relaxed_mixed_marginal_answers(
    probs: Array,
    numeric: Array,
    queries: MixedMarginalQueries,
    sigma: Array | float | None,
    *,
    row_chunk: int = DEFAULT_ROW_CHUNK,
    query_chunk: int = DEFAULT_QUERY_CHUNK,
) -> Array:
    """Relaxed mixed-marginal answers (means over rows); differentiable in probs and numeric.

    Args:
        probs: (K, sum of cat sizes) probability blocks.
        numeric: (K, n_num) numeric values.
        queries: the queries.
        sigma: inverse temperature (may be traced, e.g. annealed); None for hard thresholds
            (the exact answers of the relaxed rows, used to judge an annealed fit).

    Returns:
        (n_queries,) answers.
    """
    probs, numeric = jnp.asarray(probs), jnp.asarray(numeric)
    _check_rows(probs, numeric, sum(queries.sizes), queries.n_numeric, ("probs", "numeric"))
    offsets = _offsets(queries.sizes) if queries.sizes else jnp.zeros(1, jnp.int32)
    ca, cv = jnp.asarray(queries.cat_attrs), jnp.asarray(queries.cat_values)
    na, th = jnp.asarray(queries.num_attrs), jnp.asarray(queries.thresholds)
    n = probs.shape[0]

    def block(rows, w, ids):
        p, x = rows
        cols = offsets[ca[ids]] + cv[ids]  # (q, kc)
        val = jnp.prod(p[:, cols], axis=-1)  # (r, q)
        val = val * jnp.prod(_leq(x[:, na[ids]], th[ids][None], sigma), axis=-1)
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
