"""The notebooks run top to bottom at smoke size (JAXDP_SMOKE=1), are stored without outputs, and
install jaxdp only from this project's source (a checkout or an uploaded wheel), never by name
from PyPI, where `jaxdp` is an unrelated project."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from tests._install_scan import index_installs

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_functional_core.ipynb",
        "03_accelerators.ipynb",
        "04_epsilon_sweep.ipynb",
        "05_release_workflow.ipynb",
    ]


def install_cell(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    (install,) = [c.source for c in nb.cells if c.cell_type == "code" and "%pip install" in c.source]
    return install


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs_with_a_guarded_install_from_source(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs not stripped"
    assert "colab.research.google.com/github" not in nbformat.writes(nb), "no public repository to open"
    install = install_cell(path)
    assert 'find_spec("jaxdp") is None' in install
    assert index_installs(install) == [], f"{path.name}: installs jaxdp by name from an index"


def _run_install_cell(path: Path, cwd: Path, monkeypatch) -> list[str]:
    """Run the notebook's install cell as IPython would, with jaxdp not importable; return the
    `%pip` command lines it runs (recorded, not run)."""
    from IPython.core.inputtransformer2 import TransformerManager

    code = TransformerManager().transform_cell(install_cell(path))
    calls = []

    class Shell:
        def run_line_magic(self, name, line):
            # IPython expands {expressions} in a magic's line in the caller's namespace
            frame = sys._getframe(1)
            calls.append(f"%{name} " + line.format(**{**frame.f_globals, **frame.f_locals}))

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "jaxdp" else find_spec(name, *a)
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(cwd)
    exec(compile(code, path.name, "exec"), {"get_ipython": lambda: Shell()})
    return calls


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_install_cell_installs_the_checkout_it_sits_in(path, monkeypatch):
    (call,) = _run_install_cell(path, path.parent, monkeypatch)
    assert call.startswith(f'%pip install -q -e "{ROOT}')


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_install_cell_installs_an_uploaded_wheel(path, tmp_path, monkeypatch):
    wheel = tmp_path / "jaxdp_synth-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    (tmp_path / "jaxdp-0.4.0-py3-none-any.whl").write_bytes(b"")  # the unrelated project's: ignored
    (call,) = _run_install_cell(path, tmp_path, monkeypatch)
    assert call.startswith(f'%pip install -q "{wheel}')


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_install_cell_stops_without_a_source(path, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "jaxdp"\n')  # not this project
    with pytest.raises(RuntimeError, match=r"README\.md, section 'Install'"):
        _run_install_cell(path, tmp_path, monkeypatch)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_at_smoke_size(path, monkeypatch, tmp_path):
    monkeypatch.setenv("JAXDP_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The kernel imports this checkout's jaxdp; it runs in a folder of its own, where a notebook
    # writes its files (a model, a report), not in the checkout.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
