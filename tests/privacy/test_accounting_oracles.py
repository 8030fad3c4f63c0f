"""jaxdp's zCDP accounting against Google's `dp_accounting` and closed forms.

What each side computes:

- `jaxdp.accounting.cdp_delta(rho, eps)` is the Canonne-Kamath-Steinke (2020) conversion for
  rho-zCDP: inf over alpha > 1 of exp((alpha - 1)(alpha rho - eps)) / (alpha - 1) *
  (1 - 1/alpha)^alpha, minimised by bisection over a continuous alpha (from 1.01); `cdp_epsilon`
  inverts it by bisection.
- `dp_accounting.rdp.RdpAccountant` composes Renyi-DP curves on a finite grid of orders (by
  default 1.1, 1.2, ..., 10.9, 11, ..., 63, 128, 256, 512, 1024) and converts with
  eps(alpha) = r(alpha) + log1p(-1/alpha) - (log(delta) + log(alpha)) / (alpha - 1) (its
  `compute_epsilon`, citing CKS 2020 Prop. 12 / Asoodeh et al. 2020), taking the best order of the
  grid, with a KL shortcut (eps = 0 when delta^2 > 1 - exp(-r)). For r(alpha) = rho alpha this is
  the same per-order bound as jaxdp's (the two log-deltas are algebraically equal), so:
  jaxdp's epsilon <= the accountant's on any grid, equal in the limit of a dense grid.
- `dp_accounting.get_epsilon_gaussian` is the exact privacy profile of the Gaussian mechanism
  (Balle & Wang 2018). A Gaussian of noise multiplier z is exactly (1 / (2 z^2))-zCDP, and any
  sound zCDP conversion must give an epsilon at least the exact one.

- The discrete Gaussian (`noise.discrete_gaussian`, the default measurement) is charged as the
  continuous one, rho = Delta^2 / (2 sigma^2) (CKS20 Thm 4). Its Renyi divergences are computed
  here by direct summation with mpmath and checked against that bound, and its (eps, delta) claim
  against `dp_accounting`'s privacy loss distribution of the discrete Gaussian
  (`pld.from_discrete_gaussian_mechanism`; the RDP accountant has no discrete Gaussian event).

All tests are deterministic (fixed grids; Hypothesis derandomised), with false-failure rate 0.
"""

from __future__ import annotations

import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from jaxdp import accounting, samplers
from jaxdp.accounting import Plan, PlannedCharge

# Dense enough that the accountant's grid slack is < 1e-6 relative on the cases below.
DENSE_ORDERS = np.geomspace(1.0101, 1e5, 20_000)
RHOS = [1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 3.0, 10.0]
DELTAS = [1e-2, 1e-3, 1e-6, 1e-9, 1e-12]
NOISE_MULTIPLIERS = [0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]

PROPERTIES = settings(derandomize=True, deadline=None, max_examples=150)


def _rdp_epsilon(event, delta: float, orders=None) -> tuple[float, float]:
    accountant = rdp.RdpAccountant(orders=orders)
    accountant.compose(event)
    eps, order = accountant.get_epsilon_and_optimal_order(delta)
    return float(eps), float(order)


# --- dp_accounting as the oracle ----------------------------------------------------------------


@pytest.mark.parametrize("rho", RHOS)
def test_cdp_epsilon_equals_rdp_conversion_on_a_dense_grid(rho):
    """On a dense order grid the RDP accountant's conversion of rho-zCDP equals jaxdp's exact
    epsilon (relative 1e-6), and never goes below it (jaxdp takes the infimum over all orders)."""
    for delta in DELTAS:
        exact = accounting.cdp_epsilon(rho, delta)
        oracle, _ = _rdp_epsilon(dp_accounting.ZCDpEvent(rho), delta, DENSE_ORDERS)
        assert oracle >= exact - 1e-12
        assert oracle == pytest.approx(exact, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("rho", RHOS)
def test_cdp_delta_equals_rdp_conversion_on_a_dense_grid(rho):
    """The same for delta at fixed epsilon (where the delta is below 0.1: near delta = 1 the
    accountant's KL shortcut can beat the CKS bound, which jaxdp does not use)."""
    accountant = rdp.RdpAccountant(orders=DENSE_ORDERS)
    accountant.compose(dp_accounting.ZCDpEvent(rho))
    for epsilon in (0.1, 0.5, 1.0, 3.0, 10.0):
        exact = accounting.cdp_delta(rho, epsilon)
        if exact > 0.1 or exact < 1e-300:
            continue
        oracle = accountant.get_delta(epsilon)
        assert oracle >= exact * (1.0 - 1e-9)
        assert oracle == pytest.approx(exact, rel=1e-3)


@pytest.mark.parametrize("z", NOISE_MULTIPLIERS)
def test_gaussian_cost_matches_the_accountants_gaussian(z):
    """dp_accounting's Gaussian event (RDP alpha / (2 z^2)) is, order by order, the zCDP curve of
    jaxdp's Gaussian cost rho = Delta^2 / (2 sigma^2) with Delta / sigma = 1 / z."""
    rho = accounting.gaussian_rho(1.0, z)
    assert rho == pytest.approx(accounting.gaussian_rho(3.0, 3.0 * z), rel=1e-15)
    gaussian = rdp.RdpAccountant(orders=DENSE_ORDERS)
    gaussian.compose(dp_accounting.GaussianDpEvent(z))
    np.testing.assert_allclose(gaussian.rdp, rho * DENSE_ORDERS, rtol=1e-12)


@pytest.mark.parametrize("z", NOISE_MULTIPLIERS)
def test_cdp_epsilon_within_the_default_grid(z):
    """With the accountant's default orders, jaxdp's exact epsilon is <= the accountant's (the
    grid can only add slack) and within 10% of it; within 0.1% when the best order lies where the
    default grid is dense (spacing <= 1, orders 1.1 to 63)."""
    rho = accounting.gaussian_rho(1.0, z)
    for delta in (1e-3, 1e-5, 1e-9):
        exact = accounting.cdp_epsilon(rho, delta)
        oracle, order = _rdp_epsilon(dp_accounting.GaussianDpEvent(z), delta)
        assert exact <= oracle + 1e-12
        slack = (oracle - exact) / exact
        assert slack < (1e-3 if order < 63 else 0.1), (z, delta, order)


@pytest.mark.parametrize("z", NOISE_MULTIPLIERS)
def test_cdp_epsilon_is_at_least_the_exact_gaussian_profile(z):
    """jaxdp's epsilon for the Gaussian's rho is >= the Gaussian's exact epsilon (Balle & Wang
    2018): a conversion below it would claim more privacy than the mechanism has. It is also not
    wasteful: within 15% of it for delta <= 1e-5 and z <= 100."""
    rho = accounting.gaussian_rho(1.0, z)
    for delta in (1e-3, 1e-5, 1e-9):
        exact_gaussian = dp_accounting.get_epsilon_gaussian(z, delta)
        converted = accounting.cdp_epsilon(rho, delta)
        assert converted >= exact_gaussian
        if delta <= 1e-5:
            assert converted <= 1.15 * exact_gaussian


def _gaussian_delta(sigma: float, epsilon: float) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism with sensitivity 1 (Balle & Wang 2018)."""
    a = 1.0 / (2.0 * sigma)
    return float(
        stats.norm.cdf(a - epsilon * sigma) - math.exp(epsilon) * stats.norm.cdf(-a - epsilon * sigma)
    )


@PROPERTIES
@given(st.floats(1e-3, 20.0), st.floats(0.0, 30.0))
def test_cdp_delta_is_at_least_the_exact_gaussian_delta(rho, epsilon):
    """Property: cdp_delta(rho, eps) >= the exact delta of a Gaussian that is exactly rho-zCDP."""
    exact = _gaussian_delta(1.0 / math.sqrt(2.0 * rho), epsilon)
    assert accounting.cdp_delta(rho, epsilon) >= exact * (1.0 - 1e-9) - 1e-15


@pytest.mark.parametrize("b", [0.5, 1.0, 2.0, 5.0, 20.0])
def test_laplace_cost_dominates_its_renyi_curve(b):
    """Laplace noise of scale b (sensitivity 1): its exact RDP (Mironov 2017, as dp_accounting
    computes it) is below alpha * eps^2 / 2 with eps = 1/b at every order, so the zCDP cost jaxdp
    charges, `laplace_rho`, is sound; and pure eps-DP bounds the exact epsilon from above."""
    accountant = rdp.RdpAccountant(orders=DENSE_ORDERS)
    accountant.compose(dp_accounting.LaplaceDpEvent(b))
    rho = accounting.laplace_rho(1.0, b)
    assert rho == pytest.approx((1.0 / b) ** 2 / 2.0)
    assert np.all(accountant.rdp <= rho * DENSE_ORDERS * (1.0 + 1e-12))
    for delta in (1e-3, 1e-9):
        assert accountant.get_epsilon(delta) <= accounting.cdp_epsilon(rho, delta) + 1e-12


def test_plan_composition_matches_the_accountant():
    """A Plan's rho adds up its charges; converted, it equals the accountant's composition of the
    same Gaussians (dense grid) and bounds a composition that includes a Laplace."""
    plan = Plan.from_rho(1.0)
    gaussians = [(1.0, 4.0, 3), (math.sqrt(2.0), 5.0, 1), (0.5, 2.5, 2)]  # (sensitivity, sigma, times)
    events = []
    for i, (sensitivity, sigma, times) in enumerate(gaussians):
        plan = plan.with_charge(PlannedCharge(f"g{i}", "gaussian", sensitivity, sigma, times=times))
        events.append(
            dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma / sensitivity), times)
        )
    for delta in (1e-5, 1e-9):
        eps, _ = _rdp_epsilon(dp_accounting.ComposedDpEvent(events), delta, DENSE_ORDERS)
        assert eps == pytest.approx(accounting.cdp_epsilon(plan.rho_planned, delta), rel=1e-6)
    plan = plan.with_charge(PlannedCharge("l", "laplace", 1.0, 8.0))
    events.append(dp_accounting.LaplaceDpEvent(8.0))
    eps, _ = _rdp_epsilon(dp_accounting.ComposedDpEvent(events), 1e-6, DENSE_ORDERS)
    assert eps <= accounting.cdp_epsilon(plan.check().rho_planned, 1e-6) + 1e-12


# --- properties of the conversions -------------------------------------------------------------


@PROPERTIES
@given(st.floats(1e-4, 20.0), st.floats(0.0, 50.0), st.floats(0.0, 50.0))
def test_cdp_delta_decreases_in_epsilon(rho, eps_a, eps_b):
    lo, hi = sorted((eps_a, eps_b))
    assert accounting.cdp_delta(rho, hi) <= accounting.cdp_delta(rho, lo) * (1.0 + 1e-9)


@PROPERTIES
@given(st.floats(1e-4, 20.0), st.floats(1e-4, 20.0), st.floats(0.0, 50.0))
def test_cdp_delta_increases_in_rho(rho_a, rho_b, epsilon):
    lo, hi = sorted((rho_a, rho_b))
    assert accounting.cdp_delta(lo, epsilon) <= accounting.cdp_delta(hi, epsilon) * (1.0 + 1e-9)


@PROPERTIES
@given(st.floats(1e-3, 10.0), st.floats(0.01, 30.0))
def test_cdp_epsilon_inverts_cdp_delta(rho, epsilon):
    delta = accounting.cdp_delta(rho, epsilon)
    assume(1e-250 < delta < 0.5)
    assert accounting.cdp_epsilon(rho, delta) == pytest.approx(epsilon, rel=1e-7, abs=1e-9)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(st.floats(1e-3, 30.0), st.floats(1e-12, 0.5), st.sampled_from(accounting.CONVERSIONS))
def test_rho_from_epsilon_delta_round_trips(epsilon, delta, conversion):
    """epsilon_from_rho(rho_from_epsilon_delta(eps)) == eps. The exact inversion never exceeds
    eps; the closed-form simple one may by rounding (observed <= 6e-12 relative), which the
    mechanisms' calibration margin (1e-9 in rho) absorbs, see the end-to-end test below."""
    rho = accounting.rho_from_epsilon_delta(epsilon, delta, conversion)
    back = accounting.epsilon_from_rho(rho, delta, conversion)
    assert back == pytest.approx(epsilon, rel=1e-9)
    if conversion == "exact":
        assert back <= epsilon
    else:
        assert back <= epsilon * (1.0 + 1e-11)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(st.floats(1e-3, 30.0), st.floats(1e-12, 0.5), st.sampled_from(accounting.CONVERSIONS))
def test_planned_mechanism_never_exceeds_its_epsilon(epsilon, delta, conversion):
    """End to end: a plan from (eps, delta) with one Gaussian charge calibrated on the whole budget
    converts back to at most eps, with no tolerance."""
    plan = Plan.from_epsilon_delta(epsilon, delta, conversion)
    sigma = accounting.gaussian_sigma(1.0, plan.rho_budget)
    plan = plan.with_charge(PlannedCharge("m", "gaussian", 1.0, sigma)).check()
    assert accounting.epsilon_from_rho(plan.rho_planned, delta, conversion) <= epsilon


@PROPERTIES
@given(st.floats(1e-5, 20.0), st.floats(1e-12, 0.5))
def test_exact_epsilon_at_most_simple(rho, delta):
    assert accounting.cdp_epsilon(rho, delta) <= accounting.simple_epsilon(rho, delta)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(st.floats(1e-3, 30.0), st.floats(1e-12, 0.5))
def test_exact_conversion_grants_at_least_the_simple_rho(epsilon, delta):
    exact = accounting.rho_from_epsilon_delta(epsilon, delta, "exact")
    assert exact >= accounting.rho_from_epsilon_delta(epsilon, delta, "simple") * (1.0 - 1e-12)


# --- noise scales: float32, and never cheaper than the plan -------------------------------------

FLOAT32_ULP = 2.0**-23


@PROPERTIES
@given(st.floats(1e-6, 1e3), st.floats(1e-6, 1e2))
def test_gaussian_sigma_is_float32_and_within_budget(sensitivity, rho):
    """gaussian_sigma(Delta, rho) is a float32 value whose cost is <= rho, and tight: within a
    float32 step (the cost of sigma is 1/sigma^2, so within 2 ulps plus the 1e-9 margin)."""
    sigma = accounting.gaussian_sigma(sensitivity, rho)
    assert float(np.float32(sigma)) == sigma
    cost = accounting.gaussian_rho(sensitivity, sigma)
    assert cost <= rho
    assert cost >= rho * (1.0 - 4.0 * FLOAT32_ULP)


@PROPERTIES
@given(st.floats(1e-6, 1e3), st.floats(1e-6, 1e2), st.integers(1, 50))
def test_laplace_and_gumbel_scales_are_float32_and_within_budget(sensitivity, rho, count):
    for primitive, scale, times in (
        ("laplace", accounting.laplace_scale(sensitivity, rho), 1),
        ("exponential", accounting.gumbel_scale(sensitivity, rho, count), count),
    ):
        assert float(np.float32(scale)) == scale
        cost = accounting.charge_rho(primitive, sensitivity, scale, times)
        assert cost <= rho
        assert cost >= rho * (1.0 - 4.0 * FLOAT32_ULP)


# --- pinned values ------------------------------------------------------------------------------


def test_pinned_values():
    """Reference values pinned by the project (relative tolerance 1e-12: a few float64 ulps)."""
    assert accounting.cdp_delta(0.05, 0.25) == pytest.approx(0.0817727531036956, rel=1e-12)
    assert accounting.cdp_epsilon(1.0 / 32.0, 1e-3) == pytest.approx(0.6880024554878085, rel=1e-12)


# --- the discrete Gaussian's zCDP bound (CKS20 Thm 4) --------------------------------------------
#
# D_alpha(N_Z(mu, V) || N_Z(0, V)) = 1 / (alpha - 1) log sum_y P(y)^alpha Q(y)^(1 - alpha), computed
# by direct summation over the integers with mpmath (50 digits), for V = the sampler's lattice
# variance. Algebra gives D_alpha = alpha mu^2 / (2 V) + log(Z(alpha mu) / Z(0)) / (alpha - 1), with
# Z(s) = sum_y exp(-(y - s)^2 / (2 V)) <= Z(0): equal to the bound when alpha mu is an integer,
# below it otherwise, by a margin that vanishes like exp(-2 pi^2 V).

DG_SIGMAS = [0.3, 0.7, 2.0, 10.0]
DG_SHIFTS = [1, 2, 5]
DG_ORDERS = [1.01, 1.5, 2.0, 3.7, 10.0, 50.0]


@mpmath.workdps(50)
def _discrete_gaussian_renyi(variance, mu: int, alpha: float) -> mpmath.mpf:
    """D_alpha(N_Z(mu, V) || N_Z(0, V)) by direct summation (radius 60 sqrt(V) + alpha mu + 20 around
    the mass of the tilted sum; the omitted terms are below exp(-1800) relative)."""
    v = mpmath.mpf(variance.numerator) / variance.denominator
    alpha = mpmath.mpf(alpha)
    radius = int(60 * mpmath.sqrt(v) + alpha * mu) + 20
    ys = range(-radius, radius + mu + 1)
    log_p = [-((mpmath.mpf(y) - mu) ** 2) / (2 * v) for y in ys]
    log_q = [-(mpmath.mpf(y) ** 2) / (2 * v) for y in ys]
    log_z = mpmath.log(mpmath.fsum(mpmath.exp(x) for x in log_q))  # the same normaliser for both
    total = mpmath.fsum(
        mpmath.exp(alpha * (a - log_z) + (1 - alpha) * (b - log_z)) for a, b in zip(log_p, log_q, strict=True)
    )
    return mpmath.log(total) / (alpha - 1)


@pytest.mark.parametrize("sigma", DG_SIGMAS)
@mpmath.workdps(50)
def test_discrete_gaussian_renyi_divergence_below_zcdp_bound(sigma):
    """For the sampler's variance V = gaussian_lattice(sigma).variance, integer shifts mu and orders
    alpha: D_alpha(N_Z(mu, V) || N_Z(0, V)) <= alpha mu^2 / (2 V) <= alpha * charge_rho(
    "discrete_gaussian", mu, sigma) (the charge uses sigma^2 <= V). Equal (relative 1e-30) when
    alpha mu is an integer; strictly below otherwise, and nearly tight for sigma >= 2 (relative
    1e-15). sigma = 0.3 (V = 0.09) shows the slack at small V: D_1.5 for mu = 1 is 1.40 below the
    bound 8.33. Deterministic (false-failure rate 0)."""
    lattice = samplers.gaussian_lattice(sigma)
    v = mpmath.mpf(lattice.variance.numerator) / lattice.variance.denominator
    for mu in DG_SHIFTS:
        charge = accounting.charge_rho("discrete_gaussian", float(mu), sigma)
        for alpha in DG_ORDERS:
            divergence = _discrete_gaussian_renyi(lattice.variance, mu, alpha)
            bound = mpmath.mpf(alpha) * mu**2 / (2 * v)
            assert divergence <= bound * (1 + mpmath.mpf(10) ** -40), (sigma, mu, alpha)
            assert float(bound) <= alpha * charge * (1 + 1e-12)
            if float(alpha * mu).is_integer():
                assert float(divergence / bound) == pytest.approx(1.0, rel=1e-30)
            if sigma >= 2.0:
                assert float(divergence / bound) == pytest.approx(1.0, rel=1e-15)
    if sigma == 0.3:
        gap = 1.5 / (2 * float(lattice.variance)) - float(_discrete_gaussian_renyi(lattice.variance, 1, 1.5))
        assert 1.35 < gap < 1.45


def test_discrete_gaussian_renyi_of_a_vector_adds_over_coordinates():
    """For a shift (1, 2) of a 2-coordinate discrete Gaussian, the Renyi divergence computed on the
    2-D product law equals the sum over coordinates and is <= alpha (1 + 4) / (2 V): the L2
    sensitivity charge of noise.discrete_gaussian. sigma = 0.7, alpha = 2.5 and 10.
    Deterministic."""
    lattice = samplers.gaussian_lattice(0.7)
    radius = 40
    ys = np.arange(-radius, radius + 3, dtype=np.float64)
    with mpmath.workdps(40):
        # the variance exactly (a rational): its float rounding alone moves d_joint by ~1e-17
        v = mpmath.mpf(lattice.variance.numerator) / lattice.variance.denominator
        q = [mpmath.exp(-(mpmath.mpf(y) ** 2) / (2 * v)) for y in ys]
        z = mpmath.fsum(q)
        for alpha in (2.5, 10.0):
            a = mpmath.mpf(alpha)
            p1 = [mpmath.exp(-((mpmath.mpf(y) - 1) ** 2) / (2 * v)) for y in ys]
            p2 = [mpmath.exp(-((mpmath.mpf(y) - 2) ** 2) / (2 * v)) for y in ys]
            joint = mpmath.fsum(
                (p1[i] * p2[j] / z**2) ** a * (q[i] * q[j] / z**2) ** (1 - a)
                for i in range(ys.size)
                for j in range(ys.size)
            )
            d_joint = mpmath.log(joint) / (a - 1)
            d_sum = _discrete_gaussian_renyi(lattice.variance, 1, alpha) + _discrete_gaussian_renyi(
                lattice.variance, 2, alpha
            )
            assert float(d_joint) == pytest.approx(float(d_sum), rel=1e-25)
            # equality at alpha = 10 (alpha times each shift is an integer): allow 40-digit rounding
            assert d_joint <= a * 5 / (2 * v) * (1 + mpmath.mpf(10) ** -30)
            assert float(d_joint) <= alpha * accounting.charge_rho(
                "discrete_gaussian", math.sqrt(5.0), 0.7
            ) * (1 + 1e-12)


@pytest.mark.parametrize("sigma", [0.3, 0.7, 2.0, 10.0])
@pytest.mark.parametrize("sensitivity", [1, 2])
def test_discrete_gaussian_charge_against_the_pld_accountant(sigma, sensitivity):
    """jaxdp's (eps, delta) for one discrete Gaussian, cdp_epsilon(charge_rho("discrete_gaussian",
    Delta, sigma), delta), against dp_accounting's privacy loss distribution of the discrete
    Gaussian with the sampler's variance (`from_discrete_gaussian_mechanism(sqrt(V), Delta)`,
    discretisation 1e-4):
    - sound: >= the PLD's optimistic epsilon (a lower bound on the true epsilon);
    - not wasteful for sigma >= 2: within 12% of the PLD's pessimistic epsilon (computed: 7.7% at
      sigma = 2, 10% at sigma = 10); at sigma = 0.3 the zCDP route is loose (20.4 vs 16.6).
    Also for 10-fold composition (sigma >= 2 only, for speed). Deterministic."""
    lattice = samplers.gaussian_lattice(sigma)
    root = math.sqrt(lattice.variance)
    folds = [1, 10] if sigma >= 2.0 else [1]
    for fold in folds:
        optimistic = pld.from_discrete_gaussian_mechanism(
            root, sensitivity=sensitivity, pessimistic_estimate=False
        )
        pessimistic = pld.from_discrete_gaussian_mechanism(root, sensitivity=sensitivity)
        if fold > 1:
            optimistic, pessimistic = optimistic.self_compose(fold), pessimistic.self_compose(fold)
        rho = fold * accounting.charge_rho("discrete_gaussian", float(sensitivity), sigma)
        assert rho == pytest.approx(fold * sensitivity**2 / (2.0 * sigma**2), rel=1e-12)
        for delta in (1e-5, 1e-9):
            claimed = accounting.cdp_epsilon(rho, delta)
            assert claimed >= optimistic.get_epsilon_for_delta(delta), (sigma, sensitivity, fold, delta)
            if sigma >= 2.0:
                assert claimed <= 1.12 * pessimistic.get_epsilon_for_delta(delta)
