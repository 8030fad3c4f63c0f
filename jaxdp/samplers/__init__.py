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

from jaxdp.samplers.draws import (
    DyadicRate,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
    dyadic_rate,
    exponential_choice,
    exponential_choice_at,
    gaussian_params,
    prefetch_exponential_choice,
)
from jaxdp.samplers.lattices import (
    LAPLACE_CAP,
    SIGMA_MAX,
    SIGMA_MIN,
    GaussianLattice,
    gaussian_lattice,
    laplace_lattice,
)
from jaxdp.samplers.laws import GaussianParams

__all__ = [
    "LAPLACE_CAP",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "DyadicRate",
    "GaussianLattice",
    "GaussianParams",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "dyadic_rate",
    "exponential_choice",
    "exponential_choice_at",
    "gaussian_lattice",
    "gaussian_params",
    "laplace_lattice",
    "prefetch_exponential_choice",
]
