"""Tables as files: CSV text and Parquet read into the one encoder, CSV written back in labels and
original units. A CSV of numbers is parsed by NumPy's compiled reader, anything else by the text
reader (`read_table`).

Reading checks only the file's shape (a header, as many fields in every row); the cells are
validated by `jaxdp.domain.encode`. Writing is atomic where it goes to a path: the file appears
whole or not at all.
"""

from __future__ import annotations

import csv
import gzip
import os
import warnings
import zlib
from collections.abc import Mapping
from typing import Any, TextIO

import numpy as np

from jaxdp._io import atomic_open
from jaxdp.domain.coded import DataError, Domain
from jaxdp.domain.dataset import Dataset
from jaxdp.domain.encode import RawTable, check_unique_columns, parse_table, table_from
from jaxdp.domain.schema import NumericColumn, TableSchema


def read_csv(source: str | os.PathLike | TextIO, domain: Domain) -> Dataset:
    """Read and validate a CSV with a header row (or a Parquet file) against a declared domain.

    Integer-coded columns hold codes; labelled categorical columns hold labels; numeric columns
    hold values in original units. Surrounding whitespace is ignored and blank lines skipped.

    Args:
        source: a path (``.gz`` is decompressed; ``.parquet`` is read as Parquet, with the
            `arrow` extra) or an open text stream.
        domain: the declared domain.

    Raises:
        DataError: unreadable file, bad header, or any invalid value (column and count named).
    """
    return Dataset.from_table(domain, read_table(source, TableSchema.from_domain(domain)))


def read_table(source: str | os.PathLike | TextIO, schema: TableSchema) -> RawTable:
    """Read and validate a raw CSV (header row; labels, original units, empty cells), or a
    Parquet file (a path ending ``.parquet``: its columns go to the encoder as Arrow holds them,
    nulls as empty cells; needs pyarrow, the `arrow` extra).

    A file whose columns all hold numbers (codes of unlabelled categorical columns, numeric
    columns) is parsed by NumPy's compiled reader (`np.loadtxt`): 10^7 rows in seconds, the cells
    never held as Python strings. Anything it cannot parse as given (labels, empty cells, quoted
    or malformed cells) is read again by the text reader (`read_columns`), whose cells the
    encoder checks and counts by column: the compiled reader's own errors quote a cell, so they
    are never shown.
    """
    if str(getattr(source, "name", source)).endswith(".parquet"):
        return table_from(_read_parquet(source), schema)
    return parse_table(schema, _read_numbers(source, schema) or read_columns(source))


def _read_parquet(source: str | os.PathLike | TextIO) -> Any:
    try:
        import pyarrow.parquet
    except ImportError:
        raise DataError("reading Parquet needs pyarrow: pip install 'jaxdp-synth[arrow]'") from None
    try:
        return pyarrow.parquet.read_table(source)
    except (OSError, pyarrow.ArrowException) as err:
        name = getattr(source, "name", source)
        raise DataError(f"cannot read Parquet {str(name)!r}: {type(err).__name__}") from None


def _read_numbers(source: str | os.PathLike | TextIO, schema: TableSchema) -> dict[str, np.ndarray] | None:
    """The columns of a CSV file of numbers, parsed by `np.loadtxt` as int32 codes and float64
    values; None where the text reader must read it: a stream or anything but a regular file (it
    cannot be read twice), a labelled column, a header that is not the schema's names, any cell
    `np.loadtxt` refuses or warns about, or a "nan" in a numeric column."""
    if not isinstance(source, str | os.PathLike) or not os.path.isfile(source):
        return None
    if any(getattr(c, "labels", None) for c in schema.columns):
        return None
    kinds = {c.name: np.float64 if isinstance(c, NumericColumn) else np.int32 for c in schema.columns}
    try:
        with _open(source) as fh:
            header = [h.strip() for h in next(csv.reader([fh.readline()]), [])]
            if sorted(header) != sorted(kinds):
                return None
            with warnings.catch_warnings():
                # A warning is a refusal (NumPy < 2 truncates "1.5" read as an integer, and only
                # warns); "input contained no data" is not: the encoder names the empty table.
                warnings.simplefilter("error")
                warnings.filterwarnings("ignore", "loadtxt: input contained no data", UserWarning)
                records = np.loadtxt(
                    fh, delimiter=",", dtype=[(h, kinds[h]) for h in header], ndmin=1, comments=None
                )
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error, ValueError, OverflowError, Warning):
        return None  # the text reader reads it again, and names what is wrong
    # One contiguous array per column: the encoder's checks then read each column's own memory
    # instead of striding through every record (10x faster at 10^7 rows of 13 columns). Codes
    # alone are one int32 block, transposed in one pass.
    if all(kinds[h] is np.int32 for h in header):
        block = np.ascontiguousarray(records.view(np.int32).reshape(len(records), len(header)).T)
        columns = dict(zip(header, block, strict=True))
    else:
        columns = {h: np.ascontiguousarray(records[h]) for h in header}
    del records
    # "nan" parses to NaN, which the encoder would take for an empty cell; as text it is a
    # value that is not a finite number, refused as such.
    if any(kinds[h] is np.float64 and np.isnan(columns[h]).any() for h in header):
        return None
    return columns


# UTF-8 with or without a byte-order mark: Excel's "CSV UTF-8" starts the file with one, which
# would otherwise stick to the first column's name.
ENCODING = "utf-8-sig"
_BOM = "\ufeff"


def _open(source: str | os.PathLike) -> TextIO:
    opener = gzip.open if str(source).endswith(".gz") else open
    return opener(source, "rt", newline="", encoding=ENCODING)


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
            with _open(source) as fh:
                rows = _read_rows(fh)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"cannot read CSV {str(name)!r}: {type(err).__name__}") from None
    if not rows:
        raise DataError(f"CSV {str(name)!r} has no header row")
    header = [h.strip() for h in rows[0]]
    if header and header[0].startswith(_BOM):  # a stream the caller opened without utf-8-sig
        header[0] = header[0][len(_BOM) :].strip()
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
