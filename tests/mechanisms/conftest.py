"""Shared fixtures for mechanism tests: a small categorical dataset and every factory."""

import numpy as np
import pytest

import jaxdp
from jaxdp.domain import Dataset, Domain
from jaxdp.queries import all_kway

TINY_DOMAIN = Domain.from_sizes({"a": 3, "b": 4, "c": 2, "d": 5})


def tiny_dataset(n: int = 400, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4  # correlated with a
    c = rng.integers(0, 2, n)
    d = (2 * c + rng.integers(0, 2, n)) % 5
    return Dataset.from_codes(TINY_DOMAIN, np.stack([a, b, c, d], axis=1))


FACTORIES = {
    "independent": lambda data, **kw: jaxdp.independent(data, **kw),
    "gaussian": lambda data, **kw: jaxdp.gaussian(data, all_kway(data.domain.sizes, 2), **kw),
}


@pytest.fixture(params=sorted(FACTORIES))
def mechanism_name(request):
    return request.param


@pytest.fixture(params=["replace-one", "add-remove"])
def relation(request):
    return request.param


@pytest.fixture
def build(mechanism_name, relation):
    def _build(data=None, **kw):
        kw.setdefault("epsilon", 1.0)
        kw.setdefault("delta", 1e-6)
        return FACTORIES[mechanism_name](data or tiny_dataset(), relation=relation, **kw)

    return _build
