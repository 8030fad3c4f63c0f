"""Answers on an explicit histogram over an enumerable domain (the MWEM / PEP families).

The histogram is a dense tensor with one axis per categorical attribute (shape = domain sizes), or
the same tensor flattened row-major. A marginal over S is the sum over the other axes, which comes
out in the workload's cell order (row-major over the ascending attributes of S). Mass normalised
to 1 gives fractions; a count histogram gives counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax.numpy as jnp

from jaxdp.domain import DataError
from jaxdp.queries.workload import MarginalWorkload
from jaxdp.types import Array

# 2^26 cells = 256 MiB per float32 histogram: the largest the families should hold on one device
# next to the copies an update makes; callers may pass a larger limit explicitly.
DEFAULT_MAX_CELLS = 1 << 26


def check_enumerable(sizes: Sequence[int], max_cells: int = DEFAULT_MAX_CELLS) -> int:
    """The number of cells of the domain, or a clear error if it is too large to enumerate.

    Args:
        sizes: categorical attribute sizes.
        max_cells: the largest histogram allowed.

    Returns:
        prod(sizes) as a Python int.

    Raises:
        DataError: if prod(sizes) > max_cells, saying how many cells and how much memory.
    """
    n_cells = math.prod(int(s) for s in sizes)
    if n_cells > max_cells:
        shape = " x ".join(str(int(s)) for s in sizes)
        gib = n_cells * 4 / 2**30
        raise DataError(
            f"the domain has {n_cells:,} cells ({shape}; {gib:,.1f} GiB as a float32 histogram), "
            f"more than the {max_cells:,} a dense histogram may hold: use a relaxed-row or "
            f"generator family, fewer attributes, or coarser attributes"
        )
    return n_cells


def histogram_marginals(
    hist: Array, workload: MarginalWorkload, *, max_cells: int = DEFAULT_MAX_CELLS
) -> Array:
    """Every counting query of the workload answered on a dense histogram.

    Args:
        hist: histogram of shape `workload.sizes`, or flattened (prod(sizes),) row-major.
        workload: the marginals.
        max_cells: refuse domains larger than this (see `check_enumerable`).

    Returns:
        (workload.n_queries,) answers in `marginal_counts` order (sums of histogram mass).

    Raises:
        DataError: if the domain is too large to enumerate.
        ValueError: if `hist` has the wrong shape.
    """
    sizes = tuple(workload.sizes)
    n_cells = check_enumerable(sizes, max_cells)
    hist = jnp.asarray(hist)
    if hist.shape not in (sizes, (n_cells,)):
        raise ValueError(f"hist must have shape {sizes} or ({n_cells},), got {tuple(hist.shape)}")
    h = hist.reshape(sizes)
    cache: dict[tuple[int, ...], Array] = {}
    parts = []
    for c in workload.cliques:
        if c not in cache:
            other = tuple(a for a in range(len(sizes)) if a not in c)
            cache[c] = jnp.sum(h, axis=other).reshape(-1) if other else h.reshape(-1)
        parts.append(cache[c])
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts)
