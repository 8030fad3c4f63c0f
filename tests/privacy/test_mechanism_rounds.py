"""Empirical DP of one private round of every shipped mechanism, on neighbouring datasets.

Each mechanism is built on D and on D' (D with one record replaced) and its private round is run
many times from independent keys, through the mechanism's own `init` and `step`. What the round
releases is read from its State and Info (both releasable by contract):

- selection: the first candidate selected (an exponential mechanism: the first index of a
  one-shot Gumbel top-k, or the first of DualQuery's i.i.d. samples, has exactly the law of one
  exponential mechanism), attacked with the events {candidate i selected};
- measurement: the noisy answers the round measured (after the mechanism's own clipping or
  simplex projection, which is post-processing), reduced to one statistic, their projection on
  the direction D -> D' of the measured queries' true answers, attacked with threshold events.

Each part is held to the claim of the private primitive behind it, read from the round's Charges:
pure epsilon-DP with epsilon = 2 sensitivity / scale for a selection (attacked with delta = 0),
cdp_epsilon(sensitivity^2 / (2 sigma^2), delta) for a measurement. Conditional on the
selections, the measurement noise is independent of them (separate key streams) and the
statistic is N(0, 1) on D and N(shift, 1) on D' whatever was selected, so pooling the runs is
sound. The false-failure rate of each honest test is ALPHA = 1e-5 (`test_empirical_dp`).

The neighbours are built so the attacks have power: four binary attributes, each 10/90 on D; the
replaced record r = (1, 0, 0, 0) sits in the majority of attribute 0 and the minority of the
others, and r' = (0, 1, 1, 1), so on D' attribute 0's 1-way error against any (near) uniform
synthetic distribution shrinks by 1/n and the others' grow by 1/n: the exponential mechanism's
odds move by nearly its full epsilon. Every 1-way marginal moves by sqrt(2)/n in L2, the
declared sensitivity, so the measurement is a worst case too.

Negative controls rebuild the same mechanism with broken noise at the primitives in
`jaxdp.noise` (what every mechanism calls), so they apply to any mechanism unchanged: half the
noise scale; no noise; a halved declared sensitivity (the scale calibrated for it, so the Charge
recomputes to the honest rho and the ledger cannot see the bug; it has the law of half the
noise). Each control must EXCEED the honest claim in each part on its own (the selection alone
and the measurement alone), which is why the differentiable families start from a level state
(`_public_prefix`).

AIM runs as a Python loop, too slow for these 50,000 runs: `test_aim_round.py` tests the
primitive calls its rounds make, with the same attack, on add/remove neighbours.

To add a mechanism: one line in ROUNDS (a factory on the tiny binary data with a budget that puts
the selection near epsilon 1); a mechanism with a new State type also needs a `_released`
branch saying where its round's selection and measurement are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import accounting, api, noise, pld
from jaxdp.evaluate import fractions
from jaxdp.families import GEM, RAP, BestResponses, NoisyAnswers, PerturbedLeader, Product
from jaxdp.families.mixed import MixedRows
from jaxdp.keys import Stream, round_key, stream_key
from jaxdp.mechanisms.dualquery import dualquery
from jaxdp.mechanisms.fem import fem
from jaxdp.queries import all_kway

from .test_empirical_dp import DELTA, selection_attack, threshold_attack

N_FAST = 50_000
N_SLOW = 1_000_000
# The fast tests hold each part to its (epsilon, delta) claim at delta = 1e-2: 50,000 runs cannot
# estimate the 1e-5 tails, but at 1e-2 the attack is strong (honest Gaussian about 0.7 against a
# claim of 1.13, half the noise about 1.85). The slow test checks delta = 1e-5 with 1,000,000 runs.
FAST_DELTA = 1e-2
CHUNK = 25_000  # runs per compiled batch (bounds memory: a generator's state per run is ~40 kB)

# --- the neighbouring datasets -----------------------------------------------------------------

DOMAIN = jaxdp.Domain.from_sizes({"a": 2, "b": 2, "c": 2, "d": 2})
WORKLOAD = all_kway(DOMAIN.sizes, 1)
N_RECORDS = 100
RECORD, REPLACEMENT = (1, 0, 0, 0), (0, 1, 1, 1)


def _neighbours() -> tuple[jaxdp.Dataset, jaxdp.Dataset]:
    rng = np.random.default_rng(0)
    columns = []
    for value in RECORD:
        rest = np.array([0] * 10 + [1] * 90)
        rest = np.delete(rest, np.flatnonzero(rest == value)[0])  # row 0 holds RECORD's value
        columns.append(np.concatenate([[value], rng.permutation(rest)]))
    codes = np.stack(columns, axis=1)
    replaced = codes.copy()
    replaced[0] = REPLACEMENT
    return jaxdp.Dataset.from_codes(DOMAIN, codes), jaxdp.Dataset.from_codes(DOMAIN, replaced)


D, D_PRIME = _neighbours()
# every cell of the domain four times: a public table whose 1-way answers are all exactly 1/2
PUBLIC = jaxdp.Dataset.from_codes(DOMAIN, np.repeat(np.indices((2,) * 4).reshape(4, -1).T, 4, axis=0))


def _fractions(data: jaxdp.Dataset) -> np.ndarray:
    return np.asarray(fractions(data, WORKLOAD), np.float64)


TRUE, TRUE_PRIME = _fractions(D), _fractions(D_PRIME)
SMALL_GENERATOR = {"batch": 64, "hidden": (16, 16), "latent_dim": 4, "max_steps": 1}


class Round(NamedTuple):
    """factory(data) -> mechanism; private_round: the round that spends privacy (DualQuery's
    round 0 samples uniformly and is free); prefix_seed: the key of the public randomness before
    it (`_public_prefix`), chosen where the default leaves the attacked selection no power (one
    candidate far ahead of the one whose score moves the other way)."""

    factory: Callable
    private_round: int = 0
    prefix_seed: int = 0


# Budgets put each selection at epsilon 1 and each measurement's noise at 2 (or 1.4) times its
# sensitivity, where the attacks are strong. max_steps=1: the round's update runs after its
# private draws, so a longer fit changes nothing these tests see.
ROUNDS = {
    "independent": Round(lambda d: jaxdp.independent(d, rho=0.125)),
    "gaussian": Round(lambda d: jaxdp.gaussian(d, WORKLOAD, rho=0.125)),
    "mwem": Round(lambda d: jaxdp.mwem(d, WORKLOAD, rounds=1, rho=0.25)),
    "pep": Round(lambda d: jaxdp.pep(d, WORKLOAD, rounds=1, rho=0.25, max_steps=1)),
    "pmw-pub": Round(lambda d: jaxdp.pmw_pub(d, WORKLOAD, rounds=1, rho=0.25, public=PUBLIC)),
    "pep-pub": Round(lambda d: jaxdp.pep_pub(d, WORKLOAD, rounds=1, rho=0.25, public=PUBLIC, max_steps=1)),
    "dualquery": Round(
        lambda d: dualquery(d, WORKLOAD, rounds=2, samples=5, rho=0.625, oracle="enumerate"), 1, 1
    ),
    "fem": Round(lambda d: fem(d, WORKLOAD, rounds=1, samples=2, rho=0.125, oracle="enumerate")),
    "rap": Round(
        lambda d: jaxdp.rap(d, WORKLOAD, rounds=1, marginals_per_round=2, n_rows=200, max_steps=1, rho=0.5)
    ),
    "rap-softmax": Round(
        lambda d: jaxdp.rap_softmax(
            d, WORKLOAD, rounds=1, marginals_per_round=1, n_rows=200, max_steps=1, rho=0.25
        )
    ),
    "rap++": Round(
        lambda d: jaxdp.rap_plus_plus(
            d, WORKLOAD, rounds=1, marginals_per_round=1, n_rows=200, max_stage_steps=1, rho=0.25
        )
    ),
    # calibrated by their plans' privacy loss distributions (`jaxdp.pld`, about 15% more rho
    # here): held to the PLD claim, not the zCDP one (`_claims`)
    "independent-pld": Round(
        lambda d: api.build("independent", d, WORKLOAD, epsilon=2.0, delta=1e-5, conversion="pld")
    ),
    "gaussian-pld": Round(
        lambda d: api.build("gaussian", d, WORKLOAD, epsilon=2.0, delta=1e-5, conversion="pld")
    ),
    "gem": Round(lambda d: jaxdp.gem(d, WORKLOAD, rounds=1, rho=0.25, **SMALL_GENERATOR)),
    "gem-pub": Round(
        lambda d: jaxdp.gem_pub(
            d, WORKLOAD, rounds=1, rho=0.25, public=PUBLIC, pretrain_steps=5, **SMALL_GENERATOR
        )
    ),
}


# --- what a round releases ---------------------------------------------------------------------


def _released(mechanism, state, info):
    """(first selected candidate or None, noisy answers over the workload's queries or None,
    which queries the round measured) from a round's State and Info, by the mechanism's family."""
    everything = jnp.ones(WORKLOAD.n_queries, bool)
    family, model = mechanism.family, state.model
    if isinstance(family, Product | NoisyAnswers):  # the baselines select nothing privately
        return None, model.noisy_answers, everything
    if isinstance(family, RAP | GEM):
        return info.selected[0], model.noisy_answers, model.measured
    if isinstance(family, MixedRows):  # categorical data: one class, the workload's marginals
        marginals = model.classes[0]
        return info.selected[0], marginals.targets, marginals.measured
    if isinstance(family, PerturbedLeader | BestResponses):  # FEM, DualQuery: picks, no measurement
        return info.selected[0], None, None
    # a histogram family: its first slot holds the round's target
    slot = mechanism.classes[0].measurement.padding.gather[info.selected[0]]  # padding is dropped
    target = model.measurements.target[0]
    noisy = jnp.zeros(WORKLOAD.n_queries, jnp.float32).at[slot].set(target, mode="drop")
    return info.selected[0], noisy, jnp.zeros(WORKLOAD.n_queries, bool).at[slot].set(True, mode="drop")


def _public_prefix(mechanism, private_round: int, seed: int):
    """The state before the private round, from a fixed key: `init` and the free rounds before
    it draw only public randomness (random parameters, DualQuery's uniform round 0). The claims
    must hold conditional on it, so every run starts from the same prefix; the attack then sees
    the private round alone and the selection odds do not blur over random initialisations.

    The differentiable families (RAP, RAP-softmax, RAP++, GEM, GEM-Pub) start from a level state
    instead: every parameter zero. Their random initialisation leaves one candidate's current
    answers far from the others', so its score leads by several noise scales and the argmax
    rarely flips between D and D'. With zero parameters every candidate's current answers are
    identical (RAP's clipped rows: all 0; the softmax families: all 1/2), the scores tie on D and
    move as in the module docstring, as for the histogram mechanisms' uniform start. Any public
    state is a valid condition (it stands for GEM-Pub's pretraining too), so this is no weaker."""
    key = jax.random.key(seed)
    state = mechanism.init(stream_key(key, Stream.INIT))
    for t in range(private_round):
        state, _ = mechanism.step(state, round_key(key, t))
    if isinstance(mechanism.family, RAP | GEM | MixedRows):
        model = state.model  # the round reads only `params`
        state = state._replace(
            model=model._replace(params=jax.tree_util.tree_map(jnp.zeros_like, model.params))
        )
    return state


def _summary(mechanism, prefix, private_round: int, sigma: float, key):
    """(selected or -1, measurement statistic in units of the honest sigma or 0) of one run."""
    state, info = mechanism.step(prefix, round_key(key, private_round))
    selected, noisy, measured = _released(mechanism, state, info)
    statistic = jnp.float32(0.0)
    if noisy is not None:
        shift = jnp.where(measured, jnp.asarray(TRUE_PRIME - TRUE, jnp.float32), 0.0)
        residual = jnp.where(measured, noisy - jnp.asarray(TRUE, jnp.float32), 0.0)
        statistic = residual @ shift / jnp.linalg.norm(shift) / sigma
    return (jnp.int32(-1) if selected is None else selected.astype(jnp.int32)), statistic


SELECTIONS = ("exponential", "gumbel_top_k", "discrete_exponential", "discrete_top_k")
MEASUREMENTS = ("gaussian", "discrete_gaussian")


class Claims(NamedTuple):
    """The honest round's per-primitive claims and its Gaussian's sigma (None where absent)."""

    selection: float | None
    measurement: float | None
    sigma: float | None


def _claims(mechanism, private_round: int, seed: int, delta: float) -> Claims:
    _, info = mechanism.step(
        _public_prefix(mechanism, private_round, seed), round_key(jax.random.key(0), private_round)
    )
    selection = measurement = sigma = None
    for charge in info.charges:
        if int(charge.count) == 0:
            continue
        primitive = noise.PRIMITIVES[int(charge.primitive)]
        sensitivity, scale = float(charge.sensitivity), float(charge.scale)
        if primitive in SELECTIONS and selection is None:
            epsilon = 2.0 * sensitivity / scale
            selection = epsilon  # pure epsilon-DP: tested with delta = 0
        elif primitive in MEASUREMENTS:
            # Charges are in counts; the statistic is in the mechanism's answers (counts / n under
            # replace-one), so sigma is converted to those units.
            sigma = scale * (1.0 if mechanism.relation is jaxdp.Neighboring.ADD_REMOVE else 1.0 / N_RECORDS)
            measurement = accounting.cdp_epsilon(accounting.charge_rho(primitive, sensitivity, scale), delta)
            if mechanism.plan.conversion == "pld":  # the tighter of its PLD and zCDP epsilons
                charge = accounting.PlannedCharge("measurement", primitive, sensitivity, scale)
                measurement = pld.plan_epsilon((charge,), delta)[0]
    return Claims(selection, measurement, sigma)


# --- the test ----------------------------------------------------------------------------------


def _simulate(name: str, runs: int, seed: int, sigma: float | None):
    """(selected, statistic) arrays of `runs` runs of the private round on D and on D'."""
    case = ROUNDS[name]
    mechanisms = [case.factory(D), case.factory(D_PRIME)]
    prefixes = [_public_prefix(m, case.private_round, case.prefix_seed) for m in mechanisms]
    leaves = [jax.tree_util.tree_leaves(p) for p in prefixes]
    assert all(np.array_equal(a, b) for a, b in zip(*leaves, strict=True)), "the prefix saw the data"

    def summary(mechanism, prefix, key):
        return _summary(mechanism, prefix, case.private_round, sigma or 1.0, key)

    # one compiled program for both datasets: they differ only in private leaves
    batch = jax.jit(jax.vmap(summary, in_axes=(None, None, 0)))
    out = []
    for mechanism, prefix, data_seed in zip(mechanisms, prefixes, (seed, seed + 1), strict=True):
        keys = jax.random.split(jax.random.key(data_seed), runs)
        parts = [batch(mechanism, prefix, keys[i : i + CHUNK]) for i in range(0, runs, CHUNK)]
        out.append(tuple(np.concatenate([np.asarray(p[j]) for p in parts]) for j in range(2)))
    return out


def _bounds(name: str, runs: int, delta: float, seed: int, sigma: float | None) -> tuple[float, float]:
    """(selection eps_lower, measurement eps_lower); -inf for a part the mechanism lacks."""
    (selected, statistic), (selected_prime, statistic_prime) = _simulate(name, runs, seed, sigma)
    selection = measurement = -math.inf
    if selected.min() >= 0:
        candidates = int(max(selected.max(), selected_prime.max())) + 1
        selection = selection_attack(selected, selected_prime, candidates, 0.0)
    if sigma is not None:
        measurement = threshold_attack(
            statistic.astype(np.float64), statistic_prime.astype(np.float64), delta
        )
    return selection, measurement


def test_neighbours_are_a_worst_case():
    """Every 1-way marginal moves by exactly the declared replace-one sensitivity sqrt(2)/n, and
    the selection scores against the uniform distribution move as described above."""
    for start, cells in zip(WORKLOAD.offsets, WORKLOAD.cells, strict=True):
        moved = TRUE_PRIME[start : start + cells] - TRUE[start : start + cells]
        assert np.linalg.norm(moved) == pytest.approx(math.sqrt(2) / N_RECORDS, rel=1e-9)
    score = np.abs(TRUE - 0.5)[::2]
    score_prime = np.abs(TRUE_PRIME - 0.5)[::2]
    np.testing.assert_allclose(score_prime - score, [-0.01, 0.01, 0.01, 0.01], atol=1e-12)


@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_private_round_keeps_its_claims(name):
    """Selection and measurement of one round: eps_lower <= the primitive's claim.

    False-failure rate: 2e-5 (two tests at 1e-5). Power: the half-noise control below fails.
    """
    case = ROUNDS[name]
    claims = _claims(case.factory(D), case.private_round, case.prefix_seed, FAST_DELTA)
    selection, measurement = _bounds(name, N_FAST, FAST_DELTA, 101, claims.sigma)
    assert (selection > -math.inf) == (claims.selection is not None)
    assert (measurement > -math.inf) == (claims.measurement is not None)
    if claims.selection is not None:
        assert selection < claims.selection
    if claims.measurement is not None:
        assert measurement < claims.measurement


@pytest.mark.parametrize("control", ["half the noise", "no noise"])
@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_broken_round_breaks_its_claims(name, control, broken_noise):
    """Negative controls: the broken round exceeds the honest claim in EACH part it has, the
    selection and the measurement on their own."""
    case = ROUNDS[name]
    claims = _claims(case.factory(D), case.private_round, case.prefix_seed, FAST_DELTA)
    broken_noise(control)
    selection, measurement = _bounds(name, N_FAST, FAST_DELTA, 201, claims.sigma)
    if claims.selection is not None:
        assert selection > claims.selection, (control, "selection", selection)
    if claims.measurement is not None:
        assert measurement > claims.measurement, (control, "measurement", measurement)


# The heavy replays test the primitives' tails at delta = 1e-5, which are the same whichever
# mechanism calls them: one mechanism per way a round reaches `jaxdp.noise` (a measurement alone,
# under zCDP and under its PLD calibration; the exact exponential mechanism then a measurement;
# the one-shot top-k; DualQuery's i.i.d. samples; FEM's signed scores). Every mechanism's own
# declarations (sensitivity, scale, mask) are held to their claims, with controls, by the fast
# tests above.
HEAVY = ("dualquery", "fem", "independent", "independent-pld", "mwem", "rap")


@pytest.mark.slow
@pytest.mark.parametrize("name", HEAVY)
def test_private_round_heavy(name, broken_noise):
    """1,000,000 runs at delta = 1e-5 (the claim of the fast Gaussian tests); then the halved
    sensitivity control at the fast setting must exceed the claim. False-failure rate: 2e-5."""
    case = ROUNDS[name]
    claims = _claims(case.factory(D), case.private_round, case.prefix_seed, DELTA)
    selection, measurement = _bounds(name, N_SLOW, DELTA, 301, claims.sigma)
    if claims.selection is not None:
        assert selection < claims.selection
    if claims.measurement is not None:
        assert measurement < claims.measurement
    fast = _claims(case.factory(D), case.private_round, case.prefix_seed, FAST_DELTA)
    broken_noise("halved sensitivity")
    selection, measurement = _bounds(name, N_FAST, FAST_DELTA, 401, fast.sigma)
    if fast.selection is not None:
        assert selection > fast.selection
    if fast.measurement is not None:
        assert measurement > fast.measurement
