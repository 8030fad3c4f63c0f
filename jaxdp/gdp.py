"""Gaussian differential privacy (Dong, Roth & Su 2022) for runs whose every private draw is an
exact discrete Gaussian: the accountant of conversion "gdp" (AIM-GDP and SWIFT).

A mechanism is mu-GDP when telling neighbours apart from its output is no easier than telling
N(0, 1) from N(mu, 1); the Gaussian mechanism of L2 sensitivity D and noise s is D / s-GDP, and
mu-GDP gives (epsilon, delta)-DP for every epsilon with

    delta(epsilon) = Phi(-epsilon / mu + mu / 2) - e^epsilon Phi(-epsilon / mu - mu / 2)

(their Corollary 2.13), tighter than converting rho = mu^2 / 2 through zCDP: about 11% more rho
at (1, 1e-9). Gaussian-DP composes in mu^2, and does so under a filter: adaptively chosen
mu_i-GDP steps whose sum of mu_i^2 stays within mu^2 are mu-GDP together (Smith & Thakurta 2022,
"Fully adaptive composition for Gaussian differential privacy"; Koskela, Tobaben & Honkela 2023
for Gaussian mechanisms), so a run whose filter keeps the realised sum of mu_i^2 / 2 within a
budget of mu^2 / 2 spends mu.

The discrete Gaussian N_Z(c, s^2) is not exactly 1 / s-GDP (its probit-spaced cdf steps are
about (1 + 1 / (24 s^2)) / s at the centre), so each draw is bounded through a smoothing: with
S = SMOOTHING and s1^2 = s^2 - S^2, draw Y ~ N(c, s1^2) and then X from the discrete Gaussian of
parameter S on the integers centred at Y. X is a post-processing of the Gaussian mechanism at
s1, so D / s1-GDP; and the law of X is that of N_Z(c, s^2) to within a factor e^{+-eta} at every
point, because the Gaussian convolution makes X's mass at k proportional to exp(-(k - c)^2 /
(2 s^2)) / Z_S(Y) averaged over Y, and by Poisson summation Z_S(y) = S sqrt(2 pi) (1 + 2 sum_m
exp(-2 pi^2 S^2 m^2) cos(2 pi m y)) varies by the factor (1 + e2) / (1 - e2) = e^eta at most, e2 =
2 sum_m exp(-2 pi^2 S^2 m^2). So a draw of L2 sensitivity D (integer shifts in every coordinate)
at scale s costs mu = D / sqrt(s^2 - S^2) (`charge_mu`), and the whole run, with every
coordinate within e^{+-eta} of its smoothed twin and the samplers' truncation (mass below
exp(-7000) a coordinate, `jaxdp.samplers`), is (epsilon + 2 H, e^H delta + TAIL)-DP whenever the
twin run is (epsilon, delta)-DP, H = eta times the coordinates drawn (at most 2^64 in any run).
`calibrated_rho` and `spent_epsilon` fold H and TAIL in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

SMOOTHING = 2.0
_E2 = 2.0 * sum(math.exp(-2.0 * math.pi**2 * SMOOTHING**2 * m * m) for m in range(1, 4))
ETA = math.log1p(2.0 * _E2 / (1.0 - _E2))  # ln((1 + e2) / (1 - e2))
COORDINATES = 2.0**64
H = COORDINATES * ETA  # below 4e-15
TAIL = 1e-300  # above 2^64 x 2 exp(-7000)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def delta_of(mu: float, epsilon: float) -> float:
    """delta(epsilon) of mu-GDP (Dong, Roth & Su 2022, Corollary 2.13)."""
    if mu <= 0.0:
        return 0.0
    return max(0.0, _phi(-epsilon / mu + mu / 2.0) - math.exp(epsilon) * _phi(-epsilon / mu - mu / 2.0))


def epsilon_of(mu: float, delta: float) -> float:
    """The smallest epsilon >= 0 with delta_of(mu, epsilon) <= delta (bisection; delta_of falls in
    epsilon), rounded up."""
    if delta_of(mu, 0.0) <= delta:
        return 0.0
    low, high = 0.0, 1.0
    while delta_of(mu, high) > delta:
        low, high = high, 2.0 * high
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if delta_of(mu, middle) > delta else (low, middle)
    return high


def mu_of(epsilon: float, delta: float) -> float:
    """The largest mu with delta_of(mu, epsilon) <= delta (bisection; delta_of rises in mu),
    rounded down."""
    low, high = 0.0, 1.0
    while delta_of(high, epsilon) <= delta:
        low, high = high, 2.0 * high
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if delta_of(middle, epsilon) <= delta else (low, middle)
    return low


def calibrated_rho(epsilon: float, delta: float) -> float:
    """The budget, as mu^2 / 2, of a run that spends (epsilon, delta) by this accountant: mu for
    (epsilon - 2 H, (delta - TAIL) e^-H), so that the discrete run's own guarantee holds."""
    mu = mu_of(epsilon - 2.0 * H, (delta - TAIL) * math.exp(-H))
    return mu * mu / 2.0


def spent_epsilon(mu2: float, delta: float) -> float:
    """The epsilon at `delta` of a discrete run whose mu_i^2 sum to `mu2` (H and TAIL folded in)."""
    return epsilon_of(math.sqrt(mu2), (delta - TAIL) * math.exp(-H)) + 2.0 * H


def charge_mu(primitive: str, sensitivity: float, scale: float) -> float:
    """mu of one exact discrete Gaussian draw: D / sqrt(s^2 - S^2) (module docstring; inf where
    s <= S).

    Raises:
        ValueError: any other primitive (no Gaussian-DP bound here: selections by the exponential
            mechanism, float noise).
    """
    if primitive != "discrete_gaussian":
        raise ValueError(
            f"conversion 'gdp' accounts exact discrete Gaussian draws only, not {primitive!r} "
            "(mechanisms aim-gdp and swift, noise 'discrete')"
        )
    excess = scale * scale - SMOOTHING * SMOOTHING
    return math.inf if excess <= 0.0 else sensitivity / math.sqrt(excess)


def smoothed_sigma(sigma: float) -> float:
    """The discrete Gaussian's scale whose `charge_mu` equals that of scale `sigma` without the
    smoothing: sqrt(sigma^2 + S^2)."""
    return math.sqrt(sigma * sigma + SMOOTHING * SMOOTHING)


def charges_mu2(charges: Iterable[tuple[str, float, float, int]]) -> float:
    """The sum of mu_i^2 over (primitive, sensitivity, scale, times) charges."""
    return math.fsum(times * charge_mu(p, s, scale) ** 2 for p, s, scale, times in charges)
