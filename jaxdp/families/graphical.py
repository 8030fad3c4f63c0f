"""Private-PGM's graphical model as a family (AIM's model, McKenna et al. 2022): fitted on the
host by mirror descent over a junction tree (`jaxdp.families.pgm.estimate`, warm-started), with
exact marginals and keyed sampling.

It fits counts with their noise scales (inverse-variance weighted), under either relation: n is
the known total under replace-one, and estimated from the measurements under add-remove. Its
`eligible` is AIM's model-size filter: the candidates whose junction tree stays under
`max_model_size * budget_used` megabytes. Post-processing only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import numpy as np

from jaxdp import _checks
from jaxdp.families import pgm, pgm_marginals, pgm_sampling
from jaxdp.families.base import ClassShape, Family, Measured, single_class
from jaxdp.queries import MarginalWorkload
from jaxdp.types import MARGINALS, Array, Key, Neighboring, pytree_dataclass, static_field


class GraphicalState(NamedTuple):
    """fitted: the model after the last update (None before the first); measurements: every
    released measurement so far (`pgm.Measurement`: clique, noisy counts, sigma)."""

    fitted: pgm.Model | None
    measurements: tuple[pgm.Measurement, ...]


def host_measurements(measured: Measured, workload: MarginalWorkload) -> tuple[pgm.Measurement, ...]:
    """A round's measured marginals as host `pgm.Measurement`s (noisy counts in float64)."""
    counts = np.asarray(measured.counts, np.float64)
    per_cell = np.ndim(measured.sigma) > 0
    sigma = np.asarray(measured.sigma, np.float64) if per_cell else float(measured.sigma)
    return tuple(
        pgm.Measurement(
            workload.cliques[i],
            counts[j, : workload.cells[i]],
            sigma[j, : workload.cells[i]] if per_cell else sigma,
        )
        for j, i in enumerate(np.asarray(measured.marginal).tolist())
    )


@dataclasses.dataclass(frozen=True)
class Refit:
    """The last fit's guard against fitting the noise: where the converged fit follows the
    measurements closer than `below` times the true counts would (its loss over the noise's
    own, `pgm_marginals.residual_ratio`), it is redone from the model of the 1-way measurements alone
    (`pgm.one_way_model`: every attribute's noisy counts, the attributes independent) and
    stopped once its loss is `margin` (of the noise's loss) above the converged one. Mirror
    descent from that start, stopped early, keeps what the measurements leave to noise close to
    independence (a discrepancy principle, with the level measured: the model's workload error
    has its minimum there where it has one). Post-processing of the measurements only.

    AIM, epsilon 1, all 3-way marginals, the model's mean L1 over seeds 0-4 (bench/HISTORY.md,
    "AIM's last fit"): converged fits end at 0.33-0.37 of the noise's loss on 6-attribute
    ADULT and 0.47-0.53 on ADULT-reduced, where stopping 0.1 above lowered the error on every
    seed; on binary16 (dense cells, little noise) they end at ~0.73 and the error only falls to
    convergence, so `below` leaves them alone.
    """

    below: float = 0.6
    margin: float = 0.1

    def checked(self) -> Refit:
        """These settings, validated.

        Raises:
            ValueError: a `below` or `margin` outside (0, 1].
        """
        return Refit(
            _checks.fraction(self.below, "refit below"), _checks.fraction(self.margin, "refit margin")
        )


@pytree_dataclass
class GraphicalModel(Family):
    """Private-PGM's graphical model (module docstring).

    Args:
        max_model_size: the junction tree's size cap in megabytes (the paper's MAX-SIZE, 80 MB),
            reached when the whole budget is spent.
        iters: mirror-descent iterations per update (warm-started); final_iters in the last.
            Both are caps: see `tol`.
        tol: each fit stops early once two consecutive blocks of 50 iterations each lower the
            loss by at most this fraction of it; None runs every iteration. The default 1e-2
            cut ~40% of the iterations on 6-attribute ADULT at unchanged workload error
            (bench/bench_aim.py).
        refit: the last fit's guard against fitting the noise (`Refit`); None keeps the
            warm-started fit.
    """

    max_model_size: float = static_field(default=80.0)
    iters: int = static_field(default=1000)
    final_iters: int = static_field(default=3000)
    tol: float | None = static_field(default=1e-2)
    refit: Refit | None = static_field(default=None)
    workload: MarginalWorkload | None = static_field(default=None)
    known_total: float | None = static_field(default=None)

    jittable: ClassVar[bool] = False
    candidates: ClassVar[tuple[str, ...]] = (MARGINALS,)
    relations: ClassVar[tuple[Neighboring, ...]] = (Neighboring.ADD_REMOVE, Neighboring.REPLACE_ONE)

    def bind(self, classes: tuple[ClassShape, ...], *, domain, public, n_records):
        """This model over the marginals it is measured on.

        Raises:
            ImportError: `mbi` is not installed; ValueError: bad settings or public data.
        """
        pgm.require_mbi()
        shape = single_class(classes, "GraphicalModel")
        if public is not None:
            raise ValueError("the GraphicalModel family uses no public data")
        _checks.positive_finite(self.max_model_size, "max_model_size")
        tol = None if self.tol is None else _checks.positive_finite(self.tol, "tol")
        pgm.prefetch()  # the first fit compiles while the records are counted
        return dataclasses.replace(
            self,
            max_model_size=float(self.max_model_size),
            iters=_checks.positive_int(self.iters, "iters"),
            final_iters=_checks.positive_int(self.final_iters, "final_iters"),
            tol=tol,
            refit=None if self.refit is None else self.refit.checked(),
            workload=shape.queries,
            known_total=None if n_records is None else float(n_records),
        )

    def init(self, key: Key) -> GraphicalState:
        del key  # nothing random
        return GraphicalState(None, ())

    def record(self, model: GraphicalState, measured: Measured, current, r) -> GraphicalState:
        del current, r
        return model._replace(measurements=model.measurements + host_measurements(measured, self.workload))

    def update(self, model: GraphicalState, t, key: Key, last: bool) -> tuple[GraphicalState, int]:
        """Mirror descent on every measurement so far, warm-started (final_iters if `last`, and
        then the `refit` where it applies)."""
        del t, key  # deterministic
        iters = self.final_iters if last else self.iters
        fitted = pgm.estimate(
            self.workload.sizes,
            model.measurements,
            total=self.known_total,
            iters=iters,
            warm_start=model.fitted,
            tol=self.tol,
        )
        if last and self.refit is not None:
            converged = pgm_marginals.residual_ratio(_marginals_of(fitted), model.measurements)
            if converged < self.refit.below:
                fitted = pgm.refit(
                    self.workload.sizes,
                    model.measurements,
                    total=self.known_total,
                    iters=iters,
                    tol=self.tol,
                    discrepancy=converged + self.refit.margin,
                )
        return model._replace(fitted=fitted), 0

    def _fractions(self, model: GraphicalState, eligible: np.ndarray) -> np.ndarray:
        """The model's marginals of the eligible candidates (uniform before its first fit)."""
        if model.fitted is None:
            cells = np.asarray(self.workload.cells, np.float64)
            return np.where(
                np.repeat(eligible, self.workload.cells), np.repeat(1.0 / cells, self.workload.cells), 0.0
            )
        out = np.zeros(self.workload.n_queries, np.float64)
        marginals = _marginals_of(model.fitted)
        for i in np.flatnonzero(eligible):
            start = self.workload.offsets[i]
            out[start : start + self.workload.cells[i]] = marginals.marginal(self.workload.cliques[i])
        return out

    def candidate_answers(self, model: GraphicalState, eligible: np.ndarray) -> np.ndarray:
        """(n_queries,) float64 answers of the `eligible` marginals (0 elsewhere): fractions under
        replace-one, the model's counts (its marginals times its estimated total) under
        add-remove. Only those marginals are computed: one outside the tree costs an einsum."""
        fractions = self._fractions(model, np.asarray(eligible, bool))
        if self.known_total is not None:
            return fractions
        return (0.0 if model.fitted is None else model.fitted.total) * fractions

    def answers(self, model: GraphicalState) -> np.ndarray:
        return self.candidate_answers(model, np.ones(len(self.workload), bool))

    def output_answers(self, model: GraphicalState) -> np.ndarray:
        """(n_queries,) float64 the model's marginals (fractions)."""
        return self._fractions(model, np.ones(len(self.workload), bool))

    def eligible(self, model: GraphicalState, budget_used: float) -> np.ndarray:
        """The marginals whose junction tree, with those measured so far, stays under
        `max_model_size * budget_used` megabytes (the 1-way marginals when none does)."""
        limit = self.max_model_size * budget_used
        measured = list({m.clique for m in model.measurements})
        mask = np.array(
            [pgm.model_size_mb(self.workload.sizes, [*measured, c]) <= limit for c in self.workload.cliques]
        )
        if not mask.any():  # nothing fits the model yet: the 1-way marginals always do
            mask[[i for i, c in enumerate(self.workload.cliques) if len(c) == 1]] = True
        return mask

    def default_rows(self, model: GraphicalState) -> int:
        """The model's estimated record count (add-remove)."""
        return max(1, round(float(model.fitted.total)))

    def conditioned(
        self, model: GraphicalState, weights: dict[int, np.ndarray]
    ) -> tuple[GraphicalState, float]:
        """The fitted model with the evidence clamped in its junction tree (`pgm_marginals.conditioned`)."""
        fitted, probability = pgm_marginals.conditioned(model.fitted, weights)
        return model._replace(fitted=fitted), probability

    def release(self, model: GraphicalState, key: Key, rows: int) -> Array:
        plan = _marginals_of(model.fitted).sampling_plan()
        return pgm_sampling.sample(key, plan, self.workload.sizes, rows, tracked=self.workload.cliques)


_last_marginals: list = [None, None]


def _marginals_of(model: Any) -> pgm_marginals.ModelMarginals:
    """The model's exact marginals, reused while the same model object is asked again (each
    fitted model is scored in the next round after the annealing check of this one)."""
    if _last_marginals[0] is not model:
        _last_marginals[:] = [model, pgm_marginals.ModelMarginals(model)]
    return _last_marginals[1]
