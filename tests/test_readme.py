"""The README's Python example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    exec(compile(blocks[0], "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "<=" in out and "mean_l1" in out


def test_readme_names_the_test_commands_ci_runs():
    """The quick tier and the rest (full and slow), in README's shell blocks and as lines of .ci/run."""
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    shell = "\n".join(re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S))
    for command in ("python -m pytest", 'python -m pytest -m "full or slow"'):
        assert command in ci
        assert re.search(re.escape(command) + r"$", shell, flags=re.M), command


def _section_code(title: str) -> str:
    text = README.read_text()
    section = text[text.index(f"### {title}") :]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_compose_example_fits_in_25_lines_and_runs_as_written(capsys):
    """The "Compose a mechanism" example puts one paper's selection (AIM's) with another's family
    (PEP's), in at most 25 lines beside its imports, and runs unchanged: 8 seeds, each spending
    its whole budget under the audit and reporting an error."""
    code = _section_code("Compose a mechanism")
    body = [line for line in code.splitlines() if line.strip() and not line.startswith(("import ", "from "))]
    assert len(body) <= 25
    assert "select=AIMSelection()" in code and "family=PEP(" in code and "run_many" in code
    exec(compile(code, "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"seed {i}" for i in range(8)]
    for line in lines:  # every seed spent its whole plan, audited, and reports an error
        spent, budget = re.search(r"rho spent ([0-9.]+) of ([0-9.]+)", line).groups()
        assert spent == budget and 0 < float(re.search(r"max error ([0-9.]+)", line).group(1)) < 1
