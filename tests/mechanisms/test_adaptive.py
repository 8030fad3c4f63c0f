"""The builder: any selection rule with any family, its plan and its refusals; the rules' scores
move by at most their declared sensitivity between neighbouring datasets."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import evaluate, loop
from jaxdp.domain import Dataset
from jaxdp.families import GEM, MW, PEP, RAP
from jaxdp.queries import all_kway, marginal_counts
from jaxdp.selection import L1Error, MaxError, QueryError, Rule, l1_errors
from jaxdp.types import pytree_dataclass

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
