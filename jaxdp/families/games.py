"""The data player's families of the game-based mechanisms: multisets of best responses.

DualQuery and FEM play the zero-sum game with payoff q(D) - q(x) over a workload's counting
queries and their negations; the query player's picks (`jaxdp.selection.SignedErrorSamples`,
`SignedError`) are all the data player sees, and it answers with best-response records from an
oracle (`jaxdp.families.oracle`: exact enumeration, or an integer program on domains too large to
enumerate). The synthetic data is the multiset of every best response so far.

- `BestResponses` (DualQuery): one record a round, the record satisfying the most of the round's
  sampled queries (ties broken by a random linear perturbation of total weight < 1/2, which keeps
  an exact maximiser of the integer objective).
- `PerturbedLeader` (FEM): `samples` records a round, each the follow-the-perturbed-leader
  response to every query picked so far, perturbed by Exp(perturbation) noise on each one-hot
  column.

Post-processing only: the picks are released, and the perturbations are public randomness (stream
UPDATE).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.families.base import ClassShape, Family, Measured, single_class
from jaxdp.families.oracle import (
    EnumerationOracle,
    MilpOracle,
    make_oracle,
    multiset_answers,
    sample_multiset,
)
from jaxdp.queries import MarginalWorkload, ProductQueries, record_answers, workload_queries
from jaxdp.types import SIGNED_QUERIES, Array, Key, pytree_dataclass, static_field


class MultisetModel(NamedTuple):
    """records: (capacity, n_attributes) int32 best responses in the order found; filled:
    (capacity,) bool; query_weights: (n_queries,) float32 the signed count of picks of each query
    (+1 for q, -1 for not-q) that the next best responses answer; answer_sums: (n_queries,)
    float32 each query summed over the records; inexact: () int32 best responses the oracle
    could not prove optimal (MILP time limit)."""

    records: Array
    filled: Array
    query_weights: Array
    answer_sums: Array
    inexact: Array


@pytree_dataclass
class _Multiset(Family):
    """Best-response records from an oracle, `per_round` a round (see the module docstring).

    Args:
        oracle: "auto" (enumerate when the domain has at most
            `jaxdp.families.oracle.ENUMERATE_MAX_CELLS` points, else "milp"), "enumerate" or
            "milp" (HiGHS integer program on the host; see `jaxdp.families.oracle.solve_milp`).
        time_limit: seconds per integer program (None: solve to optimality); when reached the
            best feasible record found is used and counted in `inexact` (accuracy may suffer,
            privacy does not; such a run depends on machine speed, so it is not replayable bit
            for bit).
    """

    oracle: str = static_field(default="auto")
    time_limit: float | None = static_field(default=None)
    solver: EnumerationOracle | MilpOracle | None = None
    queries: ProductQueries | None = None
    workload: MarginalWorkload | None = static_field(default=None)
    capacity: int = static_field(default=0)

    needs_measurements: ClassVar[bool] = False
    candidates: ClassVar[tuple[str, ...]] = (SIGNED_QUERIES,)

    def bind(self, classes: tuple[ClassShape, ...], *, domain, public, n_records):
        shape = single_class(classes, type(self).__name__)
        if public is not None:
            raise ValueError(f"the {type(self).__name__} family uses no public data")
        workload = shape.queries
        return dataclasses.replace(
            self,
            solver=make_oracle(workload, self.oracle, time_limit=self.time_limit),
            queries=workload_queries(workload),
            workload=workload,
            capacity=shape.rounds * self._records_per_round(),
        )

    def _records_per_round(self) -> int:
        raise NotImplementedError

    def init(self, key: Key) -> MultisetModel:
        del key  # nothing random before the first round
        d, n_queries = len(self.workload.sizes), self.workload.n_queries
        return MultisetModel(
            records=jnp.zeros((self.capacity, d), jnp.int32),
            filled=jnp.zeros(self.capacity, bool),
            query_weights=jnp.zeros(n_queries, jnp.float32),
            answer_sums=jnp.zeros(n_queries, jnp.float32),
            inexact=jnp.zeros((), jnp.int32),
        )

    def _signed(self, chosen: Array) -> tuple[Array, Array]:
        """(query ids, signs +-1) of signed picks."""
        n_queries = self.workload.n_queries
        sign = jnp.where(chosen < n_queries, 1.0, -1.0).astype(jnp.float32)
        return chosen % n_queries, sign

    def _add(self, model: MultisetModel, t: Array, codes: Array, optimal: Array) -> MultisetModel:
        """The round's best responses in slots t r .. t r + r - 1 (r records a round)."""
        answers = jax.vmap(record_answers, in_axes=(0, None))(codes, self.queries)
        start = t * codes.shape[0]
        return model._replace(
            records=jax.lax.dynamic_update_slice_in_dim(model.records, codes, start, axis=0),
            filled=jax.lax.dynamic_update_slice_in_dim(
                model.filled, jnp.ones(codes.shape[0], bool), start, axis=0
            ),
            answer_sums=model.answer_sums + answers.sum(axis=0),
            inexact=model.inexact + jnp.sum(~optimal).astype(jnp.int32),
        )

    def answers(self, model: MultisetModel) -> Array:
        """(n_queries,) the workload's answers on the records so far (fractions)."""
        return multiset_answers(model.answer_sums, model.filled)

    output_answers = answers

    def release(self, model: MultisetModel, key: Key, rows: int) -> Array:
        """(rows, n_attributes) int32 records drawn uniformly from the best responses."""
        return sample_multiset(key, model.records, model.filled, rows)


@pytree_dataclass
class BestResponses(_Multiset):
    """DualQuery's data player: each round, the one record x_t = argmax_x sum_i q_i(x) over the
    round's s sampled signed queries (a negated query counts as 1 - q(x)); ties broken by a
    random perturbation of total weight < 1/2 (stream UPDATE). Settings: see `_Multiset`."""

    def _records_per_round(self) -> int:
        return 1

    def record(self, model: MultisetModel, measured: Measured, current: Array, r: Array) -> MultisetModel:
        """The round's sampled queries, as the weights the next best response answers."""
        del current, r
        ids, sign = self._signed(measured.chosen)
        return model._replace(query_weights=jnp.zeros_like(model.query_weights).at[ids].add(sign))

    def update(self, model: MultisetModel, t: Array, key: Key, last: Array | bool):
        del last
        width = sum(self.workload.sizes)
        tie_break = jax.random.uniform(key, (1, width), jnp.float32, 0.0, 0.5 / len(self.workload.sizes))
        codes, optimal = self.solver.best_responses(model.query_weights, tie_break)
        return self._add(model, t, codes[:1], optimal), jnp.zeros((), jnp.int32)


@pytree_dataclass
class PerturbedLeader(_Multiset):
    """FEM's data player: each round, `samples` records
    x = argmax_x sum_{j<=t} q_j(x) + <onehot(x), eta>, eta ~ Exp(perturbation) i.i.d. per one-hot
    column (stream UPDATE), against every query picked so far. Before the first pick its answers
    are the uniform distribution's, what the perturbed leader samples then.

    Args:
        samples: s, records per round (the output has T s records).
        perturbation: the mean of each column's Exp perturbation, in units of picked queries.
        oracle, time_limit: see `_Multiset`.
    """

    samples: int = static_field(default=20)
    perturbation: float = static_field(default=1.0)
    uniform_answers: Array | None = None

    def bind(self, classes, *, domain, public, n_records):
        _checks.positive_int(self.samples, "samples")
        _checks.positive_finite(self.perturbation, "perturbation")
        bound = super().bind(classes, domain=domain, public=public, n_records=n_records)
        cells = bound.workload.cells
        uniform = np.concatenate([np.full(c, 1.0 / c) for c in cells]).astype(np.float32)
        return dataclasses.replace(bound, uniform_answers=jnp.asarray(uniform))

    def _records_per_round(self) -> int:
        return self.samples

    def answers(self, model: MultisetModel) -> Array:
        """(n_queries,) the answers of the records so far, or the uniform distribution's."""
        count = jnp.sum(model.filled).astype(jnp.float32)
        return jnp.where(count > 0, model.answer_sums / jnp.maximum(count, 1.0), self.uniform_answers)

    def record(self, model: MultisetModel, measured: Measured, current: Array, r: Array) -> MultisetModel:
        """The round's pick added to the leader's objective."""
        del current, r
        ids, sign = self._signed(measured.chosen)
        return model._replace(query_weights=model.query_weights.at[ids].add(sign))

    def update(self, model: MultisetModel, t: Array, key: Key, last: Array | bool):
        del last
        width = sum(self.workload.sizes)
        etas = self.perturbation * jax.random.exponential(key, (self.samples, width), jnp.float32)
        codes, optimal = self.solver.best_responses(model.query_weights, etas)
        return self._add(model, t, codes, optimal), jnp.zeros((), jnp.int32)
