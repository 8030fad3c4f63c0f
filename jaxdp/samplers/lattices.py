"""Host-side parameters of the exact samplers: the discrete Gaussian's lattice (its variance
2^s / (2 m) and level starts) and the discrete Laplace's integers, in exact arithmetic."""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction

import numpy as np

SIGMA_MIN = 2.0**-6
SIGMA_MAX = 46_000.0  # keeps |y| <= cap < 2^25, so m y^2 fits in 64 bits
LAPLACE_CAP = 2**30
_PRECISION = 2**11  # m >= 2^11: V = 2^s / (2 m) is sigma^2 rounded up by a relative 2^-10 at most
_LEVELS = 2**14  # the Gaussian's support: E(y) = m y^2 / 2^s < 2^14 (level starts on the host)


@dataclasses.dataclass(frozen=True)
class GaussianLattice:
    """Integer parameters of a discrete Gaussian with variance V = 2^s / (2 m) (exact).

    The exponent of y is E(y) = y^2 / (2 V) = m y^2 / 2^s, a dyadic rational.
    m: in [2^11, 2^12), so that V >= sigma^2 is within a relative 2^-10 of it.
    s: the exponent's binary denominator.
    cap: the largest |y| drawn, the largest y with E(y) < 2^14 (about 181 sigma).
    """

    m: int
    s: int
    cap: int

    @property
    def variance(self) -> Fraction:
        """V exactly, as a rational."""
        return Fraction(2**self.s, 2 * self.m)

    def level_start(self, level: int) -> int:
        """The smallest y >= 0 with E(y) >= level."""
        threshold = -(-(level << self.s) // self.m)  # ceil(level 2^s / m): y^2 >= it
        return math.isqrt(threshold - 1) + 1 if threshold > 0 else 0

    def level_starts(self) -> np.ndarray:
        """level_start(g) for g = 0 .. 2^14 - 1 (int64 arithmetic, exact)."""
        return _level_starts(self.m, self.s)


@functools.lru_cache(maxsize=64)
def _level_starts(m: int, s: int) -> np.ndarray:
    levels = np.arange(_LEVELS, dtype=np.int64)
    threshold = -((-(levels << s)) // m)  # ceil(g 2^s / m) < 2^61: a_g^2 >= it
    below = np.maximum(threshold - 1, 0)
    root = np.floor(np.sqrt(below.astype(np.float64))).astype(np.int64)
    while True:  # make root = isqrt(below) exactly (float64 is off by a few at most)
        fixed = np.where(root * root > below, root - 1, root)
        fixed = np.where((fixed + 1) * (fixed + 1) <= below, fixed + 1, fixed)
        if np.array_equal(fixed, root):
            break
        root = fixed
    starts = np.where(threshold > 0, root + 1, 0)
    starts.setflags(write=False)
    return starts


def gaussian_lattice(sigma: float) -> GaussianLattice:
    """The exact lattice parameters for a discrete Gaussian of scale at least `sigma`.

    1 / (2 V) = m / 2^s is 1 / (2 sigma^2) rounded down to 12 significant bits, m >= 2^11: V is at
    least sigma^2 and at most sigma^2 / (1 - 2^-11) < sigma^2 (1 + 2^-10).

    Raises:
        ValueError: sigma outside [SIGMA_MIN, SIGMA_MAX].
    """
    if not isinstance(sigma, int | float) or not math.isfinite(sigma):
        raise ValueError(f"sigma must be a finite number, got {sigma!r}")
    if not SIGMA_MIN <= sigma <= SIGMA_MAX:
        raise ValueError(
            f"discrete Gaussian sigma must be in [{SIGMA_MIN}, {SIGMA_MAX}] (counts), got {sigma!r}; "
            "a larger sigma in counts means a table with many records at a tiny budget"
        )
    precision = 1 / (2 * Fraction(sigma) ** 2)
    s = 0
    while precision * 2**s < _PRECISION:
        s += 1
    m = math.floor(precision * 2**s)
    cap = math.isqrt(((_LEVELS << s) - 1) // m)
    lattice = GaussianLattice(m=m, s=s, cap=cap)
    assert lattice.variance >= Fraction(sigma) ** 2 and cap < 2**25 and s < 48
    return lattice


def laplace_lattice(scale: float) -> tuple[int, int]:
    """(t, s) with scale <= t / s <= scale (1 + 2^-10): the discrete Laplace Lap_Z(t / s),
    P(y) ~ exp(-|y| s / t).

    For scale <= 2^13, t is a power of two (below 2^24) and s = floor(t / scale) >= 2^10 (the
    sampler's fractions u / t are then dyadic); above, s = 1 and t = ceil(scale) < 2^24.
    """
    if not isinstance(scale, int | float) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    exact = Fraction(scale)
    if exact <= 2**13:
        t = 1
        while t < 2**10 * exact:
            t *= 2
        return t, math.floor(t / exact)
    if exact >= 2**24 - 1:
        raise ValueError(f"discrete Laplace scale {scale!r} is too large (at most 2^24 - 1)")
    return math.ceil(exact), 1
