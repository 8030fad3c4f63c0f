"""The README's and the guide's examples run as written."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import cli_env

README = Path(__file__).resolve().parents[1] / "README.md"
GUIDE = README.parent / "docs" / "guide.md"


def test_python_example_runs(capsys):
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text[text.index("## Python API") :], flags=re.S)
    assert blocks, "README has no python example"
    exec(compile(blocks[0], "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "<=" in out and "mean_l1" in out


def test_the_release_workflow_runs_as_written(tmp_path, monkeypatch):
    """The guide's "Keep the model": the shell commands, each a fresh process, then the Python example; the
    subgroup meets its condition and the report's page is written."""
    section = GUIDE.read_text()[GUIDE.read_text().index("## Keep the model") :]
    commands = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1).strip().splitlines()
    for command in commands:
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "jaxdp"]
        env = cli_env(tmp_path / "cache")
        done = subprocess.run(
            [sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
    women = (tmp_path / "women.csv").read_text().splitlines()
    header = women[0].split(",")
    assert len(women) == 100_001 and {row.split(",")[header.index("sex")] for row in women[1:]} == {"Female"}
    assert "Not private." in (tmp_path / "report.html").read_text()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_section_code("Keep the model"), "docs/guide.md", "exec"), namespace)
    assert set(namespace["women"].codes[:, 4]) == {0} and (tmp_path / "model.jaxdp").exists()


def test_readme_names_the_test_commands_ci_runs():
    """The quick tier and the rest (full and slow), in README's shell blocks and as lines of .ci/run."""
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    shell = "\n".join(re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S))
    for command in ("python -m pytest", 'python -m pytest -m "full or slow"'):
        assert command in ci
        assert re.search(re.escape(command) + r"$", shell, flags=re.M), command


def _section_code(title: str) -> str:
    text = GUIDE.read_text()
    section = text[text.index(f"## {title}") :]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_compose_example_fits_in_25_lines_and_runs_as_written(capsys):
    """The "Compose a mechanism" example puts one paper's selection (AIM's) with another's family
    (PEP's), in at most 25 lines beside its imports, and runs unchanged: 8 seeds, each spending
    its whole budget under the audit and reporting an error."""
    code = _section_code("Compose a mechanism")
    body = [line for line in code.splitlines() if line.strip() and not line.startswith(("import ", "from "))]
    assert len(body) <= 25
    assert "select=AIMSelection()" in code and "family=PEP(" in code and "run_many" in code
    exec(compile(code, "docs/guide.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"seed {i}" for i in range(8)]
    for line in lines:  # every seed spent its whole plan, audited, and reports an error
        spent, budget = re.search(r"rho spent ([0-9.]+) of ([0-9.]+)", line).groups()
        assert spent == budget and 0 < float(re.search(r"max error ([0-9.]+)", line).group(1)) < 1


def test_the_epsilon_grid_example_runs_as_written_and_spends_each_budget(capsys):
    """The epsilon grid after "Compose a mechanism": one program, each lane spending its own
    budget exactly, audited."""
    text = GUIDE.read_text()
    section = text[text.index("## Compose a mechanism") :]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[1]
    assert "run_many(mechanisms, keys" in code
    exec(compile(code, "docs/guide.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["epsilon 0.3", "epsilon 1.0", "epsilon 3.0"]
    budgets = [re.search(r"rho spent ([0-9.]+) of ([0-9.]+)", line).groups() for line in lines]
    assert all(spent == budget for spent, budget in budgets) and len({b for _, b in budgets}) == 3


def test_the_killed_and_resumed_example_releases_what_an_uninterrupted_run_does(tmp_path):
    """The "Long runs" example as written: its first command killed (SIGKILL) once its first
    checkpoint is written, its second run as is, against the same command run whole elsewhere."""
    text = GUIDE.read_text()
    section = text[text.index("## Long runs: checkpoint and resume") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    first, second = [shlex.split(line) for line in block.splitlines() if line.startswith("python -m jaxdp")]
    assert first == second and "--checkpoint" in first and "--key-file" in first
    args = first[3:]  # after "python -m jaxdp"
    env = cli_env(tmp_path / "cache")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for run in (whole, killed):
        run.mkdir()
    kill = [sys.executable, str(README.parent / "tests" / "_kill_at.py"), "after-save", "1", "--", *args]
    proc = subprocess.run(kill, cwd=killed, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == -9, proc.stderr[-2000:]
    (whole / "run.key").write_bytes((killed / "run.key").read_bytes())  # the same key, as the example needs
    errors = {}
    for run in (killed, whole):
        proc = subprocess.run(
            [sys.executable, *first[1:]], cwd=run, env=env, capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        errors[run] = proc.stderr
    assert "resuming from checkpoint run.ckpt/checkpoint.npz after round 10/" in errors[killed]
    assert "resuming" not in errors[whole]
    assert (killed / "s.csv").read_bytes() == (whole / "s.csv").read_bytes()
    resumed = json.loads((killed / "r.json").read_text())["checkpoint"]
    assert resumed["resumed_from_round"] == 10 and not (killed / "run.ckpt").exists()
