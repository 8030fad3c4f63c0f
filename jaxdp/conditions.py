"""What a conditional release asks for: `where={"sex": "Female", "age": (30, 40)}` read against a
release's schema (or coded domain), once, into what the samplers need.

A condition names columns and, for each, what a record must hold there:

- a categorical column: a label (or a code, for a column without labels), or a list of them;
  None for the empty cell of a nullable column;
- a numeric column: a closed range `(lower, upper)` in the table's units, a single whole number
  for an integer column, None for the empty cell, or `[(lower, upper), None]` for either. A
  range is read as `lower <= value <= upper`.

Strings are read as the command line gives them (`--where sex=Female`, `--where age=30:40`,
`--where race=White,Black`; an empty value is the empty cell: `--where income=0:1000,` is the
range or the empty cell). A label holding a comma is read whole, but cannot be listed with
another in one string (give a list from Python). A column, label or range outside
the schema is refused by name: the schema is public, so the message may list what it allows.

`Condition.weights` is the condition over the coded domain the mechanism fitted: per coded
attribute, each code's weight in [0, 1], 1 where every value of the code meets the condition and,
for a numeric column's bins, the probability that the value drawn within the bin lies in the range
(`TableCoding.range_shares`). A family that conditions exactly (a graphical model) multiplies
its distribution by these weights; `Condition.holds` checks a released table row by row (for
rejection sampling, and as the exact samplers' own check).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from jaxdp.coding import TableCoding
from jaxdp.domain import Categorical, CategoricalColumn, Dataset, Domain, NumericColumn, RawTable, TableSchema


@dataclasses.dataclass(frozen=True)
class Condition:
    """A parsed `where` (module docstring).

    Attributes:
        weights: coded attribute index -> (size,) float64 each code's weight under the condition.
        ranges: numeric column -> (lower, upper), the closed range its values must lie in.
        codes: categorical column (a coded attribute's name for a coded release) -> the codes
            allowed, -1 standing for the empty cell.
        empty: numeric columns whose empty cell is allowed (alone or besides the range).
        columns: the columns named.
        text: the condition as the user gave it, for messages.
    """

    weights: dict[int, np.ndarray]
    ranges: dict[str, tuple[float, float]]
    codes: dict[str, frozenset[int]]
    empty: frozenset[str]
    columns: tuple[str, ...]
    text: str

    @property
    def coded(self) -> bool:
        """Whether every column named has weights over the coded domain (RAP++'s real columns
        have none: only `holds` can check them)."""
        return len(self.weights) == len(self.columns)

    def holds(self, table: Dataset | RawTable) -> np.ndarray:
        """(rows,) bool: which records of a released table meet the condition."""
        ok = np.ones(len(table), bool)
        if isinstance(table, Dataset):
            names = [a.name for a in table.domain.categorical]
            for name, allowed in self.codes.items():
                ok &= np.isin(table.codes[:, names.index(name)], sorted(allowed))
            return ok
        for name, allowed in self.codes.items():
            ok &= np.isin(table.codes[name], sorted(allowed))
        for name in self.ranges.keys() | self.empty:
            values = table.values[name]
            inside = np.zeros(len(table), bool)
            if name in self.ranges:
                lower, upper = self.ranges[name]
                with np.errstate(invalid="ignore"):
                    inside = (values >= lower) & (values <= upper)
            ok &= inside | (np.isnan(values) if name in self.empty else False)
        return ok


def condition(where: Mapping[str, Any], domain: Domain, coding: TableCoding | None) -> Condition:
    """`where` read against a release's coded `domain` and, for a table schema, its `coding`.

    Raises:
        ValueError: an empty condition, a column the release lacks, a label or code outside the
            column, a range that is reversed, outside the bounds, or of no mass (a single value
            of a continuous column), or a numeric condition on a coded (schema-less) release.
    """
    if not isinstance(where, Mapping) or not where:
        raise ValueError("where must name at least one column: {column: value, ...}")
    text = ", ".join(f"{k}={v!r}" for k, v in where.items())
    weights: dict[int, np.ndarray] = {}
    ranges: dict[str, tuple[float, float]] = {}
    codes: dict[str, frozenset[int]] = {}
    empty: set[str] = set()
    schema = coding.schema if coding is not None else None
    coded = domain.categorical
    names = [a.name for a in coded]
    for name, wanted in where.items():
        column = _column(name, domain, schema)
        if isinstance(column, CategoricalColumn | Categorical):
            allowed = _categories(column, wanted)
            codes[name] = frozenset(allowed)
            size = coded[names.index(name)].size  # a nullable column's empty cell: the last code
            weight = np.zeros(size)
            weight[[c if c >= 0 else size - 1 for c in allowed]] = 1.0
            weights[names.index(name)] = weight
            continue
        span, with_empty = _numeric(column, wanted)
        if with_empty:
            empty.add(name)
        if span is not None:
            ranges[name] = span
        if coding is not None and not coding.real:  # RAP++'s real columns: `holds` alone
            bins = len(coding.cuts[name]) + 1
            weight = coding.range_shares(name, *span)[:bins] if span is not None else np.zeros(bins)
            if column.nullable:
                weight = np.append(weight, 1.0 if with_empty else 0.0)
            weights[names.index(name)] = weight
    return Condition(weights, ranges, codes, frozenset(empty), tuple(where), text)


def _column(name: str, domain: Domain, schema: TableSchema | None):
    if schema is not None:
        if name not in schema.names:
            raise ValueError(
                f"where: {name!r} is not a column of the release (columns: {list(schema.names)})"
            )
        return schema[name]
    if name not in domain.names:
        raise ValueError(f"where: {name!r} is not a column of the release (columns: {list(domain.names)})")
    attribute = domain[name]
    if not isinstance(attribute, Categorical):
        raise ValueError(
            f"where: {name!r} is numeric in a coded release: condition a release made from a table schema"
        )
    return attribute


def _listed(wanted: Any, labels: tuple[str, ...] | None) -> list:
    if isinstance(wanted, str):
        if labels is not None and wanted in labels:  # a label may hold a comma
            return [wanted]
        return [None if w == "" else w for w in wanted.split(",")]
    if isinstance(wanted, Iterable):
        return [None if w == "" else w for w in wanted]
    return [wanted]


def _categories(column: CategoricalColumn | Categorical, wanted: Any) -> list[int]:
    """The codes (-1: the empty cell) a categorical condition allows."""
    labels = column.labels
    nullable = getattr(column, "nullable", False)
    out = []
    for value in _listed(wanted, labels):
        if value is None:
            if not nullable:
                raise ValueError(f"where: {column.name!r} has no empty cells (it is not nullable)")
            out.append(-1)
        elif labels is not None and isinstance(value, str) and value in labels:
            out.append(labels.index(value))
        elif labels is None and _is_code(value, column.size):
            out.append(int(value))
        else:
            allowed = (
                f"its categories: {list(labels)}" if labels is not None else f"codes 0..{column.size - 1}"
            )
            raise ValueError(f"where: {column.name!r} has no category {value!r} ({allowed})")
    if not out:
        raise ValueError(f"where: {column.name!r} names no value")
    return sorted(set(out))


def _is_code(value: Any, size: int) -> bool:
    if isinstance(value, str):
        value = value.strip()
        if not value.isdigit():
            return False
        value = int(value)
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and 0 <= value < size


def _numeric(column: NumericColumn, wanted: Any) -> tuple[tuple[float, float] | None, bool]:
    """(the closed range, whether the empty cell is allowed) of a numeric condition: a range, a
    whole number, None (the empty cell), or a list of one range and None (either)."""
    items = _numeric_items(wanted)
    empty = any(item is None for item in items)
    spans = [item for item in items if item is not None]
    if empty and not column.nullable:
        raise ValueError(f"where: {column.name!r} has no empty cells (it is not nullable)")
    if len(spans) > 1:
        raise ValueError(
            f"where: {column.name!r} takes one range (and the empty cell, None), got {len(spans)}"
        )
    if not spans:
        return None, empty
    return _span(column, spans[0]), empty


def _numeric_items(wanted: Any) -> list:
    """A numeric condition's parts: None for the empty cell, else a range's numbers (one or two)."""
    if wanted is None:
        return [None]
    if isinstance(wanted, str):
        return [None if part == "" else part.split(":") for part in wanted.split(",")]
    if isinstance(wanted, Iterable):
        items = list(wanted)
        if items and all(isinstance(x, int | float | np.number) and not isinstance(x, bool) for x in items):
            return [items]  # (lower, upper), or a single number in a list
        return [
            None if x is None or x == "" else (list(x) if isinstance(x, Iterable) else [x]) for x in items
        ]
    return [[wanted]]


def _span(column: NumericColumn, numbers: list) -> tuple[float, float]:
    try:
        numbers = [float(x) for x in numbers]
    except (TypeError, ValueError):
        raise ValueError(f"where: {column.name!r} takes a range lower:upper, got {numbers!r}") from None
    if len(numbers) == 1:
        if not (column.integer and numbers[0] == math.floor(numbers[0])):
            raise ValueError(
                f"where: {column.name!r} is continuous: a single value has no mass; give a range "
                "(lower, upper)"
            )
        numbers = numbers * 2
    if len(numbers) != 2 or not all(math.isfinite(x) for x in numbers):
        raise ValueError(f"where: {column.name!r} takes a range (lower, upper) of two finite numbers")
    lower, upper = numbers
    if lower > upper:
        raise ValueError(f"where: {column.name!r}'s range ({lower:g}, {upper:g}) is reversed")
    if upper < column.lower or lower > column.upper:
        raise ValueError(
            f"where: {column.name!r}'s range ({lower:g}, {upper:g}) is outside its bounds "
            f"[{column.lower:g}, {column.upper:g}]"
        )
    if column.integer and math.ceil(lower) > math.floor(upper):
        raise ValueError(f"where: {column.name!r}'s range ({lower:g}, {upper:g}) holds no whole number")
    return max(lower, column.lower), min(upper, column.upper)
