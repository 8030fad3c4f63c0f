"""tests/full_tier.txt names tests that exist: a renamed or deleted test must not leave an entry
that silently moves nothing out of the quick tier, nor one that matches a whole file by accident."""

import ast
from pathlib import Path

import pytest

from tests.conftest import full_tier_entries

ROOT = Path(__file__).resolve().parents[1]


def _defined(path: Path, names: list[str]) -> bool:
    """Whether `names` (Class, function or Class::function) is defined at that nesting in `path`."""
    body = ast.parse(path.read_text()).body
    for name in names:
        found = [n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name]
        if not found:
            return False
        body = found[0].body
    return True


@pytest.mark.parametrize("entry", full_tier_entries())
def test_every_full_tier_entry_names_a_test(entry):
    path, *names = entry.split("::")
    assert (ROOT / path).is_file(), f"{entry}: no file {path}"
    assert path.startswith("tests/") and Path(path).name.startswith("test_"), entry
    assert _defined(ROOT / path, names), f"{entry}: {path} defines no {'::'.join(names)}"


def test_negative_control_a_missing_test_is_caught():
    assert not _defined(ROOT / "tests/test_tiers.py", ["test_that_does_not_exist"])
    assert _defined(ROOT / "tests/test_tiers.py", ["test_negative_control_a_missing_test_is_caught"])
