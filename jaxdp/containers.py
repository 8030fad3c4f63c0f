"""The containers a raw table comes in and its release goes back out in.

A pandas DataFrame or a dict of columns (labels where the schema declares them, codes
otherwise, numbers in original units, empty cells where nullable), or a 2-D NumPy array with
the schema's columns in order: an object/str array holds labels, a numeric one holds codes for
every categorical column (NaN for an empty cell). The release has the same container, columns
and order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdp.domain import DataError
from jaxdp.tables import CategoricalColumn, RawTable, TableSchema, parse_table


def is_dataframe(data: Any) -> bool:
    """A pandas DataFrame (recognised without importing pandas)."""
    return type(data).__name__ == "DataFrame" and hasattr(data, "columns")


def table_from(data: Any, schema: TableSchema) -> RawTable:
    """Validate a table in any supported container against its schema.

    Raises:
        DataError: naming the column and the number of bad values, never a value.
        TypeError: an unsupported container.
    """
    if is_dataframe(data) or isinstance(data, Mapping):
        return parse_table(schema, {str(c): np.asarray(data[c]) for c in data})
    if not isinstance(data, np.ndarray):
        raise TypeError(
            "data must be a pandas DataFrame, a dict of columns, a 2-D NumPy array or a "
            f"jaxdp.Dataset, got {type(data).__name__}"
        )
    if data.ndim != 2 or data.shape[1] != len(schema.columns):
        raise DataError(f"an array must have shape (n_records, {len(schema.columns)}), got {data.shape}")
    columns = {c.name: data[:, j] for j, c in enumerate(schema.columns)}
    if data.dtype.kind not in "biuf":
        return parse_table(schema, columns)
    coded = TableSchema(  # a numeric array holds codes, even for labelled columns
        tuple(
            dataclasses.replace(c, labels=None) if isinstance(c, CategoricalColumn) else c
            for c in schema.columns
        ),
        schema.target,
    )
    return dataclasses.replace(parse_table(coded, columns), schema=schema)


def like(data: Any, table: RawTable) -> Any:
    """`table` in the container `data` came in."""
    if isinstance(data, RawTable):
        return table
    columns = table.columns()
    if is_dataframe(data):
        return type(data)(columns)
    if isinstance(data, Mapping):
        return columns
    if data.dtype.kind not in "biuf":
        return np.stack([np.asarray(columns[n], dtype=object) for n in table.schema.names], axis=1)
    stacked = [
        np.where(table.codes[n] < 0, np.nan, table.codes[n]) if n in table.codes else table.values[n]
        for n in table.schema.names
    ]
    out = np.stack(stacked, axis=1)
    whole = not table.values and not any((c < 0).any() for c in table.codes.values())
    return out.astype(np.int32) if whole else out
