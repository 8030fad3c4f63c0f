"""The house's floors (docs/architecture.md): every module of the package has a floor and imports
only from floors below it, read from the source with `ast`, imports inside functions included.

Modules of one subpackage (queries/, families/, mechanisms/) share its floor and may import each
other; anything else on the same floor or above is an upward import.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "jaxdp"

# Lowest first. A module's floor is that of the longest entry naming it or a package above it.
FLOORS = {
    "jaxdp._version": 0,
    "jaxdp._checks": 0,
    "jaxdp._io": 0,
    "jaxdp._threefry": 0,
    "jaxdp._compile_cache": 0,
    "jaxdp._background": 0,
    "jaxdp._jit": 0,
    "jaxdp.types": 0,
    "jaxdp.keys": 1,
    "jaxdp._serial": 1,
    "jaxdp.gdp": 0,
    "jaxdp.accounting": 1,
    "jaxdp.pld": 2,
    "jaxdp.samplers": 1,
    "jaxdp.domain": 1,
    "jaxdp.tables": 2,
    "jaxdp.checkpoint": 2,
    "jaxdp.noise": 2,
    "jaxdp.datasets": 2,
    "jaxdp.queries": 2,
    "jaxdp.ledger": 3,
    "jaxdp.contract": 3,
    "jaxdp.containers": 3,
    "jaxdp.families": 3,
    "jaxdp.selection": 3,
    "jaxdp.evaluate": 3,
    "jaxdp.utility": 3,
    "jaxdp.measurement": 4,
    "jaxdp.mechanisms": 6,
    "jaxdp.lanes": 0,
    "jaxdp.loop": 7,
    "jaxdp.binning": 7,  # private quantile bins are measured by `independent`
    "jaxdp.audit": 8,
    "jaxdp.coding": 8,
    "jaxdp.preprocess": 9,
    "jaxdp.report": 9,
    "jaxdp.releasing": 9,
    "jaxdp.conditions": 9,
    "jaxdp.model_marginals": 10,
    "jaxdp.models": 11,
    "jaxdp.execution": 12,
    "jaxdp.inputs": 12,
    "jaxdp.api": 13,
    "jaxdp.quality": 9,
    "jaxdp.quality_html": 1,
    "jaxdp.cli_model": 14,
    "jaxdp.synthesizer": 14,
    "jaxdp.cli_parser": 15,
    "jaxdp.cli": 16,
    "jaxdp.__main__": 17,
    "jaxdp": 18,  # the package's __init__: its public face, above everything it re-exports
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = PACKAGE.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(name: str, source: str, is_package: bool = False) -> set[str]:
    """The jaxdp modules `source` (the text of module `name`) imports, anywhere in the file:
    `from jaxdp import noise` is jaxdp.noise, `from jaxdp import __version__` the package."""
    found: set[str] = set()
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "jaxdp")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if base.split(".")[0] != "jaxdp":
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if _is_module(candidate) else base)
    return found


def floor_of(name: str) -> tuple[int, str]:
    """(floor, the FLOORS entry that gives it); KeyError for a module with no floor."""
    if name == "jaxdp":
        return FLOORS["jaxdp"], "jaxdp"
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        entry = ".".join(parts[:i])
        if entry in FLOORS:
            return FLOORS[entry], entry
    raise KeyError(name)


def upward_imports(name: str, source: str, is_package: bool = False) -> list[str]:
    """The imports of module `name` that are not on a floor below its own."""
    floor, unit = floor_of(name)
    bad = []
    for target in sorted(imported_modules(name, source, is_package)):
        target_floor, target_unit = floor_of(target)
        same_subpackage = target_unit == unit and (PACKAGE.parent / unit.replace(".", "/")).is_dir()
        if target_floor >= floor and not same_subpackage:
            bad.append(f"{name} (floor {floor}) imports {target} (floor {target_floor})")
    return bad


def _modules(sub: str = "") -> list[Path]:
    return sorted((PACKAGE / sub).rglob("*.py"))


def test_every_module_has_a_floor():
    missing = []
    for path in _modules():
        try:
            floor_of(module_name(path))
        except KeyError:
            missing.append(module_name(path))
    assert not missing, f"give these modules a floor in FLOORS: {missing}"


def test_no_module_imports_upward():
    bad = []
    for path in _modules():
        bad += upward_imports(module_name(path), path.read_text(), path.name == "__init__.py")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("jaxdp.noise", "def later():\n    from jaxdp.loop import run\n"),  # inside a function
        ("jaxdp.api", "from jaxdp import __version__\n"),  # the package's __init__
        ("jaxdp.ledger", "import jaxdp.audit\n"),
        ("jaxdp.families.relaxed", "from jaxdp import selection\n"),  # same floor, other unit
        ("jaxdp.loop", "from .audit import replay\n"),  # relative
    ],
)
def test_negative_control_upward_imports_are_caught(name, source):
    assert upward_imports(name, source), f"{source!r} in {name} should be an upward import"


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("jaxdp.loop", "from jaxdp import _checks\nfrom jaxdp.ledger import check_ledger\n"),
        ("jaxdp.families.generator", "from jaxdp.families.relaxed import sample_rows\n"),
        ("jaxdp.mechanisms.pep", "from ._histogram import build\n"),
    ],
)
def test_negative_control_downward_imports_pass(name, source):
    assert upward_imports(name, source) == []


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of an import graph (module -> the modules it imports): each strongly connected
    set of two or more modules, or a module that imports itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1 or v in graph[v]:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _import_graph() -> dict[str, set[str]]:
    return {
        module_name(p): imported_modules(module_name(p), p.read_text(), p.name == "__init__.py")
        for p in _modules()
    }


def test_no_import_cycle():
    """No two modules import each other, even through others or inside a function: each module
    can be read, and imported, on its own."""
    assert import_cycles(_import_graph()) == []


def test_negative_control_an_import_cycle_is_caught():
    graph = _import_graph()
    graph["jaxdp.domain.coded"] = graph["jaxdp.domain.coded"] | {"jaxdp.domain.schema"}
    assert import_cycles(graph) == [["jaxdp.domain.coded", "jaxdp.domain.schema"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}) == [["a", "b", "c"], ["d"]]


def test_accounting_never_imports_jax():
    for module in ("accounting.py", "_checks.py"):
        tree = ast.parse((PACKAGE / module).read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(n.split(".")[0] in ("jax", "jaxlib", "flax", "optax") for n in names), module


def test_families_never_touch_noise_or_accounting():
    for path in _modules("families"):
        imported = imported_modules(module_name(path), path.read_text(), path.name == "__init__.py")
        forbidden = ("jaxdp.noise", "jaxdp.accounting", "jaxdp.samplers")
        assert not {m for m in imported if m.startswith(forbidden)}, path


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
    """flax, optax, mbi, scipy, pandas, tqdm and pyarrow load when a mechanism or option needs them: a
    command-line run pays their import (flax about half a second) only then."""
    heavy = ("flax", "optax", "mbi", "scipy", "pandas", "tqdm", "pyarrow")
    code = f"import sys, jaxdp, jaxdp.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
