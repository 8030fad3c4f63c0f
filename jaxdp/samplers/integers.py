"""uint32 words and the integer arithmetic the samplers decide with: threefry words from a key,
uniform integers below a bound (Lemire), two-word products, shifts and comparisons, division by
constants (Granlund & Montgomery), and Bernoulli(f) of an exact fraction f digit by digit."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdp._threefry import hash_pairs, split_keys
from jaxdp.types import Array, Key

_WORD = 2**32


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
    key = split_keys(key, 1)[0]
    return jax.random.key_data(key) if str(jax.random.key_impl(key)) == "threefry2x32" else key


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
    x0, x1 = hash_pairs(source, lax.iota(jnp.uint32, half), jnp.full(half, counter, jnp.uint32))
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
