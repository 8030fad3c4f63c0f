"""MST: the spanning tree, the fixed plan, scores against the 1-way model, compression, refusals."""

import itertools

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import loop, noise
from jaxdp.keys import round_key
from jaxdp.mechanisms.mst import MST_COMPRESSION
from jaxdp.queries import all_kway

from ._host import (
    assert_replays,
    assert_same_merge,
    fits_of,
    merge_from_release,
    record_selections,
    revealed_steps,
    round_zero_releases,
    synth_on_adult,
)
from .conftest import tiny_dataset

pytest.importorskip("mbi")

FAST = {"iters": 50, "final_iters": 50}


def _mst(data=None, **kw):
    data = data or tiny_dataset()
    return jaxdp.mst(data, all_kway(data.domain.sizes, 2), **{"epsilon": 1.0, "delta": 1e-6, **FAST, **kw})


def _wide(n: int = 2000, seed: int = 0) -> jaxdp.Dataset:
    """Six attributes, a chain of dependencies: a tree worth finding."""
    rng = np.random.default_rng(seed)
    columns = [rng.integers(0, 4, n)]
    for _ in range(5):
        flip = rng.random(n) < 0.2
        columns.append(np.where(flip, rng.integers(0, 4, n), columns[-1]))
    return jaxdp.Dataset.from_codes(
        jaxdp.Domain.from_sizes({f"x{i}": 4 for i in range(6)}), np.stack(columns, 1)
    )


def _picked_pairs(mechanism, state) -> list[tuple[int, ...]]:
    return [mechanism.parts(state).selection.candidates.cliques[r.selected] for r in state.records]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_the_picks_are_a_spanning_tree(seed, relation):
    data = _wide()
    mechanism = _mst(data, relation=relation)
    state = loop.run(mechanism, jax.random.key(seed)).state
    pairs = _picked_pairs(mechanism, state)
    assert len(pairs) == 5 and all(len(p) == 2 for p in pairs)
    component = list(range(6))  # acyclic and spanning: every pick joins two components

    def root(a):
        return a if component[a] == a else root(component[a])

    for a, b in pairs:
        assert root(a) != root(b)
        component[root(a)] = root(b)
    assert len({root(a) for a in range(6)}) == 1


def test_a_strong_chain_is_found():
    """At a large budget the exponential mechanism picks the chain x0 - x1 - ... - x5, the
    pairs whose L1 error against the independent model is largest (negative control: the
    tree of a table whose columns are independent is not that chain for every key)."""
    chain = [(i, i + 1) for i in range(5)]
    mechanism = _mst(_wide(n=20_000), epsilon=20.0)
    state = loop.run(mechanism, jax.random.key(0)).state
    assert sorted(_picked_pairs(mechanism, state)) == chain
    rng = np.random.default_rng(1)
    independent = jaxdp.Dataset.from_codes(_wide().domain, rng.integers(0, 4, (20_000, 6)))
    trees = set()
    for seed in range(3):
        mechanism = _mst(independent, epsilon=20.0)
        trees.add(tuple(sorted(_picked_pairs(mechanism, loop.run(mechanism, jax.random.key(seed)).state))))
    assert tuple(chain) not in trees or len(trees) > 1


def test_the_plan_is_fixed_before_the_run_and_followed():
    """The plan holds every charge before any round (a third of rho each to the 1-way
    measurement, the edges' selections and their measurements), the run's realised plan has the
    same charges, and the ledger audits against it."""
    mechanism = _mst(_wide())
    plan = mechanism.plan
    assert [(c.label, c.times) for c in plan.charges] == [
        ("measure 1-way marginals", 1),
        ("select edge", 5),
        ("measure edge", 5),
    ]
    for charge in plan.charges:
        assert charge.rho == pytest.approx(plan.rho_budget / 3, rel=1e-6)
        assert charge.rho <= plan.rho_budget / 3
    result = loop.run(mechanism, jax.random.key(3))
    realised = mechanism.realised_plan(result.state)
    planned = sorted((c.primitive, c.sensitivity, c.scale) for c in plan.charges for _ in range(c.times))
    assert sorted((c.primitive, c.sensitivity, c.scale) for c in realised.charges) == planned
    assert len(result.ledger) == 11
    assert result.state.rounds_done == 6 and mechanism.finished(result.state)


def test_an_edge_round_scores_every_allowed_pair_by_its_l1_error_against_the_one_way_model(monkeypatch):
    """Exactness against a brute-force reference: the scores the exponential mechanism is given
    in round 1 are each pair's L1 distance between its true counts and the product of the
    model's 1-way counts, to the grid's resolution (1/64 of a count), over the pairs only."""
    data = _wide(n=500)
    mechanism = _mst(data, compress=None)
    state = mechanism.init(jax.random.key(0))
    state, _ = mechanism.step(state, round_key(jax.random.key(0), 0))
    calls = record_selections(monkeypatch)
    mechanism.step(state, round_key(jax.random.key(0), 1))
    ((value, kwargs),) = calls
    mask = np.asarray(kwargs["mask"])
    candidates = mechanism.candidates
    assert [candidates.cliques[i] for i in np.flatnonzero(mask)] == list(itertools.combinations(range(6), 2))
    scores = revealed_steps(value)[mask] * kwargs["sensitivity"] / noise.GRID_STEPS
    model = state.model.fitted
    total = float(model.total)
    one_way = [jaxdp.families.pgm_marginals.ModelMarginals(model).marginal((a,)) for a in range(6)]
    reference = []
    for a, b in itertools.combinations(range(6), 2):
        true = np.histogram2d(data.codes[:, a], data.codes[:, b], bins=[np.arange(5), np.arange(5)])[0]
        reference.append(np.abs(true - total * np.outer(one_way[a], one_way[b])).sum())
    reference = np.asarray(reference)
    np.testing.assert_allclose(scores - scores.max(), reference - reference.max(), atol=16 * 2 / 64)


def test_the_model_is_fitted_after_the_one_way_round_and_the_last_only(monkeypatch):
    assert fits_of(_mst(_wide()), monkeypatch) == [6, 11]  # the 6 one-way measurements, then all 11


def test_compression_is_post_processing_and_reported(monkeypatch):
    """Same key: the same ledger with and without compression, and the merge is the one
    recomputed from round 0's released counts (it reads nothing else: feeding it the true counts
    fails here, `tests/families/test_compression.py`); the report lists what was merged, and the
    records use the declared codes."""
    rng = np.random.default_rng(0)
    codes = np.stack([rng.choice(30, 3000, p=np.r_[[0.1] * 9, [0.1 / 21] * 21]), rng.integers(0, 3, 3000)], 1)
    data = jaxdp.Dataset.from_codes(jaxdp.Domain.from_sizes({"wide": 30, "small": 3}), codes)
    ledgers = []
    released = round_zero_releases(monkeypatch)
    for compress in (MST_COMPRESSION, None):
        mechanism = _mst(data, compress=compress)
        result = loop.run(mechanism, jax.random.key(1))
        ledgers.append([e.to_json() for e in result.ledger])
        report = mechanism.compression_report(result.state)
        if compress is None:
            assert report is None
            continue
        assert_same_merge(result.state.compressed, merge_from_release(mechanism, *released[-1]))
        assert report["threshold_sigmas"] == 3.0 and report["spread"] == "noisy"
        assert set(report["merged"]) == {"wide"} and set(report["merged"]["wide"]) <= set(range(9, 30))
        released = np.asarray(loop.release(mechanism, result.state, jax.random.key(2)))
        assert released[:, 0].max() < 30 and released[:, 1].max() < 3
    assert ledgers[0] == ledgers[1]


def test_refusals():
    data = tiny_dataset()
    with pytest.raises(ValueError, match="do not give rounds"):
        jaxdp.mst(data, all_kway(data.domain.sizes, 2), epsilon=1.0, delta=1e-6, rounds=3)
    one = jaxdp.Dataset.from_codes(jaxdp.Domain.from_sizes({"a": 3}), np.zeros((10, 1), np.int32))
    with pytest.raises(ValueError, match="at least 2 attributes"):
        jaxdp.mst(one, all_kway(one.domain.sizes, 1), epsilon=1.0, delta=1e-6)
    with pytest.raises(ValueError, match="epsilon"):
        jaxdp.mst(data, all_kway(data.domain.sizes, 2), epsilon=0.0, delta=1e-6)
    mechanism = _mst()
    state = loop.run(mechanism, jax.random.key(0)).state
    with pytest.raises(ValueError, match="error bounds are AIM's"):
        mechanism.error_bounds(state)


def test_replay_is_bit_identical():
    assert_replays(lambda: _mst(_wide()))


def test_the_command_line_runs_mst(tmp_path):
    report, rows = synth_on_adult(tmp_path, "mst")
    assert report["mechanism"] == "mst" and report["relation"] == "add-remove"
    assert report["rho_spent"] <= report["rho_budget"]
    assert len(report["ledger"]) == 1 + 2 * 12  # the 1-way round, then 12 edges of its 13 attributes
    assert "compression" in report and rows > 40_000
