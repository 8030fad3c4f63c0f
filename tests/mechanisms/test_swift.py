"""SWIFT's public parts: the clique tree it grows, the measurement plan it splits the budget by,
and a whole run's charges (`jaxdp.selection.swift`; its privacy rounds are in
`tests/privacy/test_noisy_error_rounds.py`)."""

from __future__ import annotations

import itertools
import math

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.keys import Stream, stream_key
from jaxdp.queries import all_kway
from jaxdp.selection.swift import ONE_WAY_SHARE, SELECT_SHARE, best_tree, clique_tree, measurement_plan

pytest.importorskip("mbi")


def _cells(sizes, attributes) -> int:
    return math.prod(sizes[a] for a in attributes)


def _is_junction_forest(nodes, sizes) -> bool:
    """Some forest over `nodes` has the running intersection property: a maximum-weight
    spanning forest by separator size does exactly when one exists (Jensen & Jensen 1994):
    then sum |separators| = sum over attributes (nodes holding it - 1)."""
    edges = sorted(
        ((len(a & b), i, j) for (i, a), (j, b) in itertools.combinations(enumerate(nodes), 2) if a & b),
        reverse=True,
    )
    parent = list(range(len(nodes)))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    weight = 0
    for w, i, j in edges:
        if root(i) != root(j):
            parent[root(i)] = root(j)
            weight += w
    holding = sum(sum(a in node for node in nodes) - 1 for a in range(len(sizes)))
    return weight == holding


@pytest.mark.parametrize("seed", range(25))
def test_clique_tree_is_a_junction_tree_under_the_cap(seed):
    """On random domains, errors, caps and penalties: every attribute in some node, every node
    within the cap (or a single attribute), a valid junction forest, and saturated: every pair it
    does not hold would need a node above the cap (or is held already)."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(3, 8))
    sizes = [int(s) for s in rng.integers(2, 7, d)]
    errors = {p: float(rng.exponential(10.0)) for p in itertools.combinations(range(d), 2)}
    cap = float(rng.choice([20, 60, 200, 10_000]))
    nodes = clique_tree(sizes, errors, cap, float(rng.choice([0.0, 1.0, 8.0])))
    assert set().union(*nodes) == set(range(d))
    for node in nodes:
        assert len(node) == 1 or _cells(sizes, node) <= cap, (node, cap)
    assert _is_junction_forest(nodes, sizes)
    if cap >= math.prod(sizes):
        assert all(any(set(p) <= node for node in nodes) for p in errors)


def test_best_tree_holds_the_worst_pairs():
    """Two strongly dependent pairs among weak ones, a cap that allows one pair a node: the tree
    holds both strong pairs."""
    sizes = [4, 4, 4, 4]
    errors = {p: 1.0 for p in itertools.combinations(range(4), 2)}
    errors[(0, 1)] = errors[(2, 3)] = 500.0
    nodes = best_tree(sizes, errors, 16)
    assert {frozenset((0, 1)), frozenset((2, 3))} <= set(nodes)


def _objective(errors, weights, cells, l2, plan):
    return sum(
        weights[i] * (errors[i] - math.sqrt(2 / math.pi) * cells[i] * l2 / math.sqrt(2 * rho))
        for i, rho in plan
    )


@pytest.mark.parametrize("seed", range(10))
def test_measurement_plan_spends_the_budget_and_splits_it_best(seed):
    """The rhos sum to the budget; no random split of the same subset scores higher (the split
    is the optimum for the subset); and on these 6 candidates it scores the best of all 63
    subsets at their optimal splits (the search is local: single additions, removals and swaps
    from the best prefix by ratio; it found the global optimum on 300 random 7-candidate cases).
    Deterministic."""
    rng = np.random.default_rng(seed)
    n = 6
    errors = rng.exponential(50.0, n)
    weights = rng.integers(1, 4, n).astype(float)
    cells = rng.integers(2, 40, n).astype(float)
    budget = float(rng.uniform(0.01, 1.0))
    plan = measurement_plan(errors, weights, cells, 1.0, budget)
    assert math.fsum(rho for _, rho in plan) == pytest.approx(budget, rel=1e-12)
    best = _objective(errors, weights, cells, 1.0, plan)
    chosen = [i for i, _ in plan]
    for _ in range(50):
        split = rng.dirichlet(np.ones(len(chosen))) * budget
        assert _objective(errors, weights, cells, 1.0, list(zip(chosen, split, strict=True))) <= best + 1e-9
    factor = (weights * math.sqrt(2 / math.pi) * cells / math.sqrt(2)) ** (2 / 3)

    def optimum(subset):  # the subset at its proportional split
        split = budget * factor[list(subset)] / factor[list(subset)].sum()
        return _objective(errors, weights, cells, 1.0, list(zip(subset, split, strict=True)))

    brute = max(optimum(s) for k in range(1, n + 1) for s in itertools.combinations(range(n), k))
    assert best >= brute - 1e-9 * abs(brute)


def test_a_run_spends_its_shares_as_planned():
    """A whole run on a 4-attribute table: round 0 spends ONE_WAY_SHARE of rho, the errors'
    measurement SELECT_SHARE of the rest, the planned measurements the remainder, summing to rho;
    the ledger matches the realised plan (`jaxdp.run`), and the same key gives the same run."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, (400, 4))
    codes[:, 1] = (codes[:, 0] + (rng.random(400) < 0.1)) % 3
    data = jaxdp.Dataset.from_codes(jaxdp.Domain.from_sizes({"a": 3, "b": 3, "c": 3, "d": 3}), codes)
    rho = 0.4
    runs = [
        jaxdp.run(
            jaxdp.swift(data, all_kway(data.domain.sizes, 2), rho=rho),
            stream_key(jax.random.key(1), Stream.INIT),
        )
        for _ in range(2)
    ]
    ledger = runs[0].ledger
    assert [e.to_json() for e in ledger] == [e.to_json() for e in runs[1].ledger]
    assert ledger[0].label == "measure 1-way marginals"
    assert ledger[0].rho == pytest.approx(ONE_WAY_SHARE * rho, rel=1e-6)
    assert ledger[1].rho == pytest.approx(SELECT_SHARE * (1 - ONE_WAY_SHARE) * rho, rel=1e-6)
    assert math.fsum(e.rho for e in ledger[2:]) == pytest.approx(
        (1 - SELECT_SHARE) * (1 - ONE_WAY_SHARE) * rho, rel=1e-6
    )
    assert jaxdp.rho_spent(ledger) <= rho * (1 + 1e-9)
