"""Every shipped jittable mechanism reproduces, bit for bit, the state, Info and release that
the implementation of `goldens.npz`'s commit gave for the same cases and key (figures cannot
move by a refactoring)."""

import numpy as np
import pytest

from tests.goldens.cases import CASES
from tests.goldens.record import OUT, outputs

GOLDENS = np.load(OUT)


def _expected(name: str) -> dict[str, np.ndarray]:
    prefix = f"{name}|"
    return {k[len(prefix) :]: GOLDENS[k] for k in GOLDENS.files if k.startswith(prefix)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_are_bit_identical_to_the_goldens(name):
    expected = _expected(name)
    got = outputs(CASES[name]())
    assert sorted(got) == sorted(expected)
    for path, value in expected.items():
        assert got[path].dtype == value.dtype, path
        np.testing.assert_array_equal(got[path], value, err_msg=f"{name}: {path}")
