"""Draws per second of jaxdp's noise primitives: exact (discrete) against float (issue #14).

For each size n: the discrete Gaussian and discrete Laplace add exact noise to an int32 count
vector, the float Gaussian and Laplace float32 noise to its float32 copy; the exact exponential
mechanism picks one of n candidates (scores quantised to a grid, exact rejection), Gumbel-max
likewise. Each kernel is compiled once per size (`compile_s`: wall seconds, `compile_cpu_s`:
process CPU seconds, steadier on a busy host) and timed over `--repeats` calls with fresh keys,
the kernels interleaved within each repeat so that a busy host slows them alike; records carry
the median and the min, the load average, and the exact/float ratios of the same run.

With `--baseline FILE` (an older `jaxdp/samplers.py`, e.g. from `git show
3e176fa:jaxdp/samplers.py`), the same three exact kernels built on that file's samplers are timed
in the same run (kernels `baseline_discrete_*`, tagged with `--baseline-commit`), up to
`--baseline-max-n`. One JSON line per (kernel, size); `--out` appends them to a file.

    PYTHONPATH=. python bench/bench_noise.py
    git show 3e176fa:jaxdp/samplers.py > /tmp/samplers_3e176fa.py
    PYTHONPATH=. python bench/bench_noise.py --baseline /tmp/samplers_3e176fa.py \\
        --baseline-commit 3e176fa --out bench/results/noise.jsonl
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

import jax
import jax.numpy as jnp
from _common import Recorder, block, load_average

from jaxdp import noise
from jaxdp.types import Sensitive

PAIRS = (
    ("discrete_gaussian", "float_gaussian"),
    ("discrete_laplace", "float_laplace"),
    ("discrete_exponential", "float_exponential"),
)


def _kernels(sigma: float) -> dict:
    def discrete_gaussian(key, counts):
        return noise.discrete_gaussian(key, Sensitive(counts), sigma=sigma, sensitivity=1.0)[0]

    def float_gaussian(key, counts):
        return noise.gaussian(key, Sensitive(counts.astype(jnp.float32)), sigma=sigma, sensitivity=1.0)[0]

    def discrete_laplace(key, counts):
        return noise.discrete_laplace(key, Sensitive(counts), scale=sigma, sensitivity=1.0)[0]

    def float_laplace(key, counts):
        return noise.laplace(key, Sensitive(counts.astype(jnp.float32)), scale=sigma, sensitivity=1.0)[0]

    def discrete_exponential(key, counts):
        scores = Sensitive(counts.astype(jnp.float32))
        return noise.discrete_exponential(key, scores, scale=2.0 * sigma, sensitivity=1.0)[0]

    def float_exponential(key, counts):
        scores = Sensitive(counts.astype(jnp.float32))
        return noise.exponential(key, scores, scale=2.0 * sigma, sensitivity=1.0)[0]

    return {
        "discrete_gaussian": discrete_gaussian,
        "float_gaussian": float_gaussian,
        "discrete_laplace": discrete_laplace,
        "float_laplace": float_laplace,
        "discrete_exponential": discrete_exponential,
        "float_exponential": float_exponential,
    }


def _baseline_kernels(path: str, sigma: float) -> dict:
    """The exact kernels of `noise` (same arguments, same work around the sampler) on the
    samplers of an older samplers.py."""
    spec = importlib.util.spec_from_file_location("baseline_samplers", path)
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old  # (dataclasses look their module up)
    spec.loader.exec_module(old)

    def baseline_discrete_gaussian(key, counts):
        return counts + old.discrete_gaussian(key, counts.shape, old.gaussian_lattice(sigma))

    def baseline_discrete_laplace(key, counts):
        return counts + old.discrete_laplace(key, counts.shape, *old.laplace_lattice(sigma))

    def baseline_discrete_exponential(key, counts):
        numerator, denominator = noise._selection_rate(2.0 * sigma, 1.0)
        gaps, eligible = noise._quantised_gaps(counts.astype(jnp.float32), 1.0, None)
        return old.exponential_choice(key, gaps, eligible, numerator, denominator)

    return {
        "baseline_discrete_gaussian": baseline_discrete_gaussian,
        "baseline_discrete_laplace": baseline_discrete_laplace,
        "baseline_discrete_exponential": baseline_discrete_exponential,
    }


def _compile(fn, *args):
    """(compiled, wall seconds, process CPU seconds) of compiling jax.jit(fn) for these arguments."""
    lowered = jax.jit(fn).lower(*args)
    wall, cpu = time.perf_counter(), time.process_time()
    compiled = lowered.compile()
    return compiled, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6, 10**7])
    parser.add_argument("--sigma", type=float, default=10.0, help="noise scale in counts")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--kernels", nargs="+", default=None, help="subset of kernels to run")
    parser.add_argument("--baseline", default=None, help="an older jaxdp/samplers.py to time alongside")
    parser.add_argument("--baseline-commit", default=None, help="the commit the baseline file is from")
    parser.add_argument("--baseline-max-n", type=int, default=10**6)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    recorder = Recorder(args.out)
    kernels = _kernels(args.sigma)
    if args.kernels:
        kernels = {name: kernels[name] for name in args.kernels}
    baseline = _baseline_kernels(args.baseline, args.sigma) if args.baseline else {}
    for n in args.sizes:
        # Counts spread over [0, 1000): selection scores with many near-ties and a long tail.
        counts = jax.random.randint(jax.random.key(0), (n,), 0, 1000, jnp.int32)
        chosen = dict(kernels)
        if n <= args.baseline_max_n:
            chosen.update(baseline)
        compiled, compile_s = {}, {}
        for name, fn in chosen.items():
            compiled[name], wall, cpu = _compile(fn, jax.random.key(0), counts)
            compile_s[name] = (wall, cpu)
            block(compiled[name](jax.random.key(1), counts))
        times = {name: [] for name in chosen}
        keys = jax.random.split(jax.random.key(2), args.repeats * len(chosen))
        for r in range(args.repeats):
            for i, name in enumerate(chosen):
                start = time.perf_counter()
                block(compiled[name](keys[r * len(chosen) + i], counts))
                times[name].append(time.perf_counter() - start)
        load = load_average()
        for name in chosen:
            median, fastest = statistics.median(times[name]), min(times[name])
            extra = {"samplers_commit": args.baseline_commit} if name.startswith("baseline_") else {}
            recorder.emit(
                name,
                {"n": n, "sigma": args.sigma},
                compile_s=compile_s[name][0],
                compile_cpu_s=compile_s[name][1],
                median_s=median,
                min_s=fastest,
                draws_per_s=n / median,
                repeats=args.repeats,
                load_average=load,
                **extra,
            )
        for exact, inexact in PAIRS:
            for prefix in ("", "baseline_"):
                if prefix + exact in times and inexact in times:
                    recorder.emit(
                        f"{prefix}{exact}/{inexact}",
                        {"n": n, "sigma": args.sigma},
                        slowdown=statistics.median(times[prefix + exact]) / statistics.median(times[inexact]),
                        slowdown_min=min(times[prefix + exact]) / min(times[inexact]),
                        compile_ratio=compile_s[prefix + exact][1] / compile_s[inexact][1],
                        load_average=load,
                    )


if __name__ == "__main__":
    main()
