"""What a measurement hands a family: the round's released measurements (post-processing only)."""

from __future__ import annotations

from typing import NamedTuple

from jaxdp.types import Array


class Measured(NamedTuple):
    """One round's released measurements of k candidates (public: noise was already added).

    marginal: (k,) int32 the workload marginal of each.
    cell: (k,) int32 the measured cell of a single-query measurement, -1 for a whole marginal.
    index: (k, width) int32 positions of the values in the workload's flat answers (the padding
        of a marginal shorter than `width` points one past the end, n_queries).
    values: (k, width) float32 noisy answers (fractions: noisy counts / n), padding included.
    """

    marginal: Array
    cell: Array
    index: Array
    values: Array
