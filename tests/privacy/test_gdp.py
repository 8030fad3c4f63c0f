"""The Gaussian-DP accountant (`jaxdp.gdp`, conversion "gdp"): its (epsilon, delta) against
`dp_accounting`, its bound on one exact discrete Gaussian against that distribution's exact
Gaussian-DP parameter and against `dp_accounting`'s privacy loss distribution of it, the
refusal of plans over budget or with non-Gaussian draws, and the report of a run. The empirical
rounds under this accountant are in `test_noisy_error_rounds.py` ("aim-gdp/gdp")."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as dp_pld
from scipy import special

import jaxdp
from jaxdp import api, gdp
from jaxdp.accounting import BudgetExceededError, Plan, PlannedCharge
from jaxdp.queries import all_kway


@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0, 3.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-5, 1e-2])
def test_epsilon_of_mu_is_dp_accountings(mu, delta):
    """epsilon_of(mu, delta) against dp_accounting's PLD of the Gaussian mechanism of noise 1 / mu
    (sensitivity 1): within its pessimistic discretisation (1e-4 a step, the PLD's epsilon at or
    above the exact one), and mu_of inverts it."""
    exact = gdp.epsilon_of(mu, delta)
    grid = 1e-4
    by_pld = dp_pld.from_gaussian_mechanism(
        1.0 / mu, value_discretization_interval=grid
    ).get_epsilon_for_delta(delta)
    assert exact <= by_pld + 1e-9 and by_pld - exact < 20 * grid
    assert gdp.delta_of(mu, exact) <= delta
    assert gdp.mu_of(exact, delta) == pytest.approx(mu, rel=1e-7)


def _exact_gdp_mu(sigma: float) -> float:
    """The smallest mu for which N_Z(0, sigma^2) against N_Z(1, sigma^2) is mu-GDP: the likelihood
    ratio rises in the outcome, so the trade-off curve's corners are the threshold tests, and mu
    is the largest step Phi^-1(F(k)) - Phi^-1(F(k - 1)) of the probit-transformed cdf F (the
    curve between corners is a chord, above the convex G_mu). By symmetry the steps for k <= 0
    are all of them. The cdf is summed from -16 sigma (the mass below is under e^-128), and the
    steps read from -10 sigma, where that omission moves the cdf by a relative e^-78 at most;
    beyond, the steps fall towards 1 / sigma."""
    k = np.arange(-int(16 * sigma) - 5, 1)
    weights = np.exp(-(k.astype(np.float64) ** 2) / (2.0 * sigma**2))
    total = 2.0 * weights[:-1].sum() + weights[-1]  # the mass of the whole lattice
    probit = special.ndtri(np.cumsum(weights) / total)
    steps = np.diff(probit)[k[1:] >= -10 * sigma]
    return float(np.max(steps))


@pytest.mark.parametrize("sigma", [2.2, 3.0, 5.0, 10.0, 40.0])
def test_one_draw_is_within_its_bound_and_the_naive_one_fails(sigma):
    """The exact discrete Gaussian's Gaussian-DP parameter is at most `charge_mu`'s bound, and
    above 1 / sigma (the continuous Gaussian's): the naive claim would overstate its privacy,
    which is why the bound subtracts the smoothing. About (1 + 1 / (24 sigma^2)) / sigma."""
    exact = _exact_gdp_mu(sigma)
    bound = gdp.charge_mu("discrete_gaussian", 1.0, sigma)
    assert 1.0 / sigma < exact <= bound
    assert exact == pytest.approx((1.0 + 1.0 / (24.0 * sigma**2)) / sigma, rel=1e-3)


@pytest.mark.parametrize("sigma", [2.5, 4.0, 12.0])
def test_one_draw_bound_covers_dp_accountings_privacy_loss_distribution(sigma):
    """dp_accounting's (pessimistic) privacy loss distribution of the discrete Gaussian: its
    delta(epsilon) at most that of `charge_mu`'s mu-GDP, over a grid of epsilons."""
    mu = gdp.charge_mu("discrete_gaussian", 1.0, sigma)
    loss = dp_pld.from_discrete_gaussian_mechanism(sigma, sensitivity=1, value_discretization_interval=1e-5)
    for epsilon in np.linspace(0.0, 6.0 * mu + 1.0, 25):
        assert loss.get_delta_for_epsilon(float(epsilon)) <= gdp.delta_of(mu, float(epsilon)) + 1e-6


def test_the_slack_is_negligible_and_folded_in():
    """eta a coordinate below 1e-33, H over 2^64 coordinates below 1e-14: the budget and the
    spent epsilon move by that much, in the safe direction."""
    assert gdp.ETA < 1e-33 and gdp.H < 1e-14
    mu = gdp.mu_of(1.0, 1e-9)
    assert gdp.calibrated_rho(1.0, 1e-9) <= mu * mu / 2.0
    assert gdp.calibrated_rho(1.0, 1e-9) == pytest.approx(mu * mu / 2.0, rel=1e-9)
    assert gdp.spent_epsilon(mu * mu, 1e-9) >= 1.0


def test_the_budget_is_about_a_tenth_above_zcdps():
    """At (1, 1e-9) the Gaussian-DP budget mu^2 / 2 is 10-11% above the zCDP conversion's rho."""
    ratio = (
        Plan.from_epsilon_delta(1.0, 1e-9, "gdp").rho_budget / Plan.from_epsilon_delta(1.0, 1e-9).rho_budget
    )
    assert 1.09 < ratio < 1.12


def test_a_plan_over_its_gaussian_dp_budget_is_refused():
    """Charges whose mu^2 / 2 exceeds the budget are refused, though their zCDP rho (of the drawn
    scale) is within it; a selection by the exponential mechanism has no bound here."""
    plan = Plan.from_epsilon_delta(1.0, 1e-9, "gdp")
    sigma = 1.0 / math.sqrt(2.0 * plan.rho_budget)  # zCDP rho exactly the budget, mu above it
    over = plan.with_charge(PlannedCharge("measure", "discrete_gaussian", 1.0, sigma * 1.0001))
    assert over.rho_planned <= plan.rho_budget
    with pytest.raises(BudgetExceededError, match="Gaussian-DP"):
        over.check()
    fits = plan.with_charge(
        PlannedCharge("measure", "discrete_gaussian", 1.0, gdp.smoothed_sigma(sigma) * 1.0001)
    )
    assert fits.check() is fits
    with pytest.raises(ValueError, match="exact discrete Gaussian draws only"):
        plan.with_charge(PlannedCharge("select", "discrete_exponential", 1.0, 10.0)).check()


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, (600, 4))
    codes[:, 1] = (codes[:, 0] + (rng.random(600) < 0.2)) % 3
    return jaxdp.Dataset.from_codes(jaxdp.Domain.from_sizes({"a": 3, "b": 3, "c": 3, "d": 3}), codes)


@pytest.mark.parametrize("name", ["aim-gdp", "swift"])
def test_a_run_under_gdp_reports_its_accountant(table, name):
    """A whole run under conversion "gdp": the ledger is audited against the plan, the report
    states accountant "gdp" with its epsilon at most the budget's, and the zCDP view of the same
    draws above it; the budget is the Gaussian-DP one."""
    workload = all_kway(table.domain.sizes, 2)
    mechanism = api.build(name, table, workload, epsilon=1.0, delta=1e-9, conversion="gdp")
    result = api.execute(name, mechanism, jax.random.key(0), table.domain)
    report = result.report
    assert report["accountant"] == "gdp" and report["conversion"] == "gdp"
    assert report["epsilon_gdp"] <= 1.0 + 1e-9 and report["epsilon_gdp"] == pytest.approx(1.0, abs=1e-3)
    assert report["epsilon_zcdp"] > 1.0
    assert report["rho_budget"] == pytest.approx(gdp.calibrated_rho(1.0, 1e-9))


@pytest.mark.parametrize("name", ["aim", "mst", "independent"])
def test_gdp_is_refused_where_a_draw_is_not_a_smoothed_gaussian(table, name):
    """AIM and MST select by the exponential mechanism; Independent's noise is not smoothed: each
    is refused (by the builder, or by its plan's check) before anything runs."""
    workload = all_kway(table.domain.sizes, 2)
    with pytest.raises((ValueError, BudgetExceededError)):
        api.build(name, table, workload, epsilon=1.0, delta=1e-9, conversion="gdp")
