"""MWEM and PEP: updates against NumPy references, projection properties, recovery, accuracy."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import evaluate, loop, noise
from jaxdp.domain import DataError, Dataset, Domain
from jaxdp.families.histogram import (
    DenseSupport,
    MarginalPadding,
    Measurements,
    probabilities,
    project_to_simplex,
)
from jaxdp.families.projection import entropy_projection, multiplicative_weights
from jaxdp.queries import all_kway

from .conftest import tiny_dataset

SIZES = (3, 2, 4)
WORKLOAD = all_kway(SIZES, 2)  # cliques (0,1), (0,2), (1,2)


def _numpy_marginal(p, clique):
    other = tuple(a for a in range(len(SIZES)) if a not in clique)
    return p.reshape(SIZES).sum(axis=other).ravel()


def _random_distribution(seed):
    p = np.random.default_rng(seed).dirichlet(np.ones(int(np.prod(SIZES))))
    return p.astype(np.float32)


def _one_measurement(marginal, target, cell=-1):
    padding = MarginalPadding.of(WORKLOAD)
    meas = Measurements.empty(3, padding.max_cells)
    padded = np.zeros(padding.max_cells, np.float32)
    padded[: len(target)] = target
    return padding, meas.record(0, marginal, cell, jnp.asarray(padded))


def test_dense_support_answers_match_numpy():
    p = _random_distribution(0)
    support = DenseSupport.of(WORKLOAD)
    want = np.concatenate([_numpy_marginal(p, c) for c in WORKLOAD.cliques])
    np.testing.assert_allclose(support.answers(jnp.asarray(p)), want, rtol=1e-6, atol=1e-7)
    for i, c in enumerate(WORKLOAD.cliques):
        got = support.marginal_answers(jnp.asarray(p), jnp.int32(i))[: WORKLOAD.cells[i]]
        np.testing.assert_allclose(got, _numpy_marginal(p, c), rtol=1e-6, atol=1e-7)


def test_mwem_update_matches_numpy_reference():
    p = _random_distribution(1)
    target = _numpy_marginal(_random_distribution(2), WORKLOAD.cliques[1])
    padding, meas = _one_measurement(1, target)
    support = DenseSupport.of(WORKLOAD)
    got = probabilities(multiplicative_weights(support, padding, jnp.log(p), meas, 0, step_size=0.5))
    # reference: w(x) *= exp((a_c - q_c) / 2) for x in cell c of marginal (0, 2), then normalise
    current = _numpy_marginal(p.astype(np.float64), (0, 2))
    codes = np.stack(np.unravel_index(np.arange(p.size), SIZES), axis=1)
    cell = codes[:, 0] * SIZES[2] + codes[:, 2]
    want = p * np.exp(0.5 * (target - current)[cell])
    np.testing.assert_allclose(got, want / want.sum(), rtol=1e-5)


@pytest.mark.parametrize("per_cell", [False, True])
def test_one_projection_step_satisfies_the_selected_constraint(per_cell):
    p = _random_distribution(3)
    target = _numpy_marginal(_random_distribution(4), WORKLOAD.cliques[2])
    padding, meas = _one_measurement(2, target)
    support = DenseSupport.of(WORKLOAD)
    lw = entropy_projection(support, padding, jnp.log(p), meas, max_steps=1, tolerance=0.0, per_cell=per_cell)
    after = _numpy_marginal(np.asarray(probabilities(lw), np.float64), (1, 2))
    if per_cell:  # the worst cell is now exact
        worst = np.argmax(np.abs(target - _numpy_marginal(p, (1, 2))))
        assert after[worst] == pytest.approx(target[worst], abs=1e-6)
    else:  # the whole marginal is now exact
        np.testing.assert_allclose(after, target, atol=1e-6)


@pytest.mark.parametrize("per_cell", [False, True])
def test_projection_never_moves_away_from_a_consistent_truth(per_cell):
    """With targets from one distribution P, each exact I-projection decreases KL(P || D)."""
    truth = _random_distribution(5).astype(np.float64)
    padding = MarginalPadding.of(WORKLOAD)
    meas = Measurements.empty(3, padding.max_cells)
    for i, c in enumerate(WORKLOAD.cliques):
        padded = np.zeros(padding.max_cells, np.float32)
        padded[: WORKLOAD.cells[i]] = _numpy_marginal(truth, c)
        meas = meas.record(i, i, -1, jnp.asarray(padded))
    support = DenseSupport.of(WORKLOAD)
    lw = jnp.zeros(truth.size, jnp.float32)
    kl = []
    for _ in range(15):
        d = np.asarray(probabilities(lw), np.float64)
        kl.append(np.sum(truth * np.log(truth / d)))
        lw = entropy_projection(support, padding, lw, meas, max_steps=1, tolerance=0.0, per_cell=per_cell)
    assert all(b <= a + 1e-6 for a, b in itertools.pairwise(kl))
    assert kl[-1] < 0.5 * kl[0]


def test_simplex_projection_matches_reference():
    rng = np.random.default_rng(6)
    for _ in range(20):
        v = rng.normal(0.1, 0.3, 7).astype(np.float32)
        valid = np.array([True] * 5 + [False] * 2)
        got = np.asarray(project_to_simplex(jnp.asarray(v), jnp.asarray(valid)))
        # reference: bisection on the threshold tau with sum(max(v - tau, 0)) = 1
        lo, hi = v[:5].min() - 1, v[:5].max()
        for _ in range(100):
            tau = (lo + hi) / 2
            lo, hi = (tau, hi) if np.maximum(v[:5] - tau, 0).sum() > 1 else (lo, tau)
        np.testing.assert_allclose(got[:5], np.maximum(v[:5] - tau, 0), atol=1e-5)
        assert (got[5:] == 0).all() and got.sum() == pytest.approx(1, abs=1e-5)


def test_pep_recovers_a_known_distribution_with_negligible_noise():
    data = tiny_dataset(n=3000)
    workload = all_kway(data.domain.sizes, 2)
    mech = jaxdp.pep(data, workload, rho=1e8, rounds=len(workload), max_steps=300)
    result = loop.run(mech, jax.random.key(0))
    est = np.asarray(mech.answers(result.state), np.float64)
    assert evaluate.answer_errors(evaluate.fractions(data, workload), est, workload)["max_abs"] < 2e-3


@pytest.mark.parametrize(
    ("factory", "options"),
    [(jaxdp.pep, {}), (jaxdp.mwem, {"replay_passes": 30})],  # MWEM's small steps need replays
)
def test_adaptive_histograms_beat_independent_on_correlated_data(factory, options):
    data = tiny_dataset(n=5000, seed=1)
    workload = all_kway(data.domain.sizes, 2)
    true = evaluate.fractions(data, workload)
    mech = factory(data, workload, epsilon=2.0, delta=1e-6, rounds=len(workload), **options)
    state = loop.run(mech, jax.random.key(1)).state
    est = np.asarray(mech.answers(state), np.float64)
    base = jaxdp.independent(data, epsilon=2.0, delta=1e-6)
    codes = loop.release(base, loop.run(base, jax.random.key(1)).state, jax.random.key(1))
    baseline = evaluate.workload_errors(data, Dataset.from_codes(data.domain, np.asarray(codes)), workload)
    assert evaluate.answer_errors(true, est, workload)["max_abs"] < 0.7 * baseline["max_abs"]


def test_public_support_mechanisms_sample_public_records():
    data = tiny_dataset(n=500)
    public = tiny_dataset(n=40, seed=9)
    workload = all_kway(data.domain.sizes, 2)
    mech = jaxdp.pep_pub(data, workload, public=public, epsilon=1.0, delta=1e-6, rounds=3)
    result = loop.run(mech, jax.random.key(2))
    codes = np.asarray(loop.release(mech, result.state, jax.random.key(2)))
    public_rows = {tuple(r) for r in public.codes.tolist()}
    assert codes.shape == (500, 4) and all(tuple(r) in public_rows for r in codes.tolist())


def test_public_methods_cannot_beat_the_best_mixture_error():
    data = tiny_dataset(n=2000)
    workload = all_kway(data.domain.sizes, 2)
    # a public sample that misses attribute c = 1 entirely: its support cannot fit the data
    biased = Dataset.from_codes(data.domain, data.codes[data.codes[:, 2] == 0][:200])
    floor = evaluate.best_mixture_error(data, biased, workload)
    assert floor > 0.2
    assert evaluate.best_mixture_error(data, data, workload) == pytest.approx(0.0, abs=1e-9)
    mech = jaxdp.pep_pub(data, workload, public=biased, rho=1e4, rounds=len(workload), max_steps=100)
    state = loop.run(mech, jax.random.key(3)).state
    est = np.asarray(mech.answers(state), np.float64)
    error = evaluate.answer_errors(evaluate.fractions(data, workload), est, workload)["max_abs"]
    assert error >= floor - 1e-6


HISTOGRAMS = {
    "mwem": lambda data, w, **kw: jaxdp.mwem(data, w, **kw),
    "pep": lambda data, w, **kw: jaxdp.pep(data, w, max_steps=3, **kw),
    "pmw-pub": lambda data, w, **kw: jaxdp.pmw_pub(data, w, public=tiny_dataset(n=40, seed=9), **kw),
    "pep-pub": lambda data, w, **kw: jaxdp.pep_pub(
        data, w, public=tiny_dataset(n=40, seed=9), max_steps=3, **kw
    ),
}


@pytest.mark.parametrize("marginal_trick", [True, False])
@pytest.mark.parametrize("name", sorted(HISTOGRAMS))
def test_default_noise_measures_integer_counts_exactly(name, marginal_trick, monkeypatch):
    """Every ledger entry is an exact primitive, the measurement's sensitivity and sigma are in
    counts, and what the Gaussian measurement returns is integer counts (the mechanism divides
    them by n afterwards, so its targets are multiples of 1/n before the projection)."""
    data = tiny_dataset(n=300)
    workload = all_kway(data.domain.sizes, 2)
    mech = HISTOGRAMS[name](data, workload, epsilon=1.0, delta=1e-6, rounds=2, marginal_trick=marginal_trick)
    assert mech.noise == "discrete"
    measured = []
    original = noise.measure_counts

    def spy(*args, **kwargs):
        noisy, charge = original(*args, **kwargs)
        measured.append(np.asarray(noisy))
        return noisy, charge

    monkeypatch.setattr(noise, "measure_counts", spy)
    key = jax.random.key(7)
    state = mech.init(key)
    ledger = []
    for t in range(mech.rounds):  # eagerly, so the spy sees concrete values
        state, info = mech.step(state, jax.random.fold_in(key, t))
        ledger += [noise.PRIMITIVES[int(c.primitive)] for c in info.charges]
    assert ledger == ["discrete_exponential", "discrete_gaussian"] * mech.rounds
    assert len(measured) == mech.rounds
    for noisy in measured:
        np.testing.assert_array_equal(noisy, np.round(noisy))
    # in counts: replacing a record moves two cells of a marginal by one each, one query by one
    assert mech.classes[0].measurement.sensitivity == pytest.approx(np.sqrt(2.0) if marginal_trick else 1.0)
    if not marginal_trick:  # the target is the noisy count / n, clipped to [0, 1]
        targets = np.asarray(state.model.measurements.target, np.float64) * len(data)
        np.testing.assert_allclose(targets, np.round(targets), atol=1e-3)


@pytest.mark.parametrize("name", sorted(HISTOGRAMS))
def test_float_noise_uses_the_float_primitives(name):
    data = tiny_dataset(n=300)
    mech = HISTOGRAMS[name](data, all_kway(data.domain.sizes, 2), rho=1.0, rounds=2, noise="float")
    assert [c.primitive for c in mech.plan.charges] == ["exponential", "gaussian"]
    result = loop.run(mech, jax.random.key(8))
    assert [e.primitive for e in result.ledger] == ["exponential", "gaussian"] * 2


def test_unknown_noise_is_refused():
    data = tiny_dataset()
    with pytest.raises(ValueError, match="noise"):
        jaxdp.mwem(data, all_kway(data.domain.sizes, 2), epsilon=1.0, delta=1e-6, rounds=2, noise="exact")


def test_refusals():
    data = tiny_dataset()
    workload = all_kway(data.domain.sizes, 2)
    with pytest.raises(ValueError, match="exceeds the 6 marginals"):
        jaxdp.pep(data, workload, epsilon=1.0, delta=1e-6, rounds=7)
    with pytest.raises(TypeError, match="relation"):  # replace-one only: n public, fractions
        jaxdp.mwem(data, workload, epsilon=1.0, delta=1e-6, rounds=2, relation="add-remove")
    with pytest.raises(ValueError, match="alpha"):
        jaxdp.pep(data, workload, epsilon=1.0, delta=1e-6, rounds=2, alpha=1.0)
    with pytest.raises(ValueError, match="rounds"):
        jaxdp.pep(data, workload, epsilon=1.0, delta=1e-6, rounds=0)
    big = Domain.from_sizes({f"a{i}": 100 for i in range(5)})
    huge = Dataset.from_codes(big, np.zeros((3, 5), int))
    with pytest.raises(DataError, match="10,000,000,000 cells"):
        jaxdp.pep(huge, all_kway(big.sizes, 2), epsilon=1.0, delta=1e-6, rounds=2)
