"""Selection rules: the private "select" step of Adaptive Measurements, as public parts.

A rule scores every candidate of a marginal workload (its marginals, or its single counting
queries) by the error of the current synthetic answers against the true ones, and picks k of them
with the exponential mechanism (`noise.select` for k = 1; k without replacement, report-noisy-
top-k, by `noise.select_top_k` otherwise): exact on scores quantised to a public grid by default
(noise="discrete"), Gumbel-max under noise="float".

- `MaxError`: marginals by their largest cell error (the marginal trick; MWEM, PEP, RAP, GEM);
  sensitivity 1/n.
- `L1Error`: marginals by the sum of their cell errors (AIM's quality score without its weights
  and noise penalty); sensitivity 2/n.
- `QueryError`: single counting queries by their error (MWEM and PEP without the marginal
  trick); sensitivity 1/n.

A rule is built with its settings (`k`) and calibrated by `jaxdp.adaptive` (or a preset): its
scale follows from the round's selection budget and the score sensitivity under the relation. A
new rule subclasses `Rule` (decorated with `jaxdp.types.pytree_dataclass`) with its `scores`, the
`unit_sensitivity` of its score (times 1/n) and its `candidates` ("marginals" or "queries").
The true answers are fractions, counts / n with n public (replace-one): a replaced record moves
each fraction by at most 1/n, so each cell error, their maximum, and a query's error move by at
most 1/n, and a marginal's L1 error by at most 2/n (one cell loses the record, one gains it).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxdp import noise as noise_module
from jaxdp.accounting import SELECT_PRIMITIVE, TOP_K_PRIMITIVE, PlannedCharge, gumbel_scale
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field

MARGINALS = "marginals"
QUERIES = "queries"


def score_sensitivity(relation: Neighboring, n_records: int) -> float:
    """Sensitivity of a cell's (or a marginal's max-cell) absolute error."""
    return 1.0 if relation is Neighboring.ADD_REMOVE else 1.0 / n_records


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


@pytree_dataclass
class Rule:
    """What every rule shares: k picks per round, calibration, and the private draw."""

    k: int = static_field(default=1)
    scale: float | None = static_field(default=None)
    sensitivity: float | None = static_field(default=None)
    noise: str = static_field(default="discrete")

    candidates = MARGINALS
    unit_sensitivity = 1.0  # in fractions, times 1/n

    def scores(self, true_answers: Array, current: Array, workload: MarginalWorkload) -> Array:
        """(n_candidates,) the score of each candidate (higher: more worth measuring), from the
        true answers in fractions; it must move by at most unit_sensitivity / n between
        neighbouring datasets."""
        raise NotImplementedError

    def n_candidates(self, workload: MarginalWorkload) -> int:
        return len(workload) if self.candidates == MARGINALS else workload.n_queries

    def calibrate(self, rho: float, n_records: int, noise: str, times: int):
        """(this rule with its scale fixed to spend `rho` per round, its planned charge).

        Privacy:
            k exponential mechanisms at epsilon = 2 sensitivity / scale each, k epsilon^2 / 8
            zCDP per round (Cesar & Rogers 2021), `times` rounds.
        """
        sensitivity = self.unit_sensitivity / n_records
        scale = gumbel_scale(sensitivity, rho, count=self.k)
        primitive = (SELECT_PRIMITIVE if self.k == 1 else TOP_K_PRIMITIVE)[noise]
        charge = PlannedCharge("select", primitive, sensitivity, scale, count=self.k, times=times)
        return dataclasses.replace(self, scale=scale, sensitivity=sensitivity, noise=noise), charge

    def __call__(
        self,
        key: Key,
        counts: Sensitive,
        n_records: int,
        current: Array,
        workload: MarginalWorkload,
        eligible: Array,
    ) -> tuple[Array, Charge]:
        """Pick k eligible candidates with large error.

        Args:
            key: the round's SELECT stream key.
            counts: private (n_queries,) int32 true counts of the workload.
            n_records: n (public under replace-one): the answers are counts / n.
            current: (n_queries,) answers of the current synthetic distribution (fractions).
            workload: the marginals.
            eligible: (n_candidates,) bool, e.g. not measured yet; at least k True.

        Returns:
            ((k,) int32 candidate indices, Charge).

        Privacy:
            Reads the true counts through the scores; k exponential mechanisms (see `calibrate`).
        """
        scores = counts.map(lambda c: self.scores(c / n_records, current, workload))
        if self.k == 1:
            chosen, charge = noise_module.select(
                key, scores, scale=self.scale, sensitivity=self.sensitivity, noise=self.noise, mask=eligible
            )
            return chosen[None], charge
        return noise_module.select_top_k(
            key,
            scores,
            k=self.k,
            scale=self.scale,
            sensitivity=self.sensitivity,
            noise=self.noise,
            mask=eligible,
        )


@pytree_dataclass
class MaxError(Rule):
    """Marginals scored by their largest cell error (the marginal trick; MWEM, PEP, RAP, GEM).

    Args:
        k: marginals picked per round (k > 1: report-noisy-top-k without replacement).
    """

    def scores(self, true_answers, current, workload):
        return max_cell_errors(true_answers, current, workload)


@pytree_dataclass
class L1Error(Rule):
    """Marginals scored by their L1 error, sum over cells of |true - synthetic| (AIM's quality
    score without its per-marginal weights and noise penalty). Sensitivity 2/n."""

    unit_sensitivity = 2.0

    def scores(self, true_answers, current, workload):
        return l1_errors(true_answers, current, workload)


@pytree_dataclass
class QueryError(Rule):
    """Single counting queries scored by their absolute error (MWEM and PEP without the marginal
    trick)."""

    candidates = QUERIES

    def scores(self, true_answers, current, workload):
        del workload
        return jnp.abs(true_answers - current)
