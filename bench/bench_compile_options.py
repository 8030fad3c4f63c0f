"""XLA:CPU's two code generators, program by program: compile seconds against run seconds.

`jaxdp._jit` compiles a program with `xla_cpu_use_fusion_emitters=False` (XLA's classic
elemental emitters) where its compile outweighs its run. This script measures that trade for the
programs it was decided on, each in a fresh process per code generator (a cold compile, no cache
of any kind), alternating within every repeat: compile seconds, and the median run of repeated
calls after compiling.

- `value_and_grad`: the relaxed kernels' L2 value and gradient, ADULT's 286 3-way marginals, 1000
  probability rows (what RAP and GEM run on every optimiser step);
- `counts_1e6`: exact 3-way marginal counts of 976,840 records (ADULT's table 20 times);
- `pep_rounds`: PEP's 25 rounds on ADULT-reduced (`jaxdp.loop`'s rounds program);
- `release_48842`, `release_1e6`: PEP's release of 48,842 (n) or 10^6 records.

    PYTHONPATH=. python bench/bench_compile_options.py --repeats 3 [--out F.jsonl]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

CASES = ("value_and_grad", "counts_1e6", "pep_rounds", "release_48842", "release_1e6")
GENERATORS = ("default", "fast")
RUN_CALLS = {"value_and_grad": 30, "counts_1e6": 5, "pep_rounds": 3, "release_48842": 10, "release_1e6": 3}


def _program(case: str):
    """(jitted function, its arguments) for one case."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxdp
    from jaxdp import datasets, loop
    from jaxdp.queries import all_kway, marginal_counts, relaxed_marginals, relaxed_plan

    if case == "value_and_grad":
        sizes = datasets.load("adult").domain.sizes
        workload = all_kway(sizes, 3)
        rng = np.random.default_rng(0)
        probs = np.concatenate([rng.dirichlet(np.ones(s), 1000) for s in sizes], axis=1)
        target = jnp.zeros(workload.n_queries, jnp.float32)

        def loss(p, plan, target):
            return jnp.sum((relaxed_marginals(p, plan) - target) ** 2)

        return jax.value_and_grad(loss), (jnp.asarray(probs, jnp.float32), relaxed_plan(workload), target)
    if case == "counts_1e6":
        data = datasets.load("adult")
        workload = all_kway(data.domain.sizes, 3)
        codes = jnp.asarray(np.tile(np.asarray(data.codes), (20, 1)))
        return (lambda codes: marginal_counts(codes, workload, jnp.int32)), (codes,)
    data = datasets.load("adult-reduced")
    mechanism = jaxdp.pep(data, all_kway(data.domain.sizes, 3), rounds=25, epsilon=1.0, delta=1e-9)
    key = jax.random.key(0)
    state = loop._init_jit(mechanism, key)
    if case == "pep_rounds":
        rounds = functools.partial(loop._scan_rounds, length=25)
        return rounds, (mechanism, state, key, jnp.zeros((), jnp.int32))
    rows = 48842 if case == "release_48842" else 10**6
    state = loop.run(mechanism, key).state
    return (lambda m, s, k: loop.release(m, s, k, rows=rows)), (mechanism, state, key)


def measure(case: str, generator: str) -> dict:
    """One cold compile and the median run, in this process."""
    import jax
    from _common import time_call  # the child runs from bench/, where _common lives

    from jaxdp import _jit

    options = _jit.compiler_options() if generator == "fast" else {}
    if generator == "fast" and not options:
        raise SystemExit("this XLA does not know the fast-compile options")
    fn, args = _program(case)
    lowered = jax.jit(fn, compiler_options=options or None).lower(*args)
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    run = time_call(compiled, *args, repeats=RUN_CALLS[case])
    return {"compile_s": compile_s, "run_s": run["median_s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per figure")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--out", default=None, help="also append the JSON lines to this file")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "GENERATOR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(*args.child)))
        return 0

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import Recorder, child_record, load_average

    rec = Recorder(args.out)
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
    for case in args.cases:
        runs: dict[str, list[dict]] = {g: [] for g in GENERATORS}
        loads = []
        for _ in range(args.repeats):
            for generator in GENERATORS:
                runs[generator].append(child_record(__file__, "--child", case, generator, env=env))
                loads.append(load_average())
        for generator, records in runs.items():
            rec.emit(
                f"compile_options/{case}",
                {"case": case},
                generator=generator,
                repeats=args.repeats,
                compile_s=statistics.median(r["compile_s"] for r in records),
                run_s=statistics.median(r["run_s"] for r in records),
                compile_s_all=[r["compile_s"] for r in records],
                run_s_all=[r["run_s"] for r in records],
                load_avg=max(x for x in loads if x is not None) if any(loads) else None,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
