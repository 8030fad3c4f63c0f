"""AIM-GEM: AIM's shared selection rule and filter with a GEM generator as the model."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import audit, loop
from jaxdp.keys import Stream, stream_key
from jaxdp.mechanisms import host_loop
from jaxdp.queries import all_kway, downward_closure, from_cliques, marginal_counts
from jaxdp.queries import measured as measured_path
from jaxdp.selection import host_rule
from jaxdp.selection import scores as aim_scores

from .conftest import tiny_dataset

SMALL = {"iters": 30, "final_iters": 60, "batch": 64, "hidden": (32, 32), "latent_dim": 8}


def _aim_gem(data=None, epsilon=1.0, **kw):
    data = data or tiny_dataset()
    options = {"max_rounds": 12, **SMALL, **kw}
    return jaxdp.aim_gem(data, all_kway(data.domain.sizes, 2), epsilon=epsilon, delta=1e-6, **options)


def test_quality_score_matches_a_brute_force_reference():
    """q_r = w_r (||M_r(D) - M_r(model)||_1 - sqrt(2/pi) sigma n_r), cell loops in NumPy."""
    data = tiny_dataset()
    candidates = downward_closure(all_kway(data.domain.sizes, 2))
    true = np.asarray(marginal_counts(data.codes, candidates), np.float64)
    rng = np.random.default_rng(0)
    model = true + rng.normal(0.0, 20.0, true.shape)
    weights = rng.uniform(0.5, 3.0, len(candidates))
    sigma = 7.5
    got = np.asarray(aim_scores.quality_scores(true, model, candidates, weights, sigma))
    expected = []
    for i, (start, cells) in enumerate(zip(candidates.offsets, candidates.cells, strict=True)):
        l1 = sum(abs(true[start + c] - model[start + c]) for c in range(cells))
        expected.append(weights[i] * (l1 - math.sqrt(2 / math.pi) * sigma * cells))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)


def test_aim_and_aim_gem_share_one_selection_rule():
    """Both are the one filter driver with the one selection rule (no second copy that could
    drift), and on the same data fix the same candidates, weights, sensitivities and initial
    (sigma, epsilon); only the family differs."""
    data = tiny_dataset()
    wl = all_kway(data.domain.sizes, 2)
    # AIM-GEM keeps the paper's alpha (measured for AIM alone: `default_alpha`)
    a = jaxdp.aim(data, wl, epsilon=1.0, delta=1e-6, max_rounds=12, alpha=0.9)
    b = jaxdp.aim_gem(data, wl, epsilon=1.0, delta=1e-6, max_rounds=12, **SMALL)
    assert type(a) is type(b) is host_loop.Annealed
    assert type(a.selection) is type(b.selection) is jaxdp.selection.AIMSelection
    assert a.selection == b.selection
    assert a.selection.start(a.plan.rho_budget) == b.selection.start(b.plan.rho_budget)
    assert type(a.family).__name__ == "GraphicalModel" and type(b.family).__name__ == "GeneratorModel"


@pytest.mark.parametrize(("relation", "epsilon"), [("add-remove", 0.3), ("replace-one", 3.0)])
def test_filter_spends_the_budget_and_never_more(relation, epsilon):
    """Every prefix of the ledger stays within the budget and the final round spends the rest."""
    mech = _aim_gem(epsilon=epsilon, relation=relation)
    result = loop.run(mech, jax.random.key(11))
    spent = np.cumsum([e.rho for e in result.ledger])
    assert np.all(spent <= mech.plan.rho_budget)
    assert spent[-1] == pytest.approx(mech.plan.rho_budget, rel=1e-6)
    assert result.state.schedule.done and 2 <= result.state.rounds_done <= mech.rounds
    pair = ["discrete_exponential", "discrete_gaussian"]  # exact noise by default
    assert [e.primitive for e in result.ledger[1:]] == pair * (len(result.ledger) // 2)
    audit.check_ledger(list(result.ledger), loop.realised_plan(mech, result.state))


def test_deterministic_under_a_key():
    mech = _aim_gem()
    first, second = loop.run(mech, jax.random.key(2)), loop.run(mech, jax.random.key(2))
    other = loop.run(mech, jax.random.key(3))
    leaves = [jax.tree_util.tree_leaves(r.state) for r in (first, second, other)]
    assert all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(leaves[0], leaves[1], strict=True)
    )
    assert [r.selected for r in first.state.records] == [r.selected for r in second.state.records]
    assert not all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(leaves[0], leaves[2], strict=True)
    )
    a = loop.release(mech, first.state, jax.random.key(9), rows=300)
    b = loop.release(mech, second.state, jax.random.key(9), rows=300)
    c = loop.release(mech, first.state, jax.random.key(10), rows=300)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(a), np.asarray(c))


@pytest.mark.parametrize(("seed", "measured_only"), [(0, False), (1, False), (0, True)])
def test_generator_improves_on_the_measured_marginals(seed, measured_only, monkeypatch):
    """At a generous budget the trained generator's L1 error on every marginal it measured is
    below half the untrained generator's (same latent batch and initial parameters), and its
    released records beat the untrained ones on the whole workload; also where its fit reads
    the measured marginals alone (as past `measured.DENSE_MAX_QUERIES`)."""
    if measured_only:
        monkeypatch.setattr(measured_path, "DENSE_MAX_QUERIES", 0)
    data = tiny_dataset()
    mech = _aim_gem(data, epsilon=20.0, relation="replace-one")
    key = jax.random.key(seed)
    result = loop.run(mech, key)
    measured = sorted({r.selected for r in result.state.records} | set(mech.selection.one_way()))
    true = np.asarray(marginal_counts(data.codes, mech.candidates), np.float64)
    # the parameters `loop.run` started from
    untrained = result.state.model._replace(params=mech.init(stream_key(key, Stream.INIT)).model.params)
    start_state = result.state._replace(model=untrained)
    everything = np.ones(len(mech.candidates), bool)
    parts = mech.parts(result.state)
    before, after = (
        mech._answers(parts, start_state.model, everything),
        mech._answers(parts, result.state.model, everything),
    )
    for i in measured:
        span = mech.selection.span(i)
        assert np.abs(after[span] - true[span]).sum() < 0.5 * np.abs(before[span] - true[span]).sum(), (
            mech.candidates.cliques[i]
        )
    rows = 4000
    trained = np.asarray(loop.release(mech, result.state, jax.random.key(1), rows=rows))
    untrained = np.asarray(loop.release(mech, start_state, jax.random.key(1), rows=rows))
    wl = from_cliques(data.domain.sizes, mech.workload.cliques)
    real = np.asarray(marginal_counts(data.codes, wl)) / len(data)

    def error(codes):
        return np.abs(np.asarray(marginal_counts(codes, wl)) / rows - real).sum()

    assert error(trained) < 0.5 * error(untrained)


def test_the_fit_over_the_measured_marginals_alone_matches_the_dense_fit():
    """`_adam_fit` from one start on the same weighted targets, 20 steps: with `measured_only`
    it reads the marginals with a weighted cell alone; the probabilities land within 1e-4 of the
    dense fit's (each step's loss and gradient agree to float32 rounding:
    tests/queries/test_measured.py); the start moves by more than 1e-2."""
    from jaxdp.families.generator_model import _adam_fit

    mech = _aim_gem()
    family, model = mech.family, mech.init(stream_key(jax.random.key(0), Stream.INIT)).model
    workload = family.workload
    rng = np.random.default_rng(0)
    picked = np.zeros(len(workload), bool)
    picked[rng.choice(len(workload), len(workload) // 2, replace=False)] = True
    cells = np.asarray(jaxdp.queries.expand_marginal_mask(workload, picked))
    targets = jnp.asarray(rng.random(workload.n_queries) * cells / 10, jnp.float32)
    weights = jnp.asarray(rng.uniform(0.5, 2.0, workload.n_queries) * cells / cells.sum(), jnp.float32)
    active = measured_path.active_marginals(jnp.asarray(cells), workload)
    rate = jnp.asarray(1e-2, jnp.float32)
    dense = _adam_fit(family.generator, model.params, model.latent, targets, weights, None, rate, 20, None)
    sparse = _adam_fit(
        family.generator, model.params, model.latent, targets, weights, active, rate, 20, workload
    )

    def probs(params):
        return np.asarray(family.generator.probabilities(params, model.latent))

    assert np.abs(probs(dense) - probs(model.params)).max() > 1e-2
    np.testing.assert_allclose(probs(sparse), probs(dense), atol=1e-4)


def test_add_remove_estimates_the_record_count_privately():
    """Under add/remove the released row count is the noisy 1-way total (n is private): close to
    n at a generous budget, and not n itself."""
    data = tiny_dataset()
    mech = _aim_gem(data, epsilon=20.0)
    state = loop.run(mech, jax.random.key(4)).state
    total = state.model.total
    assert total != len(data) and abs(total - len(data)) < 0.05 * len(data)
    assert mech.default_rows(state) == round(total)


def test_synthesize_and_report():
    data = tiny_dataset()
    result = jaxdp.synthesize(
        data,
        data.domain,
        mechanism="aim-gem",
        epsilon=1.0,
        key=jax.random.key(0),
        workload="all-2way",
        rounds=6,
        relation="add-remove",
        **SMALL,
    )
    assert result.report["rho_spent"] <= result.report["rho_budget"]
    assert result.report["rho_spent"] == pytest.approx(result.report["rho_budget"], rel=1e-6)
    assert len(result.synthetic) == result.mechanism.default_rows(result.state)
    errors = jaxdp.api.release_errors(data, result, all_kway(data.domain.sizes, 2))
    assert 0.0 < errors["relaxed"]["mean_l1"] < 2.0


def test_bad_arguments_are_refused():
    data = tiny_dataset()
    wl = all_kway(data.domain.sizes, 2)
    with pytest.raises(ValueError, match="alpha"):
        jaxdp.aim_gem(data, wl, epsilon=1.0, delta=1e-6, alpha=0.0)
    with pytest.raises(ValueError, match="max_rounds"):
        jaxdp.aim_gem(data, wl, epsilon=1.0, delta=1e-6, max_rounds=3)
    with pytest.raises(ValueError, match="learning_rate"):
        jaxdp.aim_gem(data, wl, epsilon=1.0, delta=1e-6, learning_rate=-1.0)
    with pytest.raises(ValueError, match="iters"):
        jaxdp.aim_gem(data, wl, epsilon=1.0, delta=1e-6, iters=0)


def _selection_counts(mech, model_counts, sigma, rho_select, scale_factor, runs):
    """How often each candidate is picked in `runs` independent draws of the shared rule;
    `scale_factor` != 1 patches the selection scale (a negative control). The rule runs once
    with its call to the primitive recorded; the recorded call is replayed for `runs` keys under
    one jit (an eager exact sampler compiles its program on every call)."""
    mask = np.ones(len(mech.candidates), bool)
    name = "grid_exponential" if mech.noise == "discrete" else "exponential"
    primitive = getattr(jaxdp.noise, name)
    calls = []

    def recording(key, scores, **kwargs):
        calls.append((scores, kwargs))
        return primitive(key, scores, **kwargs)

    original = host_rule.gumbel_scale
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(host_rule, "gumbel_scale", lambda d, r: scale_factor * original(d, r))
        patch.setattr(jaxdp.noise, name, recording)
        mech.selection(jax.random.key(0), mech.counts, model_counts, mask, sigma, rho_select)
    ((scores, kwargs),) = calls
    keys = jax.random.split(jax.random.key(123), runs)
    picks = jax.jit(jax.vmap(lambda key: primitive(key, scores, **kwargs)[0]))(keys)
    delta_t = mech.selection.l1_sensitivity * max(mech.selection.weights)
    return np.bincount(np.asarray(picks), minlength=len(mech.candidates)), original(delta_t, rho_select)


def _selection_law(scores: np.ndarray, scale: float, sensitivity: float, noise: str) -> np.ndarray:
    """The exponential mechanism's law: exp(q_r / scale) / Z ("float", Gumbel-max, `scores` the
    float q_r), or, for the exact sampler, exp(rate steps_r) / Z over the exact integer scores in
    grid steps of sensitivity / GRID_STEPS (`scores` from `grid_quality_scores`, checked against a
    Python-integer reference in tests/privacy/test_grid_scores.py), with rate = epsilon /
    (2 GRID_STEPS) per step (`noise.grid_exponential`; its rounding of the rate down by a
    relative 2^-12 is far below what 20,000 draws can see)."""
    per_step = sensitivity / (scale * jaxdp.noise.GRID_STEPS)
    logits = scores / scale if noise == "float" else scores * per_step
    probs = np.exp(logits - logits.max())
    return probs / probs.sum()


@pytest.mark.parametrize("noise", ["discrete", "float"])
def test_selection_follows_the_exponential_mechanism(noise):
    """The shared selection draws r with probability exp(q_r / scale) / Z (q_r from the
    brute-force-checked `quality_scores`, scale = 2 Delta_t / epsilon_t; on the exact integer grid
    scores for the exact sampler): chi-square over 20,000 draws, false-failure rate 1e-3. Negative
    control: a halved selection scale is rejected."""
    from scipy import stats

    data = tiny_dataset()
    mech = _aim_gem(data, noise=noise)
    true = np.asarray(marginal_counts(data.codes, mech.candidates), np.float64)
    model = np.full_like(true, len(data)) / np.repeat(mech.candidates.cells, mech.candidates.cells)
    sigma = 5.0
    rule = mech.selection
    scores = np.asarray(aim_scores.quality_scores(true, model, mech.candidates, rule.weights, sigma))

    mask = np.ones(len(mech.candidates), bool)
    law_scores = (
        aim_scores.grid_quality_scores(
            true, model, mech.candidates, np.asarray(rule.weights), mask, sigma, rule.l1_sensitivity
        ).astype(np.float64)
        if noise == "discrete"
        else scores
    )

    def pvalue(picks, scale):
        probs = _selection_law(law_scores, scale, rule.l1_sensitivity * max(rule.weights), noise)
        keep = probs * picks.sum() >= 5  # pool the rare candidates into one cell
        observed = np.append(picks[keep], picks[~keep].sum())
        expected = np.append(probs[keep], probs[~keep].sum()) * picks.sum()
        observed, expected = observed[expected > 0], expected[expected > 0]
        return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue

    # epsilon_t with a Gumbel scale of a third of the scores' range: several candidates compete
    epsilon = 2.0 * rule.l1_sensitivity * max(rule.weights) / (np.ptp(scores) / 3.0)
    rho_select = epsilon**2 / 8.0
    picks, scale = _selection_counts(mech, model, sigma, rho_select, 1.0, 20_000)
    assert (picks >= 400).sum() >= 3, "the scale leaves the test no power: one candidate always wins"
    assert pvalue(picks, scale) > 1e-3
    broken, _ = _selection_counts(mech, model, sigma, rho_select, 0.5, 20_000)
    assert pvalue(broken, scale) < 1e-3


def test_exact_noise_by_default_measures_integer_counts(monkeypatch):
    """Default noise: the ledger holds only exact primitives and every measurement released is
    noisy integer counts; noise="float" charges the float primitives and leaves the integers."""
    released = []
    measure = host_loop.Annealed._measure

    def recording(self, *args, **kwargs):
        noisy, charge = measure(self, *args, **kwargs)
        released.append(noisy)
        return noisy, charge

    monkeypatch.setattr(host_loop.Annealed, "_measure", recording)
    off_integers = {}
    for noise, primitives in (
        ("discrete", {"discrete_exponential", "discrete_gaussian"}),
        ("float", {"exponential", "gaussian"}),
    ):
        released.clear()
        mech = _aim_gem(noise=noise, max_rounds=8)
        assert mech.noise == noise
        result = loop.run(mech, jax.random.key(5))
        assert {e.primitive for e in result.ledger} == primitives
        noisy = np.concatenate(released)
        off_integers[noise] = np.abs(noisy - np.round(noisy)).max()
    assert off_integers["discrete"] == 0.0
    assert off_integers["float"] > 0.1


def test_bad_noise_is_refused():
    data = tiny_dataset()
    with pytest.raises(ValueError, match="noise"):
        jaxdp.aim_gem(data, all_kway(data.domain.sizes, 2), epsilon=1.0, delta=1e-6, noise="exact")
