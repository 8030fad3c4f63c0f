"""Pieces every mechanism factory shares: budget plans, relations, sensitivities, inputs."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.accounting import CONVERSIONS, SELECT_PRIMITIVE, Plan
from jaxdp.domain import DataError, Dataset
from jaxdp.queries import (
    MarginalWorkload,
    MixedMarginalQueries,
    linear_threshold_answers,
    marginal_counts,
    mixed_marginal_answers,
    shard_records,
    sharded_marginal_counts,
)
from jaxdp.queries.sharded import AXIS, process_record_counts, spans_processes
from jaxdp.types import Array, Charge, Neighboring, Sensitive


def make_plan(epsilon: float | None, delta: float | None, rho: float | None, conversion: str) -> Plan:
    """The budget from either (epsilon, delta) or rho (exactly one of the two forms)."""
    if conversion == "pld":
        raise ValueError(
            "conversion 'pld' calibrates a built plan: give it to jaxdp.build or jaxdp.synthesize, "
            "which build the mechanism and then recalibrate its noise (jaxdp.pld)"
        )
    _checks.one_of(conversion, (*CONVERSIONS, "gdp"), "conversion")
    if rho is not None:
        if epsilon is not None:
            raise ValueError("give either epsilon (with delta) or rho, not both")
        if conversion == "gdp":
            raise ValueError("conversion 'gdp' calibrates an (epsilon, delta) budget: give epsilon and delta")
        return Plan.from_rho(rho)
    if epsilon is None or delta is None:
        raise ValueError("a budget needs epsilon and delta (or rho)")
    return Plan.from_epsilon_delta(epsilon, delta, conversion)


def as_relation(relation: Neighboring | str) -> Neighboring:
    """Accept the enum or its string value ("add-remove", "replace-one")."""
    if isinstance(relation, Neighboring):
        return relation
    values = [r.value for r in Neighboring]
    _checks.one_of(relation, values, "relation")
    return Neighboring(relation)


def require_categorical(data: Dataset, mechanism: str) -> None:
    numeric = [a.name for a in data.domain.numeric]
    if numeric:
        raise DataError(
            f"{mechanism} works on categorical attributes; numeric column(s) {numeric} must be "
            "declared categorical (binned with public edges) or synthesised with rap++"
        )


# Counts are accumulated in float32, exact only up to 2^24: beyond it one record could move a
# count by more than the declared sensitivity of 1.
MAX_RECORDS = 2**24


def record_count(data: Dataset, mesh: Mesh | None = None) -> int:
    """The table's record count n: `len(data)`, or, over a mesh spanning several processes (each
    holding its own rows of the table in `data`), the sum of every process's rows (a collective:
    every process calls it)."""
    if mesh is None:
        return len(data)
    _check_mesh(mesh)
    return sum(process_record_counts(len(data), mesh))


def private_codes(data: Dataset, mesh: Mesh | None = None) -> tuple[Sensitive, int]:
    """The records' categorical codes as a private leaf (so jit never embeds them), and n.

    With a `mesh` (one axis, "records": `jaxdp.queries.records_mesh()`), the rows are split over
    its devices, padded with zero rows to a multiple of the device count (`shard_records`);
    `private_counts` counts them there and removes the padding exactly. Over a mesh spanning
    several processes, `data` holds this process's own rows and n counts every process's.
    """
    if not isinstance(data, Dataset):
        raise TypeError(f"data must be a jaxdp.Dataset, got {type(data).__name__}")
    if mesh is None:
        _check_count(len(data))
        return Sensitive(jnp.asarray(data.codes, jnp.int32)), len(data)
    _check_mesh(mesh)
    codes, n = shard_records(np.asarray(data.codes, np.int32), mesh)  # n: every process's rows
    _check_count(n)
    return Sensitive(codes), n


def _check_count(n: int) -> None:
    if n == 0:
        raise DataError("the dataset holds no records (0 records)")
    if n >= MAX_RECORDS:
        raise DataError(
            f"the table has {n:,} records; float32 counts are exact only below {MAX_RECORDS:,}, "
            "so the declared sensitivities would not hold"
        )


def _check_mesh(mesh: Mesh) -> None:
    if not isinstance(mesh, Mesh) or mesh.axis_names != (AXIS,):
        raise ValueError(
            f"mesh must be a one-dimensional jax.sharding.Mesh with axis {AXIS!r} "
            "(jaxdp.queries.records_mesh())"
        )


_counts_jit = jax.jit(lambda codes, workload: marginal_counts(codes, workload, jnp.int32), static_argnums=1)


def _sharded_counts(codes: Array, workload: MarginalWorkload, mesh: Mesh, n_records: int) -> Array:
    return sharded_marginal_counts(codes, workload, mesh=mesh, n_records=n_records, dtype=jnp.int32)


_sharded_counts_jit = jax.jit(_sharded_counts, static_argnums=(1, 2, 3))


def private_counts(data: Dataset, workload: MarginalWorkload, mesh: Mesh | None = None) -> Sensitive:
    """The workload's true answers as int32 counts, as a private leaf: what exact (discrete)
    measurements add integer noise to. Under replace-one, mechanisms divide the noisy counts by
    the public n after the noise (the family's post-processing).

    Over a mesh spanning several processes the psum'd counts come back as this process's own
    copy (on its first device of the mesh): everything after the count runs in each process
    alone, the same computation in every process."""
    codes, n = private_codes(data, mesh)
    if mesh is None:
        return codes.map(_counts_jit, workload)
    counts = codes.map(_sharded_counts_jit, workload, mesh, n)
    if spans_processes(mesh):
        counts = counts.map(lambda c: c.addressable_data(0))
    return counts


def round_shares(rho_budget: float, rounds: int, alpha: float) -> tuple[float, float]:
    """(rho of one round's selection, rho of its measurement) under the Adaptive Measurements
    split: epsilon_0 = sqrt(2 rho / (T (alpha^2 + (1 - alpha)^2))), selection at 2 alpha
    epsilon_0 and measurement at (1 - alpha) epsilon_0, so each round costs rho / T (GEM/PEP
    paper, Section 3.1)."""
    weights = alpha**2 + (1 - alpha) ** 2
    per_round = rho_budget / rounds
    return per_round * alpha**2 / weights, per_round * (1 - alpha) ** 2 / weights


# One compiled program per query-set shape; int32 counts, what exact noise is added to.
_mixed_counts = jax.jit(functools.partial(mixed_marginal_answers, dtype=jnp.int32))
_linear_counts = jax.jit(functools.partial(linear_threshold_answers, dtype=jnp.int32))


def class_counts(data: Dataset, queries, mesh: Mesh | None = None) -> Sensitive:
    """The true int32 counts of a query class as a private leaf: a marginal workload's cells
    (split over `mesh`'s devices when given), or the records each threshold query holds for
    (`MixedMarginalQueries`, `LinearThresholdQueries`: one pass over codes and numeric values).

    Raises:
        ValueError: a mesh for threshold queries (they are counted on one device).
    """
    if isinstance(queries, MarginalWorkload):
        return private_counts(data, queries, mesh)
    if mesh is not None:
        raise ValueError("threshold query classes are counted on one device; leave mesh=None")
    private_codes(data)  # validates the table (non-empty, exact float32 counts)
    records = Sensitive((jnp.asarray(data.codes, jnp.int32), jnp.asarray(data.numeric, jnp.float32)))
    count = _mixed_counts if isinstance(queries, MixedMarginalQueries) else _linear_counts
    return records.map(lambda r: count(*r, queries))


def idle_charge(noise: str) -> Charge:
    """A selection charge that did not run (count 0), padding a round's Info."""
    return noise_module.idle(SELECT_PRIMITIVE[noise])


def interleave(rounds: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(class of each round, its round within the class): each class's rounds spread evenly over
    the run, round r of class c at (r + 1/2) / T_c."""
    order = sorted((((r + 0.5) / t, c, r) for c, t in enumerate(rounds) for r in range(t)))
    return tuple(c for _, c, _ in order), tuple(r for _, _, r in order)
