"""Domains (declared, public) and datasets (private records encoded against a domain).

A `Domain` is an ordered list of attributes: categorical (a size, optionally labels) or numeric
(public bounds [lower, upper]). It is always declared by the user, never read from the data.
Two JSON forms are accepted:

- sizes: ``{"age": 10, "sex": 2, ...}`` (integer-coded data; the format of ``shared/data``);
- schema: ``{"columns": {"age": {"type": "numeric", "lower": 17, "upper": 90},
  "sex": {"type": "categorical", "categories": ["Female", "Male"]}, ...}, "target": "sex"}``,
  where a categorical column may give ``"size": k`` instead of labels.

A `Dataset` holds categorical codes (n, n_categorical) int32 and numeric values normalised to
[0, 1] (n, n_numeric) float32. Every validation error names the column and how many values are
wrong, never a value itself: the records are private.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from jaxdp._io import atomic_open


class DataError(ValueError):
    """Input data or a domain declaration that cannot be used as given."""


@dataclasses.dataclass(frozen=True)
class Categorical:
    """A categorical attribute with `size` values, coded 0..size-1 (labels optional)."""

    name: str
    size: int
    labels: tuple[str, ...] | None = None

    def __post_init__(self):
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size <= 0:
            raise DataError(f"column {self.name!r}: size must be an integer >= 1, got {self.size!r}")
        if self.labels is not None:
            if len(self.labels) != self.size:
                raise DataError(f"column {self.name!r}: {len(self.labels)} labels for size {self.size}")
            if len(set(self.labels)) != len(self.labels):
                raise DataError(f"column {self.name!r}: categories must be distinct")


@dataclasses.dataclass(frozen=True)
class Numeric:
    """A numeric attribute with public bounds; values are normalised to [0, 1] internally."""

    name: str
    lower: float
    upper: float

    def __post_init__(self):
        lo, hi = self.lower, self.upper
        finite = all(isinstance(v, int | float) and math.isfinite(v) for v in (lo, hi))
        if not finite or not lo < hi:
            raise DataError(
                f"column {self.name!r}: bounds must be finite numbers with lower < upper, "
                f"got [{lo!r}, {hi!r}]"
            )


Attribute = Categorical | Numeric


@dataclasses.dataclass(frozen=True)
class Domain:
    """An ordered, declared set of attributes.

    Attributes:
        attributes: the attributes in column order.
        target: optional name of a categorical label column (for ML-utility evaluation).
    """

    attributes: tuple[Attribute, ...]
    target: str | None = None

    def __post_init__(self):
        if not self.attributes:
            raise DataError("a domain needs at least one attribute")
        names = [a.name for a in self.attributes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise DataError(f"duplicate attribute names in domain: {dupes}")
        if self.target is not None and not isinstance(self[self.target], Categorical):
            raise DataError(f"target {self.target!r} must be a categorical column")

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_sizes(cls, sizes: Mapping[str, int]) -> Domain:
        """All-categorical domain from ``{"attr": size}``."""
        return cls(tuple(Categorical(str(k), _as_size(k, v)) for k, v in sizes.items()))

    @classmethod
    def from_schema(cls, schema: Mapping[str, Any]) -> Domain:
        """Domain from the schema form (see the module docstring)."""
        columns = schema.get("columns")
        if not isinstance(columns, Mapping) or not columns:
            raise DataError('schema must have a non-empty "columns" object')
        attrs: list[Attribute] = []
        for name, spec in columns.items():
            kind = spec.get("type") if isinstance(spec, Mapping) else None
            if kind == "numeric":
                attrs.append(Numeric(name, _as_bound(name, spec, "lower"), _as_bound(name, spec, "upper")))
            elif kind == "categorical":
                if "categories" in spec:
                    labels = tuple(str(c) for c in spec["categories"])
                    attrs.append(Categorical(name, len(labels), labels))
                elif "size" in spec:
                    attrs.append(Categorical(name, _as_size(name, spec["size"])))
                else:
                    raise DataError(f'column {name!r}: categorical needs "categories" or "size"')
            else:
                raise DataError(f'column {name!r}: "type" must be "numeric" or "categorical"')
        return cls(tuple(attrs), target=schema.get("target"))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Domain:
        """Read a domain from either JSON form (a ``"columns"`` key means the schema form)."""
        obj = read_json(path, "domain")
        if not isinstance(obj, Mapping):
            raise DataError(f"domain file {str(path)!r} must hold a JSON object")
        return cls.from_schema(obj) if "columns" in obj else cls.from_sizes(obj)

    def to_json(self) -> dict[str, Any]:
        """The schema form of this domain."""
        columns: dict[str, Any] = {}
        for a in self.attributes:
            if isinstance(a, Numeric):
                columns[a.name] = {"type": "numeric", "lower": a.lower, "upper": a.upper}
            elif a.labels is not None:
                columns[a.name] = {"type": "categorical", "categories": list(a.labels)}
            else:
                columns[a.name] = {"type": "categorical", "size": a.size}
        out: dict[str, Any] = {"columns": columns}
        if self.target is not None:
            out["target"] = self.target
        return out

    # -- views ----------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise KeyError(f"no attribute named {name!r} in the domain")

    def __len__(self) -> int:
        return len(self.attributes)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def categorical(self) -> tuple[Categorical, ...]:
        return tuple(a for a in self.attributes if isinstance(a, Categorical))

    @property
    def numeric(self) -> tuple[Numeric, ...]:
        return tuple(a for a in self.attributes if isinstance(a, Numeric))

    @property
    def sizes(self) -> tuple[int, ...]:
        """Sizes of the categorical attributes, in their order (the index space of queries)."""
        return tuple(a.size for a in self.categorical)

    @property
    def n_cells(self) -> int:
        """Number of cells of the categorical part (exact Python int, may be astronomically large)."""
        return math.prod(self.sizes)

    @property
    def is_categorical(self) -> bool:
        return not self.numeric

    def one_hot_offsets(self) -> tuple[int, ...]:
        """Start column of each attribute in the one-hot/relaxed encoding (numeric: 1 column)."""
        widths = [a.size if isinstance(a, Categorical) else 1 for a in self.attributes]
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(widths)[:-1]]))

    @property
    def one_hot_width(self) -> int:
        return sum(a.size if isinstance(a, Categorical) else 1 for a in self.attributes)

    def categorical_index(self, names: Iterable[str]) -> tuple[int, ...]:
        """Positions of the named categorical attributes among `self.categorical`."""
        cat_names = [a.name for a in self.categorical]
        out = []
        for n in names:
            if n not in cat_names:
                raise DataError(f"{n!r} is not a categorical attribute of the domain")
            out.append(cat_names.index(n))
        return tuple(out)


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value in a declaration file (`what`: "domain", "schema"); DataError if unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read {what} file {str(path)!r}: {err}") from None


def _as_size(name: object, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(f"column {name!r}: size must be an integer >= 1, got {value!r}")
    return value


def _as_bound(name: str, spec: Mapping[str, Any], key: str) -> float:
    value = spec.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f'column {name!r}: numeric column needs a number "{key}"')
    return float(value)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Private records encoded against a declared domain.

    Attributes:
        domain: the declared domain.
        codes: (n_records, n_categorical) int32 codes in [0, size).
        numeric: (n_records, n_numeric) float32 values normalised to [0, 1].
    """

    domain: Domain
    codes: np.ndarray
    numeric: np.ndarray

    def __post_init__(self):
        n = self.codes.shape[0]
        if self.codes.shape != (n, len(self.domain.categorical)):
            raise DataError("codes do not match the domain's categorical columns")
        if self.numeric.shape != (n, len(self.domain.numeric)):
            raise DataError("numeric values do not match the domain's numeric columns")

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @property
    def n_records(self) -> int:
        return len(self)

    # -- construction from columns --------------------------------------------------------------

    @classmethod
    def from_columns(cls, domain: Domain, columns: Mapping[str, Sequence[Any] | np.ndarray]) -> Dataset:
        """Validate and encode raw columns.

        Categorical columns with labels take labels (strings); without labels they take integer
        codes. Numeric columns take values in original units within the declared bounds.

        Raises:
            DataError: naming the column and the number of bad values (never the values).
        """
        _check_column_names(domain, list(columns))
        lengths = {len(columns[a.name]) for a in domain.attributes}
        if len(lengths) != 1:
            raise DataError("columns have different lengths")
        n = lengths.pop()
        if n == 0:
            raise DataError("the table is empty (0 records)")
        codes = np.empty((n, len(domain.categorical)), dtype=np.int32)
        numeric = np.empty((n, len(domain.numeric)), dtype=np.float32)
        for j, a in enumerate(domain.categorical):
            codes[:, j] = _encode_categorical(a, columns[a.name])
        for j, a in enumerate(domain.numeric):
            numeric[:, j] = _encode_numeric(a, columns[a.name])
        return cls(domain, codes, numeric)

    @classmethod
    def from_codes(cls, domain: Domain, codes: np.ndarray, numeric: np.ndarray | None = None) -> Dataset:
        """Validate arrays already in encoded form (codes (n, n_cat); numeric in original units)."""
        codes = np.asarray(codes)
        n_num = len(domain.numeric)
        if codes.ndim != 2 or codes.shape[1] != len(domain.categorical):
            raise DataError(
                f"codes must have shape (n_records, {len(domain.categorical)}), got {codes.shape}"
            )
        columns: dict[str, Any] = {a.name: codes[:, j] for j, a in enumerate(domain.categorical)}
        if n_num:
            numeric = np.asarray(numeric if numeric is not None else np.empty((0, 0)))
            if numeric.ndim != 2 or numeric.shape != (codes.shape[0], n_num):
                raise DataError(f"numeric must have shape (n_records, {n_num}), got {numeric.shape}")
            columns.update({a.name: numeric[:, j] for j, a in enumerate(domain.numeric)})
        raw = {a.name: columns[a.name] for a in domain.attributes}
        # Codes arrive as codes even when the domain carries labels.
        labelled = [a.name for a in domain.categorical if a.labels is not None]
        stripped = Domain(
            tuple(Categorical(a.name, a.size) if a.name in labelled else a for a in domain.attributes),
            domain.target,
        )
        ds = cls.from_columns(stripped, raw)
        return cls(domain, ds.codes, ds.numeric)

    # -- views ----------------------------------------------------------------------------------

    def to_columns(self) -> dict[str, np.ndarray]:
        """Decode to columns: labels where declared, codes otherwise, numeric in original units."""
        out: dict[str, np.ndarray] = {}
        cat = {a.name: j for j, a in enumerate(self.domain.categorical)}
        num = {a.name: j for j, a in enumerate(self.domain.numeric)}
        for a in self.domain.attributes:
            if isinstance(a, Categorical):
                col = self.codes[:, cat[a.name]]
                out[a.name] = np.asarray(a.labels, dtype=object)[col] if a.labels else col
            else:
                unit = self.numeric[:, num[a.name]].astype(np.float64)
                out[a.name] = a.lower + unit * (a.upper - a.lower)
        return out

    def one_hot(self) -> np.ndarray:
        """(n_records, domain.one_hot_width) float32: one-hot blocks, numeric as one column."""
        out = np.zeros((len(self), self.domain.one_hot_width), dtype=np.float32)
        offsets = self.domain.one_hot_offsets()
        cat = num = 0
        rows = np.arange(len(self))
        for a, off in zip(self.domain.attributes, offsets, strict=True):
            if isinstance(a, Categorical):
                out[rows, off + self.codes[:, cat]] = 1.0
                cat += 1
            else:
                out[:, off] = self.numeric[:, num]
                num += 1
        return out


def _check_column_names(domain: Domain, given: list[str]) -> None:
    dupes = sorted({c for c in given if given.count(c) > 1})
    if dupes:
        raise DataError(f"duplicate columns: {dupes}")
    missing = [n for n in domain.names if n not in given]
    if missing:
        raise DataError(f"missing columns declared in the domain: {missing}")
    extra = [c for c in given if c not in domain.names]
    if extra:
        raise DataError(f"columns not declared in the domain: {extra}")


def _encode_categorical(attr: Categorical, values: Sequence[Any] | np.ndarray) -> np.ndarray:
    if attr.labels is not None:
        index = {label: i for i, label in enumerate(attr.labels)}
        text = [str(v).strip() for v in values]
        unknown = sum(1 for v in text if v not in index)
        if unknown:
            raise DataError(
                f"column {attr.name!r}: {unknown} value(s) are not among its {attr.size} declared categories"
            )
        return np.fromiter((index[v] for v in text), dtype=np.int32, count=len(text))
    floats = _as_float_array(attr.name, values)
    bad = ~np.isfinite(floats)
    if bad.any():
        raise DataError(f"column {attr.name!r}: {int(bad.sum())} value(s) are NaN, infinite or empty")
    not_int = floats != np.round(floats)
    if not_int.any():
        raise DataError(f"column {attr.name!r}: {int(not_int.sum())} value(s) are not integers")
    outside = (floats < 0) | (floats >= attr.size)
    if outside.any():
        raise DataError(f"column {attr.name!r}: {int(outside.sum())} code(s) outside [0, {attr.size})")
    return floats.astype(np.int32)


def _encode_numeric(attr: Numeric, values: Sequence[Any] | np.ndarray) -> np.ndarray:
    floats = checked_numeric(attr, values)
    return ((floats - attr.lower) / (attr.upper - attr.lower)).astype(np.float32)


def checked_numeric(attr: Numeric, values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """float64 values in original units, every one finite and within the declared bounds.

    Raises:
        DataError: naming the column and the number of bad values (never the values).
    """
    floats = _as_float_array(attr.name, values)
    bad = ~np.isfinite(floats)
    if bad.any():
        raise DataError(f"column {attr.name!r}: {int(bad.sum())} value(s) are NaN, infinite or empty")
    # Values outside the declared bounds are refused, not clipped: clipping silently changes the
    # data, and bounds taken from the data would leak; the user must declare bounds that hold.
    outside = (floats < attr.lower) | (floats > attr.upper)
    if outside.any():
        raise DataError(
            f"column {attr.name!r}: {int(outside.sum())} value(s) outside the declared bounds "
            f"[{attr.lower:g}, {attr.upper:g}]"
        )
    return floats


def _as_float_array(name: str, values: Sequence[Any] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "biuf":
        return arr.astype(np.float64)
    try:  # vectorised parse; the loop below only runs to count what failed
        return arr.astype(np.float64)
    except (TypeError, ValueError):
        pass
    out = np.empty(len(arr), dtype=np.float64)
    unparsable = 0
    for i, v in enumerate(arr):
        try:
            out[i] = float(str(v).strip()) if str(v).strip() else math.nan
        except ValueError:
            unparsable += 1
    if unparsable:
        raise DataError(f"column {name!r}: {unparsable} value(s) are not numbers")
    return out


# -- CSV ------------------------------------------------------------------------------------------


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
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise DataError(f"duplicate columns: {dupes}")
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
