"""One checkout's run of one registry mechanism over several seeds, for `bench_presets.py`.

Run with the checkout to measure first on PYTHONPATH; prints one JSON object: per seed, the
release's workload errors, the whole `jaxdp.api.execute` time (build excluded; the first seed
compiles) and a digest of the release and ledger (equal digests: the same release bit for bit).
Uses only API that the pre-builder checkouts have too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import time
from pathlib import Path

import jax
import numpy as np

import jaxdp
from jaxdp import api

TABLES = ("adult-reduced", "adult", "adult6", "adult14", "binary16")


def load_table(name: str) -> jaxdp.Dataset:
    """The bundled ADULT-reduced or ADULT (13 binned attributes), or bench_aim's 6- or 14-attribute
    ADULT (from ../shared) or binary16."""
    if name in ("adult-reduced", "adult"):
        return jaxdp.datasets.load(name)
    import bench_aim  # beside this script (the child runs in bench/)

    if name == "binary16":
        return bench_aim.binary16()
    data = bench_aim.load_adult(6 if name == "adult6" else 14)
    if data is None:
        raise SystemExit("ADULT needs ../shared/data/private-pgm beside the checkout")
    return data


def digest(result) -> str:
    h = hashlib.sha256()
    out = result.answers if result.answers is not None else result.synthetic.codes
    h.update(np.ascontiguousarray(np.asarray(out)).tobytes())
    for e in result.ledger:
        h.update(f"{e.round}|{e.primitive}|{e.sensitivity!r}|{e.scale!r}|{e.count}".encode())
    return h.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mechanism", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--table", choices=TABLES, default="adult-reduced")
    args = parser.parse_args()
    data = load_table(args.table)
    workload = jaxdp.queries.all_kway(data.domain.sizes, 3)
    spec = api.mechanism_spec(args.mechanism)
    # the public variants get every tenth record as their "public" table
    public = jaxdp.Dataset.from_codes(data.domain, data.codes[::10]) if spec.public else None
    seeds = []
    for seed in args.seeds:
        mech = api.build(args.mechanism, data, workload, epsilon=args.epsilon, delta=1e-9, public=public)
        start = time.perf_counter()
        result = api.execute(args.mechanism, mech, jax.random.key(seed), data.domain)
        seconds = time.perf_counter() - start
        errors = api.release_errors(data, result, workload)
        seeds.append(
            {
                "seed": seed,
                "seconds": seconds,
                "max_abs": float(errors["max_abs"]),
                "mean_l1": float(errors["mean_l1"]),
                # the fitted distribution's own answers, where the checkout reports them
                "relaxed_mean_l1": float(errors["relaxed"]["mean_l1"]) if "relaxed" in errors else None,
                "relaxed_max_abs": float(errors["relaxed"]["max_abs"]) if "relaxed" in errors else None,
                "rho_spent": float(result.report["rho_spent"]),
                "digest": digest(result),
            }
        )
    root = Path(jaxdp.__file__).resolve().parents[1]
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=root
    ).stdout.strip()
    print(
        json.dumps(
            {
                "mechanism": args.mechanism,
                "table": args.table,
                "code_root": str(root),
                "commit": commit,
                "seeds": seeds,
            }
        )
    )


if __name__ == "__main__":
    main()
