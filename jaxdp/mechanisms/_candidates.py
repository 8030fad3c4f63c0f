"""Where each candidate marginal sits in the flat answers of a host-scheduled run
(`jaxdp.mechanisms.host_loop`), and the workload's marginals among the candidates."""

from __future__ import annotations

import functools

import numpy as np

from jaxdp.families.histogram import MarginalPadding
from jaxdp.queries import MarginalWorkload


@functools.lru_cache(maxsize=8)
def gathered_cells(candidates: MarginalWorkload) -> np.ndarray:
    """(n_candidates, width) each candidate's cells in the flat answers, padded with n_queries
    (`MarginalPadding`, as the fixed-budget measurement lays them out)."""
    return np.asarray(MarginalPadding.of(candidates).gather)


@functools.lru_cache(maxsize=8)
def candidate_index(candidates: MarginalWorkload) -> dict[tuple[int, ...], int]:
    return {c: i for i, c in enumerate(candidates.cliques)}


def workload_mask(candidates: MarginalWorkload, workload: MarginalWorkload) -> np.ndarray:
    index = candidate_index(candidates)
    mask = np.zeros(len(candidates), bool)
    mask[[index[c] for c in workload.cliques]] = True
    return mask


def workload_spans(flat: np.ndarray, candidates: MarginalWorkload, workload: MarginalWorkload) -> np.ndarray:
    """The workload's marginals, in its order, out of the candidates' flat answers."""
    index = candidate_index(candidates)
    starts = [candidates.offsets[index[c]] for c in workload.cliques]
    return np.concatenate([flat[s : s + n] for s, n in zip(starts, workload.cells, strict=True)])
