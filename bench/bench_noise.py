"""Draws per second of jaxdp's noise primitives: exact (discrete) against float (issue #14).

For each size, the measurement primitives add noise to an int32 count vector (discrete Gaussian
and discrete Laplace, exact) or a float32 one (float Gaussian); the selection primitives pick one
of n candidates (exact exponential mechanism on quantised scores, and Gumbel-max). Every kernel is
compiled once per size (compile seconds reported apart) and timed as the median of repeats with
fresh keys. One JSON line per (kernel, size); `--out` appends them to a file.

    PYTHONPATH=. python bench/bench_noise.py
    PYTHONPATH=. python bench/bench_noise.py --sizes 1000 1000000 --sigma 10 --out bench/results/noise.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from _common import Recorder, block, compile_seconds, load_average

from jaxdp import noise
from jaxdp.types import Sensitive


def _kernels(sigma: float):
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


def _time(compiled, counts, repeats: int) -> float:
    keys = jax.random.split(jax.random.key(1), repeats + 1)
    block(compiled(keys[0], counts))
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        block(compiled(keys[i + 1], counts))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6, 10**7])
    parser.add_argument("--sigma", type=float, default=10.0, help="noise scale in counts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", nargs="+", default=None, help="subset of kernels to run")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    recorder = Recorder(args.out)
    kernels = _kernels(args.sigma)
    names = args.kernels or list(kernels)
    for n in args.sizes:
        # Counts spread over [0, 1000): selection scores with many near-ties and a long tail.
        counts = jax.random.randint(jax.random.key(0), (n,), 0, 1000, jnp.int32)
        medians = {}
        for name in names:
            compiled, compile_s = compile_seconds(kernels[name], jax.random.key(0), counts)
            median = _time(compiled, counts, args.repeats)
            medians[name] = median
            recorder.emit(
                name,
                {"n": n, "sigma": args.sigma},
                compile_s=compile_s,
                median_s=median,
                draws_per_s=n / median,
                load_average=load_average(),
            )
        for exact, inexact in (
            ("discrete_gaussian", "float_gaussian"),
            ("discrete_laplace", "float_laplace"),
            ("discrete_exponential", "float_exponential"),
        ):
            if exact in medians and inexact in medians:
                recorder.emit(
                    f"{exact}/{inexact}",
                    {"n": n, "sigma": args.sigma},
                    slowdown=medians[exact] / medians[inexact],
                )


if __name__ == "__main__":
    main()
