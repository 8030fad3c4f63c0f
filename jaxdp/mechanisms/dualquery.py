"""DualQuery (Gaboardi, Arias, Hsu, Roth & Wu 2014, "Dual Query: Practical Private Query Release
for High Dimensional Data").

A zero-sum game between a query player and a data player with payoff A(x, q) = q(D) - q(x) to
the query player, over the counting queries of a marginal workload and their negations
(not-q = 1 - q, so the query set is closed under negation). The query player runs
multiplicative weights over the 2 n_queries candidates: in round t (t = 0, 1, ...) its
distribution is

    Q_t(q) ~ exp(eta * sum_{j<t} (q(D) - q(x_j))) = exp(eta * t * (q(D) - q(xbar_t))),

with xbar_t the uniform distribution over the data player's records x_0..x_{t-1}. It samples s
queries from Q_t (i.i.d., with replacement: the private step); the data player best-responds with
the single record maximising how many sampled queries it satisfies,
x_t = argmax_x sum_i q_i(x). The output is the multiset {x_0, ..., x_{T-1}} (T records;
`release` samples rows from it). Best responses come from `jaxdp.families.oracle` (exact
enumeration, or an integer program on domains too large to enumerate); ties are broken by a
random linear perturbation of total weight < 1/2, drawn from the round's UPDATE stream, which
keeps an exact maximiser of the integer objective.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.accounting import SELECT_PRIMITIVE, BudgetExceededError, Plan, PlannedCharge, gumbel_scale
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

# Exact scores: rounds must stay below this (t_b and t_b + S - t fit 16 bits; see `grid_scores`).
MAX_EXACT_ROUNDS = 2**15


def _floor_scaled(t: Array, x: Array, m: Array, n: int, last: int) -> Array:
    """int32 floor(64 (t x + n m) / last) - 64 n, exactly, in uint32 words of 16-bit digits.

    For 0 <= x <= n < 2^24, 0 <= m < 2^16, 0 <= t <= last < 2^15, and t x + n m <= 2 n last (so
    the quotient is at most 128 n < 2^31): A = t x + n m is H 2^16 + L with H < 2^26 and
    L < 2^16, 64 A = H' 2^16 + L' with H' < 2^32, and the quotient by last is
    (H' // last) 2^16 + ((H' % last) 2^16 + L') // last, every intermediate below 2^32.
    """
    u = jnp.uint32
    t, x, m = t.astype(u), x.astype(u), m.astype(u)
    low16 = u(0xFFFF)
    x1, x0, n1, n0 = x >> 16, x & low16, u(n >> 16), u(n & 0xFFFF)
    tx0, nm0 = t * x0, n0 * m  # each < 2^32
    high = t * x1 + n1 * m + (tx0 >> 16) + (nm0 >> 16)
    low = (tx0 & low16) + (nm0 & low16)
    high, low = high + (low >> 16), low & low16  # A = high 2^16 + low, high < 2^26
    high, low = (high << 6) + ((low << 6) >> 16), (low << 6) & low16  # 64 A
    divisor = u(last)
    quotient = (high // divisor << 16) + ((high % divisor) << 16 | low) // divisor
    return quotient.astype(jnp.int32) - jnp.int32(64 * n)


def grid_scores(counts: Array, t: Array, sums: Array, n: int, last: int) -> Array:
    """(2 n_queries,) int32 scores of round t in grid steps of last / (64 n), exactly:
    floor(64 n u / last) for u = +-(t c / n - S), S = sum_{j<t} q(x_j) (an integer <= t; `sums`
    holds it in float32, exact below 2^24), c the true counts.

    Privacy:
        With A+ = t c + n (last - S) and A- = t (n - c) + n (last + S - t), both >= 0 because
        S <= t <= last and c <= n, the scores are floor(64 A / last) - 64 n. A replaced record
        moves c by at most 1, so A by at most t <= last, 64 A by at most 64 last and its floor
        quotient by last by at most 64 = GRID_STEPS steps: the declared sensitivity last / n,
        exactly.
    """
    s = sums.astype(jnp.int32)  # exact: whole numbers <= t
    c = jnp.asarray(counts, jnp.int32)
    t = jnp.asarray(t, jnp.int32)
    plus = _floor_scaled(t, c, last - s, n, last)
    minus = _floor_scaled(t, n - c, last + s - t, n, last)
    return jnp.concatenate([plus, minus])


class DualQueryState(NamedTuple):
    """records: (rounds, n_attributes) int32 best responses (row t from round t); filled:
    (rounds,) bool; answer_sums: (n_queries,) float32 sum over the records of each query's answer;
    inexact: () int32 best responses the oracle could not prove optimal (MILP time limit);
    rounds_done."""

    records: Array
    filled: Array
    answer_sums: Array
    inexact: Array
    rounds_done: Array


class DualQueryInfo(NamedTuple):
    """charges: one per sampled query (count 0 in round 0, whose distribution is uniform and
    data-independent); sampled: (samples,) int32 candidate ids (q < n_queries is query q, else
    the negation of query q - n_queries)."""

    charges: tuple[Charge, ...]
    sampled: Array


def _no_charge(noise: str) -> Charge:
    """A placeholder for a primitive that did not run (count 0: the ledger skips it)."""
    return Charge(
        primitive=jnp.asarray(noise_module.PRIMITIVES.index(SELECT_PRIMITIVE[noise]), jnp.int32),
        sensitivity=jnp.zeros((), jnp.float32),
        scale=jnp.zeros((), jnp.float32),
        count=jnp.zeros((), jnp.int32),
    )


@pytree_dataclass
class DualQuery:
    """DualQuery over a marginal workload; build with `dualquery`.

    `counts` holds the workload's true int32 counts; scores use fractions (counts / n, n
    public). `noise`: "discrete" (default) draws each sample with the exact exponential
    mechanism on scores computed exactly in int32 steps of sensitivity / 64 (`grid_scores`:
    64 n u_t / t_b floored, in 16-bit-digit integer arithmetic), which samples from Q_t with
    eta rounded down by a relative 2^-12 at most and u_t rounded down to the grid
    (`noise.grid_exponential`, no allowance; rounds <= 2^15); "float" draws by Gumbel-max, from
    Q_t itself up to float32 rounding.

    Privacy:
        Relation replace-one (n public; answers are fractions). Round 0 samples from the uniform
        distribution and costs nothing. In round t >= 1 each of the s samples is one exponential
        mechanism (`noise.select`, stream SELECT) over the 2 n_queries candidates with score
        u_t(q) = t q(D) - sum_{j<t} q(x_j) (and -u_t(q) for the negation) at scale 1 / eta, i.e.
        it samples from exp(eta u_t(q)) = Q_t (up to the grid, above). The records x_j are
        post-processing of earlier rounds' outputs, so only q(D) is private and it moves by at
        most 1/n when one record is replaced: u_t has sensitivity t / n (the log-weights
        eta u_t have sensitivity eta t / n). A draw with score sensitivity Delta at scale 1/eta
        is (2 eta Delta)-bounded-range, hence (eta Delta)^2 / 2-zCDP (Cesar & Rogers 2021), so
        the exact cost is rho = s eta^2 / (2 n^2) sum_{t=1}^{T-1} t^2. `noise.select` needs
        a host-fixed sensitivity, so the rounds 1..T-1 are grouped into at most `blocks` runs
        of consecutive rounds and every draw of a run is charged at the sensitivity of its last
        round t_b (an upper bound: the sampled distribution is exactly Q_t): the plan holds one
        charge per run, (t_b / n, 1 / eta) times s x its length, and the run costs
        s eta^2 / (2 n^2) sum_b length_b t_b^2 <= rho, at most about 3 / (2 blocks) above the
        exact cost (`accounting_overhead`; zero when every round is its own block). Best
        responses, tie-breaking (stream UPDATE) and release (stream RELEASE) are
        post-processing.
    """

    counts: Sensitive
    queries: ProductQueries
    oracle: EnumerationOracle | MilpOracle
    workload: MarginalWorkload = static_field()
    n_records: int = static_field()
    rounds: int = static_field()
    samples: int = static_field()
    learning_rate: float = static_field()
    sensitivities: tuple[float, ...] = static_field()
    scales: tuple[float, ...] = static_field()
    block_of_round: tuple[int, ...] = static_field()
    accounting_overhead: float = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    relation: Neighboring = static_field(default=Neighboring.REPLACE_ONE)

    def init(self, key: Key) -> DualQueryState:
        require_key(key)
        d = len(self.workload.sizes)
        return DualQueryState(
            records=jnp.zeros((self.rounds, d), jnp.int32),
            filled=jnp.zeros(self.rounds, bool),
            answer_sums=jnp.zeros(self.workload.n_queries, jnp.float32),
            inexact=jnp.zeros((), jnp.int32),
            rounds_done=jnp.zeros((), jnp.int32),
        )

    def _sample(self, key: Key, t: Array, sums: Array) -> tuple[Array, tuple[Charge, ...]]:
        """s i.i.d. draws from Q_t: uniform in round 0, else exponential mechanisms charged at
        the sensitivity bound of t's block (one compiled branch per block: each branch holds a
        host-fixed scale and sensitivity, as `noise.select` requires, and computes its scores on
        its own grid)."""
        keys = jax.random.split(key, self.samples)
        n_candidates = 2 * self.workload.n_queries
        n = self.n_records

        def uniform(keys, counts):
            ids = jax.vmap(lambda k: jax.random.randint(k, (), 0, n_candidates, jnp.int32))(keys)
            no_charge = _no_charge(self.noise)
            return ids, jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (self.samples,)), no_charge)

        def in_block(sensitivity: float, scale: float):
            settings = dict(scale=scale, sensitivity=sensitivity, noise=self.noise)
            if self.noise == "discrete" and self.relation is Neighboring.REPLACE_ONE:
                last = round(sensitivity * n)  # t_b: the block's sensitivity is t_b / n

                def draw(keys, counts):
                    steps = counts.map(lambda c: grid_scores(c, t, sums, n, last))
                    return jax.vmap(lambda k: noise_module.select_grid(k, steps, **settings))(keys)

                return draw

            def draw(keys, counts):
                # eta times these scores is the log-weight eta sum_{j<t} (q(D) - q(x_j)) (and its
                # negation)
                tf = t.astype(jnp.float32)
                unit = count_unit(self.relation, n)
                scores = counts.map(
                    lambda c: jnp.concatenate([tf * (c * unit) - sums, sums - tf * (c * unit)])
                )
                return jax.vmap(lambda k: noise_module.select(k, scores, **settings))(keys)

            return draw

        branches = [uniform] + [
            in_block(sens, scale) for sens, scale in zip(self.sensitivities, self.scales, strict=True)
        ]
        block = jnp.asarray(self.block_of_round, jnp.int32)[t]
        ids, charges = jax.lax.switch(block, branches, keys, self.counts)
        per_draw = tuple(jax.tree_util.tree_map(lambda x, i=i: x[i], charges) for i in range(self.samples))
        return ids, per_draw

    def step(self, state: DualQueryState, key: Key) -> tuple[DualQueryState, DualQueryInfo]:
        require_key(key)
        t = state.rounds_done
        sums = state.answer_sums
        sampled, charges = self._sample(stream_key(key, Stream.SELECT), t, sums)

        n_queries = self.workload.n_queries
        sign = jnp.where(sampled < n_queries, 1.0, -1.0).astype(jnp.float32)
        weights = jnp.zeros(n_queries, jnp.float32).at[sampled % n_queries].add(sign)
        width = sum(self.workload.sizes)
        # ties: a random perturbation of total < 1/2 keeps a maximiser of the integer objective
        tie_break = jax.random.uniform(
            stream_key(key, Stream.UPDATE), (1, width), jnp.float32, 0.0, 0.5 / len(self.workload.sizes)
        )
        codes, optimal = self.oracle.best_responses(weights, tie_break)
        record = codes[0]
        new = DualQueryState(
            records=state.records.at[t].set(record),
            filled=state.filled.at[t].set(True),
            answer_sums=state.answer_sums + record_answers(record, self.queries),
            inexact=state.inexact + jnp.sum(~optimal).astype(jnp.int32),
            rounds_done=t + 1,
        )
        return new, DualQueryInfo(charges, sampled)

    def synthetic_answers(self, state: DualQueryState) -> Array:
        """(n_queries,) the workload's answers on the records so far (fractions)."""
        return multiset_answers(state.answer_sums, state.filled)

    def release(self, state: DualQueryState, key: Key, rows: int | None = None) -> Array:
        """(rows, n_attributes) int32 records drawn uniformly from the best responses (rows
        default n)."""
        require_key(key)
        rows = self.n_records if rows is None else _checks.positive_int(rows, "rows")
        return sample_multiset(key, state.records, state.filled, rows)


def _blocks(rounds: int, blocks: int) -> list[np.ndarray]:
    """Rounds 1..T-1 split into at most `blocks` runs of consecutive rounds, of near-equal length."""
    return [b for b in np.array_split(np.arange(1, rounds), min(blocks, rounds - 1)) if b.size]


def _block_weights(rounds: int, blocks: int) -> np.ndarray:
    """Each block's rounds x (its last round)^2: its cost in units of s eta^2 / (2 n^2)."""
    return np.array([b.size * float(b[-1]) ** 2 for b in _blocks(rounds, blocks)])


def dualquery(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    samples: int = 50,
    learning_rate: float | None = None,
    blocks: int = 32,
    oracle: str = "auto",
    time_limit: float | None = None,
    conversion: str = "exact",
    noise: str = "discrete",
) -> DualQuery:
    """Build DualQuery.

    Args:
        data: the private records (categorical attributes).
        workload: the marginals whose cells (and their negations) are the query set.
        rounds: T >= 2, one best-response record per round (the output has T records).
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        samples: s, queries sampled from the query player's distribution per round.
        learning_rate: eta. None (default): the largest eta the budget pays for over `rounds`
            rounds (all of the budget is spent). Given: the run's planned cost (see `DualQuery`)
            must fit the budget, and what it does not use is left unspent (the paper's
            parametrisation fixes eta and s and derives T).
        blocks: rounds 1..T-1 are split into at most this many runs of consecutive rounds, each
            charged at the score sensitivity of its last round (see `DualQuery`, Privacy). Each
            block is one branch of the compiled round (compile time grows with it, about 60 ms a
            block on a 2-core CPU); the extra rho this charges is about 3 / (2 blocks) of the
            exact cost (`accounting_overhead`), and none when blocks >= rounds - 1.
        oracle: "auto" (enumerate when the domain has at most
            `jaxdp.families.oracle.ENUMERATE_MAX_CELLS` points, else "milp"), "enumerate" or
            "milp" (HiGHS integer program on the host; see `jaxdp.families.oracle.solve_milp`).
        time_limit: seconds per integer program (None: solve to optimality); when reached the
            best feasible record found is used and counted in `state.inexact` (accuracy may
            suffer, privacy does not; such a run depends on machine speed, so it is not
            replayable bit for bit).
        noise: "discrete" (default): exact exponential mechanisms; "float": Gumbel-max, faster
            but not exact (`jaxdp.noise`).

    Raises:
        ValueError: rounds < 2 (or above `MAX_EXACT_ROUNDS` = 2^15 with noise="discrete", the
            range of the exact integer scores), bad sizes or options.
        BudgetExceededError: a given learning rate that the budget cannot pay for.

    Privacy:
        See `DualQuery`: at most rho-zCDP in total under replace-one.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    _checks.one_of(noise, noise_module.NOISES, "noise")
    require_categorical(data, "dualquery")
    if workload.sizes != data.domain.sizes:
        raise ValueError("workload was built for a different domain than the data's")
    rounds = _checks.positive_int(rounds, "rounds")
    if rounds < 2:
        raise ValueError("rounds must be >= 2 (round 0 samples uniformly and learns nothing private)")
    samples = _checks.positive_int(samples, "samples")
    blocks = _checks.positive_int(blocks, "blocks")
    if noise == "discrete" and rounds > MAX_EXACT_ROUNDS:
        raise ValueError(
            f"rounds must be <= {MAX_EXACT_ROUNDS} with noise='discrete' (exact integer selection "
            f"scores), got {rounds}"
        )
    oracle_impl = make_oracle(workload, oracle, time_limit=time_limit)

    n = len(data)
    counts = private_counts(data, workload)
    layout = _blocks(rounds, blocks)
    weights = _block_weights(rounds, blocks)
    unit = samples / (2.0 * n**2)  # rho per unit of eta^2 * (rounds x last round^2)
    if learning_rate is None:
        eta = math.sqrt(plan.rho_budget / (unit * math.fsum(weights)))
        shares = plan.rho_budget * weights / math.fsum(weights)
    else:
        eta = _checks.positive_finite(learning_rate, "learning_rate")
        shares = unit * eta**2 * weights
        if math.fsum(shares) > plan.rho_budget:
            fits = [
                r
                for r in range(2, rounds)
                if unit * eta**2 * _block_weights(r, blocks).sum() <= plan.rho_budget
            ]
            raise BudgetExceededError(
                f"learning_rate={eta:g} with samples={samples} over rounds={rounds} costs "
                f"rho={math.fsum(shares):.6g}, more than the budget rho={plan.rho_budget:.6g}; "
                + (f"at most rounds={max(fits)} fit" if fits else "no number of rounds >= 2 fits")
            )
    sensitivities, scales = [], []
    block_of_round = [0] * rounds
    for b, (members, share) in enumerate(zip(layout, shares, strict=True)):
        # scores t q(D) - sum_j q(x_j) move by t / n <= last / n when one record is replaced
        sensitivity = float(members[-1]) / n
        draws = samples * members.size
        scale = gumbel_scale(sensitivity, float(share), draws)
        charge = PlannedCharge(
            f"sample rounds {members[0]}-{members[-1]}",
            SELECT_PRIMITIVE[noise],
            sensitivity,
            scale,
            times=draws,
        )
        plan = plan.with_charge(charge)
        sensitivities.append(sensitivity)
        scales.append(scale)
        for t in members:
            block_of_round[int(t)] = b + 1
    plan = plan.check()
    exact = unit * eta**2 * math.fsum(float(t) ** 2 for t in range(1, rounds))
    return DualQuery(
        counts=counts,
        queries=workload_queries(workload),
        oracle=oracle_impl,
        workload=workload,
        n_records=n,
        rounds=rounds,
        samples=samples,
        learning_rate=float(eta),
        sensitivities=tuple(sensitivities),
        scales=tuple(scales),
        block_of_round=tuple(block_of_round),
        accounting_overhead=plan.rho_planned / exact - 1.0,
        plan=plan,
        noise=noise,
    )
