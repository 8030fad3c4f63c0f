"""Relaxed answers on probability rows (RAP, RAP-softmax, GEM's generator output).

The relaxed data is a (n_rows, width) matrix whose row k holds one probability block per
categorical attribute (width = sum of sizes; block a is columns offset_a .. offset_a + size_a).
A counting query over attributes S asking cell c is answered by the product query
f_S(p) = prod_{a in S} p[offset_a + c_a] (GEM Definition 4), averaged over rows. One-hot rows give
the exact answers, so relaxed and exact answers are directly comparable.

Whole marginals (`relaxed_marginals`) use the "pivot" decomposition: a marginal (head..., j, l)
with pivot attribute j (its second-to-last) and last attribute l is a slice of

    M_j[(h, v), t] = sum_k H_j[h, k] * P_j[v, k] * L_j[t, k],

where H_j stacks the head products of every marginal with pivot j (a ones row for 2-way
marginals, attribute blocks for 3-way ones), P_j is block j and L_j stacks the blocks of every last
attribute. So for each pivot attribute the row-wise outer product of heads and pivot is formed once
and multiplied with all later blocks in one matmul: exactly one multiply-add per (row, answer) for
all-k-way workloads, and one matmul per attribute however many marginals there are. All the
blocks are read by one gather through an index array that is an argument of the program, then
split, so the program's size follows the attributes, not the marginals, and its gradient holds
one scatter-add, not one per block (which halved the compile time). Measured on the 2-core CPU
for ADULT's 286 3-way marginals, 1000 rows (`bench/bench_compile.py`): ~8 ms, compile ~0.3 s;
value and gradient of an L2 loss ~26 ms, compile ~0.65 s. The backward pass is hand-written:
two matmuls per pivot against the output's gradient, in a loop over row chunks of its own that
recomputes each chunk's blocks. Static slices of the probabilities in place of the gather
compiled quicker but ran 20% slower, and a training loop pays the run on every step. Being a
`custom_vjp`, the kernel supports reverse-mode differentiation (`jax.grad`, `jax.vjp`) but not
forward mode (`jax.jvp`, `jax.jacfwd`).

`product_query_answers` is the gather path for an arbitrary batch of product queries.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.domain import Categorical, Domain
from jaxdp.queries._chunks import DEFAULT_QUERY_CHUNK, sum_over_rows
from jaxdp.queries.workload import MarginalWorkload, ProductQueries
from jaxdp.types import Array, pytree_dataclass, static_field

# Rows per chunk of the pivot kernel; each chunk holds sum_j (heads_j x size_j) x chunk floats.
# On CPU small chunks keep those blocks in cache: for ADULT's 286 3-way marginals and 1000 rows,
# value+gradient took ~40-55 ms with 128-row chunks and ~110-130 ms in one 1000-row block (forward
# alone ~10 vs ~15 ms). Accelerators want large blocks.
RELAXED_ROW_CHUNK_CPU = 128
RELAXED_ROW_CHUNK_ACCELERATOR = 8192
# Rows per chunk of the gather path (each block is rows x queries x k floats).
GATHER_ROW_CHUNK = 1024

_HIGHEST = jax.lax.Precision.HIGHEST


def categorical_columns(domain: Domain) -> np.ndarray:
    """Columns of `domain`'s one-hot layout that belong to categorical attributes, in order.

    `probs[:, categorical_columns(domain)]` turns a mixed-domain relaxed row (numeric attributes
    take one column) into the all-categorical layout the marginal kernels use.
    """
    cols = []
    for a, off in zip(domain.attributes, domain.one_hot_offsets(), strict=True):
        if isinstance(a, Categorical):
            cols.extend(range(off, off + a.size))
    return np.asarray(cols, np.int32)


def block_offsets(sizes: tuple[int, ...]) -> np.ndarray:
    """(len(sizes),) first column of each attribute's block."""
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


# -- the plan -------------------------------------------------------------------------------------


@pytree_dataclass
class RelaxedPlan:
    """Array form of a marginal workload for the pivot kernel.

    Attributes:
        gather_index: (rows,) int32 rows of the transposed probabilities extended by a ones row
            (index `width`), read by one gather: for each pivot in turn, its heads' first
            attributes, their second attributes (and so on, `pivot_shapes`' head width), the
            pivot's block and the stacked blocks of its last attributes. Head row r of a pivot
            is the product of its r-th rows in each head column.
        flat_index: (n_queries,) int32 position of each counting query (workload order) in the
            concatenation of the pivots' M_j (raveled) and the column sums (for 1-way marginals).
        pivot_shapes: per pivot (static), (head rows h_j, head width kh_j, pivot size, last
            columns c_j).
        width: number of probability columns (static).
        n_queries: number of counting queries (static).
    """

    gather_index: Array
    flat_index: Array
    pivot_shapes: tuple[tuple[int, int, int, int], ...] = static_field()
    width: int = static_field()
    n_queries: int = static_field()

    @property
    def pivot_sizes(self) -> tuple[int, ...]:
        return tuple(size for _, _, size, _ in self.pivot_shapes)


@functools.lru_cache(maxsize=64)
def relaxed_plan(workload: MarginalWorkload) -> RelaxedPlan:
    """Build (and cache) the pivot plan of a workload. Repeated marginals are computed once."""
    sizes = workload.sizes
    width = sum(sizes)
    offsets = block_offsets(sizes)
    pivots: dict[int, tuple[set, set]] = {}
    for c in set(workload.cliques):
        if len(c) >= 2:
            heads, lasts = pivots.setdefault(c[-2], (set(), set()))
            heads.add(c[:-2])
            lasts.add(c[-1])

    gather: list[np.ndarray] = []  # the pieces of `gather_index`, in order
    pivot_shapes = []
    where: dict[int, tuple[int, dict, dict, int]] = {}  # pivot -> (base, head row, last col, C)
    base = 0
    for j in sorted(pivots):
        heads = sorted(pivots[j][0], key=lambda h: (len(h), h))
        lasts = sorted(pivots[j][1])
        kh = max(len(h) for h in heads)
        rows: list[np.ndarray] = []
        head_row: dict[tuple[int, ...], int] = {}
        n_rows = 0
        for h in heads:
            head_row[h] = n_rows
            n_cells = int(np.prod([sizes[a] for a in h]))  # 1 for the empty head
            block = np.full((n_cells, kh), width, np.int64)
            if h:
                cells = np.indices([sizes[a] for a in h]).reshape(len(h), -1).T  # row-major
                block[:, : len(h)] = offsets[list(h)] + cells
            rows.append(block)
            n_rows += len(block)
        last_col: dict[int, int] = {}
        cols: list[np.ndarray] = []
        n_cols = 0
        for l in lasts:
            last_col[l] = n_cols
            cols.append(offsets[l] + np.arange(sizes[l]))
            n_cols += sizes[l]
        head_columns = np.concatenate(rows)
        gather += [head_columns[:, t] for t in range(kh)]
        gather += [offsets[j] + np.arange(sizes[j]), *cols]
        pivot_shapes.append((n_rows, kh, sizes[j], n_cols))
        where[j] = (base, head_row, last_col, n_cols)
        base += n_rows * sizes[j] * n_cols

    flat = np.empty(workload.n_queries, np.int64)
    for i, (c, off) in enumerate(zip(workload.cliques, workload.offsets, strict=True)):
        codes = workload.cell_codes(i).astype(np.int64)  # (cells, k), row-major
        if len(c) == 1:
            idx = base + offsets[c[0]] + codes[:, 0]
        else:
            j, h, l = c[-2], c[:-2], c[-1]
            b, head_row, last_col, n_cols = where[j]
            head_cell = np.zeros(len(codes), np.int64)
            for t, a in enumerate(h):
                head_cell = head_cell * sizes[a] + codes[:, t]
            row = (head_row[h] + head_cell) * sizes[j] + codes[:, -2]
            idx = b + row * n_cols + last_col[l] + codes[:, -1]
        flat[off : off + len(codes)] = idx
    gather_index = np.concatenate(gather) if gather else np.zeros(0, np.int64)
    return RelaxedPlan(
        gather_index.astype(np.int32), flat.astype(np.int32), tuple(pivot_shapes), width, workload.n_queries
    )


def _as_plan(workload: MarginalWorkload | RelaxedPlan) -> RelaxedPlan:
    return relaxed_plan(workload) if isinstance(workload, MarginalWorkload) else workload


# -- the pivot kernel -----------------------------------------------------------------------------


def _khatri_rao(a: Array, b: Array) -> Array:
    """(m*n, K) row-wise outer product of (m, K) and (n, K): row (i, j) is a[i] * b[j]."""
    return (a[:, None, :] * b[None, :, :]).reshape(a.shape[0] * b.shape[0], a.shape[1])


def _nt(a: Array, b: Array) -> Array:
    """a @ b.T for (m, K) and (n, K), contracting the row axis K."""
    return jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), precision=_HIGHEST)


def _nn(a: Array, b: Array) -> Array:
    return jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=_HIGHEST)


@jax.custom_vjp
def _trilinear(h: Array, p: Array, l: Array) -> Array:
    """(n_h, n_p, n_l) sums over rows k of h[a, k] * p[b, k] * l[c, k]."""
    return _nt(_khatri_rao(h, p), l).reshape(h.shape[0], p.shape[0], l.shape[0])


def _trilinear_fwd(h, p, l):
    return _trilinear(h, p, l), (h, p, l)


def _trilinear_bwd(res, g):
    h, p, l = res
    nh, np_, nl = g.shape
    k = h.shape[1]
    # Two matmuls with the rows axis K last (XLA:CPU's fast layout); dh and dp share the first,
    # and dl contracts g's leading axes in place (no transposed copy of g). One matmul fewer than
    # forming dh from the outer product of p and l: ~20% less to compile, and no slower to run.
    y = _nn(g.reshape(nh * np_, nl), l).reshape(nh, np_, k)
    dh = jnp.sum(y * p[None, :, :], axis=1)
    dp = jnp.sum(y * h[:, None, :], axis=0)
    dl = jax.lax.dot_general(
        g.reshape(nh * np_, nl), _khatri_rao(h, p), (((0,), (0,)), ((), ())), precision=_HIGHEST
    )
    return dh, dp, dl


_trilinear.defvjp(_trilinear_fwd, _trilinear_bwd)


def _pivot_sums(pt: Array, weights: Array | None, plan: RelaxedPlan) -> Array:
    """Sums over rows of every M_j entry and every column; pt is (width, K).

    Every pivot's blocks are read by one gather and split into pieces (`gather_index`): the
    gradient is then one concatenation and one scatter-add, whatever the number of pivots (a
    gather per block compiled a scatter per block in the backward pass).

    With row weights, only the pivot factor and the column sums are weighted: every product has
    exactly one pivot factor, so each row's product is weighted once.
    """
    pt_ext = jnp.concatenate([pt, jnp.ones((1, pt.shape[1]), pt.dtype)])
    piece_rows = [n for h, kh, size, c in plan.pivot_shapes for n in (*[h] * kh, size, c)]
    pieces = iter(jax.lax.split(pt_ext[jnp.asarray(plan.gather_index)], piece_rows) if piece_rows else ())
    parts = []
    for h, kh, _, _ in plan.pivot_shapes:
        heads = jnp.ones((h, pt.shape[1]), pt.dtype)
        for _ in range(kh):
            heads = heads * next(pieces)
        pivot = next(pieces)
        if weights is not None:
            pivot = pivot * weights[None, :]
        parts.append(_trilinear(heads, pivot, next(pieces)).reshape(-1))
    parts.append(jnp.sum(pt if weights is None else pt * weights[None, :], axis=1))
    return jnp.concatenate(parts)


def _chunk(rc: int, pt: Array, weights: Array | None, start) -> tuple[Array, Array | None]:
    rows = jax.lax.dynamic_slice_in_dim(pt, start, rc, axis=1)
    return rows, None if weights is None else jax.lax.dynamic_slice_in_dim(weights, start, rc)


# The chunk loop has its own VJP: the backward pass is a second loop that recomputes each chunk's
# blocks, where JAX's autodiff of a scan would stack every chunk's residuals and compile the
# stacking and unstacking too (on the 2-core CPU, ADULT's 286 3-way marginals: value-and-grad
# compiled in 1.84 s that way and 1.61 s with this loop, both with three backward matmuls).
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _chunked_sums(rc: int, pt: Array, weights: Array | None, plan: RelaxedPlan) -> Array:
    """`_pivot_sums` over (width, n_chunks * rc) blocks, summed chunk by chunk."""

    def body(i, acc):
        return acc + _pivot_sums(*_chunk(rc, pt, weights, i * rc), plan)

    init = jnp.zeros(_total_size(plan), pt.dtype)
    return jax.lax.fori_loop(0, pt.shape[1] // rc, body, init)


def _chunked_sums_fwd(rc, pt, weights, plan):
    return _chunked_sums(rc, pt, weights, plan), (pt, weights, plan)


def _chunked_sums_bwd(rc, res, g):
    pt, weights, plan = res

    def body(i, grads):
        d_pt, d_weights = grads
        rows, w = _chunk(rc, pt, weights, i * rc)
        _, vjp = jax.vjp(lambda r, w: _pivot_sums(r, w, plan), rows, w)
        d_rows, d_w = vjp(g)
        d_pt = jax.lax.dynamic_update_slice_in_dim(d_pt, d_rows, i * rc, axis=1)
        if weights is not None:
            d_weights = jax.lax.dynamic_update_slice_in_dim(d_weights, d_w, i * rc, axis=0)
        return d_pt, d_weights

    init = (jnp.zeros_like(pt), None if weights is None else jnp.zeros_like(weights))
    d_pt, d_weights = jax.lax.fori_loop(0, pt.shape[1] // rc, body, init)
    return d_pt, d_weights, None


_chunked_sums.defvjp(_chunked_sums_fwd, _chunked_sums_bwd)


def _total_size(plan: RelaxedPlan) -> int:
    return plan.width + sum(h * size * c for h, _, size, c in plan.pivot_shapes)


def _check_probs(probs: Array, width: int) -> Array:
    probs = jnp.asarray(probs)
    if probs.ndim != 2 or probs.shape[1] != width:
        raise ValueError(f"probs must have shape (n_rows, {width}), got {tuple(probs.shape)}")
    if probs.shape[0] == 0:
        raise ValueError("probs hold no rows")
    if not jnp.issubdtype(probs.dtype, jnp.floating):
        raise TypeError(f"probs must be floating point, got {probs.dtype}")
    return probs


def relaxed_marginals(
    probs: Array,
    workload: MarginalWorkload | RelaxedPlan,
    *,
    row_weights: Array | None = None,
    row_chunk: int | None = None,
) -> Array:
    """Relaxed answers to every counting query of a workload, in `marginal_counts` order.

    answer_q = mean_k prod_{a in S_q} probs[k, offset_a + c_{q,a}]  (or sum_k w_k ... with weights).
    Differentiable in `probs` (and `row_weights`); compiles to one matmul per pivot attribute.

    Args:
        probs: (n_rows, width) probability blocks, width = sum of the categorical sizes. One-hot
            rows give exact fractions.
        workload: the marginals, or their `relaxed_plan` (an array pytree: pass it as a jit
            argument and workloads with the same pivot layout share one compiled program).
        row_weights: optional (n_rows,) weights; answers become sum_k w_k f(p_k) (no division),
            e.g. a distribution over public records (PMW-Pub, GEM-Pub).
        row_chunk: rows per chunk (static; default 128 on CPU, 8192 on accelerators); memory is
            bounded by one chunk for any n_rows.

    Returns:
        (workload.n_queries,) answers in [0, 1].
    """
    plan = _as_plan(workload)
    if row_chunk is None:
        cpu = jax.default_backend() == "cpu"
        row_chunk = RELAXED_ROW_CHUNK_CPU if cpu else RELAXED_ROW_CHUNK_ACCELERATOR
    probs = _check_probs(probs, plan.width)
    n = probs.shape[0]
    weights = None
    if row_weights is not None:
        weights = jnp.asarray(row_weights, probs.dtype)
        if weights.shape != (n,):
            raise ValueError(f"row_weights must have shape ({n},), got {weights.shape}")
    rc = max(1, min(row_chunk, n))
    n_chunks = -(-n // rc)
    # The kernel works on (width, rows) blocks: rows last is XLA:CPU's fast matmul layout. One
    # transposed copy of the input is made up front; transposing chunk by chunk instead measured
    # ~40% slower (the transposes fuse into the gathers, which then read with a stride).
    pt = probs.T
    if n_chunks * rc != n:  # zero rows add nothing to any sum
        pt = jnp.pad(pt, ((0, 0), (0, n_chunks * rc - n)))
        if weights is not None:
            weights = jnp.pad(weights, (0, n_chunks * rc - n))
    total = _chunked_sums(rc, pt, weights, plan)
    answers = total[jnp.asarray(plan.flat_index)]
    return answers if weights is not None else answers / n


# -- one-row form and the gather path -------------------------------------------------------------


def product_query(p_row: Array, columns: Array) -> Array:
    """One product query on one relaxed row: prod_t p_ext[columns[t]].

    Args:
        p_row: (width,) probabilities of one row.
        columns: (k,) int32 columns (`ProductQueries.columns()`), `width` meaning "always 1".

    Returns:
        () the product.
    """
    p_ext = jnp.concatenate([p_row, jnp.ones((1,), p_row.dtype)])
    return jnp.prod(p_ext[columns])


def row_answers(p_row: Array, queries: ProductQueries) -> Array:
    """(n_queries,) one relaxed row's answers to every product query (one-row form, vmapped)."""
    return jax.vmap(product_query, in_axes=(None, 0))(p_row, queries.columns())


def product_query_answers(
    probs: Array,
    queries: ProductQueries,
    *,
    row_weights: Array | None = None,
    row_chunk: int = GATHER_ROW_CHUNK,
    query_chunk: int = DEFAULT_QUERY_CHUNK,
) -> Array:
    """Relaxed answers to an arbitrary batch of product queries (the gather path).

    For a subset of a workload (e.g. the queries measured so far) this costs
    O(n_rows x n_queries x k) and holds one (row_chunk x query_chunk x k) block at a time.
    Differentiable in `probs`.

    Args:
        probs: (n_rows, width) probability blocks.
        queries: the product queries.
        row_weights: optional (n_rows,) weights (answers are then weighted sums, not means).
        row_chunk: rows per block (static).
        query_chunk: queries per block (static).

    Returns:
        (n_queries,) answers.
    """
    probs = _check_probs(probs, queries.width)
    n = probs.shape[0]
    columns = queries.columns()
    k = columns.shape[1]
    if row_weights is None:
        weights = jnp.full((n,), 1.0 / n, probs.dtype)
    else:
        weights = jnp.asarray(row_weights, probs.dtype)
        if weights.shape != (n,):
            raise ValueError(f"row_weights must have shape ({n},), got {weights.shape}")

    def block(rows, pad_weight, ids):
        p, w = rows
        p_ext = jnp.concatenate([p, jnp.ones((p.shape[0], 1), p.dtype)], axis=1)
        cols = columns[ids]  # (q, k)
        prod = p_ext[:, cols[:, 0]]
        for t in range(1, k):
            prod = prod * p_ext[:, cols[:, t]]
        return jnp.sum(prod * (w * pad_weight)[:, None], axis=0)

    return sum_over_rows(
        block,
        (probs, weights),
        len(queries),
        row_chunk=row_chunk,
        query_chunk=query_chunk,
        dtype=probs.dtype,
    )
