"""A release's saved model: file size, save and load, sampling 10^6 rows (and 10^6 rows of a
subgroup) from AIM's model on the bundled ADULT, as whole processes and in one; and the quality
report's time on raw Adult.

    PYTHONPATH=. python bench/bench_model.py --out bench/results/model.jsonl

Records (JSON lines, `bench/_common.py`): `model_files` (the first release's whole process with
`--model`, the file's size, a load's seconds), `model_sample` (whole `python -m jaxdp sample`
processes: plain and `--where`, at each row count), `model_sample_in_process` (one process: a
row count's first call, compile included, and its second; the programs a new row count builds),
`quality_report` (whole `python -m jaxdp report --html` on raw Adult's AIM release, all 2-way
marginals, when ../shared is there; `--report-only` runs it alone).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

from bench._common import Recorder, load_average

ROOT = Path(__file__).resolve().parents[1]
RAW_ADULT = ROOT.parent / "shared" / "data" / "dp-data-raw-adult" / "train.csv"


def _process(argv: list[str]) -> float:
    """Seconds of a whole `python -m jaxdp` process (no compile cache: a cold start)."""
    env = {**os.environ, "JAXDP_NO_COMPILE_CACHE": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jaxdp", *argv], env=env, check=True, capture_output=True, text=True
    )
    return time.perf_counter() - start


def _median(samples: list[float]) -> dict:
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "repeats": len(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="append the records to this JSON-lines file")
    parser.add_argument("--rows", type=int, nargs="+", default=[48842, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--where", default="sex=0", help="the subgroup's condition")
    parser.add_argument("--report-only", action="store_true", help="only the quality report's record")
    args = parser.parse_args()
    recorder = Recorder(args.out)
    if args.report_only:
        _report(recorder, Path(tempfile.mkdtemp(prefix="jaxdp-bench-model-")), args.repeats)
        return
    work = Path(tempfile.mkdtemp(prefix="jaxdp-bench-model-"))
    model, first = work / "adult.jaxdp", work / "first.csv"
    synth = [
        "synth",
        "--mechanism",
        "aim",
        "--dataset",
        "adult",
        "--workload",
        "adult-target",
        "--epsilon",
        "1",
    ]
    release_s = _process([*synth, "--seed", "0", "--out", str(first), "--model", str(model)])
    import jaxdp

    loads = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        loaded = jaxdp.load_model(model)
        loads.append(time.perf_counter() - start)
    recorder.emit(
        "model_files",
        {"table": "adult", "mechanism": "aim", "rows": loaded.rows},
        release_process_s=release_s,
        file_bytes=model.stat().st_size,
        load=_median(loads),
        load_average=load_average(),
    )
    for rows in args.rows:
        for where in (None, args.where):
            argv = [
                "sample",
                "--model",
                str(model),
                "--rows",
                str(rows),
                "--seed",
                "1",
                "--out",
                str(work / "s.csv"),
            ]
            argv += ["--where", where] if where else []
            times = [_process(argv) for _ in range(args.repeats)]
            recorder.emit(
                "model_sample",
                {"table": "adult", "rows": rows, "where": where},
                process=_median(times),
                first_release_process_s=release_s,
                load_average=load_average(),
            )
    _in_process(recorder, loaded, args)
    if RAW_ADULT.exists():
        _report(recorder, work, args.repeats)


def _in_process(recorder: Recorder, model, args) -> None:
    """A row count's first sample (compiles) and second, and what a new row count builds."""
    from jax import monitoring

    built: list[str] = []
    monitoring.register_event_duration_secs_listener(
        lambda event, duration, **_: (
            built.append(event) if event == "/jax/core/compile/backend_compile_duration" else None
        )
    )
    for where in (None, {"sex": 0}):
        for rows in args.rows:
            before = len(built)
            start = time.perf_counter()
            model.sample(jax.random.key(1), rows=rows, where=where)
            first = time.perf_counter() - start
            programs = len(built) - before
            start = time.perf_counter()
            model.sample(jax.random.key(2), rows=rows, where=where)
            recorder.emit(
                "model_sample_in_process",
                {"table": "adult", "rows": rows, "where": None if where is None else "sex=0"},
                first_call_s=first,
                second_call_s=time.perf_counter() - start,
                programs_compiled_by_first_call=programs,
                load_average=load_average(),
            )


def _report(recorder: Recorder, work: Path, repeats: int) -> None:
    schema = ROOT / "examples" / "adult_schema.json"
    synthetic = work / "raw_synth.csv"
    argv = [
        "synth",
        "--mechanism",
        "aim",
        "--data",
        str(RAW_ADULT),
        "--schema",
        str(schema),
        "--epsilon",
        "1",
    ]
    release_s = _process([*argv, "--seed", "0", "--out", str(synthetic), "--model", str(work / "raw.jaxdp")])
    argv = ["report", "--real", str(RAW_ADULT), "--schema", str(schema), "--synth", str(synthetic)]
    argv += ["--model", str(work / "raw.jaxdp"), "--html", str(work / "report.html")]
    times = [_process(argv) for _ in range(repeats)]
    recorder.emit(
        "quality_report",
        {"table": "raw adult train", "columns": 15},
        process=_median(times),
        release_process_s=release_s,
        page_bytes=(work / "report.html").stat().st_size,
        load_average=load_average(),
    )


if __name__ == "__main__":
    main()
