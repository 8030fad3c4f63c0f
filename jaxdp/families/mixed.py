"""RAP++'s family (Vietri et al. 2022): mixed relaxed rows fitted by an annealed projection.

Parameters are `(logits (n_rows, sum of categorical sizes), numeric (n_rows, n_numeric))`. The
categorical part is RAP-softmax's: each block is a softmax, so a row is a product distribution
over the categorical attributes. The numeric part holds values in the normalised [0, 1] of the
declared bounds, clipped back into it after every optimiser step (the projection onto the relaxed
domain). Records are released by handing each row its share of them, drawing each categorical
attribute from its block (counts rounded: `_sampling.mixture_rows`) and copying the row's numeric
values: no bins anywhere.

The family fits several query classes at once: categorical marginals (answered by the relaxed
product kernels) and single threshold queries, mixed marginals (Definition 3) or class-
conditional linear thresholds (Definition 4), answered through tempered sigmoids (Definitions
11-12). Its update is Algorithm 1: Adam on the squared error over every measurement so far at
sigma_1, until the gradient norm falls below gamma (or a step cap), then sigma doubles; the
iterate kept is the best under the exact (hard-threshold) loss. With only categorical classes
there is nothing to anneal and one stage runs: RAP with softmax rows.

Post-processing only: the fits read released measurements (`Measured`), never the data.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from jaxdp import _checks
from jaxdp.families._sampling import mixture_rows
from jaxdp.families.base import ClassShape, Family, Measured
from jaxdp.families.fit import fit
from jaxdp.families.relaxed import block_softmax
from jaxdp.keys import split_keys
from jaxdp.queries import (
    LinearThresholdQueries,
    MarginalWorkload,
    MixedMarginalQueries,
    RelaxedPlan,
    relaxed_linear_threshold_answers,
    relaxed_marginals,
    relaxed_mixed_marginal_answers,
    relaxed_plan,
)
from jaxdp.types import MARGINALS, QUERIES, Array, Key, pytree_dataclass, static_field

MixedParams = tuple[Array, Array]


class ClassTargets(NamedTuple):
    """One class's measurements. Marginals: targets/measured over all its cells, ids unused.
    Thresholds: targets/measured/ids over (rounds x per_round) slots filled round by round."""

    targets: Array
    measured: Array
    ids: Array


class MixedModel(NamedTuple):
    """params: (logits, numeric) of the relaxed rows; classes: one ClassTargets per query class;
    best_stage: the annealing stage of the iterate kept in the last update (-1: none improved on
    its start)."""

    params: MixedParams
    classes: tuple[ClassTargets, ...]
    best_stage: Array


@pytree_dataclass
class _Marginals:
    """A class of categorical marginals: relaxed answers are exact products of the rows' blocks."""

    plan: RelaxedPlan
    n_queries: int = static_field()

    def empty(self) -> ClassTargets:
        n = self.n_queries
        return ClassTargets(jnp.zeros(n, jnp.float32), jnp.zeros(n, bool), jnp.zeros(0, jnp.int32))

    def answers(self, probs: Array, numeric: Array, sigma: Array | None) -> Array:
        del numeric, sigma  # no thresholds
        return relaxed_marginals(probs, self.plan)

    def record(self, targets: ClassTargets, measured: Measured, unit: float, r: Array) -> ClassTargets:
        del r
        values = jnp.clip(measured.counts * unit, 0.0, 1.0)
        return ClassTargets(
            targets.targets.at[measured.index].set(values, mode="drop"),  # padding: one past the end
            targets.measured.at[measured.index].set(True, mode="drop"),
            targets.ids,
        )

    def squared_error(self, probs, numeric, sigma, targets: ClassTargets) -> Array:
        err = self.answers(probs, numeric, sigma) - targets.targets
        return jnp.sum(jnp.where(targets.measured, err, 0.0) ** 2)


@pytree_dataclass
class _Thresholds:
    """A class of single threshold queries (mixed marginals or linear thresholds)."""

    queries: MixedMarginalQueries | LinearThresholdQueries
    per_round: int = static_field()
    slots: int = static_field()

    def empty(self) -> ClassTargets:
        n = self.slots
        return ClassTargets(jnp.zeros(n, jnp.float32), jnp.zeros(n, bool), jnp.zeros(n, jnp.int32))

    def answers(self, probs, numeric, sigma, queries=None) -> Array:
        """Relaxed answers at inverse temperature sigma (None: hard thresholds, what is released)."""
        queries = self.queries if queries is None else queries
        if isinstance(queries, MixedMarginalQueries):
            return relaxed_mixed_marginal_answers(probs, numeric, queries, sigma)
        return relaxed_linear_threshold_answers(probs, numeric, queries, sigma)

    def record(self, targets: ClassTargets, measured: Measured, unit: float, r: Array) -> ClassTargets:
        slots = r * self.per_round + jnp.arange(self.per_round)
        values = jnp.clip(measured.counts[:, 0] * unit, 0.0, 1.0)
        return ClassTargets(
            targets.targets.at[slots].set(values),
            targets.measured.at[slots].set(True),
            targets.ids.at[slots].set(measured.chosen),
        )

    def squared_error(self, probs, numeric, sigma, targets: ClassTargets) -> Array:
        err = self.answers(probs, numeric, sigma, self.queries.take(targets.ids)) - targets.targets
        return jnp.sum(jnp.where(targets.measured, err, 0.0) ** 2)


@pytree_dataclass
class MixedRows(Family):
    """RAP++'s mixed relaxed rows and annealed projection (module docstring).

    Args:
        n_rows: relaxed rows n'.
        sigma_start: sigma_1, the first inverse temperature (numeric values live in [0, 1]).
        stages: J, the number of sigma doublings (sigma_J = sigma_1 2^(J-1)); 1 when no class has
            thresholds.
        gamma: a stage ends once the loss's gradient norm is at most gamma.
        max_stage_steps: Adam steps per stage at most.
        learning_rate: Adam's step.
    """

    n_rows: int = static_field(default=500)
    sigma_start: float = static_field(default=8.0)
    stages: int = static_field(default=8)
    gamma: float = static_field(default=1e-4)
    max_stage_steps: int = static_field(default=25)
    learning_rate: float = static_field(default=0.05)
    targets: tuple[_Marginals | _Thresholds, ...] = ()
    sizes: tuple[int, ...] = static_field(default=())
    n_numeric: int = static_field(default=0)
    unit: float = static_field(default=1.0)

    several_classes: ClassVar[bool] = True
    numeric: ClassVar[bool] = True
    candidates: ClassVar[tuple[str, ...]] = (MARGINALS, QUERIES)

    def bind(self, classes: tuple[ClassShape, ...], *, domain, public, n_records):
        """This family over the domain's categorical and numeric columns and the classes' queries.

        Raises:
            ValueError: bad settings, public data, or picks of single cells of a marginal workload.
        """
        if public is not None:
            raise ValueError("the MixedRows family uses no public data")
        _checks.positive_int(self.n_rows, "n_rows")
        _checks.positive_finite(self.sigma_start, "sigma_start")
        stages = _checks.positive_int(self.stages, "stages")
        _checks.positive_finite(self.gamma, "gamma")
        _checks.positive_int(self.max_stage_steps, "max_stage_steps")
        _checks.positive_finite(self.learning_rate, "learning_rate")
        targets = []
        for i, shape in enumerate(classes):
            if isinstance(shape.queries, MarginalWorkload):
                if shape.candidates != MARGINALS:
                    raise ValueError(f"classes[{i}]: MixedRows fits whole marginals of a marginal workload")
                targets.append(_Marginals(relaxed_plan(shape.queries), shape.queries.n_queries))
            else:
                targets.append(_Thresholds(shape.queries, shape.per_round, shape.rounds * shape.per_round))
        thresholds = any(isinstance(t, _Thresholds) for t in targets)
        return dataclasses.replace(
            self,
            stages=stages if thresholds else 1,
            targets=tuple(targets),
            sizes=domain.sizes,
            n_numeric=len(domain.numeric),
            unit=1.0 / n_records,
        )

    # -- the representation ----------------------------------------------------------------

    def init_params(self, key: Key) -> MixedParams:
        """Standard-normal logits and uniform numeric values: a random start over the domain."""
        logit_key, numeric_key = split_keys(key)
        logits = jax.random.normal(logit_key, (self.n_rows, sum(self.sizes)), jnp.float32)
        numeric = jax.random.uniform(numeric_key, (self.n_rows, self.n_numeric), jnp.float32)
        return logits, numeric

    def probabilities(self, params: MixedParams) -> Array:
        """(n_rows, sum of sizes) per-attribute probabilities."""
        logits, _ = params
        if not self.sizes:
            return logits
        return block_softmax(logits, self.sizes)

    def constrain(self, params: MixedParams) -> MixedParams:
        """Project the numeric columns back onto [0, 1] (the logits are unconstrained)."""
        logits, numeric = params
        return logits, jnp.clip(numeric, 0.0, 1.0)

    # -- the family ------------------------------------------------------------------------

    def init(self, key: Key) -> MixedModel:
        """Random relaxed rows (public randomness) and empty measurement buffers."""
        classes = tuple(t.empty() for t in self.targets)
        return MixedModel(self.init_params(key), classes, jnp.asarray(-1, jnp.int32))

    def answers(self, model: MixedModel) -> tuple[Array, ...]:
        """Each class's answers under hard thresholds (what the released records would give)."""
        probs, numeric = self.probabilities(model.params), model.params[1]
        return tuple(t.answers(probs, numeric, None) for t in self.targets)

    def record(self, model: MixedModel, measured: Measured, current: Array, r: Array) -> MixedModel:
        """The measurements (counts / n, clipped to [0, 1]) in their class's buffers."""
        del current
        c = measured.query_class
        recorded = self.targets[c].record(model.classes[c], measured, self.unit, r)
        return model._replace(classes=(*model.classes[:c], recorded, *model.classes[c + 1 :]))

    def loss(self, params: MixedParams, classes: tuple[ClassTargets, ...], sigma: Array | None) -> Array:
        """Sum of squared errors over every measurement so far; sigma None: hard thresholds."""
        probs, numeric = self.probabilities(params), params[1]
        return sum(
            t.squared_error(probs, numeric, sigma, s) for t, s in zip(self.targets, classes, strict=True)
        )

    def update(self, model: MixedModel, t: Array, key: Key, last: Array | bool):
        """Algorithm 1 on every measurement so far; (model, Adam steps)."""
        del t, key, last  # deterministic, the same every round
        params, steps, best_stage = self.project(model.params, model.classes)
        return model._replace(params=params, best_stage=best_stage), steps

    def project(self, params, classes, *, sigma_start=None, stages=None):
        """Algorithm 1: anneal sigma from sigma_start, doubling each stage; each stage runs a
        fresh Adam until the gradient norm is <= gamma or `max_stage_steps` steps. Returns
        (the best iterate under the hard-threshold loss, steps taken, its stage or -1)."""
        sigma_start = self.sigma_start if sigma_start is None else sigma_start
        stages = self.stages if stages is None else stages

        def stage(j, carry):
            p, best, best_loss, best_stage, steps = carry
            sigma = sigma_start * 2.0 ** j.astype(jnp.float32)
            p, i = fit(
                lambda _: ((lambda q: self.loss(q, classes, sigma)), True),
                p,
                max_steps=self.max_stage_steps,
                learning_rate=self.learning_rate,
                constrain=self.constrain,
                stop_below=self.gamma,
            )
            hard = self.loss(p, classes, None)
            better = hard < best_loss
            best = jax.tree_util.tree_map(lambda b, q: jnp.where(better, q, b), best, p)
            return (p, best, jnp.where(better, hard, best_loss), jnp.where(better, j, best_stage), steps + i)

        start = (
            params,
            params,
            self.loss(params, classes, None),
            jnp.asarray(-1, jnp.int32),
            jnp.zeros((), jnp.int32),
        )
        _, best, _, best_stage, steps = jax.lax.fori_loop(0, stages, stage, start)
        return best, steps, best_stage

    def output_answers(self, model: MixedModel) -> Array:
        """The first class's answers (hard thresholds)."""
        return self.answers(model)[0]

    def release(self, model: MixedModel, key: Key, rows: int) -> tuple[Array, Array]:
        """(codes (rows, n_categorical) int32, numeric (rows, n_numeric) float32 in [0, 1]):
        decode with `Dataset(domain, codes, numeric)`."""
        codes, picked = mixture_rows(key, self.probabilities(model.params), self.sizes, rows)
        return codes, model.params[1][picked]
