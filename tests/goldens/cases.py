"""The small runs whose outputs are pinned by `goldens.npz` (see `record.py`).

One case per shipped jittable mechanism (and relation where it has a choice, and a float-noise
case for each family), on the tiny dataset of the mechanism tests, with a fixed key. The
factories are called through their public signatures only, so the same cases build today's
mechanisms and their presets.
"""

from __future__ import annotations

import jax

import jaxdp
from jaxdp.queries import all_kway
from tests.mechanisms.conftest import tiny_dataset
from tests.mechanisms.test_rap_plus import mixed_dataset, small_classes

KEY_SEED = 20240615
SMALL_GENERATOR = {"batch": 64, "hidden": (32, 32), "latent_dim": 8, "max_steps": 20}
BUDGET = {"epsilon": 1.0, "delta": 1e-6}


def _two_way(data):
    return all_kway(data.domain.sizes, 2)


def _public():
    return tiny_dataset(n=60, seed=99)


def _cases():
    data = tiny_dataset()
    w = _two_way(data)
    return {
        "independent-replace-one": lambda: jaxdp.independent(data, **BUDGET),
        "independent-add-remove": lambda: jaxdp.independent(data, relation="add-remove", **BUDGET),
        "gaussian-replace-one": lambda: jaxdp.gaussian(data, w, **BUDGET),
        "gaussian-add-remove": lambda: jaxdp.gaussian(data, w, relation="add-remove", **BUDGET),
        "mwem": lambda: jaxdp.mwem(data, w, rounds=4, **BUDGET),
        "mwem-average": lambda: jaxdp.mwem(data, w, rounds=4, output="average", replay_passes=2, **BUDGET),
        "mwem-single-query": lambda: jaxdp.mwem(data, w, rounds=4, marginal_trick=False, **BUDGET),
        "pep": lambda: jaxdp.pep(data, w, rounds=4, **BUDGET),
        "pep-float": lambda: jaxdp.pep(data, w, rounds=4, noise="float", **BUDGET),
        "pep-single-query": lambda: jaxdp.pep(data, w, rounds=4, marginal_trick=False, **BUDGET),
        "pmw-pub": lambda: jaxdp.pmw_pub(data, w, rounds=4, public=_public(), **BUDGET),
        "pep-pub": lambda: jaxdp.pep_pub(data, w, rounds=4, public=_public(), **BUDGET),
        "dualquery": lambda: jaxdp.dualquery(data, w, rounds=4, samples=5, **BUDGET),
        "fem": lambda: jaxdp.fem(data, w, rounds=4, samples=5, **BUDGET),
        "rap": lambda: jaxdp.rap(data, w, rounds=2, marginals_per_round=2, n_rows=50, max_steps=20, **BUDGET),
        "rap-float": lambda: jaxdp.rap(
            data, w, rounds=2, marginals_per_round=2, n_rows=50, max_steps=20, noise="float", **BUDGET
        ),
        "rap-softmax": lambda: jaxdp.rap_softmax(
            data, w, rounds=3, marginals_per_round=1, n_rows=50, max_steps=20, **BUDGET
        ),
        "gem": lambda: jaxdp.gem(data, w, rounds=3, **SMALL_GENERATOR, **BUDGET),
        "gem-pub": lambda: jaxdp.gem_pub(
            data, w, rounds=3, public=_public(), pretrain_steps=10, **SMALL_GENERATOR, **BUDGET
        ),
        "rap++": lambda: jaxdp.rap_plus_plus(
            data, w, rounds=3, marginals_per_round=2, n_rows=50, max_stage_steps=20, **BUDGET
        ),
        "rap++-mixed": lambda: jaxdp.rap_plus_plus(
            mixed_dataset(), small_classes(), n_rows=50, stages=3, max_stage_steps=10, **BUDGET
        ),
    }


CASES = _cases()


def key():
    return jax.random.key(KEY_SEED)
