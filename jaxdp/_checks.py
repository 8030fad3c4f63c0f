"""Host-side argument validation. Messages name the argument and never echo private values."""

from __future__ import annotations

import math
from numbers import Integral, Real


def _is_real(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def positive_finite(value: object, name: str) -> float:
    """A finite float > 0 (epsilon, rho, sigma, ...)."""
    if not _is_real(value) or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def open_unit(value: object, name: str) -> float:
    """A float strictly inside (0, 1) (delta)."""
    if not _is_real(value) or not math.isfinite(float(value)) or not 0 < float(value) < 1:
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def fraction(value: object, name: str, *, allow_zero: bool = False, allow_one: bool = True) -> float:
    """A float in [0, 1] (budget shares); the ends are optional."""
    ok = _is_real(value) and math.isfinite(float(value))
    if ok:
        v = float(value)
        ok = (v > 0 or (allow_zero and v == 0)) and (v < 1 or (allow_one and v == 1))
    if not ok:
        lo = "[0" if allow_zero else "(0"
        hi = "1]" if allow_one else "1)"
        raise ValueError(f"{name} must be a number in {lo}, {hi}, got {value!r}")
    return float(value)


def positive_int(value: object, name: str) -> int:
    """An int >= 1 (rounds, rows, k)."""
    if not isinstance(value, Integral) or isinstance(value, bool) or int(value) < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def one_of(value: object, choices, name: str):
    """`value` if it is among `choices`, else a ValueError listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(map(str, choices))}, got {value!r}")
    return value
