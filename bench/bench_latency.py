"""Whole-process latency of the command line, as users feel it: import, data load, compile, run, write.

Every run is a fresh `python` process running `python -m jaxdp ...` (the package's `__main__`)
with JAX's compile-duration listeners attached, so its seconds split into

- import: `import jaxdp.cli` (JAX, NumPy and jaxdp's modules);
- load: reading and validating the input tables;
- trace, lower, compile: JAX tracing, lowering to StableHLO, and XLA compiling or loading the
  program from the persistent cache (`programs` counts them, `cache_hits` the loaded ones);
- write: writing the output files;
- run: the rest of the job (execution, host work);
- startup_exit: interpreter start and teardown (the whole wall time minus the above).

Cases (issue #17): `evaluate` on the 14-attribute Private-PGM ADULT, all 364 3-way marginals, next
to a plain NumPy bincount script doing the same (`bench/numpy_marginal_errors.py`); PEP on the
bundled ADULT-reduced, T = 25; GEM on the bundled ADULT, T = 50; RAP-softmax on the bundled ADULT,
its defaults; `aim`, the README's main job; `aim-pums`, AIM on `bench_small.py`'s 1,000-record PUMS
table as `bench_dpsynth.py` runs it (needs ../shared/data). Variants: `cold` (an empty cache
directory: the first run), `warm` (the cache a previous run filled), `warm, epsilon 2` (the same
cache, filled at epsilon 1, for a run at epsilon 2: a new budget is a new program only where the
noise scales are compiled in) and `no-cache` (`--no-compile-cache`). `--code NAME=PATH` runs another
checkout's CLI (e.g. an older commit in a temporary worktree) alternating with this one within every
repeat; code without the cache runs only as `no-cache`. Records hold the median [min, max] over
repeats of wall and CPU seconds (user + system: less sensitive to a busy host than wall time), the
phases' medians, the load average before and after, and each checkout's commit.

    PYTHONPATH=. python bench/bench_latency.py --cases evaluate pep --repeats 5
    git worktree add /tmp/jaxdp-base <commit>
    PYTHONPATH=. python bench/bench_latency.py --code base=/tmp/jaxdp-base --out bench/results/latency.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import Recorder, git_commit, load_average

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PGM = REPO.parent / "shared" / "data" / "private-pgm"
from _latency_child import PHASES_ENV  # noqa: E402

_SYNTH_OUT = ["--seed", "0", "--out", "{tmp}/out.csv", "--report", "{tmp}/report.json"]
CASES = {
    "evaluate": [
        *("evaluate", "--real", "{pgm}/adult.csv", "--synth", "{tmp}/synth.csv"),
        *("--domain", "{pgm}/adult-domain.json", "--workload", "all-3way"),
    ],
    "pep": [
        "synth",
        "--mechanism",
        "pep",
        "--dataset",
        "adult-reduced",
        "--epsilon",
        "1",
        "--rounds",
        "25",
        *_SYNTH_OUT,
    ],
    "gem": [
        "synth",
        "--mechanism",
        "gem",
        "--dataset",
        "adult",
        "--epsilon",
        "1",
        "--rounds",
        "50",
        *_SYNTH_OUT,
    ],
    "rap-softmax": [
        "synth",
        "--mechanism",
        "rap-softmax",
        "--dataset",
        "adult",
        "--epsilon",
        "1",
        *_SYNTH_OUT,
    ],
    # the README's main job: AIM on the bundled ADULT for the workload it ships with
    "aim": [
        *("synth", "--mechanism", "aim", "--dataset", "adult", "--workload", "adult-target"),
        *("--epsilon", "1", *_SYNTH_OUT),
    ],
    # AIM on bench_small's pums (1,000 records, attributes of up to 95 values) as bench_dpsynth.py
    # runs it, where DPSynth's AIM takes 36-90 s and the target is a tenth of that
    "aim-pums": [
        *("synth", "--mechanism", "aim", "--data", "{tmp}/pums.csv", "--domain", "{tmp}/pums-domain.json"),
        *("--workload", "{tmp}/workload.json", "--relation", "add-remove", "--epsilon", "1"),
        *("--delta", "1e-9", "--rows", "1000", *_SYNTH_OUT),
    ],
}
TARGETS = {
    "evaluate": "cold no slower than the NumPy script; warm 3x faster than it",
    "pep": "whole process <= 5 s cold on the 2-core CPU (issue #24)",
    "gem": "whole process <= 60 s (one GPU, cold: <= 12 s, issue #24)",
    "rap-softmax": "one GPU, cold: <= 15 s (issue #24)",
    "aim": "the README's main job: no target of its own",
    "aim-pums": "whole process <= 1/10 of DPSynth's AIM on the same table (bench_dpsynth.py)",
}


def _measure(command: list[str], env: dict, phases_path: Path | None) -> dict:
    """Run one whole process; wall and CPU seconds (and its phases when it reports them)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    out = {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}
    if phases_path is not None:
        child = json.loads(phases_path.read_text())
        if child["status"] != 0:
            raise RuntimeError(f"{' '.join(command)} exited {child['status']}")
        out.update(programs=child["programs"], cache_hits=child["cache_hits"], phases=child["phases"])
        out["phases"]["startup_exit"] = wall - sum(child["phases"].values())
    return out


def _summary(runs: list[dict]) -> dict:
    def stats(values):
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    out = {"wall_s": stats([r["wall_s"] for r in runs]), "cpu_s": stats([r["cpu_s"] for r in runs])}
    if "phases" in runs[0]:
        out["phases_median_s"] = {
            p: statistics.median(r["phases"][p] for r in runs) for p in runs[0]["phases"]
        }
        out["programs"] = statistics.median(r["programs"] for r in runs)
        out["cache_hits"] = statistics.median(r["cache_hits"] for r in runs)
    return out


def _at_epsilon(command: list[str], epsilon: str) -> list[str]:
    """`command` with its --epsilon value replaced."""
    at = command.index("--epsilon") + 1
    return [*command[:at], epsilon, *command[at + 1 :]]


def _has_compile_cache(checkout: Path) -> bool:
    return (checkout / "jaxdp" / "_compile_cache.py").exists()


def _synthetic_table(pgm: Path, tmp: Path) -> None:
    """An independent-marginals table as `evaluate`'s synthetic input: each column of the real table
    permuted on its own (same size and 1-way marginals as a real release; a bench fixture only)."""
    with open(pgm / "adult.csv") as fh:
        header = fh.readline()
        codes = np.loadtxt(fh, delimiter=",", dtype=np.int64, ndmin=2)
    rng = np.random.default_rng(0)
    shuffled = np.stack([rng.permutation(col) for col in codes.T], axis=1)
    with open(tmp / "synth.csv", "w") as fh:
        fh.write(header)
        np.savetxt(fh, shuffled, fmt="%d", delimiter=",")


def _pums_table(tmp: Path) -> None:
    """bench_small's pums table, its domain and its workload (every 3-way marginal of at most
    10,000 cells) as `bench_dpsynth.py` writes them."""
    import bench_small

    data = bench_small.TABLES["pums"]()
    bench_small.write_case(data, bench_small.workload_of(data, bench_small.MAX_CELLS), str(tmp), "pums")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=["evaluate", "pep"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--code",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also run the CLI of the checkout at PATH (alternating with this one)",
    )
    parser.add_argument(
        "--pgm-dir",
        type=Path,
        default=PGM,
        help=f"Private-PGM's ADULT (adult.csv, adult-domain.json); default {PGM}",
    )
    parser.add_argument("--out", help="append JSON lines to this file")
    args = parser.parse_args()
    if "evaluate" in args.cases and not args.pgm_dir.is_dir():
        sys.exit(f"{args.pgm_dir} is absent: the evaluate case needs Private-PGM's ADULT (--pgm-dir)")
    checkouts = {"this": REPO}
    for spec in args.code:
        name, _, path = spec.partition("=")
        checkouts[name] = Path(path).resolve()
    recorder = Recorder(args.out)
    with tempfile.TemporaryDirectory(prefix="jaxdp-latency-") as tmp_name:
        tmp = Path(tmp_name)
        if "evaluate" in args.cases:
            _synthetic_table(args.pgm_dir, tmp)
        if "aim-pums" in args.cases:
            _pums_table(tmp)
        for case in args.cases:
            _run_case(case, checkouts, args.repeats, tmp, args.pgm_dir, recorder)


def _run_case(
    case: str, checkouts: dict[str, Path], repeats: int, tmp: Path, pgm: Path, recorder: Recorder
) -> None:
    argv = [a.format(pgm=pgm, tmp=tmp) for a in CASES[case]]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAXDP_"))}
    phases_path = tmp / "phases.json"
    variants: list[tuple[str, str, list[str], dict]] = []  # (code, variant, command, env)
    for name, checkout in checkouts.items():
        env = {**base_env, "PYTHONPATH": str(checkout), PHASES_ENV: str(phases_path)}
        child = [sys.executable, str(BENCH / "_latency_child.py"), *argv]
        if _has_compile_cache(checkout):
            warm_dir = tmp / f"warm-{name}"
            variants += [
                (name, "cold", child, env),  # a fresh JAXDP_CACHE_DIR is set per repeat below
                (name, "warm", child, {**env, "JAXDP_CACHE_DIR": str(warm_dir)}),
                (name, "no-cache", [*child, "--no-compile-cache"], env),
            ]
            if "--epsilon" in argv:
                other = _at_epsilon(child, "2")
                variants.append((name, "warm, epsilon 2", other, {**env, "JAXDP_CACHE_DIR": str(warm_dir)}))
            _measure(child, {**env, "JAXDP_CACHE_DIR": str(warm_dir)}, phases_path)  # fill the warm cache
        else:
            variants.append((name, "no-cache", child, env))
    if case == "evaluate":
        script = [sys.executable, str(BENCH / "numpy_marginal_errors.py"), *argv[2:7:2]]
        variants.append(("numpy", "reference", script, base_env))
    runs: dict[tuple[str, str], list[dict]] = {(c, v): [] for c, v, _, _ in variants}
    commits = {name: git_commit(path) for name, path in checkouts.items()}
    load_before = load_average()
    for repeat in range(repeats):
        for code, variant, command, env in variants:
            if variant == "cold":
                env = {**env, "JAXDP_CACHE_DIR": str(tmp / f"cold-{code}-{repeat}")}
            elif variant == "warm, epsilon 2":
                # a fresh cache filled at epsilon 1 (a copied cache directory is not read as one)
                env = {**env, "JAXDP_CACHE_DIR": str(tmp / f"other-{code}-{repeat}")}
                _measure(_at_epsilon(command, "1"), env, phases_path)
            reports_phases = code != "numpy"
            if reports_phases:
                phases_path.unlink(missing_ok=True)
            runs[code, variant].append(_measure(command, env, phases_path if reports_phases else None))
    load_after = load_average()
    changed = [name for name, path in checkouts.items() if git_commit(path) != commits[name]]
    if changed:  # a commit made during the run: its records cannot name the code they measured
        raise RuntimeError(f"the checkouts {changed} changed commit during the run; rerun on a fixed tree")
    sizes = {"case": case, "argv": " ".join(CASES[case])}
    reference = statistics.median(r["wall_s"] for r in runs.get(("numpy", "reference"), [{"wall_s": np.nan}]))
    for (code, variant), measured in runs.items():
        summary = _summary(measured)
        fields = {}
        if case == "evaluate" and code != "numpy":
            fields["wall_over_numpy"] = summary["wall_s"]["median"] / reference
        recorder.emit(
            f"latency/{case}",
            sizes,
            code=code,
            code_commit=commits.get(code),
            variant=variant,
            repeats=repeats,
            **summary,
            **fields,
            target=TARGETS[case],
            load_avg_before=load_before,
            load_avg_after=load_after,
        )


if __name__ == "__main__":
    main()
