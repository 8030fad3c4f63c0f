"""The score-based selection rules and what every rule shares (`Rule`).

A rule scores every candidate of a query class (its marginals, or its single counting queries) by
the error of the current synthetic answers against the true ones, and picks k of them with the
exponential mechanism (one draw for k = 1; report-noisy-top-k without replacement for k > 1, or
for k = 1 with `top_k=True`): exact on integer scores by default (noise="discrete"), Gumbel-max
under noise="float".

- `MaxError`: marginals by their largest cell error (the marginal trick; MWEM, PEP, RAP, GEM,
  RAP++'s categorical marginals); sensitivity 1/n.
- `L1Error`: marginals by the sum of their cell errors (AIM's quality score without its weights
  and noise penalty); sensitivity 2/n.
- `QueryError`: single counting queries by their error (MWEM and PEP without the marginal
  trick; RAP++'s threshold queries); sensitivity 1/n.
- `Everything`: every candidate at once, without looking at the data (the baselines).

A rule is built with its settings (`k`, `top_k`) and bound by `jaxdp.adaptive` (`calibrate`): its
scale follows from the round's selection budget and the score sensitivity. A new rule subclasses
`Rule` (decorated with `jaxdp.types.pytree_dataclass`) with its `scores`, the `unit_sensitivity`
of its score (times 1/n) and its `candidates` (`jaxdp.types.MARGINALS` or `QUERIES`).
The true answers are fractions, counts / n with n public (replace-one): a replaced record moves
each fraction by at most 1/n, so each cell error, their maximum, and a query's error move by at
most 1/n, and a marginal's L1 error by at most 2/n (one cell loses the record, one gains it).

Exact scores (noise="discrete"). The built-in rules compute their scores exactly, in int32 grid
steps, and select with `noise.select_grid` / `noise.select_top_k_grid` (no allowance): with
s = GRID_STEPS / unit_sensitivity steps per count (64 for `MaxError` and `QueryError`, 32 for
`L1Error`), a true count c is s c steps (exact; private), the current answer a fraction p is
m = round(s n clip(p, 0, 1)) steps (public: its rounding costs no privacy), and a cell's error is
|s c - m|, maxed or summed per marginal in int32. A replaced record moves c by +-1 in at most two
cells of a marginal (one in a single query), so a cell error moves by at most s, a maximum or a
query's error by at most s <= GRID_STEPS, and a marginal's L1 error by at most 2 s = GRID_STEPS:
exactly GRID_STEPS steps of the declared sensitivity unit_sensitivity / n. (Under add-remove the
same integer argument holds with the answers in counts: one cell moves by 1.) Range: n <=
`GRID_MAX_RECORDS` (2^24 - 1, the factories' limit `mechanisms._common.MAX_RECORDS` less one),
where s c, m and every sum stay below 2^31 (`L1Error` rescales a marginal's public answers when
they sum above 2, which a distribution's never do); `calibrate` refuses larger n.

A rule of your own defines `scores` (float fractions) and, to be exact, `grid_scores` (int32
steps, sensitivity at most GRID_STEPS steps, e.g. from `answers_in_steps` and the integer
helpers here). A rule whose `scores` is defined in a subclass of the class that defines
`grid_scores` (or that has no `grid_scores`) selects on its float scores with
`noise.select` / `noise.select_top_k` and their stated quantisation allowance, which assumes the
float scores as computed move by at most the declared sensitivity (docs/privacy.md).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from jaxdp import noise as noise_module
from jaxdp.accounting import SELECT_PRIMITIVE, TOP_K_PRIMITIVE, PlannedCharge, gumbel_scale
from jaxdp.queries import MarginalWorkload
from jaxdp.types import (
    MARGINALS,
    QUERIES,
    Array,
    Charge,
    Key,
    Neighboring,
    Sensitive,
    pytree_dataclass,
    static_field,
)

GRID_MAX_RECORDS = 2**24 - 1
# steps per count of a score of sensitivity one count (1/n in fractions): GRID_STEPS
GRID_STEPS_PER_COUNT = noise_module.GRID_STEPS


def score_sensitivity(relation: Neighboring, n_records: int) -> float:
    """Sensitivity of a cell's (or a marginal's max-cell) absolute error."""
    return 1.0 if relation is Neighboring.ADD_REMOVE else 1.0 / n_records


def steps_per_count(unit_sensitivity: float) -> int:
    """s = GRID_STEPS / unit_sensitivity, the grid steps per count of a score whose sensitivity is
    unit_sensitivity counts; it must be a whole number for the scores to be exact integers.

    Raises:
        ValueError: GRID_STEPS / unit_sensitivity is not a positive integer.
    """
    ratio = noise_module.GRID_STEPS / float(unit_sensitivity)
    if not (ratio >= 1 and ratio == int(ratio)):
        raise ValueError(
            f"GRID_STEPS / unit_sensitivity = {noise_module.GRID_STEPS} / {unit_sensitivity!r} is not a "
            "whole number: the score cannot be computed exactly on the grid"
        )
    return int(ratio)


def check_grid_records(n_records: int) -> int:
    """n_records, if the exact integer scores fit int32 for it (n <= GRID_MAX_RECORDS).

    Raises:
        ValueError: n_records > GRID_MAX_RECORDS.
    """
    if not 1 <= n_records <= GRID_MAX_RECORDS:
        raise ValueError(
            f"exact selection scores need 1 <= n <= {GRID_MAX_RECORDS:,} records (int32 grid steps), "
            f"got {n_records:,}"
        )
    return n_records


def answers_in_steps(answers: Array, n_records: int, steps: int) -> Array:
    """(n_queries,) int32 round(steps n clip(answers, 0, 1)): public fractions (the current
    synthetic answers) in grid steps, s per count. Public: the rounding costs no privacy."""
    scaled = jnp.clip(jnp.asarray(answers, jnp.float32), 0.0, 1.0) * jnp.float32(steps * n_records)
    return jnp.round(scaled).astype(jnp.int32)


def cell_error_steps(counts: Array, current_steps: Array, steps: int) -> Array:
    """(n_queries,) int32 |s c - m|: each cell's error in grid steps, exact (c true int32 counts,
    m public int32 steps; both in [0, s n] with s n < 2^31)."""
    return jnp.abs(jnp.asarray(counts, jnp.int32) * jnp.int32(steps) - current_steps)


def max_cell_error_steps(
    counts: Array, current_steps: Array, steps: int, workload: MarginalWorkload
) -> Array:
    """(n_marginals,) int32 largest cell error of each marginal in grid steps (exact)."""
    segments = jnp.asarray(workload.marginal_of_query())
    errors = cell_error_steps(counts, current_steps, steps)
    return jax.ops.segment_max(errors, segments, num_segments=len(workload), indices_are_sorted=True)


def l1_error_steps(counts: Array, current_steps: Array, steps: int, workload: MarginalWorkload) -> Array:
    """(n_marginals,) int32 sum of each marginal's cell errors in grid steps (exact; the caller
    keeps s n + sum(m) below 2^31, see `l1_answers_in_steps`)."""
    segments = jnp.asarray(workload.marginal_of_query())
    errors = cell_error_steps(counts, current_steps, steps)
    return jax.ops.segment_sum(errors, segments, num_segments=len(workload), indices_are_sorted=True)


def l1_answers_in_steps(answers: Array, n_records: int, steps: int, workload: MarginalWorkload) -> Array:
    """`answers_in_steps` after scaling down any marginal whose answers sum above 2 (never a
    distribution's), so each marginal's steps sum to at most 2 s n (1 + 2^-20) + cells / 2 and
    its L1 error to at most 3 s n + that slack: below 2^31 for s = 32 and n <= GRID_MAX_RECORDS.
    Public post-processing of the current answers."""
    segments = jnp.asarray(workload.marginal_of_query())
    clipped = jnp.clip(jnp.asarray(answers, jnp.float32), 0.0, 1.0)
    totals = jax.ops.segment_sum(clipped, segments, num_segments=len(workload), indices_are_sorted=True)
    factor = jnp.minimum(1.0, 2.0 / jnp.maximum(totals, 1e-30))[segments]
    return answers_in_steps(clipped * factor, n_records, steps)


def max_cell_errors(true_answers: Array, synthetic_answers: Array, workload: MarginalWorkload) -> Array:
    """(n_marginals,) the largest absolute cell error of each marginal of the workload."""
    errors = jnp.abs(true_answers - synthetic_answers)
    segments = jnp.asarray(workload.marginal_of_query())
    return jax.ops.segment_max(errors, segments, num_segments=len(workload), indices_are_sorted=True)


def l1_errors(true_answers: Array, synthetic_answers: Array, workload: MarginalWorkload) -> Array:
    """(n_marginals,) the L1 distance between the true and synthetic answers of each marginal."""
    errors = jnp.abs(true_answers - synthetic_answers)
    segments = jnp.asarray(workload.marginal_of_query())
    return jax.ops.segment_sum(errors, segments, num_segments=len(workload), indices_are_sorted=True)


class SelectionBudget(NamedTuple):
    """What the builder grants a rule: rho for each of its `rounds` rounds (`per_round`), and
    their sum as the builder computed it (`total`; a rule that spends unevenly over the rounds,
    as DualQuery's, splits this)."""

    per_round: float
    total: float
    rounds: int


@pytree_dataclass
class Rule:
    """What every rule shares: k picks per round, calibration, and the private draw.

    Args:
        k: candidates picked per round (k > 1: report-noisy-top-k without replacement).
        top_k: pick with the one-shot top-k primitive even for k = 1 (RAP++'s Definition 9);
            k > 1 always does.
    """

    k: int = static_field(default=1)
    top_k: bool = static_field(default=False)
    scale: noise_module.SelectionScale | None = None  # data: one program serves every budget
    sensitivity: float | None = static_field(default=None)
    noise: str = static_field(default="discrete")

    candidates: ClassVar[str] = MARGINALS
    unit_sensitivity: ClassVar[float] = 1.0  # in fractions, times 1/n
    # False: each candidate is picked at most once in a run (the builder masks the picked ones)
    repeats: ClassVar[bool] = False
    relations: ClassVar[tuple[Neighboring, ...]] = (Neighboring.REPLACE_ONE,)

    def scores(self, true_answers: Array, current: Array, workload: MarginalWorkload) -> Array:
        """(n_candidates,) the score of each candidate (higher: more worth measuring), from the
        true answers in fractions; it must move by at most unit_sensitivity / n between
        neighbouring datasets."""
        raise NotImplementedError

    def grid_scores(self, counts: Array, current: Array, n_records: int, workload: MarginalWorkload) -> Array:
        """(n_candidates,) int32 scores in grid steps of unit_sensitivity / (GRID_STEPS n), computed
        exactly from the true int32 counts; they must move by at most GRID_STEPS between
        neighbouring datasets. Optional: a rule without it selects on `scores` (float path)."""
        raise NotImplementedError

    @property
    def exact(self) -> bool:
        """True when this rule's `grid_scores` is its score: defined, and by the class that
        defines `scores` or a subclass of it (a subclass overriding only `scores` is not exact)."""
        mro = type(self).__mro__
        grid = next(c for c in mro if "grid_scores" in c.__dict__)
        scores = next(c for c in mro if "scores" in c.__dict__)
        return grid is not Rule and issubclass(grid, scores)

    def n_candidates(self, workload: MarginalWorkload | None, n_queries: int) -> int:
        """How many candidates a class offers: its marginals, its queries, or twice its queries
        (signed)."""
        if self.candidates == MARGINALS:
            return len(workload)
        return n_queries if self.candidates == QUERIES else 2 * n_queries

    def picks(self, n_candidates: int) -> int:
        """Candidates picked per round."""
        del n_candidates
        return self.k

    def charges_per_round(self) -> int:
        """The Charges a round's draw returns (one: k picks are one top-k or one exponential
        mechanism)."""
        return 1

    def calibrate(
        self, budget: SelectionBudget, n_records: int, noise: str
    ) -> tuple[Rule, tuple[PlannedCharge, ...]]:
        """(this rule with its scale fixed to spend `budget.per_round` a round, its planned charges).

        Privacy:
            k exponential mechanisms at epsilon = 2 sensitivity / scale each, k epsilon^2 / 8
            zCDP per round (Cesar & Rogers 2021), `budget.rounds` rounds.
        """
        if noise == "discrete" and self.exact:
            steps_per_count(self.unit_sensitivity)
            check_grid_records(n_records)
        sensitivity = self.unit_sensitivity / n_records
        scale = gumbel_scale(sensitivity, budget.per_round, count=self.k)
        primitive = (TOP_K_PRIMITIVE if self._one_shot else SELECT_PRIMITIVE)[noise]
        charge = PlannedCharge("select", primitive, sensitivity, scale, count=self.k, times=budget.rounds)
        exact_scores = noise == "discrete" and self.exact
        bound_scale = noise_module.selection_scale(scale, sensitivity, noise, exact_scores=exact_scores)
        return dataclasses.replace(self, scale=bound_scale, sensitivity=sensitivity, noise=noise), (charge,)

    @property
    def _one_shot(self) -> bool:
        return self.top_k or self.k > 1

    def __call__(
        self,
        key: Key,
        counts: Sensitive,
        n_records: int,
        current: Array,
        workload: MarginalWorkload | None,
        eligible: Array | None,
        t: Array,
    ) -> tuple[Array, tuple[Charge, ...]]:
        """Pick k eligible candidates with large error.

        Args:
            key: the round's SELECT stream key.
            counts: private (n_queries,) int32 true counts of the class's queries.
            n_records: n (public under replace-one): the answers are counts / n.
            current: (n_queries,) answers of the current synthetic distribution (fractions).
            workload: the marginals (None for a class of single threshold queries).
            eligible: (n_candidates,) bool, e.g. not measured yet; at least k True (None for a
                rule that `repeats`: every candidate, every round).
            t: the round index (this class's).

        Returns:
            ((k,) int32 candidate indices, the Charges of the draws).

        Privacy:
            Reads the true counts through the scores; k exponential mechanisms (see `calibrate`).
            noise="discrete" with an exact rule: int32 grid scores of sensitivity exactly
            GRID_STEPS steps (`noise.grid_exponential`); otherwise float scores with the stated
            quantisation allowance (`noise.discrete_exponential`) or Gumbel-max (float).
        """
        del t  # these scores do not depend on the round
        if self.noise == "discrete" and self.exact:
            scores = counts.map(lambda c: self.grid_scores(c, current, n_records, workload))
            pick_one, pick_k = noise_module.select_grid, noise_module.select_top_k_grid
        else:
            scores = counts.map(lambda c: self.scores(c / n_records, current, workload))
            pick_one, pick_k = noise_module.select, noise_module.select_top_k
        settings = dict(scale=self.scale, sensitivity=self.sensitivity, noise=self.noise, mask=eligible)
        if not self._one_shot:
            chosen, charge = pick_one(key, scores, **settings)
            return chosen[None], (charge,)
        chosen, charge = pick_k(key, scores, k=self.k, **settings)
        return chosen, (charge,)


@pytree_dataclass
class MaxError(Rule):
    """Marginals scored by their largest cell error (the marginal trick; MWEM, PEP, RAP, GEM).

    Args:
        k: marginals picked per round (k > 1: report-noisy-top-k without replacement).
    """

    def scores(self, true_answers, current, workload):
        return max_cell_errors(true_answers, current, workload)

    def grid_scores(self, counts, current, n_records, workload):
        steps = steps_per_count(self.unit_sensitivity)
        return max_cell_error_steps(counts, answers_in_steps(current, n_records, steps), steps, workload)


@pytree_dataclass
class L1Error(Rule):
    """Marginals scored by their L1 error, sum over cells of |true - synthetic| (AIM's quality
    score without its per-marginal weights and noise penalty). Sensitivity 2/n."""

    unit_sensitivity = 2.0

    def scores(self, true_answers, current, workload):
        return l1_errors(true_answers, current, workload)

    def grid_scores(self, counts, current, n_records, workload):
        steps = steps_per_count(self.unit_sensitivity)
        return l1_error_steps(
            counts, l1_answers_in_steps(current, n_records, steps, workload), steps, workload
        )


@pytree_dataclass
class QueryError(Rule):
    """Single counting queries scored by their absolute error (MWEM and PEP without the marginal
    trick)."""

    candidates = QUERIES

    def scores(self, true_answers, current, workload):
        del workload
        return jnp.abs(true_answers - current)

    def grid_scores(self, counts, current, n_records, workload):
        del workload
        steps = steps_per_count(self.unit_sensitivity)
        return cell_error_steps(counts, answers_in_steps(current, n_records, steps), steps)


@pytree_dataclass
class Everything(Rule):
    """Every candidate of the class at once, picked without looking at the data (no privacy
    cost): what the baselines "select" (Independent: the 1-way marginals; Gaussian: the
    workload). It fits one round: each candidate is measured at most once."""

    relations: ClassVar[tuple[Neighboring, ...]] = (Neighboring.REPLACE_ONE, Neighboring.ADD_REMOVE)

    def picks(self, n_candidates: int) -> int:
        return n_candidates

    def charges_per_round(self) -> int:
        return 0

    def calibrate(self, budget, n_records, noise):
        """(this rule, no planned charge): it draws nothing."""
        del budget, n_records
        return dataclasses.replace(self, noise=noise), ()

    def __call__(self, key, counts, n_records, current, workload, eligible, t):
        """(every candidate index, no charge). Reads nothing private."""
        del key, counts, n_records, current, workload, t
        return jnp.arange(eligible.shape[0], dtype=jnp.int32), ()
