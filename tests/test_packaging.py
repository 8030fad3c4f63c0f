"""Packaging and platform rules: one version, TPU-safe compiled code."""

import re
import tomllib
from pathlib import Path

import jax
import pytest

import jaxdp
from jaxdp.families import oracle
from jaxdp.queries import all_kway

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxdp"


def test_the_version_has_one_source_and_a_changelog_entry():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "jaxdp.__version__"}
    assert f"## {jaxdp.__version__}" in (ROOT / "CHANGELOG.md").read_text()


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
