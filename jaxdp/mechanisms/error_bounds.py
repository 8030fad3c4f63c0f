"""AIM's uncertainty quantification (its Section 5): for every workload marginal, an upper
confidence bound on the L1 error of the synthetic data. Theorem 2/3 and Corollary 1 where a
measurement supports the marginal, else Theorem 4 and Corollary 2 from the last round in which
it was a candidate. The bounds read released quantities only (noisy measurements, the selection
records): they cost no privacy.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from jaxdp.mechanisms._candidates import candidate_index, workload_spans
from jaxdp.queries import MarginalWorkload
from jaxdp.queries.exact import host_marginal_counts
from jaxdp.selection.host_rule import HostRule
from jaxdp.selection.scores import SQRT_2_OVER_PI


class ErrorBounds(NamedTuple):
    """Per workload marginal: `bound` on ||M_r(D) - M_r(D_hat)||_1 in counts, holding with
    probability >= `confidence` for each marginal; `supported`: True where Theorem 2/3 +
    Corollary 1 applied (else Theorem 4 + Corollary 2); `normalised`: bound / estimated total."""

    bound: np.ndarray
    supported: np.ndarray
    normalised: np.ndarray
    confidence: float


def bounds_of(
    rule: HostRule,
    workload: MarginalWorkload,
    state: Any,
    confidence: float,
    *,
    answered: np.ndarray | None,
    synthetic: np.ndarray | None,
) -> ErrorBounds:
    """AIM's Section 5 bounds for a run's final state (an `AnnealedState`; `Annealed.error_bounds`
    is the entry point) against `answered`, the final model's flat answers to the candidates
    (used when `synthetic` is None), or `synthetic`, the released codes. confidence is in (0, 1),
    checked by the caller.
    """
    candidates = rule.candidates
    failure = 1.0 - confidence
    lam = math.sqrt(math.log(1.0 / failure))  # Theorem 3: 1 - exp(-lambda^2)
    lam1 = math.sqrt(2.0 * math.log(2.0 / failure))  # Theorem 4, failure split evenly
    lam2 = math.log(2.0 / failure)
    if synthetic is None:
        synth = workload_spans(answered, candidates, workload)
        total = float(synth[: workload.cells[0]].sum())
    else:
        codes = np.asarray(synthetic)
        if state.compressed is not None:
            codes = np.stack([state.compressed.codes(a)[codes[:, a]] for a in range(codes.shape[1])], 1)
        synth = host_marginal_counts(codes, workload).astype(np.float64)
        total = float(len(codes))
    index = candidate_index(candidates)
    bounds, supported = [], []
    for j, clique in enumerate(workload.cliques):
        span = slice(workload.offsets[j], workload.offsets[j] + workload.cells[j])
        n_r = workload.cells[j]
        estimate = _weighted_average(clique, state.measurements, workload.sizes)
        if estimate is not None:
            y_bar, sigma_bar = estimate
            bound = (
                np.abs(synth[span] - y_bar).sum()
                + math.sqrt(2.0 * math.log(2.0)) * _summed(sigma_bar, n_r)
                + lam * math.sqrt(2.0 * _summed(np.square(sigma_bar), n_r))
            )
            bounds.append(bound)
            supported.append(True)
            continue
        t = int(state.last_round[j])
        if t < 0:
            bounds.append(math.inf)
            supported.append(False)
            continue
        rec = state.records[t]
        w_r = rule.weights[index[clique]]
        w_sel = rule.weights[rec.selected]
        n_sel = candidates.cells[rec.selected]
        b_r = (
            w_sel * rec.selected_error
            + SQRT_2_OVER_PI * rec.sigma * (w_r * n_r - w_sel * n_sel)
            + 2.0 * rec.score_sensitivity / rec.epsilon * math.log(rec.n_eligible)
        )
        theorem4 = (
            b_r + lam1 * rec.sigma * math.sqrt(n_sel) + lam2 * 2.0 * rec.score_sensitivity / rec.epsilon
        ) / w_r
        model_before = state.last_model_counts[span].astype(np.float64)
        bounds.append(np.abs(synth[span] - model_before).sum() + theorem4)
        supported.append(False)
    bound = np.asarray(bounds, np.float64)
    return ErrorBounds(bound, np.asarray(supported), bound / max(total, 1.0), confidence)


def _summed(scale: float | np.ndarray, cells: int) -> float:
    """The sum over a marginal's `cells` cells of a per-cell quantity, given as one value for
    all of them or one per cell."""
    return float(np.sum(scale)) if np.ndim(scale) else scale * cells


def _weighted_average(clique, measurements, sizes) -> tuple[np.ndarray, float | np.ndarray] | None:
    """Theorem 2: inverse-variance average of every measurement containing `clique`, projected
    onto it, and the noise scale of the average (one for every cell, or one per cell when a
    measurement's cells differ in scale); None if no measurement contains it."""
    n_r = math.prod(sizes[a] for a in clique)
    total, precision = None, 0.0
    for m in measurements:
        if not set(clique) <= set(m.clique):
            continue
        shape = [sizes[a] for a in m.clique]
        drop = tuple(i for i, a in enumerate(m.clique) if a not in clique)
        projected = np.asarray(m.noisy, np.float64).reshape(shape).sum(axis=drop).reshape(-1)
        if np.ndim(m.sigma):  # per-cell scales: the projection's variance sums its cells'
            weight = 1.0 / m.variances().reshape(shape).sum(axis=drop).reshape(-1)
        else:
            weight = n_r / (math.prod(shape) * m.sigma**2)  # 1 / per-cell variance of the projection
        total = projected * weight if total is None else total + projected * weight
        precision = precision + weight
    if total is None:
        return None
    return total / precision, np.sqrt(1.0 / precision) if np.ndim(precision) else math.sqrt(1.0 / precision)
