"""The one encoder: raw columns, checked against their schema, become a `RawTable`.

Every table enters here, whatever it came in: a CSV or Parquet file (`jaxdp.domain.text`), a dict
of columns, a pandas DataFrame, a pyarrow Table or a 2-D NumPy array (`table_from`), or arrays of
codes against a coded `Domain` (`Dataset.from_codes`). So every refusal of a bad cell is written
once, below, and names the column and how many cells are wrong, never a value: the records are
private.

The containers: a DataFrame, a pyarrow Table or a dict of columns holds labels where the schema declares them,
codes otherwise, numbers in original units, empty cells where nullable; a 2-D array holds the
schema's columns in order, labels if it is an object/str array, codes for every categorical
column if it is numeric (NaN for an empty cell). `like` puts a table back in the container its
input came in: same columns and order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxdp.domain.coded import DataError, Numeric
from jaxdp.domain.schema import CategoricalColumn, NumericColumn, TableSchema


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
            unknown labels, codes outside the size, values that are not numbers or not finite,
            values outside the bounds, fractions in an integer column.

    Privacy:
        Reads the private records; raises only counts and column names.
    """
    _check_column_names(schema.names, list(columns))
    lengths = {len(columns[n]) for n in schema.names}
    if len(lengths) != 1:
        raise DataError("columns have different lengths")
    if lengths.pop() == 0:
        raise DataError("the table is empty (0 records)")
    codes, values = {}, {}
    for column in schema.columns:
        cells = _cells(columns[column.name])
        empty = empty_cells(cells)
        if empty.any() and not column.nullable:
            raise DataError(
                f"column {column.name!r}: {int(empty.sum())} empty cell(s); declare "
                '"nullable": true if an empty cell is a value'
            )
        filled = cells[~empty] if empty.any() else cells
        if isinstance(column, CategoricalColumn):
            codes[column.name] = _refill(empty, _codes(column, filled), np.int32(-1))
        else:
            values[column.name] = _refill(empty, _values(column, filled), np.float64(np.nan))
    return RawTable(schema, codes, values)


def check_unique_columns(names: Sequence[str]) -> None:
    """Refuse a header or container that names a column twice (a dict would keep one)."""
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DataError(f"duplicate columns: {dupes}")


def _check_column_names(declared: Sequence[str], given: list[str]) -> None:
    check_unique_columns([str(c) for c in given])
    missing = [n for n in declared if n not in given]
    if missing:
        raise DataError(f"missing columns declared in the domain: {missing}")
    extra = [c for c in given if c not in declared]
    if extra:
        raise DataError(f"columns not declared in the domain: {extra}")


def _cells(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """A column as an array: numbers as they are; anything else as the objects given (NumPy
    would turn a NaN among labels into the text "nan", no longer an empty cell)."""
    arr = np.asarray(values)
    return arr if arr.dtype.kind in "biuf" else np.asarray(values, dtype=object)


def _refill(empty: np.ndarray, filled: np.ndarray, blank: np.generic) -> np.ndarray:
    """The column again, `blank` where the cell was empty."""
    if not empty.any():
        return filled
    out = np.full(len(empty), blank)
    out[~empty] = filled
    return out


# How a raw label meets its category (`_codes`; the schema's categories are stripped the same way),
# as the report states it.
LABEL_MATCHING = "matched to the schema's categories after stripping surrounding whitespace"


def _codes(column: CategoricalColumn, cells: np.ndarray) -> np.ndarray:
    """int32 codes of filled cells: labels where declared, integer codes otherwise."""
    if column.labels is not None:
        index = {label: i for i, label in enumerate(column.labels)}
        text = [str(v).strip() for v in cells]
        unknown = sum(1 for v in text if v not in index)
        if unknown:
            raise DataError(
                f"column {column.name!r}: {unknown} value(s) are not among its {column.size} "
                "declared categories"
            )
        return np.fromiter((index[v] for v in text), dtype=np.int32, count=len(text))
    numbers = cells if cells.dtype.kind in "iu" else _finite(column.name, cells)
    if numbers.dtype.kind == "f":
        not_int = numbers != np.round(numbers)
        if not_int.any():
            raise DataError(f"column {column.name!r}: {int(not_int.sum())} value(s) are not integers")
    outside = (numbers < 0) | (numbers >= column.size)
    if outside.any():
        raise DataError(f"column {column.name!r}: {int(outside.sum())} code(s) outside [0, {column.size})")
    return numbers.astype(np.int32, copy=False)


def _values(column: NumericColumn, cells: np.ndarray) -> np.ndarray:
    """float64 values of filled cells in original units, within the bounds (whole numbers in
    an integer column)."""
    floats = _finite(column.name, cells)
    # Values outside the declared bounds are refused, not clipped: clipping silently changes the
    # data, and bounds taken from the data would leak; the user must declare bounds that hold.
    outside = (floats < column.lower) | (floats > column.upper)
    if outside.any():
        raise DataError(
            f"column {column.name!r}: {int(outside.sum())} value(s) outside the declared bounds "
            f"[{column.lower:g}, {column.upper:g}]"
        )
    if column.integer:
        fractional = int(np.sum(floats != np.round(floats)))
        if fractional:
            raise DataError(
                f"column {column.name!r}: {fractional} value(s) are not whole numbers "
                "(the column is declared integer)"
            )
    return floats


def checked_numeric(attribute: Numeric, values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """float64 values of a numeric attribute in original units, every one a finite number within
    its declared bounds (the encoder's check of a numeric column, for callers holding one
    attribute's values).

    Raises:
        DataError: naming the column and the number of bad values (never the values).
    """
    return _values(NumericColumn(attribute.name, attribute.lower, attribute.upper), _cells(values))


def _finite(name: str, cells: np.ndarray) -> np.ndarray:
    """float64 of filled cells, every one a finite number."""
    floats = _numbers(name, cells)
    bad = ~np.isfinite(floats)
    if bad.any():
        raise DataError(
            f"column {name!r}: {int(bad.sum())} value(s) are NaN, infinite or too large for a float"
        )
    return floats


def _numbers(name: str, cells: np.ndarray) -> np.ndarray:
    try:  # vectorised parse; the loop below only runs to count what failed
        return cells.astype(np.float64)
    except (TypeError, ValueError):
        pass
    out = np.empty(len(cells), dtype=np.float64)
    unparsable = 0
    for i, v in enumerate(cells):
        try:
            out[i] = float(str(v).strip())
        except ValueError:
            unparsable += 1
    if unparsable:
        raise DataError(f"column {name!r}: {unparsable} value(s) are not numbers")
    return out


# -- containers ------------------------------------------------------------------------------------


def is_dataframe(data: Any) -> bool:
    """A pandas DataFrame (recognised without importing pandas)."""
    return type(data).__name__ == "DataFrame" and hasattr(data, "columns")


def is_arrow_table(data: Any) -> bool:
    """A `pyarrow.Table` (recognised without importing pyarrow)."""
    return type(data).__name__ == "Table" and type(data).__module__.startswith("pyarrow")


def _arrow_columns(table: Any) -> dict[str, np.ndarray]:
    """An Arrow table's columns as NumPy arrays: numbers as numbers (float with NaN where a
    column of numbers has nulls), text as objects with None where null."""
    import pyarrow  # only reached with a pyarrow.Table in hand

    names = [str(n) for n in table.column_names]
    check_unique_columns(names)
    columns = {}
    for name, column in zip(names, table.columns, strict=True):
        if pyarrow.types.is_dictionary(column.type):  # categories as Parquet keeps pandas' ones
            column = column.cast(column.type.value_type)
        columns[name] = column.to_numpy(zero_copy_only=False)
    return columns


def table_from(data: Any, schema: TableSchema) -> RawTable:
    """Validate a table in any supported container against its schema.

    Raises:
        DataError: naming the column and the number of bad values, never a value.
        TypeError: an unsupported container.
    """
    if is_arrow_table(data):
        return parse_table(schema, _arrow_columns(data))
    if is_dataframe(data) or isinstance(data, Mapping):
        names = [str(c) for c in data]
        check_unique_columns(names)
        return parse_table(schema, {n: data[c] for n, c in zip(names, data, strict=True)})
    if not isinstance(data, np.ndarray):
        raise TypeError(
            "data must be a pandas DataFrame, a pyarrow Table, a dict of columns, a 2-D NumPy array "
            f"or a jaxdp.Dataset, got {type(data).__name__}"
        )
    if data.ndim != 2 or data.shape[1] != len(schema.columns):
        raise DataError(f"an array must have shape (n_records, {len(schema.columns)}), got {data.shape}")
    columns = {c.name: data[:, j] for j, c in enumerate(schema.columns)}
    if data.dtype.kind not in "biuf":
        return parse_table(schema, columns)
    return dataclasses.replace(parse_table(schema.with_codes(), columns), schema=schema)


def columns_like(data: Any, columns: Mapping[str, Any]) -> Any:
    """`columns` in the container of columns `data` came in: a DataFrame, a pyarrow Table (None
    and NaN as nulls), or for a dict of columns the columns themselves."""
    if is_dataframe(data):
        return type(data)(columns)
    if is_arrow_table(data):
        import pyarrow  # only reached with a pyarrow.Table in hand

        return pyarrow.table({n: pyarrow.array(c, from_pandas=True) for n, c in columns.items()})
    return columns


def like(data: Any, table: RawTable) -> Any:
    """`table` in the container `data` came in."""
    if isinstance(data, RawTable):
        return table
    columns = table.columns()
    if is_dataframe(data) or is_arrow_table(data) or isinstance(data, Mapping):
        return columns_like(data, columns)
    if data.dtype.kind not in "biuf":
        return np.stack([np.asarray(columns[n], dtype=object) for n in table.schema.names], axis=1)
    stacked = [
        np.where(table.codes[n] < 0, np.nan, table.codes[n]) if n in table.codes else table.values[n]
        for n in table.schema.names
    ]
    out = np.stack(stacked, axis=1)
    whole = not table.values and not any((c < 0).any() for c in table.codes.values())
    return out.astype(np.int32) if whole else out
