"""The coded domain: the declared attributes a mechanism's index space is made of.

A `Domain` is an ordered list of attributes: categorical (a size, optionally labels) or numeric
(public bounds [lower, upper]). It is always declared by the user, never read from the data.
Two JSON forms are accepted:

- sizes: ``{"age": 10, "sex": 2, ...}`` (integer-coded data; the format of ``shared/data``);
- the ``"columns"`` form of a table schema (`jaxdp.domain.schema`, its one parser, with
  `load_domain` and `domain_from_schema`), read as the attributes its columns declare: bins,
  integer and nullable keys do not change a domain.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np


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
    # The schema module builds on these classes, so what reads the "columns" form lives there
    # (`jaxdp.domain.load_domain`, `domain_from_schema`): that form has one parser,
    # `TableSchema.from_json`, and this module imports nothing of it.

    @classmethod
    def from_sizes(cls, sizes: Mapping[str, int]) -> Domain:
        """All-categorical domain from ``{"attr": size}``."""
        return cls(tuple(Categorical(str(k), _as_size(k, v)) for k, v in sizes.items()))

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

    def without_labels(self) -> Domain:
        """The same attributes with categorical labels dropped: the domain a table of integer codes
        is read with, whatever labels its columns have."""
        bare = (
            dataclasses.replace(a, labels=None) if isinstance(a, Categorical) else a for a in self.attributes
        )
        return Domain(tuple(bare), self.target)

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
        return json.loads(Path(path).read_text(encoding="utf-8-sig"))  # a byte-order mark too
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read {what} file {str(path)!r}: {err}") from None


def _as_size(name: object, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(f"column {name!r}: size must be an integer >= 1, got {value!r}")
    return value
