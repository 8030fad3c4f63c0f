"""The privacy-loss-distribution accountant (`jaxdp.pld`) against `dp_accounting` composed by hand
and against brute-force privacy-loss sums, its calibration, and the refusal of a plan over its
PLD budget. The empirical rounds of the PLD-calibrated Independent and Gaussian baselines are in
`test_mechanism_rounds.py` ("independent-pld", "gaussian-pld"), held to their PLD claims."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as dp_pld

import jaxdp
from jaxdp import accounting, api, loop, pld
from jaxdp.accounting import BudgetExceededError, Plan, PlannedCharge
from jaxdp.queries import all_kway

GRID = pld.DISCRETISATION


def _dg(sigma: float, cells: int, times: int = 1) -> PlannedCharge:
    return PlannedCharge("measure", "discrete_gaussian", math.sqrt(cells), sigma, 1, times)


def _selection(epsilon: float, times: int = 1, count: int = 1) -> PlannedCharge:
    # epsilon = 2 sensitivity / scale
    primitive = "discrete_top_k" if count > 1 else "discrete_exponential"
    return PlannedCharge("select", primitive, 1.0, 2.0 / epsilon, count, times)


MIXED = (_dg(20.0, 14), _selection(0.08, times=6), _dg(24.5, 1, times=6), _selection(0.05, count=5, times=2))


def test_the_composition_is_dp_accountings():
    """A plan of Gaussians on 14 and 1 moved cells and exponential and top-k selections: the
    epsilon is the one `dp_accounting` gives for the same profiles composed by hand."""
    by_hand = (
        dp_pld.from_discrete_gaussian_mechanism(20.0, sensitivity=1, value_discretization_interval=GRID)
        .self_compose(14)
        .compose(
            dp_pld.from_privacy_parameters(
                common.DifferentialPrivacyParameters(0.08, 0.0), value_discretization_interval=GRID
            ).self_compose(6)
        )
        .compose(
            dp_pld.from_discrete_gaussian_mechanism(
                24.5, sensitivity=1, value_discretization_interval=GRID
            ).self_compose(6)
        )
        .compose(
            dp_pld.from_privacy_parameters(
                common.DifferentialPrivacyParameters(0.05, 0.0), value_discretization_interval=GRID
            ).self_compose(10)
        )
    )
    for delta in (1e-9, 1e-5, 1e-2):
        assert pld.pld_epsilon(MIXED, delta) == pytest.approx(by_hand.get_epsilon_for_delta(delta), rel=1e-12)


def _epsilon_for(delta_of, delta: float) -> float:
    """The smallest epsilon with delta_of(epsilon) <= delta (bisection; delta_of decreasing)."""
    low, high = 0.0, 50.0
    for _ in range(80):
        middle = 0.5 * (low + high)
        low, high = (low, middle) if delta_of(middle) <= delta else (middle, high)
    return high


def _hockey_stick(losses: np.ndarray, masses: np.ndarray):
    """delta(epsilon) = E[(1 - e^(epsilon - L))_+] for a privacy loss L with these masses."""
    return lambda epsilon: float(np.sum(masses * np.clip(1.0 - np.exp(epsilon - losses), 0.0, None)))


def _discrete_gaussian_losses(sigma: float, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact privacy loss of `cells` one-dimensional discrete Gaussians shifted by one, by
    brute force: the pmf on integers (normalised over |x| <= 40 sigma), the loss of x is
    log P(x) / P(x - 1) = (1 - 2x) / (2 sigma^2), composed by convolving the loss pmf on its
    lattice of step 1 / sigma^2."""
    x = np.arange(-int(40 * sigma) - 2, int(40 * sigma) + 3)
    mass = np.exp(-(x**2) / (2 * sigma**2))
    mass /= mass.sum()
    one = mass  # loss (1 - 2x) / (2 sigma^2): an affine function of x, lattice index -x
    total = one
    for _ in range(cells - 1):
        total = np.convolve(total, one)
    # index i of `total` is the sum of `cells` values x_j = x[0] + ..., so sum x = i + cells x[0]
    sums = np.arange(len(total)) + cells * x[0]
    return (cells - 2.0 * sums) / (2 * sigma**2), total


@pytest.mark.parametrize(("sigma", "cells"), [(1.2, 1), (1.2, 3), (3.0, 2), (0.7, 2)])
def test_a_discrete_gaussian_against_a_brute_force_sum(sigma, cells):
    """The PLD epsilon of a discrete Gaussian on `cells` moved counts is an upper bound of the
    brute-force one (the pessimistic estimate) and within 2e-3 of it (the 1e-4 loss grid)."""
    losses, masses = _discrete_gaussian_losses(sigma, cells)
    for delta in (1e-6, 1e-3, 1e-1):
        exact = _epsilon_for(_hockey_stick(losses, masses), delta)
        ours = pld.pld_epsilon([_dg(sigma, cells)], delta)
        assert exact - 1e-9 <= ours <= exact + 2e-3, (delta, ours, exact)


def test_the_brute_force_sum_tells_the_cells_apart():
    """Control: the brute force of 2 moved cells is not that of 1 (so the test above would see a
    profile that composed too few losses)."""
    one, two = (_hockey_stick(*_discrete_gaussian_losses(1.2, c)) for c in (1, 2))
    assert _epsilon_for(two, 1e-3) > _epsilon_for(one, 1e-3) + 0.5


@pytest.mark.parametrize("times", [1, 3])
def test_a_selection_against_a_brute_force_sum(times):
    """An exponential mechanism's pure epsilon profile (randomized response's pair): `times`
    compositions have the loss epsilon (2B - times), B ~ Binomial(times, e^eps / (1 + e^eps))."""
    epsilon = 0.6
    p = math.exp(epsilon) / (1 + math.exp(epsilon))
    b = np.arange(times + 1)
    masses = np.array([math.comb(times, int(k)) * p**k * (1 - p) ** (times - k) for k in b])
    exact_of = _hockey_stick(epsilon * (2.0 * b - times), masses)
    for delta in (1e-4, 1e-2, 0.1):
        exact = _epsilon_for(exact_of, delta)
        ours = pld.pld_epsilon([_selection(epsilon, times=times)], delta)
        assert exact - 1e-9 <= ours <= exact + 2e-3, (delta, ours, exact)


def test_moved_cells_reads_a_whole_number_or_none():
    assert pld.moved_cells("discrete_gaussian", float(np.float32(math.sqrt(14)))) == 14
    assert pld.moved_cells("discrete_laplace", 3.0) == 3
    assert pld.moved_cells("discrete_gaussian", 1.5) is None  # 2.25 cells: no profile
    assert pld.pld_epsilon([_dg(5.0, 1), PlannedCharge("m", "discrete_gaussian", 1.5, 5.0)], 1e-6) is None
    # the plan's epsilon is then zCDP's
    charges = (PlannedCharge("m", "discrete_gaussian", 1.5, 5.0),)
    epsilon, accountant = pld.plan_epsilon(charges, 1e-6)
    assert accountant == "zcdp" and epsilon == accounting.cdp_epsilon(charges[0].rho, 1e-6)


def test_the_tighter_accountant_states_the_plan():
    """All Gaussians: the PLD's epsilon is below zCDP's; many selections (their pure profile
    composes worse than the bounded-range zCDP bound): zCDP's."""
    gaussians = (_dg(20.0, 14),)
    epsilon, accountant = pld.plan_epsilon(gaussians, 1e-9)
    assert accountant == "pld" and epsilon < accounting.cdp_epsilon(gaussians[0].rho, 1e-9)
    selections = (_selection(0.1, times=20), _dg(40.0, 2, times=20))
    epsilon, accountant = pld.plan_epsilon(selections, 1e-9)
    zcdp = accounting.cdp_epsilon(sum(c.rho for c in selections), 1e-9)
    assert accountant == "zcdp" and epsilon == zcdp < pld.pld_epsilon(selections, 1e-9)


def test_the_calibration_spends_the_budget_and_no_more():
    """Independent's plan on 14 moved cells at (1, 1e-9): the PLD lets rho grow by about 10%
    (bench/HISTORY.md, "PLD accounting"); the scaled plan spends at most epsilon 1 by its PLD, and
    one more step of the tolerance would not."""
    rho = accounting.rho_from_epsilon_delta(1.0, 1e-9)
    charges = (_dg(accounting.gaussian_sigma(math.sqrt(14), rho), 14),)
    factor = pld.rho_factor(charges, 1.0, 1e-9)
    assert 1.08 < factor < 1.13
    assert pld.plan_epsilon(pld.scaled(charges, factor), 1e-9)[0] <= 1.0
    assert pld.plan_epsilon(pld.scaled(charges, factor + 2e-4), 1e-9)[0] > 1.0
    # 40 selections spending the budget by zCDP: their pure PLD is the looser, nothing grows
    selections = (_selection(accounting.exponential_epsilon(rho, 40) * (1 - 1e-9), times=40),)
    assert pld.plan_epsilon(selections, 1e-9)[1] == "zcdp"
    assert pld.rho_factor(selections, 1.0, 1e-9) == 1.0


def _adult():
    data = jaxdp.datasets.load("adult-reduced")
    return data, all_kway(data.domain.sizes, 2)


def test_a_plan_over_its_pld_budget_is_refused_before_it_runs():
    """A PLD-calibrated Independent whose plan is made to claim a smaller epsilon than its
    charges spend: `jaxdp.pld.check` refuses it, and so does `loop.run` before any round (its
    noise is never drawn). Control: the honest plan passes both."""
    data, workload = _adult()
    mechanism = api.build("independent", data, workload, epsilon=1.0, delta=1e-9, conversion="pld")
    assert mechanism.plan.conversion == "pld"
    assert pld.check(mechanism.plan) is mechanism.plan
    tampered = dataclasses.replace(mechanism, plan=dataclasses.replace(mechanism.plan, epsilon=0.97))
    with pytest.raises(BudgetExceededError, match="privacy loss distribution"):
        pld.check(tampered.plan)
    drawn = []
    original = jaxdp.noise.discrete_gaussian
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jaxdp.noise, "discrete_gaussian", lambda *a, **k: drawn.append(1) or original(*a, **k))
        with pytest.raises(BudgetExceededError, match="privacy loss distribution"):
            loop.run(tampered, jax.random.key(0))
        assert drawn == []
        loop.run(mechanism, jax.random.key(0))
        assert drawn  # the control ran its measurement


def test_a_pld_release_reports_both_accountants():
    """synthesize with conversion "pld": Independent's noise is calibrated by its PLD (sigma
    0.95x zCDP's), the report names accountant "pld" with epsilon_spent its PLD epsilon (at most
    1), and epsilon_zcdp the zCDP figure of the same ledger (above 1). The default conversion
    reports accountant "zcdp", with the PLD figure of its fixed plan below it."""
    data, _ = _adult()
    runs = {}
    for conversion in ("pld", "exact"):
        result = jaxdp.synthesize(
            data,
            data.domain,
            mechanism="independent",
            epsilon=1.0,
            key=jax.random.key(0),
            conversion=conversion,
        )
        runs[conversion] = result.report
    tight, plain = runs["pld"], runs["exact"]
    assert tight["accountant"] == "pld" and tight["conversion"] == "pld"
    assert tight["epsilon_spent"] == tight["epsilon_pld"] <= 1.0 < tight["epsilon_zcdp"]
    assert plain["accountant"] == "zcdp" and plain["epsilon_spent"] == plain["epsilon_zcdp"] <= 1.0
    assert plain["epsilon_pld"] < plain["epsilon_zcdp"]
    ratio = tight["ledger"][0]["scale"] / plain["ledger"][0]["scale"]
    assert 0.93 < ratio < 0.97


def test_a_pld_calibration_is_refused_where_no_theorem_covers_it():
    """AIM's rounds are adaptive (a zCDP filter): conversion "pld" is refused with a message
    naming it, before anything runs; so is a direct factory call."""
    data, workload = _adult()
    with pytest.raises(ValueError, match="'aim' decides its charges as it runs"):
        api.build("aim", data, workload, epsilon=1.0, delta=1e-9, conversion="pld")
    with pytest.raises(ValueError, match=r"jaxdp\.build or jaxdp\.synthesize"):
        jaxdp.independent(data, epsilon=1.0, delta=1e-9, conversion="pld")


def test_an_adaptive_runs_report_has_no_pld_figure():
    data, workload = _adult()
    mechanism = jaxdp.aim(data, workload, epsilon=1.0, delta=1e-9, max_rounds=8, iters=20, final_iters=20)
    result = api.execute("aim", mechanism, jax.random.key(0), data.domain)
    assert result.report["accountant"] == "zcdp" and result.report["epsilon_pld"] is None
    assert result.report["epsilon_spent"] == result.report["epsilon_zcdp"] <= 1.0


def test_a_plan_with_only_rho_has_no_epsilon():
    plan = Plan.from_rho(0.1)
    fields = jaxdp.ledger.budget_fields(plan, [], fixed=True)
    assert fields["epsilon_spent"] is fields["epsilon_pld"] is fields["epsilon_zcdp"] is None


def _schema_table(n: int = 400) -> tuple[dict, dict]:
    """A table given as columns with a table schema (the release goes through preprocessing's
    merge): three categorical columns, dependent."""
    rng = np.random.default_rng(1)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    schema = {
        "columns": {
            "a": {"type": "categorical", "categories": ["x", "y", "z"]},
            "b": {"type": "categorical", "categories": ["p", "q", "r", "s"]},
            "c": {"type": "categorical", "size": 2},
        }
    }
    columns = {
        "a": np.array(["x", "y", "z"])[a],
        "b": np.array(["p", "q", "r", "s"])[b],
        "c": rng.integers(0, 2, n),
    }
    return columns, schema


def test_a_table_schemas_release_states_the_same_accountants():
    """Through a table schema (preprocessing's merge): AIM's adaptive run states no PLD figure;
    a PLD-calibrated Independent states accountant "pld" with its PLD epsilon."""
    columns, schema = _schema_table()
    adaptive = jaxdp.synthesize(
        columns,
        schema,
        mechanism="aim",
        epsilon=1.0,
        key=jax.random.key(0),
        max_rounds=6,
        iters=20,
        final_iters=20,
    ).report
    assert adaptive["preprocessing"] is not None
    assert adaptive["accountant"] == "zcdp" and adaptive["epsilon_pld"] is None
    fixed = jaxdp.synthesize(
        columns, schema, mechanism="independent", epsilon=1.0, key=jax.random.key(0), conversion="pld"
    ).report
    assert fixed["accountant"] == "pld" and fixed["epsilon_spent"] == fixed["epsilon_pld"] <= 1.0
    assert fixed["epsilon_zcdp"] > 1.0
