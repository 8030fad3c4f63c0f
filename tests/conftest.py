"""Test configuration: strict JAX modes for every test (DESIGN.md section 7)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import jax
import pytest

jax.config.update("jax_debug_key_reuse", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
# The CLI turns JAX's persistent compilation cache on for its process; tests call it in-process,
# and must neither write to the user's cache directory nor load programs an older run left there.
# tests/test_compile_cache.py turns it on, in subprocesses, with a cache directory of its own.
os.environ["JAXDP_NO_COMPILE_CACHE"] = "1"

# ../shared/data beside the checkout; JAXDP_SHARED_DATA points elsewhere (a git worktree whose
# parent holds no shared/).
SHARED_DATA = Path(
    os.environ.get("JAXDP_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data")
)


# The quick tier (`python -m pytest`) leaves out the tests listed in full_tier.txt; they carry the
# `full` marker and run with `python -m pytest -m full`.
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
