"""Chunked evaluation of (rows x queries) sums without materialising the (rows x queries) tensor.

Every query class whose batched form is "for a block of rows and a block of queries, give each
query's sum over those rows" goes through `sum_over_rows`: an outer `lax.map` over query chunks and
an inner `lax.scan` over row chunks, so peak memory is one (row_chunk x query_chunk) block however
many rows (10^7) or queries (10^6) there are, and one compiled program serves every size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxdp.types import Array

DEFAULT_ROW_CHUNK = 4096
DEFAULT_QUERY_CHUNK = 1024

# Blocks are given the row chunk, a (row_chunk,) weight (0 for a row an earlier chunk already
# covered, else 1) and the (query_chunk,) int32 query ids (clipped into range; the results of the
# clipped duplicates are discarded).
Block = Callable[[Any, Array, Array], Array]


def n_rows_of(rows: Any) -> int:
    leaves = jax.tree_util.tree_leaves(rows)
    if not leaves:
        raise ValueError("rows must hold at least one array")
    n = leaves[0].shape[0]
    if any(x.shape[0] != n for x in leaves):
        raise ValueError("all row arrays must have the same number of rows")
    return int(n)


def sum_over_rows(
    block: Block,
    rows: Any,
    n_queries: int,
    *,
    row_chunk: int = DEFAULT_ROW_CHUNK,
    query_chunk: int = DEFAULT_QUERY_CHUNK,
    dtype=jnp.float32,
) -> Array:
    """Each query's sum over all rows, computed block by block.

    Args:
        block: (rows_chunk, weights (r,), query_ids (q,)) -> (q,) sums over the chunk's rows;
            it must multiply each row's contribution by its weight (0 for rows counted twice).
        rows: pytree of arrays with a common leading dimension n_rows.
        n_queries: number of queries (static).
        row_chunk: rows per block (static).
        query_chunk: queries per block (static).
        dtype: accumulator dtype.

    Returns:
        (n_queries,) sums.
    """
    n = n_rows_of(rows)
    if n_queries < 1:
        raise ValueError("n_queries must be >= 1")
    rc = max(1, min(row_chunk, n))
    qc = max(1, min(query_chunk, n_queries))
    n_rc = -(-n // rc)
    n_qc = -(-n_queries // qc)
    # Recompute each block in the backward pass instead of storing it: memory stays one block.
    body = jax.checkpoint(block)

    def per_query_chunk(c):
        ids = jnp.minimum(c * qc + jnp.arange(qc, dtype=jnp.int32), n_queries - 1)
        if n_rc == 1:
            return body(rows, jnp.ones(n, dtype), ids).astype(dtype)

        def step(acc, start):
            # The last row chunk is shifted back to end at row n (no padded copy of the input);
            # the rows it shares with the previous chunk get weight 0.
            shifted = jnp.minimum(start, n - rc)
            chunk = jax.tree_util.tree_map(
                lambda x: jax.lax.dynamic_slice_in_dim(x, shifted, rc, axis=0), rows
            )
            w = (shifted + jnp.arange(rc) >= start).astype(dtype)
            return acc + body(chunk, w, ids).astype(dtype), None

        acc, _ = jax.lax.scan(step, jnp.zeros(qc, dtype), jnp.arange(n_rc) * rc)
        return acc

    if n_qc == 1:
        return per_query_chunk(jnp.int32(0))[:n_queries]
    out = jax.lax.map(per_query_chunk, jnp.arange(n_qc, dtype=jnp.int32))
    return out.reshape(-1)[:n_queries]
