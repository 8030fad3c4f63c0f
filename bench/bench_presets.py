"""Every registry mechanism, as a preset of the builder, against the code before it was one.

For each registry name, the same job runs on two checkouts in the same loop: this one and
another (`--code NAME=PATH`, e.g. a worktree at the commit before the presets), alternating which
goes first from one mechanism to the next. Each checkout runs in a fresh process
(`_preset_child.py`): ADULT-reduced (48,842 records, 7 attributes), all 35 3-way marginals,
epsilon 1, delta 1e-9, the registry's defaults (the public variants get every tenth record as
their public table), one release per seed. Recorded per (mechanism, checkout): each seed's
workload errors of the release (max_abs, mean_l1), its `api.execute` seconds (the first seed
compiles; the others are warm) and a digest of the release and ledger, the measured checkout's
commit (`code_commit`; `commit` is the bench's own) and the load average. The table gives mean
+- standard error over the seeds, the median warm seconds and whether every seed's release is
bit-identical across the checkouts.

    git worktree add /tmp/jaxdp-base 5724cce
    PYTHONPATH=. python bench/bench_presets.py --code base=/tmp/jaxdp-base --out bench/results/presets.jsonl
    PYTHONPATH=. python bench/bench_presets.py --replot --out bench/results/presets.jsonl  # table only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import Recorder, load_average

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
from _preset_child import TABLES  # noqa: E402

from jaxdp.api import MECHANISMS  # noqa: E402

KERNEL = "presets"


def run_child(root: Path, mechanism: str, seeds: list[int], table: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [
        sys.executable,
        str(BENCH / "_preset_child.py"),
        "--mechanism",
        mechanism,
        "--table",
        table,
        "--seeds",
        *map(str, seeds),
    ]
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=BENCH, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return mean, se


# the error each mechanism's paper optimises: mean L1 for AIM's, max error for the rest
MEAN_L1 = ("aim", "aim-gem")


def papers_error(mechanism: str, seed: dict) -> float:
    return seed["mean_l1"] if mechanism in MEAN_L1 else seed["max_abs"]


def table(records: list[dict]) -> str:
    """Markdown: per table, mechanism and checkout, errors (mean +- SE), the fitted distribution's
    own mean L1 and the records' over it (mean of the seeds' ratios), the paper's error over
    Independent's on the same table and checkout (means over the seeds), warm seconds,
    identical releases."""
    lines = [
        "| table | mechanism | checkout (commit) | max error | mean L1 | model's mean L1 | records / model "
        "| paper's error / Independent's | warm s (median) | first s | releases identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_mech: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        by_mech.setdefault((r.get("table", "adult-reduced"), r["mechanism"]), []).append(r)
    for (name, mechanism), runs in by_mech.items():
        digests = {r["code"]: [s["digest"] for s in r["seeds"]] for r in runs}
        identical = "yes" if len({tuple(d) for d in digests.values()}) == 1 else "no"
        for r in sorted(runs, key=lambda r: r["code"]):
            seeds = r["seeds"]
            m, m_se = mean_se([s["max_abs"] for s in seeds])
            l1, l1_se = mean_se([s["mean_l1"] for s in seeds])
            warm = statistics.median(s["seconds"] for s in seeds[1:]) if len(seeds) > 1 else float("nan")
            errors = f"{m:.4f} ± {m_se:.4f} | {l1:.4f} ± {l1_se:.4f}"
            fitted = [s.get("relaxed_mean_l1") for s in seeds]
            if all(f is not None for f in fitted):
                ratio = statistics.fmean(s["mean_l1"] / s["relaxed_mean_l1"] for s in seeds)
                errors += f" | {statistics.fmean(fitted):.4f} | {ratio:.3f}"
            else:
                errors += " | - | -"
            baseline = [b for b in by_mech.get((name, "independent"), []) if b["code"] == r["code"]]
            if baseline and mechanism != "independent":
                own = statistics.fmean(papers_error(mechanism, s) for s in seeds)
                theirs = statistics.fmean(papers_error(mechanism, s) for s in baseline[0]["seeds"])
                errors += f" | {own / theirs:.2f}"
            else:
                errors += " | -"
            lines.append(
                f"| {name} | {mechanism} | {r['code']} ({r['code_commit']}) | {errors} "
                f"| {warm:.2f} | {seeds[0]['seconds']:.1f} | {identical} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", action="append", default=[], help="NAME=PATH of another checkout")
    parser.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--table", choices=TABLES, default="adult-reduced", help="the records to run on")
    parser.add_argument("--out", default=None)
    parser.add_argument("--replot", action="store_true", help="print the table of --out only")
    args = parser.parse_args()
    if args.replot:
        records = [json.loads(line) for line in Path(args.out).read_text().splitlines() if line.strip()]
        print(table([r for r in records if r.get("kernel") == KERNEL]))
        return
    codes = [("this", REPO), *((c.split("=", 1)[0], Path(c.split("=", 1)[1])) for c in args.code)]
    rec = Recorder(args.out)
    records = []
    for i, mechanism in enumerate(args.mechanisms):
        order = codes if i % 2 == 0 else codes[::-1]
        for name, root in order:
            before = load_average()
            result = run_child(root, mechanism, args.seeds, args.table)
            record = {
                "mechanism": result["mechanism"],
                "table": args.table,
                "seeds": result["seeds"],
                "code": name,
                "code_commit": result["commit"],
                "code_root": result["code_root"],
                "load_before": before,
                "load_after": load_average(),
            }
            rec.emit(KERNEL, {"dataset": args.table, "marginals": "all 3-way", "epsilon": 1.0}, **record)
            records.append(record)
            print(
                f"{mechanism} {name}: {[round(s['seconds'], 1) for s in result['seeds']]} s", file=sys.stderr
            )
    print(table(records))


if __name__ == "__main__":
    main()
