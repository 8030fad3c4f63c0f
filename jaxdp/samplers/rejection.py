"""The samplers' rejection engine: one attempt in steps (a point, its geometric level, the
fraction's K-loop) run in slots, each slot a sequential rejection sampler, under one while loop
(`jaxdp.samplers`' module docstring)."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdp._jit import fast_compiled
from jaxdp.samplers.integers import _draw, _Dyadic, _inverse, _Rational, _versus
from jaxdp.types import Array

_K_LIMIT = 2**16  # K-loop indices are kept below it (module docstring)


# --- one attempt, in steps --------------------------------------------------------------------------
#
# An attempt: the sampler's point (`propose`); the geometric level, Bernoulli(exp(-1)) trials
# counted until the first failure or until the sampler's `reached(g)`; the point placed in its
# level (`place`), giving the output and a fraction f; CKS20's K-loop for Bernoulli(exp(-f)), K
# odd accepting. A step reads three fresh words per slot and settles a fresh attempt with
# probability about 0.96 (four trials and three K-loop indices from one word each); otherwise the
# slot carries the attempt over (registers in `_Slot`) and continues it exactly where it stopped,
# one trial or K-loop index per step.

FRESH, LEVEL, FRACTION, IDLE = range(4)
_FAILED, _REACHED, _PENDING_TRIAL, _PENDING_NEW = range(4)


def _trial_digits(words: Array) -> tuple[tuple[Array, ...], Array]:
    """Four base-120 digits (each a Bernoulli(exp(-1)) trial) from words below 120^4 * 20."""
    ok = words < jnp.uint32(120**4 * 20)
    digits = []
    for _ in range(4):
        digits.append(lax.rem(words, jnp.uint32(120)))
        words = lax.div(words, jnp.uint32(120))
    return tuple(digits), ok


def _geometric(words: Array, reached: list[Array]) -> tuple[Array, Array, Array]:
    """(status, successes, accepted) of four trials of a geometric walk.

    A trial's K (the first k with Bernoulli(1/k) = 0: CKS20 Algorithm 1 for gamma = 1) is 2, 3,
    4, 5 with probabilities 60, 40, 15, 4 in 120, and >= 6 with 1 in 120: digits < 44 are
    successes (K = 3, 5), 44 .. 118 failures (K = 2, 4), 119 continues the trial at k = 6. Before
    trial i (after i successes) the walk ends if reached[i]. Status: FAILED, REACHED,
    PENDING_TRIAL (the trial continues at k = 6) or PENDING_NEW (four successes, more follow).
    """
    digits, ok = _trial_digits(words)
    status = jnp.full(words.shape, _PENDING_NEW, jnp.int32)
    g = jnp.full(words.shape, 4, jnp.int32)
    for i in reversed(range(4)):  # the first trial that is not a success decides
        outcome = jnp.where(digits[i] < 119, _FAILED, _PENDING_TRIAL)
        stop = reached[i] | (digits[i] >= 44)
        status = jnp.where(stop, jnp.where(reached[i], _REACHED, outcome), status)
        g = jnp.where(stop, i, g)
    status = jnp.where((g == 4) & reached[4], _REACHED, status)
    return status, g, ok


def _fraction_fast(params, f, words: Array):
    """CKS20's K-loop for Bernoulli(exp(-f)) from one word: (settled, accepted, k, j, tie, ok).

    A_k = Bernoulli(1/k) Bernoulli(f); K = the first k with A_k = 0 is odd with probability
    exp(-f). J = the first k with Bernoulli(1/k) = 0 is 2, 3, 4 for base-24 digits < 12, < 20,
    < 23 and >= 5 for 23 (probabilities (J - 1) / J!); Bernoulli(f) for k = 1, 2 from a byte each
    and k = 3 from 7 bits; K = min(J, the first k with Bernoulli(f) = 0). Unsettled: a tied digit
    (the loop stays at that k with Bernoulli(1/k) = 1 known; tie = 2 after a byte, 1 after 7
    bits: the rest of f to compare), or J >= 5 past k = 3 (at k = 4, Bernoulli(1/4) = 1 known,
    tie = 0: f itself). j: J, or -5 for J >= 5.
    The word is accepted below 24 * 2^23 * 21.
    """
    ok = words < jnp.uint32(24 * 2**23 * 21)
    bits = lax.div(words, jnp.uint32(24))
    j_digit, u1, u2, u3 = lax.rem(words, jnp.uint32(24)), bits & 0xFF, (bits >> 8) & 0xFF, (bits >> 16) & 0x7F
    j = jnp.where(j_digit < 12, 2, jnp.where(j_digit < 20, 3, jnp.where(j_digit < 23, 4, -5)))
    byte, rest8 = f.digit(8, params)
    exact8 = rest8.is_zero()  # f = byte / 2^8
    one1, zero1, tie1 = _versus(u1, byte, exact8)
    one2, zero2, tie2 = _versus(u2, byte, exact8)
    one3, zero3, tie3 = _versus(u3, byte >> 1, exact8 & ((byte & 1) == 0))
    at3 = one1 & (j != 2) & one2  # the loop reaches k = 3 (A_1 = A_2 = 1)
    at4 = at3 & (j != 3) & one3
    settled = zero1 | (one1 & ((j == 2) | zero2)) | (at3 & ((j == 3) | zero3)) | (at4 & (j == 4))
    accepted = zero1 | (at3 & ((j == 3) | zero3))
    tied2 = one1 & (j != 2) & tie2
    tied3 = at3 & (j != 3) & tie3
    k = jnp.where(tie1, 1, jnp.where(tied2, 2, jnp.where(tied3, 3, 4)))
    tie = jnp.where(tie1 | tied2, 2, jnp.where(tied3, 1, 0))
    return settled, accepted, k, j, tie, ok


class _Slot(NamedTuple):
    """Where a slot's current attempt stands."""

    state: Array  # int32, see `_pack`
    g: Array  # int32: successes of the geometric walk (LEVEL), the level (FRACTION)
    aux: tuple  # the sampler's data (its point)
    stored: tuple  # FRACTION: what the fraction type keeps of the rest of f (`_Rational`)


# The packed state: phase (bits 0-1); bit 7: the last step ended an attempt, bit 8: accepted it;
# bits 15-30: k, the index in the current K-loop (LEVEL: of the current trial, 2 = a new one).
# FRACTION: bit 2 set if Bernoulli(1/k) = 1 is known for the current k; bits 3-6: j + 5 (j: the
# loop's J if > 0; if <= 0, Bernoulli(1/k) = 1 for k < -j and is drawn beyond); bits 9-14: the bits
# of f already compared for the current k (ties; under 64: a dyadic f of b bits never ties past
# its b-th bit).
def _pack(phase, c_known, j, ended, accepted, depth, k):
    flags = c_known.astype(jnp.int32) << 2 | ended.astype(jnp.int32) << 7 | accepted.astype(jnp.int32) << 8
    return phase | flags | (j + 5) << 3 | depth << 9 | jnp.minimum(k, _K_LIMIT - 1) << 15


def _step(sampler, params, r: _Slot, words: Array) -> _Slot:
    """Advance every slot by one step with three fresh words.

    FRESH: a new attempt (words[0] its point; a point word outside its threshold retries). Then,
    for FRESH slots and LEVEL slots at k = 2, four trials from words[1]; for LEVEL slots at k > 2,
    Bernoulli(1/k) of the current trial from words[0]. A walk that ends places the point and runs
    the K-loop from words[2] (a word outside its threshold restarts the loop at k = 1).
    FRACTION: Bernoulli(1/k) from words[0] (unless known) and a byte of words[1] against the
    current rest of f; the loop ends at the first A_k = 0, accepting if k is odd.
    f and the output are recomputed from (point, level) at every step, and the registers are
    packed: XLA copies a computation into the loop of each array it feeds.
    """
    state = r.state
    phase, k, depth = state & 3, state >> 15, (state >> 9) & 63
    c_known, j_old = (state & 4) == 4, ((state >> 3) & 15) - 5
    aux, ok = sampler.propose(params, words[0], r.aux)
    starting = (phase == FRESH) & ok
    aux = jax.tree.map(lambda a, b: jnp.where(starting, a, b), aux, r.aux)
    # The geometric walk.
    walking = starting | ((phase == LEVEL) & (k == 2))
    g0 = jnp.where(starting, 0, r.g)
    walk, walked, walk_ok = _geometric(words[1], [sampler.reached(params, aux, g0 + i) for i in range(5)])
    walk_ok = walking & walk_ok
    inverse_ok, inverse_one = _inverse(words[0], k)
    trial = (phase == LEVEL) & (k != 2) & inverse_ok
    success = trial & ~inverse_one & ((k & 1) == 1)
    g = jnp.where(walk_ok, g0 + walked, jnp.where(success, g0 + 1, g0))
    status = jnp.where(walk_ok, walk, jnp.where(trial & ~inverse_one & ~success, _FAILED, _PENDING_NEW))
    status = jnp.where(success & sampler.reached(params, aux, g), _REACHED, status)
    status = jnp.where(phase == FRACTION, _FAILED, status)  # (for `place`: the level is settled)
    k_level = jnp.where(trial, jnp.where(inverse_one, k + 1, 2), jnp.where(walking, 2, k))
    k_level = jnp.where(walk_ok & (walk == _PENDING_TRIAL), 6, k_level)
    placed = (walk_ok | trial) & (status < _PENDING_TRIAL)
    valid, f = sampler.place(params, aux, status, g)
    # The K-loop: from words[2] for attempts entering it; one index for FRACTION slots.
    settled, accepted, k_fraction, j, tie, fraction_ok = _fraction_fast(params, f, words[2])
    in_fraction = phase == FRACTION
    fresh_c = ~c_known & (j_old <= 0) & (k >= -j_old)
    c_one = c_known | jnp.where(j_old > 0, k < j_old, jnp.where(fresh_c, inverse_one, True))
    ready = in_fraction & (~fresh_c | inverse_ok)
    current = type(f).recall(f, depth, r.stored, params)
    top, rest = current.digit(8, params)
    b_one, b_zero, b_tie = _versus(words[1] & 0xFF, top, rest.is_zero())
    loop_end = ready & (~c_one | b_zero)
    advance = ready & c_one & b_one
    tied = ready & c_one & b_tie
    entering = placed & valid & ~(settled & fraction_ok)
    tie = jnp.where(fraction_ok, tie, 0)
    new_depth = jnp.where(entering, jnp.where(tie == 2, 8, jnp.where(tie == 1, 7, 0)), depth)
    new_depth = jnp.where(tied, jnp.minimum(depth + 8, 63), jnp.where(advance, 0, new_depth))
    stored = type(f).store(f, new_depth, (entering, tied, advance), rest, r.stored, params)
    ended = (placed & (~valid | (settled & fraction_ok))) | loop_end
    accepted = (placed & valid & settled & fraction_ok & accepted) | (loop_end & ((k & 1) == 1))
    new_phase = jnp.where(walking | (phase == LEVEL), LEVEL, phase)
    new_phase = jnp.where(entering, FRACTION, jnp.where(ended, FRESH, new_phase))
    new_k = jnp.where(
        entering,
        jnp.where(fraction_ok, k_fraction, 1),
        jnp.where(advance, k + 1, jnp.where(in_fraction, k, k_level)),
    )
    new_c = jnp.where(entering, True, jnp.where(ready, tied, c_known))
    new_j = jnp.where(entering, jnp.where(fraction_ok, j, -2), j_old)
    state = _pack(new_phase, new_c, new_j, ended, accepted, new_depth, new_k)
    return _Slot(state=state, g=g, aux=aux, stored=stored)


def _slots(size: int, aux: tuple, stored: tuple) -> _Slot:
    return _Slot(
        state=jnp.full(size, FRESH | 2 << 15, jnp.int32),
        g=jnp.zeros(size, jnp.int32),
        aux=aux,
        stored=stored,
    )


def _pool(n: int) -> int:
    """Slots for n outputs: one per output up to 4096, then about 32 outputs per slot (more
    outputs per slot even out the slots' random run times, fewer slots mean more steps)."""
    return n if n <= 2**12 else min(2**16, max(2**12, n // 32))


# Both samplers compile with XLA:CPU's quicker code generator (`jaxdp._jit`) where they are called
# on their own (a host-driven mechanism's measurements and selections; inside another program they
# are inlined into it): a fresh AIM process compiles each on its critical path. On the 2-core CPU
# (loaded) the discrete Gaussian's first call took 0.51-0.74 s instead of 0.95-1.27 s, the same
# draws, 10^6 of them in 81-100 ms instead of 63-84 ms; the exponential choice's 0.74-1.05 s
# instead of 0.80-1.13 s, the same picks, sub-millisecond runs either way.
@functools.partial(fast_compiled, static_argnames=("sampler", "n"))
def _rejection(sampler, params, source: Array, n: int) -> Array:
    """n i.i.d. int32 draws from the sampler's target: `size` slots, slot i filling outputs
    i, i + size, i + 2 size, ... in the order its attempts are accepted."""
    size = _pool(n)
    slot = lax.iota(jnp.int32, size)

    def body(carry):
        counter, words, slots, count, out = carry
        # Commit the attempts that ended at the last step, then step.
        accepted = (slots.state & 0x100) != 0
        value = sampler.value(params, slots.aux, slots.g)
        out = out.at[jnp.where(accepted, count * size + slot, n)].set(value, mode="drop")
        count = count + accepted
        state = jnp.where(count * size + slot >= n, IDLE, slots.state & ~0x180)
        slots = _step(sampler, params, slots._replace(state=state), words)
        return counter + 1, _draw(source, counter + 1, 3, size), slots, count, out

    def running(carry):
        return jnp.any((carry[2].state & 0x183) != IDLE)

    slots = _slots(size, sampler.empty_aux(size), sampler.stored(size))
    start = (
        jnp.uint32(0),
        _draw(source, jnp.uint32(0), 3, size),
        slots,
        jnp.zeros(size, jnp.int32),
        jnp.zeros(n, jnp.int32),
    )
    return lax.while_loop(running, body, start)[4]


def _stored(size: int, dyadic: bool) -> tuple:
    return () if dyadic else (jnp.zeros(size, jnp.uint32),)


def _fraction_of(numerator: Array, params, dyadic: bool):
    """numerator / D as a fraction: D = params.denominator, 2^(32 - params.shift) if dyadic."""
    if dyadic:
        return _Dyadic(numerator << params.shift, jnp.zeros_like(numerator))
    return _Rational(numerator)


def _commit(slots: _Slot) -> tuple[_Slot, Array, Array]:
    """(slots, ended, accepted): the attempts that ended at the last step, their slots IDLE."""
    ended, accepted = (slots.state & 0x80) != 0, (slots.state & 0x100) != 0
    return slots._replace(state=jnp.where(ended, IDLE, slots.state)), ended, accepted
