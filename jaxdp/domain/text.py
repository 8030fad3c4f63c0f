"""Tables as CSV text: read into the one encoder, written back in labels and original units.

Reading checks only the file's shape (a header, as many fields in every row); the cells are
validated by `jaxdp.domain.encode`. Writing is atomic where it goes to a path: the file appears
whole or not at all.
"""

from __future__ import annotations

import csv
import gzip
import os
from collections.abc import Mapping
from typing import TextIO

import numpy as np

from jaxdp._io import atomic_open
from jaxdp.domain.coded import DataError, Domain
from jaxdp.domain.dataset import Dataset
from jaxdp.domain.encode import RawTable, check_unique_columns, parse_table
from jaxdp.domain.schema import TableSchema


def read_csv(source: str | os.PathLike | TextIO, domain: Domain) -> Dataset:
    """Read and validate a CSV with a header row against a declared domain.

    Integer-coded columns hold codes; labelled categorical columns hold labels; numeric columns
    hold values in original units. Surrounding whitespace is ignored and blank lines skipped.

    Args:
        source: a path (``.gz`` is decompressed) or an open text stream.
        domain: the declared domain.

    Raises:
        DataError: unreadable file, bad header, or any invalid value (column and count named).
    """
    return Dataset.from_columns(domain, read_columns(source))


def read_table(source: str | os.PathLike | TextIO, schema: TableSchema) -> RawTable:
    """Read and validate a raw CSV (header row; labels, original units, empty cells)."""
    return parse_table(schema, read_columns(source))


def read_columns(source: str | os.PathLike | TextIO) -> dict[str, list[str]]:
    """The cells of a CSV with a header row, by column, as text (surrounding whitespace removed,
    blank lines skipped); nothing is validated beyond the shape.

    Raises:
        DataError: unreadable file, no header, or rows whose field count differs from the header's.
    """
    name = getattr(source, "name", source)
    try:
        if hasattr(source, "read"):
            rows = _read_rows(source)  # type: ignore[arg-type]
        else:
            opener = gzip.open if str(source).endswith(".gz") else open
            with opener(source, "rt", newline="") as fh:
                rows = _read_rows(fh)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"cannot read CSV {str(name)!r}: {type(err).__name__}") from None
    if not rows:
        raise DataError(f"CSV {str(name)!r} has no header row")
    header = [h.strip() for h in rows[0]]
    body = rows[1:]
    ragged = sum(1 for r in body if len(r) != len(header))
    if ragged:
        raise DataError(f"CSV {str(name)!r}: {ragged} row(s) do not have {len(header)} fields")
    check_unique_columns(header)
    return {h: [r[i].strip() for r in body] for i, h in enumerate(header)}


def _read_rows(fh: TextIO) -> list[list[str]]:
    return [r for r in csv.reader(fh, skipinitialspace=True) if r and any(c.strip() for c in r)]


def write_csv(path: str | os.PathLike, dataset: Dataset) -> None:
    """Write decoded records atomically: the file appears whole or not at all."""
    with atomic_open(path) as fh:
        write_rows(fh, dataset)


def write_rows(fh: TextIO, dataset: Dataset) -> None:
    """Write a header and the decoded records (labels, original units) to a text stream."""
    columns = dataset.to_columns()
    write_columns(fh, {n: columns[n] for n in dataset.domain.names})


def write_columns(fh: TextIO, columns: Mapping[str, np.ndarray]) -> None:
    """Write a header and the columns, in their order, to a text stream; a missing value (None,
    NaN) is an empty cell."""
    writer = csv.writer(fh)
    writer.writerow(list(columns))
    writer.writerows(zip(*[_format_column(np.asarray(c)) for c in columns.values()], strict=True))


def _format_column(col: np.ndarray) -> list[str]:
    if col.dtype.kind == "f":
        # 7 significant digits, never an exponent: float32 keeps ~7 digits of the normalised
        # value, so this shows original units (1484705, not 1.4847e+06) without float noise.
        return [
            ""
            if np.isnan(v)
            else np.format_float_positional(v, precision=7, unique=False, fractional=False, trim="-")
            for v in col
        ]
    return ["" if v is None else str(v) for v in col.tolist()]
