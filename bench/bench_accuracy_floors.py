"""Each registry mechanism's own error on the accuracy-floor job, for the ceilings of
`tests/mechanisms/test_accuracy_floors.py`.

The job is the test's: every registry name (`jaxdp.api.MECHANISMS`) with its registry defaults
through `api.build` + `api.execute` on the bundled ADULT-reduced (48,842 records, 7 attributes),
all 35 3-way marginals, epsilon 1, delta 1e-9, one release per seed (the public variants get
every tenth record as their public table), each mechanism in a fresh process
(`_preset_child.py`, as `bench_presets.py` runs it). The error is the one the test judges: the
mean L1 over the workload's marginals for AIM, AIM-GEM, MST and PrivBayes, the max absolute
error of the workload's answers for the rest (Gaussian: of its noisy answers).

One record per mechanism: every seed's errors, seconds and release digest (`seeds`), the test's
error per seed (`errors`), their mean over the test's seeds 0-2 (`mean`), the standard deviation
over every seed run (`sd`; seeds 0-4 by default: the two extra seeds sample the spread), the
worst seed over that mean, the margin and the ceiling `margin * mean` (the margin rule:
`margin_for`), the measured code (`code_commit`, `git describe --dirty`, and `jaxdp_diff_sha`,
a digest of `git diff HEAD -- jaxdp` when dirty), the command and the load average.

    PYTHONPATH=. python bench/bench_accuracy_floors.py --out bench/results/accuracy_floors.jsonl
    PYTHONPATH=. python bench/bench_accuracy_floors.py --table --out bench/results/accuracy_floors.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import Recorder, load_average

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
from bench_presets import run_child  # noqa: E402

from jaxdp.api import MECHANISMS  # noqa: E402

KERNEL = "accuracy_floors"
TEST_SEEDS = (0, 1, 2)  # the test's seeds: the ceiling is a multiple of their mean
MEAN_L1 = (
    "aim",
    "aim-gdp",
    "aim-gem",
    "mst",
    "privbayes",
    "swift",
)  # the test's: mean L1; the rest max error
BASE_MARGIN = 1.25
SPREAD_SDS = 4.0


def metric_of(mechanism: str) -> str:
    return "mean_l1" if mechanism in MEAN_L1 else "max_abs"


def margin_for(mean: float, sd: float) -> float:
    """max(1.25, 1 + 4 sd / mean), rounded up to 0.05: a quarter above the mean, or four
    seed-to-seed standard deviations where the spread is wider than a sixteenth of the mean."""
    return math.ceil(20.0 * max(BASE_MARGIN, 1.0 + SPREAD_SDS * sd / mean) - 1e-9) / 20.0


def jaxdp_diff_sha() -> str | None:
    """A digest of the uncommitted change to jaxdp/ (None when clean)."""
    diff = subprocess.run(
        ["git", "diff", "HEAD", "--", "jaxdp"], capture_output=True, cwd=REPO, check=True
    ).stdout
    return hashlib.sha256(diff).hexdigest()[:16] if diff else None


def summary(mechanism: str, seeds: list[dict]) -> dict:
    metric = metric_of(mechanism)
    errors = {s["seed"]: s[metric] for s in seeds}
    mean = statistics.fmean(errors[s] for s in TEST_SEEDS)
    sd = statistics.stdev(errors.values())
    margin = margin_for(mean, sd)
    return {
        "metric": metric,
        "errors": errors,
        "mean": mean,
        "sd": sd,
        "worst_over_mean": max(errors.values()) / mean,
        "margin": margin,
        "ceiling": margin * mean,
    }


def table(records: list[dict]) -> str:
    lines = [
        "| mechanism | error | seeds 0-2 | mean (0-2) | other seeds | sd (every seed) | worst / mean "
        "| margin | ceiling | s (seed 0, then median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        e = {int(k): v for k, v in r["errors"].items()}
        test = ", ".join(f"{e[s]:.4f}" for s in TEST_SEEDS)
        extra = ", ".join(f"{v:.4f}" for s, v in sorted(e.items()) if s not in TEST_SEEDS) or "-"
        secs = [s["seconds"] for s in r["seeds"]]
        warm = statistics.median(secs[1:]) if len(secs) > 1 else float("nan")
        lines.append(
            f"| {r['mechanism']} | {r['metric']} | {test} | {r['mean']:.4f} | {extra} | {r['sd']:.4f} "
            f"| {r['worst_over_mean']:.3f} | {r['margin']:.2f} | {r['ceiling']:.4f} "
            f"| {secs[0]:.1f}, {warm:.1f} |"
        )
    return "\n".join(lines)


def python_table(records: list[dict]) -> str:
    """The test module's CEILINGS literal: name -> (metric, recorded mean over seeds 0-2, margin)."""
    lines = ["CEILINGS = {"]
    for r in records:
        lines.append(f'    "{r["mechanism"]}": ("{r["metric"]}", {r["mean"]:.6g}, {r["margin"]:.2f}),')
    lines.append("}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--table", action="store_true", help="print the tables of --out only (last record each)"
    )
    args = parser.parse_args()
    if args.table:
        latest: dict[str, dict] = {}
        for line in Path(args.out).read_text().splitlines():
            if line.strip() and (r := json.loads(line)).get("kernel") == KERNEL:
                latest[r["mechanism"]] = r
        print(table(list(latest.values())))
        print(python_table(list(latest.values())))
        return
    if not set(TEST_SEEDS) <= set(args.seeds):
        raise SystemExit(f"--seeds must include the test's seeds {TEST_SEEDS}")
    rec = Recorder(args.out)
    command = "PYTHONPATH=. python " + " ".join(["bench/bench_accuracy_floors.py", *sys.argv[1:]])
    records = []
    for mechanism in args.mechanisms:
        before, diff = load_average(), jaxdp_diff_sha()
        start = time.perf_counter()
        result = run_child(REPO, mechanism, args.seeds, "adult-reduced")
        wall = time.perf_counter() - start
        record = {
            "mechanism": mechanism,
            "seeds": result["seeds"],
            **summary(mechanism, result["seeds"]),
            "process_seconds": wall,
            "code_commit": result["commit"],
            "head": subprocess.run(
                ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO, check=True
            ).stdout.strip(),
            "jaxdp_diff_sha": diff,
            "jaxdp_diff_sha_after": jaxdp_diff_sha(),
            "command": command,
            "load_before": before,
            "load_after": load_average(),
        }
        sizes = {"dataset": "adult-reduced", "marginals": "all 3-way", "epsilon": 1.0, "delta": 1e-9}
        rec.emit(KERNEL, sizes, **record)
        records.append(record)
        print(f"{mechanism}: {[round(s['seconds'], 1) for s in result['seeds']]} s", file=sys.stderr)
    print(table(records))
    print(python_table(records))


if __name__ == "__main__":
    main()
