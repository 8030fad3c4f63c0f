"""Privacy accounting in zero-concentrated DP (rho-zCDP), exact host maths.

This module never imports jax: a budget is settled in float64 on the host before anything is
compiled, and the same functions re-derive every ledger entry's cost during an audit.

Costs of the primitives (each a rho-zCDP guarantee):
- Gaussian noise of scale sigma on a query of L2 sensitivity Delta: rho = Delta^2 / (2 sigma^2)
  (Bun & Steinke 2016, Prop. 1.6).
- Laplace noise of scale b on a query of L1 sensitivity Delta: epsilon = Delta / b pure DP, hence
  rho = epsilon^2 / 2 (Bun & Steinke 2016, Prop. 1.4).
- Exponential mechanism (Gumbel-max) with parameter epsilon on a score of sensitivity Delta,
  sampling with probability proportional to exp(epsilon * score / (2 Delta)): it is
  epsilon-bounded-range, hence rho = epsilon^2 / 8 (Cesar & Rogers 2021, Lemma 3.2; the bound AIM
  and RAP++ use).
- One-shot Gumbel top-k with parameter epsilon per selection: equivalent to k adaptive exponential
  mechanisms (Durfee & Rogers 2019), hence rho = k epsilon^2 / 8 (Cesar & Rogers 2021).
Composition adds rho. Conversion to (epsilon, delta): `cdp_delta` / `cdp_epsilon` are the exact
conversion of Canonne, Kamath & Steinke 2020 (Prop. 7 there; OpenDP's `cdp_delta`), and
`simple_epsilon` is the bound rho + 2 sqrt(rho log(1/delta)) of Bun & Steinke 2016 that the GEM,
PEP and RAP papers use.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxdp import _checks, gdp

CONVERSIONS = ("exact", "simple")
# How a budget may be calibrated: a zCDP conversion, "pld" (a fixed plan's noise calibrated by its
# privacy loss distribution, `jaxdp.pld`, where that is tighter; `jaxdp.build`), or "gdp" (a run
# of exact discrete Gaussians only, under a Gaussian-DP filter: `jaxdp.gdp`; AIM-GDP and SWIFT)
CALIBRATIONS = (*CONVERSIONS, "pld", "gdp")

# A relative margin applied whenever a noise scale is derived from a budget share, so that the
# cost recomputed from the (rounded) scale is strictly below the share.
_CALIBRATION_MARGIN = 1e-9


class BudgetExceededError(ValueError):
    """A plan would spend more privacy budget than was granted."""


# --- costs of primitives -------------------------------------------------------------------------


def gaussian_rho(sensitivity: float, sigma: float) -> float:
    """rho of the Gaussian mechanism with L2 sensitivity `sensitivity` and scale `sigma`."""
    return sensitivity**2 / (2.0 * sigma**2)


def float32_ceil(x: float) -> float:
    """The smallest float32 value >= x.

    Noise is drawn in float32, so a scale must be representable there; rounding it up (never
    down) keeps the cost computed from the scale actually used within the budget.
    """
    y = np.float32(x)
    if float(y) < x:
        y = np.nextafter(y, np.float32(np.inf))
    return float(y)


def gaussian_sigma(sensitivity: float, rho: float) -> float:
    """The smallest safe float32 sigma for L2 sensitivity `sensitivity` at cost at most `rho`."""
    _checks.positive_finite(rho, "rho")
    return float32_ceil(sensitivity / math.sqrt(2.0 * rho) * (1.0 + _CALIBRATION_MARGIN))


def laplace_rho(sensitivity: float, scale: float) -> float:
    """rho implied by the Laplace mechanism (pure epsilon = sensitivity / scale)."""
    return (sensitivity / scale) ** 2 / 2.0


def laplace_scale(sensitivity: float, rho: float) -> float:
    """The smallest safe float32 Laplace scale for L1 sensitivity `sensitivity` at cost `rho`."""
    _checks.positive_finite(rho, "rho")
    return float32_ceil(sensitivity / math.sqrt(2.0 * rho) * (1.0 + _CALIBRATION_MARGIN))


def exponential_rho(epsilon: float, count: int = 1) -> float:
    """rho of `count` exponential-mechanism selections at `epsilon` each (bounded range)."""
    return count * epsilon**2 / 8.0


def exponential_epsilon(rho: float, count: int = 1) -> float:
    """The largest epsilon per selection for `count` selections costing at most `rho`."""
    _checks.positive_finite(rho, "rho")
    return math.sqrt(8.0 * rho / count)


def gumbel_scale(sensitivity: float, rho: float, count: int = 1) -> float:
    """The smallest safe float32 Gumbel scale for `count` exponential-mechanism selections.

    Selecting argmax(score / scale + Gumbel(0, 1)) samples proportionally to
    exp(score / scale), the exponential mechanism with epsilon = 2 sensitivity / scale.
    """
    epsilon = exponential_epsilon(rho, count)
    return float32_ceil(2.0 * sensitivity / epsilon * (1.0 + _CALIBRATION_MARGIN))


# The primitives a mechanism plans with, by its `noise` option ("discrete" is exact; "float" is
# for speed experiments, see jaxdp.noise).
MEASURE_PRIMITIVE = {"discrete": "discrete_gaussian", "float": "gaussian"}
SELECT_PRIMITIVE = {"discrete": "discrete_exponential", "float": "exponential"}
TOP_K_PRIMITIVE = {"discrete": "discrete_top_k", "float": "gumbel_top_k"}


def charge_rho(primitive: str, sensitivity: float, scale: float, count: int = 1) -> float:
    """The rho of one ledger entry, recomputed from what the primitive actually used.

    The discrete Gaussian's variance parameter is at least scale^2 and its rho is the continuous
    one's (Canonne, Kamath & Steinke 2020); the exact exponential mechanism's epsilon is at most
    2 sensitivity / scale (jaxdp.noise.discrete_exponential).
    """
    if primitive in ("gaussian", "discrete_gaussian"):
        return gaussian_rho(sensitivity, scale)
    if primitive in ("laplace", "discrete_laplace"):
        return laplace_rho(sensitivity, scale)
    if primitive in ("exponential", "gumbel_top_k", "discrete_exponential", "discrete_top_k"):
        return exponential_rho(2.0 * sensitivity / scale, count)
    raise ValueError(f"unknown primitive {primitive!r}")


# --- conversions ---------------------------------------------------------------------------------


def cdp_delta(rho: float, epsilon: float) -> float:
    """Exact delta such that rho-zCDP implies (epsilon, delta)-DP (Canonne, Kamath, Steinke 2020).

    delta = inf_{alpha > 1} exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1) * (1 - 1/alpha)^alpha.
    Any alpha gives a valid bound; the optimum is found by bisection on the derivative of the log,
    which is increasing in alpha.
    """
    if rho < 0 or epsilon < 0:
        raise ValueError("rho and epsilon must be >= 0")
    if rho == 0:
        return 0.0
    lo = 1.01  # near alpha = 1 the bound is numerically unstable and never optimal in practice
    hi = (epsilon + 1.0) / (2.0 * rho) + 2.0
    alpha = 0.5 * (lo + hi)
    while lo < alpha < hi:  # bisect until the interval cannot shrink in float64
        slope = (2.0 * alpha - 1.0) * rho - epsilon + math.log1p(-1.0 / alpha)
        if slope < 0:
            lo = alpha
        else:
            hi = alpha
        alpha = 0.5 * (lo + hi)
    log_delta = (alpha - 1.0) * (alpha * rho - epsilon) + alpha * math.log1p(-1.0 / alpha)
    # in logs, so that a huge budget's delta caps at 1 instead of overflowing exp
    return math.exp(min(log_delta - math.log(alpha - 1.0), 0.0))


def cdp_epsilon(rho: float, delta: float) -> float:
    """Smallest epsilon with cdp_delta(rho, epsilon) <= delta (exact conversion)."""
    _checks.open_unit(delta, "delta")
    if rho < 0:
        raise ValueError("rho must be >= 0")
    if rho == 0:
        return 0.0
    lo, hi = 0.0, simple_epsilon(rho, delta)
    mid = 0.5 * (lo + hi)
    while lo < mid < hi:
        if cdp_delta(rho, mid) <= delta:
            hi = mid
        else:
            lo = mid
        mid = 0.5 * (lo + hi)
    return hi


def simple_epsilon(rho: float, delta: float) -> float:
    """The bound epsilon = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016, Prop. 1.3)."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def rho_from_epsilon_delta(epsilon: float, delta: float, conversion: str = "exact") -> float:
    """The largest rho whose conversion to (epsilon', delta) has epsilon' <= epsilon.

    Args:
        epsilon: target epsilon, > 0.
        delta: target delta in (0, 1).
        conversion: "exact" (Canonne-Kamath-Steinke; more rho for the same guarantee) or
            "simple" (rho + 2 sqrt(rho log 1/delta), as the GEM/PEP/RAP papers).

    Returns:
        rho, the zCDP budget.
    """
    epsilon = _checks.positive_finite(epsilon, "epsilon")
    delta = _checks.open_unit(delta, "delta")
    _checks.one_of(conversion, CONVERSIONS, "conversion")
    log_inv = math.log(1.0 / delta)
    simple = (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2
    if conversion == "simple":
        # The closed form can land a few ulps above the exact root; step below it so that
        # converting back never exceeds the requested epsilon.
        return simple * (1.0 - 1e-12)
    # The exact conversion is never worse than the simple one, so simple is a lower bracket.
    lo, hi = simple, epsilon + 1.0
    while cdp_epsilon(hi, delta) <= epsilon:  # pragma: no cover - only for extreme inputs
        hi *= 2.0
    mid = 0.5 * (lo + hi)
    while lo < mid < hi:
        if cdp_epsilon(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
        mid = 0.5 * (lo + hi)
    return lo


def epsilon_from_rho(rho: float, delta: float, conversion: str = "exact") -> float:
    """Convert rho-zCDP to the epsilon of (epsilon, delta)-DP by the named conversion."""
    _checks.one_of(conversion, CONVERSIONS, "conversion")
    return cdp_epsilon(rho, delta) if conversion == "exact" else simple_epsilon(rho, delta)


# --- plans ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PlannedCharge:
    """One kind of private primitive a mechanism will invoke `times` times."""

    label: str
    primitive: str
    sensitivity: float
    scale: float
    count: int = 1
    times: int = 1

    @property
    def rho(self) -> float:
        return self.times * charge_rho(self.primitive, self.sensitivity, self.scale, self.count)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A privacy budget and the charges a mechanism commits to before it runs.

    Build one with `Plan.from_epsilon_delta` (or a rho budget), add charges with `with_charge`,
    and `check()` refuses it if the charges exceed the budget. Mechanism factories calibrate their
    noise from shares of `rho_budget`, so a correct factory always passes `check()`.
    """

    rho_budget: float
    epsilon: float | None = None
    delta: float | None = None
    conversion: str | None = None
    charges: tuple[PlannedCharge, ...] = ()

    @classmethod
    def from_epsilon_delta(cls, epsilon: float, delta: float, conversion: str = "exact") -> Plan:
        """The budget of (epsilon, delta): rho by a zCDP conversion, or under "gdp" the
        Gaussian-DP budget mu^2 / 2 (`jaxdp.gdp.calibrated_rho`), whose charges are then costed
        in mu^2 / 2 (`check`)."""
        if conversion == "gdp":
            _checks.positive_finite(epsilon, "epsilon")
            _checks.open_unit(delta, "delta")
            rho = gdp.calibrated_rho(float(epsilon), float(delta))
        else:
            rho = rho_from_epsilon_delta(epsilon, delta, conversion)
        return cls(rho_budget=rho, epsilon=float(epsilon), delta=float(delta), conversion=conversion)

    @classmethod
    def from_rho(cls, rho: float) -> Plan:
        return cls(rho_budget=_checks.positive_finite(rho, "rho"))

    def share(self, fraction: float) -> float:
        """A fraction of the budget, in rho."""
        return self.rho_budget * _checks.fraction(fraction, "budget fraction")

    def with_charge(self, charge: PlannedCharge) -> Plan:
        return dataclasses.replace(self, charges=(*self.charges, charge))

    @property
    def rho_planned(self) -> float:
        return math.fsum(c.rho for c in self.charges)

    def check(self) -> Plan:
        """Return self, or raise BudgetExceededError if the charges exceed the budget's rho. (A
        plan calibrated by its privacy loss distribution, conversion "pld", also has its
        (epsilon, delta) checked by `jaxdp.pld.check`, where it is built and audited.)"""
        if self.rho_planned > self.rho_budget:
            raise BudgetExceededError(
                f"plan spends rho={self.rho_planned:.6g} but the budget is rho={self.rho_budget:.6g}"
            )
        if self.conversion == "gdp":
            spent = self.gdp_planned / 2.0
            if spent > self.rho_budget:
                raise BudgetExceededError(
                    f"plan spends mu^2/2={spent:.6g} by its Gaussian-DP charges but the budget is "
                    f"mu^2/2={self.rho_budget:.6g}"
                )
        return self

    @property
    def gdp_planned(self) -> float:
        """The sum of the charges' mu^2 (`jaxdp.gdp.charge_mu`); ValueError for a charge that is
        not an exact discrete Gaussian."""
        return gdp.charges_mu2((c.primitive, c.sensitivity, c.scale, c.times * c.count) for c in self.charges)
