"""Every shipped jittable mechanism reproduces, bit for bit, the state, Info and release that the
implementation of `goldens.npz`'s commit (before the composable core) gave for the same cases
and key: refactoring the mechanisms into presets of `jaxdp.adaptive` moved no figure.

What changed in the layout, and only that, is mapped: the presets keep their family's state
under `state.model`; `state.rho_spent` is gone (rho has one source, the charges in Info); a
histogram preset's Info gained `inner_steps` (0: its update is closed-form) and selects (k,)
candidates a round, so `selected` is (rounds, 1) where it was (rounds,).
"""

import numpy as np
import pytest

from tests.goldens.cases import CASES
from tests.goldens.record import OUT, outputs

GOLDENS = np.load(OUT)
REMOVED = {"state.rho_spent"}
ADDED = {"info.inner_steps"}


def _expected(name: str) -> dict[str, np.ndarray]:
    prefix = f"{name}|"
    return {k[len(prefix) :]: GOLDENS[k] for k in GOLDENS.files if k.startswith(prefix)}


def _old_path(path: str) -> str:
    return path.replace("state.model.", "state.", 1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_are_bit_identical_to_the_goldens(name):
    expected = {p: v for p, v in _expected(name).items() if p not in REMOVED}
    got = {_old_path(p): v for p, v in outputs(CASES[name]()).items()}
    assert set(expected) <= set(got), sorted(set(expected) - set(got))
    assert set(got) - set(expected) <= ADDED, sorted(set(got) - set(expected))
    for path, value in expected.items():
        assert got[path].dtype == value.dtype, path
        assert got[path].size == value.size, path
        np.testing.assert_array_equal(got[path].reshape(value.shape), value, err_msg=f"{name}: {path}")


def test_the_goldens_were_recorded_before_the_refactoring():
    assert str(GOLDENS["commit"]).startswith("3e176fa")
