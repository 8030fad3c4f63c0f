"""From a raw table to the records a mechanism reads, and from a release back to the table.

A `TableCoding` fixes, from the schema and each numeric column's cut points (`jaxdp.binning`),
the coded `Domain` a mechanism sees:

- a categorical column keeps its codes; a nullable one gains a last code, "empty";
- a numeric column, for mechanisms over categories, becomes its bin (plus a last "empty" bin
  when nullable); for RAP++ (`real=True`) it stays real in the normalised [0, 1] of its bounds,
  and a nullable one gains a categorical companion column "<name> (empty)" (an empty cell's
  value is stored as the lower bound, the companion says it is empty).

`decode` maps a release back to the schema's columns, labels and units: a value drawn uniformly
within its bin (uniformly among the bin's whole numbers for an integer column), values rounded
to whole numbers where declared, empty where the release says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jaxdp.binning import bin_codes, method
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
from jaxdp.keys import require_key
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
    """

    schema: TableSchema
    cuts: Mapping[str, np.ndarray]
    real: bool = False
    private: frozenset[str] = frozenset()

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

    def decode(self, synthetic: Dataset, key: Key) -> RawTable:
        """The release in the schema's columns: labels or codes, original units, empty cells.

        Args:
            synthetic: released records over `self.domain`.
            key: the decoding key (`jaxdp.keys.decode_key(root)`); column j draws its values
                within bins with fold_in(key, j).

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
                uniform = np.asarray(jax.random.uniform(jax.random.fold_in(key, j), (len(synthetic),)))
                values[c.name] = _within_bins(c, self.cuts[c.name], cat[c.name], uniform.astype(np.float64))
        return RawTable(self.schema, codes, values)

    def describe(self) -> dict[str, Any]:
        """What each column became, for the report (public: schema and released cut points)."""
        out: dict[str, Any] = {}
        for c in self.schema.columns:
            if isinstance(c, CategoricalColumn):
                entry: dict[str, Any] = {"coding": "categories", "source": "public (schema)"}
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
            if isinstance(c, NumericColumn):
                entry["integer"] = c.integer
            entry["nullable"] = c.nullable
            out[c.name] = entry
        return out


def _within_bins(
    column: NumericColumn, cuts: np.ndarray, bins: np.ndarray, uniform: np.ndarray
) -> np.ndarray:
    """Original units from bin codes: uniform within [start, end) of the bin (among its whole
    numbers for an integer column); NaN for the empty bin."""
    k = len(cuts) + 1
    empty = bins >= k
    index = np.where(empty, 0, bins)
    if column.integer:
        starts, ends = column.whole_number_bins(cuts)
        out = starts[index] + np.floor(uniform * (ends[index] - starts[index] + 1))
        out = np.minimum(out, ends[index])  # u * count rounds to count only when u is 1 - 2^-24
    else:
        starts = np.concatenate([[column.lower], cuts])
        ends = np.concatenate([cuts, [column.upper]])
        out = starts[index] + uniform * (ends[index] - starts[index])
    return np.where(empty, np.nan, out)
