"""Marginal workloads: which k-way marginals are asked, and the counting queries inside them.

A marginal over attributes S (categorical attribute indices, ascending) has prod_{j in S} size_j
cells; its counting queries are the cells in row-major order over S (the last attribute varies
fastest), i.e. cell index = sum_j code_j * stride_j. A workload's flat answer vector is the
concatenation of its marginals in workload order; `offsets` gives where each marginal starts.
Every kernel in `jaxdp.queries` that answers a whole workload returns this flat vector.

Workloads are plain, hashable structure (public): they are static under jit. The array forms that
kernels vmap over (`ProductQueries`, the plans in `exact` and `relaxed`) are built from them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.domain import DataError, Domain
from jaxdp.keys import fold_in, require_key
from jaxdp.types import Array, Key, Neighboring, pytree_dataclass, static_field

# Above this many candidate marginals `random_kway` samples subsets directly instead of choosing
# from the enumerated list (enumerating C(d, k) tuples would cost more than the sample).
_ENUMERATE_LIMIT = 1_000_000


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

    @functools.cached_property
    def cells(self) -> tuple[int, ...]:
        """Number of counting queries of each marginal (computed once: hot loops index it)."""
        return tuple(math.prod(self.marginal_shape(i)) for i in range(len(self)))

    @functools.cached_property
    def offsets(self) -> tuple[int, ...]:
        """Start of each marginal in the flat answer vector (computed once)."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.cells)[:-1]]))

    @property
    def n_queries(self) -> int:
        return sum(self.cells)

    @property
    def max_k(self) -> int:
        """The largest number of attributes in one marginal."""
        return max(len(c) for c in self.cliques)

    def strides(self, i: int) -> tuple[int, ...]:
        """Row-major strides of marginal i's cells over its attributes."""
        shape = self.marginal_shape(i)
        return tuple(math.prod(shape[j + 1 :]) for j in range(len(shape)))

    def marginal_of_query(self) -> np.ndarray:
        """(n_queries,) int32: the marginal each counting query belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int32), self.cells)

    def cell_codes(self, i: int) -> np.ndarray:
        """(cells[i], len(cliques[i])) int32: the attribute codes of each cell of marginal i.

        Row r holds the codes that cell r asks for, in the documented row-major order.
        """
        shape = self.marginal_shape(i)
        return np.indices(shape, dtype=np.int32).reshape(len(shape), -1).T.copy()

    def names(self, domain: Domain) -> list[tuple[str, ...]]:
        """The marginals as tuples of attribute names."""
        cat = domain.categorical
        return [tuple(cat[a].name for a in c) for c in self.cliques]

    def weight_array(self) -> np.ndarray:
        """(len(self),) float64 weights (1 where none were given)."""
        if self.weights is None:
            return np.ones(len(self))
        return np.asarray(self.weights, dtype=np.float64)

    def with_weights(self, weights: Sequence[float] | None) -> MarginalWorkload:
        """The same marginals with other weights (None: unweighted)."""
        w = None if weights is None else tuple(float(x) for x in weights)
        return MarginalWorkload(self.sizes, self.cliques, w)


# -- constructors ---------------------------------------------------------------------------------


def all_kway(sizes: Sequence[int], k: int) -> MarginalWorkload:
    """All k-way marginals over the attributes (in lexicographic order of index tuples)."""
    sizes = tuple(int(s) for s in sizes)
    if not 1 <= k <= len(sizes):
        raise DataError(f"k must be in [1, {len(sizes)}] for a domain of {len(sizes)} attributes, got {k}")
    return MarginalWorkload(sizes, tuple(itertools.combinations(range(len(sizes)), k)))


def random_kway(key: Key, sizes: Sequence[int], k: int, m: int) -> MarginalWorkload:
    """`m` distinct k-way marginals drawn uniformly without replacement, listed lexicographically.

    The workload is public structure: the key only decides which marginals an analyst asks, so it
    should be a key of its own (not the mechanism's root key). Same key, same workload.

    Args:
        key: a typed JAX key.
        sizes: categorical attribute sizes.
        k: attributes per marginal.
        m: number of marginals, at most C(len(sizes), k).

    Raises:
        DataError: if k or m is out of range.
    """
    key = require_key(key)
    sizes = tuple(int(s) for s in sizes)
    d = len(sizes)
    if not 1 <= k <= d:
        raise DataError(f"k must be in [1, {d}] for a domain of {d} attributes, got {k}")
    total = math.comb(d, k)
    if not 1 <= m <= total:
        raise DataError(f"m must be in [1, {total}] (the number of {k}-way marginals), got {m}")
    if total <= _ENUMERATE_LIMIT:
        every = list(itertools.combinations(range(d), k))
        picked = np.asarray(jax.random.choice(key, total, (m,), replace=False))
        cliques = sorted(every[int(i)] for i in picked)
    else:
        # Rejection sampling from subsets drawn by independent keys: with m <= total and total
        # large, collisions are rare, and the result is a pure function of the key.
        chosen: set[tuple[int, ...]] = set()
        attempt = 0
        while len(chosen) < m:
            for row in np.asarray(_draw_subsets(fold_in(key, attempt), d, k, 2 * m)):
                chosen.add(tuple(sorted(int(a) for a in row)))
                if len(chosen) == m:
                    break
            attempt += 1
        cliques = sorted(chosen)
    return MarginalWorkload(sizes, tuple(cliques))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _draw_subsets(key: Key, d: int, k: int, count: int) -> Array:
    """(count, k) attribute indices: the first k of independent random permutations of range(d)."""
    keys = jax.random.split(key, count)
    return jax.vmap(lambda kk: jax.random.permutation(kk, d)[:k])(keys)


def from_cliques(
    sizes: Sequence[int],
    cliques: Iterable[Sequence[int]],
    weights: Sequence[float] | None = None,
) -> MarginalWorkload:
    """A workload from attribute-index tuples in any order (each is sorted ascending).

    Raises:
        DataError: on an empty list, a repeated attribute, or an index out of range.
    """
    out = []
    for c in cliques:
        c = [int(a) for a in c]
        if len(set(c)) != len(c):
            raise DataError(f"marginal {tuple(c)} repeats an attribute")
        out.append(tuple(sorted(c)))
    w = None if weights is None else tuple(float(x) for x in weights)
    return MarginalWorkload(tuple(int(s) for s in sizes), tuple(out), w)


def from_names(domain: Domain, marginals: Iterable[Sequence[str]]) -> MarginalWorkload:
    """A workload from attribute-name tuples; attributes must be categorical in `domain`."""
    cliques = []
    for names in marginals:
        names = list(names)
        if len(set(names)) != len(names):
            raise DataError(f"marginal {names} repeats an attribute")
        cliques.append(tuple(sorted(domain.categorical_index(names))))
    return MarginalWorkload(domain.sizes, tuple(cliques))


def downward_closure(workload: MarginalWorkload) -> MarginalWorkload:
    """Every non-empty attribute subset of some marginal of the workload (AIM's W+).

    Listed by size, then lexicographically; each subset once; unweighted.
    """
    subsets: set[tuple[int, ...]] = set()
    for c in workload.cliques:
        for r in range(1, len(c) + 1):
            subsets.update(itertools.combinations(c, r))
    ordered = sorted(subsets, key=lambda s: (len(s), s))
    return MarginalWorkload(workload.sizes, tuple(ordered))


def aim_weights(workload: MarginalWorkload, candidates: MarginalWorkload) -> np.ndarray:
    """AIM's candidate weights w_r = sum_{s in W} c_s |r ∩ s| (McKenna et al. 2022, Sec. 4).

    Args:
        workload: the analyst's workload W with weights c_s (1 if none).
        candidates: the candidate marginals r (typically `downward_closure(workload)`).

    Returns:
        (len(candidates),) float64 weights.
    """
    if candidates.sizes != workload.sizes:
        raise DataError("candidates and workload must be over the same domain sizes")
    c = workload.weight_array()
    sets = [set(s) for s in workload.cliques]
    return np.array(
        [sum(cs * len(set(r) & s) for cs, s in zip(c, sets, strict=True)) for r in candidates.cliques]
    )


def marginal_sensitivity(relation: Neighboring, n_records: int | None = None) -> tuple[float, float]:
    """(L1, L2) sensitivity of one marginal's answer vector under a neighbouring relation.

    Add/remove-one changes one cell of the count vector by 1: L1 = L2 = 1. Replace-one moves one
    record from one cell to another of the fraction vector (n public): L1 = 2/n, L2 = sqrt(2)/n.
    For a workload of m marginals the L2 sensitivity of all answers together is sqrt(m) times the
    per-marginal L2 (and L1 is m times), since one record touches one cell of every marginal.

    Args:
        relation: the neighbouring relation.
        n_records: the public record count; required for replace-one.
    """
    if relation is Neighboring.ADD_REMOVE:
        return 1.0, 1.0
    if n_records is None or n_records <= 0:
        raise ValueError("replace-one sensitivity needs the public record count n_records >= 1")
    return 2.0 / n_records, math.sqrt(2.0) / n_records


# -- counting / product queries as arrays ---------------------------------------------------------


@pytree_dataclass
class ProductQueries:
    """A batch of counting queries over categorical attributes, in array form.

    Query q asks "does the record have code values[q, t] on attribute attrs[q, t] for every slot
    t?"; a slot with attrs = -1 is padding and always holds. On one-hot or relaxed rows p the same
    query is the product query f_S(p) = prod_t p[offset(attrs[q, t]) + values[q, t]] (GEM
    Definition 4; RAP++ Definition 10).

    Attributes:
        attrs: (n_queries, k) int32 attribute indices, -1 for padding.
        values: (n_queries, k) int32 codes (0 where padding).
        sizes: the domain's categorical sizes (static).
    """

    attrs: Array
    values: Array
    sizes: tuple[int, ...] = static_field()

    def __len__(self) -> int:
        return int(self.attrs.shape[0])

    @property
    def width(self) -> int:
        """Columns of the one-hot layout of the categorical attributes (sum of sizes)."""
        return sum(self.sizes)

    def columns(self) -> Array:
        """(n_queries, k) int32 one-hot columns; padding points at column `width` (a ones column)."""
        offsets = jnp.asarray(np.concatenate([[0], np.cumsum(self.sizes)[:-1]]), jnp.int32)
        attrs = jnp.asarray(self.attrs)
        safe = jnp.maximum(attrs, 0)
        return jnp.where(attrs >= 0, offsets[safe] + jnp.asarray(self.values), self.width)

    def take(self, ids: Array) -> ProductQueries:
        """The queries at `ids` ((m,) int, may be traced): fixed shape, no retrace."""
        ids = jnp.asarray(ids)
        return ProductQueries(jnp.asarray(self.attrs)[ids], jnp.asarray(self.values)[ids], self.sizes)


def workload_queries(workload: MarginalWorkload) -> ProductQueries:
    """All counting queries of a workload, in flat answer order (padded to `workload.max_k`)."""
    k = workload.max_k
    attrs = np.full((workload.n_queries, k), -1, np.int32)
    values = np.zeros((workload.n_queries, k), np.int32)
    for i, (c, off) in enumerate(zip(workload.cliques, workload.offsets, strict=True)):
        cells = workload.cell_codes(i)
        attrs[off : off + len(cells), : len(c)] = c
        values[off : off + len(cells), : len(c)] = cells
    return ProductQueries(attrs, values, workload.sizes)


# -- growing query sets of fixed capacity ---------------------------------------------------------


@pytree_dataclass
class QuerySubset:
    """A growing set of query (or marginal) ids in a fixed-capacity buffer with a mask.

    Mechanisms add the ids they measure each round; the buffer shape never changes, so a jitted
    loop over rounds traces once. Slots past `count` hold id 0 and mask False.

    Attributes:
        ids: (capacity,) int32.
        mask: (capacity,) bool, True for the first `count` slots.
        count: () int32 number of ids held.
    """

    ids: Array
    mask: Array
    count: Array

    @classmethod
    def empty(cls, capacity: int) -> QuerySubset:
        """An empty subset that can hold `capacity` ids."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        return cls(jnp.zeros(capacity, jnp.int32), jnp.zeros(capacity, bool), jnp.zeros((), jnp.int32))

    @property
    def capacity(self) -> int:
        return int(self.ids.shape[0])

    def add(self, new_ids: Array) -> QuerySubset:
        """Append `new_ids` ((r,) int); traceable. Ids beyond the capacity are dropped.

        The caller sizes the buffer from the public plan (rounds x ids per round), so overflow is
        a programming error; dropping keeps shapes fixed and `count` never exceeds the capacity.
        """
        new_ids = jnp.asarray(new_ids, jnp.int32).reshape(-1)
        pos = self.count + jnp.arange(new_ids.shape[0], dtype=jnp.int32)
        ids = self.ids.at[pos].set(new_ids, mode="drop")
        mask = self.mask.at[pos].set(True, mode="drop")
        count = jnp.minimum(self.count + new_ids.shape[0], self.capacity).astype(jnp.int32)
        return QuerySubset(ids, mask, count)

    def dense_mask(self, n: int) -> Array:
        """(n,) bool: True at every id held (for masked losses over a full answer vector)."""
        return jnp.zeros(n, bool).at[self.ids].max(self.mask)

    def gather(self, values: Array, fill: float = 0.0) -> Array:
        """(capacity,) values[ids] where held, `fill` elsewhere."""
        return jnp.where(self.mask, jnp.asarray(values)[self.ids], fill)


def expand_marginal_mask(workload: MarginalWorkload, marginal_mask: Array) -> Array:
    """(n_queries,) mask of counting queries from a (len(workload),) mask of marginals."""
    return jnp.asarray(marginal_mask)[jnp.asarray(workload.marginal_of_query())]
