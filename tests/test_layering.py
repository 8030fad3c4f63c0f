"""The load-bearing import rules of DESIGN.md section 2, read from the source."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxdp"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _modules(sub: str = "") -> list[Path]:
    return sorted((PACKAGE / sub).rglob("*.py"))


def test_accounting_never_imports_jax():
    for module in ("accounting.py", "_checks.py"):
        imported = _imports(PACKAGE / module)
        assert not any(n == "jax" or n.startswith(("jax.", "jaxlib", "flax", "optax")) for n in imported), (
            module
        )


def test_families_never_touch_noise_or_accounting():
    for path in _modules("families"):
        imported = _imports(path)
        assert not any(n.startswith(("jaxdp.noise", "jaxdp.accounting")) for n in imported), path


def test_only_noise_unwraps_sensitive_values():
    allowed = {PACKAGE / "noise.py", PACKAGE / "types.py"}
    for path in _modules():
        if path in allowed:
            continue
        assert "._value" not in path.read_text(), f"{path} reads a Sensitive value"


def test_no_unkeyed_randomness_in_the_package():
    for path in _modules():
        text = path.read_text()
        for banned in ("np.random", "numpy.random", "import random", "PRNGKey("):
            assert banned not in text, f"{path} uses {banned}"


def test_importing_jaxdp_leaves_optional_and_heavy_libraries_unloaded():
    """flax, optax, mbi, scipy, pandas and tqdm load when a mechanism or option needs them: a
    command-line run pays their import (flax about half a second) only then."""
    heavy = ("flax", "optax", "mbi", "scipy", "pandas", "tqdm")
    code = f"import sys, jaxdp, jaxdp.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
