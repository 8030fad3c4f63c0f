"""jaxdp against Google's DPSynth, end to end, side by side: the same tables, workloads, budgets,
seeds and scorer, every run a whole process timed from outside.

- jaxdp: `python -m jaxdp synth --mechanism M` with its defaults (`bench/peers.py`'s
  `run_jaxdp`: a fresh, empty compile cache per run), add/remove neighbours.
- dpmm: its AIM (`bench/_peer_runner.py` under the peers' environment, `bench/peers.py`'s
  `run_peer`) on the same workload (every 3-way marginal, capped at 10,000 cells on the small
  tables).
- DPSynth: `bench/_dpsynth_runner.py` under DPSynth's own environment (DPSYNTH_PYTHON, default
  /work/dpsynth-venv/bin/python, built by `bash ../shared/peers/install-dpsynth.sh VENV`): its
  `DiscreteConfig` with compression on around AIM, AIM-GDP, SWIFT or MST, calibrated by its
  `calibrate(epsilon=, delta=)`, its defaults otherwise (add/remove, as its accounting assumes).
  Every record carries DPSynth's version and snapshot commit.

The tables are bench/bench_small.py's (`--tables`): the small ones (adult9, pums, pile: 1,000-
1,304 records, attributes of up to 100 values, every 3-way marginal of at most 10,000 cells) and
the large ones (adult6, binary16: every 3-way marginal). The score: jaxdp's
`evaluate.workload_errors` (mean L1 between normalised marginals, largest cell error) of the
released records. Runs go seed by seed, every mechanism of a seed in turn, so host load falls on
all alike; a run past `--cap` seconds is recorded as timed out (DPSynth's AIM took 11-18 minutes
a run on a 1,304-record table). Re-running skips the records already in --out for the same code
(`--again` runs them anyway: the pages read the latest record of each seed).

    PYTHONPATH=. python bench/bench_dpsynth.py --tables pile adult9 --seeds 0 1 2 3 4 \
        --out bench/results/dpsynth.jsonl
    PYTHONPATH=. python bench/bench_dpsynth.py --table bench/results/dpsynth.jsonl   # markdown
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
from collections import defaultdict

import bench_small
from _common import Recorder, load_average
from peers import DELTA, PEERS_PYTHON, code_commit, run_jaxdp, run_peer, run_runner, score

HERE = os.path.dirname(os.path.abspath(__file__))
DPSYNTH_PYTHON = os.environ.get("DPSYNTH_PYTHON", "/work/dpsynth-venv/bin/python")
KERNEL = "dpsynth_side_by_side"
# (library, mechanism) in the order each seed runs them: the quick ones first
RUNS = (
    ("jaxdp", "aim"),
    ("jaxdp", "aim-gdp"),
    ("jaxdp", "swift"),
    ("jaxdp", "mst"),
    ("dpsynth", "mst"),
    ("dpsynth", "swift"),
    ("dpsynth", "aim-gdp"),
    ("dpmm", "aim"),
    ("dpsynth", "aim"),
)


def run_dpsynth(mechanism: str, seed: int, table: str, domain: str, workload: str, work: str, args) -> dict:
    out, result = os.path.join(work, "synth.csv"), os.path.join(work, "result.json")
    cmd = [
        DPSYNTH_PYTHON,
        os.path.join(HERE, "_dpsynth_runner.py"),
        *("--mechanism", mechanism, "--data", table, "--domain", domain, "--workload", workload),
        *("--epsilon", str(args.epsilon), "--delta", str(DELTA), "--seed", str(seed)),
        *("--out", out, "--result", result),
    ]
    row, res = run_runner(cmd, work, result, args.cap)
    if res is None:
        return row
    row |= {k: res[k] for k in ("fit_s", "settings", "calibration", "error") if k in res}
    row["dpsynth_versions"] = res.get("versions")
    return row | {"ok": bool(res.get("ok")), "synthetic": out if res.get("ok") else None}


def done_keys(path: str | None, commit: str | None) -> set[tuple]:
    """The runs `path` already holds: jaxdp's at this code commit, the peers' at any (a DPSynth or
    dpmm run reads none of jaxdp's code, and one takes 10-40 minutes; a failed or timed-out one
    counts as done too: delete its line to redo it)."""
    if not path or not os.path.exists(path):
        return set()
    with open(path) as fh:
        records = [json.loads(line) for line in fh]
    return {
        (r["table"], r["library"], r["mechanism"], r["seed"], r["epsilon"])
        for r in records
        if r.get("kernel") == KERNEL and (r["library"] != "jaxdp" or r.get("code_commit") == commit)
    }


def run_all(args) -> None:
    recorder = Recorder(args.out)
    commit = code_commit()
    done = set() if args.again else done_keys(args.out, commit)
    only = set(args.only) if args.only else None
    for name in args.tables:
        data = bench_small.TABLES[name]() if name in bench_small.TABLES else bench_small.LARGE[name]()
        workload = bench_small.workload_of(
            data, bench_small.MAX_CELLS if name in bench_small.TABLES else None
        )
        names = data.domain.names
        sizes = {"table": name, "records": len(data), "attributes": len(names), "marginals": len(workload)}
        with tempfile.TemporaryDirectory(prefix="dpsynth-") as tmp:
            table, domain, cliques = bench_small.write_case(data, workload, tmp, name)
            for seed in args.seeds:
                for library, mechanism in RUNS:
                    key = (name, library, mechanism, seed, args.epsilon)
                    if key in done or (only and f"{library}:{mechanism}" not in only):
                        continue
                    python = {"dpsynth": DPSYNTH_PYTHON, "dpmm": PEERS_PYTHON}.get(library)
                    if python is not None and not os.path.exists(python):
                        print(f"bench_dpsynth: {python} missing; {library} skipped")
                        continue
                    work = tempfile.mkdtemp(prefix=f"{library}-{mechanism}-{seed}-", dir=tmp)
                    load_before = load_average()
                    if library == "jaxdp":
                        row = run_jaxdp(
                            mechanism,
                            seed,
                            table,
                            domain,
                            len(data),
                            work,
                            workload=cliques,
                            epsilon=args.epsilon,
                            relation="add-remove",
                            timeout=args.cap,
                        )
                    elif library == "dpmm":
                        row = run_peer(
                            library,
                            mechanism,
                            seed,
                            table,
                            domain,
                            len(data),
                            work,
                            epsilon=args.epsilon,
                            max_cells=bench_small.MAX_CELLS if name in bench_small.TABLES else None,
                            timeout=args.cap,
                        )
                    else:
                        row = run_dpsynth(mechanism, seed, table, domain, cliques, work, args)
                    load_after = load_average()
                    synthetic = row.pop("synthetic", None)
                    if row["ok"]:
                        try:
                            row |= score(data, workload, synthetic)
                        except Exception as exc:  # output that cannot be scored is a failure
                            row |= {"ok": False, "error": f"scoring: {type(exc).__name__}: {exc}"}
                    shutil.rmtree(work, ignore_errors=True)
                    record = recorder.emit(
                        KERNEL,
                        sizes,
                        table=name,
                        library=library,
                        mechanism=mechanism,
                        seed=seed,
                        epsilon=args.epsilon,
                        delta=DELTA,
                        relation="add-remove",
                        cap_s=args.cap,
                        code_commit=commit,
                        load_avg_before=load_before,
                        load_avg_after=load_after,
                        **row,
                    )
                    print(
                        f"{name} seed {seed} {library}:{mechanism}: ok={record['ok']} "
                        f"wall {record['wall_s']:.0f} s L1 {record.get('mean_l1', float('nan')):.4f} "
                        f"max {record.get('max_abs', float('nan')):.4f}",
                        flush=True,
                    )


def summary(path: str) -> str:
    """Markdown: per (table, epsilon, library, mechanism), over the seeds run."""
    with open(path) as fh:
        records = [r for r in map(json.loads, fh) if r.get("kernel") == KERNEL]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["table"], r["epsilon"], r["library"], r["mechanism"])].append(r)
    lines = [
        "| table | epsilon | library | mechanism | seeds ok / run | mean L1 (mean ± sd) | max error (mean) "
        "| median wall s | timed out | commits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (table, epsilon, library, mechanism), rs in sorted(groups.items()):
        ok = [r for r in rs if r["ok"]]
        timed_out = sum(bool(r.get("timed_out")) for r in rs)
        commits = ",".join(sorted({str(r.get("code_commit")) for r in rs}))
        if ok:
            l1 = [r["mean_l1"] for r in ok]
            sd = statistics.stdev(l1) if len(l1) > 1 else 0.0
            mx = statistics.mean(r["max_abs"] for r in ok)
            wall = statistics.median(r["wall_s"] for r in ok)
            cells = f"{statistics.mean(l1):.4f} ± {sd:.4f} | {mx:.4f} | {wall:.0f}"
        else:
            cells = "- | - | -"
        lines.append(
            f"| {table} | {epsilon:g} | {library} | {mechanism} | {len(ok)} / {len(rs)} | {cells} | "
            f"{timed_out} | {commits} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tables = (*bench_small.TABLES, *bench_small.LARGE)
    parser.add_argument("--tables", nargs="+", choices=tables, default=["pile", "adult9"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--cap", type=float, default=1200.0, help="seconds a run may take (default 1200)")
    parser.add_argument("--only", nargs="+", help="library:mechanism pairs to run (default: all)")
    parser.add_argument("--out", default=None, help="append JSON lines to this file (and resume from it)")
    parser.add_argument(
        "--again",
        action="store_true",
        help="run every selected run even where --out holds it (a side-by-side rerun in one loop)",
    )
    parser.add_argument("--table", metavar="JSONL", help="print the markdown summary of a results file")
    args = parser.parse_args()
    if args.table:
        print(summary(args.table))
        return
    run_all(args)
    if args.out:
        print(summary(args.out))


if __name__ == "__main__":
    main()
