"""Packaging and platform rules: one version, a distribution name of our own, TPU-safe compiled code."""

import re
import tomllib
from pathlib import Path

import jax
import pytest

import jaxdp
from jaxdp.families import oracle
from jaxdp.queries import all_kway
from tests._install_scan import DISTRIBUTION, index_installs

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxdp"
# Where users read install instructions (the notebooks are read cell by cell, not as JSON).
DOCUMENTS = ["README.md", "CHANGELOG.md", "docs", "examples", "notebooks", "bench"]
TEXT_SUFFIXES = {".md", ".rst", ".txt", ".py", ".sh", ".toml", ".cfg", ".json", ".yaml", ".yml"}


def test_the_version_has_one_source_and_a_changelog_entry():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "jaxdp._version.__version__"}
    assert f"## {jaxdp.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_the_distribution_name_is_ours_and_the_import_name_stays():
    """`jaxdp` on PyPI is an unrelated project (dynamic programming for MDPs)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == DISTRIBUTION != "jaxdp"
    assert pyproject["project"]["scripts"] == {"jaxdp": "jaxdp.__main__:run"}  # the command stays jaxdp
    assert pyproject["tool"]["setuptools"]["packages"]["find"] == {"include": ["jaxdp*"]}  # and the import


def _documents():
    """(label, text) of every document under DOCUMENTS; a notebook gives one per cell."""
    nbformat = pytest.importorskip("nbformat")
    for entry in DOCUMENTS:
        root = ROOT / entry
        paths = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for path in paths:
            label = path.relative_to(ROOT).as_posix()
            if path.suffix == ".ipynb":
                for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
                    yield f"{label} cell {i}", cell.source
            elif path.suffix in TEXT_SUFFIXES and "results" not in path.relative_to(ROOT).parts:
                yield label, path.read_text()


@pytest.mark.parametrize(
    "line",
    [
        "pip install jaxdp",
        'pip install "jaxdp[cuda12]"',
        "`pip install -U 'jaxdp[pandas]'` (or `cuda13`)",
        '    %pip install -q "jaxdp"',
        "python -m pip install --upgrade jaxdp==0.1.0 numpy",
        "pip install jaxdp_synth[tpu]",
        "pip install JaxDP-Synth>=0.1",
        "pip install numpy \\\n    jaxdp",
    ],
)
def test_the_scan_finds_installs_from_an_index(line):
    assert index_installs(line) != []


@pytest.mark.parametrize(
    "line",
    [
        'pip install -e ".[test,dev]" && python -m jaxdp synth --out synth.csv',
        "pip install -e .",
        "`pip install ./jaxdp_synth-0.1.0-py3-none-any.whl` to install jaxdp",
        'pip install "dist/jaxdp_synth-0.1.0-py3-none-any.whl[pandas]"',
        '%pip install -q -e "{target}"',
        "pip install jaxdp-synthesizer  # some other project",
        "pip install 'mbi>=2.0'",
    ],
)
def test_the_scan_passes_local_installs(line):
    assert index_installs(line) == []


def test_no_document_installs_this_project_from_an_index():
    """Every instruction installs jaxdp from a checkout or a wheel, never by name from PyPI."""
    found = [
        f"{label}:{number}: {line}" for label, text in _documents() for number, line in index_installs(text)
    ]
    assert not found, "pip install from an index (see README, Install):\n" + "\n".join(found)


def test_accelerator_extras_forward_to_jax():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name in ("cuda12", "cuda13", "tpu"):
        assert extras[name] == [f"jax[{name}]"]


def test_compiled_code_needs_no_float64():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert "jnp.float64" not in text and "jax_enable_x64" not in text, path


def test_host_callbacks_only_in_the_milp_oracle():
    pattern = re.compile(r"pure_callback|io_callback|debug\.callback|host_callback")
    users = {
        p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())
    }
    assert users == {"families/oracle.py"}


def test_the_milp_oracle_is_refused_on_a_tpu(monkeypatch):
    workload = all_kway((3, 4, 2), 2)
    assert isinstance(oracle.make_oracle(workload, "milp"), oracle.MilpOracle)  # fine on CPU/GPU
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    with pytest.raises(ValueError, match="CPU/GPU"):
        oracle.make_oracle(workload, "milp")
    assert isinstance(oracle.make_oracle(workload, "enumerate"), oracle.EnumerationOracle)
