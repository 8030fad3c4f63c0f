"""Error vs epsilon on the 6-attribute ADULT projection: AIM, Independent, Gaussian, GEM, MWEM.

The workload of issue #7: all 20 3-way marginals of (age, education-num, marital-status,
occupation, sex, income>50K) on ADULT from ../shared/data/private-pgm/ (48,842 records, 571,200
cells; skipped with a message when absent), delta = 1e-9, epsilon in {0.1, 0.3, 1, 3, 10}.
Every mechanism is built by the API's registry (`jaxdp.api.build`) with its documented defaults:

- aim: budget annealing, at most 16 d = 96 rounds, mirror descent 1000 / 3000 iterations per
  round / last round with early stop tol 1e-2, add-remove (its factory default, as in the paper);
- aim-replace-one: the same under replace-one, the relation every other mechanism uses here;
- independent: all 1-way marginals, one Gaussian measurement, product distribution;
- gaussian: every workload answer with Gaussian noise (it releases answers, not records: its
  "records" errors below are those of its noisy answers);
- gem: T = 20 rounds (its default 50 exceeds the 20 marginals, each measured at most once),
  otherwise factory defaults (generator batch 1000, hidden 256 x 2, 100 Adam steps a round);
- mwem: T = 20 rounds (the registry's 25, capped at the 20 marginals), dense 571,200-cell histogram.

Metric: the synthetic records' (n = 48,842 rows, released with the RELEASE stream) workload errors
against the real table, `jaxdp.evaluate.workload_errors`: mean_l1 (mean over marginals of the L1
distance of normalised marginals, AIM's metric) and max_abs (largest error of any counting query).
Wall time is build + run + release (the first run of a mechanism at an epsilon compiles).

Runs are appended one JSON line per (mechanism, epsilon, seed) to --out, and a rerun skips the
points already measured on the same commit (a dirty tree resumes nothing), so a killed run loses
at most the point in progress. The table and figure use only the points of the commit of the last
record: points measured on other code are dropped. Seeds are the outer loop: a partial run covers
the whole grid at fewer seeds.

    PYTHONPATH=. python bench/bench_epsilon_grid.py          # 3 seeds, resumes
    python bench/bench_epsilon_grid.py --seeds 0 1 2 3 4     # add seeds 3 and 4
    python bench/bench_epsilon_grid.py --replot              # CSV, figure and table only
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
from _common import Recorder, git_commit, load_average
from _plots import markdown_table, plot_error_vs_epsilon, read_jsonl, summarise, write_csv
from bench_aim import SIX, load_adult

from jaxdp import api
from jaxdp.queries import all_kway

KERNEL = "epsilon_grid_adult6"
EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)
DELTA = 1e-9
# name -> (registry entry, extra build options)
MECHANISMS = {
    "independent": ("independent", {}),
    "gaussian": ("gaussian", {}),
    "mwem": ("mwem", {}),
    "gem": ("gem", {"rounds": 20}),
    "aim": ("aim", {"relation": "add-remove"}),
    "aim-replace-one": ("aim", {"relation": "replace-one"}),
}
METRICS = ("mean_l1", "max_abs")
RESULTS = os.path.join(os.path.dirname(__file__), "results")


def done_points(path: str, commit: str | None) -> set[tuple[str, float, int]]:
    """Points already measured on this exact commit (none when the tree is dirty or unknown)."""
    if not os.path.exists(path) or commit is None or commit.endswith("-dirty"):
        return set()
    records = read_jsonl(path, KERNEL)
    return {(r["mechanism"], r["epsilon"], r["seed"]) for r in records if r.get("commit") == commit}


def run_point(data, workload, name: str, epsilon: float, seed: int) -> dict:
    entry, options = MECHANISMS[name]
    start = time.perf_counter()
    mech = api.build(entry, data, workload, epsilon=epsilon, delta=DELTA, **options)
    result = api.execute(entry, mech, jax.random.key(seed), data.domain)
    wall_s = time.perf_counter() - start
    errors = api.release_errors(data, result, workload)
    return {
        "mechanism": name,
        "epsilon": epsilon,
        "delta": DELTA,
        "seed": seed,
        "relation": mech.relation.value,
        "rounds": int(getattr(result.state, "rounds_done", mech.rounds)),
        "records": {k: errors[k] for k in ("max_abs", "mean_l1", "rmse")},
        "wall_s": wall_s,
        "rho_spent_over_budget": result.report["rho_spent"] / mech.plan.rho_budget,
        "load_avg": load_average(),
    }


def report(path: str, stem: str) -> None:
    records = read_jsonl(path, KERNEL)
    latest = records[-1].get("commit") if records else None
    records = [r for r in records if r.get("commit") == latest]
    print(f"{len(records)} points measured on commit {latest}")
    for r in records:  # summarise reads includes_compile; every point builds its own mechanism
        r.setdefault("includes_compile", True)
    rows = summarise(records, sources=("records",), metrics=METRICS)
    rows.sort(key=lambda r: (list(MECHANISMS).index(r["mechanism"]), r["epsilon"]))
    write_csv(rows, stem + ".csv")
    title = "ADULT 6 attributes, 20 3-way marginals, delta = 1e-9; mean +- SE over seeds"
    plot_error_vs_epsilon(rows, stem + ".png", title, {"records": "synthetic records"}, metrics=METRICS)
    print(markdown_table(rows, METRICS, "records", "the synthetic records"))
    print(f"wrote {stem}.csv and {stem}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS), choices=list(MECHANISMS))
    parser.add_argument("--out", default=os.path.join(RESULTS, KERNEL + ".jsonl"))
    parser.add_argument("--replot", action="store_true", help="only the CSV, figure and table")
    args = parser.parse_args()
    stem = os.path.splitext(args.out)[0]
    if not args.replot:
        data = load_adult(6)
        if data is None:
            return
        workload = all_kway(data.domain.sizes, 3)
        recorder = Recorder(args.out)
        done = done_points(args.out, git_commit())
        sizes = {"attributes": list(SIX), "records": len(data), "marginals": len(workload)}
        for seed in args.seeds:
            for epsilon in args.epsilons:
                for name in args.mechanisms:
                    if (name, epsilon, seed) in done:
                        continue
                    recorder.emit(KERNEL, sizes, **run_point(data, workload, name, epsilon, seed))
                    # every point compiles its own programs (the calibration is static); kept,
                    # they exhaust the process's memory mappings after ~70 points and XLA
                    # fails to compile (seen here: "LLVM compilation error: Cannot allocate memory")
                    jax.clear_caches()
    if not os.path.exists(args.out):
        print(f"no results at {args.out}", file=sys.stderr)
        return
    report(args.out, stem)


if __name__ == "__main__":
    main()
