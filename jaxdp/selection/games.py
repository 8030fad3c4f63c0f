"""The query player's selections of the game-based mechanisms, FEM and DualQuery.

Both play the zero-sum game with payoff q(D) - q(x) over a marginal workload's counting queries
and their negations (not-q = 1 - q, so the candidates are the signed queries: q < n_queries is
query q, q >= n_queries the negation of query q - n_queries). The error of the current synthetic
answers p against the true ones, q(D) - p and its negation, scores them:

- `SignedError` (FEM, Vietri et al. 2020): the exponential mechanism on that error each round;
- `SignedErrorSamples` (DualQuery, Gaboardi et al. 2014): s i.i.d. draws from the query player's
  multiplicative weights, Q_t(q) ~ exp(eta t (q(D) - p_t(q))), where p_t is the average of the
  t best responses so far (`jaxdp.families.BestResponses`), so the draw's score grows with t.

Candidates may be picked again in later rounds (`repeats`). Both fit replace-one (n public).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.accounting import SELECT_PRIMITIVE, BudgetExceededError, PlannedCharge, gumbel_scale
from jaxdp.selection.rules import (
    GRID_STEPS_PER_COUNT,
    Rule,
    SelectionBudget,
    answers_in_steps,
    check_grid_records,
)
from jaxdp.types import SIGNED_QUERIES, Array, pytree_dataclass, static_field


def signed_steps(counts: Array, current_steps: Array) -> Array:
    """(2 n_queries,) int32 [64 c - m, m - 64 c]: q(D) - p and its negation in grid steps of
    1 / (64 n), exact (c, m in [0, 64 n] with n < 2^24). A replaced record moves each count by at
    most 1, so each score moves by at most 64 = GRID_STEPS steps."""
    true = jnp.asarray(counts, jnp.int32) * jnp.int32(GRID_STEPS_PER_COUNT)
    return jnp.concatenate([true - current_steps, current_steps - true])


@pytree_dataclass
class SignedError(Rule):
    """FEM's selection: one signed query by the exponential mechanism on q(D) - p(q) (and
    p(q) - q(D) for its negation), p the current synthetic answers; sensitivity 1/n. Under
    noise="discrete" the scores are exact int32 steps of 1 / (64 n) (`signed_steps`)."""

    candidates: ClassVar[str] = SIGNED_QUERIES
    repeats: ClassVar[bool] = True

    def scores(self, true_answers, current, workload):
        del workload
        return jnp.concatenate([true_answers - current, current - true_answers])

    def grid_scores(self, counts, current, n_records, workload):
        del workload
        return signed_steps(counts, answers_in_steps(current, n_records, GRID_STEPS_PER_COUNT))


# Exact scores: rounds must stay below this (t_b and t_b + S - t fit 16 bits; see `sample_steps`).
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


def sample_steps(counts: Array, t: Array, sums: Array, n: int, last: int) -> Array:
    """(2 n_queries,) int32 scores of round t in grid steps of last / (64 n), exactly:
    floor(64 n u / last) for u = +-(t c / n - S), S = sum_{j<t} q(x_j) (an integer <= t, held in
    float32, exact below 2^24), c the true counts.

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


def _blocks(rounds: int, blocks: int) -> list[np.ndarray]:
    """Rounds 1..T-1 split into at most `blocks` runs of consecutive rounds, of near-equal length."""
    return [b for b in np.array_split(np.arange(1, rounds), min(blocks, rounds - 1)) if b.size]


def _block_weights(rounds: int, blocks: int) -> np.ndarray:
    """Each block's rounds x (its last round)^2: its cost in units of s eta^2 / (2 n^2)."""
    return np.array([b.size * float(b[-1]) ** 2 for b in _blocks(rounds, blocks)])


@pytree_dataclass
class SignedErrorSamples(Rule):
    """DualQuery's selection: `k` (s) i.i.d. draws of signed queries from the query player's
    multiplicative weights Q_t(q) ~ exp(eta u_t(q)), u_t(q) = t q(D) - S_t(q), where S_t(q) =
    round(t p_t(q)) is the sum of q over the t best responses so far (p_t, the current answers,
    is their average; rounding and clipping S to [0, t] is post-processing of public answers).

    Args:
        k: s, draws per round (with replacement).
        learning_rate: eta. None (default): the largest eta the budget pays for over the rounds
            (all of the budget is spent). Given: the run's planned cost must fit the budget, and
            what it does not use is left unspent (the paper fixes eta and s and derives T).
        blocks: rounds 1..T-1 are split into at most this many runs of consecutive rounds, each
            charged at the score sensitivity of its last round. Each block is one branch of the
            compiled round (compile time grows with it, about 60 ms a block on a 2-core CPU); the
            extra rho this charges is about 3 / (2 blocks) of the exact cost
            (`accounting_overhead`), and none when blocks >= rounds - 1.

    `noise="discrete"` (default) draws each sample with the exact exponential mechanism on
    scores computed exactly in int32 steps of sensitivity / 64 (`sample_steps`: 64 n u_t / t_b
    floored, in 16-bit-digit integer arithmetic), which samples from Q_t with eta rounded down
    by a relative 2^-12 at most and u_t rounded down to the grid (`noise.grid_exponential`, no
    allowance; rounds <= 2^15); "float" draws by Gumbel-max, from Q_t itself up to float32
    rounding.

    Privacy:
        Relation replace-one (n public; answers are fractions). Round 0 samples from the uniform
        distribution and costs nothing. In round t >= 1 each of the s samples is one exponential
        mechanism (stream SELECT) over the 2 n_queries candidates with score u_t (and -u_t for
        the negation) at scale 1 / eta: it samples from exp(eta u_t(q)) = Q_t (up to the grid,
        above). S_t is post-processing of earlier rounds' outputs, so only q(D) is private and
        it moves by at most 1/n when one record is replaced: u_t has sensitivity t / n. A draw
        with score sensitivity Delta at scale 1/eta is (2 eta Delta)-bounded-range, hence
        (eta Delta)^2 / 2-zCDP (Cesar & Rogers 2021), so the exact cost is
        rho = s eta^2 / (2 n^2) sum_{t=1}^{T-1} t^2. The exponential mechanism needs a host-fixed
        sensitivity, so the rounds 1..T-1 are grouped into at most `blocks` runs of consecutive
        rounds and every draw of a run is charged at the sensitivity of its last round t_b (an
        upper bound: the sampled distribution is exactly Q_t): the plan holds one charge per
        run, (t_b / n, 1 / eta) times s x its length, and the run costs
        s eta^2 / (2 n^2) sum_b length_b t_b^2 <= rho, at most about 3 / (2 blocks) above the
        exact cost (`accounting_overhead`).
    """

    # eta, each block's scale and the overhead follow from the budget: data, so that one program
    # serves every budget (an epsilon grid); the rounds' blocks and sensitivities are settings
    learning_rate: float | None = None
    blocks: int = static_field(default=32)
    sensitivities: tuple[float, ...] = static_field(default=())
    scales: tuple[noise_module.SelectionScale, ...] = ()
    block_of_round: tuple[int, ...] = static_field(default=())
    accounting_overhead: float = 0.0

    candidates: ClassVar[str] = SIGNED_QUERIES
    repeats: ClassVar[bool] = True

    def picks(self, n_candidates: int) -> int:
        del n_candidates
        return _checks.positive_int(self.k, "samples")

    def charges_per_round(self) -> int:
        return self.k  # one exponential mechanism per draw

    def calibrate(
        self, budget: SelectionBudget, n_records: int, noise: str
    ) -> tuple[SignedErrorSamples, tuple[PlannedCharge, ...]]:
        """(this rule with eta and each block's scale fixed, one planned charge per block).

        Raises:
            ValueError: fewer than 2 rounds, more than `MAX_EXACT_ROUNDS` with noise="discrete",
                bad sizes; BudgetExceededError: a given learning rate the budget cannot pay for.
        """
        rounds, samples = budget.rounds, _checks.positive_int(self.k, "samples")
        blocks = _checks.positive_int(self.blocks, "blocks")
        if rounds < 2:
            raise ValueError("rounds must be >= 2 (round 0 samples uniformly and learns nothing private)")
        if noise == "discrete":
            if rounds > MAX_EXACT_ROUNDS:
                raise ValueError(
                    f"rounds must be <= {MAX_EXACT_ROUNDS} with noise='discrete' (exact integer "
                    f"selection scores), got {rounds}"
                )
            check_grid_records(n_records)
        n = n_records
        layout = _blocks(rounds, blocks)
        weights = _block_weights(rounds, blocks)
        unit = samples / (2.0 * n**2)  # rho per unit of eta^2 * (rounds x last round^2)
        if self.learning_rate is None:
            eta = math.sqrt(budget.total / (unit * math.fsum(weights)))
            shares = budget.total * weights / math.fsum(weights)
        else:
            eta = _checks.positive_finite(self.learning_rate, "learning_rate")
            shares = unit * eta**2 * weights
            if math.fsum(shares) > budget.total:
                fits = [
                    r
                    for r in range(2, rounds)
                    if unit * eta**2 * _block_weights(r, blocks).sum() <= budget.total
                ]
                raise BudgetExceededError(
                    f"learning_rate={eta:g} with samples={samples} over rounds={rounds} costs "
                    f"rho={math.fsum(shares):.6g}, more than the budget rho={budget.total:.6g}; "
                    + (f"at most rounds={max(fits)} fit" if fits else "no number of rounds >= 2 fits")
                )
        charges, sensitivities, scales = [], [], []
        block_of_round = [0] * rounds
        for b, (members, share) in enumerate(zip(layout, shares, strict=True)):
            # scores t q(D) - S_t move by t / n <= last / n when one record is replaced
            sensitivity = float(members[-1]) / n
            draws = samples * members.size
            scale = gumbel_scale(sensitivity, float(share), draws)
            label = f"sample rounds {members[0]}-{members[-1]}"
            charges.append(PlannedCharge(label, SELECT_PRIMITIVE[noise], sensitivity, scale, times=draws))
            sensitivities.append(sensitivity)
            scales.append(
                noise_module.selection_scale(scale, sensitivity, noise, exact_scores=noise == "discrete")
            )
            for t in members:
                block_of_round[int(t)] = b + 1
        exact = unit * eta**2 * math.fsum(float(t) ** 2 for t in range(1, rounds))
        planned = math.fsum(c.rho for c in charges)
        bound = dataclasses.replace(
            self,
            learning_rate=np.float64(eta),
            sensitivities=tuple(sensitivities),
            scales=tuple(scales),
            block_of_round=tuple(block_of_round),
            accounting_overhead=np.float64(planned / exact - 1.0),
            noise=noise,
        )
        return bound, tuple(charges)

    def __call__(self, key, counts, n_records, current, workload, eligible, t):
        """s i.i.d. draws from Q_t: uniform in round 0, else exponential mechanisms charged at
        the sensitivity bound of t's block (one compiled branch per block: each branch holds a
        host-fixed scale (as data) and sensitivity, as the exponential mechanism requires, and computes
        its scores on its own grid).

        Returns:
            ((s,) int32 signed query ids, s Charges: count 0 in round 0).

        Privacy:
            Reads the true counts through the scores (see the class docstring).
        """
        del workload, eligible  # every signed query, every round
        n = n_records
        keys = jax.random.split(key, self.k)
        n_candidates = 2 * current.shape[0]
        t = jnp.asarray(t, jnp.int32)
        sums = jnp.clip(jnp.round(current * t.astype(jnp.float32)), 0.0, t.astype(jnp.float32))

        def uniform(keys, counts):
            ids = jax.vmap(lambda k: jax.random.randint(k, (), 0, n_candidates, jnp.int32))(keys)
            none = noise_module.idle(SELECT_PRIMITIVE[self.noise])
            return ids, jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (self.k,)), none)

        def in_block(sensitivity: float, scale: noise_module.SelectionScale):
            settings = dict(scale=scale, sensitivity=sensitivity, noise=self.noise)
            if self.noise == "discrete":
                last = round(sensitivity * n)  # t_b: the block's sensitivity is t_b / n

                def draw(keys, counts):
                    steps = counts.map(lambda c: sample_steps(c, t, sums, n, last))
                    return jax.vmap(lambda k: noise_module.select_grid(k, steps, **settings))(keys)

                return draw

            def draw(keys, counts):
                # eta times these scores is the log-weight eta (t q(D) - S_t) (and its negation)
                tf = t.astype(jnp.float32)
                unit = 1.0 / n
                scores = counts.map(
                    lambda c: jnp.concatenate([tf * (c * unit) - sums, sums - tf * (c * unit)])
                )
                return jax.vmap(lambda k: noise_module.select(k, scores, **settings))(keys)

            return draw

        branches = [uniform] + [
            in_block(sens, scale) for sens, scale in zip(self.sensitivities, self.scales, strict=True)
        ]
        block = jnp.asarray(self.block_of_round, jnp.int32)[t]
        ids, charges = jax.lax.switch(block, branches, keys, counts)
        per_draw = tuple(jax.tree_util.tree_map(lambda x, i=i: x[i], charges) for i in range(self.k))
        return ids, per_draw
