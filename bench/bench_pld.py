"""Error under a tighter accountant against under zCDP, same (epsilon, delta).

For each mechanism (`--mechanisms`), each table, budget and seed: one release built with
`conversion="exact"` (zCDP, the default) and one with its tighter calibration, from the same key:
"pld" for the fixed plans (Independent and Gaussian, whose plans are all Gaussian; MST and
PrivBayes, whose exponential-mechanism selections have only their pure-DP profile in `jaxdp.pld`,
so the calibration keeps zCDP's noise: `jaxdp.build` recalibrates a fixed plan by its privacy
loss distribution where that is tighter), "gdp" for AIM-GDP and SWIFT (every draw an exact
discrete Gaussian, under a Gaussian-DP filter: `jaxdp.gdp`). Recorded: the workload's mean L1
and max error of the released records (`jaxdp.api.release_errors`; Gaussian: of its noisy
answers), the plan's rho, the report's `accountant`, `epsilon_spent`, `epsilon_zcdp`,
`epsilon_pld` and `epsilon_gdp`, the first measurement's sigma, and the build's seconds (the
calibration's cost: a few PLD compositions).

Tables: the bundled ADULT-reduced (48,842 records, 7 attributes; its 2-way marginals) and
`bench_small.py`'s adult9 (1,304 records, 9 attributes; its 3-way marginals of at most 10,000
cells) where ../shared/data is beside the checkout.

    PYTHONPATH=. python bench/bench_pld.py --out bench/results/pld.jsonl
    PYTHONPATH=. python bench/bench_pld.py --summary bench/results/pld.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import numpy as np
from _common import Recorder, load_average

import jaxdp
from jaxdp import api
from jaxdp.queries import all_kway

# the tighter calibration each mechanism takes (the fixed plans': "pld")
TIGHT = {"aim-gdp": "gdp", "swift": "gdp"}


def _tables(names: list[str]) -> dict:
    out = {}
    for name in names:
        if name == "adult-reduced":
            data = jaxdp.datasets.load("adult-reduced")
            out[name] = (data, all_kway(data.domain.sizes, 2))
        elif name == "adult9":
            import bench_small  # beside this script; needs ../shared/data

            data = bench_small.adult9()
            out[name] = (data, bench_small.workload_of(data))
    return out


def run_once(name: str, data, workload, epsilon: float, delta: float, seed: int, conversion: str) -> dict:
    start = time.perf_counter()
    mech = api.build(name, data, workload, epsilon=epsilon, delta=delta, conversion=conversion)
    built = time.perf_counter() - start
    result = api.execute(name, mech, jax.random.key(seed), data.domain)
    errors = api.release_errors(data, result, workload)
    report = result.report
    return {
        "mean_l1": errors["mean_l1"],
        "max_abs": errors["max_abs"],
        "rho_budget": mech.plan.rho_budget,
        "accountant": report["accountant"],
        "epsilon_spent": report["epsilon_spent"],
        "epsilon_zcdp": report["epsilon_zcdp"],
        "epsilon_pld": report["epsilon_pld"],
        "epsilon_gdp": report["epsilon_gdp"],
        "first_sigma": report["ledger"][0]["scale"],
        "build_seconds": built,
        "seconds": time.perf_counter() - start,
    }


def summary(path: str) -> None:
    """A markdown table: per (table, mechanism, epsilon, delta), the mean over seeds of zCDP's and
    the tighter calibration's mean L1 and max error, the rho ratio and the accountant that stated
    it."""
    groups: dict = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            key = (r["sizes"]["table"], r["mechanism"], r["epsilon"], r["delta"])
            groups.setdefault(key, {}).setdefault(r["conversion"], []).append(r)
    print(
        "| table | mechanism | epsilon | delta | rho tight / zcdp | accountant | mean L1 zcdp -> tight "
        "| max error zcdp -> tight | seeds tight better (L1) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(groups):
        zcdp, tight = (
            sorted(groups[key][c], key=lambda r: r["seed"]) for c in ("exact", TIGHT.get(key[1], "pld"))
        )
        ratio = tight[0]["rho_budget"] / zcdp[0]["rho_budget"]
        l1 = [np.mean([r["mean_l1"] for r in rows]) for rows in (zcdp, tight)]
        top = [np.mean([r["max_abs"] for r in rows]) for rows in (zcdp, tight)]
        better = sum(t["mean_l1"] < z["mean_l1"] for z, t in zip(zcdp, tight, strict=True))
        print(
            f"| {key[0]} | {key[1]} | {key[2]:g} | {key[3]:g} | {ratio:.3f} | {tight[0]['accountant']} "
            f"| {l1[0]:.4f} -> {l1[1]:.4f} | {top[0]:.4f} -> {top[1]:.4f} | {better}/{len(zcdp)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", default=None, help="print a results file as a table and exit")
    parser.add_argument("--tables", nargs="+", default=["adult-reduced", "adult9"])
    parser.add_argument("--mechanisms", nargs="+", default=["independent", "gaussian", "mst", "privbayes"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.2, 1.0])
    parser.add_argument("--deltas", nargs="+", type=float, default=[1e-9, 1e-5])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.summary:
        summary(args.summary)
        return
    recorder = Recorder(args.out)
    for table, (data, workload) in _tables(args.tables).items():
        sizes = {
            "table": table,
            "records": len(data),
            "attributes": len(data.domain),
            "marginals": len(workload),
        }
        for name in args.mechanisms:
            for epsilon in args.epsilons:
                for delta in args.deltas:
                    for seed in args.seeds:
                        for conversion in ("exact", TIGHT.get(name, "pld")):
                            row = run_once(name, data, workload, epsilon, delta, seed, conversion)
                            recorder.emit(
                                "pld",
                                sizes,
                                mechanism=name,
                                epsilon=epsilon,
                                delta=delta,
                                seed=seed,
                                conversion=conversion,
                                load_avg=load_average(),
                                **row,
                            )
                            print(
                                f"# {table} {name} eps={epsilon:g} delta={delta:g} seed={seed} {conversion}: "
                                f"mean L1 {row['mean_l1']:.4f} ({row['accountant']}, "
                                f"rho {row['rho_budget']:.4g})",
                                file=sys.stderr,
                                flush=True,
                            )


if __name__ == "__main__":
    main()
