"""Released records moved, one value at a time, toward the fitted model's workload marginals.

A sampler draws each attribute in turn, so it balances a marginal only against the attributes
drawn before (`_sampling.balanced`): once a later attribute is drawn, nothing looks back at the
marginals of an earlier one with it. On ADULT's 364 3-way marginals AIM's records scored 2.0-2.3%
above the model they came from (bench/HISTORY.md, "Records polished toward their model").

`polish` visits every record and attribute, with every other attribute drawn: it takes the
record's value away and gives it the value whose cells, in every workload marginal holding the
attribute, owe most, i.e. the value that lowers the summed L1 distance between the records'
counts and the model's expected counts (the model's answers times the rows) the most; the old
value on ties. Each visit can only lower that distance (a coordinate descent over records), and
no record is moved onto a cell the model gives probability 0; a record that holds such a cell
is moved off it wherever another value is allowed, whatever that does to the distance.

Post-processing only: the targets are the released model's answers, and the visiting order is
drawn from a RELEASE key.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._background import Compiler
from jaxdp._jit import BySize
from jaxdp.families._sampling import FAST_VISIT_ROWS, padded_length
from jaxdp.keys import fold_in
from jaxdp.queries import MarginalWorkload
from jaxdp.queries.exact import cell_index, host_marginal_counts
from jaxdp.types import Array, Key

# passes over every (record, attribute). AIM's records / model on 14-attribute ADULT, seed 0:
# 1.020 unpolished, 1.012 after one pass, 1.011 after two
PASSES = 1
# the most cells a polish holds in one array (float32: the workload's cells, and each attribute's
# marginals laid out for its pass) and record cells (int32, a record's cell in each marginal
# holding the attribute visited); past either the records are released as drawn (256 MB each)
MAX_CELLS = 2**26
MAX_RECORD_CELLS = 2**26
# the most (record, attribute) visits, every pass counted: each is a step of a sequential loop
# (14 attributes of 48,842 records with 78 marginals an attribute: 3.6-4.1 s a pass, warm, on a
# 2-core CPU); past it the records are released as drawn
MAX_VISITS = 2**21


def polishable(workload: MarginalWorkload, rows: int) -> bool:
    """Whether `polish` runs on a release of `rows` records (the caps above)."""
    return any(_shapes(workload, rows))


def _most_holding(workload: MarginalWorkload) -> int:
    """The most marginals any one attribute is in."""
    return max(sum(a in c for c in workload.cliques) for a in range(len(workload.sizes)))


def _shapes(workload: MarginalWorkload, rows: int) -> list[tuple[int, int, int] | None]:
    """Per attribute, the (layout cells, marginals, candidate values) its pass compiles for, or
    None where it is in no marginal; all None where the release is past the caps."""
    d = len(workload.sizes)
    if rows == 0 or not workload.cliques:
        return [None] * d
    n_keys = _most_holding(workload)
    if (
        workload.n_queries > MAX_CELLS
        or padded_length(rows) * n_keys > MAX_RECORD_CELLS
        or rows * d * PASSES > MAX_VISITS
    ):
        return [None] * d
    layouts = [_Layout(workload, a) for a in range(d)]
    widths = [padded_length(size) for size in workload.sizes]
    widest = max(w for w, layout in zip(widths, layouts, strict=True) if layout.holding)
    if padded_length(rows) * n_keys * widest <= _SHARED_WORK:
        # one shape for all: the layout long enough for every attribute's slices read at the
        # widest attribute's width
        cells = max(layout.length(widest) for layout in layouts if layout.holding)
        shapes = [(cells, n_keys, widest) if layout.holding else None for layout in layouts]
    else:
        shapes = [
            (layout.length(w), n_keys, w) if layout.holding else None
            for w, layout in zip(widths, layouts, strict=True)
        ]
    if max(shape[0] for shape in shapes if shape) > MAX_CELLS:
        return [None] * d
    return shapes


def start_compiling(key: Key, workload: MarginalWorkload, rows: int) -> None:
    """Start compiling the programs `polish` will run on a release of `rows` records, on a thread
    of their own: they compile while the records are drawn."""
    for signature in _signatures(key, workload, rows):
        if signature is not None:
            _program(key, signature, wait=False)


def polish(key: Key, codes: Array, answers: np.ndarray, workload: MarginalWorkload) -> Array:
    """(rows, d) int32 the records `codes`, each value revisited against the workload's marginals.

    Args:
        key: the RELEASE stream key (or one derived from it).
        codes: (rows, d) int32 records over the workload's domain.
        answers: (workload.n_queries,) the model's answers as fractions (each marginal sums to 1).
        workload: the marginals whose counts should follow the model.

    Returns:
        (rows, d) int32 records, as many as given; the same `codes` where `polishable` is False.
    """
    rows, d = codes.shape
    signatures = _signatures(key, workload, rows)
    if not any(signatures):
        return jnp.asarray(codes)
    records = np.zeros((padded_length(rows), d), np.int32)
    records[:rows] = np.asarray(codes)
    # what each cell is owed (its target less its count, in float64 before the float32 cast);
    # NaN where the model gives it probability 0, so that a value with such a cell is never
    # given (NaN stays NaN).
    answers = np.asarray(answers, np.float64)
    counts = host_marginal_counts(records[:rows], workload)
    owed = np.where(answers > 0, answers * rows - counts, np.nan).astype(np.float32)
    for sweep in range(PASSES):
        for a, signature in enumerate(signatures):
            if signature is None:
                continue
            layout = _Layout(workload, a)
            _, _, cells, n_keys, _ = signature
            local_owed, column = _program(key, signature)(
                fold_in(key, sweep * d + a),
                jax.device_put(layout.gather(owed, cells)),
                jax.device_put(records[:, a]),
                jax.device_put(layout.record_cells(records, n_keys)),
                jax.device_put((np.arange(n_keys) < len(layout.holding)).astype(np.float32)),
                np.int32(workload.sizes[a]),
                np.int32(rows),
            )
            layout.scatter(np.asarray(local_owed), owed)
            records[:, a] = np.asarray(column)
    return jax.device_put(records[:rows])


def _signatures(key: Key, workload: MarginalWorkload, rows: int) -> list[tuple | None]:
    """Per attribute, the shapes its visits compile for (key type, padded rows, layout cells,
    marginals, candidate values), or None where it is not visited (`_shapes`)."""
    return [shape and (str(key.dtype), padded_length(rows), *shape) for shape in _shapes(workload, rows)]


# record x marginal x value cells read in one attribute's pass: below it every attribute shares
# the widest attribute's shape and one compile (6-attribute ADULT: 65,536 x 10 x 128, one
# compile instead of four; the cold AIM command 9.1-9.8 s against 9.3-9.9 s, 3 runs each);
# above it each compiles its own (14-attribute ADULT: 65,536 x 78 x 128 a pass at the widest,
# where most attributes have 2 to 16 values)
_SHARED_WORK = 2**27


# a release compiles one program per distinct (layout, candidate values) shape: a few per workload
_programs = Compiler("jaxdp-polish", capacity=64)


def _program(key: Key, signature: tuple, *, wait: bool = True):
    """`_column_pass` compiled for one signature of `_signatures` (`key`: any of its key type)."""
    _, rows, cells, n_keys, width = signature

    def lower():
        def shaped(*shape, dtype=jnp.int32):
            return jax.ShapeDtypeStruct(shape, dtype)

        return _column_pass_program.for_rows(rows).lower(
            key,
            shaped(cells, dtype=jnp.float32),
            shaped(rows),
            shaped(rows, n_keys),
            shaped(n_keys, dtype=jnp.float32),
            shaped(),
            shaped(),
            width=width,
        )

    return _programs.program(signature, lower, wait=wait)


class _Layout:
    """The marginals holding attribute `a`, each with `a` moved to its last axis and laid end to
    end: a value's cells in a marginal are then neighbours, one contiguous slice a record."""

    def __init__(self, workload: MarginalWorkload, a: int):
        self.workload, self.a = workload, a
        self.holding = [i for i, c in enumerate(workload.cliques) if a in c]
        self.shapes = [workload.marginal_shape(i) for i in self.holding]
        self.axes = [workload.cliques[i].index(a) for i in self.holding]
        cells = [workload.cells[i] for i in self.holding]
        self.starts = np.concatenate([[0], np.cumsum(cells)[:-1]]).astype(np.int64)
        self.used = int(sum(cells))

    def length(self, width: int) -> int:
        """The layout's cells: a power of two past the last slice's end (`width` values)."""
        return padded_length(self.used + width)

    def gather(self, flat: np.ndarray, length: int) -> np.ndarray:
        """The marginals' cells of `flat` (workload order) in this layout, padded with zeros to
        `length` (at least `length(width)` for the width read)."""
        out = np.zeros(length, np.float32)
        for i, shape, axis, start in zip(self.holding, self.shapes, self.axes, self.starts, strict=True):
            marginal = flat[self.workload.offsets[i] : self.workload.offsets[i] + self.workload.cells[i]]
            out[start : start + marginal.size] = np.moveaxis(marginal.reshape(shape), axis, -1).ravel()
        return out

    def scatter(self, local: np.ndarray, flat: np.ndarray) -> None:
        """Write this layout's cells back into `flat` (workload order)."""
        for i, shape, axis, start in zip(self.holding, self.shapes, self.axes, self.starts, strict=True):
            moved = (*(s for j, s in enumerate(shape) if j != axis), shape[axis])
            cells = local[start : start + math.prod(shape)].reshape(moved)
            flat[self.workload.offsets[i] : self.workload.offsets[i] + self.workload.cells[i]] = np.moveaxis(
                cells, -1, axis
            ).ravel()

    def record_cells(self, records: np.ndarray, n_keys: int) -> np.ndarray:
        """(rows, n_keys) int32 where each record's slice starts in each marginal (value 0 of
        `a`); the padding marginals point past the slices, at cells that are never counted."""
        base = np.full((records.shape[0], n_keys), self.used, np.int32)
        for j, (i, shape, axis, start) in enumerate(
            zip(self.holding, self.shapes, self.axes, self.starts, strict=True)
        ):
            others = [b for b in self.workload.cliques[i] if b != self.a]
            cell = cell_index(others, records.T, self.workload.sizes, records.shape[0])
            base[:, j] = start + cell * shape[axis]
        return base


def visiting_order(key: Key, rows: int, real_rows: Array) -> Array:
    """(rows,) the records in the order one attribute's pass visits them: the real ones in a
    random order, then the padding (never visited)."""
    shuffled = jax.random.permutation(key, rows)
    return shuffled[jnp.argsort(shuffled >= real_rows, stable=True)]


def _column_pass(
    key: Key,
    owed: Array,
    column: Array,
    base: Array,
    weight: Array,
    size: Array,
    real_rows: Array,
    *,
    width: int,
) -> tuple[Array, Array]:
    """One attribute's visits, one record after another in a random order: (owed, column).

    `base` is where each record's slice of each marginal starts (`_Layout`), `weight` 1 for a real
    marginal and 0 for padding; `width` pads the candidate values (those past `size` are
    never given); records past `real_rows` are padding and are not visited."""
    values = jnp.arange(width)
    real = values < size
    order = visiting_order(key, column.shape[0], real_rows)
    slices = jax.vmap(lambda flat, start: jax.lax.dynamic_slice(flat, (start,), (width,)), (None, 0))

    def visit(step, carry):
        owed, column = carry
        record = order[step]
        held = column[record]
        starts = base[record]  # (keys,)
        owed = owed.at[starts + held].add(weight)
        cells = slices(owed, starts)  # (keys, values)
        # the change in |owed| summed over the marginals if the record took each value (NaN where
        # one of its cells has probability 0)
        change = (weight[:, None] * (jnp.abs(cells - 1.0) - jnp.abs(cells))).sum(axis=0)
        # the old value wins ties (a move must lower the distance by more than float rounding), and
        # stays where every other value is barred
        change = jnp.where(values == held, jnp.nan_to_num(change, nan=1e30) - 1e-3, change)
        change = jnp.where(real & ~jnp.isnan(change), change, jnp.inf)
        value = jnp.argmin(change).astype(column.dtype)
        owed = owed.at[starts + value].add(-weight)
        return owed, column.at[record].set(value)

    return jax.lax.fori_loop(0, real_rows, visit, (owed, column))


# as `_sampling.balanced`: quicker to compile for a few records, quicker to run for many
_column_pass_program = BySize(_column_pass, FAST_VISIT_ROWS, static_argnames="width")
