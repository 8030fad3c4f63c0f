"""Kill and resume (issue #27): a `python -m jaxdp synth --checkpoint` process is SIGKILLed at a
round, or halfway through writing a checkpoint or an output, and the same command run again
releases the same bytes, report and ledger as an uninterrupted run.

The kill points are drawn from a seeded list (`KILLS`); `tests/_kill_at.py` places each SIGKILL
deterministically. The processes share one persistent compilation cache, so a resumed process
runs the very programs the killed one compiled.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[1]
KILL_AT = ROOT / "tests" / "_kill_at.py"
EVERY = 2
ROUNDS = {"mwem": 6, "pep": 6, "gem": 6, "rap++": 6, "aim": 12}


def _kills(seed: int = 27, per_mechanism: int = 3) -> list[tuple[str, str, int]]:
    """(mechanism, kill point, n): after the nth checkpoint, or halfway through writing it."""
    rng = random.Random(seed)
    points = [("after-save", n) for n in (1, 2)] + [("mid-save", n) for n in (1, 2, 3)]
    return [(m, *p) for m in ROUNDS for p in rng.sample(points, per_mechanism)]


KILLS = _kills()


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> dict[str, Path]:
    """A small correlated table with its domain, and a compilation cache the processes share."""
    base = tmp_path_factory.mktemp("resume")
    rng = np.random.default_rng(27)
    a = rng.integers(0, 3, 600)
    columns = {
        "a": a,
        "b": (a + rng.integers(0, 2, 600)) % 4,
        "c": rng.integers(0, 2, 600),
        "d": (a * 2 + rng.integers(0, 2, 600)) % 5,
        "e": rng.integers(0, 3, 600),
    }
    sizes = {"a": 3, "b": 4, "c": 2, "d": 5, "e": 3}
    rows = "\n".join(",".join(str(columns[c][i]) for c in sizes) for i in range(600))
    (base / "data.csv").write_text(",".join(sizes) + "\n" + rows + "\n")
    (base / "domain.json").write_text(json.dumps(sizes))
    (base / "cache").mkdir()
    return {"data": base / "data.csv", "domain": base / "domain.json", "cache": base / "cache"}


def _command(table, mechanism: str, run: Path) -> list[str]:
    return [
        "synth",
        "--mechanism",
        mechanism,
        "--data",
        str(table["data"]),
        "--domain",
        str(table["domain"]),
        "--epsilon",
        "2",
        "--rounds",
        str(ROUNDS[mechanism]),
        "--seed",
        "11",
        "--checkpoint",
        str(run / "ckpt"),
        "--checkpoint-every",
        str(EVERY),
        "--out",
        str(run / "synthetic.csv"),
        "--report",
        str(run / "report.json"),
    ]


def _run(table, args: list[str], kill: tuple[str, int] | None = None) -> subprocess.CompletedProcess:
    env = cli_env(table["cache"])
    head = (
        [sys.executable, str(KILL_AT), kill[0], str(kill[1]), "--"]
        if kill
        else [sys.executable, "-m", "jaxdp"]
    )
    return subprocess.run([*head, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def _released(run: Path) -> tuple[bytes, dict, dict]:
    """The release's bytes, its report without the timing and the checkpoint's own record, and
    that record."""
    report = json.loads((run / "report.json").read_text())
    report.pop("seconds")
    return (run / "synthetic.csv").read_bytes(), report, report.pop("checkpoint")


_uninterrupted: dict[str, tuple[bytes, dict, dict]] = {}


def _reference(table, mechanism: str, base: Path) -> tuple[bytes, dict, dict]:
    if mechanism not in _uninterrupted:
        run = base / f"{mechanism}-uninterrupted"
        run.mkdir()
        proc = _run(table, _command(table, mechanism, run))
        assert proc.returncode == 0, proc.stderr
        assert not (run / "ckpt").exists(), "the checkpoint is removed once the outputs are written"
        _uninterrupted[mechanism] = _released(run)
    return _uninterrupted[mechanism]


def _kill_and_resume(table, tmp_path, mechanism: str, point: str, n: int) -> None:
    expected, expected_report, record = _reference(table, mechanism, tmp_path)
    assert record == {"every": EVERY, "resumed_from_round": None}
    run = tmp_path / f"{mechanism}-{point}-{n}"
    run.mkdir()
    command = _command(table, mechanism, run)
    killed = _run(table, command, kill=(point, n))
    assert killed.returncode == -9, f"not killed at {point} {n}: {killed.stderr[-2000:]}"
    assert not (run / "synthetic.csv").exists() and not (run / "report.json").exists()
    resumed = _run(table, command)
    assert resumed.returncode == 0, resumed.stderr
    release, report, record = _released(run)
    assert release == expected
    assert report == expected_report  # the ledger, rho spent, rows: everything but the timing
    saved = n if point == "after-save" else n - 1  # checkpoints completed before the kill
    if saved == 0:
        assert record["resumed_from_round"] is None and "resuming" not in resumed.stderr
    else:
        # the saved-th checkpoint: after round saved * EVERY, or earlier where AIM's filter ended the run
        assert (saved - 1) * EVERY < record["resumed_from_round"] <= saved * EVERY, record
        assert "resuming from checkpoint" in resumed.stderr
    assert not (run / "ckpt").exists()


@pytest.mark.parametrize(
    "mechanism,point,n",
    [("mwem", "after-save", 2), ("aim", "mid-save", 2), ("gem", "after-save", 1), ("pep", "mid-save", 3)],
)
def test_a_killed_run_resumes_to_the_same_bytes(table, tmp_path, mechanism, point, n):
    """pep's third checkpoint is its last: killed while writing it, the run resumes from its second."""
    _kill_and_resume(table, tmp_path, mechanism, point, n)


@pytest.mark.parametrize("mechanism,point,n", KILLS)
def test_every_mechanism_resumes_after_kills_at_seeded_points(table, tmp_path, mechanism, point, n):
    _kill_and_resume(table, tmp_path, mechanism, point, n)


def test_a_kill_while_writing_the_outputs_leaves_no_partial_file_and_resumes(table, tmp_path):
    expected, expected_report, _ = _reference(table, "mwem", tmp_path)
    run = tmp_path / "mid-output"
    run.mkdir()
    command = _command(table, "mwem", run)
    for n in (1, 2):  # the CSV, then the report
        killed = _run(table, command, kill=("mid-output", n))
        assert killed.returncode == -9, killed.stderr[-2000:]
        written = [p.name for p in run.iterdir() if not p.name.startswith(".")]
        # outputs are written in order, each whole: the CSV before the report, never a partial one
        assert written == ["ckpt"] if n == 1 else sorted(written) == ["ckpt", "synthetic.csv"]
        if n == 2:
            assert (run / "synthetic.csv").read_bytes() == expected
    resumed = _run(table, command)
    assert resumed.returncode == 0, resumed.stderr
    release, report, record = _released(run)
    assert (release, report) == (expected, expected_report)
    assert record["resumed_from_round"] == ROUNDS["mwem"]
