"""Best-response oracles over a categorical domain, for DualQuery and FEM.

Both mechanisms need, each round, a record that maximises a weighted count of counting queries
plus a linear perturbation of its one-hot encoding:

    best_response(w, eta) = argmax_{x in X}  sum_q w[q] q(x) + <onehot(x), eta>

where `w` is a (n_queries,) weight per counting query of the workload (in the workload's flat
cell order; DualQuery: signed counts of the queries sampled this round; FEM: signed counts of
the queries selected so far) and `eta` is a (width,) perturbation, width = sum of the attribute
sizes (FEM: Exp(sigma) noise; DualQuery: a tiny random tie-break). The one-hot column of value v
of attribute a is `offsets[a] + v`.

Two oracles with one interface, `best_responses(w, etas) -> (codes, optimal)`:

- `EnumerationOracle` scores every point of the domain as a dense tensor of shape `sizes`: the
  weights of each marginal are broadcast over the attributes outside it (as
  `DenseSupport.add_to_marginal` does), so the cost per call is O(n_marginals x n_cells) and no
  (n_cells x n_queries) matrix is formed. Exact. For domains up to `ENUMERATE_MAX_CELLS` cells.
- `MilpOracle` solves the integer program with HiGHS (`scipy.optimize.milp`) on the host, through
  `jax.pure_callback`, so a mechanism using it still runs under `lax.scan` with one compile. For
  domains too large to enumerate. See `solve_milp` for the formulation and its limits. The host
  callback makes this a CPU/GPU-only option (`make_oracle` refuses it on a TPU backend, where
  jaxdp keeps compiled loops free of host callbacks) and serialises the loop on the host; the
  enumeration oracle has no callback.

Everything here is post-processing: the weights and perturbations are public functions of
released selections and public randomness, so no input is private.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.families._sampling import support_rows
from jaxdp.queries import MarginalWorkload, workload_queries
from jaxdp.types import Array, Key, pytree_dataclass, static_field

# Dense objective tensors above this size (float32, 64 MiB) are left to the integer program:
# enumeration costs O(n_marginals x n_cells) per best response.
ENUMERATE_MAX_CELLS = 1 << 24
ORACLES = ("auto", "enumerate", "milp")


class DomainTooLargeToEnumerateError(ValueError):
    """The domain has too many points for the enumeration oracle."""


def one_hot_offsets(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Start of each attribute's columns in the one-hot layout (width = sum(sizes))."""
    return tuple(int(x) for x in np.concatenate([[0], np.cumsum(sizes)[:-1]]))


def objective(workload: MarginalWorkload, codes: np.ndarray, weights, perturbation) -> np.ndarray:
    """Host reference: the objective of each record, sum_q w[q] q(x) + <onehot(x), eta>.

    Args:
        workload: the marginals (the query index space of `weights`).
        codes: (n_records, n_attributes) int codes.
        weights: (n_queries,) query weights.
        perturbation: (width,) one-hot perturbation.

    Returns:
        (n_records,) float64 objective values.
    """
    codes = np.asarray(codes, np.int64).reshape(-1, len(workload.sizes))
    w = np.asarray(weights, np.float64)
    eta = np.asarray(perturbation, np.float64)
    total = np.zeros(codes.shape[0])
    for i, (clique, offset) in enumerate(zip(workload.cliques, workload.offsets, strict=True)):
        total += w[offset + codes[:, list(clique)] @ np.asarray(workload.strides(i))]
    cols = codes + np.asarray(one_hot_offsets(workload.sizes))
    return total + eta[cols].sum(axis=1)


@pytree_dataclass
class EnumerationOracle:
    """Exact best responses by scoring every point of an enumerable domain."""

    workload: MarginalWorkload = static_field()

    @classmethod
    def of(cls, workload: MarginalWorkload, max_cells: int = ENUMERATE_MAX_CELLS) -> EnumerationOracle:
        cells = math.prod(workload.sizes)
        if cells > max_cells:
            raise DomainTooLargeToEnumerateError(
                f"the domain has {cells:.3g} points, more than the {max_cells:.3g} the enumeration "
                "oracle scores per best response; use oracle='milp'"
            )
        return cls(workload)

    def query_scores(self, weights: Array) -> Array:
        """(n_cells,) sum_q w[q] q(x) for every domain point x (row-major over `sizes`)."""
        sizes = self.workload.sizes
        total = jnp.zeros(sizes, jnp.float32)
        for i, clique in enumerate(self.workload.cliques):
            shape = [sizes[a] if a in clique else 1 for a in range(len(sizes))]
            start = self.workload.offsets[i]
            total = total + weights[start : start + self.workload.cells[i]].reshape(shape)
        return total.reshape(-1)

    def perturbation_scores(self, perturbation: Array) -> Array:
        """(n_cells,) <onehot(x), eta> for every domain point x."""
        sizes = self.workload.sizes
        total = jnp.zeros(sizes, jnp.float32)
        for a, start in enumerate(one_hot_offsets(sizes)):
            shape = [sizes[a] if b == a else 1 for b in range(len(sizes))]
            total = total + perturbation[start : start + sizes[a]].reshape(shape)
        return total.reshape(-1)

    def best_responses(self, weights: Array, perturbations: Array) -> tuple[Array, Array]:
        """Best response for each perturbation.

        Args:
            weights: (n_queries,) float32 query weights.
            perturbations: (n_samples, width) float32, one perturbation per best response.

        Returns:
            ((n_samples, n_attributes) int32 codes, (n_samples,) bool all True: exact).
        """
        base = self.query_scores(weights)

        def one(eta):
            flat = jnp.argmax(base + self.perturbation_scores(eta))
            return jnp.stack(jnp.unravel_index(flat, self.workload.sizes)).astype(jnp.int32)

        codes = jax.lax.map(one, perturbations)
        return codes, jnp.ones(perturbations.shape[0], bool)


class MilpResult(NamedTuple):
    """codes: (n_attributes,) int32 best response; value: its objective (float64, recomputed
    exactly on the host); optimal: whether HiGHS proved optimality (within `mip_rel_gap`)."""

    codes: np.ndarray
    value: float
    optimal: bool


@functools.lru_cache(maxsize=16)
def _query_table(workload: MarginalWorkload) -> tuple[np.ndarray, np.ndarray]:
    queries = workload_queries(workload)
    return np.asarray(queries.attrs, np.int64), np.asarray(queries.values, np.int64)


def solve_milp(
    workload: MarginalWorkload,
    weights,
    perturbation,
    *,
    time_limit: float | None = None,
    mip_rel_gap: float = 1e-6,
) -> MilpResult:
    """Best response by mixed-integer programming (HiGHS via `scipy.optimize.milp`). Host only.

    Formulation: a binary x[a, v] per attribute value (one-hot column offsets[a] + v) with
    sum_v x[a, v] = 1 for every attribute a; for every query q with w[q] != 0 (a cell of a
    marginal over attributes S_q asking for values y_q) a variable z_q in [0, 1] tied to the
    product of its literals by the standard linearisation

        z_q <= x[a, y_q[a]] for a in S_q,    z_q >= sum_{a in S_q} x[a, y_q[a]] - (|S_q| - 1),

    so z_q = q(x) at every integer x (z_q need not be declared integer). Maximise
    sum_q w[q] z_q + sum eta[a, v] x[a, v].

    Limits: the program has sum(sizes) binaries plus one continuous variable and |S_q| + 1
    constraints per weighted query; branch-and-bound time grows with attributes x weighted
    queries (FEM's weighted queries grow with the rounds). With `time_limit` set and reached,
    HiGHS's best feasible solution found so far is used (and `optimal` is False); if it found
    none, the record maximising the perturbation alone is returned. Timing-dependent results
    also make a run not replayable bit for bit. A best response that is not optimal costs
    accuracy, never privacy: the oracle only post-processes released selections.

    Args:
        workload: the marginals (the index space of `weights`).
        weights: (n_queries,) query weights; only the non-zero ones enter the program.
        perturbation: (width,) one-hot perturbation.
        time_limit: seconds per solve (None: no limit).
        mip_rel_gap: HiGHS's relative optimality gap at which to stop (0 for proven optimality).

    Returns:
        MilpResult.

    Raises:
        ImportError: scipy (with HiGHS, scipy >= 1.9) is not installed.
    """
    try:
        from scipy import optimize, sparse
    except ImportError as err:  # pragma: no cover - scipy ships with the test extra
        raise ImportError("the integer-program oracle needs scipy >= 1.9 (HiGHS): pip install scipy") from err

    sizes = workload.sizes
    offsets = np.asarray(one_hot_offsets(sizes))
    width, d = int(sum(sizes)), len(sizes)
    w = np.asarray(weights, np.float64).reshape(-1)
    eta = np.asarray(perturbation, np.float64).reshape(-1)
    if w.shape != (workload.n_queries,) or eta.shape != (width,):
        raise ValueError(f"weights must have shape ({workload.n_queries},), perturbation ({width},)")
    ids = np.flatnonzero(w)
    fallback = np.array([np.argmax(eta[o : o + s]) for o, s in zip(offsets, sizes, strict=True)])
    if ids.size == 0:  # nothing but the perturbation: separable, solved per attribute
        return MilpResult(fallback.astype(np.int32), float(objective(workload, fallback, w, eta)[0]), True)

    attrs_all, values_all = _query_table(workload)
    attrs, values = attrs_all[ids], values_all[ids]  # (m, k), -1 attrs are padding
    m = ids.size
    used = attrs >= 0
    lit_col = np.where(used, offsets[np.maximum(attrs, 0)] + values, 0)  # column of each literal
    n_lits = used.sum(axis=1)
    z_col = width + np.arange(m)

    # one-of rows: 0..d-1
    one_rows = np.repeat(np.arange(d), sizes)
    one_cols = np.arange(width)
    # upper rows: z_q - x_lit <= 0, one per literal
    q_idx, slot = np.nonzero(used)
    n_up = q_idx.size
    up_rows = d + np.arange(n_up)
    # lower rows: z_q - sum x_lit >= 1 - |S_q|, one per query
    low_rows = d + n_up + np.arange(m)
    rows = np.concatenate([one_rows, up_rows, up_rows, low_rows, low_rows[q_idx]])
    cols = np.concatenate([one_cols, z_col[q_idx], lit_col[q_idx, slot], z_col, lit_col[q_idx, slot]])
    data = np.concatenate([np.ones(width), np.ones(n_up), -np.ones(n_up), np.ones(m), -np.ones(n_up)])
    matrix = sparse.csr_array((data, (rows, cols)), shape=(d + n_up + m, width + m))
    lower = np.concatenate([np.ones(d), np.full(n_up, -np.inf), 1.0 - n_lits])
    upper = np.concatenate([np.ones(d), np.zeros(n_up), np.full(m, np.inf)])

    options = {"disp": False, "mip_rel_gap": float(mip_rel_gap)}
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    result = optimize.milp(
        c=-np.concatenate([eta, w[ids]]),
        integrality=np.concatenate([np.ones(width), np.zeros(m)]),
        bounds=optimize.Bounds(0.0, 1.0),
        constraints=optimize.LinearConstraint(matrix, lower, upper),
        options=options,
    )
    if result.x is None:
        codes = fallback
    else:
        x = result.x[:width]
        codes = np.array([np.argmax(x[o : o + s]) for o, s in zip(offsets, sizes, strict=True)])
    value = float(objective(workload, codes, w, eta)[0])
    return MilpResult(codes.astype(np.int32), value, bool(result.status == 0 and result.x is not None))


@pytree_dataclass
class MilpOracle:
    """Best responses by integer programming on the host (`solve_milp`), called from traced
    code through `jax.pure_callback` (one host round trip per call, solves run one after another).

    time_limit: seconds per solve, or None. mip_rel_gap: HiGHS's stopping gap.
    """

    workload: MarginalWorkload = static_field()
    time_limit: float | None = static_field(default=None)
    mip_rel_gap: float = static_field(default=1e-6)

    def _solve_batch(self, weights: np.ndarray, perturbations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        results = [
            solve_milp(self.workload, weights, eta, time_limit=self.time_limit, mip_rel_gap=self.mip_rel_gap)
            for eta in np.asarray(perturbations)
        ]
        codes = np.stack([r.codes for r in results]).astype(np.int32)
        return codes, np.array([r.optimal for r in results], dtype=bool)

    def best_responses(self, weights: Array, perturbations: Array) -> tuple[Array, Array]:
        """As `EnumerationOracle.best_responses`; `optimal` is False where a time limit cut a
        solve short."""
        n, d = perturbations.shape[0], len(self.workload.sizes)
        shapes = (jax.ShapeDtypeStruct((n, d), jnp.int32), jax.ShapeDtypeStruct((n,), jnp.bool_))
        return jax.pure_callback(self._solve_batch, shapes, weights, perturbations, vmap_method="sequential")


def make_oracle(
    workload: MarginalWorkload,
    oracle: str = "auto",
    *,
    time_limit: float | None = None,
    mip_rel_gap: float = 1e-6,
) -> EnumerationOracle | MilpOracle:
    """The oracle named by `oracle`: "enumerate", "milp", or "auto" (enumerate when the domain
    has at most `ENUMERATE_MAX_CELLS` points, else the integer program).

    Raises:
        ValueError: unknown name, or a time limit / gap out of range.
        DomainTooLargeToEnumerateError: "enumerate" on a domain that is too large.
    """
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {list(ORACLES)}, got {oracle!r}")
    number = isinstance(time_limit, int | float) and not isinstance(time_limit, bool)
    if time_limit is not None and not (number and math.isfinite(time_limit) and time_limit > 0):
        raise ValueError(f"time_limit must be a number of seconds > 0 or None, got {time_limit!r}")
    if not (isinstance(mip_rel_gap, int | float) and 0 <= mip_rel_gap < 1):
        raise ValueError(f"mip_rel_gap must be a number in [0, 1), got {mip_rel_gap!r}")
    if oracle == "auto":
        oracle = "enumerate" if math.prod(workload.sizes) <= ENUMERATE_MAX_CELLS else "milp"
    if oracle == "enumerate":
        return EnumerationOracle.of(workload)
    if jax.default_backend() == "tpu":
        # jaxdp keeps host callbacks out of compiled loops on TPUs (TPU-safe runs).
        raise ValueError(
            "the MILP oracle solves on the host inside the compiled loop (jax.pure_callback): "
            "a CPU/GPU option only; on a TPU use a domain of at most "
            f"{ENUMERATE_MAX_CELLS:,} cells (oracle='enumerate')"
        )
    limit = None if time_limit is None else float(time_limit)
    return MilpOracle(workload, limit, float(mip_rel_gap))


def multiset_answers(answer_sums: Array, filled: Array) -> Array:
    """(n_queries,) answers of the multiset of best responses so far (fractions of its records).

    Args:
        answer_sums: (n_queries,) each query summed over the filled records.
        filled: (capacity,) which record slots hold a best response.
    """
    return answer_sums / jnp.maximum(jnp.sum(filled), 1).astype(jnp.float32)


def sample_multiset(key: Key, records: Array, filled: Array, rows: int) -> Array:
    """(rows, n_attributes) int32 records from the filled slots (which come first), each slot
    repeated rows / filled times, rounded (`_sampling.support_rows`)."""
    return records[support_rows(key, filled.astype(jnp.float32), rows)]
