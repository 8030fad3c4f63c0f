"""AIM: filter accounting, annealing, exact model marginals, sampling and error bounds."""

import math
import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import audit, loop
from jaxdp.families import pgm, pgm_marginals
from jaxdp.queries import all_kway, marginal_counts
from jaxdp.selection.records import exponential_selected
from tests.conftest import programs_built

from .conftest import tiny_dataset

SMALL = {"max_rounds": 4, "iters": 20, "final_iters": 20}


def _aim(data=None, epsilon=1.0, **kw):
    data = data or tiny_dataset()
    return jaxdp.aim(data, all_kway(data.domain.sizes, 2), epsilon=epsilon, delta=1e-6, **{**SMALL, **kw})


def test_core_import_does_not_need_mbi():
    code = "import sys, jaxdp; jaxdp.aim; print('mbi' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_annealing_rule_on_a_scripted_sequence():
    """Algorithm 4 on a scripted 'did the model change' sequence: sigma halves and epsilon
    doubles exactly when it did not; the final round spends exactly what is left."""
    mech = _aim(max_rounds=40)
    rule, budget = mech.selection, mech.plan.rho_budget
    schedule = mech.init(jax.random.key(0)).schedule
    sigma0, eps0 = schedule.sigma, schedule.epsilon
    # round 0 spent a tenth of the budget: one Gaussian charge of that cost
    first = rule.l2_sensitivity / np.sqrt(2 * 0.1 * budget)
    schedule, done = rule.after_one_way(schedule, rule.l2_sensitivity, first), 1
    assert schedule.rho_spent == pytest.approx(0.1 * budget)
    script = [True, False, True, False, False, True, True, False, True, True, True, True]
    sigmas, expected = [], sigma0
    for changed in script:
        if schedule.epsilon is None:
            break
        scale = 2 * max(rule.weights) * rule.l1_sensitivity / schedule.epsilon
        before = schedule.rho_spent
        selected = exponential_selected(
            0, None, rule.select_primitive, max(rule.weights) * rule.l1_sensitivity, scale
        )
        schedule = rule.after_round(schedule, selected, schedule.sigma)
        assert schedule.rho_spent - before == pytest.approx(rule.round_cost(schedule.sigma, schedule.epsilon))
        done += 1
        schedule = rule.anneal_or_finish(
            schedule, changed=changed, rho_budget=budget, rounds_done=done, rounds=mech.rounds
        )
        expected = expected if changed else expected / 2
        sigmas.append(schedule.sigma)
        assert schedule.sigma == pytest.approx(expected)
        if schedule.epsilon is not None:
            assert schedule.epsilon == pytest.approx(eps0 * sigma0 / expected)
    assert schedule.epsilon is None, "the scripted sequence must reach the filter's final round"
    remaining = budget - schedule.rho_spent
    assert remaining > 0
    sigma, epsilon = rule.final_parameters(remaining)
    assert rule.round_cost(sigma, epsilon) == pytest.approx(remaining, rel=1e-12)
    assert len(sigmas) < len(script)


@pytest.mark.parametrize(("relation", "epsilon"), [("add-remove", 0.3), ("replace-one", 3.0)])
def test_filter_spends_the_budget_and_never_more(relation, epsilon):
    mech = _aim(epsilon=epsilon, relation=relation)
    result = loop.run(mech, jax.random.key(11))
    spent = audit.rho_spent(result.ledger)
    assert spent <= mech.plan.rho_budget
    assert spent == pytest.approx(mech.plan.rho_budget, rel=1e-6)  # the final round used the rest
    assert result.state.schedule.done and result.state.rounds_done <= mech.rounds
    # the last round is a full select + measure round, and every round after init has both
    assert result.ledger[0].primitive == "discrete_gaussian"
    pair = ["discrete_exponential", "discrete_gaussian"]
    assert [e.primitive for e in result.ledger[1:]] == pair * (len(result.ledger) // 2)


def test_round_cap_forces_the_final_round():
    # T = d = 4: the 1-way marginals take 0.9 rho, too little is left for two rounds, so the
    # first adaptive round is the filter's last and spends the rest.
    mech = _aim(max_rounds=4)
    result = loop.run(mech, jax.random.key(3))
    assert result.state.rounds_done == 2
    assert audit.rho_spent(result.ledger) == pytest.approx(mech.plan.rho_budget, rel=1e-6)


def test_selection_prefers_the_badly_modelled_marginal():
    """At a large budget, the first adaptive pick is a 2-way marginal with real dependence
    (a-b or c-d in the tiny data), not an independent pair; chance alone picks one of the 2
    dependent pairs among 10 candidates with probability 0.2 per run (0.04 for both runs)."""
    mech = _aim(epsilon=20.0)
    picks = []
    for seed in range(2):
        state = loop.run(mech, jax.random.key(seed)).state
        picks.append(mech.candidates.cliques[state.records[0].selected])
    assert all(p in {(0, 1), (2, 3)} for p in picks), picks


def test_model_marginals_are_exact():
    """Marginals from the junction-tree beliefs equal a brute-force sum of the full joint."""
    sizes = (3, 4, 2, 5)
    rng = np.random.default_rng(0)
    measurements = [pgm.Measurement((i,), rng.random(s) * 100, 2.0) for i, s in enumerate(sizes)]
    measurements += [
        pgm.Measurement(c, rng.random(math.prod(sizes[a] for a in c)) * 30, 2.0)
        for c in ((0, 1), (1, 2), (2, 3))
    ]
    model = pgm.estimate(sizes, measurements, total=None, iters=50)
    marginals = pgm_marginals.ModelMarginals(model)
    log_joint = np.zeros(sizes)
    for clique, potential in zip(model.cliques, model.potentials, strict=True):
        log_joint = log_joint + np.asarray(potential, np.float64).reshape(
            [sizes[a] if a in clique else 1 for a in range(4)]
        )
    joint = np.exp(log_joint - log_joint.max())
    joint /= joint.sum()
    for clique in [(0,), (1, 2), (0, 3), (0, 1, 3), (0, 2, 3), (0, 1, 2, 3)]:
        drop = tuple(i for i in range(4) if i not in clique)
        np.testing.assert_allclose(marginals.marginal(clique), joint.sum(axis=drop).reshape(-1), atol=1e-6)


def test_fit_stops_early_once_converged(monkeypatch):
    """With `tol`, refitting a fitted model to its own measurements stops after 3 blocks of 50
    iterations (the first sets the reference loss, then `patience` = 2 stall); without it every
    block of `iters` runs."""
    from jaxdp.families import _junction

    sizes = (3, 4, 2)
    rng = np.random.default_rng(1)
    measurements = [pgm.Measurement((i,), rng.random(s) * 100, 2.0) for i, s in enumerate(sizes)]
    measurements.append(pgm.Measurement((0, 1), rng.random(12) * 30, 2.0))
    fitted = pgm.estimate(sizes, measurements, total=None, iters=3000)
    blocks = []
    descend = _junction.fit

    def counted(*args):
        theta, loss, ran = descend(*args)
        blocks.append(int(ran))
        return theta, loss, ran

    monkeypatch.setattr(_junction, "fit", counted)
    pgm.estimate(sizes, measurements, total=None, iters=1000, warm_start=fitted, tol=1e-2)
    pgm.estimate(sizes, measurements, total=None, iters=1000, warm_start=fitted, tol=None)
    assert blocks == [3, 20]


def test_discrepancy_stop_ends_the_fit_at_the_asked_loss():
    """Noisy measurements that the model can fit closer than the truth (every clique measured,
    noise sigma 20 on counts of ~40): converged, the fit's loss is below the noise's own
    (`residual_ratio` < 1). Stopped by `discrepancy` from the uniform start, it ends at the first
    iterate at or below that fraction of the noise's loss: at most the fraction, above the
    converged ratio, and in fewer blocks. `residual_ratio` is checked against its definition
    over the model's whole joint distribution."""
    from jaxdp.families import _junction

    sizes = (3, 4, 2)
    rng = np.random.default_rng(3)
    truth = rng.dirichlet(np.ones(24)).reshape(sizes) * 1000
    sigma = 20.0
    measurements = [
        pgm.Measurement(c, truth.sum(axis=tuple(a for a in range(3) if a not in c)).reshape(-1), sigma)
        for c in [(0, 1), (1, 2), (0, 2)]
    ]
    measurements = [m._replace(noisy=m.noisy + rng.normal(0, sigma, m.noisy.shape)) for m in measurements]
    converged = pgm.estimate(sizes, measurements, total=None, iters=3000)
    floor = pgm_marginals.residual_ratio(pgm_marginals.ModelMarginals(converged), measurements)
    assert floor < 1.0
    asked = (floor + 1.0) / 2
    blocks = []
    fit = _junction.fit

    def counted(*args):
        out = fit(*args)
        blocks.append(int(out[2]))
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_junction, "fit", counted)
        stopped = pgm.estimate(sizes, measurements, total=None, iters=3000, discrepancy=asked)
    marginals = pgm_marginals.ModelMarginals(stopped)
    ratio = pgm_marginals.residual_ratio(marginals, measurements)
    assert floor < ratio <= asked * (1 + 1e-4)
    assert blocks[0] < 3000 // _junction.BLOCK
    # the definition, from the joint distribution
    potentials = sum(
        np.expand_dims(p, tuple(a for a in range(3) if a not in c))
        for c, p in zip(stopped.cliques, stopped.potentials, strict=True)
    )
    joint = np.exp(potentials - potentials.max())
    joint = joint / joint.sum() * stopped.total
    loss = sum(
        0.5
        * np.sum((joint.sum(axis=tuple(a for a in range(3) if a not in m.clique)).reshape(-1) - m.noisy) ** 2)
        / sigma**2
        for m in measurements
    )
    np.testing.assert_allclose(ratio, loss / (0.5 * sum(m.noisy.size for m in measurements)), rtol=1e-6)


def test_the_refit_starts_from_the_one_way_measurements_alone():
    """`pgm.one_way_model` fits the 1-way measurements only: its attributes are independent
    (each 2-way marginal the product of its 1-ways, to float32 rounding), its 1-ways follow
    their measurements, and without any 1-way measurement there is no such start (None)."""
    sizes = (3, 4)
    rng = np.random.default_rng(2)
    ones = [pgm.Measurement((0,), np.array([500.0, 300.0, 200.0]), 1.0)]
    ones.append(pgm.Measurement((1,), np.array([100.0, 200.0, 300.0, 400.0]), 1.0))
    pair = pgm.Measurement((0, 1), rng.random(12) * 100, 1.0)
    model = pgm.one_way_model(sizes, [*ones, pair], total=1000.0, tol=None)
    marginals = pgm_marginals.ModelMarginals(model)
    first, second = marginals.marginal((0,)), marginals.marginal((1,))
    np.testing.assert_allclose(marginals.marginal((0, 1)), np.outer(first, second).reshape(-1), atol=1e-6)
    np.testing.assert_allclose(first * 1000, ones[0].noisy, atol=0.5)
    np.testing.assert_allclose(second * 1000, ones[1].noisy, atol=0.5)
    assert pgm.one_way_model(sizes, [pair], total=1000.0, tol=None) is None


def test_refit_is_post_processing_and_only_where_the_fit_follows_the_noise():
    """AIM's last-fit refit changes the model only: same ledger and same measurements with it
    and without. Where the converged fit's loss is above `below` of the noise's (a tiny `below`
    here: a negative control) the model is the warm-started fit's exactly; where it is below
    (`below` 1: this table's fits follow their noise closer than that), the refit ends at the
    converged loss plus `margin`, within float32's rounding of the loss."""
    from jaxdp.families import Refit

    runs, ledgers = {}, []
    for name, refit in {"off": None, "tiny": Refit(below=1e-6), "on": Refit(below=1.0, margin=0.2)}.items():
        mech = _aim(refit=refit, final_iters=1000)
        result = loop.run(mech, jax.random.key(5))
        runs[name] = (mech, result.state)
        ledgers.append(audit.ledger_from_info(result.info))
    assert repr(ledgers[0]) == repr(ledgers[1]) == repr(ledgers[2]) and ledgers[0]
    noisy = [[m.noisy.tolist() for m in s.model.measurements] for _, s in runs.values()]
    assert noisy[0] == noisy[1] == noisy[2]
    answers = {k: np.asarray(m.answers(s)) for k, (m, s) in runs.items()}
    np.testing.assert_array_equal(answers["tiny"], answers["off"])

    def ratio(name):
        state = runs[name][1]
        return pgm_marginals.residual_ratio(
            pgm_marginals.ModelMarginals(state.model.fitted), state.model.measurements
        )

    converged = ratio("off")
    assert converged < 1.0
    assert converged + 0.1 < ratio("on") <= (converged + 0.2) * (1 + 1e-4)
    with pytest.raises(ValueError, match="refit margin"):
        _aim(refit=Refit(margin=0.0))


def test_dense_and_flat_fits_reach_the_same_model(monkeypatch):
    """AIM with every fit by its tree's own dense program (`_dense_junction`) selects the same
    cliques as with the one program for every tree and answers its workload alike: both run
    mbi's mirror descent, their float32 sums in different orders (answers within 1e-4; measured
    2e-6; over long fits the rounding can tip an Armijo test, so the paths drift apart slowly).
    At this table's size the choice rule itself keeps the flat program: a compile per tree would
    cost more than its fits."""
    from jaxdp.families import _dense_junction

    mech = _aim(epsilon=10.0, max_rounds=6, iters=200, final_iters=400)
    choices = []
    rule = _dense_junction.worth_compiling
    monkeypatch.setattr(_dense_junction, "worth_compiling", lambda *a: choices.append(rule(*a)) or False)
    flat = loop.run(mech, jax.random.key(3)).state
    assert choices and not any(choices)
    monkeypatch.setattr(_dense_junction, "worth_compiling", lambda *_: True)
    dense = loop.run(mech, jax.random.key(3)).state
    assert [m.clique for m in dense.measurements] == [m.clique for m in flat.measurements]
    np.testing.assert_allclose(mech.answers(dense), mech.answers(flat), atol=1e-4)


def test_a_run_compiles_nothing_per_round():
    """After one run has compiled AIM's programs, a run with another key (other selections, so
    other junction trees) compiles nothing: the fit's shapes do not follow the measured cliques
    and the measurements share one padded length. The old per-clique-set fit compiled a program
    for every new set of measured cliques."""
    mech = _aim(epsilon=30.0, max_rounds=10)
    loop.run(mech, jax.random.key(0))
    with programs_built() as built:
        state = loop.run(mech, jax.random.key(1)).state
    clique_sets = {
        frozenset(m.clique for m in state.measurements[: i + 1]) for i in range(len(state.measurements))
    }
    assert len(clique_sets) >= 5  # the check has power: several distinct models were fitted
    assert built == []


def test_synthetic_records_agree_with_the_model_on_unmeasured_marginals():
    mech = _aim(epsilon=3.0)
    state = loop.run(mech, jax.random.key(5)).state
    measured = {m.clique for m in state.measurements}
    rows = 100_000
    codes = loop.release(mech, state, jax.random.key(5), rows=rows)
    model = pgm_marginals.ModelMarginals(state.model.fitted)
    unmeasured = [c for c in mech.workload.cliques if c not in measured] + [(0, 1, 2, 3)]
    for clique in unmeasured:
        wl = jaxdp.queries.from_cliques(mech.workload.sizes, [clique])
        empirical = np.asarray(marginal_counts(codes, wl)) / rows
        expected = model.marginal(clique)
        # i.i.d. standard error bounds the stratified sampler's; 5 SE per cell, Bonferroni over
        # <= 200 cells: false-failure rate < 2e-4.
        tolerance = 5 * np.sqrt(expected * (1 - expected) / rows) + 1e-4
        assert np.all(np.abs(empirical - expected) <= tolerance), clique


def test_release_is_deterministic_under_a_key():
    mech = _aim()
    state = loop.run(mech, jax.random.key(2)).state
    a = loop.release(mech, state, jax.random.key(9), rows=500)
    b = loop.release(mech, state, jax.random.key(9), rows=500)
    c = loop.release(mech, state, jax.random.key(10), rows=500)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(a), np.asarray(c))


def _bounds_and_errors(seeds, confidence):
    """(bound, true L1 error of the released records) for every (run, workload marginal)."""
    data = tiny_dataset()
    pairs = []
    for seed in seeds:
        mech = _aim(data, epsilon=1.0)
        result = loop.run(mech, jax.random.key(100 + seed))
        codes = np.asarray(loop.release(mech, result.state, jax.random.key(seed)))
        bounds = mech.error_bounds(result.state, confidence, synthetic=codes)
        true = np.asarray(marginal_counts(data.codes, mech.workload), np.float64)
        synth = np.asarray(marginal_counts(codes, mech.workload), np.float64)
        error = np.add.reduceat(np.abs(true - synth), np.asarray(mech.workload.offsets))
        pairs.append(np.stack([bounds.bound, error]))
    return np.concatenate(pairs, axis=1)


def test_error_bounds_cover_the_true_error():
    """Coverage over 2 runs x 6 marginals at confidence 0.9 (40 runs in the slow test). The
    bounds are conservative (the paper reports ratios 4-8 to the true error), so the observed
    coverage is near 1; a coverage
    below 0.9 would mean a broken bound. Negative control: a tenth of the bound misses often."""
    bound, error = _bounds_and_errors(range(2), 0.9)
    assert np.mean(bound >= error) >= 0.9
    assert np.mean(0.1 * bound >= error) < 0.9


@pytest.mark.slow
def test_error_bounds_cover_the_true_error_many_seeds():
    bound, error = _bounds_and_errors(range(40), 0.95)
    assert np.mean(bound >= error) >= 0.95


def test_rounds_count_every_round_and_a_short_run_is_refused_by_the_name_passed():
    """T counts round 0 (the 1-way measurements) with the adaptive rounds: the mechanism runs at
    most the rounds asked for, through the builder and through `jaxdp.aim` alike."""
    data = tiny_dataset()
    wl = all_kway(data.domain.sizes, 2)
    budget = {"epsilon": 1.0, "delta": 1e-6}
    built = jaxdp.adaptive(
        data,
        wl,
        select=jaxdp.selection.AIMSelection(),
        family=jaxdp.families.GraphicalModel(),
        rounds=8,
        relation="add-remove",
        **budget,
    )
    assert built.rounds == 8
    assert jaxdp.aim(data, wl, max_rounds=8, **budget).rounds == 8
    with pytest.raises(ValueError, match=r"rounds \(AIM's T.*at least 4 .* over 4 attributes, got 3"):
        jaxdp.adaptive(
            data,
            wl,
            select=jaxdp.selection.AIMSelection(),
            family=jaxdp.families.GraphicalModel(),
            rounds=3,
            relation="add-remove",
            **budget,
        )


def test_default_alpha_rule_follows_the_workload_against_the_rounds():
    """alpha=None binds 0.95 where the run's T rounds could measure every workload marginal, the
    paper's 0.9 where the workload has more marginals than rounds; an explicit alpha is kept, and
    the rule's share is what the schedule spends: sigma_0 = sqrt(T / (2 alpha rho))."""
    data = tiny_dataset()
    wl = all_kway(data.domain.sizes, 2)  # 6 marginals over 4 attributes
    few = jaxdp.aim(data, wl, rho=1.0, max_rounds=6)
    many = jaxdp.aim(data, wl, rho=1.0, max_rounds=5)
    kept = jaxdp.aim(data, wl, rho=1.0, max_rounds=5, alpha=0.95)
    assert (few.selection.alpha, many.selection.alpha, kept.selection.alpha) == (0.95, 0.9, 0.95)
    sigma0 = few.selection.start(few.plan.rho_budget).sigma
    assert sigma0 == pytest.approx(math.sqrt(6 / (2 * 0.95 * few.plan.rho_budget)), rel=1e-12)
    assert jaxdp.selection.default_alpha(560, 256) == 0.9 and jaxdp.selection.default_alpha(20, 96) == 0.95


def test_bad_arguments_are_refused():
    data = tiny_dataset()
    wl = all_kway(data.domain.sizes, 2)
    with pytest.raises(ValueError, match="alpha"):
        jaxdp.aim(data, wl, epsilon=1.0, delta=1e-6, alpha=1.0)
    with pytest.raises(ValueError, match="max_rounds"):
        jaxdp.aim(data, wl, epsilon=1.0, delta=1e-6, max_rounds=3)
    with pytest.raises(ValueError, match="max_model_size"):
        jaxdp.aim(data, wl, epsilon=1.0, delta=1e-6, max_model_size=0.0)
    with pytest.raises(ValueError, match="tol"):
        jaxdp.aim(data, wl, epsilon=1.0, delta=1e-6, tol=0.0)
    mech = _aim()
    with pytest.raises(ValueError, match="confidence"):
        mech.error_bounds(loop.run(mech, jax.random.key(0)).state, confidence=1.0)


def test_cli_writes_records_and_per_marginal_error_bounds(tmp_path):
    import json

    from jaxdp import cli

    data = tiny_dataset()
    np.savetxt(tmp_path / "d.csv", data.codes, fmt="%d", delimiter=",", header="a,b,c,d", comments="")
    (tmp_path / "dom.json").write_text(json.dumps({"a": 3, "b": 4, "c": 2, "d": 5}))
    argv = [
        "synth",
        "--mechanism",
        "aim",
        "--data",
        str(tmp_path / "d.csv"),
        "--domain",
        str(tmp_path / "dom.json"),
    ]
    argv += [
        "--workload",
        "all-2way",
        "--epsilon",
        "1",
        "--relation",
        "add-remove",
        "--seed",
        "0",
        "--rounds",
        "4",
    ]
    argv += ["--out", str(tmp_path / "s.csv"), "--report", str(tmp_path / "r.json"), "--confidence", "0.9"]
    assert cli.main(argv) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["rho_spent"] <= report["rho_budget"]
    bounds = report["error_bounds"]
    assert bounds["confidence"] == 0.9 and len(bounds["marginals"]) == 6
    assert all(m["l1_bound"] > 0 for m in bounds["marginals"])


def test_padded_measurement_adds_iid_gaussian_noise_to_the_kept_answers():
    """`_measure` pads the gathered answers to a power of two: the kept coordinates must still be
    the true counts plus iid N(0, sigma^2) under noise="float". KS test of the pooled
    standardised residuals (false-failure rate 1e-4); negative control: the same residuals
    scaled by 1.3 are rejected."""
    from scipy import stats

    mech = _aim(noise="float")
    answers = np.asarray(marginal_counts(tiny_dataset().codes, mech.candidates), np.float64)
    index = np.concatenate([np.arange(3, 40), np.arange(50, 61)])  # 48 answers, padded to 64
    residuals = []
    for seed in range(40):
        noisy, charge = mech._measure(
            mech.parts(mech.init(jax.random.key(0))), jax.random.key(seed), index, sigma=2.0, sensitivity=1.0
        )
        assert noisy.shape == index.shape and float(charge.scale) == 2.0
        residuals.append((noisy - answers[index]) / 2.0)
    residuals = np.concatenate(residuals)
    assert stats.kstest(residuals, "norm").pvalue > 1e-4
    assert stats.kstest(1.3 * residuals, "norm").pvalue < 1e-4


def _discrete_gaussian_pvalue(residuals: np.ndarray, sigma: float) -> float:
    """Chi-square p-value of integer residuals against N_Z(0, sigma^2) (tails pooled)."""
    from scipy import stats

    reach = 4 * math.ceil(sigma)
    support = np.arange(-reach, reach + 1)
    pmf = np.exp(-(support**2) / (2 * sigma**2))
    pmf /= pmf.sum()
    observed = np.array([(residuals == y).sum() for y in support], np.float64)
    tails = len(residuals) - observed.sum()
    observed, expected = np.append(observed, tails), np.append(pmf, 1e-12) * len(residuals)
    keep = expected >= 5
    observed = np.append(observed[keep], observed[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


def test_padded_measurement_adds_iid_discrete_gaussian_noise_to_the_kept_answers():
    """Default noise: the kept coordinates are the integer counts plus iid discrete Gaussian
    N_Z(0, sigma^2) (the integer padding does not change the law). Chi-square over 800
    residuals (10 draws: each eager call compiles the exact sampler), false-failure rate 1e-4;
    negative control: the law at 1.3 sigma is rejected (simulated power > 0.99)."""
    mech = _aim()
    assert mech.noise == "discrete"
    answers = np.asarray(marginal_counts(tiny_dataset().codes, mech.candidates), np.float64)
    index = np.concatenate([np.arange(3, 40), np.arange(42, 85)])  # 80 answers, padded to 128
    residuals = []
    for seed in range(10):
        noisy, charge = mech._measure(
            mech.parts(mech.init(jax.random.key(0))), jax.random.key(seed), index, sigma=2.0, sensitivity=1.0
        )
        assert noisy.shape == index.shape and float(charge.scale) == 2.0
        residuals.append(noisy - answers[index])
    residuals = np.concatenate(residuals)
    np.testing.assert_array_equal(residuals, np.round(residuals))
    assert _discrete_gaussian_pvalue(residuals, 2.0) > 1e-4
    assert _discrete_gaussian_pvalue(residuals, 2.6) < 1e-4


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_exact_noise_by_default_measures_integer_counts(relation, monkeypatch):
    """Default noise: every ledger entry is an exact primitive and every measurement released is
    noisy integer counts (AIM measures counts under both relations; n is public under
    replace-one, so counts and fractions carry the same information). noise="float" charges the
    float primitives and its measurements leave the integers (the check has power)."""
    from jaxdp.mechanisms import host_loop

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
        mech = _aim(relation=relation, noise=noise)
        assert mech.noise == noise
        result = loop.run(mech, jax.random.key(4))
        assert {e.primitive for e in result.ledger} == primitives
        assert {c.primitive for c in loop.realised_plan(mech, result.state).charges} == primitives
        noisy = np.concatenate(released)
        assert len(released) == sum(e.primitive.endswith("gaussian") for e in result.ledger)
        off_integers[noise] = np.abs(noisy - np.round(noisy)).max()
    assert off_integers["discrete"] == 0.0
    assert off_integers["float"] > 0.1


def test_a_one_device_records_mesh_releases_what_no_mesh_releases():
    """The sharded counting path on a one-device mesh (8 devices: tests/multidevice/checks.py)."""
    from jaxdp.queries import records_mesh

    data = tiny_dataset(n=301)
    key = jax.random.key(6)
    runs = []
    for mesh in (None, records_mesh(jax.devices()[:1])):
        mech = _aim(data, mesh=mesh)
        state = loop.run(mech, key).state
        runs.append(np.asarray(loop.release(mech, state, key)))
    np.testing.assert_array_equal(*runs)


def test_measurements_share_one_padded_length():
    """Every measurement up to the run's largest (capped) shares one public length, so the exact
    sampler compiles once; longer ones take powers of four above it."""
    from jaxdp.measurement import SHARED_MEASUREMENT_LENGTH, measurement_length

    assert {measurement_length(n, 20_400) for n in (1, 127, 4096, 20_400)} == {32_768}
    assert {measurement_length(n, 32) for n in (1, 8, 32)} == {32}
    cap = SHARED_MEASUREMENT_LENGTH
    assert measurement_length(cap, 10**6) == cap
    assert measurement_length(cap + 1, 10**6) == 4 * cap


def test_a_host_measurement_pads_with_zeros_whatever_the_data(monkeypatch):
    """The measurement's vector is padded to its public length with zeros: the padding is a
    constant, so the padded vector's sensitivity is the answers' (`measure_on_host`). Checked on
    two count vectors that differ everywhere (padding copied from the data would differ)."""
    from jaxdp import measurement
    from jaxdp.types import Sensitive

    seen = []

    def recording(key, counts, **kwargs):
        seen.append(np.array(counts._value))
        return np.zeros(len(seen[-1]), np.float32), None

    monkeypatch.setattr(measurement.noise_module, "measure_counts", recording)
    index = np.array([4, 0, 7])
    for counts in (np.arange(10, dtype=np.int32) + 3, np.arange(10, dtype=np.int32) * 5 + 11):
        measurement.measure_on_host(
            jax.random.key(0),
            Sensitive(counts),
            index,
            sigma=1.0,
            sensitivity=1.0,
            noise="discrete",
            largest=20,
        )
        assert len(seen[-1]) == measurement.measurement_length(3, 20) > 3
        np.testing.assert_array_equal(seen[-1][:3], counts[index])
        assert not seen[-1][3:].any()


def test_bad_noise_is_refused():
    data = tiny_dataset()
    with pytest.raises(ValueError, match="noise"):
        jaxdp.aim(data, all_kway(data.domain.sizes, 2), epsilon=1.0, delta=1e-6, noise="exact")


def test_released_records_round_the_model_on_its_measured_cliques():
    """Each measured clique's counts over the released records are the model's marginal times
    the rows, rounded: within 2 records per cell (at most 1.15 over seeds 0-9: `pgm_sampling.sample`
    rounds each parent group's counts and balances the workload's marginals across the groups,
    and `families.polish` moves values toward the model's marginals; 2.35 before the polish),
    where records drawn independently miss by about sqrt(rows p) (negative control: one
    multinomial draw per clique, tens of records off). The same key replays the same records,
    as many as asked."""
    from jaxdp.families.graphical import _marginals_of
    from jaxdp.queries import MarginalWorkload

    data = tiny_dataset(n=3000)
    rows = 3000
    control = np.random.default_rng(0)
    for seed in range(4):
        mech = _aim(data, compress=None, max_rounds=10, iters=50, final_iters=50, relation="replace-one")
        result = loop.run(mech, jax.random.key(seed))
        codes = np.asarray(loop.release(mech, result.state, jax.random.key(seed), rows=rows))
        assert codes.shape == (rows, 4)
        np.testing.assert_array_equal(
            codes, np.asarray(loop.release(mech, result.state, jax.random.key(seed), rows=rows))
        )
        model = _marginals_of(result.state.model.fitted)
        measured = MarginalWorkload(
            data.domain.sizes, tuple(sorted({m.clique for m in result.state.measurements}))
        )
        counts = np.asarray(marginal_counts(codes, measured), np.float64)
        for i, clique in enumerate(measured.cliques):
            cells = slice(measured.offsets[i], measured.offsets[i] + measured.cells[i])
            expected = rows * model.marginal(clique)
            assert np.abs(counts[cells] - expected).max() <= 2.0, (seed, clique)
            if len(clique) == 2:
                drawn = control.multinomial(rows, expected / expected.sum())
                assert np.abs(drawn - expected).max() > 3.0


def test_the_polish_brings_the_records_closer_to_the_model(monkeypatch):
    """The release's workload counts against the model's (its answers times the rows), summed L1:
    the polish lowers it on every seed (0.77-0.88 of the unpolished release's, seen over seeds
    0-3; the test runs 0-2; a
    pass can only lower it, each visit taking the value that lowers it most). Negative control:
    with no pass, the records are the sampler's, further off."""
    from jaxdp.families import polish

    data = tiny_dataset(n=3000)

    def distance(mech, state, seed, target):
        codes = loop.release(mech, state, jax.random.key(seed), rows=3000)
        return float(np.abs(np.asarray(marginal_counts(codes, mech.workload)) - target).sum())

    for seed in range(3):
        mech = _aim(data, max_rounds=10, iters=50, final_iters=50, relation="replace-one")
        state = loop.run(mech, jax.random.key(seed)).state
        target = np.asarray(mech.relaxed_answers(state)) * 3000
        polished = distance(mech, state, seed, target)
        monkeypatch.setattr(polish, "PASSES", 0)
        drawn = distance(mech, state, seed, target)
        monkeypatch.setattr(polish, "PASSES", 1)
        assert polished < 0.95 * drawn, (seed, polished, drawn)
