"""Test configuration: strict JAX modes for every test (DESIGN.md section 7)."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
from pathlib import Path

import jax
import pytest

jax.config.update("jax_debug_key_reuse", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
# The CLI turns JAX's persistent compilation cache on for its process; tests call it in-process,
# and must neither write to the user's cache directory nor load programs an older run left there.
# tests/test_compile_cache.py turns it on, in subprocesses, with a cache directory of its own.
os.environ["JAXDP_NO_COMPILE_CACHE"] = "1"

# The suite compiles the same programs many times over: every test builds fresh mechanisms (new
# closures, so JAX's in-memory caches miss) and each module's caches are dropped (below). JAX's
# persistent cache, in a directory of this test process's own (one per xdist worker: JAX writes
# entries without a lock) that is removed at exit, serves the repeats. It holds programs compiled
# from the tests' synthetic tables only. Off with JAXDP_TEST_COMPILE_CACHE=0; tests that count
# compilations count the programs it serves too (`programs_built`).
TEST_CACHE_ENV = "JAXDP_TEST_COMPILE_CACHE"


def pytest_configure(config):
    if os.environ.get(TEST_CACHE_ENV, "1").strip().lower() in ("0", "false", "no"):
        return
    directory = tempfile.mkdtemp(prefix="jaxdp-test-xla-")
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


@contextlib.contextmanager
def programs_built():
    """A list that collects one entry per program XLA compiles, or loads from the persistent
    cache, inside the block: a program the run had to build, whichever cache served it."""
    from jax import monitoring

    built: list[str] = []

    def on_compile(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            built.append("compiled")

    def on_event(event, **_):
        if event == "/jax/compilation_cache/cache_hits":
            built.append("loaded from the persistent cache")

    monitoring.register_event_duration_secs_listener(on_compile)
    monitoring.register_event_listener(on_event)
    try:
        yield built
    finally:
        monitoring.unregister_event_duration_listener(on_compile)
        monitoring.unregister_event_listener(on_event)


# ../shared/data beside the checkout; JAXDP_SHARED_DATA points elsewhere (a git worktree whose
# parent holds no shared/).
SHARED_DATA = Path(
    os.environ.get("JAXDP_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data")
)


# The quick tier (`python -m pytest`) leaves out the tests listed in full_tier.txt; they carry the
# `full` marker and run, with the `slow` tests, as `python -m pytest -m "full or slow"`.
FULL_TIER = Path(__file__).with_name("full_tier.txt")


def full_tier_entries() -> list[str]:
    """The node-id prefixes of full_tier.txt (a file, file::function or file::Class::function)."""
    lines = (line.split("#", 1)[0].strip() for line in FULL_TIER.read_text().splitlines())
    return [line for line in lines if line]


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    entries = full_tier_entries()
    for item in items:
        if any(item.nodeid == e or item.nodeid.startswith((e + "::", e + "[")) for e in entries):
            item.add_marker(pytest.mark.full)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program after each test module. XLA's CPU backend maps memory for
    each executable it keeps; the whole suite compiles thousands (AIM alone ~800 mappings a run),
    and one process reached the kernel's limit of 65,530 mappings, crashing a later compile."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data` beside the checkout (present in CI, absent in a user's clone)."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout (only CI and developers have it)")
    return SHARED_DATA


class CallCounter:
    """Stands in for a jitted function (calls and `lower`), counting the uses of each."""

    def __init__(self, jitted):
        self._jitted = jitted
        self.calls = 0
        self.lowerings = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._jitted(*args, **kwargs)

    def lower(self, *args, **kwargs):
        self.lowerings += 1
        return self._jitted.lower(*args, **kwargs)


class StoppedAfterSaves(Exception):
    """Raised by `stop_after_saves`: the run stopped, as a killed one would, after a checkpoint."""


def stop_after_saves(monkeypatch, saves: int) -> None:
    """Make `jaxdp.Checkpoint.save` raise StoppedAfterSaves once it has written `saves`
    checkpoints (use inside `monkeypatch.context()` to undo it before the resumed run)."""
    from jaxdp.checkpoint import Checkpoint

    save, written = Checkpoint.save, []

    def save_then_stop(self, *args):
        save(self, *args)
        written.append(1)
        if len(written) == saves:
            raise StoppedAfterSaves

    monkeypatch.setattr(Checkpoint, "save", save_then_stop)


def cli_env(cache_directory) -> dict[str, str]:
    """The environment of a `python -m jaxdp` subprocess whose compiled programs are kept in
    `cache_directory` (the suite turns the command line's cache off in its own environment), so
    that a second process runs the programs the first compiled."""
    env = {k: v for k, v in os.environ.items() if k != "JAXDP_NO_COMPILE_CACHE"}
    env["JAXDP_CACHE_DIR"] = str(cache_directory)
    return env


# The registry's mechanisms whose rounds AIM's privacy filter schedules: a run needs at least one
# round per attribute of the workload (`jaxdp.selection.AIMSelection.bind`).
AIM_FILTERED = ("aim", "aim-gdp", "aim-gem")


def small_rounds(name: str, attributes: int, otherwise: int) -> int:
    """Rounds for a short test run of mechanism `name` over `attributes` attributes."""
    return attributes if name in AIM_FILTERED else otherwise
