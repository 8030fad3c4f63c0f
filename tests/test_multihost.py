"""Two processes joined by `jax.distributed` on localhost (CPU collectives), each holding about
half of the records, release what one process holding all of them releases: the same records,
ledger and report, for AIM, GEM and MWEM (`tests/multihost/worker.py` runs each process)."""

import gzip
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.multihost.worker import MECHANISMS, RECORDS, SPLIT

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start(out: Path, *arguments: str) -> subprocess.Popen:
    return _python(["-m", "tests.multihost.worker", str(out), *arguments], ROOT)


def _python(arguments: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)  # one device per process
    return subprocess.Popen(
        [sys.executable, *arguments],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(processes: list[subprocess.Popen]) -> None:
    try:
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in processes]
    finally:
        for p in processes:
            p.kill()
    for p, output in zip(processes, outputs, strict=True):
        assert p.returncode == 0, output[-6000:]


@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> dict[str, list[dict]]:
    """{mechanism: [one process's record, then each of the two processes' records]}, and under
    "binning" the error a private binning got in one process and in the pair."""
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    coordinator = f"localhost:{_free_port()}"
    pair = [_start(two, "--process", str(i), "--of", "2", "--coordinator", coordinator) for i in range(2)]
    _finish([_start(one), *pair])
    records = {}
    for name in MECHANISMS:
        paths = [one / f"{name}-0.json", two / f"{name}-0.json", two / f"{name}-1.json"]
        records[name] = [json.loads(p.read_text()) for p in paths]
    refusals = [
        (one / "binning-0.txt").read_text(),
        *((two / f"binning-{i}.txt").read_text() for i in range(2)),
    ]
    assert refusals[1] == refusals[2]
    records["binning"] = refusals[:2]
    return records


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_two_processes_release_what_one_releases(releases, name):
    single, *pair = releases[name]
    assert single["local_rows"] == RECORDS and single["devices"] == 1
    assert [p["local_rows"] for p in pair] == [SPLIT, RECORDS - SPLIT]
    assert [p["devices"] for p in pair] == [2, 2]  # the mesh spans both processes
    for process in pair:
        assert process["ledger"] == single["ledger"]
        assert process["report"] == single["report"]
        assert process["synthetic"] == single["synthetic"]
    if name != "aim":  # replace-one: n is public and the release has n rows, counted over both
        assert len(single["synthetic"]) == RECORDS


def test_private_bins_are_refused_over_several_processes(releases):
    """Each process would measure quantiles of its own rows: refused, naming the argument; one
    process bins privately as usual."""
    one, two = releases["binning"]
    assert one == "none"
    assert two.startswith("mesh: private quantile bins would be measured on one process's rows only")


def _readme_script(processes: int, process: int, port: int) -> str:
    """The guide's "Several hosts" script, with the two lines it says a CPU run adds: gloo
    collectives, and `initialize`'s coordinator, process count and index."""
    guide = (ROOT / "docs" / "guide.md").read_text()
    section = guide[guide.index("### Several hosts") :]
    script = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    cpu = (
        'jax.config.update("jax_cpu_collectives_implementation", "gloo")\n'
        f'jax.distributed.initialize("localhost:{port}", num_processes={processes}, process_id={process})'
    )
    assert script.count("jax.distributed.initialize()") == 1
    return script.replace("jax.distributed.initialize()", cpu)


def test_the_readme_script_releases_over_two_processes_what_one_releases(tmp_path):
    """The script as written (AIM's defaults) on the first 2,000 records of ADULT-reduced: split
    1,000 and 1,000 over two processes, and whole in one."""
    lines = gzip.decompress((ROOT / "jaxdp/datasets/adult-reduced.csv.gz").read_bytes()).decode().splitlines()
    header, records = lines[0], lines[1:2001]
    key = tmp_path / "root.key"
    _finish([_python(["-c", f"import jaxdp; jaxdp.key_file({str(key)!r})"], tmp_path)])
    domain = (ROOT / "jaxdp/datasets/adult-reduced-domain.json").read_bytes()
    processes = []
    for name, parts in {"two": [records[:1000], records[1000:]], "one": [records]}.items():
        run, port = tmp_path / name, _free_port()
        run.mkdir()
        (run / "adult-domain.json").write_bytes(domain)
        (run / "root.key").write_bytes(key.read_bytes())
        for i, part in enumerate(parts):
            (run / f"adult-part-{i}.csv").write_text("\n".join([header, *part]) + "\n")
            (run / f"release-{i}.py").write_text(_readme_script(len(parts), i, port))
            processes.append(_python([f"release-{i}.py", "root.key"], run))
    _finish(processes)
    two, one = (tmp_path / name / "synthetic.csv" for name in ("two", "one"))
    assert sorted(two.read_text().splitlines()[0].split(",")) == sorted(header.split(","))
    assert two.read_bytes() == one.read_bytes()
