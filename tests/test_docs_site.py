"""The documentation site builds with warnings as errors, and every Python example on it runs.

The site (mkdocs.yml) is README.md, CHANGELOG.md, docs/*.md, the generated benchmark pages and the
API reference rendered from the docstrings. An example either runs here, as written, or is run by
a test of its own that checks what it prints or writes (`OWNED`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# (page, section heading, index of the example in its section) -> the test that runs it.
OWNED = {
    ("README.md", "Python API", 0): "tests/test_readme.py::test_python_example_runs",
    ("docs/guide.md", "Keep the model: sample again, condition, judge", 0): (
        "tests/test_readme.py::test_the_release_workflow_runs_as_written"
    ),
    ("docs/guide.md", "Compose a mechanism", 0): (
        "tests/test_readme.py::test_compose_example_fits_in_25_lines_and_runs_as_written"
    ),
    ("docs/guide.md", "Compose a mechanism", 1): (
        "tests/test_readme.py::test_the_epsilon_grid_example_runs_as_written_and_spends_each_budget"
    ),
    ("docs/guide.md", "Several hosts", 0): "tests/test_multihost.py",
}


def _examples() -> dict[tuple[str, str, int], str]:
    """Every ```python block of the site's pages, keyed by page, section and index (a line read
    as a heading only outside a fence: a comment in a block is not one)."""
    found: dict[tuple[str, str, int], str] = {}
    for page in PAGES:
        section, index, fence, block = "", 0, None, []
        for line in page.read_text().splitlines():
            if fence is None and line.startswith("```"):
                fence, block = line[3:].strip(), []
            elif fence is not None and line.startswith("```"):
                if fence == "python":
                    found[(str(page.relative_to(ROOT)), section, index)] = "\n".join(block) + "\n"
                    index += 1
                fence = None
            elif fence is not None:
                block.append(line)
            elif re.match(r"#{1,3} ", line):
                section, index = line.lstrip("#").strip(), 0
    return found


EXAMPLES = _examples()


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocs", reason="the site needs the test extra's mkdocs")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    reference = (tmp_path / "site" / "api" / "mechanisms" / "index.html").read_text()
    for factory in ("aim_gdp", "swift", "privbayes", "rap_plus_plus"):  # rendered from the docstrings
        assert f'id="jaxdp.{factory}"' in reference, factory


def test_every_owned_example_exists_and_its_test_reads_its_section():
    """An example named in OWNED is on its page, and the owning test's file names its section (so
    moving or renaming one fails here rather than leaving an example unrun)."""
    for (page, section, index), owner in OWNED.items():
        assert (page, section, index) in EXAMPLES, (page, section, index)
        source = (ROOT / owner.split("::")[0]).read_text()
        if "::" in owner:
            assert f"def {owner.split('::')[1]}(" in source, owner
        assert section.split(":")[0] in source, (owner, section)


@pytest.mark.parametrize(
    "where", [k for k in EXAMPLES if k not in OWNED], ids=lambda k: f"{k[0]}:{k[1]}:{k[2]}"
)
def test_every_other_example_runs_as_written(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(EXAMPLES[where], where[0], "exec"), {"__name__": "__docs_example__"})
