"""Distribution tests of the float noise primitives in `jaxdp.noise` (`gaussian`, `laplace`,
`exponential`, `gumbel_top_k`: the `noise="float"` option, kept for speed experiments), each with
a negative control. The default `noise="discrete"` primitives and the exact samplers under them
are tested against their exact laws in `test_exact_samplers.py`.

Every test draws its samples from a fixed key, so a run is deterministic; the false-failure rate
stated in a docstring is the probability, over a uniformly random key, that a correct sampler
fails the test. Each test rejects at p < ALPHA = 1e-4, and each negative control (a deliberately
wrong distribution) comes with its power, computed in the test: the probability that the control
is *not* rejected is below 1e-12 in every case, so a control that passes means the test has lost
its teeth, not bad luck.

Samples are drawn by vmapping the primitive over `jax.random.split` keys inside one jit.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxdp import accounting, noise
from jaxdp.types import Sensitive

ALPHA = 1e-4  # rejection level of every test below (its false-failure rate)
MAX_MISS = 1e-12  # largest allowed probability that a negative control goes undetected


def _draw(fn, seed: int, n: int):
    """`fn(key)` for `n` independent keys split from `jax.random.key(seed)`, under one jit."""
    keys = jax.random.split(jax.random.key(seed), n)
    return jax.tree_util.tree_map(np.asarray, jax.jit(jax.vmap(fn))(keys))


def _ks_pvalue(samples: np.ndarray, cdf) -> float:
    return float(stats.kstest(samples, cdf).pvalue)


def _ks_miss_probability(n: int, cdf_null, cdf_alt) -> float:
    """Upper bound on P(KS at ALPHA accepts `cdf_null`) when the samples follow `cdf_alt`.

    With D = sup |F_null - F_alt| and c the critical KS distance, acceptance needs the empirical
    CDF to stray more than D - c from F_alt, which has probability <= 2 exp(-2 n (D - c)^2)
    (Dvoretzky-Kiefer-Wolfowitz with Massart's constant).
    """
    x = np.linspace(-30.0, 30.0, 600_001)
    distance = float(np.max(np.abs(cdf_null(x) - cdf_alt(x))))
    critical = float(stats.kstwobign.isf(ALPHA)) / math.sqrt(n)
    assert distance > critical
    return 2.0 * math.exp(-2.0 * n * (distance - critical) ** 2)


def _chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs / probs.sum()
    return float(stats.chisquare(counts, expected).pvalue)


def _chi2_miss_probability(n: int, probs_true: np.ndarray, probs_null: np.ndarray) -> float:
    """P(chi-square at ALPHA accepts `probs_null`) when the cells follow `probs_true`.

    The statistic is asymptotically noncentral chi-square with noncentrality
    n * sum((p_true - p_null)^2 / p_null); the tail is evaluated in log space so it does not
    underflow to a meaningless 0.
    """
    df = probs_true.size - 1
    noncentrality = n * float(np.sum((probs_true - probs_null) ** 2 / probs_null))
    critical = float(stats.chi2.isf(ALPHA, df))
    return math.exp(float(stats.ncx2.logcdf(critical, df, noncentrality)))


def _softmax(scores: np.ndarray, scale: float) -> np.ndarray:
    z = np.exp((scores - scores.max()) / scale)
    return z / z.sum()


# --- Gaussian -----------------------------------------------------------------------------------

N_GAUSS_KEYS = 12_500
VALUE = np.linspace(-3.0, 5.0, 8).astype(np.float32)  # 8 answers per key: 100,000 draws
SIGMA = accounting.gaussian_sigma(1.0, 0.1)  # the plan's float32 sigma, about 2.236


def _gaussian_z(seed: int, sigma_used: float) -> np.ndarray:
    """Noise released by `noise.gaussian` at `sigma_used`, standardised by the planned SIGMA."""

    def one(key):
        noisy, _ = noise.gaussian(key, Sensitive(jnp.asarray(VALUE)), sigma=sigma_used, sensitivity=1.0)
        return noisy

    noisy = _draw(one, seed, N_GAUSS_KEYS).astype(np.float64)
    return ((noisy - VALUE.astype(np.float64)) / SIGMA).ravel()


@pytest.fixture(scope="module")
def gaussian_z() -> np.ndarray:
    return _gaussian_z(101, SIGMA)


def test_gaussian_ks_accepts_planned_sigma(gaussian_z):
    """(noisy - value) / sigma is N(0, 1): KS, plus the mean within 3.89 standard errors.

    False-failure rate: 1e-4 (KS) + 1e-4 (mean, two-sided 3.89 sigma) = 2e-4.
    """
    assert gaussian_z.size == 100_000
    assert _ks_pvalue(gaussian_z, stats.norm.cdf) > ALPHA
    z_crit = stats.norm.isf(ALPHA / 2)
    assert abs(gaussian_z.mean()) < z_crit / math.sqrt(gaussian_z.size)


@pytest.mark.parametrize("factor", [0.7, 1.3])
def test_gaussian_ks_rejects_wrong_sigma(factor):
    """Negative control: noise drawn at factor * sigma but reported as sigma is rejected by KS.

    False-failure rate (the control passing with a correct KS test): the computed miss bound,
    2 exp(-2 n (D - c)^2) < 1e-100 at n = 100,000 with D = 0.085 (x0.7) or 0.063 (x1.3) against
    a critical distance c = 0.007.
    """
    z = _gaussian_z(102 if factor < 1 else 103, accounting.float32_ceil(factor * SIGMA))
    miss = _ks_miss_probability(z.size, stats.norm.cdf, stats.norm(scale=factor).cdf)
    assert miss < MAX_MISS
    assert _ks_pvalue(z, stats.norm.cdf) < ALPHA


def _variance_pvalue(z: np.ndarray) -> float:
    """Two-sided chi-square test that sum(z^2) ~ chi2(n), i.e. the variance is exactly 1.

    Equivalent to |mean(z^2) - 1| <= 3.89 * sqrt(2 / n) (the standard error of mean(z^2)), a
    tolerance of 0.017 at n = 100,000.
    """
    statistic, n = float(np.sum(z**2)), z.size
    return float(2.0 * min(stats.chi2.cdf(statistic, n), stats.chi2.sf(statistic, n)))


def test_gaussian_variance_matches_plan(gaussian_z):
    """The sample variance of (noisy - value) / sigma is 1 within its standard error.

    False-failure rate: 1e-4 (two-sided chi-square on sum(z^2) with n degrees of freedom).
    """
    tolerance = stats.norm.isf(ALPHA / 2) * math.sqrt(2.0 / gaussian_z.size)
    assert abs(float(np.mean(gaussian_z**2)) - 1.0) < tolerance
    assert _variance_pvalue(gaussian_z) > ALPHA


@pytest.mark.parametrize("factor", [0.7, 1.3])
def test_gaussian_variance_rejects_wrong_sigma(factor):
    """Negative control: noise at factor * sigma fails the variance test.

    Power: mean(z^2) is 0.49 or 1.69 against a tolerance of 0.017 around 1, with a standard error
    of 0.002 to 0.008 under the control; the miss probability is below 1e-100.
    """
    z = _gaussian_z(104 if factor < 1 else 105, accounting.float32_ceil(factor * SIGMA))
    assert _variance_pvalue(z) < ALPHA


# --- Laplace ------------------------------------------------------------------------------------

LAPLACE_B = accounting.laplace_scale(1.0, 0.1)


def _laplace_z(seed: int, scale_used: float) -> np.ndarray:
    def one(key):
        noisy, _ = noise.laplace(key, Sensitive(jnp.asarray(VALUE)), scale=scale_used, sensitivity=1.0)
        return noisy

    noisy = _draw(one, seed, N_GAUSS_KEYS).astype(np.float64)
    return ((noisy - VALUE.astype(np.float64)) / LAPLACE_B).ravel()


def test_laplace_ks_accepts_planned_scale():
    """(noisy - value) / b is standard Laplace: KS and the mean absolute value (which is 1).

    False-failure rate: 1e-4 (KS) + 1e-4 (mean |z|, two-sided 3.89 standard errors; the standard
    deviation of |z| is 1) = 2e-4.
    """
    z = _laplace_z(201, LAPLACE_B)
    assert _ks_pvalue(z, stats.laplace.cdf) > ALPHA
    assert abs(np.mean(np.abs(z)) - 1.0) < stats.norm.isf(ALPHA / 2) / math.sqrt(z.size)


@pytest.mark.parametrize("factor", [0.7, 1.3])
def test_laplace_ks_rejects_wrong_scale(factor):
    """Negative control: Laplace noise at factor * b reported as b is rejected by KS.

    False-failure rate of the control: the computed miss bound, below 1e-100 at n = 100,000 with
    D = 0.065 (x0.7) or 0.048 (x1.3) against a critical distance of 0.007.
    """
    z = _laplace_z(202 if factor < 1 else 203, accounting.float32_ceil(factor * LAPLACE_B))
    miss = _ks_miss_probability(z.size, stats.laplace.cdf, stats.laplace(scale=factor).cdf)
    assert miss < MAX_MISS
    assert _ks_pvalue(z, stats.laplace.cdf) < ALPHA


# --- exponential mechanism (Gumbel-max) ---------------------------------------------------------

N_SELECT = 200_000
# Candidate 6 would win almost always (softmax weight > 0.99) were it not masked.
SCORES = np.array([0.0, 1.0, 2.0, 3.0, 1.5, 2.5, 9.0, 0.5], np.float32)
MASK = np.array([True, True, True, True, True, True, False, True])
GUMBEL_SCALE = accounting.gumbel_scale(1.0, 0.5)  # epsilon = 2, scale = 2 / epsilon = 1


def _select(seed: int, mask, scale: float = GUMBEL_SCALE) -> np.ndarray:
    mask_arr = None if mask is None else jnp.asarray(mask)

    def one(key):
        index, _ = noise.exponential(
            key, Sensitive(jnp.asarray(SCORES)), scale=scale, sensitivity=1.0, mask=mask_arr
        )
        return index

    return _draw(one, seed, N_SELECT)


@pytest.fixture(scope="module")
def selections() -> np.ndarray:
    return _select(301, MASK)


def test_exponential_frequencies_match_softmax(selections):
    """Selection frequencies match exp(score / scale) / Z over the eligible candidates (chi-square,
    7 cells, 6 degrees of freedom, 200,000 draws).

    False-failure rate: 1e-4.
    """
    counts = np.bincount(selections, minlength=SCORES.size)
    probs = _softmax(SCORES[MASK].astype(np.float64), GUMBEL_SCALE)
    assert _chi2_pvalue(counts[MASK], probs) > ALPHA


def test_exponential_rejects_softmax_at_twice_the_scale(selections):
    """Negative control: the same frequencies tested against the softmax at 2 x scale (half the
    epsilon: what a factor-2 error in the scale would produce) are rejected.

    Power: noncentrality about 3.2e4 against a critical value of 27.9 (6 degrees of freedom);
    miss probability < 1e-12 (asserted from the noncentral chi-square).
    """
    counts = np.bincount(selections, minlength=SCORES.size)
    probs = _softmax(SCORES[MASK].astype(np.float64), GUMBEL_SCALE)
    wrong = _softmax(SCORES[MASK].astype(np.float64), 2.0 * GUMBEL_SCALE)
    assert _chi2_miss_probability(N_SELECT, probs, wrong) < MAX_MISS
    assert _chi2_pvalue(counts[MASK], wrong) < ALPHA


def test_exponential_never_selects_masked(selections):
    """A masked candidate is never selected, although unmasked it wins > 99% of the draws.

    Deterministic property (false-failure rate 0); the unmasked run is the negative control that
    shows the masked candidate would otherwise dominate.
    """
    counts = np.bincount(selections, minlength=SCORES.size)
    assert counts[~MASK].sum() == 0
    unmasked = np.bincount(_select(302, None), minlength=SCORES.size)
    assert unmasked[6] > 0.99 * N_SELECT


# --- one-shot Gumbel top-k ----------------------------------------------------------------------

N_TOPK = 200_000
TOPK_SCORES = np.array([0.0, 0.5, 1.0, 1.5, 2.0], np.float32)
TOPK_SCALE = accounting.gumbel_scale(1.0, 0.5, count=2)


def _sequential_probabilities(scores: np.ndarray, scale: float):
    """Exact law of two exponential mechanisms in sequence, the second without the first winner.

    Returns (first-pick probabilities, {(i, j): P(first i, second j)},
    {frozenset((i, j)): P(the pair {i, j} is selected)}).
    """
    p = _softmax(scores.astype(np.float64), scale)
    ordered = {(i, j): p[i] * p[j] / (1.0 - p[i]) for i, j in itertools.permutations(range(scores.size), 2)}
    unordered: dict[frozenset, float] = {}
    for (i, j), v in ordered.items():
        unordered[frozenset((i, j))] = unordered.get(frozenset((i, j)), 0.0) + v
    return p, ordered, unordered


def _top2(seed: int, mask=None) -> np.ndarray:
    mask_arr = None if mask is None else jnp.asarray(mask)

    def one(key):
        indices, _ = noise.gumbel_top_k(
            key, Sensitive(jnp.asarray(TOPK_SCORES)), k=2, scale=TOPK_SCALE, sensitivity=1.0, mask=mask_arr
        )
        return indices

    return _draw(one, seed, N_TOPK)


@pytest.fixture(scope="module")
def top2() -> np.ndarray:
    return _top2(401)


def _cell_counts(top2: np.ndarray, cells: list) -> np.ndarray:
    """Counts of `cells` (ordered (i, j) tuples or unordered frozensets) among the (n, 2) picks."""
    n = TOPK_SCORES.size
    first, second = top2[:, 0].astype(np.int64), top2[:, 1].astype(np.int64)
    assert np.all(first != second) and np.all((top2 >= 0) & (top2 < n))
    if isinstance(cells[0], frozenset):
        codes = np.minimum(first, second) * n + np.maximum(first, second)
        cell_codes = [min(c) * n + max(c) for c in cells]
    else:
        codes = first * n + second
        cell_codes = [i * n + j for i, j in cells]
    tally = np.bincount(codes, minlength=n * n)
    assert tally.sum() == tally[cell_codes].sum()  # every pick falls in one of the cells
    return tally[cell_codes].astype(np.float64)


def test_top_k_matches_sequential_exponential_mechanism(top2):
    """One-shot Gumbel top-2 has the law of two exponential mechanisms without replacement:
    chi-square of the top-1 frequencies (5 cells), the unordered pair (10 cells) and the ordered
    pair (20 cells, which checks "best first"), 200,000 draws.

    False-failure rate: 3 x 1e-4 = 3e-4.
    """
    p, ordered, unordered = _sequential_probabilities(TOPK_SCORES, TOPK_SCALE)
    assert _chi2_pvalue(np.bincount(top2[:, 0], minlength=p.size).astype(np.float64), p) > ALPHA
    cells = list(unordered)
    assert _chi2_pvalue(_cell_counts(top2, cells), np.array([unordered[c] for c in cells])) > ALPHA
    cells = list(ordered)
    assert _chi2_pvalue(_cell_counts(top2, cells), np.array([ordered[c] for c in cells])) > ALPHA


def test_top_k_rejects_wrong_pair_laws(top2):
    """Negative controls on the unordered pairs: (a) the law at twice the scale; (b) the naive
    "independent draws conditioned on being distinct" law, p_i p_j / Z, which is what a top-k that
    ignored the renormalisation after the first pick would give. Both must be rejected.

    Power: noncentrality about 2.1e4 (a) and 1.1e3 (b) against a critical value of 33.7 (9
    degrees of freedom); both miss probabilities < 1e-12, asserted.
    """
    _, _, unordered = _sequential_probabilities(TOPK_SCORES, TOPK_SCALE)
    _, _, unordered_2x = _sequential_probabilities(TOPK_SCORES, 2.0 * TOPK_SCALE)
    p = _softmax(TOPK_SCORES.astype(np.float64), TOPK_SCALE)
    cells = list(unordered)
    counts = _cell_counts(top2, cells)
    truth = np.array([unordered[c] for c in cells])
    product = np.array([p[min(c)] * p[max(c)] for c in cells])
    for wrong in (np.array([unordered_2x[c] for c in cells]), product / product.sum()):
        assert _chi2_miss_probability(N_TOPK, truth, wrong) < MAX_MISS
        assert _chi2_pvalue(counts, wrong) < ALPHA


def test_top_k_never_selects_masked():
    """With the best candidate masked, it never appears in the top 2, and the pairs follow the
    sequential law over the remaining candidates (chi-square, 6 cells).

    False-failure rate: 1e-4 (the mask property itself is deterministic).
    """
    mask = np.array([True, True, True, True, False])
    picks = _top2(402, mask)
    assert not np.any(picks == 4)
    _, _, unordered = _sequential_probabilities(TOPK_SCORES[mask], TOPK_SCALE)
    cells = list(unordered)
    assert _chi2_pvalue(_cell_counts(picks, cells), np.array([unordered[c] for c in cells])) > ALPHA
