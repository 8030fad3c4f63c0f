"""The bundled data loads with no network and matches its declared domain."""

import numpy as np
import pytest

from jaxdp import datasets
from jaxdp.domain import load_domain


def test_adult_is_bundled():
    data = datasets.load("adult")
    assert len(data) == 48842
    assert data.domain.sizes == (9, 16, 7, 15, 6, 5, 2, 42, 2, 10, 13, 6, 10)
    assert data.codes.dtype == np.int32
    assert (data.codes >= 0).all() and (data.codes < np.array(data.domain.sizes)).all()


def test_adult_reduced_is_enumerable():
    data = datasets.load("adult-reduced")
    assert len(data) == 48842 and data.domain.n_cells == 336000


def test_bundled_adult_equals_the_shared_copy(shared_data):
    from jaxdp.domain import read_csv

    src = shared_data / "dp-query-release"
    ref = read_csv(src / "adult.csv", load_domain(src / "adult-domain.json"))
    np.testing.assert_array_equal(ref.codes, datasets.load("adult").codes)


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="unknown bundled dataset 'nope'"):
        datasets.load("nope")
