"""GEM's generator fitted to counts with their noise scales: AIM-GEM's family.

GEM's generator G_theta(z) over a fixed latent batch (Liu, Vietri & Wu 2021), fitted after every
round to all measurements so far by Adam on the inverse-variance weighted squared error of its
marginals (a cell measured twice keeps the inverse-variance average of its noisy counts and the
summed precision: the same least-squares objective), warm-started from the last round's
parameters, `iters` steps an update and `final_iters` in the last. It has a fixed size whatever
was measured, so every candidate is eligible in every round. Its counts are its fractions times a
total: n under replace-one (public), the noisy record count from the first 1-way measurements
under add-remove. The fit and answers compile once per shape and are reused across rounds.
Post-processing only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.families import pgm
from jaxdp.families.base import ClassShape, Family, Measured, single_class
from jaxdp.families.fit import fit
from jaxdp.families.generator import Generator
from jaxdp.families.graphical import host_measurements
from jaxdp.keys import fold_in
from jaxdp.queries import MarginalWorkload
from jaxdp.queries import measured as measured_path
from jaxdp.types import MARGINALS, Array, Key, Neighboring, pytree_dataclass, static_field


class GeneratorFit(NamedTuple):
    """params, latent: the generator and its fixed latent batch (public randomness); total: the
    counts' scale (n, or the noisy record count; None before the first update under add/remove);
    measurements: every released measurement so far."""

    params: Any
    latent: Array
    total: float | None
    measurements: tuple[pgm.Measurement, ...]


@jax.jit
def _fractions(generator: Generator, params, latent: Array) -> Array:
    return generator.answers(params, latent)


@functools.partial(jax.jit, static_argnames=("steps", "measured_only"))
def _adam_fit(
    generator: Generator,
    params,
    latent: Array,
    targets: Array,
    weights: Array,
    marginals: Array | None,
    rate: Array,
    steps: int,
    measured_only: MarginalWorkload | None,
):
    """`steps` Adam steps (fresh moments, warm-started parameters) on
    sum_cells weights (G(z) answers - targets)^2, with targets in fractions: the shared fit loop
    (`jaxdp.families.fit`) with a fixed loss and no early stop. With `measured_only` (the
    workload) the sum reads only the `marginals` that hold a weighted cell (`jaxdp.queries.measured`)."""

    def loss(p):
        if measured_only is not None:
            probs = generator.probabilities(p, latent)
            return measured_path.squared_error(measured_only, probs, targets, weights, marginals)
        return jnp.sum(weights * (generator.answers(p, latent) - targets) ** 2)

    params, _ = fit(lambda p: (loss, True), params, max_steps=steps, learning_rate=rate)
    return params


@functools.partial(jax.jit, static_argnames="rows")
def _sample(generator: Generator, key: Key, params, latent: Array, rows: int) -> Array:
    return generator.sample(key, params, latent, rows)


@pytree_dataclass
class GeneratorModel(Family):
    """GEM's generator fitted to counts (module docstring).

    Args:
        batch, hidden, latent_dim: the generator (see `jaxdp.gem`).
        learning_rate: Adam's step.
        iters: Adam steps per update (warm-started); final_iters in the last.
    """

    batch: int = static_field(default=1000)
    hidden: tuple[int, ...] = static_field(default=(256, 256))
    latent_dim: int = static_field(default=128)
    learning_rate: float = static_field(default=1e-3)
    iters: int = static_field(default=100)
    final_iters: int = static_field(default=500)
    generator: Generator | None = None
    workload: MarginalWorkload | None = static_field(default=None)
    known_total: float | None = static_field(default=None)

    jittable: ClassVar[bool] = False
    candidates: ClassVar[tuple[str, ...]] = (MARGINALS,)
    relations: ClassVar[tuple[Neighboring, ...]] = (Neighboring.ADD_REMOVE, Neighboring.REPLACE_ONE)

    def bind(self, classes: tuple[ClassShape, ...], *, domain, public, n_records):
        shape = single_class(classes, "GeneratorModel")
        if public is not None:
            raise ValueError("the GeneratorModel family uses no public data")
        workload = shape.queries
        hidden = self.hidden if isinstance(self.hidden, Sequence) else (self.hidden,)
        return dataclasses.replace(
            self,
            hidden=tuple(int(h) for h in hidden),
            learning_rate=float(_checks.positive_finite(self.learning_rate, "learning_rate")),
            iters=_checks.positive_int(self.iters, "iters"),
            final_iters=_checks.positive_int(self.final_iters, "final_iters"),
            generator=Generator.of(workload, hidden=hidden, latent_dim=self.latent_dim, batch=self.batch),
            workload=workload,
            known_total=None if n_records is None else float(n_records),
        )

    def init(self, key: Key) -> GeneratorFit:
        return GeneratorFit(
            params=self.generator.init_params(fold_in(key, 0)),
            latent=self.generator.latent(fold_in(key, 1)),
            total=self.known_total,
            measurements=(),
        )

    def record(self, model: GeneratorFit, measured: Measured, current, r) -> GeneratorFit:
        del current, r
        return model._replace(measurements=model.measurements + host_measurements(measured, self.workload))

    def update(self, model: GeneratorFit, t, key: Key, last: bool) -> tuple[GeneratorFit, int]:
        """Adam on every measurement so far, warm-started (final_iters if `last`)."""
        del t, key  # deterministic
        measurements = model.measurements
        total = model.total
        if total is None:  # add/remove: n is private; the noisy 1-way totals' mean (round 0)
            total = max(1.0, float(np.mean([m.noisy.sum() for m in measurements if len(m.clique) == 1])))
        targets, precision = self._targets(measurements)
        steps = self.final_iters if last else self.iters
        measured_only = self.workload if measured_path.by_marginal(self.workload) else None
        marginals = None
        if measured_only is not None:
            marginals = measured_path.active_marginals(jnp.asarray(precision > 0), measured_only)
        params = _adam_fit(
            self.generator,
            model.params,
            model.latent,
            jnp.asarray(targets / total, jnp.float32),
            jnp.asarray(precision / precision.sum(), jnp.float32),
            marginals,
            jnp.asarray(self.learning_rate, jnp.float32),
            steps=steps,
            measured_only=measured_only,
        )
        return model._replace(params=params, total=total), steps

    def _targets(self, measurements) -> tuple[np.ndarray, np.ndarray]:
        """(n_queries,) the inverse-variance average of the noisy counts measured on each cell
        (0 where unmeasured) and the summed precision 1/sigma^2 there."""
        index = {c: i for i, c in enumerate(self.workload.cliques)}
        targets = np.zeros(self.workload.n_queries, np.float64)
        precision = np.zeros(self.workload.n_queries, np.float64)
        for m in measurements:
            start = self.workload.offsets[index[m.clique]]
            span = slice(start, start + m.noisy.size)
            added = 1.0 / m.sigma**2
            targets[span] = (targets[span] * precision[span] + m.noisy * added) / (precision[span] + added)
            precision[span] += added
        return targets, precision

    def output_answers(self, model: GeneratorFit) -> np.ndarray:
        """(n_queries,) float64 the generator's marginals (fractions)."""
        return np.asarray(_fractions(self.generator, model.params, model.latent), np.float64)

    def answers(self, model: GeneratorFit) -> np.ndarray:
        """Fractions under replace-one; counts (fractions times the estimated total) under
        add-remove."""
        fractions = self.output_answers(model)
        return fractions if self.known_total is not None else model.total * fractions

    def default_rows(self, model: GeneratorFit) -> int:
        return max(1, round(float(model.total)))

    def release(self, model: GeneratorFit, key: Key, rows: int) -> Array:
        return _sample(self.generator, key, model.params, model.latent, rows)
