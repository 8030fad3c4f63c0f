"""The laws the rejection engine draws from: the discrete Gaussian and Laplace by level sets,
Bernoulli(exp(-gamma)), and the exponential mechanism's choice (each a proposal, a level test and
a placement in the level, with the arrays it needs as a NamedTuple of parameters)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp

from jaxdp.samplers.integers import (
    _below,
    _divide,
    _Dyadic,
    _lemire_threshold,
    _less,
    _mul_wide,
    _shift_left,
    _subtract,
)
from jaxdp.samplers.lattices import _LEVELS, LAPLACE_CAP
from jaxdp.samplers.rejection import _FAILED, _REACHED, _fraction_of, _stored
from jaxdp.types import Array


class GaussianParams(NamedTuple):
    """The discrete Gaussian sampler's parameters as arrays (`gaussian_params`): data, so that one
    compiled program can sample at several scales (a mechanism's noise scale is a leaf)."""

    m: Array  # uint32
    s: Array  # uint32
    starts: Array  # int32 (2^14,): level starts a_g
    window: Array  # uint32: the point's uniform bound
    threshold: Array  # uint32: Lemire threshold for `window`


@dataclasses.dataclass(frozen=True)
class _Gaussian:
    """P(y) ~ exp(-E(y)), E(y) = m y^2 / 2^s, by level sets.

    Level g = {y : floor(E(y)) = g}; its nonnegative part starts at a_g. A point z uniform below
    the window W = max(2 a_1 - 1, 2 (a_2 - a_1 + 1)) picks y = z - (a_1 - 1) in level 0 and
    y = +-(a_g + z // 2) (sign z mod 2) in a level g >= 1; y is kept if E(y) < g + 1. Every y of
    level g has exactly one z (widths of levels >= 1 are at most a_2 - a_1 + 1).
    """

    def empty_aux(self, size: int) -> tuple:
        return (jnp.zeros(size, jnp.uint32),)

    def stored(self, size: int) -> tuple:
        return ()

    def propose(self, p: GaussianParams, words: Array, aux: tuple) -> tuple[tuple, Array]:
        z, ok = _below(words, p.window, p.threshold)
        return (z,), ok

    def reached(self, p: GaussianParams, aux: tuple, g: Array) -> Array:
        return g >= _LEVELS

    def _point(self, p: GaussianParams, aux: tuple, g: Array) -> tuple[Array, Array, Array]:
        """(|y|, y < 0, in the window's part of level g) of the point z in level g."""
        z = aux[0].astype(jnp.int32)
        first = p.starts[1]
        level0 = g == 0
        magnitude = jnp.where(
            level0, jnp.abs(z - (first - 1)), p.starts[jnp.clip(g, 0, _LEVELS - 1)] + (z >> 1)
        )
        negative = jnp.where(level0, z < first - 1, (z & 1) == 1)
        return magnitude, negative, jnp.where(level0, z < 2 * first - 1, magnitude < 2**25)

    def value(self, p: GaussianParams, aux: tuple, g: Array) -> Array:
        magnitude, negative, _ = self._point(p, aux, g)
        return jnp.where(negative, -magnitude, magnitude)

    def place(self, p: GaussianParams, aux: tuple, status: Array, g: Array):
        """(valid, f = E(y) - g) for level g; invalid if the walk reached 2^14 or y is not in
        level g."""
        magnitude, _, inside = self._point(p, aux, g)
        inside = inside & (status == _FAILED)
        y = jnp.minimum(magnitude, 2**25 - 1).astype(jnp.uint32)
        high, low = _mul_wide(y, y)
        carry, low = _mul_wide(low, p.m)
        exponent = (high * p.m + carry, low)  # m y^2 < 2^62
        level = g.astype(jnp.uint32)
        zero = jnp.zeros_like(level)
        inside = inside & _less(exponent, _shift_left((zero, level + 1), p.s))
        fraction = _shift_left(_subtract(exponent, _shift_left((zero, level), p.s)), 64 - p.s)
        return inside, _Dyadic(*fraction)


class _LaplaceParams(NamedTuple):
    denominator: Array  # uint32 t: P(X) ~ exp(-X / t)
    shift: Array  # uint32 32 - log2(t) when t is a power of two
    window: Array  # uint32 2 t
    threshold: Array
    last_level: Array  # int32 LAPLACE_CAP // t
    magic: tuple  # division by s


@dataclasses.dataclass(frozen=True)
class _Laplace:
    """Lap_Z(t / s) (CKS20 Algorithm 2): X >= 0 with P(X) ~ exp(-X / t) by level sets (level g =
    [g t, (g + 1) t), all of width t: X = g t + u, u uniform below t, f = u / t), a sign, and
    y = +-floor(X / s), rejecting -0. X > LAPLACE_CAP is rejected. `dyadic`: t is a power of two."""

    dyadic: bool

    def empty_aux(self, size: int) -> tuple:
        return (jnp.zeros(size, jnp.uint32),)

    def stored(self, size: int) -> tuple:
        return _stored(size, self.dyadic)

    def propose(self, p: _LaplaceParams, words: Array, aux: tuple) -> tuple[tuple, Array]:
        v, ok = _below(words, p.window, p.threshold)
        return (v,), ok

    def reached(self, p: _LaplaceParams, aux: tuple, g: Array) -> Array:
        return g > p.last_level

    def _point(self, p: _LaplaceParams, aux: tuple, g: Array) -> tuple[Array, Array, Array]:
        """(X, |y|, y < 0)."""
        u, negative = aux[0] >> 1, (aux[0] & 1) == 1
        x = jnp.minimum(g, p.last_level) * p.denominator.astype(jnp.int32) + u.astype(jnp.int32)
        return x, _divide(x.astype(jnp.uint32), p.magic).astype(jnp.int32), negative

    def value(self, p: _LaplaceParams, aux: tuple, g: Array) -> Array:
        _, magnitude, negative = self._point(p, aux, g)
        return jnp.where(negative, -magnitude, magnitude)

    def place(self, p: _LaplaceParams, aux: tuple, status: Array, g: Array):
        x, magnitude, negative = self._point(p, aux, g)
        valid = (status == _FAILED) & (x <= LAPLACE_CAP) & ~(negative & (magnitude == 0))
        return valid, _fraction_of(aux[0] >> 1, p, self.dyadic)


class _ExponentParams(NamedTuple):
    denominator: Array  # uint32 D: gamma = N / D
    shift: Array  # uint32 32 - log2(D) when D is a power of two


@dataclasses.dataclass(frozen=True)
class _Exponent:
    """Bernoulli(exp(-gamma)), gamma = N / D (N two words, the last two entries of aux): the whole
    part floor(gamma) by Bernoulli(exp(-1)) trials that must all succeed (`reached(g)`: g >=
    floor(gamma), i.e. (g + 1) D > N), then the fraction (N - g D) / D. `dyadic`: D is a power
    of two."""

    dyadic: bool

    def stored(self, size: int) -> tuple:
        return _stored(size, self.dyadic)

    def propose(self, p, words: Array, aux: tuple) -> tuple[tuple, Array]:
        return aux, jnp.ones(words.shape, bool)

    def reached(self, p, aux: tuple, g: Array) -> Array:
        return _less((aux[-2], aux[-1]), _mul_wide(g.astype(jnp.uint32) + 1, p.denominator))

    def place(self, p, aux: tuple, status: Array, g: Array):
        _, rest = _subtract((aux[-2], aux[-1]), _mul_wide(g.astype(jnp.uint32), p.denominator))
        return status == _REACHED, _fraction_of(rest, p, self.dyadic)


class _ChoiceParams(NamedTuple):
    denominator: Array  # uint32: the rate's denominator D
    shift: Array  # uint32 32 - log2(D) when D is a power of two
    numerator: Array  # uint32: the rate's numerator
    gaps: Array  # (n,) uint32
    eligible: Array  # (n,) bool


@dataclasses.dataclass(frozen=True)
class _Choice(_Exponent):
    """A proposal i uniform below n, kept if eligible, accepted with Bernoulli(exp(-rate gap_i));
    aux = (i, gap_i * rate numerator as two words)."""

    def propose(self, p: _ChoiceParams, words: Array, aux: tuple) -> tuple[tuple, Array]:
        n = p.gaps.shape[0]
        index, ok = _below(words, n, _lemire_threshold(n))
        high, low = _mul_wide(p.gaps[index], jnp.broadcast_to(p.numerator, words.shape))
        return (index, high, low), ok & p.eligible[index]
