"""The small runs whose outputs are pinned by `goldens.npz` (see `record.py`).

One case per shipped jittable mechanism (and relation where it has a choice, and a float-noise
case for each family), on the tiny dataset of the mechanism tests, with a fixed key. The
factories are called through their public signatures only, so the same cases build today's
mechanisms and their presets.
"""

from __future__ import annotations

import dataclasses

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


def _one_round_each():
    """RAP++'s three query classes, one round each. The annealed projection's hard-threshold
    targets amplify a rounding difference about a thousandfold a round once thresholds are
    measured (measured between XLA's vector widths: answers 1e-7 apart after three rounds, 1e-4
    after four, 4e-3 after five), so the pinned case stops at three rounds, where the fit still
    means the same on every processor."""
    return small_classes(mixed_rounds=1, linear_rounds=1)


def _cases(budget=BUDGET, samples=5):
    data = tiny_dataset()
    w = _two_way(data)
    return {
        "independent-replace-one": lambda: jaxdp.independent(data, **budget),
        "independent-add-remove": lambda: jaxdp.independent(data, relation="add-remove", **budget),
        "gaussian-replace-one": lambda: jaxdp.gaussian(data, w, **budget),
        "gaussian-add-remove": lambda: jaxdp.gaussian(data, w, relation="add-remove", **budget),
        "mwem": lambda: jaxdp.mwem(data, w, rounds=4, **budget),
        "mwem-average": lambda: jaxdp.mwem(data, w, rounds=4, output="average", replay_passes=2, **budget),
        "mwem-single-query": lambda: jaxdp.mwem(data, w, rounds=4, marginal_trick=False, **budget),
        "pep": lambda: jaxdp.pep(data, w, rounds=4, **budget),
        "pep-float": lambda: jaxdp.pep(data, w, rounds=4, noise="float", **budget),
        "pep-single-query": lambda: jaxdp.pep(data, w, rounds=4, marginal_trick=False, **budget),
        "pmw-pub": lambda: jaxdp.pmw_pub(data, w, rounds=4, public=_public(), **budget),
        "pep-pub": lambda: jaxdp.pep_pub(data, w, rounds=4, public=_public(), **budget),
        "dualquery": lambda: jaxdp.dualquery(data, w, rounds=4, samples=samples, **budget),
        "fem": lambda: jaxdp.fem(data, w, rounds=4, samples=samples, **budget),
        "rap": lambda: jaxdp.rap(data, w, rounds=2, marginals_per_round=2, n_rows=50, max_steps=20, **budget),
        "rap-float": lambda: jaxdp.rap(
            data, w, rounds=2, marginals_per_round=2, n_rows=50, max_steps=20, noise="float", **budget
        ),
        "rap-softmax": lambda: jaxdp.rap_softmax(
            data, w, rounds=3, marginals_per_round=1, n_rows=50, max_steps=20, **budget
        ),
        "gem": lambda: jaxdp.gem(data, w, rounds=3, **SMALL_GENERATOR, **budget),
        "gem-pub": lambda: jaxdp.gem_pub(
            data, w, rounds=3, public=_public(), pretrain_steps=10, **SMALL_GENERATOR, **budget
        ),
        "rap++": lambda: jaxdp.rap_plus_plus(
            data, w, rounds=3, marginals_per_round=2, n_rows=50, max_stage_steps=20, **budget
        ),
        "rap++-mixed": lambda: jaxdp.rap_plus_plus(
            mixed_dataset(), _one_round_each(), n_rows=50, stages=3, max_stage_steps=10, **budget
        ),
    }


CASES = _cases()


def _changed_fit(name: str, setting: str, factor: float):
    """Case `name` with its family's `setting` multiplied by `factor`."""

    def build():
        mechanism = CASES[name]()
        value = getattr(mechanism.family, setting)
        family = dataclasses.replace(mechanism.family, **{setting: type(value)(value * factor)})
        return dataclasses.replace(mechanism, family=family)

    return build


# One genuine change per case, for the goldens' negative control: (factory, whether the change is
# to a float fit alone, so that the tolerances must see it). The fits change their step (Adam's
# learning rate, MW's step size, PEP's projections: 2 of 25); the others their selection or noise.
CHANGED = {
    **{
        name: (_changed_fit(name, "step_size", 1.5), True)
        for name in ("mwem", "mwem-average", "mwem-single-query", "pmw-pub")
    },
    **{
        name: (_changed_fit(name, "max_steps", 0.1), True)
        for name in ("pep", "pep-float", "pep-single-query", "pep-pub")
    },
    **{
        name: (_changed_fit(name, "learning_rate", 1.5), True)
        for name in ("rap", "rap-float", "rap-softmax", "gem", "gem-pub", "rap++", "rap++-mixed")
    },
    **{name: (_cases(samples=6)[name], False) for name in ("dualquery", "fem")},
    **{
        f"{baseline}-{relation}": (_cases(budget={**BUDGET, "delta": 1e-7})[f"{baseline}-{relation}"], False)
        for baseline in ("independent", "gaussian")
        for relation in ("replace-one", "add-remove")
    },
}


def key():
    return jax.random.key(KEY_SEED)
