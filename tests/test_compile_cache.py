"""The command line's persistent compilation cache holds no private value (DESIGN.md section 6).

`python -m jaxdp` writes the programs it compiles to disk (`jaxdp/_compile_cache.py`). These tests
plant a private table whose values cannot appear by chance, run command-line jobs on it in a fresh
process (`tests/_cache_probe.py`: `jaxdp.cli.main`, the cache on by default under a temporary
`XDG_CACHE_HOME`), and look for the table in two places:

1. the constants of every program the jobs lowered (each closed jaxpr JAX lowers, nested jaxprs
   included): private records, true answers and the mechanism's `Sensitive` leaves must enter as
   arguments, never as constants;
2. every file of the cache directory after the jobs, decompressed as JAX wrote it.

Needles are windows of the private arrays in every encoding a constant of them would take
(`tests/_needles.py`). The negative control compiles programs that close over the planted records
and over their true answers: both checks must find each.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax._src import compilation_cache  # how JAX compresses entries (zstd or zlib)

from jaxdp import api
from jaxdp.domain import Dataset, load_domain, read_csv, write_csv
from jaxdp.types import Sensitive
from tests._needles import found_in, marginal, needles
from tests.conftest import small_rounds

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"a": 5, "b": 7, "c": 6, "d": 4, "e": 9}
SEED = "3735928559"  # 0xDEADBEEF: a root key word no counter or size equals


def _planted(tmp: Path, *, mixed: bool = False) -> Path:
    """A private table (600 records) and its domain as the CLI reads them: tmp/planted.{csv,json}.
    `mixed`: a raw table with numeric columns and labels, and its schema (for rap++)."""
    rng = np.random.default_rng(20261124)
    if not mixed:
        codes = np.stack([rng.integers(0, s, 600) for s in SIZES.values()], axis=1).astype(np.int32)
        (tmp / "planted.json").write_text(json.dumps(SIZES))
        write_csv(tmp / "planted.csv", Dataset.from_codes(load_domain(tmp / "planted.json"), codes))
        return tmp / "planted.csv"
    schema = {
        "columns": {
            "age": {"type": "numeric", "lower": 17, "upper": 90},
            "hours": {"type": "numeric", "lower": 0, "upper": 99},
            "colour": {"type": "categorical", "categories": ["red", "blue", "green"]},
            "level": {"type": "categorical", "size": 5},
            "label": {"type": "categorical", "categories": ["no", "yes"]},
        },
        "target": "label",
    }
    (tmp / "planted.json").write_text(json.dumps(schema))
    columns = zip(
        rng.uniform(17, 90, 600).round(2),
        rng.uniform(0, 99, 600).round(2),
        rng.choice(["red", "blue", "green"], 600),
        rng.integers(0, 5, 600),
        rng.choice(["no", "yes"], 600),
        strict=True,
    )
    lines = [",".join(schema["columns"])] + [",".join(map(str, row)) for row in columns]
    (tmp / "planted.csv").write_text("\n".join(lines) + "\n")
    return tmp / "planted.csv"


def _private_needles(csv: Path, jobs: list[list[str]]) -> dict[str, set[bytes]]:
    """Needles of the planted records, of their true counts and fractions on each job's workload,
    and of the `Sensitive` leaves of each job's mechanism built as the CLI builds it."""
    domain = load_domain(csv.with_suffix(".json"))
    data = read_csv(csv, domain)
    private = {"records": needles(data.codes) | needles(data.numeric), "answers": set(), "sensitive": set()}
    for argv in jobs:
        workload = api.workload_from_spec(_option(argv, "--workload", "all-3way"), domain)
        counts = np.concatenate([marginal(data.codes, clique, domain.sizes) for clique in workload.cliques])
        private["answers"] |= needles(counts) | needles(counts.astype(np.float32) / np.float32(len(data)))
        if argv[0] == "synth":
            mech = api.build(
                _option(argv, "--mechanism"),
                data,
                workload,
                epsilon=float(_option(argv, "--epsilon")),
                rounds=int(_option(argv, "--rounds")) if "--rounds" in argv else None,
                public=read_csv(_option(argv, "--public"), domain) if "--public" in argv else None,
            )
            for leaf in jax.tree_util.tree_leaves(mech, is_leaf=lambda x: isinstance(x, Sensitive)):
                if isinstance(leaf, Sensitive):
                    for array in jax.tree_util.tree_leaves(leaf):
                        private["sensitive"] |= needles(np.asarray(array))
    return private


def _option(argv: list[str], name: str, default: str | None = None) -> str:
    return argv[argv.index(name) + 1] if name in argv else default


def _probe(tmp: Path, jobs: list[list[str]], *, bake: Path | None = None, env: dict | None = None) -> dict:
    """Run the jobs in a fresh process; its lowered programs' constants and its cache directory."""
    out = tmp / "probe"
    (tmp / "jobs.json").write_text(json.dumps(jobs))
    command = [sys.executable, str(ROOT / "tests" / "_cache_probe.py"), str(out), str(tmp / "jobs.json")]
    command += ["--bake", str(bake)] if bake is not None else []
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXDP_", "JAX_COMPILATION_CACHE"))}
    run_env.update(XDG_CACHE_HOME=str(tmp / "xdg"), PYTHONPATH=str(ROOT), **(env or {}))
    done = subprocess.run(command, env=run_env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    programs = json.loads((out / "programs.json").read_text())
    assert programs["statuses"] == [0] * len(jobs), done.stderr[-3000:]
    cache_dir = tmp / "xdg" / "jaxdp" / "xla"
    entries = sorted(cache_dir.glob("*-cache")) if cache_dir.is_dir() else []
    return {
        "programs": programs["programs"],
        "constants": [p.read_bytes() for p in sorted((out / "constants").iterdir())],
        "cache_dir": cache_dir,
        "entries": {p.name: compilation_cache.decompress_executable(p.read_bytes()) for p in entries},
    }


def _jobs(csv: Path, tmp: Path, mechanisms: list[str]) -> list[list[str]]:
    """`synth` with every output file for each mechanism, then `evaluate` against another table."""
    data = ["--data", str(csv), "--domain", str(csv.with_suffix(".json")), "--workload", "all-2way"]
    jobs = []
    for name in mechanisms:
        spec = api.MECHANISMS[name]
        argv = ["synth", "--mechanism", name, *data, "--epsilon", "1", "--seed", SEED]
        argv += (
            []
            if spec.one_round or spec.fixed_rounds
            else ["--rounds", str(small_rounds(name, len(SIZES), 2))]
        )
        argv += ["--public", str(tmp / "public.csv")] if spec.public else []
        argv += ["--out", str(tmp / f"{name}.csv"), "--report", str(tmp / f"{name}.json")]
        jobs.append([*argv, "--errors", str(tmp / f"{name}-errors.json")])
    other = tmp / "public.csv" if (tmp / "public.csv").exists() else tmp / f"{mechanisms[0]}.csv"
    jobs.append(["evaluate", "--real", str(csv), "--synth", str(other), *data[2:]])
    return jobs


def _public(tmp: Path) -> None:
    """A public table over the planted domain, drawn independently of the private one."""
    rng = np.random.default_rng(7)
    codes = np.stack([rng.integers(0, s, 200) for s in SIZES.values()], axis=1).astype(np.int32)
    write_csv(tmp / "public.csv", Dataset.from_codes(load_domain(tmp / "planted.json"), codes))


def _check_jobs(tmp: Path, mechanisms: list[str], *, mixed: bool = False) -> dict:
    csv = _planted(tmp, mixed=mixed)
    if not mixed:
        _public(tmp)
    jobs = _jobs(csv, tmp, mechanisms)
    probe = _probe(tmp, jobs)
    assert probe["entries"], "the CLI wrote no program to its cache: the cache is not on by default"
    for kind, private in _private_needles(csv, jobs).items():
        assert private or kind == "sensitive", f"no {kind} needle: the check would pass vacuously"
        assert found_in(probe["constants"], private) == [], f"a lowered program holds private {kind}"
        assert found_in(probe["entries"], private) == [], f"a cached program holds private {kind}"
    return probe


def test_cli_programs_and_cache_hold_no_private_value(tmp_path):
    probe = _check_jobs(tmp_path, ["pep"])
    # the jobs' run, release and evaluation programs were all seen and all cached
    for program in ("_scan_rounds", "_release", "_padded_counts"):
        assert program in probe["programs"], probe["programs"]
    assert len(probe["entries"]) >= len(set(probe["programs"])) // 2
    assert stat.S_IMODE(probe["cache_dir"].stat().st_mode) == 0o700  # private to the user


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in api.MECHANISMS if n != "pep"])
def test_every_mechanism_leaves_no_private_value_in_programs_or_cache(tmp_path, name):
    # rap++ on a raw table with numeric columns (its records' numeric values are needles too)
    _check_jobs(tmp_path, [name], mixed=name == "rap++")


def test_programs_that_bake_the_table_or_its_answers_in_are_caught(tmp_path):
    """Negative control: the same checks find records, and true answers, that a program closes over."""
    csv = _planted(tmp_path)
    probe = _probe(tmp_path, [], bake=csv)
    private = _private_needles(csv, [["evaluate", "--workload", "all-2way"]])
    for kind in ("records", "answers"):
        assert len(found_in(probe["constants"], private[kind])) == 1, (
            f"the jaxpr check missed baked-in {kind}"
        )
        assert len(found_in(probe["entries"], private[kind])) == 1, f"the cache scan missed baked-in {kind}"


@pytest.mark.parametrize(
    ("flag", "env"), [("--no-compile-cache", {}), (None, {"JAXDP_NO_COMPILE_CACHE": "1"})]
)
def test_opting_out_writes_no_program(tmp_path, flag, env):
    csv = _planted(tmp_path)
    argv = ["evaluate", "--real", str(csv), "--synth", str(csv), "--domain", str(csv.with_suffix(".json"))]
    probe = _probe(tmp_path, [[*argv, flag] if flag else argv], env=env)
    assert "_padded_counts" in probe["programs"] and not probe["cache_dir"].exists()
