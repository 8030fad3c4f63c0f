"""The one column schema: the ``"columns"`` JSON form, parsed in one place.

Every key is declared by the user and public; nothing is read from the data:

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

A coded `Domain` is a schema without these keys (`TableSchema.from_domain`, `TableSchema.domain`),
so both read their records through the one encoder, `jaxdp.domain.encode`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxdp.domain.coded import Categorical, DataError, Domain, Numeric, read_json

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
        self.attribute  # noqa: B018 - Categorical validates the size and the labels

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
        self.attribute  # noqa: B018 - Numeric validates the bounds

    @property
    def attribute(self) -> Numeric:
        """The column without its missing value and its binning."""
        return Numeric(self.name, self.lower, self.upper)

    @property
    def whole_numbers(self) -> tuple[int, int]:
        """(first, last) whole number inside the bounds (integer columns)."""
        return math.ceil(self.lower), math.floor(self.upper)

    def whole_number_bins(self, cuts: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends), float64: the first and last whole number of each bin the cut points
        make in an integer column (bin i is [c_i, c_{i+1})); a bin whose start exceeds its end
        holds none. The declared edges are checked, and released bins decoded, with these."""
        first, last = self.whole_numbers
        starts = np.asarray([first, *(math.ceil(c) for c in cuts)], np.float64)
        ends = np.asarray([*(math.ceil(c) - 1 for c in cuts), last], np.float64)
        return starts, ends


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
    def from_domain(cls, domain: Domain) -> TableSchema:
        """The schema of a coded domain's columns: no empty cells, no bins, no integer flag."""
        columns = tuple(
            CategoricalColumn(a.name, a.size, a.labels)
            if isinstance(a, Categorical)
            else NumericColumn(a.name, a.lower, a.upper)
            for a in domain.attributes
        )
        return cls(columns, domain.target)

    @classmethod
    def load(cls, path: str | os.PathLike) -> TableSchema:
        """Read a schema JSON file (the ``"columns"`` form)."""
        obj = read_json(path, "schema")
        if not is_table_schema(obj):
            raise DataError(f'schema file {str(path)!r} must hold a JSON object with "columns"')
        return cls.from_json(obj)

    @property
    def domain(self) -> Domain:
        """The declared attributes, without empty levels or bins (what `Domain.from_schema` reads)."""
        return Domain(tuple(c.attribute for c in self.columns), self.target)

    def with_codes(self) -> TableSchema:
        """This schema read from codes: labelled columns take their codes 0..size-1 (what a
        numeric array holds, even for labelled columns)."""
        coded = (
            dataclasses.replace(c, labels=None) if isinstance(c, CategoricalColumn) else c
            for c in self.columns
        )
        return dataclasses.replace(self, columns=tuple(coded))

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


def domain_from_schema(schema: Mapping[str, Any]) -> Domain:
    """The domain of the ``"columns"`` form: the attributes its table schema declares."""
    return TableSchema.from_json(schema).domain


def load_domain(path: str | os.PathLike) -> Domain:
    """A domain from a declaration file in either JSON form (a ``"columns"`` key means the
    schema form, read as the attributes it declares)."""
    declared = load_declaration(path)
    return declared if isinstance(declared, Domain) else declared.domain


def load_declaration(path: str | os.PathLike, what: str = "domain") -> TableSchema | Domain:
    """A declaration file, read once: the ``"columns"`` form is a `TableSchema`, the sizes form
    (``{"attr": size}``) a `Domain`. `what` names the file in errors ("domain", "schema")."""
    obj = read_json(path, what)
    if not isinstance(obj, Mapping):
        raise DataError(f"{what} file {str(path)!r} must hold a JSON object")
    return TableSchema.from_json(obj) if is_table_schema(obj) else Domain.from_sizes(obj)


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
        starts, ends = column.whole_number_bins(cuts)
        empty = int(np.sum(starts > ends))
        if empty:
            raise DataError(
                f'column {name!r}: "edges" leave {empty} bin(s) without a whole number; every bin of '
                "an integer column must hold one"
            )
    return cuts
