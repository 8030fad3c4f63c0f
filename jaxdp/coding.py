"""From a raw table to the records a mechanism reads, and from a release back to the table.

A `TableCoding` fixes, from the schema and each numeric column's cut points (`jaxdp.binning`),
the coded `Domain` a mechanism sees:

- a categorical column keeps its codes; a nullable one gains a last code, "empty";
- a numeric column, for mechanisms over categories, becomes its bin (plus a last "empty" bin
  when nullable); for RAP++ (`real=True`) it stays real in the normalised [0, 1] of its bounds,
  and a nullable one gains a categorical companion column "<name> (empty)" (an empty cell's
  value is stored as the lower bound, the companion says it is empty).

`decode` maps a release back to the schema's columns, labels and units: a value drawn within its
bin, values rounded to whole numbers where declared, empty where the release says so. Within a
bin of private quantiles the value follows the noisy fine histogram the quantiles were read from
(each fine cell of the bin in proportion to its noisy count, the cells within the noise sharing
their sum: `binning.split_fine_weights`; then uniform within the cell); within any other bin it is
uniform (among the bin's whole numbers for an integer column).
The fine histogram is already released (and charged) for the cut points: following it costs
nothing, and places values where the data is within wide bins.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jaxdp.binning import bin_codes, fine_cell_bins, fine_cuts, fine_widths, method
from jaxdp.domain import (
    Attribute,
    Categorical,
    CategoricalColumn,
    DataError,
    Dataset,
    Domain,
    Numeric,
    NumericColumn,
    RawTable,
    TableSchema,
)
from jaxdp.domain.encode import LABEL_MATCHING
from jaxdp.keys import fold_in, require_key
from jaxdp.types import Key

EMPTY_LABEL = ""
EMPTY_SUFFIX = " (empty)"


@dataclasses.dataclass(frozen=True)
class TableCoding:
    """How a raw table is coded for a mechanism (public: schema and cut points only).

    Attributes:
        schema: the declared schema.
        cuts: cut points of each binned numeric column (none when `real`).
        real: numeric columns stay real (RAP++).
        private: names of the columns whose cut points were chosen from the data (charged).
        fine: per private column, the (G,) weights of its fine cells (`binning.fine_cuts`; the
            noisy fine counts, `binning.split_fine_weights`) that place a bin's
            values; a column without them is decoded uniformly within its bins.
    """

    schema: TableSchema
    cuts: Mapping[str, np.ndarray]
    real: bool = False
    private: frozenset[str] = frozenset()
    fine: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.real:
            taken = set(self.schema.names)
            clash = [c.name for c in self.schema.numeric if c.nullable and c.name + EMPTY_SUFFIX in taken]
            if clash:
                raise DataError(
                    f"column {clash[0] + EMPTY_SUFFIX!r} clashes with the empty flag of {clash[0]!r}"
                )
        else:
            missing = [c.name for c in self.schema.numeric if c.name not in self.cuts]
            if missing:
                raise ValueError(f"no cut points for numeric column(s) {missing}")

    @property
    def domain(self) -> Domain:
        """The coded domain, the schema's columns in order (with RAP++'s empty flags)."""
        attributes: list[Attribute] = []
        for c in self.schema.columns:
            if isinstance(c, CategoricalColumn):
                labels = (*c.labels, EMPTY_LABEL) if c.labels and c.nullable else c.labels
                attributes.append(Categorical(c.name, c.size + c.nullable, labels))
            elif self.real:
                attributes.append(Numeric(c.name, c.lower, c.upper))
                if c.nullable:
                    attributes.append(Categorical(c.name + EMPTY_SUFFIX, 2))
            else:
                attributes.append(Categorical(c.name, len(self.cuts[c.name]) + 1 + c.nullable))
        return Domain(tuple(attributes), self.schema.target)

    def encode(self, table: RawTable) -> Dataset:
        """The coded records of a validated table.

        Privacy:
            A record-by-record map fixed by public parameters: neighbouring tables stay
            neighbours, so a mechanism's guarantee on the codes holds for the table.
        """
        if table.schema != self.schema:
            raise DataError("the table was validated against another schema")
        categorical: dict[str, np.ndarray] = {}
        numeric: dict[str, np.ndarray] = {}
        for c in self.schema.columns:
            if isinstance(c, CategoricalColumn):
                codes = table.codes[c.name]
                categorical[c.name] = np.where(codes < 0, c.size, codes)
                continue
            values = table.values[c.name]
            empty = np.isnan(values)
            if self.real:
                unit = (np.where(empty, c.lower, values) - c.lower) / (c.upper - c.lower)
                numeric[c.name] = unit.astype(np.float32)
                if c.nullable:
                    categorical[c.name + EMPTY_SUFFIX] = empty.astype(np.int32)
            else:
                cuts = self.cuts[c.name]
                categorical[c.name] = np.where(
                    empty, len(cuts) + 1, bin_codes(cuts, np.where(empty, c.lower, values))
                )
        return self._dataset(categorical, numeric, len(table))

    def _dataset(self, categorical: dict, numeric: dict, n: int) -> Dataset:
        domain = self.domain
        codes = np.stack([categorical[a.name] for a in domain.categorical], axis=1).astype(np.int32)
        values = np.zeros((n, 0), np.float32)
        if domain.numeric:
            values = np.stack([numeric[a.name] for a in domain.numeric], axis=1).astype(np.float32)
        return Dataset(domain, codes, values)

    def range_shares(self, name: str, lower: float, upper: float) -> np.ndarray:
        """(codes,) float64 for a binned numeric column: each bin's probability that the value
        `decode` draws within it lies in [lower, upper] (0 for the empty bin of a nullable
        column): what conditioning a release on that range weighs each bin by."""
        column = self.schema[name]
        cuts = self.cuts[name]
        fine = self.fine.get(name)
        shares = np.clip(
            _bin_cdf(column, cuts, fine, upper, inclusive=True)
            - _bin_cdf(column, cuts, fine, lower, inclusive=False),
            0.0,
            1.0,
        )
        return np.append(shares, 0.0) if column.nullable else shares

    def decode(
        self, synthetic: Dataset, key: Key, ranges: Mapping[str, tuple[float, float]] | None = None
    ) -> RawTable:
        """The release in the schema's columns: labels or codes, original units, empty cells.

        Args:
            synthetic: released records over `self.domain`.
            key: the decoding key (`jaxdp.keys.decode_key(root)`); column j draws its values
                within bins with fold_in(key, j).
            ranges: binned numeric columns whose values must lie in a closed range (a release
                conditioned on it: every record's bin has a positive `range_shares`): each
                value is drawn from its bin's distribution restricted to the range, by the
                same draw mapped into the range's part of the bin's CDF.

        Privacy:
            Post-processing of the release with public parameters and a release-stream key.
        """
        key = require_key(key)
        domain = self.domain
        if synthetic.domain != domain:
            raise ValueError("the release is not over this coding's domain")
        cat = {a.name: synthetic.codes[:, j] for j, a in enumerate(domain.categorical)}
        num = {a.name: synthetic.numeric[:, j].astype(np.float64) for j, a in enumerate(domain.numeric)}
        codes: dict[str, np.ndarray] = {}
        values: dict[str, np.ndarray] = {}
        for j, c in enumerate(self.schema.columns):
            if isinstance(c, CategoricalColumn):
                codes[c.name] = np.where(cat[c.name] >= c.size, -1, cat[c.name]).astype(np.int32)
            elif self.real:
                out = c.lower + num[c.name] * (c.upper - c.lower)
                if c.integer:
                    first, last = c.whole_numbers
                    out = np.clip(np.round(out), first, last)
                if c.nullable:
                    out = np.where(cat[c.name + EMPTY_SUFFIX] == 1, np.nan, out)
                values[c.name] = out
            else:
                uniform = np.asarray(jax.random.uniform(fold_in(key, j), (len(synthetic),)))
                uniform = uniform.astype(np.float64)
                cuts, fine, bins = self.cuts[c.name], self.fine.get(c.name), cat[c.name]
                if ranges and c.name in ranges:
                    lower, upper = ranges[c.name]
                    index = np.minimum(bins, len(cuts))  # the empty bin's records keep NaN below
                    start = _bin_cdf(c, cuts, fine, lower, inclusive=False)[index]
                    end = _bin_cdf(c, cuts, fine, upper, inclusive=True)[index]
                    uniform = start + uniform * np.maximum(end - start, 0.0)
                out = _within_bins(c, cuts, bins, uniform, fine)
                if ranges and c.name in ranges:
                    lower, upper = ranges[c.name]
                    if c.integer:
                        lower, upper = math.ceil(lower), math.floor(upper)
                    out = np.clip(out, lower, upper)  # the CDF's rounding at the range's ends
                values[c.name] = out
        return RawTable(self.schema, codes, values)

    def describe(self) -> dict[str, Any]:
        """What each column became, for the report (public: schema and released cut points)."""
        out: dict[str, Any] = {}
        for c in self.schema.columns:
            if isinstance(c, CategoricalColumn):
                entry: dict[str, Any] = {"coding": "categories", "source": "public (schema)"}
                if c.labels is not None:  # the rule, not what it changed: that would read the data
                    entry["labels"] = LABEL_MATCHING
            elif self.real:
                entry = {"coding": "real (normalised to the bounds)", "source": "public (schema)"}
            else:
                cuts = self.cuts[c.name]
                how = method(c)
                entry = {
                    "coding": {"equal-width": "equal-width bins", "edges": "declared edges"}.get(
                        how, "private quantile bins"
                    ),
                    "bins": len(cuts) + 1,
                    "edges": [float(x) for x in cuts],
                    "source": "private (charged)" if c.name in self.private else "public (schema)",
                }
                if c.name in self.fine:
                    entry["within_bins"] = f"noisy fine histogram ({len(self.fine[c.name])} cells)"
            if isinstance(c, NumericColumn):
                entry["integer"] = c.integer
            entry["nullable"] = c.nullable
            out[c.name] = entry
        return out


def _within_bins(
    column: NumericColumn,
    cuts: np.ndarray,
    bins: np.ndarray,
    uniform: np.ndarray,
    fine_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Original units from bin codes and one uniform draw per record; NaN for the empty bin.

    Without `fine_weights`: uniform within [start, end) of the bin (among its whole numbers for
    an integer column). With them (one weight per cell of `binning.fine_cuts(column)`, of which
    `cuts` are a subset, so each fine cell lies in one bin): the inverse CDF of the density that
    gives each fine cell of the bin its weight's share (a bin whose weights are all 0: each cell
    its width's share, uniform over the bin) and is uniform within the cell.
    """
    k = len(cuts) + 1
    empty = bins >= k
    index = np.where(empty, 0, bins)
    if fine_weights is None:
        starts, ends = _bin_bounds(column, cuts)
        out = _inside(column, starts[index], ends[index], uniform)
        return np.where(empty, np.nan, out)
    starts, ends, cell_bin, share = _cells(column, cuts, fine_weights)
    # the within-bin CDF's upper end of each cell, offset by its bin: increasing over all cells
    upper = np.concatenate([np.cumsum(share[cell_bin == b]) for b in range(k)])
    cell = np.searchsorted(cell_bin + upper, index + uniform, side="right")
    first = np.searchsorted(cell_bin, index, side="left")
    last = np.searchsorted(cell_bin, index, side="right") - 1
    cell = np.clip(cell, first, last)  # rounding of the CDF's last step
    lower = upper[cell] - share[cell]
    within = np.clip(
        (uniform - lower) / np.where(share[cell] > 0, share[cell], 1.0), 0.0, np.nextafter(1.0, 0)
    )
    out = _inside(column, starts[cell], ends[cell], within)
    return np.where(empty, np.nan, out)


def _cells(
    column: NumericColumn, cuts: np.ndarray, fine_weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, bin, share): the pieces `_within_bins` draws a bin's values from, in value
    order (the bins themselves, or with `fine_weights` the fine cells), each piece's bin and its
    share of the bin (the pieces of a bin sum to 1; values are uniform within a piece)."""
    k = len(cuts) + 1
    if fine_weights is None:
        starts, ends = _bin_bounds(column, cuts)
        return starts, ends, np.arange(k), np.ones(k)
    starts, ends = _bin_bounds(column, fine_cuts(column))
    width = fine_widths(column)
    cell_bin = fine_cell_bins(column, cuts)
    weights = np.asarray(fine_weights, np.float64)
    per_bin = np.bincount(cell_bin, weights=weights, minlength=k)
    mass = np.where(per_bin[cell_bin] > 0, weights, width)
    share = mass / np.bincount(cell_bin, weights=mass, minlength=k)[cell_bin]
    return starts, ends, cell_bin, share


def _bin_cdf(
    column: NumericColumn, cuts: np.ndarray, fine_weights: np.ndarray | None, x: float, *, inclusive: bool
) -> np.ndarray:
    """(bins,) each bin's probability that `_within_bins` draws a value below x (at most x when
    `inclusive`): the within-bin CDF its draws invert, at x."""
    starts, ends, cell_bin, share = _cells(column, cuts, fine_weights)
    if column.integer:  # whole numbers start..end, drawn uniformly
        count = np.maximum(ends - starts + 1, 0.0)
        below = (math.floor(x) - starts + 1) if inclusive else (math.ceil(x) - starts)
        part = np.clip(below, 0.0, count) / np.where(count > 0, count, 1.0)
    else:
        width = ends - starts
        part = np.clip((x - starts) / np.where(width > 0, width, 1.0), 0.0, 1.0)
    return np.bincount(cell_bin, weights=share * part, minlength=len(cuts) + 1)


def _bin_bounds(column: NumericColumn, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the bins the cut points make: their first and last whole numbers for an
    integer column, else [start, end) in the column's units."""
    if column.integer:
        return column.whole_number_bins(cuts)
    return np.concatenate([[column.lower], cuts]), np.concatenate([cuts, [column.upper]])


def _inside(column: NumericColumn, starts: np.ndarray, ends: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """A value at position `uniform` in [0, 1) of each [start, end) (of each start..end whole
    numbers, for an integer column)."""
    if column.integer:
        out = starts + np.floor(uniform * (ends - starts + 1))
        return np.minimum(out, ends)  # u * count rounds to count only when u is 1 - 2^-24
    return starts + uniform * (ends - starts)
