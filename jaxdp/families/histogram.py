"""The histogram family: an explicit distribution over a finite support.

The support is either the whole categorical domain (`DenseSupport`, for MWEM, PEP, DualQuery,
FEM on enumerable domains) or the records of a public dataset (`PublicSupport`, for PMW-Pub and
PEP-Pub). A distribution is held as log-weights over the support, (n_support,) float32;
`probabilities` normalises them. Updates act on one marginal at a time: `add_to_marginal` adds
`factors[cell(x)]` to the log-weight of every support point x, where cell(x) is x's cell in that
marginal. Everything here is post-processing of released measurements: no private input.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.families._sampling import support_rows
from jaxdp.queries import MarginalWorkload, check_enumerable, histogram_marginals
from jaxdp.types import Array, Key, pytree_dataclass, static_field


@pytree_dataclass
class MarginalPadding:
    """Each marginal's cells padded to a common length, for updates on a traced marginal index.

    gather: (n_marginals, max_cells) int32 positions in the flat answer vector extended by one
        trailing zero (padding points at it). valid: (n_marginals, max_cells) bool.
    """

    gather: Array
    valid: Array

    @classmethod
    def of(cls, workload: MarginalWorkload) -> MarginalPadding:
        width = max(workload.cells)
        gather = np.full((len(workload), width), workload.n_queries, np.int32)
        for i, (start, cells) in enumerate(zip(workload.offsets, workload.cells, strict=True)):
            gather[i, :cells] = np.arange(start, start + cells)
        return cls(jax.device_put(gather), jax.device_put(gather < workload.n_queries))

    @property
    def max_cells(self) -> int:
        return self.gather.shape[1]

    def marginal(self, flat_answers: Array, i: Array) -> Array:
        """(max_cells,) answers of marginal i (zeros past its cells)."""
        return jnp.concatenate([flat_answers, jnp.zeros(1, flat_answers.dtype)])[self.gather[i]]


@pytree_dataclass
class DenseSupport:
    """The whole categorical domain, as a dense tensor of shape `sizes` (row-major)."""

    workload: MarginalWorkload = static_field()

    @classmethod
    def of(cls, workload: MarginalWorkload) -> DenseSupport:
        """Raises DataError (with the cell count) for a domain too large to enumerate."""
        check_enumerable(workload.sizes)
        return cls(workload)

    @property
    def n_support(self) -> int:
        return math.prod(self.workload.sizes)

    def answers(self, probabilities: Array) -> Array:
        """(n_queries,) marginal answers of a distribution over the domain."""
        return histogram_marginals(probabilities, self.workload)

    def marginal_answers(self, probabilities: Array, i: Array) -> Array:
        """(max_cells,) answers of marginal i alone (zero-padded), for a traced index i."""
        sizes = self.workload.sizes
        width = max(self.workload.cells)

        def branch(j: int):
            other = tuple(a for a in range(len(sizes)) if a not in self.workload.cliques[j])

            def answer(p):
                flat = p.reshape(sizes).sum(axis=other).reshape(-1)
                return jnp.pad(flat, (0, width - flat.shape[0]))

            return answer

        return jax.lax.switch(i, [branch(j) for j in range(len(self.workload))], probabilities)

    def add_to_marginal(self, log_weights: Array, i: Array, factors: Array) -> Array:
        """log_weights[x] + factors[cell of x in marginal i], for a traced marginal index i."""
        sizes = self.workload.sizes

        def branch(j: int):
            clique = self.workload.cliques[j]
            shape = [sizes[a] if a in clique else 1 for a in range(len(sizes))]
            cells = self.workload.cells[j]

            def add(lw, f):
                return (lw.reshape(sizes) + f[:cells].reshape(shape)).reshape(-1)

            return add

        branches = [branch(j) for j in range(len(self.workload))]
        return jax.lax.switch(i, branches, log_weights, factors)

    def records(self, index: Array) -> Array:
        """(rows, n_attributes) int32 codes of support points."""
        return jnp.stack(jnp.unravel_index(index, self.workload.sizes), axis=1).astype(jnp.int32)

    def point_weights(self, weights: dict[int, np.ndarray]) -> np.ndarray:
        """(n_support,) float64 each point's product of its values' weights (host code)."""
        sizes = self.workload.sizes
        out = np.ones(sizes)
        for a, weight in weights.items():
            out = out * np.asarray(weight, np.float64).reshape(
                [sizes[a] if b == a else 1 for b in range(len(sizes))]
            )
        return out.reshape(-1)


@pytree_dataclass
class PublicSupport:
    """The records of a public dataset (duplicates kept: each record is one support point).

    codes: (n_public, n_attributes) int32 public records. cells: (n_marginals, n_public) int32,
    each record's cell in each marginal.
    """

    codes: Array
    cells: Array
    workload: MarginalWorkload = static_field()

    @classmethod
    def of(cls, codes: np.ndarray, workload: MarginalWorkload) -> PublicSupport:
        codes = np.asarray(codes, np.int64)
        cells = np.stack(
            [codes[:, list(c)] @ np.asarray(workload.strides(i)) for i, c in enumerate(workload.cliques)]
        )
        return cls(jnp.asarray(codes, jnp.int32), jnp.asarray(cells, jnp.int32), workload)

    @property
    def n_support(self) -> int:
        return self.codes.shape[0]

    def answers(self, probabilities: Array) -> Array:
        return jnp.concatenate(
            [
                jax.ops.segment_sum(probabilities, self.cells[i], num_segments=cells)
                for i, cells in enumerate(self.workload.cells)
            ]
        )

    def marginal_answers(self, probabilities: Array, i: Array) -> Array:
        width = max(self.workload.cells)
        return jax.ops.segment_sum(probabilities, self.cells[i], num_segments=width)

    def add_to_marginal(self, log_weights: Array, i: Array, factors: Array) -> Array:
        return log_weights + factors[self.cells[i]]

    def records(self, index: Array) -> Array:
        return self.codes[index]

    def point_weights(self, weights: dict[int, np.ndarray]) -> np.ndarray:
        """(n_support,) float64 each public record's product of its values' weights (host code)."""
        codes = np.asarray(self.codes)
        out = np.ones(len(codes))
        for a, weight in weights.items():
            out = out * np.asarray(weight, np.float64)[codes[:, a]]
        return out


def probabilities(log_weights: Array) -> Array:
    """Normalised distribution from log-weights (-inf allowed for excluded points)."""
    return jax.nn.softmax(log_weights)


def sample_support(key: Key, probs: Array, rows: int) -> Array:
    """(rows,) support indices with each index's count `rows` x its probability, rounded
    (`_sampling.support_rows`; O(rows log n))."""
    return support_rows(key, probs, rows)


def project_to_simplex(values: Array, valid: Array) -> Array:
    """Euclidean projection of the valid entries onto the probability simplex; 0 elsewhere.

    Noisy marginals can be negative or not sum to one; the projection is the closest
    distribution and removes the upward bias that clipping at zero would add.
    """
    big = jnp.asarray(1e9, values.dtype)
    v = jnp.where(valid, values, -big)
    u = jnp.sort(v)[::-1]
    css = jnp.cumsum(u) - 1.0
    j = jnp.arange(1, v.shape[0] + 1, dtype=values.dtype)
    support = (u - css / j > 0) & (jnp.sort(valid)[::-1])
    k = jnp.maximum(jnp.sum(support), 1)
    tau = css[k - 1] / k.astype(values.dtype)
    return jnp.where(valid, jnp.maximum(values - tau, 0.0), 0.0)


class Measurements(NamedTuple):
    """Released measurements, in fixed-capacity buffers (one slot per round).

    marginal: (capacity,) int32 marginal index of each measurement (0 in empty slots).
    cell: (capacity,) int32 the measured cell for a single-query measurement, -1 when the whole
        marginal was measured.
    target: (capacity, max_cells) float32 measured answers (a distribution over the marginal's
        cells for whole marginals; the answer at `cell` for single queries).
    filled: (capacity,) bool.
    """

    marginal: Array
    cell: Array
    target: Array
    filled: Array

    @classmethod
    def empty(cls, capacity: int, max_cells: int) -> Measurements:
        return cls(
            jnp.zeros(capacity, jnp.int32),
            jnp.full(capacity, -1, jnp.int32),
            jnp.zeros((capacity, max_cells), jnp.float32),
            jnp.zeros(capacity, bool),
        )

    def record(self, slot: Array, marginal: Array, cell: Array, target: Array) -> Measurements:
        return Measurements(
            self.marginal.at[slot].set(marginal),
            self.cell.at[slot].set(cell),
            self.target.at[slot].set(target),
            self.filled.at[slot].set(True),
        )
