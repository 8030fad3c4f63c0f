"""Compile time of the relaxed kernels against the size of the workload, as JSON lines.

Each measurement is a fresh process (no in-process or persistent compile cache), so every figure
is what a cold run pays. For ADULT's 13 attributes (all 286 3-way marginals, or 35 drawn at
random) and private-pgm's 14-attribute ADULT sizes (all 364, or 35), it records the seconds to
trace and lower, and to compile, `relaxed_marginals` and the value and gradient of an L2 loss
on 1000 probability rows, with the plan and targets as arguments (as the mechanisms pass them),
the lowered program's size in ops and matmuls, and for the ADULT cases the run time after
compiling. `--code NAME=PATH` measures another checkout too (e.g. a worktree of an earlier
commit), alternating with this one within every repeat.

    PYTHONPATH=. python bench/bench_compile.py --repeats 3
    git worktree add --detach /tmp/jaxdp-base 38abcc7
    PYTHONPATH=. python bench/bench_compile.py --code base=/tmp/jaxdp-base --out bench/results/compile.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# private-pgm's 14-attribute ADULT (../shared/data/private-pgm/adult-domain.json), sizes only.
ADULT14_SIZES = (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2)
CASES = ("adult-all", "adult-35", "adult14-all", "adult14-35")
KERNELS = ("relaxed_marginals", "relaxed_value_and_grad")
ROWS = 1000
# timed calls after compiling, per process (the run time is their median)
RUN_CALLS = 30


def _workload(case: str):
    import jax

    from jaxdp import datasets
    from jaxdp.queries import all_kway, random_kway

    sizes = ADULT14_SIZES if case.startswith("adult14") else datasets.load("adult").domain.sizes
    if case.endswith("-all"):
        return all_kway(sizes, 3)
    return random_kway(jax.random.key(3), sizes, 3, 35)


def measure(case: str, kernel: str) -> dict:
    """One cold compile (and, for ADULT, the run time) in this process."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdp.queries import relaxed_marginals, relaxed_plan

    workload = _workload(case)
    plan = relaxed_plan(workload)
    rng = np.random.default_rng(0)
    probs = np.concatenate([rng.dirichlet(np.ones(s), ROWS) for s in workload.sizes], axis=1)
    probs = jnp.asarray(probs, jnp.float32)
    target = jnp.zeros(workload.n_queries, jnp.float32)

    def loss(p, plan, target):
        return jnp.sum((relaxed_marginals(p, plan) - target) ** 2)

    fn = jax.jit(jax.value_and_grad(loss) if kernel == "relaxed_value_and_grad" else loss)
    start = time.perf_counter()
    lowered = fn.lower(probs, plan, target)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    text = lowered.as_text()
    record = {
        "lower_s": lowered_at - start,
        "compile_s": compiled_at - lowered_at,
        "ops": len(re.findall(r"^\s*%\S+ = ", text, re.MULTILINE)),
        "matmuls": text.count("dot_general"),
        "marginals": len(workload),
        "queries": workload.n_queries,
    }
    if case.startswith("adult-"):
        jax.block_until_ready(compiled(probs, plan, target))
        times = []
        for _ in range(RUN_CALLS):
            t = time.perf_counter()
            jax.block_until_ready(compiled(probs, plan, target))
            times.append(time.perf_counter() - t)
        record["run_s"] = statistics.median(times)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per figure")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, default=list(KERNELS))
    parser.add_argument("--code", action="append", default=[], help="NAME=PATH of another checkout")
    parser.add_argument("--out", default=None, help="also append the JSON lines to this file")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "KERNEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(*args.child)))
        return 0

    sys.path.insert(0, str(BENCH))
    from _common import Recorder, child_record, git_commit, load_average

    codes = {"this": REPO, **{name: Path(path) for name, path in (c.split("=", 1) for c in args.code)}}
    rec = Recorder(args.out)
    for case in args.cases:
        for kernel in args.kernels:
            runs: dict[str, list[dict]] = {name: [] for name in codes}
            for _ in range(args.repeats):
                for name, path in codes.items():
                    env = {**os.environ, "PYTHONPATH": str(path), "JAX_ENABLE_COMPILATION_CACHE": "false"}
                    runs[name].append(child_record(__file__, "--child", case, kernel, env=env))
            for name, records in runs.items():
                first = records[0]
                fields = {
                    key: statistics.median(r[key] for r in records)
                    for key in ("lower_s", "compile_s", "run_s")
                    if key in first
                }
                rec.emit(
                    f"compile/{kernel}",
                    {
                        "case": case,
                        "rows": ROWS,
                        "marginals": first["marginals"],
                        "queries": first["queries"],
                    },
                    code=name,
                    code_commit=git_commit(codes[name]),
                    repeats=args.repeats,
                    compile_s_all=[r["compile_s"] for r in records],
                    ops=first["ops"],
                    matmuls=first["matmuls"],
                    **fields,
                    load_avg=load_average(),
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
