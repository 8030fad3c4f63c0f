"""Marginal workloads: which k-way marginals are asked, and the counting queries inside them.

A marginal over attributes S (categorical attribute indices, ascending) has prod_{j in S} size_j
cells; its counting queries are the cells in row-major order over S (the last attribute varies
fastest), i.e. cell index = sum_j code_j * stride_j. A workload's flat answer vector is the
concatenation of its marginals in workload order; `offsets` gives where each marginal starts.

Workloads are plain, hashable structure (public): they are static under jit.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np

from jaxdp.domain import DataError, Domain


@dataclasses.dataclass(frozen=True)
class MarginalWorkload:
    """A list of marginals over a categorical domain.

    Attributes:
        sizes: sizes of the domain's categorical attributes (the index space).
        cliques: each marginal's attribute indices, ascending, no duplicates.
        weights: optional non-negative weight per marginal (as in AIM); None means all 1.
    """

    sizes: tuple[int, ...]
    cliques: tuple[tuple[int, ...], ...]
    weights: tuple[float, ...] | None = None

    def __post_init__(self):
        if not self.cliques:
            raise DataError("the workload is empty: it needs at least one marginal")
        d = len(self.sizes)
        for c in self.cliques:
            if not c or list(c) != sorted(set(c)) or c[0] < 0 or c[-1] >= d:
                raise DataError(f"marginal {c} must list distinct attribute indices in [0, {d}), ascending")
        if self.weights is not None and (
            len(self.weights) != len(self.cliques)
            or not all(math.isfinite(w) and w >= 0 for w in self.weights)
        ):
            raise DataError("workload weights must be one finite number >= 0 per marginal")

    def __len__(self) -> int:
        return len(self.cliques)

    def marginal_shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.sizes[a] for a in self.cliques[i])

    @property
    def cells(self) -> tuple[int, ...]:
        """Number of counting queries of each marginal."""
        return tuple(math.prod(self.marginal_shape(i)) for i in range(len(self)))

    @property
    def offsets(self) -> tuple[int, ...]:
        """Start of each marginal in the flat answer vector."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.cells)[:-1]]))

    @property
    def n_queries(self) -> int:
        return sum(self.cells)

    def strides(self, i: int) -> tuple[int, ...]:
        """Row-major strides of marginal i's cells over its attributes."""
        shape = self.marginal_shape(i)
        return tuple(math.prod(shape[j + 1 :]) for j in range(len(shape)))

    def marginal_of_query(self) -> np.ndarray:
        """(n_queries,) int32: the marginal each counting query belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int32), self.cells)

    def names(self, domain: Domain) -> list[tuple[str, ...]]:
        """The marginals as tuples of attribute names."""
        cat = domain.categorical
        return [tuple(cat[a].name for a in c) for c in self.cliques]


def all_kway(sizes: Sequence[int], k: int) -> MarginalWorkload:
    """All k-way marginals over the attributes (in lexicographic order of index tuples)."""
    sizes = tuple(int(s) for s in sizes)
    if not 1 <= k <= len(sizes):
        raise DataError(f"k must be in [1, {len(sizes)}] for a domain of {len(sizes)} attributes, got {k}")
    return MarginalWorkload(sizes, tuple(itertools.combinations(range(len(sizes)), k)))


def from_names(domain: Domain, marginals: Iterable[Sequence[str]]) -> MarginalWorkload:
    """A workload from attribute-name tuples; attributes must be categorical in `domain`."""
    cliques = []
    for names in marginals:
        names = list(names)
        if len(set(names)) != len(names):
            raise DataError(f"marginal {names} repeats an attribute")
        cliques.append(tuple(sorted(domain.categorical_index(names))))
    return MarginalWorkload(domain.sizes, tuple(cliques))
