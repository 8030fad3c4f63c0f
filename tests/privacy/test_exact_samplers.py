"""Distribution tests of the exact integer samplers (`jaxdp.samplers`) and the exact primitives of
`jaxdp.noise` built on them, against their exact laws, each with negative controls.

Every test draws from fixed keys, so a run is deterministic; the false-failure rate stated in a
docstring is the probability, over a uniformly random key, that a correct sampler fails the test.
Each statistical check rejects at p < ALPHA = 1e-4. Each negative control (the same samples
tested against a deliberately wrong law) comes with its power, computed in the test from the
noncentral chi-square (or the normal approximation of the binomial): the probability that the
control is *not* rejected must be below MAX_MISS = 1e-12, so a control that passes means the test
has lost its teeth, not bad luck.

The exact laws:
- discrete Gaussian: P(y) proportional to exp(-y^2 / (2 V)) on the integers, V the rational
  `samplers.gaussian_lattice(sigma).variance` (summed in float64 over |y| <= 40 sqrt(V) + 10; the
  mass beyond is below exp(-800)); the sampler truncates at |y| <= lattice.cap (y^2 / (2 V) <
  2^14, about 181 sigma), a total-variation change below exp(-16000), invisible here.
- discrete Laplace Lap_Z(t / s): P(y) proportional to exp(-|y| s / t).
- Bernoulli(exp(-gamma)) for gamma = (high 2^32 + low) / denominator.
- exponential choice: P(i) proportional to eligible_i exp(-rate gap_i).

Samples are drawn in blocks of 4096 entries under one jit (one slot per output: each output is the
first accepted attempt of its own sampler), plus one test with many outputs per slot (300,000
draws, 32 per slot, in one call). The chi-square cells pool consecutive integers until each has
probability >= max(1/400, 50/N), so the tails are pooled and large sigma is binned.

The digit tables and digit comparisons of the sampler are also tested for power directly
(`test_bernoulli_exp_has_power_against_off_by_one`), and `tests/test_samplers_unit.py` checks
the sampler's steps against a scalar reference implementation word for word.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import stats

from jaxdp import accounting, noise, samplers
from jaxdp.types import Sensitive

ALPHA = 1e-4  # rejection level of every check (its false-failure rate)
MAX_MISS = 1e-12  # largest allowed probability that a negative control goes undetected
BLOCK = 4096
N_BLOCKS = 50  # 204,800 draws per distribution
CONTROL_FACTORS = (0.8, 1.25)  # controls: the law at sigma (or scale) times these


# --- helpers ------------------------------------------------------------------------------------


def _blocks(sample, seed: int, n_blocks: int = N_BLOCKS) -> np.ndarray:
    """Concatenated `sample(key)` for n_blocks keys split from `jax.random.key(seed)`, one jit."""
    fn = jax.jit(sample)
    keys = jax.random.split(jax.random.key(seed), n_blocks)
    return np.concatenate([np.asarray(fn(keys[i])).ravel() for i in range(n_blocks)])


def _gaussian_pmf(variance: float) -> tuple[np.ndarray, np.ndarray]:
    """(support, probabilities) of N_Z(0, variance) over |y| <= 40 sqrt(variance) + 10."""
    radius = math.ceil(40.0 * math.sqrt(variance)) + 10
    y = np.arange(-radius, radius + 1, dtype=np.float64)
    log_w = -(y**2) / (2.0 * variance)
    w = np.exp(log_w - log_w.max())
    return y.astype(np.int64), w / w.sum()


def _laplace_pmf(scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(support, probabilities) of Lap_Z(scale), P(y) ~ exp(-|y| / scale), over |y| <= 800 scale + 10."""
    radius = math.ceil(800.0 * scale) + 10
    y = np.arange(-radius, radius + 1, dtype=np.float64)
    w = np.exp(-np.abs(y) / scale)
    return y.astype(np.int64), w / w.sum()


def _cells(probs: np.ndarray, n: int) -> np.ndarray:
    """Right ends (indices into the support) of cells of consecutive atoms, each of probability
    >= max(1/400, 50/n); the first and last cells absorb the tails."""
    minimum = max(1.0 / 400.0, 50.0 / n)
    cumulative = np.cumsum(probs)
    ends, previous = [], 0.0
    while True:
        j = int(np.searchsorted(cumulative, previous + minimum, side="left"))
        if j >= cumulative.size - 1 or 1.0 - cumulative[j] < minimum:
            break
        ends.append(j)
        previous = cumulative[j]
    return np.asarray(ends, np.int64)


def _cell_probs(probs: np.ndarray, ends: np.ndarray) -> np.ndarray:
    cumulative = np.concatenate([[0.0], np.cumsum(probs)])
    bounds = np.concatenate([[0], ends + 1, [probs.size]])
    mass = np.diff(cumulative[bounds])
    mass[-1] = 1.0 - cumulative[bounds[-2]]  # the upper tail, without cancellation
    return mass


def _cell_counts(samples: np.ndarray, support: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Counts of samples per cell (values beyond the support fall in the tail cells)."""
    cell = np.searchsorted(support[ends], samples, side="left")
    return np.bincount(cell, minlength=ends.size + 1).astype(np.float64)


def _chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs / probs.sum()
    return float(stats.chisquare(counts, expected).pvalue)


def _chi2_miss_probability(n: int, probs_true: np.ndarray, probs_null: np.ndarray) -> float:
    """P(chi-square at ALPHA accepts `probs_null`) when the cells follow `probs_true`
    (noncentral chi-square approximation, in log space)."""
    df = probs_true.size - 1
    noncentrality = n * float(np.sum((probs_true - probs_null) ** 2 / probs_null))
    critical = float(stats.chi2.isf(ALPHA, df))
    return math.exp(float(stats.ncx2.logcdf(critical, df, noncentrality)))


def _check_law(samples, support, probs, control_laws) -> None:
    """Chi-square of integer samples against (support, probs) on pooled cells: accepted at ALPHA;
    each control law (probabilities on the same support) is rejected, with its miss probability
    (from the true law's cells) below MAX_MISS."""
    n = samples.size
    ends = _cells(probs, n)
    counts = _cell_counts(samples, support, ends)
    truth = _cell_probs(probs, ends)
    assert truth.size >= 3 and truth.min() * n >= 50
    assert _chi2_pvalue(counts, truth) > ALPHA
    for wrong_probs in control_laws:
        wrong = _cell_probs(wrong_probs, ends)
        assert _chi2_miss_probability(n, truth, wrong) < MAX_MISS
        assert _chi2_pvalue(counts, wrong) < ALPHA


# --- discrete Gaussian --------------------------------------------------------------------------

GAUSSIAN_SIGMAS = [0.3, 0.7, 2.0, 10.0, 1500.0, 20000.0]


@mpmath.workdps(30)
def test_gaussian_pmf_helper_matches_theta_function():
    """The float64 pmf used as the truth: its normaliser equals the Jacobi theta function
    theta_3(0, exp(-1 / (2 V))) = sum_y exp(-y^2 / (2 V)) computed by mpmath (relative 1e-12), and
    its variance is below V (CKS20 Cor. 9) and within exp(-2 pi^2 V)-ish of it for V >= 4.
    Deterministic."""
    for sigma in GAUSSIAN_SIGMAS[:4]:
        variance = float(samplers.gaussian_lattice(sigma).variance)
        y, p = _gaussian_pmf(variance)
        theta = mpmath.jtheta(3, 0, mpmath.exp(-1 / (2 * mpmath.mpf(variance))))
        assert float(np.sum(np.exp(-(y.astype(np.float64) ** 2) / (2.0 * variance)))) == pytest.approx(
            float(theta), rel=1e-12
        )
        second_moment = float(np.sum(p * y.astype(np.float64) ** 2))
        assert second_moment <= variance * (1.0 + 1e-12)
        if variance >= 4.0:
            assert second_moment == pytest.approx(variance, rel=1e-12)


@pytest.mark.parametrize("sigma", GAUSSIAN_SIGMAS)
def test_discrete_gaussian_matches_its_exact_pmf(sigma):
    """204,800 draws of `samplers.discrete_gaussian(gaussian_lattice(sigma))` against the exact pmf
    of N_Z(0, lattice.variance) (chi-square, pooled tails, <= 400 cells); negative controls: the
    pmf at sigma x 0.8 and x 1.25 is rejected (miss probability < 1e-12, computed).

    sigma = 0.3 has 3 cells (-1, 0, 1: P(+-1) = 0.0038); sigma >= 1500 is binned.
    False-failure rate: 1e-4.
    """
    lattice = samplers.gaussian_lattice(sigma)
    variance = float(lattice.variance)
    assert Fraction(sigma) ** 2 <= lattice.variance <= Fraction(sigma) ** 2 * (1 + Fraction(1, 2**10))
    samples = _blocks(
        lambda key: samplers.discrete_gaussian(key, (BLOCK,), lattice), seed=1000 + int(sigma * 10)
    )
    support, probs = _gaussian_pmf(variance)
    controls = []
    for factor in CONTROL_FACTORS:
        y, p = _gaussian_pmf(variance * factor**2)
        controls.append(np.interp(support, y, p, left=0.0, right=0.0))
    _check_law(samples, support, probs, controls)


def test_discrete_gaussian_many_draws_per_slot():
    """With n > 4096 each slot fills about 32 outputs in turn: the same law, 300,000 draws in one
    call at sigma = 2 (and 0.7), chi-square against the exact pmf, with the x0.8 / x1.25 controls
    rejected. False-failure rate: 2e-4."""
    for sigma, seed in ((2.0, 2001), (0.7, 2002)):
        lattice = samplers.gaussian_lattice(sigma)
        samples = np.asarray(
            jax.jit(lambda key, lattice=lattice: samplers.discrete_gaussian(key, (300_000,), lattice))(
                jax.random.key(seed)
            )
        )
        support, probs = _gaussian_pmf(float(lattice.variance))
        controls = [
            np.interp(support, *_gaussian_pmf(float(lattice.variance) * f**2), left=0.0, right=0.0)
            for f in CONTROL_FACTORS
        ]
        _check_law(samples, support, probs, controls)


def test_discrete_gaussian_sign_symmetry_and_tail():
    """At sigma = 2 over 204,800 draws: the counts of y and -y for y = 1..6 agree (two-sided
    binomial test of each pair, and of all positives against all negatives, at ALPHA / 7); no draw
    exceeds 12 sigma (P < 1e-30 per draw). False-failure rate: 1e-4.
    Control (power, computed): a sign bias P(y) / P(-y) = 1.1 would fail the pooled test with miss
    probability < 1e-12 (normal approximation)."""
    lattice = samplers.gaussian_lattice(2.0)
    samples = _blocks(lambda key: samplers.discrete_gaussian(key, (BLOCK,), lattice), seed=2100)
    assert np.abs(samples).max() <= 24
    level = ALPHA / 7
    for y in range(1, 7):
        plus, minus = int(np.sum(samples == y)), int(np.sum(samples == -y))
        assert stats.binomtest(plus, plus + minus, 0.5).pvalue > level
    plus, minus = int(np.sum(samples > 0)), int(np.sum(samples < 0))
    total = plus + minus
    assert stats.binomtest(plus, total, 0.5).pvalue > level
    biased = 1.1 / 2.1
    half_width = stats.norm.isf(level / 2) * 0.5 / math.sqrt(total)  # acceptance |k/n - 1/2| below
    miss = stats.norm.cdf((0.5 + half_width - biased) / math.sqrt(biased * (1 - biased) / total))
    assert miss < MAX_MISS


# --- discrete Laplace ---------------------------------------------------------------------------

LAPLACE_PARAMETERS = [
    (1, 1),
    (3, 1),
    (1024, 2048),
    *(samplers.laplace_lattice(b) for b in (0.25, 2.7, 5000.0)),
]


@pytest.mark.parametrize(("t", "s"), LAPLACE_PARAMETERS)
def test_discrete_laplace_matches_its_exact_pmf(t, s):
    """204,800 draws of `samplers.discrete_laplace(t, s)` against Lap_Z(t / s) (chi-square, pooled
    tails); controls: the law at scale x 0.8 and x 1.25 rejected (miss < 1e-12, computed).
    False-failure rate: 1e-4."""
    scale = t / s
    samples = _blocks(lambda key: samplers.discrete_laplace(key, (BLOCK,), t, s), seed=3000 + t + s)
    support, probs = _laplace_pmf(scale)
    controls = [np.interp(support, *_laplace_pmf(scale * f), left=0.0, right=0.0) for f in CONTROL_FACTORS]
    _check_law(samples, support, probs, controls)


# --- Bernoulli(exp(-gamma)) ---------------------------------------------------------------------

# (numerator, denominator): gamma = numerator / denominator, including gamma = 0, gamma = 1, gamma > 1,
# and numerators above 2^32 (high word nonzero).
BIG = 2**32 - 5
BERNOULLI_CASES = {
    7: [0, 2, 7, 17, 40],  # gamma 0, 2/7, 1, 17/7, 40/7
    BIG: [1, (3 * BIG) // 10, BIG, (5 * BIG) // 2, 4 * BIG + 2**31 + 12345, 2**32 + 7],
    2**31 + 1: [3 * 2**32 + 99, 2**31, 2**32 + 2**31 + 1],
}
N_BERNOULLI_BLOCKS = 400


def _bernoulli_blocks(numerators, denominator, seed):
    """(per case draws, successes) of bernoulli_exp with the cases interleaved in blocks of 4096."""
    m = len(numerators)
    per = BLOCK // m
    values = np.repeat(np.asarray(numerators, dtype=object), per)
    high = jnp.asarray(np.array([int(v) >> 32 for v in values], np.uint32))
    low = jnp.asarray(np.array([int(v) & 0xFFFFFFFF for v in values], np.uint32))
    draws = _blocks(lambda key: samplers.bernoulli_exp(key, high, low, denominator), seed, N_BERNOULLI_BLOCKS)
    draws = draws.reshape(N_BERNOULLI_BLOCKS, m, per)
    return per * N_BERNOULLI_BLOCKS, draws.sum(axis=(0, 2))


@pytest.mark.parametrize("denominator", list(BERNOULLI_CASES))
def test_bernoulli_exp_matches_exp_minus_gamma(denominator):
    """bernoulli_exp(high, low, denominator) is Bernoulli(exp(-gamma)), gamma = (high 2^32 + low) /
    denominator: two-sided exact binomial test of each case (327,600 to 546,000 draws each) at
    ALPHA / cases.

    Controls, each rejected by the same test with miss probability < 1e-12 (normal approximation,
    asserted): exp(-1.1 gamma) and exp(-0.9 gamma) for gamma >= 0.5 (a 10% error in gamma), and
    for numerators >= 2^32 the law of a sampler that drops the high word, exp(-low / denominator).
    False-failure rate: 1e-4 per denominator.
    """
    numerators = BERNOULLI_CASES[denominator]
    n, successes = _bernoulli_blocks(numerators, denominator, seed=4000 + denominator % 1000)
    level = ALPHA / len(numerators)
    z = stats.norm.isf(level / 2)
    for numerator, k in zip(numerators, successes, strict=True):
        gamma = Fraction(numerator, denominator)
        p = math.exp(-float(gamma))
        assert stats.binomtest(int(k), n, p).pvalue > level, (numerator, denominator, k / n, p)
        wrong = []
        if gamma >= Fraction(1, 2):
            wrong += [math.exp(-1.1 * float(gamma)), math.exp(-0.9 * float(gamma))]
        if numerator >= 2**32:
            wrong.append(math.exp(-(numerator % 2**32) / denominator))
        for q in wrong:
            # P(accept p | truth q): |k/n - p| within z sd_p while k/n ~ N(q, sd_q).
            sd_p, sd_q = math.sqrt(p * (1 - p) / n), math.sqrt(q * (1 - q) / n)
            miss = stats.norm.cdf((abs(q - p) - z * sd_p) / sd_q * -1.0)
            assert miss < MAX_MISS, (numerator, q)
            assert stats.binomtest(int(k), n, q).pvalue < level


N_POWER = 3 * 2**20


@pytest.mark.parametrize("gamma", [Fraction(1), Fraction(1, 2), Fraction(3, 2)])
def test_bernoulli_exp_has_power_against_off_by_one(gamma):
    """bernoulli_exp at gamma = 1 (one Bernoulli(exp(-1)) trial from the base-120 digit table),
    1/2 (the K-loop: the base-24 J digit and byte comparisons with f) and 3/2 (both), dyadic
    denominator: 3,145,728 draws in one call, exact binomial test at ALPHA.

    Power (computed, asserted): a probability off by 0.0035 (about 1% of exp(-1)) is rejected with
    miss probability < 1e-12. An off-by-one in a comparison of the loop moves a probability by
    2^-8 or more of the mass it acts on, and the J digit's table by f / 24 (0.02 at f = 1/2); a
    trial's success/failure boundary moves exp(-1) by 1/120 = 0.0083. (Moving the continuation
    value moves it by 0.0012 only: the tables are pinned exactly in test_samplers_unit.py.)
    False-failure rate: 1e-4.
    """
    numerator = gamma * 2**20
    assert numerator.denominator == 1
    high = jnp.zeros(N_POWER, jnp.uint32)
    low = jnp.full(N_POWER, int(numerator), jnp.uint32)
    draws = np.asarray(
        jax.jit(lambda key: samplers.bernoulli_exp(key, high, low, 2**20))(jax.random.key(4400))
    )
    k, p = int(draws.sum()), math.exp(-float(gamma))
    assert stats.binomtest(k, N_POWER, p).pvalue > ALPHA
    z = stats.norm.isf(ALPHA / 2)
    for q in (p - 0.0035, p + 0.0035):
        sd_p, sd_q = math.sqrt(p * (1 - p) / N_POWER), math.sqrt(q * (1 - q) / N_POWER)
        assert stats.norm.cdf((z * sd_p - abs(q - p)) / sd_q) < MAX_MISS
        assert stats.binomtest(k, N_POWER, q).pvalue < ALPHA


def test_measurements_and_selections_on_host_arrays_are_those_on_jax_arrays():
    """The host loop hands NumPy counts and scores to `noise` (no program compiled per eager
    operation): for the same key, the release and its Charge are those of the same values as
    JAX arrays, bit for bit."""
    counts = np.arange(-40, 2000, 7, dtype=np.int32)
    steps = (np.arange(300, dtype=np.int32) * 7919) % 5003 - 2500
    mask = np.arange(300) % 3 != 0
    scale = noise.selection_scale(2.0, 1.0, "discrete", exact_scores=True)

    def released(array):
        with jax.debug_key_reuse(False):  # the same key, once per kind of array
            key = jax.random.key(31)
            measured, measure_charge = noise.discrete_gaussian(
                key, Sensitive(array(counts)), sigma=3.5, sensitivity=1.0
            )
            chosen, select_charge = noise.grid_exponential(
                key, Sensitive(array(steps)), scale=scale, sensitivity=1.0, mask=array(mask)
            )
        return np.asarray(measured), int(chosen), measure_charge, select_charge

    host, device = released(np.asarray), released(jnp.asarray)
    assert isinstance(
        noise.discrete_gaussian(jax.random.key(1), Sensitive(counts), sigma=1.0, sensitivity=1.0)[0],
        np.ndarray,
    )
    np.testing.assert_array_equal(host[0], device[0])
    assert host[1] == device[1]
    for ours, theirs in zip(host[2:], device[2:], strict=True):
        for field in ("primitive", "sensitivity", "scale", "count"):
            assert np.asarray(getattr(ours, field)) == np.asarray(getattr(theirs, field))
            assert np.asarray(getattr(ours, field)).dtype == np.asarray(getattr(theirs, field)).dtype


def test_draws_are_deterministic_and_the_same_under_jit_and_vmap():
    """Each sampler (Gaussian, Laplace with a dyadic and a rational t, Bernoulli(exp(-gamma)),
    exponential choice) gives bit-identical draws for a fixed key eagerly, under jit, and for that
    key in a vmapped batch: replay from the key is exact however the call is traced.
    Deterministic."""

    def keys():  # fresh key objects with the same data (a key is consumed by each call)
        return jax.random.split(jax.random.key(4500), 3)

    gaps = jnp.asarray(CHOICE_GAPS)
    eligible = jnp.asarray(CHOICE_ELIGIBLE)
    lattice = samplers.gaussian_lattice(3.0)
    t, s = samplers.laplace_lattice(2.5)
    high = jnp.zeros(500, jnp.uint32)
    low = jnp.asarray(np.arange(500, dtype=np.uint32) * 977)
    calls = [
        lambda key: samplers.discrete_gaussian(key, (5000,), lattice),
        lambda key: samplers.discrete_laplace(key, (700,), t, s),
        lambda key: samplers.discrete_laplace(key, (700,), 3, 1),
        lambda key: samplers.bernoulli_exp(key, high, low, 100_003),
        lambda key: samplers.exponential_choice(key, gaps, eligible, 3000, 2**14),
    ]
    for call in calls:
        eager = [np.asarray(call(key)) for key in keys()]
        again = [np.asarray(call(key)) for key in keys()]
        jitted = [np.asarray(jax.jit(call)(key)) for key in keys()]
        batched = np.asarray(jax.jit(jax.vmap(call))(keys()))
        for i in range(3):
            np.testing.assert_array_equal(eager[i], again[i])
            np.testing.assert_array_equal(eager[i], jitted[i])
            np.testing.assert_array_equal(eager[i], batched[i])
        assert not np.array_equal(eager[0], eager[1]) or eager[0].size == 1


# --- exponential choice and the exact exponential mechanism ------------------------------------

N_SELECT = 50_000


def _exp_law(gaps: np.ndarray, eligible: np.ndarray, rate: float) -> np.ndarray:
    """P(i) proportional to eligible_i exp(-rate gap_i), in float64."""
    log_w = np.where(eligible, -rate * gaps.astype(np.float64), -np.inf)
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def _select_counts(choices: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(choices, minlength=n).astype(np.float64)


def _check_selection(counts, law, control) -> None:
    """Chi-square of selection counts over the candidates with law > 1e-3 / N (the others pooled
    into one cell with their neighbours' mass when tiny), then the control."""
    n = counts.sum()
    keep = law * n >= 20
    cells_true = np.append(law[keep], law[~keep].sum())
    cells_wrong = np.append(control[keep], control[~keep].sum())
    cells_counts = np.append(counts[keep], counts[~keep].sum())
    if cells_true[-1] * n < 5:  # pool the leftovers with the last kept cell
        cells_true = np.append(cells_true[:-2], cells_true[-2:].sum())
        cells_wrong = np.append(cells_wrong[:-2], cells_wrong[-2:].sum())
        cells_counts = np.append(cells_counts[:-2], cells_counts[-2:].sum())
    assert _chi2_pvalue(cells_counts, cells_true) > ALPHA
    assert _chi2_miss_probability(int(n), cells_true, cells_wrong) < MAX_MISS
    assert _chi2_pvalue(cells_counts, cells_wrong) < ALPHA


CHOICE_GAPS = np.array([0, 64, 3, 130, 5, 0, 9, 1000, 17, 2, 40, 2**31], np.uint32)
CHOICE_ELIGIBLE = np.array([1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1], bool)


@pytest.mark.parametrize(
    ("numerator", "denominator"), [(3000, 2**14), (2**12 + 1, 2**12), (2**32 - 1, 2**31 + 3)]
)
def test_exponential_choice_matches_exact_law(numerator, denominator):
    """samplers.exponential_choice: 50,000 selections among 12 candidates (2 masked, gaps up to
    2^31) follow eligible_i exp(-rate gap_i) / Z with rate = numerator / denominator (chi-square;
    cells of expected count < 20 pooled); masked candidates are never chosen (deterministic).
    Control: the law at rate / 0.8 (the scale x 0.8) is rejected (miss < 1e-12, computed).
    False-failure rate: 1e-4."""
    rate = numerator / denominator
    gaps, eligible = jnp.asarray(CHOICE_GAPS), jnp.asarray(CHOICE_ELIGIBLE)
    keys = jax.random.split(jax.random.key(5000 + numerator % 997), N_SELECT)
    choose = jax.jit(
        jax.vmap(lambda k: samplers.exponential_choice(k, gaps, eligible, numerator, denominator))
    )
    choices = np.asarray(choose(keys))
    counts = _select_counts(choices, CHOICE_GAPS.size)
    assert counts[~CHOICE_ELIGIBLE].sum() == 0
    law = _exp_law(CHOICE_GAPS, CHOICE_ELIGIBLE, rate)
    _check_selection(counts, law, _exp_law(CHOICE_GAPS, CHOICE_ELIGIBLE, rate / 0.8))


# Scores for the mechanism: sensitivity 1 and scale 1 put candidates 1/64 apart a factor
# exp(-1/66) apart; the scores are exact float32 multiples of 1/64 and some are not.
EM_SCORES = np.array([0.0, 1.0, 2.0, 3.0, 1.5, 2.5, 9.0, 0.5, 2.515625, 2.99, -4.0, 2.7], np.float32)
EM_MASK = np.array([True, True, True, True, True, True, False, True, True, True, True, True])


def _quantised_law(scores: np.ndarray, mask, scale: float, sensitivity: float) -> np.ndarray:
    """The exact law of noise.discrete_exponential, computed independently: scores floored to the
    grid sensitivity / 64 (float32 arithmetic, as documented), gaps below the best eligible,
    P ~ exp(-rate gap) with rate = noise._selection_rate (checked against sensitivity / (66 scale))."""
    numerator, denominator = noise._selection_rate(scale, sensitivity)
    rate = numerator / denominator
    ideal = sensitivity / (scale * (noise.GRID_STEPS + 2))
    assert ideal * (1 - 2.0**-11) <= rate <= ideal
    steps = np.floor(scores.astype(np.float32) * np.float32(noise.GRID_STEPS / sensitivity)).astype(np.int64)
    eligible = np.ones(scores.shape, bool) if mask is None else np.asarray(mask)
    gaps = steps[eligible].max() - steps
    return _exp_law(gaps, eligible, rate)


@pytest.mark.parametrize(
    ("scale", "sensitivity", "masked"), [(1.0, 1.0, True), (8.0, 0.5, False), (3.0, 2.0, True)]
)
def test_discrete_exponential_matches_exact_law(scale, sensitivity, masked):
    """noise.discrete_exponential: 50,000 selections follow the quantised exponential mechanism's
    exact law (chi-square); a masked candidate (the best, unmasked) is never chosen.
    Control: the law at scale x 0.8 is rejected (miss < 1e-12, computed).
    False-failure rate: 1e-4."""
    mask = jnp.asarray(EM_MASK) if masked else None
    scores = jnp.asarray(EM_SCORES)

    def one(key):
        return noise.discrete_exponential(
            key, Sensitive(scores), scale=scale, sensitivity=sensitivity, mask=mask
        )[0]

    keys = jax.random.split(jax.random.key(6000 + int(scale * 100)), N_SELECT)
    counts = _select_counts(np.asarray(jax.jit(jax.vmap(one))(keys)), EM_SCORES.size)
    np_mask = EM_MASK if masked else None
    if masked:
        assert counts[~EM_MASK].sum() == 0
    law = _quantised_law(EM_SCORES, np_mask, scale, sensitivity)
    _check_selection(counts, law, _quantised_law(EM_SCORES, np_mask, 0.8 * scale, sensitivity))


N_TOPK = 50_000
TOPK_SCORES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 8.0], np.float32)
TOPK_MASK = np.array([True, True, True, True, True, False])
TOPK_SCALE = accounting.gumbel_scale(1.0, 0.5, count=2)


@pytest.fixture(scope="module")
def discrete_top2() -> np.ndarray:
    mask, scores = jnp.asarray(TOPK_MASK), jnp.asarray(TOPK_SCORES)

    def one(key):
        return noise.discrete_top_k(
            key, Sensitive(scores), k=2, scale=TOPK_SCALE, sensitivity=1.0, mask=mask
        )[0]

    keys = jax.random.split(jax.random.key(7001), N_TOPK)
    return np.asarray(jax.jit(jax.vmap(one))(keys))


def test_discrete_top_k_first_pick_and_no_repeats(discrete_top2):
    """noise.discrete_top_k (k = 2, 50,000 runs, candidate 5 masked): picks never repeat and never
    include the masked candidate (deterministic); the first pick follows the exact quantised
    exponential mechanism (chi-square), the x0.8 scale control rejected (miss < 1e-12).
    False-failure rate: 1e-4."""
    first, second = discrete_top2[:, 0], discrete_top2[:, 1]
    assert np.all(first != second)
    assert not np.any(discrete_top2 == 5)
    law = _quantised_law(TOPK_SCORES, TOPK_MASK, TOPK_SCALE, 1.0)
    counts = _select_counts(first, TOPK_SCORES.size)
    _check_selection(counts, law, _quantised_law(TOPK_SCORES, TOPK_MASK, 0.8 * TOPK_SCALE, 1.0))


def test_discrete_top_k_pairs_follow_sequential_law(discrete_top2):
    """The ordered pairs follow two exact exponential mechanisms in sequence, the second over the
    remaining candidates: P(i, j) = p_i p_j / (1 - p_i) (20 cells, chi-square).
    Control: independent draws conditioned on being distinct (p_i p_j / Z, no renormalisation
    after the first pick) is rejected (miss < 1e-12, computed). False-failure rate: 1e-4."""
    law = _quantised_law(TOPK_SCORES, TOPK_MASK, TOPK_SCALE, 1.0)
    eligible = np.flatnonzero(TOPK_MASK)
    cells = list(itertools.permutations(eligible, 2))
    truth = np.array([law[i] * law[j] / (1.0 - law[i]) for i, j in cells])
    naive = np.array([law[i] * law[j] for i, j in cells])
    naive /= naive.sum()
    n = TOPK_SCORES.size
    codes = discrete_top2[:, 0].astype(np.int64) * n + discrete_top2[:, 1]
    tally = np.bincount(codes, minlength=n * n)
    counts = np.array([tally[i * n + j] for i, j in cells], np.float64)
    assert counts.sum() == N_TOPK
    assert _chi2_pvalue(counts, truth) > ALPHA
    assert _chi2_miss_probability(N_TOPK, truth, naive) < MAX_MISS
    assert _chi2_pvalue(counts, naive) < ALPHA


# --- the shipped primitives on counts ----------------------------------------------------------


def test_noise_discrete_gaussian_is_counts_plus_the_lattice_law():
    """noise.discrete_gaussian (the shipped measurement) on counts [10, 11, -3, 0] x 1024 at
    sigma = accounting.gaussian_sigma(1, 0.125): int32 outputs; noisy - counts follows
    N_Z(0, gaussian_lattice(sigma).variance) (chi-square; x0.8 / x1.25 controls rejected); the
    Charge records discrete_gaussian with the planned sigma. False-failure rate: 1e-4."""
    sigma = accounting.gaussian_sigma(1.0, 0.125)
    counts = jnp.asarray(np.tile(np.array([10, 11, -3, 0], np.int32), BLOCK // 4))

    def one(key):
        return noise.discrete_gaussian(key, Sensitive(counts), sigma=sigma, sensitivity=1.0)[0]

    noisy = _blocks(one, seed=8001)
    _, charge = noise.discrete_gaussian(jax.random.key(0), Sensitive(counts), sigma=sigma, sensitivity=1.0)
    assert noise.PRIMITIVES[int(charge.primitive)] == "discrete_gaussian"
    assert float(charge.scale) == sigma and float(charge.sensitivity) == 1.0
    variance = float(samplers.gaussian_lattice(sigma).variance)
    support, probs = _gaussian_pmf(variance)
    controls = [
        np.interp(support, *_gaussian_pmf(variance * f**2), left=0.0, right=0.0) for f in CONTROL_FACTORS
    ]
    _check_law(noisy - np.tile(np.asarray(counts), N_BLOCKS), support, probs, controls)


def test_noise_discrete_laplace_is_counts_plus_the_lattice_law():
    """noise.discrete_laplace on counts at scale = accounting.laplace_scale(1, 0.1): noisy - counts
    follows Lap_Z(t / s), (t, s) = samplers.laplace_lattice(scale), with t / s in
    [scale, scale (1 + 2^-10)] (chi-square; x0.8 / x1.25 controls rejected).
    False-failure rate: 1e-4."""
    scale = accounting.laplace_scale(1.0, 0.1)
    t, s = samplers.laplace_lattice(scale)
    assert scale <= t / s <= scale * (1 + 2.0**-10)
    counts = jnp.asarray(np.tile(np.array([5, 0, 100, 7], np.int32), BLOCK // 4))

    def one(key):
        return noise.discrete_laplace(key, Sensitive(counts), scale=scale, sensitivity=1.0)[0]

    noisy = _blocks(one, seed=8002)
    support, probs = _laplace_pmf(t / s)
    controls = [np.interp(support, *_laplace_pmf(t / s * f), left=0.0, right=0.0) for f in CONTROL_FACTORS]
    _check_law(noisy - np.tile(np.asarray(counts), N_BLOCKS), support, probs, controls)
