"""Private records coded against a declared `Domain`: what mechanisms read.

A `Dataset` holds categorical codes (n, n_categorical) int32 and numeric values normalised to
[0, 1] (n, n_numeric) float32. Its records enter through the one encoder
(`jaxdp.domain.encode.parse_table`, against the domain's schema), so a bad cell is refused with
the same message whichever way the table came in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxdp.domain.coded import Categorical, DataError, Domain
from jaxdp.domain.encode import RawTable, parse_table
from jaxdp.domain.schema import TableSchema


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
        return cls.from_table(domain, parse_table(TableSchema.from_domain(domain), columns))

    @classmethod
    def from_codes(cls, domain: Domain, codes: np.ndarray, numeric: np.ndarray | None = None) -> Dataset:
        """Validate arrays already in encoded form (codes (n, n_cat); numeric in original units).

        Codes arrive as codes even when the domain carries labels."""
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
        return cls.from_table(domain, parse_table(TableSchema.from_domain(domain).with_codes(), columns))

    @classmethod
    def from_table(cls, domain: Domain, table: RawTable) -> Dataset:
        """The records of a table parsed against the domain's schema
        (`TableSchema.from_domain(domain)`): codes stacked as int32, numeric values normalised to
        [0, 1] as float32.

        Raises:
            DataError: the table was checked against another schema (one with empty cells, bins
                or other columns), whose cells need not be codes and values of this domain.
        """
        if table.schema.with_codes() != TableSchema.from_domain(domain).with_codes():
            raise DataError("the table was not checked against this domain's schema")
        columns = [table.codes[a.name].astype(np.int32, copy=False) for a in domain.categorical]
        codes = np.stack(columns, axis=1) if columns else np.zeros((len(table), 0), np.int32)
        numeric = np.zeros((len(table), len(domain.numeric)), np.float32)
        for j, a in enumerate(domain.numeric):
            numeric[:, j] = (table.values[a.name] - a.lower) / (a.upper - a.lower)
        return cls(domain, codes, numeric)

    def without_labels(self) -> Dataset:
        """The same records against the domain without its labels: written and read as codes."""
        return dataclasses.replace(self, domain=self.domain.without_labels())

    # -- views ----------------------------------------------------------------------------------

    def to_table(self) -> RawTable:
        """The records as a table of the domain's schema: codes, numeric values in original units
        (what `jaxdp.domain.like` puts back in the container a table came in)."""
        codes = {a.name: self.codes[:, j] for j, a in enumerate(self.domain.categorical)}
        values = {
            a.name: a.lower + self.numeric[:, j].astype(np.float64) * (a.upper - a.lower)
            for j, a in enumerate(self.domain.numeric)
        }
        return RawTable(TableSchema.from_domain(self.domain), codes, values)

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
