"""Exact samplers on the integers, in JAX: no floating point decides any outcome.

Canonne, Kamath & Steinke (2020, "The Discrete Gaussian for Differential Privacy", CKS20) draw
Bernoulli(exp(-gamma)) for a rational gamma <= 1 with integer comparisons only (their
Algorithm 1: K = the first k with A_k = 0, A_k ~ Bernoulli(gamma / k), is odd with probability
exp(-gamma)). Every sampler here is built from that loop, vectorised over arrays inside jit and
vmap with fixed shapes:

- **Level sets.** A law P(x) ~ exp(-E(x)) (E(y) = y^2 / (2 V) for the discrete Gaussian, X / t
  for the discrete Laplace's X) is drawn by rejection: a level G with P(G = g) ~ exp(-g)
  (Bernoulli(exp(-1)) trials counted until the first failure), a point x uniform in a window of
  the level {x : floor(E(x)) = G} (the same window for every level, as wide as the widest one,
  x rejected when it falls outside the level), then acceptance with Bernoulli(exp(-f)) for the
  fraction f = E(x) - G < 1 (CKS20's loop). exp(-G) exp(-f) = exp(-E(x)): accepted points follow
  P exactly. The exponential mechanism proposes a candidate i uniformly and accepts it with
  Bernoulli(exp(-E_i)): trials for the whole part of E_i (all must succeed), the loop for the
  fraction.
- **Trials four to a word.** A base-120 digit settles the K of a Bernoulli(exp(-1)) trial when
  K <= 5 (P(K = k) = (k - 1) / k!: 60, 40, 15, 4 in 120; the 120th value continues the trial at
  k = 6), so one 32-bit word holds four trials.
- **Bernoulli(f) digit by digit.** U < f is decided by comparing a byte of U with the same byte of
  f (exact integers: f is a dyadic rational, or a / D with an integer D): unequal bytes decide;
  equal bytes (probability 2^-8) pass to the next byte of both.
- **Uniform integers** below b: Lemire's multiply-high of a 32-bit word, rejecting the
  2^32 mod b words with the smallest low halves, exactly uniform; digits of words below a
  multiple of their radices. A word outside its threshold is redrawn at the next step.
- **Slots.** Each of `size` slots runs its own sequential rejection sampler. A step gives every
  slot three fresh words: a fresh attempt reads its point, four trials and the fraction loop's
  first indices (its J digit base 24 and three digit comparisons) and is settled within the step
  about 90% of the time; otherwise the slot carries the attempt over and continues it exactly
  where it stopped (one trial or one loop index per step). Slot i fills outputs i, i + size,
  i + 2 size, ... with its accepted attempts in order and stops when its share is full (never in
  the middle of an attempt): each slot's outputs are i.i.d. draws from P and slots are
  independent, so all outputs are.
- **Words** are jax.random's threefry2x32 (both halves of each block, `jax.random.bits` keeps
  their xor), a new block of counters (i, step) per step, from the key split once.

Nothing here touches private data: `jaxdp.noise` adds these draws to private values.

Ranges (int32/uint32 arithmetic, no x64 needed): the discrete Gaussian takes sigma in
[`SIGMA_MIN`, `SIGMA_MAX`]; its variance V = 2^s / (2 m) (`GaussianLattice`) is sigma^2 rounded up
by a relative 2^-10 at most (never below it). Its levels stop at E(y) < 2^14, so the law drawn
is the discrete Gaussian conditioned on |y| <= `GaussianLattice.cap` (about 181 sigma; the mass
beyond is below exp(-16000)). The discrete Laplace keeps X <= 2^30 (`discrete_laplace`). A
K-loop index is kept below 2^16: reaching it needs 2^16 - 2 successive Bernoulli(1/k) = 1,
probability below 1 / 65534!.

Expected cost per draw (`bench/bench_noise.py` measures it): the discrete Gaussian takes about
1.8 attempts and 2.0 slot steps (three words each) for sigma >= 2, up to 3.4 steps at sigma =
0.3; the discrete Laplace about 1.9 steps for scale >= 1. The loop runs until the slowest slot
is done, about 1.45 steps per step of work at 64 draws per slot.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp._jit import fast_compiled
from jaxdp.types import Array, Key

SIGMA_MIN = 2.0**-6
SIGMA_MAX = 46_000.0  # keeps |y| <= cap < 2^25, so m y^2 fits in 64 bits
LAPLACE_CAP = 2**30
_WORD = 2**32
_PRECISION = 2**11  # m >= 2^11: V = 2^s / (2 m) is sigma^2 rounded up by a relative 2^-10 at most
_LEVELS = 2**14  # the Gaussian's support: E(y) = m y^2 / 2^s < 2^14 (level starts on the host)
_K_LIMIT = 2**16  # K-loop indices are kept below it (module docstring)


# --- host-side parameters --------------------------------------------------------------------------


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


def _u32(value) -> Array:
    return jnp.asarray(value, jnp.uint32)


def _lemire_threshold(bound: int) -> int:
    """2^32 mod bound: Lemire's rejection threshold for a uniform integer below `bound`."""
    return _WORD % bound


def _division_magic(divisor: int) -> tuple[int, int, int]:
    """(multiplier, shift1, shift2) of Granlund & Montgomery (1994, Fig. 4.1): for every 32-bit n,
    n // divisor = (t + ((n - t) >> shift1)) >> shift2 with t = (multiplier n) >> 32."""
    assert 1 <= divisor < _WORD
    bits = (divisor - 1).bit_length()  # ceil(log2 divisor)
    multiplier = (_WORD * ((1 << bits) - divisor)) // divisor + 1
    return multiplier, min(bits, 1), max(bits - 1, 0)


# --- words and integer arithmetic -------------------------------------------------------------------


def _consume(key: Key) -> Array:
    """The source of a sampler's words: `key` split once (jax's key-reuse checker counts the split
    as a use of `key`, so a caller that hands one key to two samplers is caught, as with
    `jax.random`'s own samplers), as its raw threefry key data (or, for other key types, the
    split key itself)."""
    key = jax.random.split(key, 1)[0]
    return jax.random.key_data(key) if str(jax.random.key_impl(key)) == "threefry2x32" else key


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry(key: Array, x0: Array, x1: Array) -> tuple[Array, Array]:
    """Threefry-2x32 (20 rounds), the hash under `jax.random`'s default generator, written out
    (it equals `jax.extend.random.threefry_2x32`; straight-line code compiles faster than jax's
    rolled loop)."""
    keys = (key[0], key[1], key[0] ^ key[1] ^ jnp.uint32(0x1BD11BDA))
    x0, x1 = x0 + keys[0], x1 + keys[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0
        x0, x1 = x0 + keys[(i + 1) % 3], x1 + keys[(i + 2) % 3] + jnp.uint32(i + 1)
    return x0, x1


def _draw(source: Array, counter: Array, rows: int, width: int) -> Array:
    """(rows, width) uniform uint32 words: block `counter` of the stream from `_consume`.

    Every draw of a sampler call uses a new block (a counter carried through its loop). For
    threefry keys, word i of block c is one half of threefry2x32(key; (i, c)) (both halves are
    used; `jax.random.bits` keeps their xor); other key types use jax.random.bits(fold_in(key, c)).
    """
    if jax.dtypes.issubdtype(source.dtype, jax.dtypes.prng_key):
        return jax.random.bits(jax.random.fold_in(source, counter), (rows, width), jnp.uint32)
    n = rows * width
    half = (n + 1) // 2
    x0, x1 = _threefry(source, lax.iota(jnp.uint32, half), jnp.full(half, counter, jnp.uint32))
    return jnp.concatenate([x0, x1])[:n].reshape(rows, width)


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


def _less(a: tuple[Array, Array], b: tuple[Array, Array]) -> Array:
    """a < b for two-word (high, low) integers."""
    return (a[0] < b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))


def _subtract(a: tuple[Array, Array], b: tuple[Array, Array]) -> tuple[Array, Array]:
    """a - b for two-word integers, a >= b."""
    return a[0] - b[0] - (a[1] < b[1]).astype(jnp.uint32), a[1] - b[1]


def _shift_left(value: tuple[Array, Array], amount: Array) -> tuple[Array, Array]:
    """A two-word integer shifted left by `amount` in [0, 64] (bits above 64 are dropped)."""
    high, low = value
    amount = amount.astype(jnp.uint32)
    small = amount < 32
    carried = jnp.where(amount == 0, 0, low >> (32 - amount))  # shifts of 32 or more give 0
    return jnp.where(small, (high << amount) | carried, low << (amount - 32)), jnp.where(
        small, low << amount, 0
    )


def _below(words: Array, bound, threshold) -> tuple[Array, Array]:
    """(uniform below `bound`, accepted): Lemire's method, exact where accepted.

    The value is the high word of words * bound; the 2^32 mod bound words whose low word falls
    below `threshold` = 2^32 mod bound are rejected, which leaves floor(2^32 / bound) words for
    every value (Lemire 2019, "Fast random integer generation in an interval", Lemma 4.1).
    """
    high, low = _mul_wide(words, _u32(bound))
    return high, low >= _u32(threshold)


def _inverse_quotient(k: Array) -> Array:
    """q = (2^32 - 2^10) / k in float32, rounded down: q >= 1 and k q < 2^32 for 1 <= k < 2^22 (a
    float32 quotient is within a relative 2^-23 of the true one)."""
    return (jnp.float32(2**32 - 2**10) / k.astype(jnp.float32)).astype(jnp.uint32)


def _inverse(words: Array, k: Array) -> tuple[Array, Array]:
    """(accepted, Bernoulli(1/k)) from one word, exact where accepted; k >= 1 per entry.

    For any q >= 1 with k q <= 2^32, a word below k q is accepted and is 1 below q: q of the k q
    accepted words, exactly 1/k whatever q is (q = `_inverse_quotient(k)`).
    """
    k = jnp.maximum(k, 1).astype(jnp.uint32)
    q = _inverse_quotient(k)
    return words < k * q, words < q


def _divide(numerator: Array, magic: tuple[Array, Array, Array]) -> Array:
    """numerator // divisor for a uint32 array, from `_division_magic(divisor)`."""
    multiplier, shift1, shift2 = magic
    t, _ = _mul_wide(numerator, multiplier)
    return (t + ((numerator - t) >> shift1)) >> shift2


# --- fractions: Bernoulli(f) digit by digit ---------------------------------------------------------
#
# A fraction f in [0, 1) is compared with a uniform U one digit (base 2^b) at a time:
# digit(f) = floor(2^b f) and the rest f' = frac(2^b f) (exactly, as integers). With u the digit of
# U: u < digit -> U < f; u > digit, or u = digit and f' = 0 -> U >= f; u = digit, f' > 0 -> U < f
# with probability f', decided by the next digit of U against f' (a tie, probability 2^-b).


class _Dyadic(NamedTuple):
    """f = (high 2^32 + low) / 2^64 (a dyadic rational with at most 64 bits)."""

    high: Array
    low: Array

    def digit(self, b: int, params) -> tuple[Array, _Dyadic]:
        rest = _Dyadic((self.high << b) | (self.low >> (32 - b)), self.low << b)
        return self.high >> (32 - b), rest

    def half(self, bit: Array, params) -> _Dyadic:
        """(bit + f) / 2: the rest after 7 digits from `bit` (the 8th digit) and the rest after 8."""
        return _Dyadic((bit << 31) | (self.high >> 1), (self.high << 31) | (self.low >> 1))

    def is_zero(self) -> Array:
        return (self.high | self.low) == 0

    @staticmethod
    def recall(f: _Dyadic, depth: Array, stored: tuple, params) -> _Dyadic:
        """The rest of f after `depth` bits: f shifted left (nothing stored)."""
        return _Dyadic(*_shift_left((f.high, f.low), jnp.minimum(depth, 64)))

    @staticmethod
    def store(f, depth, events, rest, stored: tuple, params) -> tuple:
        return ()


class _Rational(NamedTuple):
    """f = numerator / D, D a per-call uint32 (params.denominator), numerator < D."""

    numerator: Array

    def digit(self, b: int, params) -> tuple[Array, _Rational]:
        denominator = params.denominator
        remainder, quotient = self.numerator, jnp.zeros_like(self.numerator)
        for _ in range(b):  # long division: remainder < D < 2^32, 2 remainder may carry
            doubled = remainder << 1
            bit = ((remainder >> 31) == 1) | (doubled >= denominator)
            remainder = jnp.where(bit, doubled - denominator, doubled)
            quotient = (quotient << 1) | bit.astype(jnp.uint32)
        return quotient, _Rational(remainder)

    def half(self, bit: Array, params) -> _Rational:
        """(bit D + numerator) / 2 (an integer: the rest after 7 digits, see `_Dyadic.half`)."""
        d = params.denominator
        odd = bit * (d & self.numerator & 1)
        return _Rational((self.numerator >> 1) + bit * (d >> 1) + odd)

    def is_zero(self) -> Array:
        return self.numerator == 0

    @staticmethod
    def recall(f: _Rational, depth: Array, stored: tuple, params) -> _Rational:
        """The rest of f after `depth` bits: stored (its numerator)."""
        return _Rational(jnp.where(depth == 0, f.numerator, stored[0]))

    @staticmethod
    def store(f: _Rational, depth: Array, events, rest: _Rational, stored: tuple, params) -> tuple:
        """The numerator of the rest after `depth` bits: f's after 7 or 8 bits when the K-loop is
        entered with a tie, `rest` after a tie at this step, kept otherwise."""
        entering, tied, _ = events
        byte, rest8 = f.digit(8, params)
        entered = jnp.where(depth == 7, rest8.half(byte & 1, params).numerator, rest8.numerator)
        return (jnp.where(entering, entered, jnp.where(tied, rest.numerator, stored[0])),)


def _versus(u: Array, top: Array, exact: Array) -> tuple[Array, Array, Array]:
    """(U < f, U >= f, undecided) from a digit u of U and the same digit `top` of f, `exact` if
    f has no further nonzero digits."""
    equal = u == top
    return u < top, (u > top) | (equal & exact), equal & ~exact


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


# --- samplers ---------------------------------------------------------------------------------------


def _stored(size: int, dyadic: bool) -> tuple:
    return () if dyadic else (jnp.zeros(size, jnp.uint32),)


def _fraction_of(numerator: Array, params, dyadic: bool):
    """numerator / D as a fraction: D = params.denominator, 2^(32 - params.shift) if dyadic."""
    if dyadic:
        return _Dyadic(numerator << params.shift, jnp.zeros_like(numerator))
    return _Rational(numerator)


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


def _denominator(value) -> tuple[Array, Array, bool]:
    """(D, 32 - log2 D, dyadic) for a denominator: dyadic (the faster fraction type) when it is a
    Python int power of two, else D is any integer in [1, 2^32)."""
    shift = _dyadic_shift(value)
    return _u32(value), _u32(shift or 0), shift is not None


def _dyadic_shift(value) -> int | None:
    """32 - log2 D for a Python int power of two D in [1, 2^32); None for any other value."""
    if isinstance(value, int) and value & (value - 1) == 0 and 1 <= value < _WORD:
        return 32 - (value.bit_length() - 1)
    return None


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


def _commit(slots: _Slot) -> tuple[_Slot, Array, Array]:
    """(slots, ended, accepted): the attempts that ended at the last step, their slots IDLE."""
    ended, accepted = (slots.state & 0x80) != 0, (slots.state & 0x100) != 0
    return slots._replace(state=jnp.where(ended, IDLE, slots.state)), ended, accepted


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
        gaps=gaps.astype(jnp.uint32),
        eligible=jnp.asarray(eligible, bool),
    )
    return _exponential_choice(_Choice(dyadic), params, _consume(key))


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
