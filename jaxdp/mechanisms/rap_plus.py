"""RAP++ (Vietri et al. 2022): relaxed adaptive projection over mixed categorical/numeric data.

Numeric columns are never binned: relaxed rows carry one real value per numeric column (in the
normalised [0, 1] of the declared public bounds) beside per-attribute softmax blocks
(`jaxdp.families.mixed.MixedRows`). The mechanism (Algorithm 2) runs rounds over several query
classes, each with its own candidate set, rounds, queries per round and budget weight:

- `categorical_marginals`: marginals over categorical attributes (the paper's CM class when each
  marginal holds the target); selected whole, by their largest cell error, as in RAP;
- `mixed_marginals`: Definition 3 queries 1{x_C = y} prod_j 1{x_j <= tau_j};
- `linear_thresholds`: Definition 4 queries 1{<theta, x_R> <= tau and x_i = y}.

Each round belongs to one class (rounds of different classes interleaved evenly): report-noisy-
top-K (Definition 9; K exponential mechanisms without replacement) over the class's not-yet-
measured candidates, one Gaussian measurement of the K picks' counts (every query here counts
records; exact discrete Gaussian noise by default), then the projection of Algorithm 1 on every measurement
so far: Adam on the squared error of the tempered-sigmoid answers (Definitions 11-12) at
sigma_1, until the gradient norm falls below gamma (or a step cap), then sigma doubles; the
iterate kept is the best under the exact (hard-threshold) loss. With only categorical classes
there is nothing to anneal and one stage runs: RAP with softmax rows.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, noise, selection
from jaxdp.accounting import MEASURE_PRIMITIVE, TOP_K_PRIMITIVE, Plan, PlannedCharge, gumbel_scale
from jaxdp.domain import DataError, Dataset
from jaxdp.families.fit import fit
from jaxdp.families.histogram import MarginalPadding
from jaxdp.families.mixed import MixedRows
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import (
    count_sigma,
    count_unit,
    make_plan,
    private_codes,
    private_counts,
    round_shares,
)
from jaxdp.noise import NOISES
from jaxdp.queries import (
    LinearThresholdQueries,
    MarginalWorkload,
    MixedMarginalQueries,
    RandomLinearThresholds,
    RelaxedPlan,
    linear_threshold_answers,
    mixed_marginal_answers,
    relaxed_linear_threshold_answers,
    relaxed_marginals,
    relaxed_mixed_marginal_answers,
    relaxed_plan,
)
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field

KINDS = ("categorical_marginals", "mixed_marginals", "linear_thresholds")


@dataclasses.dataclass(frozen=True)
class QueryClass:
    """One query class of RAP++ (build with `categorical_marginals`, `mixed_marginals` or
    `linear_thresholds`): its candidates, rounds, picks per round and share of the budget."""

    kind: str
    queries: Any
    rounds: int
    per_round: int
    weight: float = 1.0


def categorical_marginals(
    workload: MarginalWorkload, *, rounds: int, per_round: int = 1, weight: float = 1.0
) -> QueryClass:
    """Marginals over the categorical attributes, selected whole (score: largest cell error)."""
    return QueryClass("categorical_marginals", workload, rounds, per_round, weight)


def mixed_marginals(
    queries: MixedMarginalQueries, *, rounds: int, per_round: int = 10, weight: float = 1.0
) -> QueryClass:
    """Mixed-marginal queries (Definition 3), selected one query at a time (score: |error|)."""
    return QueryClass("mixed_marginals", queries, rounds, per_round, weight)


def linear_thresholds(
    queries: LinearThresholdQueries | RandomLinearThresholds,
    *,
    rounds: int,
    per_round: int = 10,
    weight: float = 1.0,
) -> QueryClass:
    """Class-conditional linear threshold queries (Definition 4); a key-defined family is
    materialised (its candidates are selected by index)."""
    return QueryClass("linear_thresholds", queries, rounds, per_round, weight)


class ClassState(NamedTuple):
    """One class's measurements. Marginals: targets/measured over all cells, ids unused.
    Thresholds: targets/measured/ids over (rounds * per_round) slots filled round by round.
    eligible: candidates (marginals or queries) not measured yet."""

    targets: Array
    measured: Array
    ids: Array
    eligible: Array


class RapPlusState(NamedTuple):
    """params: (logits, numeric) of the relaxed rows; classes: one ClassState per class."""

    params: tuple[Array, Array]
    classes: tuple[ClassState, ...]
    rounds_done: Array


class RapPlusInfo(NamedTuple):
    """charges: (selection, measurement); query_class: the class of the round; inner_steps:
    Adam steps of the projection; best_stage: annealing stage of the kept iterate (-1: none
    improved on the start)."""

    charges: tuple[Charge, Charge]
    query_class: Array
    inner_steps: Array
    best_stage: Array


# Each class scores its candidates with a selection rule of `jaxdp.selection` (sensitivity 1/n in
# fractions, 64 grid steps per count): marginals by their largest cell error, threshold queries
# by their error.
MARGINAL_RULE = selection.MaxError()
QUERY_RULE = selection.QueryError()


def _select_top_k(
    key: Key, true: Sensitive, rule: selection.Rule, current: Array, workload, query_class, eligible: Array
):
    """The class's top-K selection by `rule`'s scores of sensitivity 1/n (fractions): under
    noise="discrete" on its `grid_scores`, int32 steps of 1 / (64 n) computed exactly (64 c
    against the public round(64 n p); a replaced record moves each count by at most 1, so each
    cell's or query's error and a maximum of them move by at most 64 steps: `noise.grid_top_k`,
    no allowance; n < 2^24 from `private_codes` keeps 64 n in int32); under "float" Gumbel top-K
    on its `scores`, fractions."""
    n = query_class.n_records
    settings = dict(
        k=query_class.per_round,
        scale=query_class.select_scale,
        sensitivity=query_class.select_sensitivity,
        noise=query_class.noise,
        mask=eligible,
    )
    if query_class.noise == "discrete":
        steps = true.map(lambda c: rule.grid_scores(c, current, n, workload))
        return noise.select_top_k_grid(key, steps, **settings)
    return noise.select_top_k(key, true.map(lambda c: rule.scores(c / n, current, workload)), **settings)


@pytree_dataclass
class _MarginalClass:
    """Categorical marginals: RAP's selection and measurement of whole marginals (true answers:
    int32 cell counts; sigma and measure_sensitivity in counts)."""

    plan: RelaxedPlan
    padding: MarginalPadding
    workload: MarginalWorkload = static_field()
    per_round: int = static_field()
    select_scale: float = static_field()
    select_sensitivity: float = static_field()
    sigma: float = static_field()
    measure_sensitivity: float = static_field()
    n_records: int = static_field()
    noise: str = static_field()

    def init_state(self) -> ClassState:
        n = self.workload.n_queries
        return ClassState(
            jnp.zeros(n, jnp.float32),
            jnp.zeros(n, bool),
            jnp.zeros(0, jnp.int32),
            jnp.ones(len(self.workload), bool),
        )

    def answers(self, probs: Array, numeric: Array, sigma: Array | None) -> Array:
        del numeric, sigma  # no thresholds: relaxed answers are exact products
        return relaxed_marginals(probs, self.plan)

    def round(self, key, true: Sensitive, probs, numeric, state: ClassState, r):
        """Select `per_round` marginals by their largest cell error (fractions) and measure
        their counts.

        Privacy:
            Reads the true counts: `per_round` exponential mechanisms without replacement, then
            one Gaussian measurement; the noisy counts are divided by n afterwards.
        """
        del r
        current = self.answers(probs, numeric, None)
        chosen, select_charge = _select_top_k(
            stream_key(key, Stream.SELECT), true, MARGINAL_RULE, current, self.workload, self, state.eligible
        )
        index = self.padding.gather[chosen]  # padding points one past the end: dropped
        picked = true.map(lambda a: jnp.concatenate([a, jnp.zeros(1, a.dtype)])[index])
        noisy, measure_charge = noise.measure_counts(
            stream_key(key, Stream.MEASURE),
            picked,
            sigma=self.sigma,
            sensitivity=self.measure_sensitivity,
            noise=self.noise,
        )
        noisy = noisy * count_unit(Neighboring.REPLACE_ONE, self.n_records)  # fractions
        new = ClassState(
            state.targets.at[index].set(jnp.clip(noisy, 0.0, 1.0), mode="drop"),
            state.measured.at[index].set(True, mode="drop"),
            state.ids,
            state.eligible.at[chosen].set(False),
        )
        return new, (select_charge, measure_charge)

    def squared_error(self, probs, numeric, sigma, state: ClassState) -> Array:
        err = self.answers(probs, numeric, sigma) - state.targets
        return jnp.sum(jnp.where(state.measured, err, 0.0) ** 2)


@pytree_dataclass
class _ThresholdClass:
    """Mixed marginals or linear thresholds: single queries selected by |error| (true answers:
    int32 counts of the records each query holds for; sigma and measure_sensitivity in counts)."""

    queries: MixedMarginalQueries | LinearThresholdQueries
    per_round: int = static_field()
    slots: int = static_field()
    select_scale: float = static_field()
    select_sensitivity: float = static_field()
    sigma: float = static_field()
    measure_sensitivity: float = static_field()
    n_records: int = static_field()
    noise: str = static_field()

    def init_state(self) -> ClassState:
        return ClassState(
            jnp.zeros(self.slots, jnp.float32),
            jnp.zeros(self.slots, bool),
            jnp.zeros(self.slots, jnp.int32),
            jnp.ones(len(self.queries), bool),
        )

    def answers(self, probs, numeric, sigma, queries=None) -> Array:
        queries = self.queries if queries is None else queries
        if isinstance(queries, MixedMarginalQueries):
            return relaxed_mixed_marginal_answers(probs, numeric, queries, sigma)
        return relaxed_linear_threshold_answers(probs, numeric, queries, sigma)

    def round(self, key, true: Sensitive, probs, numeric, state: ClassState, r):
        """Select `per_round` queries by |error| (fractions) and measure their counts.

        Privacy:
            Reads the true counts: `per_round` exponential mechanisms without replacement, then
            one Gaussian measurement; the noisy counts are divided by n afterwards.
        """
        current = self.answers(probs, numeric, None)  # hard thresholds: the answers we release
        chosen, select_charge = _select_top_k(
            stream_key(key, Stream.SELECT), true, QUERY_RULE, current, None, self, state.eligible
        )
        noisy, measure_charge = noise.measure_counts(
            stream_key(key, Stream.MEASURE),
            true.map(lambda c: c[chosen]),
            sigma=self.sigma,
            sensitivity=self.measure_sensitivity,
            noise=self.noise,
        )
        noisy = noisy * count_unit(Neighboring.REPLACE_ONE, self.n_records)  # fractions
        slots = r * self.per_round + jnp.arange(self.per_round)
        new = ClassState(
            state.targets.at[slots].set(jnp.clip(noisy, 0.0, 1.0)),
            state.measured.at[slots].set(True),
            state.ids.at[slots].set(chosen),
            state.eligible.at[chosen].set(False),
        )
        return new, (select_charge, measure_charge)

    def squared_error(self, probs, numeric, sigma, state: ClassState) -> Array:
        err = self.answers(probs, numeric, sigma, self.queries.take(state.ids)) - state.targets
        return jnp.sum(jnp.where(state.measured, err, 0.0) ** 2)


@pytree_dataclass
class RapPlusPlus:
    """RAP++; build with `rap_plus_plus`.

    `answers` holds each class's true int32 counts; `noise` picks the primitives ("discrete":
    exact, the default; "float": float32 noise, see `jaxdp.noise`).

    Privacy:
        Relation replace-one (n public; answers are fractions). Class c gets rho_c = rho w_c /
        sum(w) spread over its T_c rounds; each round splits rho_c / T_c between selection
        (alpha^2 share) and measurement ((1 - alpha)^2 share) as in Adaptive Measurements.
        Selection: top-K_c without replacement (stream SELECT), K_c exponential mechanisms,
        K_c epsilon^2 / 8 zCDP, on a score of sensitivity 1/n: a marginal's largest cell error
        or a single query's |error| in fractions (one replaced record moves each counting
        fraction by at most 1/n, so each absolute error, and a maximum of them, by at most 1/n).
        Under noise="discrete" the scores are computed exactly in int32 steps of 1 / (64 n)
        (`jaxdp.selection`), so the bound holds for the scores as computed.
        Measurement: one Gaussian (stream MEASURE) of the K_c picks' counts with L2 sensitivity
        sqrt(2 K_c) for marginals (a record leaves one cell and enters another of each) and
        sqrt(K_c) for single queries (a replaced record moves each count by at most 1); the
        noisy counts are divided by n. The projection, its stopping rule and sampling read only
        noisy answers: post-processing.
    """

    answers: tuple[Sensitive, ...]
    classes: tuple[_MarginalClass | _ThresholdClass, ...]
    family: MixedRows
    n_records: int = static_field()
    rounds: int = static_field()
    schedule: tuple[int, ...] = static_field()
    class_round: tuple[int, ...] = static_field()
    sigma_start: float = static_field()
    stages: int = static_field()
    gamma: float = static_field()
    max_stage_steps: int = static_field()
    learning_rate: float = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    relation: Neighboring = static_field(default=Neighboring.REPLACE_ONE)

    def init(self, key: Key) -> RapPlusState:
        """Random relaxed rows (public randomness) and empty measurement buffers."""
        require_key(key)
        return RapPlusState(
            params=self.family.init_params(key),
            classes=tuple(c.init_state() for c in self.classes),
            rounds_done=jnp.zeros((), jnp.int32),
        )

    def step(self, state: RapPlusState, key: Key) -> tuple[RapPlusState, RapPlusInfo]:
        require_key(key)
        t = state.rounds_done
        which = jnp.asarray(self.schedule, jnp.int32)[t]
        r = jnp.asarray(self.class_round, jnp.int32)[t]
        probs, numeric = self.family.probabilities(state.params), state.params[1]

        def branch(c):
            def run_class(class_states):
                new, charges = self.classes[c].round(key, self.answers[c], probs, numeric, class_states[c], r)
                return tuple(new if j == c else s for j, s in enumerate(class_states)), charges

            return run_class

        class_states, charges = jax.lax.switch(
            which, [branch(c) for c in range(len(self.classes))], state.classes
        )
        params, steps, best_stage = self.project(state.params, class_states)
        new = RapPlusState(
            params=params,
            classes=class_states,
            rounds_done=t + 1,
        )
        return new, RapPlusInfo(charges, which, steps, best_stage)

    def loss(self, params, class_states, sigma: Array | None) -> Array:
        """Sum of squared errors over every measurement so far; sigma None: hard thresholds."""
        probs, numeric = self.family.probabilities(params), params[1]
        return sum(
            c.squared_error(probs, numeric, sigma, s) for c, s in zip(self.classes, class_states, strict=True)
        )

    def project(self, params, class_states, *, sigma_start=None, stages=None):
        """Algorithm 1: anneal sigma from sigma_start, doubling each stage; each stage runs a
        fresh Adam until the gradient norm is <= gamma or `max_stage_steps` steps. Returns
        (the best iterate under the hard-threshold loss, steps taken, its stage or -1)."""
        sigma_start = self.sigma_start if sigma_start is None else sigma_start
        stages = self.stages if stages is None else stages

        def stage(j, carry):
            p, best, best_loss, best_stage, steps = carry
            sigma = sigma_start * 2.0 ** j.astype(jnp.float32)
            p, i = fit(
                lambda _: ((lambda q: self.loss(q, class_states, sigma)), True),
                p,
                max_steps=self.max_stage_steps,
                learning_rate=self.learning_rate,
                constrain=self.family.constrain,
                stop_below=self.gamma,
            )
            hard = self.loss(p, class_states, None)
            better = hard < best_loss
            best = jax.tree_util.tree_map(lambda b, q: jnp.where(better, q, b), best, p)
            return (
                p,
                best,
                jnp.where(better, hard, best_loss),
                jnp.where(better, j, best_stage),
                steps + i,
            )

        start = (
            params,
            params,
            self.loss(params, class_states, None),
            jnp.asarray(-1, jnp.int32),
            jnp.zeros((), jnp.int32),
        )
        _, best, _, best_stage, steps = jax.lax.fori_loop(0, stages, stage, start)
        return best, steps, best_stage

    def release(self, state: RapPlusState, key: Key, rows: int | None = None) -> tuple[Array, Array]:
        """(codes (rows, n_categorical) int32, numeric (rows, n_numeric) float32 in [0, 1]);
        rows default n. Decode with `Dataset(domain, codes, numeric)`."""
        require_key(key)
        rows = self.n_records if rows is None else _checks.positive_int(rows, "rows")
        return self.family.sample(key, state.params, rows)


# -- factory --------------------------------------------------------------------------------------


def rap_plus_plus(
    data: Dataset,
    classes: Sequence[QueryClass] | MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    n_rows: int = 500,
    sigma_start: float = 8.0,
    stages: int = 8,
    gamma: float = 1e-4,
    max_stage_steps: int = 25,
    learning_rate: float = 0.05,
    alpha: float = 0.5,
    rounds: int | None = None,
    marginals_per_round: int = 1,
    conversion: str = "exact",
    noise: str = "discrete",
) -> RapPlusPlus:
    """Build RAP++ (Algorithm 2 with the projection of Algorithm 1).

    Args:
        data: the private records (categorical and numeric columns).
        classes: the query classes (see `categorical_marginals`, `mixed_marginals`,
            `linear_thresholds`; `default_classes` builds the paper's set), or a marginal
            workload alone (then RAP++ is RAP with softmax rows: `rounds` rounds of
            `marginals_per_round` marginals).
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        n_rows: relaxed rows n'.
        sigma_start: sigma_1, the first inverse temperature (numeric values live in [0, 1]).
        stages: J, the number of sigma doublings (sigma_J = sigma_1 2^(J-1)); 1 when no class has
            thresholds.
        gamma: a stage ends once the loss's gradient norm is at most gamma.
        max_stage_steps: Adam steps per stage at most.
        learning_rate: Adam's step.
        alpha: share of each round's budget weight for selection.
        rounds, marginals_per_round: only when `classes` is a workload.
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).

    Privacy:
        See `RapPlusPlus`: rho-zCDP in total, replace-one.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    _checks.one_of(noise, NOISES, "noise")
    if isinstance(classes, MarginalWorkload):
        classes = [
            categorical_marginals(
                classes, rounds=10 if rounds is None else rounds, per_round=marginals_per_round
            )
        ]
    elif rounds is not None:
        raise ValueError("rounds is set per query class; pass it to the class constructors")
    classes = list(classes)
    if not classes:
        raise ValueError("rap++ needs at least one query class")
    alpha = _checks.fraction(alpha, "alpha", allow_one=False)
    n_rows = _checks.positive_int(n_rows, "n_rows")
    _checks.positive_finite(sigma_start, "sigma_start")
    stages = _checks.positive_int(stages, "stages")
    _checks.positive_finite(gamma, "gamma")
    max_stage_steps = _checks.positive_int(max_stage_steps, "max_stage_steps")
    _checks.positive_finite(learning_rate, "learning_rate")
    private_codes(data)  # validates the table (non-empty, exact float32 counts)
    records = Sensitive((jnp.asarray(data.codes, jnp.int32), jnp.asarray(data.numeric, jnp.float32)))
    n = len(data)
    sizes, n_numeric = data.domain.sizes, len(data.domain.numeric)
    total_weight = math.fsum(_checks.positive_finite(c.weight, "weight") for c in classes)

    built, answers = [], []
    for i, spec in enumerate(classes):
        _checks.one_of(spec.kind, KINDS, f"classes[{i}].kind")
        t_c = _checks.positive_int(spec.rounds, f"classes[{i}].rounds")
        k_c = _checks.positive_int(spec.per_round, f"classes[{i}].per_round")
        rho_select, rho_measure = round_shares(plan.rho_budget * spec.weight / total_weight, t_c, alpha)
        select_sensitivity = selection.score_sensitivity(Neighboring.REPLACE_ONE, n)
        select_scale = gumbel_scale(select_sensitivity, rho_select, count=k_c)
        if spec.kind == "categorical_marginals":
            workload = spec.queries
            _check_candidates(i, t_c * k_c, len(workload), "marginals")
            if workload.sizes != sizes:
                raise ValueError(f"classes[{i}]: workload was built for a different domain than the data's")
            measure_sensitivity = math.sqrt(2.0 * k_c)  # counts
            answers.append(private_counts(data, workload))
            sigma = count_sigma(measure_sensitivity, rho_measure, noise)
            built.append(
                _MarginalClass(
                    relaxed_plan(workload),
                    MarginalPadding.of(workload),
                    workload,
                    k_c,
                    select_scale,
                    select_sensitivity,
                    sigma,
                    measure_sensitivity,
                    n,
                    noise,
                )
            )
        else:
            queries = _explicit(spec.queries, spec.kind, i, sizes, n_numeric)
            _check_candidates(i, t_c * k_c, len(queries), "queries")
            measure_sensitivity = math.sqrt(k_c)  # counts
            exact = _mixed_counts if spec.kind == "mixed_marginals" else _linear_counts
            answers.append(records.map(lambda r, f=exact, q=queries: f(*r, q)))
            sigma = count_sigma(measure_sensitivity, rho_measure, noise)
            built.append(
                _ThresholdClass(
                    queries,
                    k_c,
                    t_c * k_c,
                    select_scale,
                    select_sensitivity,
                    sigma,
                    measure_sensitivity,
                    n,
                    noise,
                )
            )
        label = f"{spec.kind}[{i}]"
        plan = plan.with_charge(
            PlannedCharge(
                f"select {label}",
                TOP_K_PRIMITIVE[noise],
                select_sensitivity,
                select_scale,
                count=k_c,
                times=t_c,
            )
        ).with_charge(
            PlannedCharge(f"measure {label}", MEASURE_PRIMITIVE[noise], measure_sensitivity, sigma, times=t_c)
        )
    plan = plan.check()
    schedule, class_round = _interleave([c.rounds for c in classes])
    thresholds = any(c.kind != "categorical_marginals" for c in classes)
    return RapPlusPlus(
        answers=tuple(answers),
        classes=tuple(built),
        family=MixedRows(sizes, n_numeric, n_rows),
        n_records=n,
        rounds=len(schedule),
        schedule=schedule,
        class_round=class_round,
        sigma_start=float(sigma_start),
        stages=stages if thresholds else 1,
        gamma=float(gamma),
        max_stage_steps=max_stage_steps,
        learning_rate=float(learning_rate),
        plan=plan,
        noise=noise,
    )


def _check_candidates(i: int, needed: int, available: int, what: str) -> None:
    if needed > available:
        raise ValueError(
            f"classes[{i}]: rounds x per_round = {needed} exceeds its {available} {what} "
            "(each is measured at most once)"
        )


def _explicit(queries, kind: str, i: int, sizes, n_numeric) -> MixedMarginalQueries | LinearThresholdQueries:
    expected = (
        MixedMarginalQueries
        if kind == "mixed_marginals"
        else (LinearThresholdQueries, RandomLinearThresholds)
    )
    if not isinstance(queries, expected):
        raise TypeError(f"classes[{i}]: {kind} takes {expected}, got {type(queries).__name__}")
    if tuple(queries.sizes) != tuple(sizes) or queries.n_numeric != n_numeric:
        raise ValueError(f"classes[{i}]: queries were built for a different domain than the data's")
    if isinstance(queries, RandomLinearThresholds):
        return queries.materialize()
    return queries


# One compiled program per query-set shape (the factory answers every candidate once); int32
# counts, what exact noise is added to.
_mixed_counts = jax.jit(functools.partial(mixed_marginal_answers, dtype=jnp.int32))
_linear_counts = jax.jit(functools.partial(linear_threshold_answers, dtype=jnp.int32))


def _interleave(rounds: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Spread each class's rounds evenly over the run: round r of class c sits at (r + 1/2) / T_c."""
    order = sorted((((r + 0.5) / t, c, r) for c, t in enumerate(rounds) for r in range(t)))
    return tuple(c for _, c, _ in order), tuple(r for _, _, r in order)


# -- the paper's query classes --------------------------------------------------------------------


def default_classes(
    data_domain,
    key: Key,
    *,
    workload: MarginalWorkload | None = None,
    marginal_rounds: int | None = None,
    mixed_candidates: int = 2000,
    mixed_rounds: int = 20,
    linear_candidates: int = 2000,
    linear_rounds: int = 20,
    per_round: int = 10,
) -> list[QueryClass]:
    """Section 5.1's classes from a declared domain (public; nothing is read from the data).

    - categorical marginals: `workload`, or with a target every (feature, feature, target)
      marginal (class-conditional CM), else all 2-way marginals;
      rounds default to (categorical attributes - 1), as in the paper;
    - mixed marginals (if numeric columns): `mixed_candidates` random queries of one numeric
      prefix threshold x one value of the target (of any categorical attribute if no target);
    - linear thresholds (if numeric columns): `linear_candidates` random class-conditional
      queries on the target (on every categorical attribute if no target).

    Args:
        data_domain: the declared `Domain`.
        key: a public key for the random query sets (a constant is fine: queries are public).
    """
    from jaxdp.queries import all_kway, from_cliques, random_linear_thresholds

    key = require_key(key)
    sizes, n_numeric = data_domain.sizes, len(data_domain.numeric)
    cat_names = [a.name for a in data_domain.categorical]
    target = data_domain.target
    if not sizes:
        raise DataError("rap++ needs at least one categorical column")
    if workload is None:
        if target is not None and len(sizes) >= 3:
            y = cat_names.index(target)
            others = [a for a in range(len(sizes)) if a != y]
            cliques = [tuple(sorted((a, b, y))) for i, a in enumerate(others) for b in others[i + 1 :]]
            workload = from_cliques(sizes, cliques)
        else:
            workload = all_kway(sizes, min(2, len(sizes)))
    rounds = marginal_rounds if marginal_rounds is not None else max(1, min(len(sizes) - 1, len(workload)))
    out = [categorical_marginals(workload, rounds=rounds, per_round=1)]
    if n_numeric:
        labels = [cat_names.index(target)] if target is not None else list(range(len(sizes)))
        mixed = _target_prefix_queries(jax.random.fold_in(key, 0), sizes, n_numeric, mixed_candidates, labels)
        out.append(mixed_marginals(mixed, rounds=mixed_rounds, per_round=per_round))
        linear = random_linear_thresholds(
            jax.random.fold_in(key, 1), sizes, n_numeric, linear_candidates, labels
        )
        out.append(linear_thresholds(linear, rounds=linear_rounds, per_round=per_round))
    return out


def _target_prefix_queries(key, sizes, n_numeric, n_queries, labels) -> MixedMarginalQueries:
    """Random 2-way mixed marginals 1{x_label = y and x_j <= tau}: label uniform over `labels`,
    y uniform over its values, j uniform over the numeric columns, tau ~ U[0, 1]."""
    u = jax.random.uniform(key, (n_queries, 4))
    labels_arr = np.asarray(labels, np.int32)
    u = np.asarray(u)
    label = labels_arr[np.minimum((u[:, 0] * len(labels)).astype(int), len(labels) - 1)]
    size = np.asarray(sizes, np.int32)[label]
    value = np.minimum((u[:, 1] * size).astype(np.int32), size - 1)
    attr = np.minimum((u[:, 2] * n_numeric).astype(np.int32), n_numeric - 1)
    return MixedMarginalQueries(
        jnp.asarray(label[:, None], jnp.int32),
        jnp.asarray(value[:, None], jnp.int32),
        jnp.asarray(attr[:, None], jnp.int32),
        jnp.asarray(u[:, 3:4], jnp.float32),
        tuple(int(s) for s in sizes),
        int(n_numeric),
    )
