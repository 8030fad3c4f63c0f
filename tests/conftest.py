"""Test configuration: strict JAX modes for every test (DESIGN.md section 7)."""

from __future__ import annotations

from pathlib import Path

import jax
import pytest

jax.config.update("jax_debug_key_reuse", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data` beside the checkout (present in CI, absent in a user's clone)."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout (only CI and developers have it)")
    return SHARED_DATA
