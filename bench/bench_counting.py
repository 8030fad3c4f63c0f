"""Exact marginal counts at scale: the scatter-add kernel against a one-hot matmul, as JSON lines.

Issue #25 asks for exact counts of 10^8 rows x ADULT's 286 3-way marginals in <= 2 s on one H200.
`jaxdp.queries.marginal_counts` adds one per record and marginal into a flat histogram (a 1-D
scatter-add: on a GPU, atomic adds to global memory, contended where a marginal has few cells).
The candidate here counts a marginal of C cells as a matrix product on the tensor cores: split
each record's cell index into (index // 128, index % 128), one-hot both halves in bfloat16 and
multiply, (ceil(C / 128) x rows) @ (rows x 128), accumulating in float32: exact, since a block's
counts stay below 2^24, and added to int32 totals across blocks. It costs rows x C multiply-adds
(3 x 10^13 for 10^8 rows of ADULT), cheap on tensor cores, hopeless on a CPU.

Rows are drawn uniformly per column on the device (the counts' cost does not depend on the
values); both kernels' counts are compared for equality. Compile time is measured apart; run
times are medians of --repeats calls.

    python bench/bench_counting.py --rows 1e7 1e8 --out bench/results/gpu_h200.jsonl
"""

from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp
import numpy as np
from _common import Recorder, compile_seconds, load_average, time_call

from jaxdp import datasets
from jaxdp.queries import all_kway, marginal_counts

KERNEL = "exact_counts_at_scale"
LOW = 128  # the second one-hot's width: one tensor-core tile


def matmul_counts(codes, workload, block: int):
    """Counts of every marginal of `workload` (workload order), by one-hot matrix products over
    blocks of `block` rows (the row count must be a multiple of it)."""
    sizes = workload.sizes

    def count_block(totals, start):
        rows = jax.lax.dynamic_slice_in_dim(codes, start, block, axis=0)
        out = []
        for total, clique in zip(totals, workload.cliques, strict=True):
            shape = [sizes[a] for a in clique]
            cells = math.prod(shape)
            index = sum(rows[:, a] * math.prod(shape[j + 1 :]) for j, a in enumerate(clique))
            high = jax.nn.one_hot(index // LOW, -(-cells // LOW), dtype=jnp.bfloat16)
            low = jax.nn.one_hot(index % LOW, LOW, dtype=jnp.bfloat16)
            counts = jnp.dot(high.T, low, preferred_element_type=jnp.float32).reshape(-1)[:cells]
            out.append(total + counts.astype(jnp.int32))
        return out, None

    totals = [jnp.zeros(math.prod(sizes[a] for a in c), jnp.int32) for c in workload.cliques]
    starts = jnp.arange(codes.shape[0] // block) * block
    totals, _ = jax.lax.scan(count_block, totals, starts)
    return jnp.concatenate(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e6])
    parser.add_argument("--block", type=int, default=200_000, help="rows per matmul block")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rec = Recorder(args.out)
    domain = datasets.domain("adult")
    workload = all_kway(domain.sizes, 3)
    for rows in (int(r) for r in args.rows):
        keys = jax.random.split(jax.random.key(0), len(domain.sizes))
        codes = jnp.stack(
            [jax.random.randint(k, (rows,), 0, s) for k, s in zip(keys, domain.sizes, strict=True)], 1
        )
        codes = codes.astype(jnp.int32).block_until_ready()
        sizes = {"rows": rows, "marginals": len(workload), "cells": workload.n_queries}
        results = {}
        kernels = {
            "scatter-add (marginal_counts)": jax.jit(lambda c: marginal_counts(c, workload, jnp.int32)),
            "one-hot matmul": jax.jit(lambda c: matmul_counts(c, workload, args.block)),
        }
        for name, kernel in kernels.items():
            if name == "one-hot matmul" and rows % args.block:
                continue
            compiled, compile_s = compile_seconds(kernel, codes)
            timing = time_call(compiled, codes, repeats=args.repeats)
            results[name] = np.asarray(compiled(codes))
            rec.emit(
                KERNEL,
                sizes,
                counter=name,
                compile_s=compile_s,
                **timing,
                ns_per_record_marginal=timing["median_s"] / (rows * len(workload)) * 1e9,
                equal_to_scatter=bool(
                    np.array_equal(results[name], results["scatter-add (marginal_counts)"])
                ),
                target="median_s <= 2 at 10^8 rows on one H200",
                load_avg=load_average(),
            )
        del codes


if __name__ == "__main__":
    main()
