"""The notebooks run top to bottom at smoke size (JAXDP_SMOKE=1) and are stored without outputs."""

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BADGE = "https://colab.research.google.com/github/jaxdp/jaxdp/blob/main/notebooks/{}"


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_functional_core.ipynb",
        "03_accelerators.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs_with_a_badge_and_a_guarded_install(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs not stripped"
    assert BADGE.format(path.name) in nb.cells[0].source
    install = next(c.source for c in nb.cells if "%pip install" in c.source)
    assert 'find_spec("jaxdp") is None' in install


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_at_smoke_size(path, monkeypatch):
    monkeypatch.setenv("JAXDP_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The kernel imports this checkout's jaxdp (the notebook's cwd is the repository root).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": ROOT}}
    )
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
