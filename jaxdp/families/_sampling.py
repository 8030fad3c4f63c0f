"""Systematic sampling of categories within groups of records: the low-variance release step
shared by Private-PGM's ancestral sampler (`pgm.sample`) and the spreading of a compressed
domain's merged cells back over their values (`compression`).

Post-processing only: it draws public randomness (a RELEASE key) over released tables.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.types import Array, Key


def padded_length(n: int) -> int:
    """The power of two >= n that pads an n-long array, so that shapes (and compiles) come in
    buckets."""
    return 1 << max(0, (int(n) - 1).bit_length())


# Knuth's multiplicative constant, round(2^32 (sqrt 5 - 1) / 2): a Weyl sequence i * PHI mod 2^32
# (exact in uint32) spreads any run of consecutive i evenly over [0, 2^32).
_PHI = 2654435769


@jax.jit
def systematic(key: Key, table: Array, group: Array, size: Array, strata: Array) -> Array:
    """One column of categories: each group's counts its expected counts rounded, and spread
    evenly over the records' other columns.

    Within a group of m records the m systematic points (j + U_g) / m, j = 0..m-1, are handed
    out in a low-discrepancy order along the records sorted by `strata`: the record at sorted
    position i takes the point whose rank among the Weyl sequence V_g + i PHI (mod 1) is j, and
    the category of the group's row of `table` whose CDF interval holds it. So the group's
    counts are its expected counts rounded up or down (a category whose interval has length m p
    holds floor(m p) or ceil(m p) of the points), and every run of records with the same strata
    values gets close to its share of each category: the records' joint counts with the strata
    columns track the conditional independence the table describes, where records drawn
    independently (or in random order) would add sampling noise to them.

    Args:
        key: the RELEASE stream key (or one derived from it).
        table: (n_groups, width) unnormalised probabilities over the first `size` categories
            (an all-zero row is uniform over them).
        group: (rows,) int32 each record's row of `table`.
        size: () the real categories (columns past it are padding, never chosen).
        strata: (k, rows) int32 the records' other columns, most significant first (k may be
            0); ties are broken at random.

    Returns:
        (rows,) int32 categories in [0, size).
    """
    rows = group.shape[0]
    n_groups, width = table.shape
    real = jnp.arange(width) < size
    totals = table.sum(axis=1, keepdims=True)
    uniform = jnp.where(real, 1.0 / size, 0.0)
    probs = jnp.where(totals > 0, table / jnp.where(totals > 0, totals, 1.0), uniform)
    cdf = jnp.cumsum(probs, axis=1)
    tie_key, weyl_key, offset_key = jax.random.split(key, 3)
    ties = jax.random.bits(tie_key, (rows,), jnp.uint32)
    # lexsort's last key is the primary one: group, then the strata in order, then the ties
    order = jnp.lexsort((ties, *strata[::-1], group))
    sorted_group = group[order]
    counts = jnp.bincount(group, length=n_groups)
    starts = jnp.cumsum(counts) - counts
    position = (jnp.arange(rows) - starts[sorted_group]).astype(jnp.uint32)
    weyl = jax.random.bits(weyl_key, (n_groups,), jnp.uint32)[sorted_group] + position * jnp.uint32(_PHI)
    by_weyl = jnp.lexsort((weyl, sorted_group))
    rank = (
        jnp.zeros(rows, jnp.int32)
        .at[by_weyl]
        .set(jnp.arange(rows, dtype=jnp.int32) - starts[sorted_group[by_weyl]])
    )
    offsets = jax.random.uniform(offset_key, (n_groups,))
    u = (rank + offsets[sorted_group]) / counts[sorted_group]
    # rounding can leave the last real category's cdf below u: clamp, never a padded category
    choice = jnp.minimum(jnp.sum(cdf[sorted_group] <= u[:, None], axis=1), size - 1)
    return jnp.zeros(rows, jnp.int32).at[order].set(choice.astype(jnp.int32))
