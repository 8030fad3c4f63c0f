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
from jaxdp.queries import ExactPlan, MarginalWorkload, exact_plan, marginal_counts


def _record_bucket(n: int) -> int:
    """n rounded up to m * 2^e with 8 <= m < 16: at most 12.5% padding, a handful of shapes."""
    shift = max(0, n.bit_length() - 4)
    return -(-n >> shift) << shift


@jax.jit
def _padded_counts(
    codes: jax.Array, plan: ExactPlan, first_cells: jax.Array, padding: jax.Array
) -> jax.Array:
    # Each all-zero padding record added one count to the first cell of every marginal.
    return marginal_counts(codes, plan, jnp.int32).at[first_cells].add(-padding)


def _counts(codes: np.ndarray, workload: MarginalWorkload) -> np.ndarray:
    """(n_queries,) int32 exact counts on the host.

    The plan is an argument of the compiled program, not a constant (ADULT's 364 3-way marginals
    have 20.9 M cells: an index constant of that size took seconds to compile), and the records
    are padded with all-zero rows to a bucket of sizes, so a real table and a synthetic one of a
    similar size share one program, and a cached program shows the bucket, not the record count.
    """
    n = codes.shape[0]
    padding = _record_bucket(n) - n
    padded = np.concatenate([np.asarray(codes, np.int32), np.zeros((padding, codes.shape[1]), np.int32)])
    first_cells = np.asarray(workload.offsets, np.int32)
    return np.asarray(_padded_counts(padded, exact_plan(workload), first_cells, np.int32(padding)))


def fractions(data: Dataset, workload: MarginalWorkload) -> np.ndarray:
    """(workload.n_queries,) float64 normalised answers of the workload on `data`."""
    return _counts(data.codes, workload) / len(data)


def _summarise(cells: np.ndarray, diff: np.ndarray, workload: MarginalWorkload) -> dict[str, float]:
    """max_abs, mean_l1 and rmse from the absolute differences `diff` at the flat query indices
    `cells`; every other counting query of the workload differs by 0."""
    marginal = np.searchsorted(np.asarray(workload.offsets), cells, side="right") - 1
    per_marginal_l1 = np.bincount(marginal, weights=diff, minlength=len(workload))
    return {
        "max_abs": float(diff.max(initial=0.0)),
        "mean_l1": float(per_marginal_l1.mean()),
        "rmse": float(np.sqrt(diff @ diff / workload.n_queries)),
    }


def answer_errors(
    true_answers: np.ndarray, estimated_answers: np.ndarray, workload: MarginalWorkload
) -> dict[str, float]:
    """max_abs, mean_l1 and rmse between two normalised answer vectors of `workload`."""
    true_answers = np.asarray(true_answers, np.float64)
    estimated_answers = np.asarray(estimated_answers, np.float64)
    if true_answers.shape != (workload.n_queries,) or estimated_answers.shape != true_answers.shape:
        raise ValueError(f"answer vectors must have shape ({workload.n_queries},)")
    diff = np.abs(true_answers - estimated_answers)
    cells = np.flatnonzero(diff)
    return _summarise(cells, diff[cells], workload)


def workload_errors(real: Dataset, synthetic: Dataset, workload: MarginalWorkload) -> dict[str, float]:
    """Errors of a synthetic table's answers against the real table's, over `workload`."""
    if real.domain.sizes != synthetic.domain.sizes:
        raise ValueError("real and synthetic tables must share the same categorical domain")
    real_counts, synthetic_counts = _counts(real.codes, workload), _counts(synthetic.codes, workload)
    # Only cells non-empty in either table can differ (3% of ADULT's 20.9 M 3-way cells): the
    # float64 maths runs on those alone.
    cells = np.flatnonzero(real_counts | synthetic_counts)
    diff = np.abs(real_counts[cells] / len(real) - synthetic_counts[cells] / len(synthetic))
    return _summarise(cells, diff, workload)


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
