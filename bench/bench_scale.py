"""Exact marginal counts and AIM on a 10^7-row table, records on 1 vs 8 devices, as JSON lines.

The table is drawn with replacement from bundled ADULT's records (so it lies in ADULT's declared
domain and keeps its correlations); the workload is all 286 3-way marginals (312,798 counting
queries). For each device count a fresh process starts (the device count is fixed when JAX
starts; on CPU the devices are simulated with
XLA_FLAGS=--xla_force_host_platform_device_count=N) and reports, after a warm-up:
the single-device kernel (`marginal_counts`) and the sharded one (`sharded_marginal_counts`:
records split over the devices, one psum), compile time apart, the median of repeats, the
exactness check against the single-device counts, and memory: the process's peak RSS, XLA's
scratch bytes of the compiled program, the bytes of records each device holds, and each device's
peak bytes where the backend reports them (GPU/TPU; not CPU).

    python bench/bench_scale.py [--rows 10000000] [--devices 1 8] [--out FILE.jsonl]
    python bench/bench_scale.py --mechanism aim [--rounds 13] [--release-rows 100000] ...

With `--mechanism aim` each process runs `jaxdp.aim` (epsilon 1, delta 1e-9, all 3-way
marginals; on several devices with `mesh=records_mesh()`), keeping the run short: T = `--rounds`
(13, the fewest the 13 attributes allow: round 0 and one adaptive round). It reports the seconds
of counting (the factory: the only pass over the records), of the run and of releasing
`--release-rows` records, the memory (records and counts bytes per device, XLA's scratch bytes
per device of the counting program, peak RSS), and a digest of the ledger, the measurements and
the release: the parent checks that every device count released the same.

Simulated CPU devices share the host's cores: the 8-device run shows that sharding is exact and
how memory splits, not a speed-up; real devices each bring their own compute and memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def worker(rows: int, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    from _common import block, environment, load_average, temp_bytes

    import jaxdp
    from jaxdp.queries import all_kway, exact_plan, marginal_counts, shard_records, sharded_marginal_counts

    adult = jaxdp.datasets.load("adult")
    workload = all_kway(adult.domain.sizes, 3)
    plan = exact_plan(workload)
    rng = np.random.default_rng(0)
    codes = adult.codes[rng.integers(0, len(adult), rows)]
    out: dict = {"rows": rows, "marginals": len(workload), "queries": workload.n_queries}

    def measure(fn, *args):
        start = time.perf_counter()
        compiled = fn.lower(*args).compile()
        compile_s = time.perf_counter() - start
        result = block(compiled(*args))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            block(compiled(*args))
            times.append(time.perf_counter() - start)
        return result, {
            "compile_s": compile_s,
            "median_s": float(np.median(times)),
            "temp_bytes": temp_bytes(compiled),
        }

    single_codes = jax.device_put(codes, jax.devices()[0])
    single = jax.jit(lambda c, p: marginal_counts(c, p, jnp.int32))
    expected, out["single_device"] = measure(single, single_codes, plan)
    del single_codes

    sharded_codes, n = shard_records(codes)
    sharded = jax.jit(lambda c, p: sharded_marginal_counts(c, p, jnp.int32, n_records=n))
    counts, out["sharded"] = measure(sharded, sharded_codes, plan)
    out["sharded"]["exact"] = bool(np.array_equal(np.asarray(counts), np.asarray(expected)))
    out["sharded"]["records_bytes_per_device"] = int(sharded_codes.addressable_shards[0].data.nbytes)
    stats = [d.memory_stats() for d in jax.devices()]
    if all(stats):
        out["peak_bytes_per_device"] = [int(s.get("peak_bytes_in_use", -1)) for s in stats]
    out["records_bytes"] = int(codes.nbytes)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["load_avg"] = load_average()
    out.update(environment())
    return out


def aim_worker(rows: int, rounds: int, release_rows: int) -> dict:
    import hashlib

    import jax
    from _common import environment, load_average, temp_bytes

    import jaxdp
    from jaxdp.domain import Dataset
    from jaxdp.mechanisms._common import _sharded_counts_jit
    from jaxdp.queries import all_kway, records_mesh, shard_records

    adult = jaxdp.datasets.load("adult")
    rng = np.random.default_rng(0)
    data = Dataset.from_codes(adult.domain, adult.codes[rng.integers(0, len(adult), rows)])
    workload = all_kway(adult.domain.sizes, 3)
    mesh = records_mesh() if jax.device_count() > 1 else None
    key = jax.random.key(0)
    start = time.perf_counter()
    mech = jaxdp.aim(data, workload, epsilon=1.0, delta=1e-9, max_rounds=rounds, mesh=mesh)
    jax.block_until_ready(mech.counts)  # the counts are dispatched asynchronously
    count_s = time.perf_counter() - start
    start = time.perf_counter()
    result = jaxdp.run(mech, key)
    run_s = time.perf_counter() - start
    start = time.perf_counter()
    codes = np.asarray(jaxdp.release(mech, result.state, key, rows=release_rows))
    release_s = time.perf_counter() - start
    digest = hashlib.sha256()
    digest.update(repr([e.to_json() for e in result.ledger]).encode())
    for m in result.state.measurements:
        digest.update(repr(m.clique).encode() + np.asarray(m.noisy, np.float64).tobytes())
    digest.update(codes.tobytes())
    devices = mesh.size if mesh is not None else 1
    out: dict = {
        "rows": rows,
        "candidates": len(mech.candidates),
        "counting_queries": mech.candidates.n_queries,
        "rounds": int(result.state.rounds_done),
        "count_s": count_s,
        "run_s": run_s,
        "release_rows": release_rows,
        "release_s": release_s,
        "digest": digest.hexdigest(),
        "records_bytes_per_device": -(-rows // devices) * len(adult.domain.sizes) * 4,
        "counts_bytes_per_device": mech.candidates.n_queries * 4,
    }
    if mesh is not None:  # the counting program's scratch per device (the records are its input)
        sharded, n = shard_records(np.asarray(data.codes, np.int32), mesh)
        compiled = _sharded_counts_jit.lower(sharded, mech.candidates, mesh, n).compile()
        out["counting_temp_bytes_per_device"] = temp_bytes(compiled)
        del sharded
    stats = [d.memory_stats() for d in jax.devices()]
    if all(stats):
        out["peak_bytes_per_device"] = [int(s.get("peak_bytes_in_use", -1)) for s in stats]
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["load_avg"] = load_average()
    out.update(environment())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mechanism", choices=("counts", "aim"), default="counts")
    parser.add_argument("--rounds", type=int, default=13, help="AIM's T (13: round 0 + 1 adaptive round)")
    parser.add_argument("--release-rows", type=int, default=100_000, help="AIM's released records")
    parser.add_argument("--out", help="append JSON lines to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.mechanism == "aim":
            record = {"kernel": "aim_sharded", **aim_worker(args.rows, args.rounds, args.release_rows)}
        else:
            record = {"kernel": "exact_marginals_sharded", **worker(args.rows, args.repeats)}
        print(json.dumps(record), flush=True)
        return
    here = os.path.dirname(os.path.abspath(__file__))
    digests: list[str | None] = []
    for count in args.devices:
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}"}
        if "JAX_PLATFORMS" not in os.environ:
            env["JAX_PLATFORMS"] = "cpu"  # simulated devices; on accelerators set JAX_PLATFORMS yourself
        command = [sys.executable, os.path.join(here, "bench_scale.py"), "--worker", "--rows", str(args.rows)]
        command += ["--repeats", str(args.repeats), "--mechanism", args.mechanism]
        command += ["--rounds", str(args.rounds), "--release-rows", str(args.release_rows)]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.exit(f"bench_scale: the {count}-device run failed:\n{proc.stderr[-3000:]}")
        line = proc.stdout.strip().splitlines()[-1]
        digests.append(json.loads(line).get("digest"))
        if args.mechanism == "aim":  # every device count must release what the first released
            line = json.dumps({**json.loads(line), "same_release_as_first": digests[-1] == digests[0]})
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
