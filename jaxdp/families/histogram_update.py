"""Histogram families as parts of `jaxdp.adaptive`: an explicit distribution over a support (the
whole domain, or a public dataset's records) and its update from every measurement so far.

- `PEP`: the maximum-entropy projection onto the measurements (PEP, the paper's Algorithm 4);
- `MW`: multiplicative weights on the newest measurement, then replays of all of them (MWEM).

Both fit fractions (replace-one: n public). Post-processing only: the update reads released
measurements (`Measured`), never the data.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.domain import DataError, Dataset, Domain
from jaxdp.families.base import ClassShape, Family, Measured, single_class
from jaxdp.families.histogram import (
    DenseSupport,
    MarginalPadding,
    Measurements,
    PublicSupport,
    probabilities,
    project_to_simplex,
    sample_support,
)
from jaxdp.families.projection import (
    entropy_projection,
    multiplicative_weights,
    replay_multiplicative_weights,
)
from jaxdp.queries import MarginalWorkload
from jaxdp.types import QUERIES, Array, Key, pytree_dataclass, static_field

OUTPUTS = ("last", "average")


class HistogramModel(NamedTuple):
    """log_weights: (n_support,) the current distribution; average: (n_support,) the running
    mean of the per-round distributions; measurements: every released measurement so far."""

    log_weights: Array
    average: Array
    measurements: Measurements


@pytree_dataclass
class _Histogram(Family):
    """A distribution over a support, updated from `Measurements` (one slot per measurement)."""

    short_rounds: ClassVar[bool] = True

    support: DenseSupport | PublicSupport | None = None
    padding: MarginalPadding | None = None
    capacity: int = static_field(default=0)
    per_round: int = static_field(default=1)
    single_queries: bool = static_field(default=False)
    unit: float = static_field(default=1.0)
    output: str = static_field(default="last")

    def bind(
        self,
        classes: tuple[ClassShape, ...],
        *,
        domain: Domain,
        public: Dataset | None,
        n_records: int | None,
    ):
        """This family over the workload's domain (enumerable) or a public dataset's records.

        Raises:
            DataError: a domain too large to enumerate, or public data over another domain.
        """
        shape = single_class(classes, type(self).__name__)
        workload: MarginalWorkload = shape.queries
        _checks.one_of(self.output, OUTPUTS, "output")
        if public is None:
            support = DenseSupport.of(workload)
        else:
            if public.domain.sizes != domain.sizes:
                raise DataError("the public dataset must have the same domain as the private one")
            support = PublicSupport.of(public.codes, workload)
        padding = MarginalPadding.of(workload)
        return dataclasses.replace(
            self,
            support=support,
            padding=padding,
            capacity=shape.capacity,
            per_round=self._per_round(shape.per_round),
            single_queries=shape.candidates == QUERIES,
            unit=1.0 / n_records,
        )

    def init(self, key: Key) -> HistogramModel:
        """The uniform distribution over the support (the public data's, for a public support)."""
        del key  # nothing random
        n = self.support.n_support
        return HistogramModel(
            jnp.zeros(n, jnp.float32),
            jnp.zeros(n, jnp.float32),
            Measurements.empty(self.capacity, self.padding.max_cells),
        )

    def answers(self, model: HistogramModel) -> Array:
        """(n_queries,) the workload's answers under the current distribution."""
        return self.support.answers(probabilities(model.log_weights))

    def record(self, model: HistogramModel, measured: Measured, current: Array, r: Array) -> HistogramModel:
        """Each measured marginal's noisy answers (counts / n) projected onto the simplex (a
        distribution over its cells), or a measured cell's answer clipped to [0, 1], in the
        round's slots."""
        del current
        measurements = model.measurements
        values = measured.counts * self.unit
        first = jnp.sum(measurements.filled)  # the next free slot
        for j in range(measured.marginal.shape[0]):
            marginal, cell = measured.marginal[j], measured.cell[j]
            if self.single_queries:
                target = (
                    jnp.zeros(self.padding.max_cells, jnp.float32)
                    .at[cell]
                    .set(jnp.clip(values[j, 0], 0.0, 1.0))
                )
            else:
                target = project_to_simplex(values[j], self.padding.valid[marginal])
            measurements = measurements.record(first + j, marginal, cell, target)
        return model._replace(measurements=measurements)

    def update(self, model: HistogramModel, t: Array, key: Key, last: Array | bool):
        """(the model updated from every measurement so far, 0 inner steps)."""
        del key, last  # deterministic; nothing special about the last round
        log_weights = self._update(model.log_weights, model.measurements, t)
        probs = probabilities(log_weights)
        average = model.average + (probs - model.average) / (t + 1).astype(jnp.float32)
        return HistogramModel(log_weights, average, model.measurements), jnp.zeros((), jnp.int32)

    def _per_round(self, per_round: int | None) -> int:
        """Picks per round (0 where they vary: the measurements take the next free slots)."""
        return 0 if per_round is None else per_round

    def _update(self, log_weights: Array, meas: Measurements, t: Array) -> Array:
        raise NotImplementedError

    def distribution(self, model: HistogramModel) -> Array:
        """(n_support,) the output distribution: the last iterate or the average of iterates."""
        return probabilities(model.log_weights) if self.output == "last" else model.average

    def output_answers(self, model: HistogramModel) -> Array:
        """(n_queries,) the workload's answers under the output distribution."""
        return self.support.answers(self.distribution(model))

    def release(self, model: HistogramModel, key: Key, rows: int) -> Array:
        """(rows, n_attributes) int32 records drawn from the output distribution."""
        return self.support.records(sample_support(key, self.distribution(model), rows))

    def conditioned(
        self, model: HistogramModel, weights: dict[int, np.ndarray]
    ) -> tuple[HistogramModel, float]:
        """The output distribution restricted to the evidence (each support point weighed by its
        values' weights) and renormalised: exact."""
        point = self.support.point_weights(weights)
        p = np.asarray(self.distribution(model), np.float64)
        probability = float(p @ point)
        if self.output == "last":
            with np.errstate(divide="ignore"):
                shift = np.log(point).astype(np.float32)
            return model._replace(log_weights=model.log_weights + jnp.asarray(shift)), probability
        restricted = p * point / probability if probability > 0 else p * point
        return model._replace(average=jnp.asarray(restricted, model.average.dtype)), probability


@pytree_dataclass
class PEP(_Histogram):
    """PEP's update: the maximum-entropy distribution consistent with every measurement, by
    iterative projection onto the worst-fitted measured cell (Algorithm 4) for `max_steps` steps
    (T_max) or until every measured error is at most `tolerance` (gamma). Output: last iterate.

    Args:
        max_steps: T_max, projections each round (default 25).
        tolerance: gamma, stop a round's projections once every measured error is at most this
            (default 0: always `max_steps`).
        output: "last" iterate (default) or the "average" of the rounds' distributions.
    """

    max_steps: int = static_field(default=25)
    tolerance: float = static_field(default=0.0)

    def _update(self, log_weights, meas, t):
        del t
        return entropy_projection(
            self.support, self.padding, log_weights, meas, max_steps=self.max_steps, tolerance=self.tolerance
        )


@pytree_dataclass
class MW(_Histogram):
    """MWEM's update: weights *= exp(step_size (measured - current)) on each new measurement's
    cells, then `replay_passes` sweeps over every measurement so far ("MWEM with past queries").

    Args:
        step_size: the multiplicative weights' step, on errors in fractions (default 0.5, the
            MWEM paper's 1/2).
        replay_passes: sweeps over every measurement so far after each round's update
            (default 1; 0: the newest measurements only).
        output: "last" iterate (default) or the "average" of the rounds' distributions.
    """

    step_size: float = static_field(default=0.5)
    replay_passes: int = static_field(default=1)

    def _per_round(self, per_round: int | None) -> int:
        if per_round is None:
            raise ValueError(
                "MW updates on each round's newest measurements, so it needs the same picks every "
                "round; a filter rule's rounds vary (use PEP, RAP, GEM or a graphical model)"
            )
        return per_round

    def _update(self, log_weights, meas, t):
        for j in range(self.per_round):
            slot = t * self.per_round + j
            log_weights = multiplicative_weights(
                self.support, self.padding, log_weights, meas, slot, step_size=self.step_size
            )
        return replay_multiplicative_weights(
            self.support, self.padding, log_weights, meas, passes=self.replay_passes, step_size=self.step_size
        )
