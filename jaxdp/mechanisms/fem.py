"""FEM: Follow-the-perturbed-leader with the Exponential Mechanism (Vietri, Tian, Bun, Steinke &
Wu 2020, "New Oracle-Efficient Algorithms for Private Synthetic Data Release").

The same zero-sum game as DualQuery (payoff q(D) - q(x) over the counting queries of a marginal
workload and their negations not-q = 1 - q), with the roles of the players' algorithms swapped:
the query player best-responds privately and the data player runs follow-the-perturbed-leader.
In round t (t = 0, 1, ...):

1. Select (private): one candidate by the exponential mechanism with score q(D) - q(Dhat_t),
   where Dhat_t is the synthetic data so far (the uniform distribution over the records of
   rounds < t; the uniform distribution over the domain in round 0, which is what the data
   player's perturbed leader samples before any query is selected).
2. Update (post-processing): s records x_{t,i} = argmax_x sum_{j<=t} q_j(x) + <onehot(x), eta_i>,
   eta_i ~ Exp(sigma) i.i.d. per one-hot column (`perturbation` = sigma, the mean), i.e. s samples
   of the perturbed leader against every query selected so far (a negated query counts as
   -q(x) + 1). Best responses come from `jaxdp.families.oracle`: exact enumeration, or an
   integer program on domains too large to enumerate.

The output is the multiset of all T s records (the average of the rounds' empirical
distributions); `release` samples rows from it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, selection
from jaxdp import noise as noise_module
from jaxdp.accounting import SELECT_PRIMITIVE, Plan, PlannedCharge, gumbel_scale
from jaxdp.domain import Dataset
from jaxdp.families.oracle import (
    EnumerationOracle,
    MilpOracle,
    make_oracle,
    multiset_answers,
    sample_multiset,
)
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import count_unit, make_plan, private_counts, require_categorical
from jaxdp.queries import (
    MarginalWorkload,
    ProductQueries,
    record_answers,
    workload_queries,
)
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field


class FEMState(NamedTuple):
    """records: (rounds x samples, n_attributes) int32 best responses (round t fills rows
    t s .. t s + s - 1); filled: (rounds x samples,) bool; query_weights: (n_queries,) float32
    the signed number of times each query was selected (+1 for q, -1 for not-q): the leader's
    objective; answer_sums: (n_queries,) float32 sum over the records of each query's answer;
    inexact: () int32 best responses the oracle could not prove optimal (MILP time limit);
    rounds_done."""

    records: Array
    filled: Array
    query_weights: Array
    answer_sums: Array
    inexact: Array
    rounds_done: Array


class FEMInfo(NamedTuple):
    """charges: the round's selection; selected: () int32 candidate id (q < n_queries is query q,
    else the negation of query q - n_queries)."""

    charges: tuple[Charge]
    selected: Array


def _signed_steps(counts: Array, current_steps: Array) -> Array:
    """(2 n_queries,) int32 [64 c - m, m - 64 c]: q(D) - q(Dhat) and its negation in grid steps
    of 1 / (64 n), exact (c, m in [0, 64 n] with n < 2^24). A replaced record moves each count by
    at most 1, so each score moves by at most 64 = GRID_STEPS steps."""
    true = jnp.asarray(counts, jnp.int32) * jnp.int32(selection.GRID_STEPS_PER_COUNT)
    return jnp.concatenate([true - current_steps, current_steps - true])


@pytree_dataclass
class FEM:
    """FEM over a marginal workload; build with `fem`.

    `counts` holds the workload's true int32 counts; scores use fractions (counts / n, n
    public). `noise`: "discrete" (default) selects with the exact exponential mechanism on
    scores computed exactly in int32 steps of 1 / (64 n) (64 c against the public
    round(64 n q(Dhat_t)); `noise.grid_exponential`, no allowance); "float" with Gumbel-max
    (see `jaxdp.noise`).

    Privacy:
        Relation replace-one (n public; answers are fractions). Each of the T rounds runs one
        exponential mechanism (`noise.select`, stream SELECT) over the 2 n_queries
        candidates with score q(D) - q(Dhat_t) and its negation; Dhat_t is post-processing of
        earlier rounds' outputs, and q(D) moves by at most 1/n when one record is replaced, so
        the score sensitivity is 1/n. At scale 2 / (n epsilon_0) a round is
        epsilon_0-bounded-range, hence epsilon_0^2 / 8-zCDP (Cesar & Rogers 2021), and the run
        costs rho = T epsilon_0^2 / 8 with epsilon_0 = sqrt(8 rho / T) (the factory spends the
        whole budget evenly; one planned charge, T times). The perturbations (stream UPDATE),
        best responses and release (stream RELEASE) are post-processing: they touch no
        private value.
    """

    counts: Sensitive
    queries: ProductQueries
    oracle: EnumerationOracle | MilpOracle
    uniform_answers: Array
    workload: MarginalWorkload = static_field()
    n_records: int = static_field()
    rounds: int = static_field()
    samples: int = static_field()
    perturbation: float = static_field()
    select_scale: float = static_field()
    select_sensitivity: float = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    relation: Neighboring = static_field(default=Neighboring.REPLACE_ONE)

    def init(self, key: Key) -> FEMState:
        require_key(key)
        capacity, d = self.rounds * self.samples, len(self.workload.sizes)
        return FEMState(
            records=jnp.zeros((capacity, d), jnp.int32),
            filled=jnp.zeros(capacity, bool),
            query_weights=jnp.zeros(self.workload.n_queries, jnp.float32),
            answer_sums=jnp.zeros(self.workload.n_queries, jnp.float32),
            inexact=jnp.zeros((), jnp.int32),
            rounds_done=jnp.zeros((), jnp.int32),
        )

    def step(self, state: FEMState, key: Key) -> tuple[FEMState, FEMInfo]:
        require_key(key)
        t = state.rounds_done
        count = (t * self.samples).astype(jnp.float32)
        synthetic = jnp.where(t > 0, state.answer_sums / jnp.maximum(count, 1.0), self.uniform_answers)
        settings = dict(scale=self.select_scale, sensitivity=self.select_sensitivity, noise=self.noise)
        if self.noise == "discrete" and self.relation is Neighboring.REPLACE_ONE:
            # exact int32 steps of 1 / (64 n): +-(64 c - m), m = round(64 n synthetic) public
            current = selection.answers_in_steps(synthetic, self.n_records, selection.GRID_STEPS_PER_COUNT)
            steps = self.counts.map(lambda c: _signed_steps(c, current))
            chosen, charge = noise_module.select_grid(stream_key(key, Stream.SELECT), steps, **settings)
        else:
            unit = count_unit(self.relation, self.n_records)
            scores = self.counts.map(lambda c: jnp.concatenate([c * unit - synthetic, synthetic - c * unit]))
            chosen, charge = noise_module.select(stream_key(key, Stream.SELECT), scores, **settings)
        n_queries = self.workload.n_queries
        sign = jnp.where(chosen < n_queries, 1.0, -1.0).astype(jnp.float32)
        query_weights = state.query_weights.at[chosen % n_queries].add(sign)

        width = sum(self.workload.sizes)
        etas = self.perturbation * jax.random.exponential(
            stream_key(key, Stream.UPDATE), (self.samples, width), jnp.float32
        )
        codes, optimal = self.oracle.best_responses(query_weights, etas)
        answers = jax.vmap(record_answers, in_axes=(0, None))(codes, self.queries)
        start = t * self.samples
        new = FEMState(
            records=jax.lax.dynamic_update_slice_in_dim(state.records, codes, start, axis=0),
            filled=jax.lax.dynamic_update_slice_in_dim(
                state.filled, jnp.ones(self.samples, bool), start, axis=0
            ),
            query_weights=query_weights,
            answer_sums=state.answer_sums + answers.sum(axis=0),
            inexact=state.inexact + jnp.sum(~optimal).astype(jnp.int32),
            rounds_done=t + 1,
        )
        return new, FEMInfo((charge,), chosen)

    def synthetic_answers(self, state: FEMState) -> Array:
        """(n_queries,) the workload's answers on the records so far (fractions)."""
        return multiset_answers(state.answer_sums, state.filled)

    def release(self, state: FEMState, key: Key, rows: int | None = None) -> Array:
        """(rows, n_attributes) int32 records drawn uniformly from all best responses (rows
        default n)."""
        require_key(key)
        rows = self.n_records if rows is None else _checks.positive_int(rows, "rows")
        return sample_multiset(key, state.records, state.filled, rows)


def fem(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    samples: int = 20,
    perturbation: float = 1.0,
    oracle: str = "auto",
    time_limit: float | None = None,
    conversion: str = "exact",
    noise: str = "discrete",
) -> FEM:
    """Build FEM.

    Args:
        data: the private records (categorical attributes).
        workload: the marginals whose cells (and their negations) are the query set.
        rounds: T, one selected query and `samples` best-response records per round.
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        samples: s, perturbed-leader records per round (the output has T s records).
        perturbation: sigma, the mean of the Exp(sigma) perturbation of each one-hot column, in
            units of selected queries (a column perturbation of sigma weighs as much as sigma
            satisfied queries).
        oracle: "auto" (enumerate when the domain has at most
            `jaxdp.families.oracle.ENUMERATE_MAX_CELLS` points, else "milp"), "enumerate" or
            "milp" (HiGHS integer program on the host; see `jaxdp.families.oracle.solve_milp`).
        time_limit: seconds per integer program (None: solve to optimality); when reached the
            best feasible record found is used and counted in `state.inexact` (accuracy may
            suffer, privacy does not; such a run depends on machine speed, so it is not
            replayable bit for bit).
        noise: "discrete" (default): the exact exponential mechanism; "float": Gumbel-max,
            faster but not exact (`jaxdp.noise`).

    Raises:
        ValueError: bad sizes or options.

    Privacy:
        See `FEM`: rho-zCDP in total under replace-one.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    _checks.one_of(noise, noise_module.NOISES, "noise")
    require_categorical(data, "fem")
    if workload.sizes != data.domain.sizes:
        raise ValueError("workload was built for a different domain than the data's")
    rounds = _checks.positive_int(rounds, "rounds")
    samples = _checks.positive_int(samples, "samples")
    perturbation = _checks.positive_finite(perturbation, "perturbation")
    oracle_impl = make_oracle(workload, oracle, time_limit=time_limit)

    n = len(data)
    counts = private_counts(data, workload)
    sensitivity = 1.0 / n
    scale = gumbel_scale(sensitivity, plan.rho_budget, rounds)
    select = PlannedCharge("select", SELECT_PRIMITIVE[noise], sensitivity, scale, times=rounds)
    plan = plan.with_charge(select).check()
    uniform = np.concatenate([np.full(c, 1.0 / c) for c in workload.cells]).astype(np.float32)
    return FEM(
        counts=counts,
        queries=workload_queries(workload),
        oracle=oracle_impl,
        uniform_answers=jnp.asarray(uniform),
        workload=workload,
        n_records=n,
        rounds=rounds,
        samples=samples,
        perturbation=perturbation,
        select_scale=scale,
        select_sensitivity=sensitivity,
        plan=plan,
        noise=noise,
    )
