"""Shared fixtures for mechanism tests: a small categorical dataset and every factory."""

import numpy as np
import pytest

import jaxdp
from jaxdp.domain import Dataset, Domain
from jaxdp.mechanisms.dualquery import dualquery
from jaxdp.mechanisms.fem import fem
from jaxdp.queries import all_kway

TINY_DOMAIN = Domain.from_sizes({"a": 3, "b": 4, "c": 2, "d": 5})


def tiny_dataset(n: int = 400, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4  # correlated with a
    c = rng.integers(0, 2, n)
    d = (2 * c + rng.integers(0, 2, n)) % 5
    return Dataset.from_codes(TINY_DOMAIN, np.stack([a, b, c, d], axis=1))


def _two_way(data):
    return all_kway(data.domain.sizes, 2)


def _public(data):
    return tiny_dataset(n=60, seed=99)


SMALL_GENERATOR = {"batch": 64, "hidden": (32, 32), "latent_dim": 8, "max_steps": 20}

FACTORIES = {
    "independent": lambda data, **kw: jaxdp.independent(data, **kw),
    "gaussian": lambda data, **kw: jaxdp.gaussian(data, _two_way(data), **kw),
    "mwem": lambda data, **kw: jaxdp.mwem(data, _two_way(data), rounds=4, **kw),
    "mwem-single-query": lambda data, **kw: jaxdp.mwem(
        data, _two_way(data), rounds=4, marginal_trick=False, **kw
    ),
    "pep": lambda data, **kw: jaxdp.pep(data, _two_way(data), rounds=4, **kw),
    "pep-single-query": lambda data, **kw: jaxdp.pep(
        data, _two_way(data), rounds=4, marginal_trick=False, **kw
    ),
    "pmw-pub": lambda data, **kw: jaxdp.pmw_pub(data, _two_way(data), rounds=4, public=_public(data), **kw),
    "pep-pub": lambda data, **kw: jaxdp.pep_pub(data, _two_way(data), rounds=4, public=_public(data), **kw),
    "dualquery": lambda data, **kw: dualquery(data, _two_way(data), rounds=4, samples=5, **kw),
    "fem": lambda data, **kw: fem(data, _two_way(data), rounds=4, samples=5, **kw),
    "fem-milp": lambda data, **kw: fem(data, _two_way(data), rounds=3, samples=2, oracle="milp", **kw),
    "rap": lambda data, **kw: jaxdp.rap(
        data, _two_way(data), rounds=2, marginals_per_round=2, n_rows=50, max_steps=20, **kw
    ),
    "rap-softmax": lambda data, **kw: jaxdp.rap_softmax(
        data, _two_way(data), rounds=3, marginals_per_round=1, n_rows=50, max_steps=20, **kw
    ),
    "gem": lambda data, **kw: jaxdp.gem(data, _two_way(data), rounds=3, **SMALL_GENERATOR, **kw),
    "aim": lambda data, **kw: jaxdp.aim(data, _two_way(data), max_rounds=4, iters=20, final_iters=20, **kw),
    "mst": lambda data, **kw: jaxdp.mst(data, _two_way(data), iters=20, final_iters=20, **kw),
    "privbayes": lambda data, **kw: jaxdp.privbayes(data, _two_way(data), iters=20, final_iters=20, **kw),
    "aim-gem": lambda data, **kw: jaxdp.aim_gem(
        data,
        _two_way(data),
        max_rounds=4,
        iters=5,
        final_iters=5,
        batch=64,
        hidden=(32, 32),
        latent_dim=8,
        **kw,
    ),
    "rap++": lambda data, **kw: jaxdp.rap_plus_plus(
        data, _two_way(data), rounds=3, marginals_per_round=2, n_rows=50, max_stage_steps=20, **kw
    ),
    "gem-pub": lambda data, **kw: jaxdp.gem_pub(
        data, _two_way(data), rounds=3, public=_public(data), pretrain_steps=10, **SMALL_GENERATOR, **kw
    ),
}
# Mechanisms that measure normalised answers support only the replace-one relation (their
# factories take no `relation`).
REPLACE_ONE_ONLY = {
    "mwem",
    "mwem-single-query",
    "pep",
    "pep-single-query",
    "pmw-pub",
    "pep-pub",
    "dualquery",
    "fem",
    "fem-milp",
    "rap",
    "rap-softmax",
    "gem",
    "gem-pub",
    "rap++",
    "privbayes",
}


CASES = [
    (name, relation)
    for name in sorted(FACTORIES)
    for relation in ("replace-one", "add-remove")
    if relation == "replace-one" or name not in REPLACE_ONE_ONLY
]
# The quick tier runs the contract on every mechanism under its default relation (AIM's and
# AIM-GEM's and MST's is add-remove); option variants and second relations run in the full tier.
VARIANTS = {"mwem-single-query", "pep-single-query", "fem-milp"}
DEFAULT_ADD_REMOVE = {"aim", "aim-gem", "mst"}


def _case_param(name: str, relation: str):
    default = "add-remove" if name in DEFAULT_ADD_REMOVE else "replace-one"
    marks = [pytest.mark.full] if name in VARIANTS or relation != default else []
    return pytest.param((name, relation), marks=marks, id=f"{name}-{relation}")


@pytest.fixture(params=[_case_param(n, r) for n, r in CASES])
def build(request):
    name, relation = request.param

    def _build(data=None, **kw):
        kw.setdefault("epsilon", 1.0)
        kw.setdefault("delta", 1e-6)
        if name not in REPLACE_ONE_ONLY:
            kw["relation"] = relation
        return FACTORIES[name](data or tiny_dataset(), **kw)

    return _build
