"""The benchmark pages are what their records give, and the site's pages cite no tracker issue."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_FACING = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    ROOT / "bench" / "README.md",
    *(ROOT / "docs").rglob("*.md"),
]


def test_the_bench_pages_match_their_records():
    done = subprocess.run(
        [sys.executable, "bench/pages.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_changed_record_is_caught(tmp_path, monkeypatch):
    """Negative control: the check fails when the latest record of a case changes."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import pages
    finally:
        sys.path.remove(str(ROOT / "bench"))
    results = tmp_path / "results"
    results.mkdir()
    for record in pages.RESULTS.glob("*.jsonl"):
        (results / record.name).write_text(record.read_text())
    lines = (results / "presets_adult.jsonl").read_text().splitlines()
    lines[-1] = lines[-1].replace('"mean_l1": ', '"mean_l1": 1', 1)
    (results / "presets_adult.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(pages, "RESULTS", results)
    assert pages.main(["--check"]) == 1


def test_no_user_facing_page_cites_an_issue_number():
    for page in USER_FACING:
        cited = re.findall(r"(?i)\bissues? #\d+|\(#\d+\)", page.read_text())
        assert not cited, (page.relative_to(ROOT), cited)
