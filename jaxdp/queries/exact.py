"""Exact marginal answers on records (integer codes).

Counts are what add/remove-one mechanisms measure; fractions (counts / n, n public) are what
replace-one mechanisms measure.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.queries.workload import MarginalWorkload
from jaxdp.types import Array


def marginal_counts(codes: Array, workload: MarginalWorkload, dtype=jnp.float32) -> Array:
    """Counts of every counting query of the workload.

    Args:
        codes: (n_records, n_categorical) int32 codes.
        workload: the marginals to answer.
        dtype: output dtype (float32 for noise addition; int32 for exact integer counts).

    Returns:
        (workload.n_queries,) counts, marginals concatenated in workload order.
    """
    ones = jnp.ones(codes.shape[0], dtype)
    answers = []
    for i, clique in enumerate(workload.cliques):
        strides = jnp.asarray(workload.strides(i), jnp.int32)
        cell = jnp.sum(codes[:, list(clique)] * strides[None, :], axis=1)
        answers.append(jax.ops.segment_sum(ones, cell, num_segments=workload.cells[i]))
    return jnp.concatenate(answers)


def marginal_fractions(codes: Array, workload: MarginalWorkload) -> Array:
    """Normalised answers (counts / n_records), the replace-one view."""
    return marginal_counts(codes, workload) / codes.shape[0]
