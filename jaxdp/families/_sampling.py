"""Systematic sampling of categories within groups of records: the low-variance release step
every family releases records by. Private-PGM's ancestral sampler (`pgm_sampling.sample`), the spreading
of a compressed domain's merged cells back over their values (`compression`), the mixtures of
product distributions of the relaxed rows and generators (`mixture_rows`: RAP, GEM, RAP++,
AIM-GEM, and Independent's single product) and the histograms and multisets (`support_rows`:
MWEM, PEP, DualQuery, FEM) all round each group's expected counts instead of drawing records
independently, whose sampling noise would add to the workload error of the release.

Post-processing only: it draws public randomness (a RELEASE key) over released tables.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._jit import BySize, fast_compiled
from jaxdp.keys import fold_in, split_keys
from jaxdp.types import Array, Key


def padded_length(n: int) -> int:
    """The power of two >= n that pads an n-long array, so that shapes (and compiles) come in
    buckets."""
    return 1 << max(0, (int(n) - 1).bit_length())


# Knuth's multiplicative constant, round(2^32 (sqrt 5 - 1) / 2): a Weyl sequence i * PHI mod 2^32
# (exact in uint32) spreads any run of consecutive i evenly over [0, 2^32).
_PHI = 2654435769


def _weyl_steps(count: int) -> np.ndarray:
    """(count,) uint32 Weyl steps: PHI, then the fractional parts of the square roots of the
    primes but 5 (sqrt 5 is PHI's field), times 2^32, exactly (integer square roots).

    Each column drawn by `systematic` takes its own step (`weyl_step`). Columns drawn one after
    another are sorted by nearly the same strata once the first few make the sort unique, so a
    record sits at nearly the same position in each; with one step for all, the columns'
    points would then be the same sequence shifted, and the columns coupled (two independent
    binary columns of a product released 0.03-0.06 off their own product, on 48,842 records).
    Steps whose ratios are irrational over each other (square roots of distinct primes) make
    the columns' sequences jointly equidistributed, and each alone keeps a low discrepancy
    (quadratic irrationals have bounded continued fractions)."""
    steps, p = [_PHI], 2
    while len(steps) < count:
        if p != 5 and all(p % q for q in range(2, math.isqrt(p) + 1)):
            steps.append(math.isqrt(p << 64) & 0xFFFFFFFF)
        p += 1
    return np.asarray(steps, np.uint32)


# columns past this many share steps again (attribute j takes step j mod 256)
_WEYL_STEPS = _weyl_steps(256)


def weyl_step(column: int) -> Array:
    """() uint32 the Weyl step of the `column`-th column a release draws (`_weyl_steps`)."""
    if isinstance(column, int):  # a host column: put, where indexing on the device compiles
        return jax.device_put(_WEYL_STEPS[column % len(_WEYL_STEPS)])
    return jnp.asarray(_WEYL_STEPS)[column % len(_WEYL_STEPS)]


# XLA:CPU's quicker code generator (`jaxdp._jit`): a release compiles it first, on its critical
# path, and runs it a few times. 65,536 rows and 6 strata: compiled in 0.48-0.57 s instead of
# 0.70-0.73 s (a loaded 2-core CPU), run in 44 ms either way, the same draws.
@fast_compiled
def systematic(key: Key, table: Array, group: Array, size: Array, strata: Array, step: Array) -> Array:
    """One column of categories: each group's counts its expected counts rounded, and spread
    evenly over the records' other columns.

    Within a group of m records the m systematic points (j + U_g) / m, j = 0..m-1, are handed
    out in a low-discrepancy order along the records sorted by `strata`: the record at sorted
    position i takes the point whose rank among the Weyl sequence V_g + i step (mod 1) is j (each
    column its own `step`), and the category of the group's row of `table` whose CDF interval
    holds it. So the group's counts are its expected counts rounded up or down (a category whose
    interval has length m p holds floor(m p) or ceil(m p) of the points), and every run of
    records with the same strata values gets close to its share of each category: the records'
    joint counts with the strata columns track the conditional independence the table
    describes, where records drawn independently (or in random order) would add sampling noise
    to them.

    Args:
        key: the RELEASE stream key (or one derived from it).
        table: (n_groups, width) unnormalised probabilities over the first `size` categories
            (an all-zero row is uniform over them).
        group: (rows,) int32 each record's row of `table`.
        size: () the real categories (columns past it are padding, never chosen).
        strata: (k, rows) int32 the records' other columns, most significant first (k may be
            0); ties are broken at random.
        step: () uint32 this column's Weyl step (`weyl_step`: each column of a release its own).

    Returns:
        (rows,) int32 categories in [0, size).
    """
    rows = group.shape[0]
    n_groups, width = table.shape
    cdf = jnp.cumsum(_normalised(table, size), axis=1).reshape(-1)
    tie_key, weyl_key, offset_key = split_keys(key, 3)
    ties = jax.random.bits(tie_key, (rows,), jnp.uint32)
    # lexsort's last key is the primary one: group, then the strata in order, then the ties
    order = jnp.lexsort((ties, *strata[::-1], group))
    sorted_group = group[order]
    counts = jnp.bincount(group, length=n_groups)
    starts = jnp.cumsum(counts) - counts
    position = (jnp.arange(rows) - starts[sorted_group]).astype(jnp.uint32)
    weyl = jax.random.bits(weyl_key, (n_groups,), jnp.uint32)[sorted_group] + position * step.astype(
        jnp.uint32
    )
    by_weyl = jnp.lexsort((weyl, sorted_group))
    rank = (
        jnp.zeros(rows, jnp.int32)
        .at[by_weyl]
        .set(jnp.arange(rows, dtype=jnp.int32) - starts[sorted_group[by_weyl]])
    )
    offsets = jax.random.uniform(offset_key, (n_groups,))
    u = (rank + offsets[sorted_group]) / counts[sorted_group]
    # rounding can leave the last real category's cdf below u: clamp, never a padded category
    choice = jnp.minimum(_first_above(cdf, sorted_group * width, width, u), size - 1)
    return jnp.zeros(rows, jnp.int32).at[order].set(choice.astype(jnp.int32))


def _normalised(table: Array, size: Array) -> Array:
    """Each row of `table` normalised over its first `size` categories (an all-zero row:
    uniform over them; the padding columns past `size` get 0)."""
    real = jnp.arange(table.shape[1]) < size
    totals = table.sum(axis=1, keepdims=True)
    uniform = jnp.where(real, 1.0 / size, 0.0)
    return jnp.where(totals > 0, table / jnp.where(totals > 0, totals, 1.0), uniform)


def _first_above(cdf: Array, start: Array, width: int, u: Array) -> Array:
    """(rows,) for each record the first category c of its row (cdf[start + c], c < width) whose
    cumulative probability exceeds u: a binary search, never a (rows, width) table."""
    lo = jnp.zeros(u.shape, jnp.int32)
    hi = jnp.full(u.shape, width, jnp.int32)
    for _ in range(width.bit_length()):
        mid = (lo + hi) // 2
        right = cdf[start + jnp.minimum(mid, width - 1)] <= u
        lo, hi = jnp.where(right, mid + 1, lo), jnp.where(right, hi, mid)
    return lo


def _mixed(bits: Array) -> Array:
    """MurmurHash3's 32-bit finaliser: every input bit flips about half the output bits."""
    bits = (bits ^ (bits >> 16)) * jnp.uint32(0x85EBCA6B)
    bits = (bits ^ (bits >> 13)) * jnp.uint32(0xC2B2AE35)
    return bits ^ (bits >> 16)


def mixture_rows(key: Key, probs: Array, sizes: tuple[int, ...], rows: int) -> tuple[Array, Array]:
    """Records of a uniform mixture of product distributions, released by `systematic`.

    Each row of `probs` is one product distribution (a block of `sizes[j]` columns per attribute,
    unnormalised: a block is clipped at 0 and normalised, an all-zero block read as uniform). The
    rows get the records evenly (rows / n_rows each, rounded), and each attribute is drawn given
    the record's row with its counts rounded and spread over the attributes drawn before, so the
    records' marginals follow the mixture's answers closely rather than up to sampling noise.

    Returns:
        (codes (rows, n_attributes) int32, the mixture row of each record (rows,) int32).
    """
    n_rows = probs.shape[0]
    row_key, attribute_key = split_keys(key)
    anywhere = jnp.zeros(rows, jnp.int32)
    picked = systematic(
        row_key, jnp.ones((1, n_rows), jnp.float32), anywhere, jnp.int32(n_rows), anywhere[None], weyl_step(0)
    )
    if not sizes:
        return jnp.zeros((rows, 0), jnp.int32), picked
    width = max(sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    blocks = jnp.stack(
        [
            jnp.pad(jnp.clip(probs[:, s : s + k], 0.0, None), ((0, 0), (0, width - k)))
            for s, k in zip(starts, sizes, strict=True)
        ]
    )

    def attribute(strata, j):
        column = systematic(
            fold_in(attribute_key, j),
            blocks[j],
            picked,
            jnp.asarray(sizes)[j],
            strata,
            weyl_step(j + 1),
        )
        return strata.at[j].set(column), column

    _, columns = jax.lax.scan(attribute, jnp.zeros((len(sizes), rows), jnp.int32), jnp.arange(len(sizes)))
    return columns.T, picked


def support_rows(key: Key, weights: Array, rows: int) -> Array:
    """(rows,) int32 indices into a support with these (unnormalised) weights, each index's count
    its expected count rounded (`systematic` with one group)."""
    anywhere = jnp.zeros(rows, jnp.int32)
    return systematic(
        key,
        weights[None].astype(jnp.float32),
        anywhere,
        jnp.int32(weights.shape[0]),
        anywhere[None],
        weyl_step(0),
    )


# records visited one after another per lane: lanes split longer releases (each lane its own lags)
_LANE_ROWS = 1 << 16
# passes over the records after the first, each record taking its category back and choosing
# again against every other record's. AIM's records / model on 14-attribute ADULT: 1.024 and
# 1.025 with none (seeds 0-1), 1.023 with 1 and 1.022 with 2 (seeds 0-4), no lower with 3 or 4;
# each pass is another visit of every record (0.3 s a release on 6-attribute ADULT)
_REVISITS = 1


# the records up to which a record visit's program (`balanced`, the polish's column pass)
# compiles by XLA:CPU's quicker code generator (`jaxdp._jit.BySize`): AIM's cold command on a
# 1,000-record table (1,024 padded) compiled them in about half the time, 0.7 s sooner in all;
# on 48,842 records (65,536 padded) their runs were 0.3 s slower, more than the compile saved
# (bench/HISTORY.md, "AIM's cold process on a small table")
FAST_VISIT_ROWS = 2**14


def _balanced(
    key: Key,
    table: Array,
    group: Array,
    size: Array,
    cells: Array,
    keys: Array,
    lag: Array,
    real_rows: Array,
) -> Array:
    """One column of categories whose counts track their expectations on several keys at once.

    `systematic` rounds each group's counts and spreads them over runs of records sorted by the
    strata, but a marginal over attributes that are neither the group's nor the first strata
    (a sum over many groups) collects each group's rounding independently, as sampling noise.
    Here the records are visited in a random order, each with a lag per category in its group
    and in each of its key cells: the expected count so far (the records' rows of `table`,
    normalised, its own included) less the count already given. A record takes, among the
    categories its group still owes (lag > 0), the one of largest weighted sum of key lags. So
    within a group every lag stays above -1 and, as they sum to 0, below C - 1 for C categories of
    positive probability (each group's counts within that of their expectation: a proof), and
    the key cells' counts stay close to theirs at once (a greedy, online form of the controlled
    rounding of several tables; tests/families/test_pgm.py states the bounds seen). The first
    pass sees only the records before each one; `_REVISITS` more passes, in the same order, let
    each record hand its category back (its lags rise by 1 there, so that category is owed
    again) and choose anew against every other record's choice. The group bounds hold after
    every visit, as the lags still sum to 0 in each group. Records are visited in lanes of up
    to 2^16, side by side, each with lags of its own; the padding records come after the real
    ones and are not visited (a padded length costs no steps).

    Args:
        key: the RELEASE stream key (or one derived from it).
        table: (n_groups, width) unnormalised probabilities over the first `size` categories
            (an all-zero row is uniform over them).
        group: (rows,) int32 each record's row of `table` (rows a power of two).
        size: () the real categories.
        cells: (rows, k) int32 each record's cell in each tracked key (rows of `lag`; padding
            records, and padding keys, point at a cell no real record uses).
        keys: (k,) each key's weight in the score, 0.0 for padding (k is padded: few compiled
            shapes).
        lag: (n_cells, width) zeros: its shape sets the tracked cells' (the groups' follow).
        real_rows: () the records before the padding (the rows past it get category 0).

    Returns:
        (rows,) int32 categories in [0, size), never one of probability 0 in its group's row.
    """
    rows = group.shape[0]
    n_groups, width = table.shape
    lanes = max(1, rows // _LANE_ROWS)
    real = jnp.arange(width) < size
    probs = _normalised(table, size)
    order_key, tie_key = split_keys(key)
    record_bits = jax.random.bits(tie_key, (rows,), jnp.uint32)
    category_bits = jnp.arange(width, dtype=jnp.uint32) * jnp.uint32(_PHI)
    shuffled = jax.random.permutation(order_key, rows)
    # the real records in random order, then the padding: the visits stop after the real ones
    order = shuffled[jnp.argsort(shuffled >= real_rows, stable=True)].reshape(rows // lanes, lanes)
    steps = (real_rows + lanes - 1) // lanes
    tracked = jnp.concatenate([lag.shape[0] + group[:, None], cells], axis=1)
    lane = jnp.arange(lanes)[:, None]

    def visit(step, carry):
        lags, choices = carry
        first = step < steps
        at_step = step % steps
        visited = order[at_step]
        p = probs[group[visited]]  # (lanes, width)
        at = tracked[visited]  # (lanes, k + 1)
        # the lags as if this record had not been given a category yet but were counted: on the
        # first pass its share of the expectations is added, on a revisit its category taken back
        held = jax.nn.one_hot(choices[at_step], width, dtype=p.dtype)
        returned = jnp.where(first, p, held)
        tracked_lags = lags[lane, at] + returned[:, None, :]  # (lanes, k + 1, width): the group's first
        owed = tracked_lags[:, 0] > 0
        # ties broken at random (a hash of the record's random bits and the category: a
        # generator call per visit cost more than the rest of the step), far below the lag
        # differences that decide
        bits = _mixed(record_bits[visited][:, None] ^ category_bits[None])
        ties = bits.astype(jnp.float32) * jnp.float32(1e-4 / 2**32)
        score = (tracked_lags[:, 1:] * keys[None, :, None]).sum(axis=1) + ties
        choice = jnp.argmax(jnp.where(real[None] & (p > 0) & owed, score, -jnp.inf), axis=1)
        given = returned - jax.nn.one_hot(choice, width, dtype=p.dtype)
        return lags.at[lane, at].add(given[:, None, :]), choices.at[at_step].set(choice.astype(jnp.int32))

    lags = jnp.zeros((lanes, lag.shape[0] + n_groups, width), jnp.float32)
    choices = jnp.zeros((rows // lanes, lanes), jnp.int32)
    _, choices = jax.lax.fori_loop(0, steps * (1 + _REVISITS), visit, (lags, choices))
    return jnp.zeros(rows, jnp.int32).at[order.reshape(-1)].set(choices.reshape(-1))


balanced = BySize(_balanced, FAST_VISIT_ROWS)
