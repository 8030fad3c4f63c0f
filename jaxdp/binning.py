"""Bins of numeric columns, for the mechanisms that work on categories.

A column's bins are its interior cut points c_1 < ... < c_{k-1}: bin i holds the values in
[c_i, c_{i+1}) (the first from the lower bound, the last up to and including the upper bound).
They come from, in the schema (`jaxdp.tables`):

- `bins`: equal width over the public bounds (for an integer column, over its whole numbers,
  so that every bin holds at least one);
- `edges`: the declared cut points;
- `"binning": "quantiles"`: private quantiles, the one data-dependent choice: `QuantileBinning`
  measures a histogram of each such column on a public fine grid (`fine_cuts`) with Gaussian
  noise, charged to the release's budget, and the cut points are read off the noisy cumulative
  counts (post-processing);
- nothing: `DEFAULT_BINNING` with `DEFAULT_BINS` bins.

Every choice but the quantiles reads only the schema, so it is public and costs nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.accounting import MEASURE_PRIMITIVE, Plan, PlannedCharge
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import RoundInfo, count_sigma, marginal_count_sensitivity
from jaxdp.tables import NumericColumn, RawTable
from jaxdp.types import Array, Key, Neighboring, Sensitive, pytree_dataclass, static_field

DEFAULT_BINS = 16
DEFAULT_BINNING = "equal-width"
# Share of the release's rho spent on private quantiles when a schema asks for them.
DEFAULT_BINNING_SHARE = 0.1
# Cells of the public grid the quantiles are read from: more cells resolve the quantiles more
# finely, but the noise of a cumulative count grows with the square root of the cells summed.
FINE_CELLS = 128


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
    """The public grid private quantiles are read from: FINE_CELLS equal-width cells, or one
    cell per whole number for an integer column with fewer."""
    if column.integer:
        first, last = column.whole_numbers
        return equal_width_cuts(column, min(FINE_CELLS, last - first + 1))
    return equal_width_cuts(column, FINE_CELLS)


def bin_codes(cuts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """int32 bin of each value (values within the bounds; no NaN)."""
    return np.searchsorted(cuts, values, side="right").astype(np.int32)


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


class BinningState(NamedTuple):
    """noisy_counts: (sum of fine cells,) the noisy histograms, column after column."""

    noisy_counts: Array
    rounds_done: Array
    rho_spent: Array


@pytree_dataclass
class QuantileBinning:
    """Private quantile bins: one Gaussian measurement of fine histograms (one round).

    Privacy:
        One measurement of the concatenated fine-grid histograms of d columns (an empty cell is
        counted in none): one record moves one count of each histogram, so the L2 sensitivity is
        sqrt(d) under add/remove and sqrt(2 d) under replace-one (one count down, another up);
        rho = sensitivity^2 / (2 sigma^2). Key stream MEASURE of round 0 of the key it is run
        with (`jaxdp.keys.preprocess_key(root)` in a release). The cut points are
        post-processing of the noisy counts.
    """

    counts: Sensitive
    cells: tuple[int, ...] = static_field()
    relation: Neighboring = static_field()
    sigma: float = static_field()
    sensitivity: float = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    rounds: int = static_field(default=1)

    def init(self, key: Key) -> BinningState:
        require_key(key)
        zero = jnp.zeros((), jnp.int32)
        return BinningState(jnp.zeros(sum(self.cells), jnp.float32), zero, jnp.zeros((), jnp.float32))

    def step(self, state: BinningState, key: Key) -> tuple[BinningState, RoundInfo]:
        require_key(key)
        noisy, charge = noise_module.measure_counts(
            stream_key(key, Stream.MEASURE),
            self.counts,
            sigma=self.sigma,
            sensitivity=self.sensitivity,
            noise=self.noise,
        )
        spent = state.rho_spent + self.plan.rho_planned
        return BinningState(noisy, state.rounds_done + 1, spent), RoundInfo(charges=(charge,))

    def release(self, state: BinningState, key: Key) -> Array:
        """The noisy counts (deterministic: the key is accepted for the common shape)."""
        require_key(key)
        return state.noisy_counts


def quantile_binning(
    table: RawTable,
    columns: tuple[NumericColumn, ...],
    *,
    rho: float,
    relation: Neighboring,
    noise: str = "discrete",
) -> QuantileBinning:
    """Build the private quantile measurement of `columns` (their fine-grid histograms).

    Args:
        table: the private table.
        columns: the numeric columns to bin by private quantiles (at least one).
        rho: the zCDP budget of the measurement.
        relation: the release's neighbouring relation.
        noise: "discrete" (exact discrete Gaussian, default) or "float" (`jaxdp.noise`).

    Privacy:
        See `QuantileBinning`: rho-zCDP at most.
    """
    _checks.positive_finite(rho, "rho")
    _checks.one_of(noise, noise_module.NOISES, "noise")
    if not columns:
        raise ValueError("quantile binning needs at least one column")
    histograms = []
    for column in columns:
        fine = fine_cuts(column)
        values = table.values[column.name]
        present = values[~np.isnan(values)]
        histograms.append(np.bincount(bin_codes(fine, present), minlength=len(fine) + 1))
    counts = Sensitive(jnp.asarray(np.concatenate(histograms), jnp.int32))
    sensitivity = marginal_count_sensitivity(len(columns), relation)
    sigma = count_sigma(sensitivity, rho, noise)
    names = ", ".join(c.name for c in columns)
    charge = PlannedCharge(
        f"private binning: fine histograms of {names}", MEASURE_PRIMITIVE[noise], sensitivity, sigma
    )
    plan = Plan.from_rho(rho).with_charge(charge).check()
    cells = tuple(len(h) for h in histograms)
    return QuantileBinning(counts, cells, relation, sigma, sensitivity, plan, noise)


def split_cuts(binning: QuantileBinning, columns: tuple[NumericColumn, ...], noisy: np.ndarray) -> dict:
    """{column name: cut points} from the released noisy counts (post-processing)."""
    blocks = np.split(np.asarray(noisy, np.float64), np.cumsum(binning.cells)[:-1])
    return {
        c.name: quantile_cuts(fine_cuts(c), block, bins_asked(c))
        for c, block in zip(columns, blocks, strict=True)
    }
