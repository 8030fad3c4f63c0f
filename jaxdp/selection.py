"""Private selection of what to measure next, shared by every adaptive mechanism.

Two rules over a marginal workload, both the exponential mechanism via `noise.select`: exact on
scores quantised to a public grid (noise="discrete") or Gumbel-max on score / scale ("float"):

- `select_marginal` (the marginal trick, GEM/PEP Appendix A.1): the score of a marginal is its
  largest cell error |a_c(P) - a_c(D)|; a whole marginal is then measured.
- `select_query`: the score of a single counting query is its error; one query is measured.

Score sensitivity: a record moves each cell fraction by at most 1/n under replace-one (n
public), and each count by at most 1 under add/remove, so the error of a cell, and the maximum
over the cells of a marginal, move by at most that much (`score_sensitivity`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp import noise as noise_module
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive


def score_sensitivity(relation: Neighboring, n_records: int) -> float:
    """Sensitivity of a cell's (or a marginal's max-cell) absolute error."""
    return 1.0 if relation is Neighboring.ADD_REMOVE else 1.0 / n_records


def max_cell_errors(true_answers: Array, synthetic_answers: Array, workload: MarginalWorkload) -> Array:
    """(n_marginals,) the largest absolute cell error of each marginal of the workload."""
    errors = jnp.abs(true_answers - synthetic_answers)
    segments = jnp.asarray(workload.marginal_of_query())
    return jax.ops.segment_max(errors, segments, num_segments=len(workload), indices_are_sorted=True)


def select_marginal(
    key: Key,
    true_answers: Sensitive,
    synthetic_answers: Array,
    workload: MarginalWorkload,
    eligible: Array,
    *,
    scale: float,
    sensitivity: float,
    noise: str,
) -> tuple[Array, Charge]:
    """Pick a marginal with large error (exponential mechanism on the max cell error).

    Args:
        key: SELECT stream key of the round.
        true_answers: private (workload.n_queries,) answers in the mechanism's units.
        synthetic_answers: (workload.n_queries,) answers of the current synthetic distribution.
        workload: the marginals.
        eligible: (n_marginals,) bool; e.g. not measured yet. At least one must be True.
        scale: 2 sensitivity / epsilon, fixed by the plan (`accounting.gumbel_scale`).
        sensitivity: `score_sensitivity(relation, n)`.
        noise: "discrete" (exact exponential mechanism) or "float" (Gumbel-max), `noise.NOISES`.

    Returns:
        (int32 marginal index, Charge).

    Privacy:
        Exponential mechanism, epsilon = 2 sensitivity / scale, epsilon^2 / 8 zCDP.
    """
    scores = true_answers.map(max_cell_errors, synthetic_answers, workload)
    return noise_module.select(key, scores, scale=scale, sensitivity=sensitivity, noise=noise, mask=eligible)


def select_query(
    key: Key,
    true_answers: Sensitive,
    synthetic_answers: Array,
    eligible: Array,
    *,
    scale: float,
    sensitivity: float,
    noise: str,
) -> tuple[Array, Charge]:
    """Pick a single counting query with large error (exponential mechanism on |error|).

    Args as for `select_marginal`, with `eligible` of shape (n_queries,).

    Privacy:
        Exponential mechanism, epsilon = 2 sensitivity / scale, epsilon^2 / 8 zCDP.
    """
    scores = true_answers.map(lambda a: jnp.abs(a - synthetic_answers))
    return noise_module.select(key, scores, scale=scale, sensitivity=sensitivity, noise=noise, mask=eligible)
