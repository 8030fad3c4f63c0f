"""Records drawn from a fitted graphical model (`sample`): ancestral, stratified sampling along its
junction tree, each attribute's counts balanced within the groups of records that share its
parents' values. Tables and columns are padded to power-of-two buckets (`padded_length`), so the
sampler compiles once per bucket rather than once per attribute.

Post-processing of noisy measurements: nothing here sees private data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._background import Compiler
from jaxdp.families._sampling import balanced, padded_length, systematic, weyl_step
from jaxdp.families.pgm import Clique
from jaxdp.keys import fold_in
from jaxdp.queries.exact import cell_index
from jaxdp.types import Array, Key


def sample(
    key: Key,
    plan: list[tuple[int, Clique, np.ndarray]],
    sizes: Sequence[int],
    rows: int,
    tracked: Sequence[Clique] = (),
) -> Array:
    """(rows, d) int32 records drawn from the model by ancestral, stratified sampling.

    Each attribute is drawn from its conditional given its parents (earlier attributes of its
    junction-tree clique) by `systematic`: within each group of records sharing the parents'
    values, the group's counts are its expected counts rounded up or down (Private-PGM's
    low-variance rounding), and the categories are spread evenly over the records sorted by the
    attributes drawn before (the strata), so the records' counts on marginals outside the tree's
    cliques track the model's conditional independences too. Drawn independently, records would
    leave up to two records per cell off and their non-clique marginals noisy, and that shows in
    the workload error (bench/HISTORY.md, "AIM's records against its model").

    `tracked` names the marginals whose records' counts should follow the model (the workload's,
    over the model's domain). An attribute in one of them with attributes drawn before it that
    are not all its parents (a marginal outside its clique, which sums over many parent groups)
    is drawn by `balanced` instead, keeping its group's counts and those of every such key
    (the marginal's other attributes) near their expectations at once (bench/HISTORY.md,
    "Releases that keep what was measured"). Keys of more than 2^22 cells x categories, and
    those past 2^26 record cells in all (the largest keys kept), are left to the strata.

    Tables are padded to powers of two above their parent groups (plus a spare group) and
    categories, and the rows to a power of two, so the sampler compiles once per bucket, not per
    attribute or row count; while the largest padded table is small, every attribute shares its
    shape, and so do the balanced columns (one compile each per release) until visiting every
    record at the shared shape costs more than compiling each its own (`_SHARED_BALANCED_WORK`);
    the balanced programs compile in the background as the release starts. Padded categories
    have probability 0 and are never chosen; padded rows form a group of their own (the spare
    last one) and are dropped.
    """
    padded_rows = padded_length(rows)
    shared = (
        padded_length(max(joint.shape[0] for _, _, joint in plan) + 1),
        padded_length(max(joint.shape[1] for _, _, joint in plan)),
    )
    owns = [(padded_length(joint.shape[0] + 1), padded_length(joint.shape[1])) for _, _, joint in plan]
    shapes = [shared if math.prod(shared) <= _SHARED_TABLE_CELLS else own for own in owns]
    keys = [
        _keys(a, parents, [b for b, _, _ in plan[:i]], tracked, sizes, shapes[i][1], rows)
        for i, (a, parents, _) in enumerate(plan)
    ]
    # the balanced columns share one shape too (keys and lag cells padded to the most of any)
    # while a visit of every record at that shape stays cheap; past it each has its own
    shared_keys = (
        padded_length(max(len(k) for k in keys)),
        padded_length(max(sum(math.prod(sizes[b] for b in key) for key in k) for k in keys) + 1),
    )
    if padded_rows * shared_keys[0] * shared[1] > _SHARED_BALANCED_WORK:
        shapes = [own if k else shape for own, shape, k in zip(owns, shapes, keys, strict=True)]
    # each balanced column's padded keys and lag cells; their programs start compiling now, so
    # each compiles while the columns before it are drawn
    balanced_shapes = [
        (
            shared_keys
            if shape == shared
            else (padded_length(len(k)), padded_length(sum(math.prod(sizes[b] for b in c) for c in k) + 1))
        )
        if k
        else None
        for shape, k in zip(shapes, keys, strict=True)
    ]
    signatures = [
        None if keyed is None else (str(key.dtype), shape, padded_rows, *keyed)
        for shape, keyed in zip(shapes, balanced_shapes, strict=True)
    ]
    for signature in signatures:
        if signature is not None:
            _balanced_program(key, signature, wait=False)
    columns: dict[int, np.ndarray] = {}
    strata = np.zeros((len(sizes), padded_rows), np.int32)  # the columns drawn so far, in order
    for i, (a, parents, joint) in enumerate(plan):
        n_groups, size = joint.shape
        shape = shapes[i]
        table = np.zeros(shape, np.float32)
        table[:n_groups, :size] = joint
        group = np.full(padded_rows, shape[0] - 1, np.int32)
        group[:rows] = cell_index(parents, columns, sizes, rows)
        column = (fold_in(key, a), jax.device_put(table), jax.device_put(group), np.int32(size))
        if keys[i]:
            width, lag_rows = balanced_shapes[i]
            cells = _key_cells(keys[i], columns, sizes, rows, padded_rows, width)
            lags = np.zeros((lag_rows, shape[1]), np.float32)
            program = _balanced_program(key, signatures[i])
            choice = program(
                *column, jax.device_put(cells), _key_weights(keys[i], sizes, width), lags, np.int32(rows)
            )
        else:
            choice = systematic(*column, jax.device_put(strata), weyl_step(a))
        columns[a] = np.asarray(choice)[:rows]
        strata[i, :rows] = columns[a]
    return jax.device_put(np.stack([columns[a] for a in range(len(sizes))], axis=1).astype(np.int32))


# 16 MB of float32 lags per key (a lane's), 256 MB of int32 record cells in all: keys past
# either are left to the strata
_KEY_CELLS = 2**22


_KEY_COLUMNS = 2**26


_balanced_programs = Compiler("jaxdp-release")


def _balanced_program(key: Key, signature: tuple, *, wait: bool = True):
    """`balanced` compiled for one column's (key type, table shape, rows, keys, lag cells)."""
    _, (n_groups, width), rows, n_keys, lag_rows = signature

    def lower():
        def shaped(*shape, dtype=jnp.int32):
            return jax.ShapeDtypeStruct(shape, dtype)

        return balanced.for_rows(rows).lower(
            key,
            shaped(n_groups, width, dtype=jnp.float32),
            shaped(rows),
            shaped(),
            shaped(rows, n_keys),
            shaped(n_keys, dtype=jnp.float32),
            shaped(lag_rows, width, dtype=jnp.float32),
            shaped(),
        )

    return _balanced_programs.program(signature, lower, wait=wait)


def _keys(a: int, parents: Clique, drawn: list[int], tracked, sizes, width: int, rows: int) -> list[Clique]:
    """The keys `a` is balanced over: each tracked marginal holding `a` whose other attributes
    are drawn and are not exactly the parents of `a` contributes them (once; each of at most _KEY_CELLS
    lags, and at most _KEY_COLUMNS record cells in all)."""
    keys = set()
    for clique in tracked:
        rest = tuple(b for b in clique if b != a)
        # a key equal to the parents is the group itself; any other sums over groups or splits them
        summed = len(rest) < len(clique) and set(rest) <= set(drawn) and set(rest) != set(parents)
        if summed and math.prod(sizes[b] for b in rest) * width <= _KEY_CELLS:
            keys.add(rest)
    # the most cells first (where counts are sparsest), as many as _KEY_COLUMNS allows
    most = max(0, _KEY_COLUMNS // padded_length(rows))
    return sorted(keys, key=lambda k: (-math.prod(sizes[b] for b in k), k))[:most]


def _key_weights(keys: list[Clique], sizes, width: int) -> Array:
    """(width,) float32 each key's weight in a balanced column's score: the square root of its
    cells over the most any key has (0 for the padding keys). A key's lags per cell shrink as its
    cells grow (the same records spread over more of them), so with equal weights the coarse
    keys decide and the sparse ones, where records lose most against the model, go unbalanced.
    AIM, epsilon 1, against equal weights: records' mean L1 on 6-attribute ADULT 0.1332 against
    0.1342 (seeds 0-4; the model's own 0.1336), records / model on 14 attributes 1.024 against
    1.027 (seeds 0-1), raw Adult's mixed-marginal error unchanged (0.0063, 0.0056, seeds 0-1).
    Weights of the cells themselves did as well on ADULT-6 but lost 8% on raw Adult, whose
    metric rests on the coarse marginals."""
    cells = np.array([math.prod(sizes[b] for b in key) for key in keys], np.float64)
    weights = np.zeros(width, np.float32)
    weights[: len(keys)] = np.sqrt(cells / cells.max())
    return jax.device_put(weights)


def _key_cells(keys, columns, sizes, rows: int, padded_rows: int, width: int) -> np.ndarray:
    """(padded_rows, width) int32 each record's cell of each key, the keys' cells laid out one
    after another; padding records and the `width - len(keys)` padding keys get the cell after
    them all."""
    cells = np.zeros((padded_rows, width), np.int64)
    n_cells = 0
    for j, k in enumerate(keys):
        cells[:rows, j] = n_cells + cell_index(k, columns, sizes, rows)
        n_cells += math.prod(sizes[b] for b in k)
    cells[rows:] = n_cells
    cells[:, len(keys) :] = n_cells
    return cells.astype(np.int32)


# 16 MB of float32: above it, padding every table to the largest would cost more than compiling
_SHARED_TABLE_CELLS = 2**22


# record x key x category lags gathered per balanced column: above it, a balanced column padded
# to the widest one costs more than a compile of its own (bnet9's 512 categories and 32 keys
# padded: 5 s a column on the 2-core CPU, where most need 33 categories and 8 keys)
_SHARED_BALANCED_WORK = 2**26
