"""End-to-end peers: jaxdp's AIM, AIM-GEM, GEM, MST and PrivBayes against SmartNoise's and dpmm's
AIM and MST and dpmm's PrivBayes.

Issue #17. One run, one table, one workload, one budget: the 6-attribute ADULT projection (age,
education-num, marital-status, occupation, sex, income>50K; 48,842 records; data from
../shared/data/private-pgm/, skipped with a message when absent), all 20 3-way marginals,
epsilon 1, delta 1e-9, add/remove neighbours (the AIM paper's relation; what each peer assumes
is recorded with its rows). Every run is a whole process, timed from outside (start, imports,
data load, fit, sample, write):

- jaxdp: `python -m jaxdp synth --mechanism {aim,aim-gem,gem,mst,privbayes} ... --relation R`, with an
  empty compile cache per run (a fresh JAXDP_CACHE_DIR: first run, empty cache). R is
  add-remove for AIM, AIM-GEM and MST; GEM and PrivBayes support only replace-one (they refuse
  add-remove), so they run under replace-one, a different relation, and their rows say so.
- peers: `bench/_peer_runner.py` under the peers' own environment (default /work/peers-venv,
  `pip install -r bench/peers-requirements.txt`; it imports nothing from jaxdp), which also
  reports its own fit and sample seconds. Each peer is given the declared domain.
  `smartnoise+shim` is SmartNoise's own AIM/MST code with the module `mbi` aliased to dpmm's
  vendored pre-2.0 Private-PGM (SmartNoise needs `mbi.FactoredInference`, which no `mbi` on
  PyPI has; see _peer_runner.py); plain `smartnoise` is the package as installed.

Every synthetic table (48,842 rows for all) is scored by jaxdp's `evaluate.workload_errors` on
the same workload: mean over the 20 marginals of the L1 distance between normalised marginals,
and the max absolute cell error. Seeds are interleaved (seed 0: every library, then seed 1, ...)
so host load falls on all alike; the 1-minute load average is recorded before and after each
run. One JSON record per (library, mechanism, seed); re-running skips records already in --out
for the same code (`code_commit`: the last commit touching jaxdp/, bench/*.py or
pyproject.toml, `-dirty` if those have uncommitted changes), so a run can be resumed.

    PYTHONPATH=. python bench/peers.py --seeds 0 1 2 3 4 --out bench/results/peers_e2e_adult6.jsonl
    PYTHONPATH=. python bench/peers.py --only jaxdp:gem dpmm+nocompress:aim --seeds 0 ... --out ...
    PYTHONPATH=. python bench/peers.py --table bench/results/peers_e2e_adult6.jsonl   # markdown
    PYTHONPATH=. python bench/peers.py --mode mbi-post ...   # issue #9's same-measurements check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from _common import Recorder, load_average
from bench_aim import SIX, load_adult, write_table

from jaxdp import evaluate
from jaxdp.domain import Dataset
from jaxdp.queries import all_kway

EPSILON, DELTA = 1.0, 1e-9
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS_PYTHON = os.environ.get("PEERS_PYTHON", "/work/peers-venv/bin/python")

# (library, mechanism), in the order each seed runs them
RUNS = (
    ("jaxdp", "aim"),
    ("dpmm", "aim"),
    ("smartnoise+shim", "aim"),
    ("smartnoise", "aim"),
    ("jaxdp", "aim-gem"),
    ("jaxdp", "gem"),
    ("jaxdp", "mst"),
    ("dpmm", "mst"),
    ("jaxdp", "privbayes"),
    ("dpmm", "privbayes"),
    ("smartnoise+shim", "mst"),
    ("smartnoise", "mst"),
)
# run only when named in --only: dpmm's and jaxdp's AIM without their default domain compression
EXTRA_RUNS = (("dpmm+nocompress", "aim"), ("jaxdp+nocompress", "aim"))

# jaxdp's relation per mechanism (GEM supports replace-one only)
JAXDP_RELATION = {
    "aim": "add-remove",
    "aim-gem": "add-remove",
    "gem": "replace-one",
    "mst": "add-remove",
    "privbayes": "replace-one",
}

# What each library assumes, from its code (recorded with every row).
ASSUMPTIONS = {
    "jaxdp": "relation passed explicitly (--relation; add-remove for aim, aim-gem and mst, replace-one "
    "for gem and privbayes, their only relation); discrete Gaussian and "
    "exact exponential mechanism; zCDP to (eps, delta) by the exact conversion; domain declared",
    "dpmm": "add/remove (marginal L2 sensitivity 1, quality-score sensitivity = workload weight, as "
    "the AIM/MST papers); float Gaussian noise (NumPy RandomState); rho = cdp_rho(eps, delta); "
    "domain passed to fit() (without it dpmm infers max+1 from the private data); processing "
    "disabled (table already integer-coded); compress=True (library default; False for dpmm+nocompress); "
    "PrivBayes: its defaults (degree 2: one parent; normalised mutual information scored with the "
    "paper's mutual-information sensitivity; Gaussian measurements of L2 sensitivity 1)",
    "smartnoise": "add/remove (as the AIM/MST papers); float Gaussian noise (NumPy global "
    "generator); rho = cdp_rho(eps, delta); domain declared through a TableTransformer fitted on "
    "a public frame listing every code (fitting it on the data would read the categories off "
    "the private table); workload built by the library itself (all degree-3 marginals)",
}


def peer_versions() -> dict | None:
    """Versions installed in the peers' environment (recorded in every record, jaxdp's included)."""
    if not os.path.exists(PEERS_PYTHON):
        return None
    code = (
        "import json, sys; from importlib import metadata as m\n"
        "out = {'python': sys.version.split()[0]}\n"
        "for d in ('smartnoise-synth', 'smartnoise-sql', 'dpmm', 'mbi', 'numpy', 'pandas', 'scipy',\n"
        "          'torch', 'opendp'):\n"
        "    try: out[d] = m.version(d)\n"
        "    except m.PackageNotFoundError: out[d] = None\n"
        "print(json.dumps(out))"
    )
    proc = subprocess.run([PEERS_PYTHON, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def code_commit() -> str | None:
    """Last commit touching the measured code (not bench/results), `-dirty` if it has local edits."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.strip()

    paths = ["jaxdp", "bench/*.py", "pyproject.toml"]
    try:
        commit = git("log", "-1", "--format=%h", "--", *paths)
        dirty = git("status", "--porcelain", "--", *paths)
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("-dirty" if dirty else "")


def done_keys(path: str | None, commit: str | None) -> set[tuple[str, str, int]]:
    if not path or not os.path.exists(path):
        return set()
    keys = set()
    with open(path) as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("kernel") == "peers_e2e_adult6" and r.get("code_commit") == commit:
                keys.add((r["library"], r["mechanism"], r["seed"]))
    return keys


def run_jaxdp(
    mechanism: str,
    seed: int,
    table: str,
    domain: str,
    rows: int,
    work: str,
    extra: tuple[str, ...] = (),
    *,
    workload: str = "all-3way",
    epsilon: float = EPSILON,
    relation: str | None = None,
    timeout: float = 3600,
) -> dict:
    """`python -m jaxdp synth` as a whole process (fresh compile cache), timed from outside; a
    run past `timeout` seconds is recorded as timed out."""
    out, report = os.path.join(work, "synth.csv"), os.path.join(work, "report.json")
    cache = tempfile.mkdtemp(prefix="jaxdp-cache-", dir=work)
    cmd = [
        sys.executable,
        "-m",
        "jaxdp",
        "synth",
        "--mechanism",
        mechanism,
        "--epsilon",
        str(epsilon),
        "--delta",
        str(DELTA),
        "--data",
        table,
        "--domain",
        domain,
        "--workload",
        workload,
        "--relation",
        relation or JAXDP_RELATION[mechanism],
        "--seed",
        str(seed),
        "--rows",
        str(rows),
        "--out",
        out,
        "--report",
        report,
        *extra,
    ]
    env = dict(os.environ, JAXDP_CACHE_DIR=cache, PYTHONPATH=ROOT)
    row = {"command": " ".join(cmd[1:]), "cache": "fresh empty JAXDP_CACHE_DIR"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return row | {
            "wall_s": timeout,
            "ok": False,
            "timed_out": True,
            "error": f"over the {timeout:.0f} s cap",
        }
    row["wall_s"] = time.perf_counter() - start
    if proc.returncode != 0:
        return row | {"ok": False, "error": proc.stderr.strip()[-2000:]}
    with open(report) as fh:
        rep = json.load(fh)
    keep = ("relation", "rho_spent", "rho_budget", "epsilon_spent", "seconds", "conversion", "noise")
    summary = {k: rep[k] for k in keep if k in rep}
    if isinstance(rep.get("ledger"), list):
        summary["ledger_entries"] = len(rep["ledger"])
    return row | {"ok": True, "synthetic": out, "report": summary}


def run_peer(
    library: str,
    mechanism: str,
    seed: int,
    table: str,
    domain: str,
    rows: int,
    work: str,
    *,
    epsilon: float = EPSILON,
    max_cells: int | None = None,
    timeout: float = 3600,
) -> dict:
    """`bench/_peer_runner.py` under the peers' environment, timed from outside; a run past
    `timeout` seconds is recorded as timed out."""
    out, result = os.path.join(work, "synth.csv"), os.path.join(work, "result.json")
    cmd = [
        PEERS_PYTHON,
        os.path.join(HERE, "_peer_runner.py"),
        "--library",
        library.split("+")[0],
        "--mechanism",
        mechanism,
        "--data",
        table,
        "--domain",
        domain,
        "--epsilon",
        str(epsilon),
        "--delta",
        str(DELTA),
        "--seed",
        str(seed),
        "--rows",
        str(rows),
        "--out",
        out,
        "--result",
        result,
        *(() if max_cells is None else ("--max-cells", str(max_cells))),
    ]
    if library.endswith("+shim"):
        cmd.append("--mbi-shim")
    if library.endswith("+nocompress"):
        cmd.append("--no-compress")
    row, res = run_runner(cmd, work, result, timeout)
    if res is None:
        return row
    row |= {k: res[k] for k in ("fit_s", "sample_s", "settings", "error", "mbi_shim") if k in res}
    row["runner_versions"] = res.get("versions")  # "versions" is jaxdp's environment (Recorder)
    return row | {"ok": bool(res.get("ok")), "synthetic": out if res.get("ok") else None}


def run_runner(cmd: list[str], work: str, result: str, timeout: float) -> tuple[dict, dict | None]:
    """A peer's runner as a whole process in its own environment (jaxdp's PYTHONPATH and venv
    dropped), timed from outside: (the row so far, the JSON result it wrote), or (a failed row,
    None) where it ran past `timeout` seconds or wrote no result (a crash, or the kernel's OOM
    kill: the exit code is in the error)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    row = {"command": " ".join(cmd[1:])}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, timeout=timeout)
    except subprocess.TimeoutExpired:
        return row | {
            "wall_s": timeout,
            "ok": False,
            "timed_out": True,
            "error": f"over the {timeout:.0f} s cap",
        }, None
    row["wall_s"] = time.perf_counter() - start
    try:
        with open(result) as fh:
            return row, json.load(fh)
    except (OSError, json.JSONDecodeError):
        error = f"runner exited {proc.returncode}: {proc.stderr.strip()[-2000:]}"
        return row | {"ok": False, "error": error}, None


def score(data: Dataset, workload, path: str) -> dict:
    codes = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    sizes = np.asarray(data.domain.sizes)
    if codes.shape[1] != len(sizes) or (codes < 0).any() or (codes >= sizes).any():
        raise ValueError(f"synthetic table of shape {codes.shape} has codes outside the declared domain")
    errors = evaluate.workload_errors(data, Dataset.from_codes(data.domain, codes.astype(np.int32)), workload)
    return {"rows": len(codes), "mean_l1": errors["mean_l1"], "max_abs": errors["max_abs"]}


def run_all(args) -> None:
    data = load_adult(6)
    if data is None:
        return
    if not os.path.exists(PEERS_PYTHON):
        print(f"peers: {PEERS_PYTHON} missing; the peers are skipped (see bench/README.md)", file=sys.stderr)
    workload = all_kway(data.domain.sizes, 3)
    recorder = Recorder(args.out)
    commit = code_commit()
    versions = peer_versions()
    done = done_keys(args.out, commit)
    sizes = {"attributes": list(SIX), "records": len(data), "marginals": len(workload)}
    rows = len(data)
    only = set(args.only) if args.only else None
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        write_table(data, tmp, "adult6")
        table, domain = os.path.join(tmp, "adult6.csv"), os.path.join(tmp, "adult6-domain.json")
        for seed in args.seeds:
            for library, mechanism in RUNS + EXTRA_RUNS:
                if (library, mechanism, seed) in done or (only and f"{library}:{mechanism}" not in only):
                    continue
                if (library, mechanism) in EXTRA_RUNS and not only:
                    continue
                if not library.startswith("jaxdp") and not os.path.exists(PEERS_PYTHON):
                    continue
                work = tempfile.mkdtemp(prefix=f"{library}-{mechanism}-{seed}-", dir=tmp)
                load_before = load_average()
                if library.startswith("jaxdp"):
                    extra = ("--compress", "off") if library.endswith("+nocompress") else ()
                    row = run_jaxdp(mechanism, seed, table, domain, rows, work, extra)
                else:
                    row = run_peer(library, mechanism, seed, table, domain, rows, work)
                load_after = load_average()
                synthetic = row.pop("synthetic", None)
                if row["ok"]:
                    try:
                        row |= score(data, workload, synthetic)
                    except Exception as exc:  # a peer's output that cannot be scored is a failure
                        row |= {"ok": False, "error": f"scoring: {type(exc).__name__}: {exc}"}
                shutil.rmtree(work, ignore_errors=True)
                recorder.emit(
                    "peers_e2e_adult6",
                    sizes,
                    library=library,
                    mechanism=mechanism,
                    seed=seed,
                    epsilon=EPSILON,
                    delta=DELTA,
                    relation=JAXDP_RELATION[mechanism] if library.startswith("jaxdp") else "add-remove",
                    assumes=ASSUMPTIONS[library.split("+")[0]],
                    code_commit=commit,
                    peer_versions=versions,
                    load_avg_before=load_before,
                    load_avg_after=load_after,
                    **row,
                )


def summary(path: str, commits: Sequence[str] | None = None) -> str:
    """Markdown table of a results file: per (library, mechanism), over the seeds it completed
    (only the records of the given code commits, when given: one run's table)."""
    with open(path) as fh:
        records = [json.loads(line) for line in fh]
    records = [
        r
        for r in records
        if r.get("kernel") == "peers_e2e_adult6" and (not commits or r.get("code_commit") in commits)
    ]
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["library"], r["mechanism"], r.get("relation", "add-remove"))].append(r)
    base = [r for r in groups.get(("jaxdp", "aim", "add-remove"), []) if r["ok"]]
    base_time = statistics.median(r["wall_s"] for r in base) if base else None
    base_l1 = statistics.mean(r["mean_l1"] for r in base) if base else None
    lines = [
        "| library | mechanism | relation | seeds ok / run | median wall s | time / jaxdp AIM "
        "| mean L1 (mean ± sd) | L1 / jaxdp AIM | max error (mean) | commits | failures |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (library, mechanism, relation), rs in sorted(
        groups.items(), key=lambda kv: ((RUNS + EXTRA_RUNS).index(kv[0][:2]), kv[0])
    ):
        ok = [r for r in rs if r["ok"]]
        commits = ",".join(sorted({str(r.get("code_commit")) for r in rs}))
        failures = sorted({r["error"].splitlines()[-1][:120] for r in rs if not r["ok"]})
        if ok:
            t = statistics.median(r["wall_s"] for r in ok)
            l1 = [r["mean_l1"] for r in ok]
            sd = statistics.stdev(l1) if len(l1) > 1 else 0.0
            mx = statistics.mean(r["max_abs"] for r in ok)
            ratio_t = f"{t / base_time:.1f}x" if base_time else "-"
            ratio_l1 = f"{statistics.mean(l1) / base_l1:.2f}" if base_l1 else "-"
            cells = f"{t:.1f} | {ratio_t} | {statistics.mean(l1):.4f} ± {sd:.4f} | {ratio_l1} | {mx:.4f}"
        else:
            cells = "- | - | - | - | -"
        lines.append(
            f"| {library} | {mechanism} | {relation} | {len(ok)} / {len(rs)} | {cells} | {commits} | "
            f"{'; '.join(failures) or '-'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("e2e", "mbi-post"), default="e2e")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", default=None, help="append JSON lines to this file (and resume from it)")
    parser.add_argument("--only", nargs="+", help="library:mechanism pairs to run (default: all)")
    parser.add_argument(
        "--table", metavar="JSONL", help="print the markdown summary of a results file and exit"
    )
    parser.add_argument("--commits", nargs="+", help="with --table: only these code commits' records")
    args, rest = parser.parse_known_args()
    if args.table:
        print(summary(args.table, args.commits))
        return
    if args.mode == "mbi-post":
        import peers_mbi_post

        peers_mbi_post.main(
            ["--seeds", *map(str, args.seeds), *(["--out", args.out] if args.out else []), *rest]
        )
        return
    run_all(args)
    if args.out:
        print(summary(args.out, [code_commit()]))


if __name__ == "__main__":
    main()
