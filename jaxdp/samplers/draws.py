"""The public samplers: draws of the discrete Gaussian and Laplace, Bernoulli(exp(-gamma)) and the
exponential mechanism's choice, each from one key."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp._background import Compiler
from jaxdp._jit import fast_compiled
from jaxdp.samplers.integers import (
    _WORD,
    _consume,
    _denominator,
    _division_magic,
    _draw,
    _dyadic_shift,
    _lemire_threshold,
    _u32,
)
from jaxdp.samplers.lattices import LAPLACE_CAP, GaussianLattice
from jaxdp.samplers.laws import (
    GaussianParams,
    _Choice,
    _ChoiceParams,
    _Exponent,
    _ExponentParams,
    _Gaussian,
    _Laplace,
    _LaplaceParams,
)
from jaxdp.samplers.rejection import IDLE, _commit, _rejection, _slots, _step
from jaxdp.types import Array, Key, array_module

# --- public samplers --------------------------------------------------------------------------------


def gaussian_params(lattice: GaussianLattice) -> GaussianParams:
    """The sampler's arrays for `lattice` (host arithmetic, exact; NumPy arrays, so that building
    them compiles nothing)."""
    starts = lattice.level_starts()
    window = max(2 * int(starts[1]) - 1, 2 * int(starts[2] - starts[1] + 1))
    return GaussianParams(
        m=np.uint32(lattice.m),
        s=np.uint32(lattice.s),
        starts=np.asarray(starts, np.int32),
        window=np.uint32(window),
        threshold=np.uint32(_lemire_threshold(window)),
    )


def discrete_gaussian(key: Key, shape: tuple[int, ...], lattice: GaussianLattice | GaussianParams) -> Array:
    """int32 draws from the discrete Gaussian N_Z(0, lattice.variance), i.i.d. over `shape`,
    conditioned on |y| <= lattice.cap (level sets of E(y) = y^2 / (2 V), module docstring).
    `lattice` may be given as its arrays (`gaussian_params`), traced or not: the same draws."""
    params = gaussian_params(lattice) if isinstance(lattice, GaussianLattice) else lattice
    return _rejection(_Gaussian(), params, _consume(key), math.prod(shape)).reshape(shape)


def discrete_laplace(key: Key, shape: tuple[int, ...], t: int, s: int) -> Array:
    """int32 draws from Lap_Z(t / s): P(y) proportional to exp(-|y| s / t) (CKS20 Algorithm 2),
    truncated at |y| <= 2^30 / s (the mass beyond is below exp(-2^30 / t) < exp(-60))."""
    if not (isinstance(t, int) and isinstance(s, int) and 1 <= t < 2**24 and 1 <= s < _WORD):
        raise ValueError(f"discrete Laplace needs integers 1 <= t < 2^24 and s >= 1, got {t!r}, {s!r}")
    denominator, shift, dyadic = _denominator(t)
    params = _LaplaceParams(
        denominator=denominator,
        shift=shift,
        window=_u32(2 * t),
        threshold=_u32(_lemire_threshold(2 * t)),
        last_level=jnp.int32(LAPLACE_CAP // t),
        magic=tuple(_u32(v) for v in _division_magic(s)),
    )
    return _rejection(_Laplace(dyadic), params, _consume(key), math.prod(shape)).reshape(shape)


def bernoulli_exp(key: Key, high: Array, low: Array, denominator) -> Array:
    """Bernoulli(exp(-gamma)) with gamma = (high 2^32 + low) / denominator (CKS20 Algorithm 1).

    Args:
        high, low: uint32 arrays, the numerator's words.
        denominator: in [1, 2^32): a Python int or a uint32 scalar array.
    """
    high, low = jnp.asarray(high, jnp.uint32), jnp.asarray(low, jnp.uint32)
    denominator, shift, dyadic = _denominator(denominator)
    params = _ExponentParams(denominator=denominator, shift=shift)
    return _bernoulli(_Exponent(dyadic), params, _consume(key), high.ravel(), low.ravel()).reshape(high.shape)


@functools.partial(jax.jit, static_argnames="sampler")
def _bernoulli(sampler: _Exponent, params: _ExponentParams, source: Array, high: Array, low: Array) -> Array:
    """One slot per entry, each running one attempt (the attempt is the draw: no rejection)."""
    n = high.shape[0]

    def body(carry):
        counter, words, slots, result = carry
        slots, ended, accepted = _commit(slots)
        slots = _step(sampler, params, slots, words)
        return counter + 1, _draw(source, counter + 1, 3, n), slots, jnp.where(ended, accepted, result)

    start = (
        jnp.uint32(0),
        _draw(source, jnp.uint32(0), 3, n),
        _slots(n, (high, low), sampler.stored(n)),
        jnp.zeros(n, bool),
    )
    return lax.while_loop(lambda c: jnp.any(c[2].state != IDLE), body, start)[3]


def exponential_choice(key: Key, gaps: Array, eligible: Array, rate_numerator, rate_denominator) -> Array:
    """Sample i with probability proportional to eligible_i * exp(-rate * gaps_i), exactly.

    gaps: (n,) uint32, >= 0 (a candidate's distance below the best, in grid steps); rate =
    rate_numerator / rate_denominator (integers below 2^32: Python ints or uint32 scalars).
    Rejection from the uniform proposal in rounds of up to 4096 attempts (i uniform, kept if
    eligible, accepted with Bernoulli(exp(-rate gap_i))): the first accepted attempt of a round,
    in attempt order, is returned. With an eligible candidate at gap 0 an attempt is accepted with
    probability at least 1 / n.

    Returns:
        int32 scalar index.
    """
    denominator, shift, dyadic = _denominator(rate_denominator)
    rate = DyadicRate(_u32(rate_numerator), denominator, shift)
    return _choice(key, gaps, eligible, rate, dyadic)


class DyadicRate(NamedTuple):
    """A rate numerator / 2^(32 - shift) as uint32 arrays (`dyadic_rate`): data, so that one
    compiled program can select at several rates (a mechanism's selection scale is a leaf)."""

    numerator: Array
    denominator: Array
    shift: Array


def dyadic_rate(numerator: int, denominator: int) -> DyadicRate:
    """The arrays of the rate numerator / denominator, denominator a power of two in [1, 2^32).

    Raises:
        ValueError: the denominator is not such a power of two, or the numerator not in [0, 2^32).
    """
    shift = _dyadic_shift(denominator)
    if shift is None or not (isinstance(numerator, int) and 0 <= numerator < _WORD):
        raise ValueError(
            f"a dyadic rate needs integers 0 <= numerator < 2^32 and a power-of-two denominator, "
            f"got {numerator!r} / {denominator!r}"
        )
    # NumPy scalars, so that building a rate compiles nothing
    return DyadicRate(np.uint32(numerator), np.uint32(denominator), np.uint32(shift))


def exponential_choice_at(key: Key, gaps: Array, eligible: Array, rate: DyadicRate) -> Array:
    """`exponential_choice` at a dyadic rate given as arrays, traced or not: the same draws as
    `exponential_choice` with the rate's integers."""
    return _choice(key, gaps, eligible, rate, True)


def _choice(key: Key, gaps: Array, eligible: Array, rate: DyadicRate, dyadic: bool) -> Array:
    params = _ChoiceParams(
        denominator=rate.denominator,
        shift=rate.shift,
        numerator=rate.numerator,
        gaps=gaps.astype(np.uint32),
        eligible=array_module(eligible).asarray(eligible, bool),
    )
    source = _consume(key)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((params, source))):
        return _exponential_choice(_Choice(dyadic), params, source)
    program = _choice_programs.program(
        _choice_signature(dyadic, (params, source)),
        lambda: _exponential_choice.lower(_Choice(dyadic), params, source),
    )
    return program(params, source)


# The host's choices, compiled once per signature: `prefetch_exponential_choice` starts one on a
# thread of its own while the run measures (AIM's first selection waits 0.25 s less on the
# 1,000-record PUMS command), and every choice outside a trace runs the compiled program.
_choice_programs = Compiler("jaxdp-select", capacity=16)


def _choice_signature(dyadic: bool, arguments) -> tuple:
    leaves = jax.tree.leaves(arguments)
    return dyadic, tuple((tuple(x.shape), np.dtype(x.dtype), getattr(x, "weak_type", False)) for x in leaves)


def prefetch_exponential_choice(n_candidates: int) -> None:
    """Start compiling the choice among `n_candidates` at a dyadic rate from a threefry key (as
    `exponential_choice_at` outside a trace, on a host array of gaps) in the background."""
    word = jax.ShapeDtypeStruct((), np.uint32)
    params = _ChoiceParams(
        denominator=word,
        shift=word,
        numerator=word,
        gaps=jax.ShapeDtypeStruct((n_candidates,), np.uint32),
        eligible=jax.ShapeDtypeStruct((n_candidates,), np.bool_),
    )
    source = jax.ShapeDtypeStruct((2,), np.uint32)
    _choice_programs.program(
        _choice_signature(True, (params, source)),
        lambda: _exponential_choice.lower(_Choice(True), params, source),
        wait=False,
    )


@functools.partial(fast_compiled, static_argnames="sampler")
def _exponential_choice(sampler: _Choice, params: _ChoiceParams, source: Array) -> Array:
    """Rounds of `size` attempts, one per slot; the round's answer is known once the first attempt
    (in slot order) that is not rejected is accepted."""
    size = min(4096, max(16, params.gaps.shape[0]))
    zeros = jnp.zeros(size, jnp.uint32)

    def body(carry):
        counter, words, slots, result, _, _ = carry
        slots, ended, accepted = _commit(slots)
        result = jnp.where(ended, accepted.astype(jnp.int32), result)  # -1 running, 0 rejected, 1 accepted
        first = jnp.argmax(result != 0)
        done, choice = result[first] == 1, slots.aux[0][first].astype(jnp.int32)
        restart = jnp.all(result == 0)
        slots = slots._replace(state=jnp.where(restart, _slots(size, (), ()).state, slots.state))
        slots = _step(sampler, params, slots, words)
        words = _draw(source, counter + 1, 3, size)
        return counter + 1, words, slots, jnp.where(restart, -1, result), done, choice

    slots = _slots(size, (zeros, zeros, zeros), sampler.stored(size))
    start = (
        jnp.uint32(0),
        _draw(source, jnp.uint32(0), 3, size),
        slots,
        jnp.full(size, -1),
        False,
        jnp.int32(0),
    )
    return lax.while_loop(lambda c: ~c[4], body, start)[5]
