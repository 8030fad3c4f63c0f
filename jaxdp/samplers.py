"""Exact samplers on the integers, in JAX: no floating point decides any outcome.

Canonne, Kamath & Steinke (2020, "The Discrete Gaussian for Differential Privacy", Algorithms
1-3) sample Bernoulli(exp(-gamma)) for rational gamma, the discrete Laplace and the discrete
Gaussian using only integer comparisons of uniform random integers. This module runs those
algorithms vectorised over arrays, inside jit and vmap, with fixed shapes:

- every loop of the sequential algorithm is unrolled into a fixed batch of draws (enough that
  nearly every entry finishes in the batch), followed by a masked `lax.while_loop` that continues
  the *same* loop, from the same place, for the rare entries that did not finish. Each entry's
  output is therefore exactly the output of the sequential algorithm on its own random stream.
- a uniform integer below `m` is the word `w % m` of a 32-bit word, redrawn while `w` falls in the
  last `2^32 mod m` values (rejection), so it is exactly uniform.
- Bernoulli(1/j) for j = 2..10 come from one word read in the factorial number system: below
  10! * floor(2^32 / 10!) the digits `(w // (j-1)!) % j` are independent and exactly uniform.

Nothing here touches private data: `jaxdp.noise` adds these draws to private values.

Ranges (int32/uint32 arithmetic, no x64 needed): the discrete Gaussian takes sigma in
[`SIGMA_MIN`, `SIGMA_MAX`]; its variance sigma^2 is the rational c * t / k of `GaussianLattice`,
rounded up from the requested value by a relative 2^-10 at most for sigma >= 0.03 (coarser below,
where 32-bit arithmetic bounds the denominator; never below the requested value). The Laplace proposal of the
Gaussian sampler is truncated at `GaussianLattice.cap` >= 32 sigma, so the law drawn is the
discrete Gaussian conditioned on |y| <= cap: its total-variation distance from the discrete
Gaussian is below exp(-500) (docs/privacy.md states what this means for the guarantee).

Expected cost: about 1.4 Laplace proposals per Gaussian draw, each a few dozen 32-bit words;
`bench/bench_noise.py` measures it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.types import Array, Key

SIGMA_MIN = 2.0**-6
SIGMA_MAX = 46_000.0  # the acceptance denominator 2 c k t must stay below 2^32
_PRECISION = 2**10  # k sigma^2 / t >= 2^10: sigma^2 is rounded up by a relative 2^-10 at most
_WORD = 2**32
_FACTORIAL_DIGITS = 10  # Bernoulli(1/j), j = 2..10, from one word
_FACTORIAL_LIMIT = math.factorial(_FACTORIAL_DIGITS) * (_WORD // math.factorial(_FACTORIAL_DIGITS))


# --- host-side parameters --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GaussianLattice:
    """Integer parameters of a discrete Gaussian with variance sigma^2 = c * t / k (exact).

    t: scale of the discrete Laplace proposal (floor(sigma) + 1, as CKS20 Algorithm 3).
    k: denominator, a power of two with k sigma^2 / t >= 2^10 where 32 bits allow.
    c: ceil(sigma^2 k / t), so that sigma^2 = c t / k >= the requested sigma^2.
    cap: the largest |y| the proposal keeps (>= 32 sigma; k * cap + c < 2^32).
    """

    t: int
    k: int
    c: int
    cap: int

    @property
    def variance(self) -> Fraction:
        """sigma^2 exactly, as a rational."""
        return Fraction(self.c * self.t, self.k)

    @property
    def denominator(self) -> int:
        """2 sigma^2 k^2 / k = 2 c k t: the acceptance exponent is (k |y| - c)^2 / (2 c k t)."""
        return 2 * self.c * self.k * self.t


def gaussian_lattice(sigma: float) -> GaussianLattice:
    """The exact lattice parameters for a discrete Gaussian of scale at least `sigma`.

    sigma^2 = c t / k with c = ceil(sigma^2 k / t): the excess is below t / k, a relative
    t / (k sigma^2). k is the smallest power of two making that at most 2^-10, unless the
    acceptance denominator 2 c k t would reach 2^32 (only for sigma below about 0.03), where k is
    the largest power of two that fits.

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
    target = Fraction(sigma) ** 2
    t = math.floor(sigma) + 1

    def lattice(k: int) -> GaussianLattice:
        c = math.ceil(target * k / t)
        return GaussianLattice(t=t, k=k, c=c, cap=min((_WORD - 1 - c) // k, 2**30))

    def fits(candidate: GaussianLattice) -> bool:
        return candidate.denominator < _WORD and candidate.cap >= 32 * sigma

    k = 1
    while target * k / t < _PRECISION and fits(lattice(2 * k)):
        k *= 2
    chosen = lattice(k)
    assert chosen.variance >= target and fits(chosen)
    return chosen


def laplace_lattice(scale: float) -> tuple[int, int]:
    """(t, s) with t / s >= scale: the discrete Laplace Lap_Z(t / s), P(y) ~ exp(-|y| s / t).

    s is a power of two chosen so that t / s is within a relative 2^-10 above `scale`.
    """
    if not isinstance(scale, int | float) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    s = 1
    while scale * s < _PRECISION:
        s *= 2
    t = math.ceil(Fraction(scale) * s)
    if t >= 2**24:
        raise ValueError(f"discrete Laplace scale {scale!r} is too large (at most 2^24 / s)")
    return t, s


# --- uniform integers and Bernoulli draws -----------------------------------------------------------


def _words(key: Key, shape: tuple[int, ...]) -> Array:
    return jax.random.bits(key, shape, jnp.uint32)


def _consume(key: Key) -> Key:
    """The key the sampler derives its words from, by `split`, which jax's key-reuse checker
    counts as a use of `key` (`fold_in`, used for every later word, is not): a caller that hands
    one key to two samplers is caught, as with `jax.random`'s own samplers."""
    return jax.random.split(key, 1)[0]


def _below(words: Array, bound) -> tuple[Array, Array]:
    """(words % bound, accepted): exactly uniform below `bound` where accepted.

    bound: a Python int in [1, 2^32) or a uint32 array broadcastable with words.
    """
    if isinstance(bound, int):
        limit = (_WORD // bound) * bound
        ok = jnp.ones(words.shape, bool) if limit == _WORD else words < jnp.uint32(limit)
        return words % jnp.uint32(bound), ok
    bound = jnp.asarray(bound, jnp.uint32)
    excess = (jnp.uint32(0) - bound) % bound  # 2^32 mod bound
    ok = (excess == 0) | (words < jnp.uint32(0) - excess)
    return words % bound, ok


def _factorial_digits_zero(words: Array) -> tuple[Array, Array]:
    """Bernoulli(1/j) for j = 2..10 from each word: (bool (..., 9), accepted (...))."""
    digits = []
    radix = 1
    for j in range(2, _FACTORIAL_DIGITS + 1):
        digits.append((words // jnp.uint32(radix)) % jnp.uint32(j) == 0)
        radix *= j
    return jnp.stack(digits, axis=-1), words < jnp.uint32(_FACTORIAL_LIMIT)


def _first_true(flags: Array) -> tuple[Array, Array]:
    """(index of the first True along the last axis, or its length; whether any is True)."""
    width = flags.shape[-1]
    found = jnp.any(flags, axis=-1)
    return jnp.where(found, jnp.argmax(flags, axis=-1), width).astype(jnp.int32), found


def _at_least(high: Array, low: Array, value) -> Array:
    """(high, low) >= value: a Python int below 2^64, or a uint32 array (one word)."""
    if not isinstance(value, int):
        return (high > 0) | (low >= value)
    v_high, v_low = divmod(value, _WORD)
    return (high > jnp.uint32(v_high)) | ((high == jnp.uint32(v_high)) & (low >= jnp.uint32(v_low)))


def _mul_wide(a: Array, b: Array) -> tuple[Array, Array]:
    """The 64-bit product of uint32 arrays as (high word, low word)."""
    mask = jnp.uint32(0xFFFF)
    a0, a1 = a & mask, a >> 16
    b0, b1 = b & mask, b >> 16
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    middle = (p00 >> 16) + (p01 & mask) + (p10 & mask)
    low = (p00 & mask) | (middle << 16)
    high = p11 + (p01 >> 16) + (p10 >> 16) + (middle >> 16)
    return high, low


# --- the per-entry program --------------------------------------------------------------------------
#
# Each entry runs CKS20's sequential algorithm as a small program with a program counter (`phase`)
# and registers; one iteration of the driver advances every entry by one step, drawing two fresh
# 32-bit words per entry. A step whose word falls in a rejection zone is redone with fresh words
# (the draw it stands for is exactly uniform once accepted), so each entry's output is exactly that
# of the sequential algorithm.
#
#   PROPOSE  U uniform below t and A_1 ~ Bernoulli(U / t), the first step of the K-loop of
#            Bernoulli(exp(-U / t)): A_1 = 0 -> COUNT (K = 1, odd), A_1 = 1 -> SCALE with k = 2
#   SCALE    A_k = Bernoulli(U / t) and Bernoulli(1 / k); the first k with A_k = 0 is K:
#            K odd -> COUNT (v = 0), K even -> reject
#   COUNT    V: Bernoulli(exp(-1)) trials (the K-loop with A_k = Bernoulli(1 / k)); a success adds
#            1 to v, the first failure ends V: X = U + t V and a sign bit (X > cap or -0: reject);
#            Laplace -> DONE; Gaussian: gamma = (k |X| - c)^2 / (2 c k t) -> WHOLE or FRACTION
#   WHOLE    (gamma >= 1) a Bernoulli(exp(-1)) trial: success -> gamma -= 1, failure -> reject
#   FRACTION (gamma < 1) the K-loop of Bernoulli(exp(-gamma)): K odd -> DONE, K even -> reject
#
# A rejection starts a new trial at PROPOSE (samplers) or ends with value 0 (`bernoulli_exp`).

PROPOSE, SCALE, COUNT, WHOLE, FRACTION, DONE = range(6)


class _Params(NamedTuple):
    """The numbers a program runs with, as uint32 scalars: traced, so that one compiled program
    serves every sigma, scale and rate (AIM changes them every round)."""

    t: Array  # Laplace proposal scale: the proposal is Lap_Z(t)
    cap: Array  # largest X kept
    v_limit: Array  # cap // t: larger V is rejected before t * V could overflow
    divide: Array  # Laplace: output floor(X / divide), i.e. Lap_Z(t / divide)
    k: Array  # Gaussian lattice denominator
    c: Array  # Gaussian lattice: sigma^2 / t = c / k
    denominator: Array  # gamma denominator in WHOLE / FRACTION (2 c k t for the Gaussian)


def _params(
    t: int = 1, cap: int = 1, divide: int = 1, k: int = 1, c: int = 0, denominator: int = 1
) -> _Params:
    values = (t, cap, cap // t, divide, k, c, denominator)
    assert all(0 <= v < _WORD for v in values)
    return _Params(*(jnp.asarray(v, jnp.uint32) for v in values))


class _Registers(NamedTuple):
    phase: Array  # int32
    k: Array  # int32, index in the current K-loop
    u: Array  # uint32, the proposal's U
    v: Array  # int32, the geometric count
    high: Array  # uint32, gamma numerator (high word)
    low: Array  # uint32, gamma numerator (low word)
    value: Array  # int32 output (samplers) or 0/1 (bernoulli_exp)


def _inverse_draw(word: Array, k: Array) -> tuple[Array, Array]:
    """(accepted, Bernoulli(1/k)) from one word, exact where accepted; k >= 1."""
    remainder, accepted = _below(word, k.astype(jnp.uint32))
    return accepted, remainder == 0


def _exp_one_step(word: Array, k: Array) -> tuple[Array, Array, Array]:
    """One step of the Bernoulli(exp(-1)) K-loop: (decided, success, next_k).

    At k = 1 one factorial word settles K whenever K <= 10 (else next_k = 11); from k = 11 on, one
    Bernoulli(1/k) per step. K is the first k with A_k = 0; success is [K odd].
    """
    zero, factorial_ok = _factorial_digits_zero(word)
    first, failed = _first_true(~zero)
    accepted, one = _inverse_draw(word, k)
    fresh = k == 1
    decided = jnp.where(fresh, factorial_ok & failed, accepted & ~one)
    success = jnp.where(fresh, first % 2 == 1, k % 2 == 1)  # K = first + 2, or K = k
    next_k = jnp.where(
        fresh, jnp.where(factorial_ok, _FACTORIAL_DIGITS + 1, 1), jnp.where(accepted, k + 1, k)
    )
    return decided, success, next_k


def _fraction_step(words: tuple[Array, Array], numerator: Array, denominator: Array, k: Array):
    """One step of the Bernoulli(exp(-numerator / denominator)) K-loop: (decided, success, next_k).

    A_k = Bernoulli(numerator / denominator) and Bernoulli(1 / k); K = the first k with A_k = 0.
    """
    draw, ok_gamma = _below(words[0], denominator)
    ok_inverse, inverse = _inverse_draw(words[1], k)
    ok = ok_gamma & ok_inverse
    one = (draw < numerator) & inverse
    return ok & ~one, k % 2 == 1, jnp.where(ok & one, k + 1, k)


def _step(
    gaussian: bool, reject_ends: bool, p: _Params, r: _Registers, words: tuple[Array, Array]
) -> _Registers:
    """Advance every entry by one step of its program (`gaussian`: accept-reject to a discrete
    Gaussian after COUNT; `reject_ends`: `bernoulli_exp`, a rejection ends with value 0)."""
    t, den = p.t, p.denominator
    phase, k = r.phase, r.k
    reject = DONE if reject_ends else PROPOSE

    # PROPOSE: U, then A_1 = Bernoulli(U / t) from the second word.
    u_new, u_ok = _below(words[0], t)
    a_draw, a_ok = _below(words[1], t)
    proposing = (phase == PROPOSE) & u_ok & a_ok
    a_one = a_draw < u_new
    # SCALE and FRACTION share the K-loop step (different numerators and denominators).
    scale_decided, scale_odd, scale_k = _fraction_step(words, r.u, t, k)
    frac_decided, frac_odd, frac_k = _fraction_step(words, r.low, den, k)
    # COUNT and WHOLE share the Bernoulli(exp(-1)) step on the first word.
    one_decided, one_success, one_k = _exp_one_step(words[0], k)

    # COUNT ending: X = U + t V, the sign from the second word (unused by COUNT otherwise).
    negative = (words[1] & jnp.uint32(1)) == 1
    within = r.v <= p.v_limit.astype(jnp.int32)  # before multiplying: t * v cannot overflow
    x = r.u.astype(jnp.int32) + t.astype(jnp.int32) * jnp.where(within, r.v, 0)
    magnitude = x // p.divide.astype(jnp.int32)
    bad = ~within | (x > p.cap.astype(jnp.int32)) | (negative & (magnitude == 0))
    signed = jnp.where(negative, -magnitude, magnitude)
    if gaussian:
        scaled = p.k * x.astype(jnp.uint32)  # k * cap + c < 2^32
        distance = jnp.where(scaled >= p.c, scaled - p.c, p.c - scaled)
        g_high, g_low = _mul_wide(distance, distance)
        after = jnp.where(_at_least(g_high, g_low, den), WHOLE, FRACTION)
    else:
        g_high, g_low = r.high, r.low
        after = jnp.full(phase.shape, DONE)

    in_scale, in_count = phase == SCALE, phase == COUNT
    in_whole, in_fraction = phase == WHOLE, phase == FRACTION
    count_more = in_count & one_decided & one_success
    count_end = in_count & one_decided & ~one_success
    whole_taken = in_whole & one_decided & one_success
    borrow = (r.low < den).astype(jnp.uint32)
    w_high, w_low = r.high - borrow, r.low - den

    new_phase = jnp.select(
        [
            proposing,
            in_scale & scale_decided,
            count_end,
            whole_taken,
            in_whole & one_decided,
            in_fraction & frac_decided,
        ],
        [
            jnp.where(a_one, SCALE, COUNT),
            jnp.where(scale_odd, COUNT, reject),
            jnp.where(bad, reject, after),
            jnp.where(_at_least(w_high, w_low, den), WHOLE, FRACTION),
            reject,
            jnp.where(frac_odd, DONE, reject),
        ],
        phase,
    )
    new_k = jnp.select(
        [proposing, in_scale, in_count | in_whole, in_fraction],
        [
            jnp.where(a_one, 2, 1),
            jnp.where(scale_decided, 1, scale_k),
            jnp.where(one_decided, 1, one_k),
            jnp.where(frac_decided, 1, frac_k),
        ],
        k,
    )
    u = jnp.where(proposing, u_new, r.u)
    v = jnp.select([proposing | in_scale, count_more], [0, r.v + 1], r.v)
    high = jnp.select([count_end, whole_taken], [g_high, w_high], r.high)
    low = jnp.select([count_end, whole_taken], [g_low, w_low], r.low)
    if reject_ends:
        value = jnp.where(in_fraction & frac_decided & frac_odd, 1, r.value)
    else:
        value = jnp.where(count_end, signed, r.value)
    return _Registers(new_phase.astype(jnp.int32), new_k.astype(jnp.int32), u, v, high, low, value)


def _iterate(program: tuple, registers: _Registers, key: Key, steps: int) -> _Registers:
    """`steps` iterations of `_step` with fresh words each (fixed count)."""
    shape = registers.phase.shape

    def body(i, r):
        sub = jax.random.fold_in(key, i)
        words = (_words(jax.random.fold_in(sub, 0), shape), _words(jax.random.fold_in(sub, 1), shape))
        return _step(*program, r, words)

    return jax.lax.fori_loop(0, steps, body, registers)


_COMPACT_ABOVE = 4096  # smaller arrays simply iterate at full width until done
# About 20% of entries are unfinished after 10 iterations and 7% after 16: larger arrays take
# 10 iterations at full width, then iterate over buffers of n / 8 unfinished entries. (Each
# distinct buffer size is another copy of the step in the compiled program: two keep compiling
# fast.)
_FULL_WIDTH_STEPS = 10
_BUFFER_FRACTION = 8
_BUFFER_STEPS = 6


def _gather_iterate(program: tuple, r: _Registers, key: Key, size: int, steps: int) -> _Registers:
    """Gather up to `size` unfinished entries into a buffer, iterate there, scatter them back.

    The position an entry occupies changes which words it reads, not their law: every (stage,
    iteration, position) draws fresh words.
    """
    n = r.phase.shape[0]
    (index,) = jnp.nonzero(r.phase != DONE, size=size, fill_value=n)
    gathered = jax.tree.map(lambda a: a.at[index].get(mode="fill", fill_value=0), r)
    # Fill slots (index n) start DONE so that they do nothing; their writes are dropped.
    gathered = gathered._replace(phase=jnp.where(index < n, gathered.phase, DONE))
    stepped = _iterate(program, gathered, key, steps)
    return jax.tree.map(lambda a, b: a.at[index].set(b, mode="drop"), r, stepped)


@functools.partial(jax.jit, static_argnames=("gaussian", "reject_ends"))
def _run(
    key: Key, params: _Params, registers: _Registers, *, gaussian: bool, reject_ends: bool
) -> _Registers:
    """Iterate until every entry is DONE: small arrays at full width; larger ones
    `_FULL_WIDTH_STEPS` iterations at full width, then buffers of unfinished entries.

    Jitted with the parameters as arguments: eager callers (AIM's rounds) reuse one program per
    shape whatever their sigma; inside an enclosing jit it is inlined.
    """
    program = (gaussian, reject_ends, params)
    flat = jax.tree.map(jnp.ravel, registers)
    n = flat.phase.shape[0]

    def unfinished(carry):
        return jnp.any(carry[1].phase != DONE)

    if n <= _COMPACT_ABOVE:

        def body(carry):
            i, r = carry
            return i + 1, _iterate(program, r, jax.random.fold_in(key, i), 4)

        out = jax.lax.while_loop(unfinished, body, (0, flat))[1]
    else:
        size = max(n // _BUFFER_FRACTION, _COMPACT_ABOVE)
        first = _iterate(program, flat, jax.random.fold_in(key, 0), _FULL_WIDTH_STEPS)

        def body(carry):
            i, r = carry
            return i + 1, _gather_iterate(program, r, jax.random.fold_in(key, i), size, _BUFFER_STEPS)

        out = jax.lax.while_loop(unfinished, body, (1, first))[1]
    return jax.tree.map(lambda a: a.reshape(registers.phase.shape), out)


def _fresh(shape: tuple[int, ...], phase: int = PROPOSE) -> _Registers:
    zeros_u = jnp.zeros(shape, jnp.uint32)
    zeros_i = jnp.zeros(shape, jnp.int32)
    return _Registers(
        phase=jnp.full(shape, phase, jnp.int32),
        k=jnp.ones(shape, jnp.int32),
        u=zeros_u,
        v=zeros_i,
        high=zeros_u,
        low=zeros_u,
        value=zeros_i,
    )


# --- public samplers --------------------------------------------------------------------------------


LAPLACE_CAP = 2**30


def discrete_gaussian(key: Key, shape: tuple[int, ...], lattice: GaussianLattice) -> Array:
    """int32 draws from the discrete Gaussian N_Z(0, lattice.variance), i.i.d. over `shape`
    (CKS20 Algorithm 3 with a Lap_Z(t) proposal), truncated at |y| <= lattice.cap."""
    params = _params(t=lattice.t, cap=lattice.cap, k=lattice.k, c=lattice.c, denominator=lattice.denominator)
    return _run(_consume(key), params, _fresh(shape), gaussian=True, reject_ends=False).value


def discrete_laplace(key: Key, shape: tuple[int, ...], t: int, s: int) -> Array:
    """int32 draws from Lap_Z(t / s): P(y) proportional to exp(-|y| s / t) (CKS20 Algorithm 2),
    truncated at |y| <= 2^30 / s (the mass beyond is below exp(-2^30 / t) < exp(-60))."""
    params = _params(t=t, cap=LAPLACE_CAP, divide=s)
    return _run(_consume(key), params, _fresh(shape), gaussian=False, reject_ends=False).value


def bernoulli_exp(key: Key, high: Array, low: Array, denominator) -> Array:
    """Bernoulli(exp(-gamma)) with gamma = (high 2^32 + low) / denominator (CKS20 Algorithm 1).

    Args:
        high, low: uint32 arrays, the numerator's words.
        denominator: in [1, 2^32): a Python int or a uint32 scalar array.
    """
    high, low = high.astype(jnp.uint32), low.astype(jnp.uint32)
    denominator = jnp.asarray(denominator, jnp.uint32)
    phase = jnp.where(_at_least(high, low, denominator), WHOLE, FRACTION).astype(jnp.int32)
    registers = _fresh(high.shape)._replace(phase=phase, high=high, low=low)
    params = _params()._replace(denominator=denominator)
    return _run(_consume(key), params, registers, gaussian=False, reject_ends=True).value == 1


def exponential_choice(key: Key, gaps: Array, eligible: Array, rate_numerator, rate_denominator) -> Array:
    """Sample i with probability proportional to eligible_i * exp(-rate * gaps_i), exactly.

    gaps: (n,) uint32, >= 0 (a candidate's distance below the best, in grid steps); rate =
    rate_numerator / rate_denominator (integers below 2^32: Python ints or uint32 scalars).
    Rejection from the uniform proposal: each round draws n proposals and returns the first
    accepted one. With an eligible candidate at gap 0, a round accepts with probability at least
    1 - (1 - 1/n)^n >= 0.63.

    Returns:
        int32 scalar index.
    """
    rate = (jnp.asarray(rate_numerator, jnp.uint32), jnp.asarray(rate_denominator, jnp.uint32))
    return _exponential_choice(_consume(key), gaps.astype(jnp.uint32), jnp.asarray(eligible, bool), *rate)


@jax.jit
def _exponential_choice(
    key: Key, gaps: Array, eligible: Array, numerator: Array, denominator: Array
) -> Array:
    n = gaps.shape[0]

    def trial(k):
        index, ok = _below(_words(jax.random.fold_in(k, 0), (n,)), n)
        index = index.astype(jnp.int32)
        candidate = ok & eligible[index]
        high, low = _mul_wide(gaps[index], jnp.broadcast_to(numerator, (n,)))
        keep = candidate & bernoulli_exp(jax.random.fold_in(k, 1), high, low, denominator)
        first, found = _first_true(keep)
        return index[jnp.minimum(first, n - 1)], found

    choice, found = trial(jax.random.fold_in(key, 0))

    def body(carry):
        i, _, _ = carry
        return (i + 1, *trial(jax.random.fold_in(key, i)))

    return jax.lax.while_loop(lambda c: ~c[2], body, (1, choice, found))[1]
