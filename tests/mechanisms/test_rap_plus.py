"""RAP++: tempered vs hard answers, annealing, sensitivities on neighbours, end to end."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import audit, selection
from jaxdp.domain import Categorical, Dataset, Domain, Numeric
from jaxdp.mechanisms import rap_plus as rp
from jaxdp.queries import (
    MixedMarginalQueries,
    all_kway,
    linear_threshold_answers,
    marginal_counts,
    mixed_marginal_answers,
    random_linear_thresholds,
    relaxed_linear_threshold_answers,
    relaxed_mixed_marginal_answers,
)

DOMAIN = Domain(
    (
        Categorical("y", 2, ("no", "yes")),
        Numeric("x", 0.0, 10.0),
        Categorical("c", 3),
        Numeric("z", -1.0, 1.0),
    ),
    target="y",
)


def mixed_dataset(n=600, seed=0) -> Dataset:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = np.clip(rng.normal(3 + 4 * y, 1.5), 0, 10)
    c = rng.integers(0, 3, n)
    z = np.clip(rng.normal(0.3 * y, 0.3), -1, 1)
    return Dataset.from_columns(DOMAIN, {"y": np.array(["no", "yes"])[y], "x": x, "c": c, "z": z})


def one_hot_rows(data: Dataset):
    """Relaxed rows that are exactly the records (one-hot probabilities, true numerics)."""
    probs = np.concatenate(
        [np.eye(s, dtype=np.float32)[data.codes[:, j]] for j, s in enumerate(data.domain.sizes)], 1
    )
    return jnp.asarray(probs), jnp.asarray(data.numeric)


def small_classes(key=0, mixed_rounds=2, linear_rounds=2):
    return rp.default_classes(
        DOMAIN,
        jax.random.key(key),
        mixed_candidates=200,
        linear_candidates=200,
        mixed_rounds=mixed_rounds,
        linear_rounds=linear_rounds,
        per_round=5,
    )


def test_tempered_answers_tend_to_hard_answers_as_sigma_grows():
    data = mixed_dataset()
    probs, numeric = one_hot_rows(data)
    mixed = small_classes()[1].queries
    linear = random_linear_thresholds(jax.random.key(3), DOMAIN.sizes, 2, 200, [0])
    hard_mm = np.asarray(mixed_marginal_answers(data.codes, data.numeric, mixed)) / len(data)
    hard_lt = np.asarray(linear_threshold_answers(data.codes, data.numeric, linear)) / len(data)
    # the relaxed kernels with sigma=None are the exact answers of one-hot rows
    np.testing.assert_allclose(
        relaxed_mixed_marginal_answers(probs, numeric, mixed, None), hard_mm, atol=1e-6
    )
    np.testing.assert_allclose(
        relaxed_linear_threshold_answers(probs, numeric, linear, None), hard_lt, atol=1e-6
    )
    gaps = []
    for sigma in (4.0, 64.0, 1024.0, 16384.0):
        mm = np.asarray(relaxed_mixed_marginal_answers(probs, numeric, mixed, sigma))
        lt = np.asarray(relaxed_linear_threshold_answers(probs, numeric, linear, sigma))
        gaps.append(max(np.abs(mm - hard_mm).max(), np.abs(lt - hard_lt).max()))
    assert all(b < a for a, b in itertools.pairwise(gaps)), gaps
    assert gaps[0] > 0.05 and gaps[-1] < 0.01  # a real approximation error that vanishes


def _neighbours(data: Dataset, rng, count: int):
    """Pairs (D, D') differing in one replaced record, adversarial-ish: extreme replacements."""
    for _ in range(count):
        i = rng.integers(len(data))
        codes, numeric = data.codes.copy(), data.numeric.copy()
        codes[i] = [rng.integers(s) for s in data.domain.sizes]
        numeric[i] = rng.choice([0.0, 1.0, rng.random()], size=numeric.shape[1])
        yield Dataset(data.domain, codes, numeric)


def test_each_class_score_and_measurement_sensitivity_holds_on_neighbours():
    """Replace one record: every query fraction moves by <= 1/n, each marginal's max-cell-error
    score by <= 1/n and its cell vector by <= sqrt(2)/n in L2; a score taken as the marginal's
    L1 error (as some implementations do) moves by 2/n, twice the declared 1/n."""
    data = mixed_dataset(n=300)
    n = len(data)
    mixed = small_classes()[1].queries
    linear = random_linear_thresholds(jax.random.key(4), DOMAIN.sizes, 2, 200, [0, 1])
    workload = all_kway(DOMAIN.sizes, 2)
    synthetic = np.random.default_rng(9).random(workload.n_queries)  # any fixed synthetic answers

    def answers(d):
        mm = np.asarray(mixed_marginal_answers(d.codes, d.numeric, mixed)) / n
        lt = np.asarray(linear_threshold_answers(d.codes, d.numeric, linear)) / n
        cells = np.asarray(marginal_counts(jnp.asarray(d.codes), workload, jnp.int32)) / n
        return mm, lt, cells

    base = answers(data)
    worst_l1_score = 0.0
    for other in _neighbours(data, np.random.default_rng(1), 40):
        mm, lt, cells = answers(other)
        assert np.abs(mm - base[0]).max() <= 1 / n + 1e-7
        assert np.abs(lt - base[1]).max() <= 1 / n + 1e-7
        score = selection.max_cell_errors(jnp.asarray(cells), synthetic, workload)
        base_score = selection.max_cell_errors(jnp.asarray(base[2]), synthetic, workload)
        assert np.abs(np.asarray(score) - np.asarray(base_score)).max() <= 1 / n + 1e-6
        for start, size in zip(workload.offsets, workload.cells, strict=True):
            diff = cells[start : start + size] - base[2][start : start + size]
            assert np.sqrt(np.sum(diff**2)) <= np.sqrt(2) / n + 1e-6
            # negative control: L1 score against synthetic answers equal to D's own
            worst_l1_score = max(worst_l1_score, np.abs(diff).sum())
    assert worst_l1_score > 1.5 / n  # the L1 score really needs sensitivity 2/n, not 1/n


def test_declared_sensitivities_and_plan():
    data = mixed_dataset(n=500)
    mech = jaxdp.rap_plus_plus(data, small_classes(), epsilon=1.0, delta=1e-6, n_rows=50)
    marg, mm, lt = mech.classes
    assert marg.selection.sensitivity == mm.selection.sensitivity == lt.selection.sensitivity == 1 / 500
    # measurements add noise to counts, so their sensitivities are in counts (n times the
    # fractions' sqrt(2)/n and sqrt(5)/n)
    assert marg.measurement.sensitivity == pytest.approx(np.sqrt(2))
    assert mm.measurement.sensitivity == pytest.approx(np.sqrt(5))
    assert mech.rounds == 1 + 2 + 2 and sorted(mech.schedule) == [0, 1, 1, 2, 2]
    assert mech.plan.rho_planned <= mech.plan.rho_budget
    assert mech.plan.rho_planned == pytest.approx(mech.plan.rho_budget, rel=1e-3)
    with pytest.raises(TypeError, match="relation"):  # replace-one only: fractions
        jaxdp.rap_plus_plus(data, small_classes(), epsilon=1.0, delta=1e-6, relation="add-remove")
    with pytest.raises(ValueError, match="exceeds the 200 counting queries of the class"):
        jaxdp.rap_plus_plus(
            data,
            [rp.mixed_marginals(small_classes()[1].queries, rounds=50, per_round=5)],
            epsilon=1.0,
            delta=1e-6,
        )


@pytest.mark.slow
def test_annealing_beats_every_fixed_sigma_on_a_toy_problem():
    """Paper Figure 1 at small scale: fit 1-d prefix marginals of a bimodal numeric column with
    the same step budget; annealing (sigma 2 -> 2^10) ends with lower exact (hard) error than
    each fixed sigma run alone for all the steps."""
    rng = np.random.default_rng(0)
    n = 2000
    dom = Domain((Categorical("y", 2), Numeric("x", 0.0, 1.0)))
    y = rng.integers(0, 2, n)
    x = np.clip(np.where(y == 1, rng.normal(0.75, 0.03, n), rng.normal(0.2, 0.03, n)), 0, 1)
    data = Dataset.from_codes(dom, y[:, None], x[:, None])
    grid = np.linspace(0.01, 0.99, 99, dtype=np.float32)
    m = 2 * len(grid)
    queries = MixedMarginalQueries(
        jnp.zeros((m, 1), jnp.int32),
        jnp.asarray(np.repeat([0, 1], len(grid))[:, None], jnp.int32),
        jnp.zeros((m, 1), jnp.int32),
        jnp.asarray(np.tile(grid, 2)[:, None]),
        (2,),
        1,
    )
    true = np.asarray(mixed_marginal_answers(data.codes, data.numeric, queries)) / n
    mech = jaxdp.rap_plus_plus(
        data,
        [rp.mixed_marginals(queries, rounds=1, per_round=m)],
        epsilon=1.0,
        delta=1e-6,
        n_rows=100,
        gamma=1e-12,
        max_stage_steps=60,
        learning_rate=0.02,
    )
    model = mech.init(jax.random.key(0)).model
    cls = model.classes[0]
    targets = cls._replace(
        targets=jnp.asarray(true, jnp.float32), measured=jnp.ones(m, bool), ids=jnp.arange(m, dtype=jnp.int32)
    )

    def hard_error(sigma_start, stages, steps):
        fit = dataclasses.replace(mech.family, max_stage_steps=steps)
        params, _, _ = jax.jit(lambda p: fit.project(p, (targets,), sigma_start=sigma_start, stages=stages))(
            model.params
        )
        return float(fit.loss(params, (targets,), None))

    annealed = hard_error(2.0, 10, 60)
    fixed = {s: hard_error(s, 1, 600) for s in (2.0, 8.0, 32.0, 128.0, 512.0, 2048.0)}
    assert all(annealed < f for f in fixed.values()), (annealed, fixed)


def test_mixed_rows_stay_in_bounds_and_release_decodes_to_original_units():
    data = mixed_dataset()
    mech = jaxdp.rap_plus_plus(
        data, small_classes(), epsilon=2.0, delta=1e-6, n_rows=64, stages=3, max_stage_steps=10
    )
    key = jax.random.key(5)
    result = jaxdp.run(mech, key)
    audit.check_ledger(list(result.ledger), mech.plan)
    _, numeric = result.state.model.params
    assert float(numeric.min()) >= 0.0 and float(numeric.max()) <= 1.0
    codes, values = jaxdp.release(mech, result.state, key, rows=300)
    synth = Dataset(DOMAIN, np.asarray(codes), np.asarray(values))
    cols = synth.to_columns()
    assert set(cols["y"]) <= {"no", "yes"}
    assert cols["x"].min() >= 0.0 and cols["x"].max() <= 10.0
    assert cols["z"].min() >= -1.0 and cols["z"].max() <= 1.0
    # a released numeric value is a row's value, not a bin: many distinct values
    assert len(np.unique(cols["x"])) > 20


@pytest.mark.slow
def test_rap_plus_plus_fits_the_measured_thresholds_better_than_its_start():
    data = mixed_dataset(n=2000, seed=3)
    mech = jaxdp.rap_plus_plus(data, small_classes(), epsilon=20.0, delta=1e-6, n_rows=100)
    result = jaxdp.run(mech, jax.random.key(6))
    start = mech.init(jax.random.key(7))
    mixed = mech.family.targets[1].queries
    true = np.asarray(mixed_marginal_answers(data.codes, data.numeric, mixed)) / len(data)

    # The 10 of the 200 candidate thresholds the two mixed rounds measured (the others are free).
    measured = ~np.asarray(result.state.eligible[1])
    assert measured.sum() == 10

    def error(params):
        probs = mech.family.probabilities(params)
        answers = np.asarray(relaxed_mixed_marginal_answers(probs, params[1], mixed, None))
        return np.abs(answers - true)[measured].mean()

    assert error(result.state.model.params) < 0.2 * error(
        start.model.params
    )  # seeds 0-5: 0.02-0.05 of the start


def test_categorical_only_data_runs_as_rap():
    from tests.mechanisms.conftest import tiny_dataset

    data = tiny_dataset()
    mech = jaxdp.rap_plus_plus(
        data, all_kway(data.domain.sizes, 2), epsilon=1.0, delta=1e-6, rounds=3, n_rows=50
    )
    assert mech.family.stages == 1 and mech.family.n_numeric == 0
    result = jaxdp.run(mech, jax.random.key(0))
    codes, numeric = jaxdp.release(mech, result.state, jax.random.key(1))
    assert codes.shape == (len(data), 4) and numeric.shape == (len(data), 0)


def test_exact_noise_by_default_measures_integer_counts():
    """Default noise: every charge is an exact primitive and every class's measured answers
    (marginal cells, mixed marginals, linear thresholds) are noisy integer counts divided by n;
    noise="float" charges the float primitives and its answers leave the grid."""
    data = mixed_dataset(n=300)
    n = len(data)
    primitives = {
        "discrete": {"discrete_top_k", "discrete_gaussian"},
        "float": {"gumbel_top_k", "gaussian"},
    }
    off_grid = {}
    for noise in ("discrete", "float"):
        mech = jaxdp.rap_plus_plus(
            data,
            small_classes(),
            epsilon=1.0,
            delta=1e-6,
            n_rows=32,
            stages=1,
            max_stage_steps=2,
            noise=noise,
        )
        assert mech.noise == noise and all(c.selection.noise == noise for c in mech.classes)
        result = jaxdp.run(mech, jax.random.key(1))
        assert {e.primitive for e in result.ledger} == primitives[noise]
        gaps = []
        for state in result.state.model.classes:
            counts = np.asarray(state.targets, np.float64)[np.asarray(state.measured)] * n
            assert counts.size > 0
            gaps.append(np.abs(counts - np.round(counts)).max())
        off_grid[noise] = gaps
    assert max(off_grid["discrete"]) < 1e-3
    assert min(off_grid["float"]) > 0.1


def test_bad_noise_is_refused():
    with pytest.raises(ValueError, match="noise"):
        jaxdp.rap_plus_plus(mixed_dataset(n=100), small_classes(), epsilon=1.0, delta=1e-6, noise="exact")
