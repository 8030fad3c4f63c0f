"""Raw tables and their declared schema: labels, numeric columns in original units, empty cells.

The schema is the ``"columns"`` JSON form of `jaxdp.domain`, with keys for real tables. Every
key is declared by the user and public; nothing is read from the data:

    {"columns": {
        "age":    {"type": "numeric", "lower": 17, "upper": 90, "integer": true, "bins": 16},
        "fnlwgt": {"type": "numeric", "lower": 0, "upper": 2000000, "binning": "quantiles"},
        "hours":  {"type": "numeric", "lower": 1, "upper": 99, "edges": [20, 35, 41, 60]},
        "sex":    {"type": "categorical", "categories": ["Female", "Male"], "nullable": true},
        "level":  {"type": "categorical", "size": 4}},
     "target": "sex"}

- numeric: public bounds `lower` < `upper` (values outside are refused, never clipped);
  `integer: true` for whole numbers (other values refused, whole numbers released); how
  mechanisms that work on categories see the column: `bins` (equal width over the bounds),
  `edges` (cut points strictly inside the bounds), `"binning": "quantiles"` (private quantiles:
  a charged mechanism, `jaxdp.binning`), or none of them (the default: 32 private quantile bins,
  `binning.DEFAULT_BINNING`). RAP++ keeps numeric columns real and ignores these keys.
- categorical: `categories` (labels) or `size` (codes 0..size-1).
- `nullable: true` on any column: an empty cell (empty text, None, NaN) is a value of its own,
  released as an empty cell. Other columns refuse empty cells.

Errors name the column and how many values are wrong, never a value: the records are private.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import numpy as np

from jaxdp.domain import (
    Categorical,
    DataError,
    Numeric,
    _check_column_names,
    _encode_categorical,
    checked_numeric,
    read_columns,
    read_json,
)

BINNINGS = ("equal-width", "quantiles")
_CATEGORICAL_KEYS = {"type", "categories", "size", "nullable"}
_NUMERIC_KEYS = {"type", "lower", "upper", "integer", "nullable", "bins", "edges", "binning"}


@dataclasses.dataclass(frozen=True)
class CategoricalColumn:
    """A categorical column: `labels` (text) or codes 0..size-1; `nullable` adds an empty level."""

    name: str
    size: int
    labels: tuple[str, ...] | None = None
    nullable: bool = False

    def __post_init__(self):
        self.attribute  # noqa: B018 - jaxdp.domain validates the size and the labels

    @property
    def attribute(self) -> Categorical:
        """The column without its missing level."""
        return Categorical(self.name, self.size, self.labels)


@dataclasses.dataclass(frozen=True)
class NumericColumn:
    """A numeric column with public bounds.

    Attributes:
        binning: "equal-width" (`bins` bins over the bounds), "edges" (the declared cut points),
            "quantiles" (`bins` private quantile bins, charged) or None (not declared: the
            documented default applies, `jaxdp.binning.DEFAULT_BINNING`).
        bins: the number of bins asked for (None: the default count).
        edges: declared cut points, strictly increasing, strictly inside (lower, upper).
    """

    name: str
    lower: float
    upper: float
    integer: bool = False
    nullable: bool = False
    binning: str | None = None
    bins: int | None = None
    edges: tuple[float, ...] | None = None

    def __post_init__(self):
        self.attribute  # noqa: B018 - jaxdp.domain validates the bounds

    @property
    def attribute(self) -> Numeric:
        return Numeric(self.name, self.lower, self.upper)

    @property
    def whole_numbers(self) -> tuple[int, int]:
        """(first, last) whole number inside the bounds (integer columns)."""
        return math.ceil(self.lower), math.floor(self.upper)


Column = CategoricalColumn | NumericColumn


@dataclasses.dataclass(frozen=True)
class TableSchema:
    """The declared columns of a raw table, in order, and an optional categorical target."""

    columns: tuple[Column, ...]
    target: str | None = None

    def __post_init__(self):
        if not self.columns:
            raise DataError('schema must have a non-empty "columns" object')
        if self.target is not None:
            if self.target not in self.names:
                raise DataError(f"target {self.target!r} is not a column of the schema")
            if not isinstance(self[self.target], CategoricalColumn):
                raise DataError(f"target {self.target!r} must be a categorical column")

    @classmethod
    def from_json(cls, schema: Mapping[str, Any]) -> TableSchema:
        """Parse and validate the schema form (see the module docstring)."""
        extra = sorted(set(schema) - {"columns", "target"})
        if extra:
            raise DataError(f'schema: unknown key(s) {extra}; expected "columns" and optionally "target"')
        columns = schema.get("columns")
        if not isinstance(columns, Mapping) or not columns:
            raise DataError('schema must have a non-empty "columns" object')
        return cls(tuple(_column(str(n), spec) for n, spec in columns.items()), schema.get("target"))

    @classmethod
    def load(cls, path: str | os.PathLike) -> TableSchema:
        """Read a schema JSON file (the ``"columns"`` form)."""
        obj = read_json(path, "schema")
        if not is_table_schema(obj):
            raise DataError(f'schema file {str(path)!r} must hold a JSON object with "columns"')
        return cls.from_json(obj)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def numeric(self) -> tuple[NumericColumn, ...]:
        return tuple(c for c in self.columns if isinstance(c, NumericColumn))

    def __getitem__(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"no column named {name!r} in the schema")


def is_table_schema(schema: object) -> bool:
    """True for the ``"columns"`` form (a dict holding "columns"), the form raw tables take."""
    return isinstance(schema, Mapping) and "columns" in schema


def _column(name: str, spec: object) -> Column:
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind not in ("numeric", "categorical"):
        raise DataError(f'column {name!r}: "type" must be "numeric" or "categorical"')
    allowed = _NUMERIC_KEYS if kind == "numeric" else _CATEGORICAL_KEYS
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise DataError(f"column {name!r}: unknown key(s) {unknown} for a {kind} column")
    nullable = _flag(name, spec, "nullable")
    if kind == "categorical":
        return _categorical(name, spec, nullable)
    return _numeric(name, spec, nullable)


def _flag(name: str, spec: Mapping[str, Any], key: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise DataError(f'column {name!r}: "{key}" must be true or false, got {value!r}')
    return value


def _categorical(name: str, spec: Mapping[str, Any], nullable: bool) -> CategoricalColumn:
    if "categories" in spec:
        if "size" in spec:
            raise DataError(f'column {name!r}: give "categories" or "size", not both')
        if not isinstance(spec["categories"], Sequence) or isinstance(spec["categories"], str):
            raise DataError(f'column {name!r}: "categories" must be a list of labels')
        labels = tuple(str(c).strip() for c in spec["categories"])
        if "" in labels:
            raise DataError(
                f"column {name!r}: a category cannot be empty text (an empty cell is a missing value: "
                'declare "nullable": true)'
            )
        return CategoricalColumn(name, len(labels), labels, nullable)
    if "size" in spec:
        return CategoricalColumn(name, spec["size"], None, nullable)
    raise DataError(f'column {name!r}: categorical needs "categories" or "size"')


def _numeric(name: str, spec: Mapping[str, Any], nullable: bool) -> NumericColumn:
    bounds = []
    for key in ("lower", "upper"):
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DataError(f'column {name!r}: numeric column needs a number "{key}"')
        bounds.append(float(value))
    integer = _flag(name, spec, "integer")
    column = NumericColumn(name, bounds[0], bounds[1], integer, nullable)
    if integer:
        first, last = column.whole_numbers
        if first > last:
            raise DataError(f"column {name!r}: no whole number lies within the bounds of an integer column")
    binning, bins, edges = spec.get("binning"), spec.get("bins"), spec.get("edges")
    if binning is not None and binning not in BINNINGS:
        raise DataError(f'column {name!r}: "binning" must be one of {list(BINNINGS)}, got {binning!r}')
    if edges is not None:
        if bins is not None or binning is not None:
            raise DataError(f'column {name!r}: give "edges" or "bins"/"binning", not both')
        return dataclasses.replace(column, binning="edges", edges=_edges(column, edges))
    if bins is not None:
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise DataError(f'column {name!r}: "bins" must be an integer >= 1, got {bins!r}')
        if integer and bins > column.whole_numbers[1] - column.whole_numbers[0] + 1:
            first, last = column.whole_numbers
            raise DataError(
                f'column {name!r}: "bins" = {bins} exceeds the {last - first + 1} whole numbers in '
                f"[{first}, {last}] of an integer column"
            )
        binning = binning or "equal-width"
    return dataclasses.replace(column, binning=binning, bins=bins)


def _edges(column: NumericColumn, edges: object) -> tuple[float, ...]:
    name = column.name
    if not isinstance(edges, Sequence) or isinstance(edges, str) or not edges:
        raise DataError(f'column {name!r}: "edges" must be a non-empty list of cut points')
    if not all(isinstance(e, int | float) and not isinstance(e, bool) and math.isfinite(e) for e in edges):
        raise DataError(f'column {name!r}: "edges" must hold finite numbers')
    cuts = tuple(float(e) for e in edges)
    if any(b <= a for a, b in itertools.pairwise(cuts)):
        raise DataError(f'column {name!r}: "edges" must be strictly increasing')
    if cuts[0] <= column.lower or cuts[-1] >= column.upper:
        raise DataError(
            f'column {name!r}: "edges" are cut points strictly between the bounds '
            f"({column.lower:g}, {column.upper:g}); the bounds themselves are implied"
        )
    if column.integer:
        starts = [math.ceil(column.lower), *(math.ceil(c) for c in cuts)]
        ends = [*(math.ceil(c) - 1 for c in cuts), column.whole_numbers[1]]
        empty = sum(1 for a, b in zip(starts, ends, strict=True) if a > b)
        if empty:
            raise DataError(
                f'column {name!r}: "edges" leave {empty} bin(s) without a whole number; every bin of '
                "an integer column must hold one"
            )
    return cuts


# -- raw values ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RawTable:
    """A table validated against its schema, before any coding.

    Attributes:
        schema: the declared schema.
        codes: categorical columns: (n_records,) int32 codes, -1 where the cell is empty.
        values: numeric columns: (n_records,) float64 in original units, NaN where empty.
    """

    schema: TableSchema
    codes: dict[str, np.ndarray]
    values: dict[str, np.ndarray]

    def __len__(self) -> int:
        first = self.schema.columns[0].name
        return len(self.codes[first] if first in self.codes else self.values[first])

    def columns(self) -> dict[str, np.ndarray]:
        """The table in the schema's column order: labels (None where empty) or codes for
        categorical columns, original units (NaN where empty; whole numbers as int64 when the
        column is integer and complete) for numeric ones."""
        out: dict[str, np.ndarray] = {}
        for c in self.schema.columns:
            if isinstance(c, CategoricalColumn):
                out[c.name] = _labelled(c, self.codes[c.name])
            else:
                v = self.values[c.name]
                out[c.name] = v.astype(np.int64) if c.integer and not np.isnan(v).any() else v
        return out


def _labelled(column: CategoricalColumn, codes: np.ndarray) -> np.ndarray:
    missing = codes < 0
    if column.labels is None and not missing.any():
        return codes.astype(np.int64)
    values = (
        np.asarray(column.labels, dtype=object) if column.labels else np.arange(column.size, dtype=object)
    )
    out = values[np.where(missing, 0, codes)].astype(object)
    out[missing] = None
    return out


def empty_cells(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """(n,) bool: which cells are empty (empty or blank text, None, NaN, pandas' NA)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "biu":
        return np.zeros(arr.shape, bool)
    if arr.dtype.kind == "f":
        return np.isnan(arr)
    if arr.dtype.kind in "US":
        return np.char.strip(arr.astype(str)) == ""
    return np.fromiter((_is_empty(v) for v in arr), bool, count=len(arr))


def _is_empty(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, float | np.floating):
        return bool(np.isnan(value))
    return type(value).__name__ == "NAType"  # pandas.NA, without importing pandas


def parse_table(schema: TableSchema, columns: Mapping[str, Sequence[Any] | np.ndarray]) -> RawTable:
    """Validate raw columns against the schema.

    Args:
        schema: the declared schema.
        columns: one sequence per column (labels or codes, numbers in original units, empty
            cells where nullable), every column of the schema and no other.

    Raises:
        DataError: naming the column and how many values are wrong (never a value): missing or
            extra columns, an empty table, empty cells in a column not declared nullable,
            unknown labels, values outside the bounds, fractions in an integer column.

    Privacy:
        Reads the private records; raises only counts and column names.
    """
    _check_column_names(schema, list(columns))
    lengths = {len(columns[n]) for n in schema.names}
    if len(lengths) != 1:
        raise DataError("columns have different lengths")
    if lengths.pop() == 0:
        raise DataError("the table is empty (0 records)")
    codes, values = {}, {}
    for column in schema.columns:
        raw = np.asarray(columns[column.name], dtype=object)
        empty = empty_cells(raw)
        if empty.any() and not column.nullable:
            raise DataError(
                f"column {column.name!r}: {int(empty.sum())} empty cell(s); declare "
                '"nullable": true if an empty cell is a value'
            )
        if isinstance(column, CategoricalColumn):
            out = np.full(len(raw), -1, np.int32)
            out[~empty] = _encode_categorical(column.attribute, raw[~empty])
            codes[column.name] = out
        else:
            out = np.full(len(raw), np.nan)
            out[~empty] = checked_numeric(column.attribute, raw[~empty])
            if column.integer:
                fractional = np.sum(out[~empty] != np.round(out[~empty]))
                if fractional:
                    raise DataError(
                        f"column {column.name!r}: {int(fractional)} value(s) are not whole numbers "
                        "(the column is declared integer)"
                    )
            values[column.name] = out
    return RawTable(schema, codes, values)


def read_table(source: str | os.PathLike | TextIO, schema: TableSchema) -> RawTable:
    """Read and validate a raw CSV (header row; labels, original units, empty cells)."""
    return parse_table(schema, read_columns(source))
