"""Bins of numeric columns, for the mechanisms that work on categories.

A column's bins are its interior cut points c_1 < ... < c_{k-1}: bin i holds the values in
[c_i, c_{i+1}) (the first from the lower bound, the last up to and including the upper bound).
They come from, in the schema (`jaxdp.domain.schema`):

- `bins`: equal width over the public bounds (for an integer column, over its whole numbers,
  so that every bin holds at least one);
- `edges`: the declared cut points;
- `"binning": "quantiles"`: private quantiles, the one data-dependent choice:
  `quantile_measurement` measures a histogram of each such column on a public fine grid
  (`fine_cuts`) with Gaussian noise, charged to the release's budget, and the cut points are read
  off the noisy cumulative counts (post-processing); on release, the same noisy counts spread each
  bin's records over the fine cells inside it (`split_fine_weights`, `jaxdp.coding`);
- nothing: `DEFAULT_BINNING` with `DEFAULT_BINS` bins: 32 private quantile bins.

Every choice but the quantiles reads only the schema, so it is public and costs nothing.

Why the default is private quantiles (bench/bench_mixed.py --floors, raw Adult train; errors on
the test split). Binned and decoded without noise, the table's own error floor on 20,000 random
mixed marginals is 0.0103 / 0.0068 / 0.0052 / 0.0042 with 16 / 32 / 64 / 128 equal-width bins per
numeric column. Private quantile bins merge where the mass sits (Adult's capital-gain gets 4 bins
of 32, fnlwgt 21), so a far smaller domain and less noise per cell; decoded uniformly within
their bins their floor was 0.0095 / 0.0065 / 0.0054 (no lower than 0.0052 at any count), and
decoded by the fine histogram (`jaxdp.coding`) it is 0.0044 / 0.0042, that of the 128-cell grid;
0.0037 / 0.0035 since the grid keeps the bounds' piles apart (`fine_cuts`), against 0.0034 for
train.csv itself. AIM with 32 quantile bins at epsilon 1: mixed-marginal error 0.0080 decoded
uniformly (seeds 0-2), 0.0060 by the fine histogram, 0.0043 with empty cells and piles kept
(seeds 0-4; RAP++ 0.0050; bench/HISTORY.md, "Raw Adult through a table schema"). The quantiles
cost 10% of the budget; a schema that declares `bins` or `edges` pays nothing.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdp.domain import Categorical, Dataset, Domain, NumericColumn, RawTable
from jaxdp.mechanisms import Adaptive, independent
from jaxdp.types import Neighboring

DEFAULT_BINS = 32
DEFAULT_BINNING = "quantiles"
# Share of the release's rho spent on private quantiles when a schema asks for them.
DEFAULT_BINNING_SHARE = 0.1
# Cells of the public grid the quantiles are read from: more cells resolve the quantiles more
# finely, but the noise of a cumulative count grows with the square root of the cells summed.
FINE_CELLS = 128
# A fine cell whose noisy count is at most this many noise deviations is pooled with the like
# cells of its bin when values are placed within bins (`split_fine_weights`). Raw Adult train,
# 32 noisy quantile bins decoded with no mechanism between (10 noise draws at epsilon 1's
# scale): mixed-marginal error 0.00458 with counts clipped at 0, 0.00439 / 0.00427 / 0.00434 /
# 0.00441 with such cells zeroed at 1.5 / 2 / 2.5 / 3 deviations, 0.00424 with the true counts
# (bench/HISTORY.md, "Raw Adult through a table schema").
EMPTY_BELOW = 2.0


def method(column: NumericColumn) -> str:
    """How the column is binned: "equal-width", "edges" or "quantiles"."""
    return column.binning or DEFAULT_BINNING


def is_private(column: NumericColumn) -> bool:
    """Whether the column's cut points are chosen from the data (a charged mechanism)."""
    return method(column) == "quantiles"


def public_cuts(column: NumericColumn) -> np.ndarray:
    """The cut points of a column whose bins read only the schema (not "quantiles")."""
    if method(column) == "edges":
        return np.asarray(column.edges, np.float64)
    if method(column) == "quantiles":
        raise ValueError(f"column {column.name!r}: quantile bins are chosen privately, from the data")
    return equal_width_cuts(column, bins_asked(column))


def bins_asked(column: NumericColumn) -> int:
    """The declared `bins`, else DEFAULT_BINS (at most the whole numbers of an integer column)."""
    if column.bins is not None:
        return column.bins
    if column.integer:
        first, last = column.whole_numbers
        return min(DEFAULT_BINS, last - first + 1)
    return DEFAULT_BINS


def equal_width_cuts(column: NumericColumn, bins: int) -> np.ndarray:
    """(bins - 1,) cut points of `bins` equal-width bins over the bounds; for an integer column,
    over its W whole numbers (bin i starts at first + ceil(i W / bins), bins <= W)."""
    steps = np.arange(1, bins)
    if column.integer:
        first, last = column.whole_numbers
        count = last - first + 1
        if bins > count:
            raise ValueError(f"column {column.name!r}: {bins} bins exceed its {count} whole numbers")
        return (first + -(-steps * count // bins)).astype(np.float64)
    return column.lower + (column.upper - column.lower) * steps / bins


def fine_cuts(column: NumericColumn) -> np.ndarray:
    """The public grid private quantiles are read from: FINE_CELLS cells. An integer column
    with at most FINE_CELLS whole numbers gets one cell per whole number; one with more gets a
    cell for each bound's whole number alone and equal-width cells between, since counts and
    amounts pile up at their bounds (zeros, top codes: raw Adult's capital-gain is 0 in 92% of
    rows and 99999 in 0.5%), and a cell that held the pile with its neighbours would spread it
    over them on release. A continuous column gets equal-width cells over its bounds."""
    if not column.integer:
        return equal_width_cuts(column, FINE_CELLS)
    first, last = column.whole_numbers
    if last - first + 1 <= FINE_CELLS:
        return equal_width_cuts(column, last - first + 1)
    between = dataclasses.replace(column, lower=float(first + 1), upper=float(last - 1))
    return np.concatenate([[first + 1.0], equal_width_cuts(between, FINE_CELLS - 2), [float(last)]])


def bin_codes(cuts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """int32 bin of each value (values within the bounds; no NaN)."""
    return np.searchsorted(cuts, values, side="right").astype(np.int32)


def fine_cell_bins(column: NumericColumn, cuts: np.ndarray) -> np.ndarray:
    """(G,) int32 the bin of each fine cell, for cut points that are a subset of the fine grid's
    (each fine cell lies in one bin)."""
    return bin_codes(cuts, np.concatenate([[column.lower], fine_cuts(column)]))


def quantile_cuts(fine: np.ndarray, noisy_counts: np.ndarray, bins: int) -> np.ndarray:
    """Cut points at the i / bins quantiles (i = 1..bins-1) of a noisy fine histogram.

    Post-processing of the released noisy counts: the cumulative counts are made monotone (a
    running maximum), each quantile is cut after the first fine cell whose cumulative count
    reaches it, and cut points that coincide merge (fewer bins where the mass is concentrated).

    Args:
        fine: (G - 1,) the fine grid's cut points.
        noisy_counts: (G,) noisy counts of the fine cells.
        bins: the bins asked for.

    Returns:
        Strictly increasing cut points, a subset of `fine` (at most bins - 1 of them).
    """
    cumulative = np.maximum.accumulate(np.cumsum(np.asarray(noisy_counts, np.float64)))
    if not cumulative[-1] > 0:  # the noise swamped the counts: quantiles of a flat histogram
        cumulative = np.arange(1.0, len(cumulative) + 1.0)
    targets = cumulative[-1] * np.arange(1, bins) / bins
    cells = np.searchsorted(cumulative, targets, side="left")
    return fine[np.unique(cells[cells < len(fine)])]


def fine_histograms(table: RawTable, columns: tuple[NumericColumn, ...]) -> Dataset:
    """The private columns coded to their fine-grid cell (a last cell for an empty value): the
    table whose 1-way marginals are the histograms private quantiles are read from."""
    attributes, codes = [], []
    for column in columns:
        fine = fine_cuts(column)
        values = table.values[column.name]
        empty = np.isnan(values)
        cell = bin_codes(fine, np.where(empty, column.lower, values))
        attributes.append(Categorical(column.name, len(fine) + 1 + column.nullable))
        codes.append(np.where(empty, len(fine) + 1, cell))
    return Dataset(
        Domain(tuple(attributes)),
        np.stack(codes, axis=1).astype(np.int32),
        np.zeros((len(table), 0), np.float32),
    )


def quantile_measurement(
    table: RawTable,
    columns: tuple[NumericColumn, ...],
    *,
    rho: float,
    relation: Neighboring,
    noise: str = "discrete",
) -> Adaptive:
    """The private measurement behind quantile bins: the Independent mechanism on the columns'
    fine-grid histograms (`fine_histograms`), which measures every histogram at once.

    Args:
        table: the private table.
        columns: the numeric columns to bin by private quantiles (at least one).
        rho: the zCDP budget of the measurement.
        relation: the release's neighbouring relation.
        noise: "discrete" (exact discrete Gaussian, default) or "float" (`jaxdp.noise`).

    Privacy:
        One Gaussian measurement of d concatenated histograms, L2 sensitivity sqrt(d) under
        add/remove and sqrt(2 d) under replace-one (`jaxdp.independent`), costing at most `rho`;
        its keys derive from the key it is run with (`jaxdp.keys.preprocess_key(root)` in a
        release). The cut points (`split_cuts`) are post-processing of the noisy counts.
    """
    if not columns:
        raise ValueError("quantile binning needs at least one column")
    return independent(fine_histograms(table, columns), rho=rho, relation=relation, noise=noise)


def split_cuts(columns: tuple[NumericColumn, ...], noisy_answers: np.ndarray) -> dict[str, np.ndarray]:
    """{column name: cut points} from the measurement's noisy 1-way answers (post-processing;
    counts or fractions alike: quantiles do not depend on the scale)."""
    return {
        c.name: quantile_cuts(fine_cuts(c), block, bins_asked(c))
        for c, block in zip(columns, _fine_blocks(columns, noisy_answers), strict=True)
    }


def split_fine_weights(
    columns: tuple[NumericColumn, ...],
    noisy_answers: np.ndarray,
    cuts: dict[str, np.ndarray],
    noise_scale: float,
) -> dict[str, np.ndarray]:
    """{column name: (G,) weights of its fine cells}, by which a release spreads each bin's
    records over the fine cells the bin holds (`jaxdp.coding`; post-processing of the same
    released counts the cut points come from).

    A cell whose noisy count exceeds `EMPTY_BELOW` noise deviations weighs its count. The other
    cells of its bin share their counts' sum, clipped at 0, in proportion to their widths: one
    by one they cannot be told from empty, but their sum is measured to sqrt(cells) deviations.
    Each cell's own count clipped at 0 would give an empty cell 0.4 deviations on average, and a
    wide bin of a heaped column holds many (raw Adult's capital-gain: 2,100 records' worth over
    its empty cells at epsilon 1, 6% of the column), so clipping alone moves records to values
    nobody has; zeroing those cells instead would move a thin tail's records onto the few cells
    that clear the threshold (a top code, say).

    Args:
        columns: the private columns, in the measurement's order.
        noisy_answers: the measurement's noisy 1-way answers (counts, or fractions).
        cuts: each column's cut points (`split_cuts`).
        noise_scale: the noise's standard deviation in the units of `noisy_answers`.
    """
    weights = {}
    for c, block in zip(columns, _fine_blocks(columns, noisy_answers), strict=True):
        cell_bin = fine_cell_bins(c, cuts[c.name])
        bins = len(cuts[c.name]) + 1
        width = fine_widths(c)
        clears = block > EMPTY_BELOW * noise_scale
        pooled = np.bincount(cell_bin, weights=np.where(clears, 0.0, block), minlength=bins)
        pooled_width = np.bincount(cell_bin, weights=np.where(clears, 0.0, width), minlength=bins)
        density = np.maximum(pooled, 0.0) / np.where(pooled_width > 0, pooled_width, 1.0)
        weights[c.name] = np.where(clears, block, density[cell_bin] * width)
    return weights


def fine_widths(column: NumericColumn) -> np.ndarray:
    """(G,) each fine cell's width: its whole numbers for an integer column, else its length."""
    if column.integer:
        starts, ends = column.whole_number_bins(fine_cuts(column))
        return ends - starts + 1
    return np.diff(np.concatenate([[column.lower], fine_cuts(column), [column.upper]]))


def _fine_blocks(columns: tuple[NumericColumn, ...], noisy_answers: np.ndarray) -> list[np.ndarray]:
    """Each column's noisy answers on its fine cells (without a nullable column's empty cell)."""
    sizes = [len(fine_cuts(c)) + 1 + c.nullable for c in columns]
    blocks = np.split(np.asarray(noisy_answers, np.float64), np.cumsum(sizes)[:-1])
    return [block[: len(block) - c.nullable] for c, block in zip(columns, blocks, strict=True)]
