"""Exact answers on records (integer codes).

Counts are what add/remove-one mechanisms measure; fractions (counts / n, n public) are what
replace-one mechanisms measure.

The fast path (`marginal_counts`) computes each marginal's flattened cell index per record and
counts with a one-dimensional scatter-add into one flat histogram holding every marginal's cells
back to back (marginal i's cells start at its offset). One loop runs over the marginals, so the
compiled program is one loop whatever the workload, its size does not grow with the number of
marginals, and two workloads with the same number of marginals, clique size and total cells share
one compiled program (the plan's attribute indices, strides and offsets are array leaves, not
constants). Records are taken in chunks (outer loop) and every marginal reads the chunk from cache
(inner loop), so the table is read once and never copied, and memory is one chunk plus the
histogram for any number of records.

Measured on the 2-core CPU (load average 8-10, so times are pessimistic) for the 364 3-way
marginals of the 14-attribute Private-PGM ADULT (20.9 M cells): compile 0.6 s and run 0.2 s, where
the earlier layout (marginals bucketed by histogram length, one loop per bucket, then a gather
back to workload order) took 5 s and 1.2 s; for the bundled ADULT's 286 3-way marginals the two
run in the same tens of milliseconds and the flat one compiles in 0.5 s instead of 3 s. A vmapped
scatter of all (records x marginals) indices is several times slower per update than the 1-D
scatter on XLA:CPU, and a one-hot matmul would cost records x cells multiply-adds (15 G for ADULT),
so the 1-D scatter is used throughout.

`counting_query_answers` is the general path for any batch of counting queries (e.g. a subset of
a workload): the one-record predicate vmapped over records and queries in bounded chunks.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.queries._chunks import DEFAULT_QUERY_CHUNK, DEFAULT_ROW_CHUNK, sum_over_rows
from jaxdp.queries.workload import MarginalWorkload, ProductQueries
from jaxdp.types import Array, pytree_dataclass, static_field

# Rows per scatter step. On CPU, small enough that one step's cell indices (4 bytes each) stay in
# cache (ADULT, 286 marginals: 15 ms with 4096-row steps, 21 ms with all 48,842 rows at once);
# accelerators want large steps. Either way memory stays bounded for 10^7 records.
EXACT_ROW_CHUNK_CPU = 1 << 12
EXACT_ROW_CHUNK_ACCELERATOR = 1 << 20


@pytree_dataclass
class ExactPlan:
    """Array form of a marginal workload for counting on records.

    Every distinct marginal is padded to `k` attributes (padding: attribute 0 with stride 0, which
    adds nothing to the cell index); its cells occupy `offsets[i] : offsets[i] + cells_i` of one
    flat histogram of `n_cells` counts, in the order of first appearance in the workload.

    Attributes:
        attrs: (m_unique, k) int32 attribute indices.
        strides: (m_unique, k) int32 row-major strides.
        offsets: (m_unique,) int32 start of each distinct marginal's cells in the flat histogram.
        flat_index: (n_queries,) int32 position of each counting query (workload order) in the
            flat histogram, or None when the workload repeats no marginal (the histogram is then
            already in workload order).
        n_cells: length of the flat histogram (static).
        n_queries: number of counting queries (static).
        n_attributes: number of categorical attributes the codes must have (static).
    """

    attrs: Array
    strides: Array
    offsets: Array
    flat_index: Array | None
    n_cells: int = static_field()
    n_queries: int = static_field()
    n_attributes: int = static_field()


@functools.lru_cache(maxsize=64)
def exact_plan(workload: MarginalWorkload) -> ExactPlan:
    """Build (and cache) the counting plan of a workload. Repeated marginals are counted once."""
    unique: dict[tuple[int, ...], int] = {}
    for c in workload.cliques:
        unique.setdefault(c, len(unique))
    cliques = list(unique)
    k = max(len(c) for c in cliques)
    attrs = np.zeros((len(cliques), k), np.int32)
    strides = np.zeros((len(cliques), k), np.int32)
    cells = np.zeros(len(cliques), np.int64)
    for u, c in enumerate(cliques):
        shape = [workload.sizes[x] for x in c]
        attrs[u, : len(c)] = c
        strides[u, : len(c)] = [int(np.prod(shape[j + 1 :])) for j in range(len(c))]
        cells[u] = int(np.prod(shape))
    offsets = np.concatenate([[0], np.cumsum(cells)[:-1]])
    n_cells = int(cells.sum())
    if n_cells >= 2**31:
        raise ValueError(f"the workload has {n_cells} distinct cells; int32 cell indices hold < 2^31")
    flat_index = None
    if len(cliques) < len(workload.cliques):
        flat_index = np.concatenate(
            [
                offsets[unique[c]] + np.arange(n, dtype=np.int64)
                for c, n in zip(workload.cliques, workload.cells, strict=True)
            ]
        ).astype(np.int32)
    return ExactPlan(
        attrs, strides, offsets.astype(np.int32), flat_index, n_cells, workload.n_queries, len(workload.sizes)
    )


def _as_plan(workload: MarginalWorkload | ExactPlan) -> ExactPlan:
    return exact_plan(workload) if isinstance(workload, MarginalWorkload) else workload


def _check_codes(codes: Array, n_attributes: int) -> Array:
    codes = jnp.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != n_attributes:
        raise ValueError(f"codes must have shape (n_records, {n_attributes}), got {tuple(codes.shape)}")
    if codes.shape[0] == 0:
        raise ValueError("codes hold no records")
    if not jnp.issubdtype(codes.dtype, jnp.integer):
        raise TypeError(f"codes must be integers, got {codes.dtype}")
    return codes.astype(jnp.int32)


def _count_chunk(hist: Array, codes_t: Array, valid: Array | None, plan: ExactPlan) -> Array:
    """Add one chunk of records (codes_t: (d, rows)) to the flat (n_cells,) histogram."""
    attrs, strides, offsets = jnp.asarray(plan.attrs), jnp.asarray(plan.strides), jnp.asarray(plan.offsets)

    def one_marginal(i, h):
        idx = offsets[i] + jnp.sum(codes_t[attrs[i]] * strides[i][:, None], axis=0)
        if valid is not None:  # rows outside this chunk's share go past the end and are dropped
            idx = jnp.where(valid, idx, plan.n_cells)
        # A 1-D scatter into the loop-carried histogram, updated in place: XLA's batched (2-D)
        # scatter is several times slower per update.
        return h.at[idx].add(1, mode="drop")

    return jax.lax.fori_loop(0, attrs.shape[0], one_marginal, hist)


def marginal_counts(
    codes: Array,
    workload: MarginalWorkload | ExactPlan,
    dtype=jnp.float32,
    *,
    row_chunk: int | None = None,
) -> Array:
    """Counts of every counting query of the workload.

    Args:
        codes: (n_records, n_categorical) integer codes, each within its attribute's size (a
            validated `Dataset`'s codes are).
        workload: the marginals to answer, or their `exact_plan` (an array pytree: pass the plan
            as a jit argument and every workload with the same shapes reuses one program).
        dtype: output dtype (float32 for noise addition; int32 for exact integer counts). Counting
            is done in int32 and cast at the end, so float32 counts are exact up to 2^24.
        row_chunk: records per scatter step (static; default 4096 on CPU, 2^20 on accelerators);
            bounds memory for huge record counts.

    Returns:
        (workload.n_queries,) counts, marginals concatenated in workload order, each marginal's
        cells in row-major order over its ascending attributes.

    Privacy:
        Reads the private records. Under add/remove-one each marginal's count vector has L1 and
        L2 sensitivity 1 (see `marginal_sensitivity`). The result is private: wrap it in
        `Sensitive` before it leaves the caller.
    """
    plan = _as_plan(workload)
    codes = _check_codes(codes, plan.n_attributes)
    n = codes.shape[0]
    if row_chunk is None:
        cpu = jax.default_backend() == "cpu"
        row_chunk = EXACT_ROW_CHUNK_CPU if cpu else EXACT_ROW_CHUNK_ACCELERATOR
    rc = max(1, min(row_chunk, n))
    n_chunks = -(-n // rc)
    hist = jnp.zeros(plan.n_cells, jnp.int32)
    if n_chunks == 1:
        hist = _count_chunk(hist, codes.T, None, plan)
    else:
        # Rows outside, marginals inside: each chunk of records is read from cache by every
        # marginal (the other order streams the whole table once per marginal), and no copy of
        # the table is made. The last chunk is shifted back to end at row n; rows it shares with
        # the previous chunk are masked out.
        def step(hist, start):
            shifted = jnp.minimum(start, n - rc)
            chunk = jax.lax.dynamic_slice_in_dim(codes, shifted, rc, axis=0)
            valid = None if n % rc == 0 else shifted + jnp.arange(rc) >= start
            return _count_chunk(hist, chunk.T, valid, plan), None

        hist, _ = jax.lax.scan(step, hist, jnp.arange(n_chunks) * rc)
    if plan.flat_index is not None:
        hist = hist[jnp.asarray(plan.flat_index)]
    return hist.astype(dtype)


def cell_index(attributes: Sequence[int], columns, sizes: Sequence[int], rows: int) -> np.ndarray:
    """(rows,) int64 each record's flat cell in the marginal on `attributes` (row-major, the first
    slowest, as `marginal_counts` lays out a marginal), `columns[a]` holding attribute a's codes
    (NumPy, on the host)."""
    index = np.zeros(rows, np.int64)
    for a in attributes:
        index = index * sizes[a] + columns[a]
    return index


def host_marginal_counts(codes: np.ndarray, workload: MarginalWorkload) -> np.ndarray:
    """(workload.n_queries,) int64 `marginal_counts` of `codes`, counted by NumPy on the host.

    For records a release has made (post-processing), counted once outside a trace: there the
    counting program's compile costs more than the count (about 0.1 s against milliseconds for
    the 1,000 records of `bench_latency.py`'s `aim-pums` case).
    """
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != len(workload.sizes):
        raise ValueError(f"codes must have shape (n_records, {len(workload.sizes)}), got {codes.shape}")
    columns, rows = codes.T, codes.shape[0]
    return np.concatenate(
        [
            np.bincount(cell_index(clique, columns, workload.sizes, rows), minlength=cells)
            for clique, cells in zip(workload.cliques, workload.cells, strict=True)
        ]
    )


def marginal_fractions(
    codes: Array, workload: MarginalWorkload | ExactPlan, *, row_chunk: int | None = None
) -> Array:
    """Normalised answers (counts / n_records), the replace-one view.

    Privacy:
        Reads the private records. Under replace-one (n public) each marginal's fraction vector
        has L1 sensitivity 2/n and L2 sensitivity sqrt(2)/n.
    """
    counts = marginal_counts(codes, workload, jnp.float32, row_chunk=row_chunk)
    return counts / jnp.asarray(codes).shape[0]


# -- one-record form and the general batched path -------------------------------------------------


def counting_query_on_record(attrs: Array, values: Array, code_row: Array) -> Array:
    """1 if the record satisfies one counting query, else 0.

    Args:
        attrs: (k,) int32 attribute indices, -1 for padding.
        values: (k,) int32 required codes.
        code_row: (n_categorical,) int codes of one record.

    Returns:
        () float32 in {0, 1}.
    """
    hit = (attrs < 0) | (code_row[jnp.maximum(attrs, 0)] == values)
    return jnp.all(hit).astype(jnp.float32)


def record_answers(code_row: Array, queries: ProductQueries) -> Array:
    """(n_queries,) one record's answers to every query (the one-record form, vmapped over queries)."""
    return jax.vmap(counting_query_on_record, in_axes=(0, 0, None))(
        jnp.asarray(queries.attrs), jnp.asarray(queries.values), code_row
    )


def counting_query_answers(
    codes: Array,
    queries: ProductQueries,
    dtype=jnp.float32,
    *,
    row_chunk: int = DEFAULT_ROW_CHUNK,
    query_chunk: int = DEFAULT_QUERY_CHUNK,
) -> Array:
    """Counts of an arbitrary batch of counting queries (e.g. a workload's measured subset).

    Costs O(n_records x n_queries) but never holds more than one (row_chunk x query_chunk) block.

    Args:
        codes: (n_records, n_categorical) integer codes.
        queries: the queries (`workload_queries(w)` or a `.take(ids)` of it).
        dtype: output dtype; counting is exact in int32 and cast at the end.

    Returns:
        (n_queries,) counts.

    Privacy:
        Reads the private records; each counting query has sensitivity 1 under add/remove-one.
    """
    codes = _check_codes(codes, len(queries.sizes))
    attrs = jnp.asarray(queries.attrs)
    values = jnp.asarray(queries.values)

    def block(rows, weights, ids):
        a, v = attrs[ids], values[ids]  # (q, k)
        # (r, q, k): does record r match query q on slot t?
        hit = (a[None] < 0) | (rows[:, jnp.maximum(a, 0)] == v[None])
        match = jnp.all(hit, axis=-1).astype(jnp.int32)
        return jnp.sum(match * weights.astype(jnp.int32)[:, None], axis=0)

    counts = sum_over_rows(
        block, codes, len(queries), row_chunk=row_chunk, query_chunk=query_chunk, dtype=jnp.int32
    )
    return counts.astype(dtype)
