"""Unit tests of `jaxdp.samplers` internals: the integer arithmetic every exact draw rests on,
checked against Python's big integers and fractions, the host-side lattice parameters, and the
slot machine (`_step`) against an independent scalar re-implementation of the algorithm run on
the same words.

All deterministic (fixed words, fixed seeds, Hypothesis derandomised): false-failure rate 0.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.extend.random import threefry_2x32

from jaxdp import samplers
from jaxdp._threefry import hash_pairs
from jaxdp.samplers import integers, laws, rejection

WORD = 2**32
PROPERTIES = settings(derandomize=True, deadline=None, max_examples=200)
EDGE_WORDS = [0, 1, 2, 3, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
words32 = st.integers(0, WORD - 1)


def _words(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [np.array(EDGE_WORDS, np.uint64), rng.integers(0, WORD, n, dtype=np.uint64)]
    ).astype(np.uint32)


def _u32(values) -> jnp.ndarray:
    return jnp.asarray(np.asarray(values, dtype=np.uint64).astype(np.uint32))


# --- integer arithmetic -------------------------------------------------------------------------


def test_mul_wide_is_the_64_bit_product():
    """_mul_wide(a, b) = (a b >> 32, a b mod 2^32) for edge and random words."""
    a, b = _words(1, 5000), _words(2, 5000)
    a = np.concatenate([a, np.full(len(EDGE_WORDS), WORD - 1, np.uint32)])
    b = np.concatenate([b, np.array(EDGE_WORDS, np.uint32)])
    high, low = (np.asarray(x) for x in integers._mul_wide(jnp.asarray(a), jnp.asarray(b)))
    for x, y, h, lo in zip(a.tolist(), b.tolist(), high.tolist(), low.tolist(), strict=True):
        assert (h, lo) == divmod(x * y, WORD), (x, y)


@PROPERTIES
@given(st.lists(st.tuples(words32, words32, words32, words32, st.integers(0, 64)), min_size=20, max_size=20))
def test_two_word_helpers_match_python(cases):
    """_less, _subtract (when a >= b) and _shift_left (bits above 64 dropped) on (high, low) pairs."""
    ah, al, bh, bl, shift = (np.array(c, np.int64) for c in zip(*cases, strict=True))
    a = [int(h) << 32 | int(lo) for h, lo in zip(ah, al, strict=True)]
    b = [int(h) << 32 | int(lo) for h, lo in zip(bh, bl, strict=True)]
    less = np.asarray(integers._less((_u32(ah), _u32(al)), (_u32(bh), _u32(bl))))
    assert less.tolist() == [x < y for x, y in zip(a, b, strict=True)]
    top, bottom = (
        [max(x, y) for x, y in zip(a, b, strict=True)],
        [min(x, y) for x, y in zip(a, b, strict=True)],
    )
    hi, lo = integers._subtract(
        (_u32([t >> 32 for t in top]), _u32([t & 0xFFFFFFFF for t in top])),
        (_u32([t >> 32 for t in bottom]), _u32([t & 0xFFFFFFFF for t in bottom])),
    )
    got = [int(h) << 32 | int(x) for h, x in zip(np.asarray(hi), np.asarray(lo), strict=True)]
    assert got == [t - u for t, u in zip(top, bottom, strict=True)]
    hi, lo = integers._shift_left((_u32(ah), _u32(al)), jnp.asarray(shift, jnp.uint32))
    got = [int(h) << 32 | int(x) for h, x in zip(np.asarray(hi), np.asarray(lo), strict=True)]
    assert got == [(x << int(s)) % 2**64 for x, s in zip(a, shift, strict=True)]


@pytest.mark.parametrize(
    "bound", [1, 2, 3, 7, 24, 120, 1000, 2**20 + 3, 2**31, 2**31 + 1, 3 * 10**9, WORD - 1]
)
def test_below_is_lemire_and_exactly_uniform(bound):
    """_below(w, b, 2^32 mod b) = (w b >> 32, accepted iff w b mod 2^32 >= 2^32 mod b), and every
    value v < b has exactly floor(2^32 / b) accepted words: they are the w with
    v 2^32 + (2^32 mod b) <= w b < (v + 1) 2^32, counted exactly for every v (b <= 2^21) or for
    edge and random v (Lemire 2019, Lemma 4.1)."""
    words = _words(bound % 1000, 20_000)
    threshold = WORD % bound
    value, ok = (np.asarray(x) for x in integers._below(jnp.asarray(words), bound, threshold))
    product = words.astype(object) * bound
    assert value.tolist() == [p >> 32 for p in product]
    assert ok.tolist() == [p % WORD >= threshold for p in product]
    values = range(bound) if bound <= 2**21 else [0, 1, bound // 2, bound - 2, bound - 1]
    for v in values:
        first = -(-(v * WORD + threshold) // bound)  # the smallest w with w b >= v 2^32 + t
        last = ((v + 1) * WORD - 1) // bound
        assert last - first + 1 == WORD // bound, v


def test_inverse_is_exactly_one_over_k():
    """_inverse(w, k) accepts w < k q and is 1 for w < q, q = _inverse_quotient(k): exact
    Bernoulli(1/k) (q of the k q accepted words) provided q >= 1 and k q <= 2^32, checked for every
    k < 2^16 and for larger k up to 2^22; and the decisions at the boundaries."""
    ks = np.concatenate([np.arange(1, 2**16), np.random.default_rng(4).integers(2**16, 2**22, 5000)])
    q = np.asarray(integers._inverse_quotient(jnp.asarray(ks, jnp.uint32))).astype(np.int64)
    assert np.all(q >= 1) and np.all(ks * q <= WORD)
    for k in (1, 2, 3, 6, 7, 100, 65535):
        qk = int(np.asarray(integers._inverse_quotient(jnp.asarray([k], jnp.uint32)))[0])
        words = np.array([0, qk - 1, qk, qk + 1, k * qk - 1, k * qk, WORD - 1], np.int64) % WORD
        ok, one = (np.asarray(x) for x in integers._inverse(_u32(words), jnp.full(words.shape, k, jnp.int32)))
        assert ok.tolist() == [w < k * qk for w in words.tolist()]
        assert one.tolist() == [w < qk for w in words.tolist()]


@PROPERTIES
@given(st.integers(1, WORD - 1), st.lists(words32, min_size=30, max_size=30))
def test_divide_by_granlund_montgomery_magic(divisor, numerators):
    """_divide(n, _division_magic(d)) = n // d for every 32-bit n (Granlund & Montgomery 1994)."""
    numerators = [*numerators, 0, 1, divisor - 1, divisor, min(divisor + 1, WORD - 1), WORD - 1]
    magic = tuple(jnp.uint32(v) for v in integers._division_magic(divisor))
    got = np.asarray(integers._divide(_u32(numerators), magic))
    assert got.tolist() == [n // divisor for n in numerators]


# --- words ----------------------------------------------------------------------------------------


def test_threefry_is_jax_threefry_and_draws_use_both_halves():
    """hash_pairs(key, x0, x1) equals jax's threefry2x32 on the counter pairs (x0, x1), on JAX
    arrays (the samplers' programs) and NumPy ones (keys derived on the host); a draw of block c
    is the two halves of threefry2x32(key; (i, c)) for i = 0, 1, ..., and other key types go
    through jax.random.bits."""
    source = integers._consume(jax.random.key(7))
    x0 = jnp.asarray(np.arange(300, dtype=np.uint32) * 977)
    x1 = jnp.full(300, 12345, jnp.uint32)
    theirs = np.asarray(threefry_2x32(source, jnp.concatenate([x0, x1])))
    for mine in (hash_pairs(source, x0, x1), hash_pairs(*map(np.asarray, (source, x0, x1)))):
        np.testing.assert_array_equal(np.concatenate([np.asarray(m) for m in mine]), theirs)
    words = np.asarray(integers._draw(source, jnp.uint32(5), 3, 100))
    halves = hash_pairs(source, jnp.arange(150, dtype=jnp.uint32), jnp.full(150, 5, jnp.uint32))
    np.testing.assert_array_equal(words.ravel(), np.concatenate([np.asarray(h) for h in halves]))
    assert not np.array_equal(words, np.asarray(integers._draw(source, jnp.uint32(6), 3, 100)))
    rbg = integers._consume(jax.random.key(7, impl="rbg"))
    assert integers._draw(rbg, jnp.uint32(5), 3, 100).shape == (3, 100)


# --- trials and the K-loop's digits -------------------------------------------------------------


def _k_law(k: int, gamma: Fraction = Fraction(1)) -> Fraction:
    """P(K = k) for CKS20's loop with A_j ~ Bernoulli(gamma / j): gamma^(k-1)/(k-1)! - gamma^k/k!."""
    return gamma ** (k - 1) / math.factorial(k - 1) - gamma**k / math.factorial(k)


def test_digit_tables_are_the_k_loop_law():
    """The base-120 trial digit: K = 2, 3, 4, 5 take 60, 40, 15, 4 of 120 values (P(K = k) =
    (k - 1) / k! for gamma = 1), success (K odd) the first 44, failure the next 75, K >= 6 the
    last one. The base-24 J digit: J = 2, 3, 4 take 12, 8, 3 values and J >= 5 one. And the
    success probability of a trial is exp(-1) (the alternating series, to 1e-15)."""
    counts = [_k_law(k) * 120 for k in (2, 3, 4, 5)]
    assert counts == [60, 40, 15, 4] and 120 - sum(counts) == 1
    assert counts[1] + counts[3] == 44 and counts[0] + counts[2] == 75
    assert [_k_law(k) * 24 for k in (2, 3, 4)] == [12, 8, 3]
    assert float(sum(_k_law(k) for k in range(3, 41, 2))) == pytest.approx(math.exp(-1), abs=1e-15)
    assert max(120**4 * 20, 24 * 2**23 * 21) < WORD


def _walk_reference(digits, reached):
    """The geometric walk over four trials, as documented (status, successes)."""
    for i, d in enumerate(digits):
        if reached[i]:
            return rejection._REACHED, i
        if d >= 119:
            return rejection._PENDING_TRIAL, i
        if d >= 44:
            return rejection._FAILED, i
    return (rejection._REACHED if reached[4] else rejection._PENDING_NEW), 4


def test_geometric_walk_matches_reference():
    """_geometric on words with chosen base-120 digits (successes, failures, the continuing value
    119, in every position) and reached patterns (none, from each index on): status, successes and
    the word threshold 120^4 * 20, against `_walk_reference`."""
    rng = np.random.default_rng(5)
    digits = rng.choice([0, 43, 44, 118, 119, 7, 60], size=(3000, 4))
    extra = rng.integers(0, 21, 3000)  # leftover values 20 (>= threshold) test the rejection
    words = sum(digits[:, i].astype(np.int64) * 120**i for i in range(4)) + extra * 120**4
    words = np.minimum(words, WORD - 1)
    for first_reached in (99, 0, 2, 4):
        reached = [jnp.asarray(i >= first_reached) for i in range(5)]
        status, g, ok = (np.asarray(x) for x in rejection._geometric(_u32(words), reached))
        assert ok.tolist() == (words < 120**4 * 20).tolist()
        flags = [i >= first_reached for i in range(5)]
        for row, s, n, accepted in zip(digits.tolist(), status.tolist(), g.tolist(), ok, strict=True):
            assert not accepted or (s, n) == _walk_reference(row, flags)


# --- fractions ----------------------------------------------------------------------------------


def _dyadic(f: Fraction) -> integers._Dyadic:
    value = int(f * 2**64)
    assert Fraction(value, 2**64) == f
    return integers._Dyadic(_u32([value >> 32]), _u32([value & 0xFFFFFFFF]))


def _fraction_value(f, denominator: int) -> Fraction:
    if isinstance(f, integers._Dyadic):
        return Fraction(int(np.asarray(f.high)[0]) << 32 | int(np.asarray(f.low)[0]), 2**64)
    return Fraction(int(np.asarray(f.numerator)[0]), denominator)


class _Denominator:
    def __init__(self, d: int):
        self.denominator = jnp.uint32(d)


@PROPERTIES
@given(st.integers(0, 2**64 - 1), st.integers(1, 8))
def test_dyadic_digits_and_halves(numerator, bits):
    """_Dyadic.digit(b) = (floor(2^b f), frac(2^b f)); half(bit) = (bit + f) / 2 (the rest after
    b - 1 bits from the rest after b); recall(f, depth) = frac(2^depth f); is_zero."""
    f = Fraction(numerator, 2**64)
    top, rest = _dyadic(f).digit(bits, None)
    assert int(np.asarray(top)[0]) == math.floor(f * 2**bits)
    assert _fraction_value(rest, 0) == f * 2**bits - math.floor(f * 2**bits)
    bit = numerator & 1
    assert _fraction_value(_dyadic(f).half(jnp.uint32(bit), None), 0) == (bit + f) / 2 or numerator % 2
    for depth in (0, 1, 7, 8, 33, 63):
        recalled = integers._Dyadic.recall(_dyadic(f), jnp.int32(depth), (), None)
        assert _fraction_value(recalled, 0) == f * 2**depth - math.floor(f * 2**depth)
    assert bool(np.asarray(_dyadic(f).is_zero())[0]) == (numerator == 0)


@PROPERTIES
@given(st.integers(1, WORD - 1), st.integers(0, WORD - 1), st.integers(1, 8))
def test_rational_digits_and_halves(denominator, numerator, bits):
    """_Rational.digit(b) by long division = (floor(2^b a / D), 2^b a mod D) for every D < 2^32
    (the doubled remainder may carry past 32 bits); half(bit) = (bit D + a) / 2 whenever that is
    an integer (as it is for the rest after 8 bits and the 8th bit)."""
    a = numerator % denominator
    params = _Denominator(denominator)
    top, rest = integers._Rational(_u32([a])).digit(bits, params)
    assert int(np.asarray(top)[0]) == (a << bits) // denominator
    assert int(np.asarray(rest.numerator)[0]) == (a << bits) % denominator
    _, rest7 = integers._Rational(_u32([a])).digit(7, params)
    byte, rest8 = integers._Rational(_u32([a])).digit(8, params)
    half = rest8.half(byte & 1, params)
    assert int(np.asarray(half.numerator)[0]) == int(np.asarray(rest7.numerator)[0])


def test_versus_truth_table():
    """_versus(u, top, exact): u < top -> U < f; u > top, or u = top with nothing left of f ->
    U >= f; u = top with more of f -> undecided."""
    u, top = jnp.asarray([1, 3, 2, 2], jnp.uint32), jnp.asarray([2, 2, 2, 2], jnp.uint32)
    exact = jnp.asarray([False, False, True, False])
    one, zero, tie = (np.asarray(x).tolist() for x in integers._versus(u, top, exact))
    assert one == [True, False, False, False]
    assert zero == [False, True, True, False]
    assert tie == [False, False, False, True]


# --- host-side parameters -----------------------------------------------------------------------


@PROPERTIES
@given(st.floats(samplers.SIGMA_MIN, samplers.SIGMA_MAX))
def test_gaussian_lattice_invariants(sigma):
    """gaussian_lattice(sigma): sigma^2 <= V = 2^s / (2 m) <= sigma^2 (1 + 2^-10) with m in
    [2^11, 2^12); cap = the largest y with m y^2 < 2^14 2^s (so cap >= 181 sigma - 1 > 32 sigma
    for sigma >= 1/64... and |y| <= cap < 2^25, m cap^2 < 2^62)."""
    lattice = samplers.gaussian_lattice(sigma)
    target = Fraction(sigma) ** 2
    assert target <= lattice.variance <= target * (1 + Fraction(1, 2**10))
    assert 2**11 <= lattice.m < 2**12
    limit = 2**14 << lattice.s
    assert lattice.m * lattice.cap**2 < limit <= lattice.m * (lattice.cap + 1) ** 2
    assert lattice.cap + 1 > 181 * sigma and lattice.cap < 2**25


@pytest.mark.parametrize("sigma", [samplers.SIGMA_MIN, 0.3, 1.0, 2.0, 10.0, 333.3, 46_000.0])
def test_level_starts_and_window(sigma):
    """level_starts() (numpy, int64) equals level_start (Python integers) on all levels for small
    sigma and on a sample otherwise: a_g is the smallest y >= 0 with m y^2 >= g 2^s. The point's
    window W = max(2 a_1 - 1, 2 (a_2 - a_1 + 1)) covers every level: 2 a_1 - 1 values in level 0
    and at most W / 2 nonnegative values in any level g >= 1 (checked on all 2^14 levels)."""
    lattice = samplers.gaussian_lattice(sigma)
    starts = lattice.level_starts().astype(object)
    levels = range(len(starts)) if sigma < 1 else list(range(200)) + list(range(200, len(starts), 97))
    for g in levels:
        a = starts[g]
        assert a == lattice.level_start(g)
        assert lattice.m * a * a >= g << lattice.s and (a == 0 or lattice.m * (a - 1) ** 2 < g << lattice.s)
    window = max(2 * starts[1] - 1, 2 * (starts[2] - starts[1] + 1))
    widths = np.diff(np.append(lattice.level_starts(), lattice.cap + 1))
    assert np.all(2 * widths[1:] <= window)


@PROPERTIES
@given(st.floats(1e-3, 2.0**24 - 2))
def test_laplace_lattice_invariants(scale):
    """laplace_lattice(scale) = (t, s): scale <= t / s <= scale (1 + 2^-10); for scale <= 2^13, t
    is a power of two below 2^24 and s >= 2^10; above, s = 1 and t < 2^24."""
    t, s = samplers.laplace_lattice(scale)
    assert Fraction(scale) <= Fraction(t, s) <= Fraction(scale) * (1 + Fraction(1, 2**10))
    assert t < 2**24
    if scale <= 2**13:
        assert t & (t - 1) == 0 and s >= 2**10
    else:
        assert s == 1


@pytest.mark.parametrize(
    "sigma", [0.0, -1.0, samplers.SIGMA_MIN / 2, samplers.SIGMA_MAX * 1.01, math.inf, math.nan]
)
def test_gaussian_lattice_refuses_out_of_range(sigma):
    with pytest.raises(ValueError):
        samplers.gaussian_lattice(sigma)


# --- the slot machine against a scalar reference ------------------------------------------------
#
# `_Reference` runs one slot of the documented algorithm in Python (exact integers and fractions,
# no shared code with `_step` beyond `_inverse_quotient`, whose only effect is which words are
# rejected). The tests feed the same words to both, step by step, and compare the slot after every
# step. The words are partly random and partly forced: digits that tie with f's digits, trials
# that continue past k = 5, walks of four successes, J >= 5, words above their thresholds.


class _Reference:
    branches: ClassVar[set] = set()  # the rare branches taken, over all references

    def __init__(self, sampler):
        self.sampler = sampler
        self.phase, self.g, self.k, self.aux = rejection.FRESH, 0, 2, None
        self.j, self.c_known, self.rest, self.f, self.entered = 0, False, None, None, False

    def _inverse(self, word: int, k: int) -> tuple[bool, bool]:
        q = int(np.asarray(integers._inverse_quotient(jnp.asarray([k], jnp.uint32)))[0])
        return word < k * q, word < q

    def _walk(self, word: int) -> None:
        if word >= 120**4 * 20:
            self.branches.add("walk word redrawn")
            return  # redrawn at the next step: stays at a new trial
        digits = [(word // 120**i) % 120 for i in range(4)]
        status, walked = _walk_reference(
            digits, [self.sampler.reached(self.aux, self.g + i) for i in range(5)]
        )
        self.g += walked
        if status == rejection._PENDING_TRIAL:
            self.k = 6
            self.branches.add("trial past k = 5")
        elif status == rejection._PENDING_NEW:
            self.k = 2
            self.branches.add("four successes")
        else:
            self._place(status)

    def _place(self, status: int) -> None:
        valid, self.f = self.sampler.place(self.aux, status, self.g)
        self.ended, self.accepted, self.entered = not valid, False, valid

    def _fraction_fast(self, word: int) -> None:
        self.phase, self.rest, self.c_known = rejection.FRACTION, self.f, True
        if word >= 24 * 2**23 * 21:
            self.k, self.j = 1, -2  # the loop restarts from k = 1 at the next step
            self.branches.add("loop word redrawn")
            return
        digit, bits = word % 24, word // 24
        j = 2 if digit < 12 else 3 if digit < 20 else 4 if digit < 23 else 5
        fields = [(bits & 0xFF, 8), ((bits >> 8) & 0xFF, 8), ((bits >> 16) & 0x7F, 7)]
        for k in (1, 2, 3, 4):
            if k == j:
                self._end(k)
                return
            if k == 4:  # J >= 5: the loop continues at k = 4, Bernoulli(1/4) = 1 known
                self.k, self.j, self.rest = 4, -5, self.f
                self.branches.add("loop past k = 3")
                return
            outcome, rest = _bernoulli_digit(self.f, *fields[k - 1])
            if outcome == 0:
                self._end(k)
                return
            if outcome is None:
                self.k, self.j, self.rest = k, (j if j < 5 else -5), rest
                self.branches.add(f"tie at k = {k}")
                return

    def _end(self, k: int) -> None:
        self.phase, self.ended, self.accepted = rejection.FRESH, True, k % 2 == 1

    def step(self, words) -> None:
        w0, w1, w2 = (int(w) for w in words)
        self.ended, self.accepted, self.entered = False, False, False
        if self.phase == rejection.FRESH:
            aux, ok = self.sampler.propose(w0)
            if not ok:
                self.branches.add("point word redrawn")
                return
            self.aux, self.g, self.phase, self.k = aux, 0, rejection.LEVEL, 2
            self._walk(w1)
        elif self.phase == rejection.LEVEL and self.k == 2:
            self._walk(w1)
        elif self.phase == rejection.LEVEL:
            ok, one = self._inverse(w0, self.k)
            self.branches.add("trial step")
            if ok and one:
                self.k += 1
            elif ok and self.k % 2 == 1:
                self.g, self.k = self.g + 1, 2
                if self.sampler.reached(self.aux, self.g):
                    self._place(rejection._REACHED)
            elif ok:
                self._place(rejection._FAILED)
        elif self.phase == rejection.FRACTION:
            self._fraction_step(w0, w1)
        if self.entered:
            self._fraction_fast(w2)
        if self.ended:
            self.phase = rejection.FRESH

    def _fraction_step(self, w0: int, w1: int) -> None:
        k, j = self.k, self.j
        if self.c_known or (j > 0 and k < j) or (j <= 0 and k < -j):
            c = True
        elif j > 0:
            c = False
        else:
            ok, c = self._inverse(w0, k)
            self.branches.add("loop draws Bernoulli(1/k)")
            if not ok:
                return
        if not c:
            self._end(k)
            return
        outcome, rest = _bernoulli_digit(self.rest, w1 & 0xFF, 8)
        self.branches.add(f"loop byte {outcome}")
        if outcome == 1:
            self.k, self.c_known, self.rest = k + 1, False, self.f
        elif outcome == 0:
            self._end(k)
        else:
            self.c_known, self.rest = True, rest


def _bernoulli_digit(f: Fraction, u: int, bits: int):
    """(1, 0 or None (undecided), the rest of f) for the digit u of U against f."""
    top = math.floor(f * 2**bits)
    rest = f * 2**bits - top
    if u < top:
        return 1, rest
    if u > top or rest == 0:
        return 0, rest
    return None, rest


class _GaussianReference:
    def __init__(self, lattice):
        self.lattice = lattice
        self.starts = [int(a) for a in lattice.level_starts()[:64]]
        self.window = max(2 * self.starts[1] - 1, 2 * (self.starts[2] - self.starts[1] + 1))

    def propose(self, word):
        product = word * self.window
        return product >> 32, product % WORD >= WORD % self.window

    def reached(self, aux, g):
        return g >= 2**14

    def point(self, z, g):
        first = self.starts[1]
        if g == 0:
            return z - (first - 1), z < 2 * first - 1
        magnitude = self.lattice.level_start(g) + z // 2
        return (-magnitude if z % 2 else magnitude), True

    def place(self, z, status, g):
        y, inside = self.point(z, g)
        exponent = Fraction(self.lattice.m * y * y, 2**self.lattice.s)
        valid = status == rejection._FAILED and inside and g <= exponent < g + 1
        return valid, exponent - g


class _LaplaceReference:
    def __init__(self, t, s):
        self.t, self.s = t, s

    def propose(self, word):
        product = word * 2 * self.t
        return product >> 32, product % WORD >= WORD % (2 * self.t)

    def reached(self, aux, g):
        return g > samplers.LAPLACE_CAP // self.t

    def place(self, v, status, g):
        u, negative = v >> 1, v & 1
        x = g * self.t + u
        valid = (
            status == rejection._FAILED and x <= samplers.LAPLACE_CAP and not (negative and x // self.s == 0)
        )
        return valid, Fraction(u, self.t)


class _ExponentReference:
    def __init__(self, numerator, denominator):
        self.numerator, self.denominator = numerator, denominator

    def propose(self, word):
        return self.numerator, True

    def reached(self, aux, g):
        return (g + 1) * self.denominator > self.numerator

    def place(self, aux, status, g):
        return status == rejection._REACHED, Fraction(self.numerator - g * self.denominator, self.denominator)


def _forced_words(rng, refs) -> np.ndarray:
    """Three words per slot, random or forced towards the rare branches of each slot's state."""
    words = rng.integers(0, WORD, (3, len(refs)), dtype=np.uint64)
    for i, ref in enumerate(refs):
        roll = rng.random()
        if ref.phase in (rejection.FRESH, rejection.LEVEL) and roll < 0.5:
            digits = rng.choice([0, 43, 44, 119, 7], size=4, p=[0.35, 0.2, 0.1, 0.25, 0.1])
            words[1, i] = (
                sum(int(d) * 120**k for k, d in enumerate(digits)) + int(rng.integers(0, 21)) * 120**4
            )
        if ref.phase == rejection.FRACTION and roll < 0.6 and ref.rest is not None:
            words[1, i] = (int(words[1, i]) & ~0xFF) | min(math.floor(ref.rest * 256), 255)  # a tie
        if roll > 0.7:
            words[2, i] = (int(words[2, i]) // 24) * 24 + 23  # J >= 5
        if roll > 0.97:  # outside every threshold (a point word of 0 has the smallest low half)
            row = int(rng.integers(0, 3))
            words[row, i] = 0 if row == 0 else WORD - 1
    return words.astype(np.uint32)


def _force_fraction_ties(rng, refs, words) -> np.ndarray:
    """For half the slots that enter the K-loop at this step (found by a dry run of the reference
    on the same words), make the loop's three digits equal f's digits (ties)."""
    for i, ref in enumerate(refs):
        probe = _Reference(ref.sampler)
        probe.__dict__.update(ref.__dict__)
        probe.step(words[:, i])
        if probe.entered and rng.random() < 0.5:
            byte, seven = min(math.floor(probe.f * 256), 255), min(math.floor(probe.f * 128), 127)
            words[2, i] = int(words[2, i]) % 24 + 24 * (byte | byte << 8 | seven << 16)
    return words


def _unpack(state: int) -> dict:
    return {
        "phase": state & 3,
        "c_known": bool(state & 4),
        "j": ((state >> 3) & 15) - 5,
        "ended": bool(state & 0x80),
        "accepted": bool(state & 0x100),
        "k": state >> 15,
    }


def _run_machine(sampler, params, refs, steps: int, seed: int) -> int:
    """Step `sampler` and the references on the same words; returns attempts ended."""
    rng = np.random.default_rng(seed)
    size = len(refs)
    if isinstance(sampler, laws._Exponent):
        numerators = [ref.sampler.numerator for ref in refs]
        aux = (_u32([v >> 32 for v in numerators]), _u32([v & 0xFFFFFFFF for v in numerators]))
    else:
        aux = sampler.empty_aux(size)
    slots = rejection._slots(size, aux, sampler.stored(size))
    step = jax.jit(lambda s, w: rejection._step(sampler, params, s, w))
    ended = 0
    for _ in range(steps):
        words = _force_fraction_ties(rng, refs, _forced_words(rng, refs))
        slots = step(slots, jnp.asarray(words))
        states, levels = np.asarray(slots.state), np.asarray(slots.g)
        for i, ref in enumerate(refs):
            ref.step(words[:, i])
            got = _unpack(int(states[i]))
            assert (
                got["phase"] == ref.phase and got["ended"] == ref.ended and got["accepted"] == ref.accepted
            ), i
            if ref.ended:
                ended += 1
                continue
            if ref.phase == rejection.LEVEL:
                assert (got["k"], int(levels[i])) == (ref.k, ref.g), i
            if ref.phase == rejection.FRACTION:
                assert (got["k"], got["j"], got["c_known"], int(levels[i])) == (
                    ref.k,
                    ref.j,
                    ref.c_known,
                    ref.g,
                ), i
        slots = slots._replace(state=jnp.asarray(states & ~0x180))
    return ended


_BRANCHES = {
    "walk word redrawn",
    "trial past k = 5",
    "four successes",
    "loop word redrawn",
    "loop past k = 3",
    "tie at k = 1",
    "tie at k = 2",
    "tie at k = 3",
    "point word redrawn",
    "trial step",
    "loop draws Bernoulli(1/k)",
    "loop byte 0",
    "loop byte 1",
    "loop byte None",
}


def test_gaussian_slots_match_the_reference():
    """`_step` for the discrete Gaussian (sigma 0.45, 3, 700: every level width regime) equals
    the scalar reference on 120 forced-and-random steps of 64 slots each; thousands of attempts
    end, through every branch listed in _BRANCHES (ties, continued trials, J >= 5, redrawn
    words)."""
    _Reference.branches = set()
    for sigma, seed in ((0.45, 1), (3.0, 2), (700.0, 3)):
        lattice = samplers.gaussian_lattice(sigma)
        starts = lattice.level_starts()
        window = max(2 * int(starts[1]) - 1, 2 * int(starts[2] - starts[1] + 1))
        params = samplers.GaussianParams(
            m=jnp.uint32(lattice.m),
            s=jnp.uint32(lattice.s),
            starts=jnp.asarray(starts, jnp.int32),
            window=jnp.uint32(window),
            threshold=jnp.uint32(WORD % window),
        )
        refs = [_Reference(_GaussianReference(lattice)) for _ in range(64)]
        assert _run_machine(laws._Gaussian(), params, refs, 120, seed) > 1500
    assert _Reference.branches == _BRANCHES, _BRANCHES - _Reference.branches


@pytest.mark.parametrize(("t", "s"), [(3, 1), (2**12, 1517), (1, 1)])
def test_laplace_slots_match_the_reference(t, s):
    """`_step` for the discrete Laplace (rational t = 3, dyadic t = 2^12, t = 1) equals the scalar
    reference on 120 steps of 64 slots."""
    denominator, shift, dyadic = integers._denominator(t)
    params = laws._LaplaceParams(
        denominator=denominator,
        shift=shift,
        window=jnp.uint32(2 * t),
        threshold=jnp.uint32(WORD % (2 * t)),
        last_level=jnp.int32(samplers.LAPLACE_CAP // t),
        magic=tuple(jnp.uint32(v) for v in integers._division_magic(s)),
    )
    refs = [_Reference(_LaplaceReference(t, s)) for _ in range(64)]
    assert _run_machine(laws._Laplace(dyadic), params, refs, 120, t) > 1500


@pytest.mark.parametrize("denominator", [7, 2**12, 2**31 + 1])
def test_exponent_slots_match_the_reference(denominator):
    """`_step` for Bernoulli(exp(-gamma)) (rational and dyadic denominators; gamma from 0 to 9,
    numerators above 2^32 included) equals the scalar reference on 60 steps of 64 slots."""
    rng = np.random.default_rng(denominator % 1000)
    numerators = [0, *(int(v) for v in rng.integers(0, 9 * denominator, 62)), 9 * denominator + 1]
    d, shift, dyadic = integers._denominator(denominator)
    params = laws._ExponentParams(denominator=d, shift=shift)
    refs = [_Reference(_ExponentReference(v, denominator)) for v in numerators]
    assert _run_machine(laws._Exponent(dyadic), params, refs, 60, denominator % 97) > 600
