"""A fit's step on 14-attribute ADULT: the dense kernel against the measured marginals alone.

All 364 3-way marginals of 14-attribute ADULT (20.9M counting queries), 1000 relaxed rows. For
RAP's loss (the squared error over the measured cells) and GEM's ranking (the 100 largest measured
errors) it prints, as JSON lines, the compile time and the median call of the dense path
(`relaxed_marginals` over every cell, masked) and of `jaxdp.queries.measured` (one `lax.cond` a
marginal), with 5, 20, 50 (RAP's 10 rounds x 5) and all 364 marginals measured, drawn at random.
One compiled program serves every measured set, so each path compiles once.

    python bench/bench_measured.py --out bench/results/measured_adult14.jsonl

Needs ../shared/data/private-pgm beside the checkout (`bench_aim.load_adult`).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import Recorder, compile_seconds, load_average, time_call
from bench_aim import load_adult

from jaxdp.queries import all_kway, expand_marginal_mask, measured, relaxed_marginals, relaxed_plan

MEASURED_COUNTS = (5, 20, 50, 364)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per figure")
    parser.add_argument("--rows", type=int, default=1000, help="relaxed rows")
    parser.add_argument("--out", default=None, help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    data = load_adult(14)
    if data is None:
        raise SystemExit("14-attribute ADULT needs ../shared/data/private-pgm beside the checkout")
    workload = all_kway(data.domain.sizes, 3)
    plan = relaxed_plan(workload)
    rng = np.random.default_rng(0)
    probs = jax.nn.softmax(jnp.asarray(rng.normal(size=(args.rows, sum(workload.sizes))), jnp.float32))
    rec = Recorder(args.out)

    def dense_loss(p, targets, mask, active):
        del active
        return jnp.sum(jnp.where(mask, relaxed_marginals(p, plan) - targets, 0.0) ** 2)

    def measured_loss(p, targets, mask, active):
        return measured.squared_error(workload, p, targets, mask, active)

    def dense_rank(p, targets, mask, active):
        del active
        error = jnp.abs(relaxed_marginals(p, plan) - targets)
        return jax.lax.top_k(jnp.where(mask, error, -1.0), 100)

    def measured_rank(p, targets, mask, active):
        return measured.largest_errors(workload, p, targets, mask, active, jnp.float32(0.0), 100)

    programs = {
        ("rap_value_and_grad", "dense"): jax.jit(jax.value_and_grad(dense_loss)),
        ("rap_value_and_grad", "measured"): jax.jit(jax.value_and_grad(measured_loss)),
        ("gem_rank", "dense"): jax.jit(dense_rank),
        ("gem_rank", "measured"): jax.jit(measured_rank),
    }
    compiled = {}
    for count in MEASURED_COUNTS:
        picked = np.zeros(len(workload), bool)
        picked[rng.choice(len(workload), count, replace=False)] = True
        mask = expand_marginal_mask(workload, jnp.asarray(picked))
        targets = jnp.where(mask, jnp.asarray(rng.random(workload.n_queries), jnp.float32) / 100, 0.0)
        active = measured.active_marginals(mask, workload)
        call = (probs, targets, mask, active)
        for (kernel, path), program in programs.items():
            if (kernel, path) not in compiled:
                compiled[kernel, path] = compile_seconds(program, *call)
            fn, compile_s = compiled[kernel, path]
            rec.emit(
                kernel,
                {
                    "rows": args.rows,
                    "marginals": len(workload),
                    "queries": workload.n_queries,
                    "measured_marginals": count,
                    "measured_queries": int(np.asarray(workload.cells)[picked].sum()),
                },
                path=path,
                compile_s=compile_s,
                **time_call(fn, *call, repeats=args.repeats),
                load_avg=load_average(),
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
