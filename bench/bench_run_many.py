"""Many seeds, or an epsilon grid, at once: `jaxdp.run_many` against a Python loop of
`jaxdp.run`, as JSON lines.

ADULT reduced, all 35 3-way marginals, epsilon 1, 8 seeds (`jax.random.split(key(0), 8)`), for
each mechanism named: a Python loop of `run` over the seeds, `run_many` (batching "loop", the
default), `run_many(batching="map")` (one program, lane after lane) and
`run_many(batching="vmap")` (one program, every lane at once). Each is timed --repeats times after
a warm-up call of the same form (so compiling is excluded; the warm-up's seconds are recorded as
`first_seconds`), median recorded, with the 1-minute load average before and after (a busy host
inflates timings). For "map" and "vmap" the record also says whether every seed's Info (its
selections) equals its single run's and the largest state difference.

With --epsilons, the lanes are every (epsilon, seed) pair: the mechanism built at each epsilon,
run from each seed's key (`run_many` given one mechanism per lane). The Python loop's warm-up
call (`first_seconds`) then includes compiling once per distinct program: once in all where the
noise scales are data, once per epsilon where they were static settings.

    python bench/bench_run_many.py --mechanisms pep rap-softmax aim-pep --out bench/results/run_many.jsonl
    python bench/bench_run_many.py --mechanisms pep gem --epsilons 0.3 1 3 --seeds 4 --no-vmap
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import Recorder, block, load_average

import jaxdp
from jaxdp.families import PEP
from jaxdp.queries import all_kway
from jaxdp.selection import AIMSelection

KERNEL = "run_many"
MECHANISMS = {
    "pep": lambda d, w, e: jaxdp.pep(d, w, rounds=10, epsilon=e, delta=1e-9),
    "mwem": lambda d, w, e: jaxdp.mwem(d, w, rounds=10, epsilon=e, delta=1e-9),
    "rap-softmax": lambda d, w, e: jaxdp.rap_softmax(d, w, rounds=5, epsilon=e, delta=1e-9),
    "gem": lambda d, w, e: jaxdp.gem(d, w, rounds=10, epsilon=e, delta=1e-9),
    # README's composition: AIM's selection with PEP's projection (a Python loop: vmap loops too)
    "aim-pep": lambda d, w, e: jaxdp.adaptive(
        d, w, select=AIMSelection(), family=PEP(max_steps=25), rounds=16, epsilon=e, delta=1e-9
    ),
}


def timed(fn, repeats: int):
    """(the last output, timing fields): the median of `repeats` calls after a warm-up call."""
    before = load_average()
    start = time.perf_counter()
    out = block(fn())  # warm-up: compiles
    first = time.perf_counter() - start
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = block(fn())
        seconds.append(time.perf_counter() - start)
    return out, {
        "seconds": float(np.median(seconds)),
        "repeats": seconds,
        "first_seconds": first,
        "load_before": before,
        "load_after": load_average(),
    }


def agreement(out, singles) -> dict:
    """Whether every seed's Info equals its single run's, and the largest state difference."""

    def leaves(tree):
        return [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(tree)]

    pairs = [(out.seed(i), s) for i, s in enumerate(singles)]
    return {
        "selections_equal": all(
            all(np.array_equal(a, b) for a, b in zip(leaves(m.info), leaves(s.info), strict=True))
            for m, s in pairs
        ),
        "max_state_difference": max(
            float(np.max(np.abs(a - b), initial=0.0))
            for m, s in pairs
            for a, b in zip(leaves(m.state), leaves(s.state), strict=True)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanisms", nargs="+", default=["pep"], choices=list(MECHANISMS))
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument(
        "--epsilons", type=float, nargs="+", default=None, help="an epsilon grid (lanes x seeds)"
    )
    parser.add_argument("--no-vmap", action="store_true", help="skip the (slow on CPU) vmap strategy")
    parser.add_argument("--only-loop", action="store_true", help="time only the Python loop of run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rec = Recorder(args.out)
    data = jaxdp.datasets.load("adult-reduced")
    workload = all_kway(data.domain.sizes, 3)
    seed_keys = jax.random.split(jax.random.key(0), args.seeds)
    epsilons = args.epsilons or [1.0]
    keys = jnp.stack([k for _ in epsilons for k in seed_keys])
    for name in args.mechanisms:
        built = [MECHANISMS[name](data, workload, e) for e in epsilons]
        lanes = [m for m in built for _ in seed_keys]
        mech = lanes if args.epsilons else built[0]
        sizes = {
            "dataset": "adult-reduced",
            "marginals": len(workload),
            "rounds": built[0].rounds,
            "seeds": args.seeds,
            **({"epsilons": epsilons} if args.epsilons else {}),
        }
        strategies = {
            "python loop of run": lambda lanes=lanes: [
                jaxdp.run(m, k) for m, k in zip(lanes, keys, strict=True)
            ],
            "run_many loop": lambda m=mech: jaxdp.run_many(m, keys).state,
        }
        if args.only_loop:
            del strategies["run_many loop"]
        elif built[0].jittable:
            strategies["run_many map"] = lambda m=mech: jaxdp.run_many(m, keys, batching="map")
        if not (args.no_vmap or args.only_loop) and built[0].jittable:
            strategies["run_many vmap"] = lambda m=mech: jaxdp.run_many(m, keys, batching="vmap")
        singles = None  # the loop of `run`'s runs, timed first so that its warm-up compiles
        for label, fn in strategies.items():
            out, timing = timed(fn, args.repeats)
            fields = {"mechanism": name, "strategy": label, **timing}
            if label in ("run_many map", "run_many vmap"):
                fields.update(agreement(out, singles))
            singles = out if singles is None else singles
            rec.emit(KERNEL, sizes, **fields)


if __name__ == "__main__":
    main()
