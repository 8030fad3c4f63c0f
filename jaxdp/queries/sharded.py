"""Exact marginal counts over records sharded across devices.

Each device counts its own shard of the records with the single-device kernel
(`exact.marginal_counts`) and one `psum` adds the per-device count vectors, so every device ends
with the same exact integer counts. Nothing random happens here: a mechanism adds its noise once,
to the summed counts, exactly as on one device.

The records are split along their first axis over a one-dimensional mesh (axis "records"). A
record count that the device count does not divide is padded with all-zero rows, whose
contribution (one count in each marginal's cell 0 per padding row) is subtracted exactly.

Several processes (hosts): call `jax.distributed.initialize()` in every process first;
`jax.devices()` then lists every process's devices and `records_mesh()` spans them all. Over such a
mesh each process passes only its own rows: `shard_records` pads every process's block to one
common size and assembles the global array from the blocks, and the record count is the sum over
the processes (docs/guide.md, "Sharding across devices").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxdp.queries.exact import ExactPlan, _as_plan, marginal_counts
from jaxdp.queries.workload import MarginalWorkload
from jaxdp.types import Array

AXIS = "records"


def records_mesh(devices=None) -> Mesh:
    """A one-dimensional mesh (axis "records") over `devices` (default: every device)."""
    return Mesh(np.asarray(jax.devices() if devices is None else devices), (AXIS,))


def spans_processes(mesh: Mesh) -> bool:
    """Whether `mesh` holds devices of processes other than this one (`jax.distributed`)."""
    return any(d.process_index != jax.process_index() for d in mesh.devices.flat)


def process_record_counts(n_local: int, mesh: Mesh) -> tuple[int, ...]:
    """Every process's own row count, in process order (a collective: every process of `mesh`
    calls it), or `(n_local,)` when `mesh` is this process's alone.

    Privacy:
        The counts pass between the custodian's own processes only; nothing is released.
    """
    if not spans_processes(mesh):
        return (n_local,)
    return tuple(int(c) for c in np.ravel(multihost_utils.process_allgather(np.int64(n_local))))


def shard_records(codes: np.ndarray | Array, mesh: Mesh | None = None) -> tuple[Array, int]:
    """Place (n_records, n_categorical) codes on the mesh, one block of rows per device.

    Over a mesh of one process, `codes` are all the records. Over a mesh spanning several
    processes, `codes` are this process's own rows (every process calls this with its rows): each
    process's block is padded to the largest block, rounded up to a multiple of its devices, and
    the blocks form one global array in process order.

    Returns:
        (codes padded with zero rows to a multiple of the device count, sharded by rows;
        n_records, the number of real rows over every process).

    Raises:
        ValueError: a multi-process mesh that does not hold the same number of devices of every
            process.
    """
    mesh = records_mesh() if mesh is None else mesh
    codes = np.asarray(codes)
    sharding = NamedSharding(mesh, PartitionSpec(AXIS, None))
    if not spans_processes(mesh):
        n = int(codes.shape[0])
        pad = -n % mesh.size
        return jax.device_put(_padded(codes, n + pad), sharding), n
    per_process = np.bincount([d.process_index for d in mesh.devices.flat], minlength=jax.process_count())
    local_devices = int(per_process[jax.process_index()])
    if np.any(per_process != local_devices):
        raise ValueError(
            "a mesh over several processes must hold as many devices of each; "
            f"it holds {per_process.tolist()}"
        )
    counts = process_record_counts(int(codes.shape[0]), mesh)
    block = -(-max(counts) // local_devices) * local_devices
    global_shape = (block * len(counts), codes.shape[1])
    local = _padded(codes, block)
    return jax.make_array_from_process_local_data(sharding, local, global_shape), sum(counts)


def _padded(codes: np.ndarray, rows: int) -> np.ndarray:
    """`codes` with all-zero rows appended up to `rows`."""
    pad = rows - codes.shape[0]
    return np.concatenate([codes, np.zeros((pad, codes.shape[1]), codes.dtype)]) if pad else codes


def sharded_marginal_counts(
    codes: np.ndarray | Array,
    workload: MarginalWorkload | ExactPlan,
    dtype=jnp.float32,
    *,
    mesh: Mesh | None = None,
    n_records: int | None = None,
    row_chunk: int | None = None,
) -> Array:
    """`marginal_counts` with the records sharded across the devices of `mesh`.

    Args:
        codes: (n_rows, n_categorical) integer codes: a host array (sharded here), or the output
            of `shard_records` (already on the mesh; give its `n_records`).
        workload: the marginals, or their `exact_plan`.
        dtype: output dtype; counting is exact in int32 and cast at the end.
        mesh: a one-dimensional mesh with axis "records" (default: `records_mesh()`).
        n_records: the real rows of `codes` when it carries zero padding rows after them.
        row_chunk: records per scatter step on each device (see `marginal_counts`).

    Returns:
        (workload.n_queries,) counts, replicated on every device, equal to `marginal_counts` on
        the unsharded records.

    Privacy:
        Reads the private records, exactly as `marginal_counts` (the same sensitivities); wrap the
        result in `Sensitive`. Per-device counts never leave the psum.
    """
    plan = _as_plan(workload)
    mesh = records_mesh() if mesh is None else mesh
    if mesh.axis_names != (AXIS,):
        raise ValueError(f"mesh must be one-dimensional with axis {AXIS!r}, got axes {mesh.axis_names}")
    if n_records is None:
        codes, n_records = shard_records(codes, mesh)
    rows = int(codes.shape[0])
    if rows % mesh.size or not 0 < n_records <= rows:
        raise ValueError(f"codes must have a multiple of {mesh.size} rows, n_records of them real")

    def count(local_codes, plan):
        local = marginal_counts(local_codes, plan, jnp.int32, row_chunk=row_chunk)
        return jax.lax.psum(local, AXIS)

    # check_vma=False: the single-device kernel starts its loops from fresh (unvarying) zeros that
    # become per-device values; the psum makes the output the same on every device, as declared.
    counts = jax.shard_map(
        count,
        mesh=mesh,
        in_specs=(PartitionSpec(AXIS, None), PartitionSpec()),
        out_specs=PartitionSpec(),
        check_vma=False,
    )(codes, plan)
    padding = rows - n_records
    if padding:  # each zero row added one count to every marginal's cell 0
        zero_row = jnp.zeros((1, plan.n_attributes), jnp.int32)
        counts = counts - padding * marginal_counts(zero_row, plan, jnp.int32)
    return counts.astype(dtype)
