"""The builder: any selection rule with any family, its plan and its refusals; the rules' scores
move by at most their declared sensitivity between neighbouring datasets."""

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import api, evaluate, loop
from jaxdp.domain import Dataset
from jaxdp.families import GEM, MW, PEP, RAP, BestResponses, Family, GraphicalModel, Product
from jaxdp.mechanisms import Adaptive, Annealed, QueryClass
from jaxdp.queries import all_kway, marginal_counts
from jaxdp.selection import (
    AIMSelection,
    Everything,
    L1Error,
    MaxError,
    QueryError,
    Rule,
    SignedError,
    l1_errors,
)
from jaxdp.types import pytree_dataclass, static_field

from .conftest import tiny_dataset

RULES = {"max": MaxError(), "max-top2": MaxError(k=2), "l1": L1Error(), "query": QueryError()}
FAMILIES = {
    "pep": PEP(max_steps=5),
    "mw": MW(),
    "rap": RAP(n_rows=30, max_steps=5),
    "gem": GEM(batch=32, hidden=(16,), latent_dim=4, max_steps=5),
}


@pytest.mark.parametrize(("rule", "family"), list(itertools.product(RULES, FAMILIES)))
def test_every_rule_composes_with_every_family(rule, family):
    data = tiny_dataset(n=300)
    workload = all_kway(data.domain.sizes, 2)
    mech = jaxdp.adaptive(
        data, workload, select=RULES[rule], family=FAMILIES[family], rounds=2, epsilon=1.0, delta=1e-6
    )
    result = loop.run(mech, jax.random.key(0))
    k = RULES[rule].k
    assert [c.label for c in mech.plan.charges] == ["select", "measure"]
    assert len(result.ledger) == 4 and jaxdp.rho_spent(result.ledger) == pytest.approx(mech.plan.rho_planned)
    assert mech.plan.rho_planned <= mech.plan.rho_budget
    assert np.asarray(result.info.selected).shape == (2, k)
    assert int(np.sum(~np.asarray(result.state.eligible))) == 2 * k  # each candidate measured once
    codes = np.asarray(loop.release(mech, result.state, jax.random.key(0), rows=50))
    assert codes.shape == (50, 4) and (codes < np.asarray(data.domain.sizes)).all()


def test_the_plan_states_each_rules_sensitivity_and_the_measurements():
    data = tiny_dataset(n=400)
    workload = all_kway(data.domain.sizes, 2)
    n = len(data)
    cases = {
        "max": (MaxError(), 1.0 / n, "discrete_exponential", math.sqrt(2.0)),
        "top3": (MaxError(k=3), 1.0 / n, "discrete_top_k", math.sqrt(6.0)),
        "l1": (L1Error(), 2.0 / n, "discrete_exponential", math.sqrt(2.0)),
        "query": (QueryError(k=2), 1.0 / n, "discrete_top_k", math.sqrt(2.0)),
    }
    for rule, sensitivity, primitive, measure in cases.values():
        mech = jaxdp.adaptive(data, workload, select=rule, family=PEP(), rounds=2, rho=0.5)
        select, measured = mech.plan.charges
        assert (select.primitive, select.sensitivity, select.count) == (primitive, sensitivity, rule.k)
        assert (measured.primitive, measured.sensitivity) == ("discrete_gaussian", pytest.approx(measure))
        assert mech.plan.rho_planned == pytest.approx(0.5, rel=1e-6)


def test_a_histogram_family_takes_several_marginals_a_round():
    """MW with k = 3 marginals a round records three measurements a round; with a huge budget
    PEP fits all six 2-way marginals in two rounds."""
    data = tiny_dataset(n=3000)
    workload = all_kway(data.domain.sizes, 2)
    mech = jaxdp.adaptive(data, workload, select=MaxError(k=3), family=PEP(max_steps=200), rounds=2, rho=1e8)
    state = loop.run(mech, jax.random.key(1)).state
    assert bool(np.asarray(state.model.measurements.filled).all())
    error = evaluate.answer_errors(
        evaluate.fractions(data, workload), np.asarray(mech.answers(state)), workload
    )
    assert error["max_abs"] < 5e-3


@pytree_dataclass
class MeanError(Rule):
    """A rule of one's own: a marginal's mean absolute cell error. A replaced record moves two
    cells by 1/n each, so the mean over c >= 2 cells moves by at most 2 / (c n) <= 1/n."""

    def scores(self, true_answers, current, workload):
        cells = jnp.asarray(workload.cells, jnp.float32)
        return l1_errors(true_answers, current, workload) / cells


def test_a_rule_of_ones_own_composes():
    data = tiny_dataset(n=300)
    workload = all_kway(data.domain.sizes, 2)
    mech = jaxdp.adaptive(
        data, workload, select=MeanError(k=2), family=RAP(n_rows=30, max_steps=5), rounds=2, rho=0.5
    )
    assert mech.plan.charges[0].sensitivity == 1.0 / len(data)
    result = loop.run(mech, jax.random.key(2))
    assert jaxdp.rho_spent(result.ledger) == pytest.approx(0.5, rel=1e-6)


def test_refusals():
    data = tiny_dataset()
    workload = all_kway(data.domain.sizes, 2)
    budget = {"epsilon": 1.0, "delta": 1e-6}
    with pytest.raises(ValueError, match="3 x 3 exceeds the 6 marginals"):
        jaxdp.adaptive(data, workload, select=MaxError(k=3), family=PEP(), rounds=3, **budget)
    with pytest.raises(TypeError, match=r"select must be a jaxdp\.selection\.Rule"):
        jaxdp.adaptive(data, workload, select="max", family=PEP(), rounds=2, **budget)
    with pytest.raises(TypeError, match=r"family must be a jaxdp\.families\.Family"):
        jaxdp.adaptive(data, workload, select=MaxError(), family="pep", rounds=2, **budget)
    with pytest.raises(ValueError, match="output"):
        jaxdp.adaptive(data, workload, select=MaxError(), family=MW(output="median"), rounds=2, **budget)
    with pytest.raises(ValueError, match="noise"):
        jaxdp.adaptive(data, workload, select=MaxError(), family=PEP(), rounds=2, noise="exact", **budget)


def _neighbours(seed: int) -> tuple[Dataset, Dataset]:
    """D and D' with one record replaced by a random record."""
    data = tiny_dataset(n=200, seed=seed)
    rng = np.random.default_rng(seed)
    codes = data.codes.copy()
    codes[rng.integers(len(codes))] = [rng.integers(s) for s in data.domain.sizes]
    return data, Dataset.from_codes(data.domain, codes)


@pytest.mark.parametrize("rule", [MaxError(), L1Error(), QueryError()], ids=["max", "l1", "query"])
def test_scores_move_by_at_most_their_sensitivity_between_neighbours(rule):
    """Over 50 neighbouring pairs and random synthetic answers, no candidate's score moves by
    more than unit_sensitivity / n (a deterministic bound: no false failures), up to float32
    rounding of scores of size <= 1 (a few 2^-24; `jaxdp.noise`'s grid allows for it)."""
    workload = all_kway(tiny_dataset().domain.sizes, 2)
    largest = 0.0
    for seed in range(50):
        d, d_prime = _neighbours(seed)
        n = len(d)
        current = jax.random.uniform(jax.random.key(seed), (workload.n_queries,))
        scores = [
            np.asarray(
                rule.scores(marginal_counts(jnp.asarray(x.codes), workload, jnp.int32) / n, current, workload)
            )
            for x in (d, d_prime)
        ]
        largest = max(largest, float(np.abs(scores[0] - scores[1]).max()) * n)
    assert largest <= rule.unit_sensitivity + 8 * 2**-24 * 200
    assert largest >= 0.5 * rule.unit_sensitivity  # and the bound is tight (the check has power)


def test_every_registry_mechanism_is_a_preset_of_the_builder():
    """Each name the API and the command line know builds the builder's mechanism (an `Adaptive`;
    an `Annealed` for AIM's filter rule) from public parts: a rule of `jaxdp.selection` and a
    family of `jaxdp.families`, no mechanism class of its own."""
    data = tiny_dataset(n=300)
    workload = all_kway(data.domain.sizes, 2)
    public = tiny_dataset(n=60, seed=9)
    for name, spec in api.MECHANISMS.items():
        mech = api.build(
            name, data, workload, epsilon=1.0, delta=1e-6, public=public if spec.public else None
        )
        assert isinstance(mech, Adaptive | Annealed), name
        rules = [c.selection for c in mech.classes] if isinstance(mech, Adaptive) else [mech.selection]
        for part, package in [*((r, "jaxdp.selection") for r in rules), (mech.family, "jaxdp.families")]:
            assert type(part).__module__.startswith(package + "."), (name, type(part))
        assert isinstance(mech.family, Family), name


@pytest.mark.parametrize(
    "family",
    [PEP(max_steps=5), RAP(n_rows=30, max_steps=5), GEM(batch=32, hidden=(16,), latent_dim=4, max_steps=5)],
    ids=["pep", "rap", "gem"],
)
def test_aim_selection_composes_with_the_fitted_families(family):
    """AIM's rule (annealing and the filter) drives a family of another paper: round 0 measures
    the 1-way marginals, then select-measure rounds until the filter has spent the budget,
    exactly and never more; the ledger is audited against the charges the filter decided on."""
    data = tiny_dataset(n=500)
    workload = all_kway(data.domain.sizes, 2)
    mech = jaxdp.adaptive(data, workload, select=AIMSelection(), family=family, rounds=8, rho=0.05)
    assert isinstance(mech, Annealed) and not mech.jittable
    result = loop.run(mech, jax.random.key(3))
    primitives = [e.primitive for e in result.ledger]
    assert primitives[0] == "discrete_gaussian"
    assert primitives[1:] == ["discrete_exponential", "discrete_gaussian"] * (len(primitives) // 2)
    assert len(primitives) >= 3 and result.state.schedule.done
    assert jaxdp.rho_spent(result.ledger) == pytest.approx(0.05, rel=1e-6)
    assert jaxdp.rho_spent(result.ledger) <= 0.05
    codes = np.asarray(loop.release(mech, result.state, jax.random.key(3), rows=40))
    assert codes.shape == (40, 4) and (codes < np.asarray(data.domain.sizes)).all()


def test_parts_that_do_not_fit_are_refused_by_name():
    data = tiny_dataset(n=300)
    workload = all_kway(data.domain.sizes, 2)
    budget = {"epsilon": 1.0, "delta": 1e-6}
    refusals = [
        (dict(select=SignedError(), family=PEP()), "PEP does not fit picks of signed queries"),
        (dict(select=MaxError(), family=PEP(), measure=None), "PEP fits measurements"),
        (dict(select=MaxError(), family=BestResponses()), "BestResponses does not fit picks of marginals"),
        (dict(select=Everything(), family=PEP(), relation="add-remove"), "PEP fits under replace-one"),
        (dict(select=MaxError(), family=Product(), relation="add-remove"), "MaxError scores under"),
        (dict(select=AIMSelection(), family=MW(), rounds=8), "MW updates on each round's newest"),
        (dict(select=AIMSelection(), family=PEP(), relation="add-remove", rounds=8), "PEP fits under"),
        (dict(select=AIMSelection(), family=PEP(), alpha=0.5, rounds=8), "AIMSelection"),
        (dict(select=Everything(), family=PEP(), alpha=0.5), "alpha splits a round"),
    ]
    for options, match in refusals:
        with pytest.raises(ValueError, match=match):
            jaxdp.adaptive(data, workload, **{"rounds": 1, **options}, **budget)
    classes = [QueryClass(workload, MaxError(), 1), QueryClass(workload, MaxError(), 1)]
    with pytest.raises(ValueError, match="PEP fits one query class, got 2"):
        jaxdp.adaptive(data, classes=classes, family=PEP(), **budget)
    with pytest.raises(ValueError, match="either classes or"):
        jaxdp.adaptive(data, workload, classes=classes, family=PEP(), **budget)


@pytree_dataclass
class LastMeasured(Family):
    """A family of one's own: the measured answers themselves (unmeasured cells at 0), released
    as records drawn attribute by attribute from their noisy 1-way marginals."""

    unit: float = static_field(default=1.0)
    n_queries: int = static_field(default=0)
    sizes: tuple[int, ...] = static_field(default=())

    def bind(self, classes, *, domain, public, n_records):
        (shape,) = classes
        return dataclasses.replace(
            self, unit=1.0 / n_records, n_queries=shape.queries.n_queries, sizes=domain.sizes
        )

    def init(self, key):
        return jnp.zeros(self.n_queries, jnp.float32)

    def answers(self, model):
        return model

    def record(self, model, measured, current, r):
        return model.at[measured.index].set(measured.counts * self.unit, mode="drop")

    def update(self, model, t, key, last):
        return model, jnp.zeros((), jnp.int32)

    def output_answers(self, model):
        return model

    def release(self, model, key, rows):
        return jnp.zeros((rows, len(self.sizes)), jnp.int32)


def test_a_family_of_ones_own_composes():
    """Subclassing `Family` is all a new representation needs: the builder calibrates the rule
    and the measurement, and the run's ledger is the plan's."""
    data = tiny_dataset(n=300)
    workload = all_kway(data.domain.sizes, 1)
    mech = jaxdp.adaptive(data, workload, select=Everything(), family=LastMeasured(), rounds=1, rho=1e6)
    result = loop.run(mech, jax.random.key(0))
    assert [c.label for c in mech.plan.charges] == ["measure"] and len(result.ledger) == 1
    true = evaluate.fractions(data, workload)
    np.testing.assert_allclose(np.asarray(mech.answers(result.state)), true, atol=1e-2)


def test_a_fixed_rule_with_a_host_family_runs_as_a_python_loop():
    """MWEM's selection with Private-PGM's estimator: the family fits on the host, so the
    mechanism is not jittable and `run` drives its rounds from Python, with the same plan and
    ledger as any fixed-budget mechanism; before its first fit the model answers uniformly."""
    pytest.importorskip("mbi")
    data = tiny_dataset(n=500)
    workload = all_kway(data.domain.sizes, 2)
    family = GraphicalModel(iters=50, final_iters=50)
    mech = jaxdp.adaptive(data, workload, select=MaxError(), family=family, rounds=3, rho=0.5)
    assert isinstance(mech, Adaptive) and not mech.jittable
    result = loop.run(mech, jax.random.key(4))
    assert [e.primitive for e in result.ledger] == ["discrete_exponential", "discrete_gaussian"] * 3
    assert jaxdp.rho_spent(result.ledger) == pytest.approx(0.5, rel=1e-6)
    uniform = mech.family.answers(mech.family.init(jax.random.key(0)))
    np.testing.assert_allclose(uniform, np.repeat(1.0 / np.asarray(workload.cells), workload.cells))
    codes = np.asarray(loop.release(mech, result.state, jax.random.key(4), rows=64))
    assert codes.shape == (64, 4)
