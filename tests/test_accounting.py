"""Plans, calibration and costs (conversion oracles live in tests/privacy)."""

import math

import numpy as np
import pytest

from jaxdp import accounting as acc


def test_gaussian_cost_matches_definition():
    assert acc.gaussian_rho(2.0, 4.0) == pytest.approx(4.0 / 32.0, rel=1e-15)


@pytest.mark.parametrize("rho", [1e-6, 0.01, 0.5, 3.0])
@pytest.mark.parametrize("sensitivity", [1.0, math.sqrt(2) / 48842, 17.0])
def test_calibrated_scales_never_overspend_and_are_float32(rho, sensitivity):
    sigma = acc.gaussian_sigma(sensitivity, rho)
    assert float(np.float32(sigma)) == sigma
    assert acc.gaussian_rho(sensitivity, sigma) <= rho
    assert acc.gaussian_rho(sensitivity, sigma) > rho * (1 - 1e-6)  # and wastes almost nothing
    for count in (1, 5):
        scale = acc.gumbel_scale(sensitivity, rho, count)
        assert float(np.float32(scale)) == scale
        assert acc.charge_rho("gumbel_top_k", sensitivity, scale, count) <= rho
    b = acc.laplace_scale(sensitivity, rho)
    assert acc.laplace_rho(sensitivity, b) <= rho


def test_exponential_and_top_k_costs():
    assert acc.exponential_rho(0.5) == pytest.approx(0.5**2 / 8)
    assert acc.exponential_rho(0.5, count=3) == pytest.approx(3 * 0.5**2 / 8)
    # Gumbel scale 2*Delta/eps implements the exponential mechanism at eps.
    assert acc.charge_rho("exponential", 1.0, 2.0 / 0.5) == pytest.approx(acc.exponential_rho(0.5))


def test_plan_refuses_overspending():
    plan = acc.Plan.from_rho(0.1)
    ok = plan.with_charge(acc.PlannedCharge("m", "gaussian", 1.0, acc.gaussian_sigma(1.0, 0.1)))
    assert ok.check().rho_planned <= 0.1
    over = ok.with_charge(acc.PlannedCharge("again", "gaussian", 1.0, 10.0))
    with pytest.raises(acc.BudgetExceededError, match="budget"):
        over.check()


def test_plan_from_epsilon_delta_records_conversion():
    exact = acc.Plan.from_epsilon_delta(1.0, 1e-9, "exact")
    simple = acc.Plan.from_epsilon_delta(1.0, 1e-9, "simple")
    assert exact.conversion == "exact" and simple.conversion == "simple"
    assert exact.rho_budget > simple.rho_budget  # the exact conversion grants more rho
    assert acc.epsilon_from_rho(exact.rho_budget, 1e-9, "exact") <= 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0, "delta": 1e-6}, "epsilon"),
        ({"epsilon": -1.0, "delta": 1e-6}, "epsilon"),
        ({"epsilon": float("nan"), "delta": 1e-6}, "epsilon"),
        ({"epsilon": float("inf"), "delta": 1e-6}, "epsilon"),
        ({"epsilon": 1.0, "delta": 0.0}, "delta"),
        ({"epsilon": 1.0, "delta": 1.0}, "delta"),
        ({"epsilon": 1.0, "delta": float("nan")}, "delta"),
        ({"epsilon": 1.0, "delta": 1e-6, "conversion": "loose"}, "conversion"),
    ],
)
def test_bad_budget_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        acc.rho_from_epsilon_delta(**kwargs)


@pytest.mark.parametrize("rho", [0.0, -0.1, float("nan"), float("inf")])
def test_bad_rho_is_refused(rho):
    with pytest.raises(ValueError, match="rho"):
        acc.Plan.from_rho(rho)


@pytest.mark.parametrize("fraction", [-0.1, 0.0, 1.5, float("nan")])
def test_budget_fractions_outside_unit_interval_are_refused(fraction):
    with pytest.raises(ValueError, match="fraction"):
        acc.Plan.from_rho(1.0).share(fraction)
