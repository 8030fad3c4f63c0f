"""Error metrics of released answers or synthetic records against the real data.

All metrics compare normalised answers (each table's counts divided by its own record count):
- max_abs: the largest absolute error over all counting queries of the workload;
- mean_l1: the mean over marginals of the L1 distance between the normalised marginals
  (AIM's workload error, unweighted);
- rmse: root mean squared error over all counting queries.
Counts are exact integers; the division and the error sums are done in float64 on the host.

These use the true answers: they are for evaluation by the data holder, not for release.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.domain import Dataset
from jaxdp.queries import MarginalWorkload, marginal_counts

_counts_jit = jax.jit(marginal_counts, static_argnums=(1, 2))


def _counts(codes: np.ndarray, workload: MarginalWorkload) -> np.ndarray:
    return np.asarray(_counts_jit(jnp.asarray(codes, jnp.int32), workload, jnp.int32), dtype=np.float64)


def fractions(data: Dataset, workload: MarginalWorkload) -> np.ndarray:
    """(workload.n_queries,) float64 normalised answers of the workload on `data`."""
    return _counts(data.codes, workload) / len(data)


def answer_errors(
    true_answers: np.ndarray, estimated_answers: np.ndarray, workload: MarginalWorkload
) -> dict[str, float]:
    """max_abs, mean_l1 and rmse between two normalised answer vectors of `workload`."""
    true_answers = np.asarray(true_answers, np.float64)
    estimated_answers = np.asarray(estimated_answers, np.float64)
    if true_answers.shape != (workload.n_queries,) or estimated_answers.shape != true_answers.shape:
        raise ValueError(f"answer vectors must have shape ({workload.n_queries},)")
    diff = np.abs(true_answers - estimated_answers)
    per_marginal_l1 = np.add.reduceat(diff, np.asarray(workload.offsets))
    return {
        "max_abs": float(diff.max()),
        "mean_l1": float(per_marginal_l1.mean()),
        "rmse": float(np.sqrt(np.mean(diff**2))),
    }


def workload_errors(real: Dataset, synthetic: Dataset, workload: MarginalWorkload) -> dict[str, float]:
    """Errors of a synthetic table's answers against the real table's, over `workload`."""
    if real.domain.sizes != synthetic.domain.sizes:
        raise ValueError("real and synthetic tables must share the same categorical domain")
    return answer_errors(fractions(real, workload), fractions(synthetic, workload), workload)


def best_mixture_error(real: Dataset, public: Dataset, workload: MarginalWorkload) -> float:
    """The smallest max error any reweighting of the public records can reach on `workload`.

    min over distributions mu on the public records of max_q |q(real) - sum_x mu_x q(x)|: the
    floor PMW-Pub and PEP-Pub cannot beat (Liu et al. 2021). Solved as a linear program with
    HiGHS (scipy) on the sparse query-by-record incidence matrix. Uses the real data: a
    diagnostic for the data holder, not a private release.
    """
    from scipy import optimize, sparse  # scipy ships with jax; only this diagnostic needs it

    if real.domain.sizes != public.domain.sizes:
        raise ValueError("real and public tables must share the same categorical domain")
    codes = public.codes.astype(np.int64)
    n_pub, m = len(public), workload.n_queries
    rows = np.concatenate(
        [
            offset + codes[:, list(clique)] @ np.asarray(workload.strides(i))
            for i, (clique, offset) in enumerate(zip(workload.cliques, workload.offsets, strict=True))
        ]
    )
    cols = np.tile(np.arange(n_pub), len(workload))
    incidence = sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(m, n_pub))
    target = fractions(real, workload)
    # variables [mu (n_pub), t]; minimise t s.t. +-(A mu - a) <= t, sum mu = 1, mu >= 0
    ones = sparse.csr_matrix(np.ones((m, 1)))
    a_ub = sparse.vstack([sparse.hstack([incidence, -ones]), sparse.hstack([-incidence, -ones])])
    b_ub = np.concatenate([target, -target])
    a_eq = sparse.csr_matrix(np.concatenate([np.ones(n_pub), [0.0]])[None, :])
    cost = np.zeros(n_pub + 1)
    cost[-1] = 1.0
    result = optimize.linprog(
        cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=(0, None), method="highs"
    )
    if not result.success:
        raise RuntimeError(f"best-mixture LP did not solve: {result.message}")
    return float(result.x[-1])
