"""Independent and Gaussian: they work, and fail loudly when they stop working."""

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import datasets, evaluate, loop
from jaxdp.domain import DataError, Dataset, domain_from_schema
from jaxdp.queries import all_kway

from .conftest import tiny_dataset


@pytest.fixture(scope="module")
def adult():
    return datasets.load("adult")


def test_independent_beats_answering_zero_and_writes_in_domain_data(adult):
    mech = jaxdp.independent(adult, epsilon=1.0, delta=1e-9)
    result = loop.run(mech, jax.random.key(0))
    codes = np.asarray(loop.release(mech, result.state, jax.random.key(0)))
    assert codes.shape == (len(adult), len(adult.domain.sizes))
    assert (codes >= 0).all() and (codes < np.array(adult.domain.sizes)).all()
    synthetic = Dataset.from_codes(adult.domain, codes)
    one_way = evaluate.workload_errors(adult, synthetic, all_kway(adult.domain.sizes, 1))
    two_way = evaluate.workload_errors(adult, synthetic, all_kway(adult.domain.sizes, 2))
    # Answering zero has mean L1 error 1 per marginal. 1-way marginals are measured directly, so
    # they are nearly exact; 2-way ones lose only the dependence between attributes.
    assert one_way["mean_l1"] < 0.02
    assert two_way["mean_l1"] < 0.3
    assert two_way["max_abs"] < 0.3


def test_independent_add_remove_estimates_the_count():
    data = tiny_dataset(n=2000)
    mech = jaxdp.independent(data, epsilon=5.0, delta=1e-6, relation="add-remove")
    result = loop.run(mech, jax.random.key(1))
    rows = mech.default_rows(result.state)
    # the count is estimated from the noisy 1-way counts (the mean of their totals), never read
    noisy = np.asarray(result.state.model.noisy_answers, np.float64)
    totals = [block.sum() for block in np.split(noisy, np.cumsum(data.domain.sizes)[:-1])]
    assert rows == max(1, round(float(np.mean(totals))))
    assert abs(rows - len(data)) < 50
    # and it moves with the noise: over five keys the rounded estimate (sd about 1.5 records
    # here) takes more than one value (for random keys it would fail with probability < 1%)
    estimates = {mech.default_rows(loop.run(mech, jax.random.key(k)).state) for k in range(2, 7)}
    assert len(estimates) > 1


def test_gaussian_noise_has_the_planned_scale(adult):
    workload = all_kway(adult.domain.sizes, 2)
    mech = jaxdp.gaussian(adult, workload, epsilon=1.0, delta=1e-9)
    result = loop.run(mech, jax.random.key(2))
    noisy = np.asarray(loop.release(mech, result.state, jax.random.key(2)), np.float64)
    residual = noisy - evaluate.fractions(adult, workload)
    # 2,874 iid N(0, sigma^2) residuals: the sample sd lies within 5 standard errors of sigma
    # (sd of the sample sd ~ sigma / sqrt(2 m)); false failure < 1e-6.
    m = residual.size
    sigma = mech.classes[0].measurement.sigma / len(
        adult
    )  # sigma is in counts (the noise is added to counts), answers in fractions
    assert abs(residual.std() / sigma - 1) < 5 / np.sqrt(2 * m)
    assert abs(residual.mean()) < 5 * sigma / np.sqrt(m)


BASELINES = {
    "independent": lambda data, **kw: jaxdp.independent(data, **kw),
    "gaussian": lambda data, **kw: jaxdp.gaussian(data, all_kway(data.domain.sizes, 2), **kw),
}


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
@pytest.mark.parametrize("name", sorted(BASELINES))
def test_default_noise_is_exact_integer_noise_on_counts(name, relation):
    data = tiny_dataset(n=300)
    mech = BASELINES[name](data, epsilon=1.0, delta=1e-6, relation=relation)
    assert mech.noise == "discrete"
    assert [c.primitive for c in mech.plan.charges] == ["discrete_gaussian"]
    result = loop.run(mech, jax.random.key(5))
    assert [e.primitive for e in result.ledger] == ["discrete_gaussian"]
    # in counts: sqrt(m) under add-remove, sqrt(2 m) under replace-one (m measured marginals)
    m = 4 if name == "independent" else 6
    assert result.ledger[0].sensitivity == pytest.approx(np.sqrt(m if relation == "add-remove" else 2 * m))
    noisy_counts = np.asarray(result.state.model.noisy_answers, np.float64)
    if relation == "replace-one":
        noisy_counts *= len(data)  # the answers are the noisy counts / n (n public)
    np.testing.assert_allclose(noisy_counts, np.round(noisy_counts), atol=1e-3)
    assert not np.allclose(noisy_counts, np.asarray(mech.classes[0].counts._value))  # and noise was added


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_float_noise_uses_the_float_gaussian(name):
    data = tiny_dataset(n=300)
    mech = BASELINES[name](data, epsilon=1.0, delta=1e-6, noise="float", relation="add-remove")
    result = loop.run(mech, jax.random.key(5))
    assert [e.primitive for e in result.ledger] == ["gaussian"]
    noisy = np.asarray(result.state.model.noisy_answers, np.float64)
    assert not np.allclose(noisy, np.round(noisy), atol=1e-3)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_unknown_noise_is_refused(name):
    with pytest.raises(ValueError, match="noise"):
        BASELINES[name](tiny_dataset(), epsilon=1.0, delta=1e-6, noise="exact")


def test_numeric_columns_are_refused_by_categorical_mechanisms():
    dom = domain_from_schema({"columns": {"x": {"type": "numeric", "lower": 0, "upper": 1}}})
    data = Dataset.from_codes(dom, np.zeros((3, 0), int), np.array([[0.1], [0.5], [0.9]]))
    with pytest.raises(DataError, match=r"numeric column\(s\) \['x'\]"):
        jaxdp.independent(data, epsilon=1.0, delta=1e-6)


def test_workload_for_another_domain_is_refused():
    with pytest.raises(ValueError, match="different domain"):
        jaxdp.gaussian(tiny_dataset(), all_kway((2, 2), 1), epsilon=1.0, delta=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0, "delta": 1e-6}, "epsilon"),
        ({"epsilon": 1.0, "delta": 2.0}, "delta"),
        ({"epsilon": 1.0}, "delta"),
        ({"epsilon": 1.0, "delta": 1e-6, "rho": 0.1}, "either"),
        ({"rho": -1.0}, "rho"),
        ({"epsilon": 1.0, "delta": 1e-6, "relation": "swap"}, "relation"),
    ],
)
def test_bad_budget_is_refused_before_anything_runs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jaxdp.independent(tiny_dataset(), **kwargs)
