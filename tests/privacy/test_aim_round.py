"""Empirical DP of AIM's private rounds on add/remove neighbours, through the primitives it calls.

AIM runs as a Python loop (a graphical-model fit per round), so 50,000 runs of its `step` are out
of reach. Instead each test runs AIM's real `step` ONCE on D and once on D' from the same public
state, records the exact calls it makes to `jaxdp.noise`'s exact primitives (`discrete_gaussian`
and `grid_exponential`, AIM's default noise, reached through `noise.measure_counts` and
`noise.select_grid`: the private argument AIM computed from the data, and the scale, declared
sensitivity and mask it passed), and then replays each recorded call 50,000 times from
independent keys through the same primitive. The replays are attacked with
the Clopper-Pearson code of `test_empirical_dp` and held to the claim the call's own Charge makes.

Covered: the quality scores AIM computes over its candidates (q_r = w_r (L1 error - penalty)) and
its declared score sensitivity Delta_t = max w_r, the integer counts it measures and its L2
sensitivity, sigma and the selection scale as AIM calibrates them, under AIM's default relation
(add/remove: D' = D plus one record, counts), for round 0 (the Gaussian on every 1-way marginal
together, and the second one where round 0 tops its counts up on a small table,
`AIMSelection.resolution`, its sigma set from the first's release) and one adaptive round
(selection, then the Gaussian on the selected marginal); and that the scale,
sigma, declared sensitivity and mask passed to the primitives are the same on D and D' (no
un-noised data dependence). Not covered: AIM's key derivation (the replays use fresh keys; the
contract suite checks the key streams), the filter's composition over rounds (checked against the
plan by `jaxdp.run` and the accounting tests), and any release outside the primitives (the
state's other fields are post-processing of their outputs). The empirical attack uses a workload
whose weights are all 1, so the max-w factor of Delta_t is checked by the exact sensitivity test
below (non-unit weights, every neighbour), not by the attack.

The neighbours are a worst case for the selection, as in `test_mechanism_rounds`: four binary
attributes, each 10/90 on D, and D' adds r = (0, 1, 1, 1). The public state before the adaptive
round is the one AIM reaches when round 0 releases (15, 85) for every attribute: the model's
1-way counts are then (15, 85), every candidate's L1 error is 10 and the scores tie; adding r
brings attribute 0's count towards the model (error 9) and moves the others away (error 11), so
every score moves by the full sensitivity and the odds by nearly the full epsilon. Any released
value is a possible round-0 output, and the round must be private conditional on it.

Negative controls: half the noise and no noise (the primitives broken by `broken_noise`; "no
noise" draws at the smallest scale the exact samplers accept, which leaves none), and a
factory bug, AIM with halved declared l1/l2 sensitivities: it calibrates half the noise scale
while its Charges recompute to the honest claims (asserted), so only the attack sees it.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import accounting, noise
from jaxdp.keys import Stream, round_key, stream_key
from jaxdp.mechanisms import host_loop
from jaxdp.queries import all_kway

from .test_empirical_dp import DELTA, selection_attack, threshold_attack
from .test_mechanism_rounds import FAST_DELTA, N_FAST, N_SLOW

pytest.importorskip("mbi")

DOMAIN = jaxdp.Domain.from_sizes({"a": 2, "b": 2, "c": 2, "d": 2})
ONE_WAY = all_kway(DOMAIN.sizes, 1)
ADDED = (0, 1, 1, 1)  # the record D' adds
PREFIX_RELEASE = (15, 85)  # what round 0 released for every attribute (counts)
SELECTED = 0  # the marginal the adaptive round measures (forced in the recorded run)


def _codes() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.stack([rng.permutation([0] * 10 + [1] * 90) for _ in DOMAIN.sizes], axis=1)


CODES = _codes()
CODES_PRIME = np.vstack([CODES, [ADDED]])
D, D_PRIME = (jaxdp.Dataset.from_codes(DOMAIN, codes) for codes in (CODES, CODES_PRIME))


# AIM-GEM shares AIM's selection and measurement code but scores against its generator's
# answers, so it is recorded and attacked the same way (its generator's 200-step prefix fit ties
# the scores to within 1e-3 of the sensitivity).
FACTORIES = {"aim": jaxdp.aim, "aim-gem": jaxdp.aim_gem}


def _build(factory, data, rounds: int | None = 8):
    """Budget for epsilon_t = 1 and sigma_t = 2 in the first adaptive round (rho / T = 0.25, split
    evenly); 8 rounds so round 1 is not the filter's last. iters: the prefix's fit converges.
    rounds=None: the default T = 16 d = 64, where round 0 on these 100 records is measured a
    second time (`AIMSelection.resolution`: sigma 5.7 at T is above n / 150), the two together at
    the sigma of T' = 2 d = 8 rounds (2)."""
    return factory(data, ONE_WAY, rho=2.0, alpha=0.5, max_rounds=rounds, iters=200, final_iters=1)


def _true_counts(codes: np.ndarray, attributes) -> np.ndarray:
    """Brute-force 1-way counts of the given attributes, concatenated."""
    return np.concatenate([np.bincount(codes[:, j], minlength=DOMAIN.sizes[j]) for j in attributes])


# The primitives AIM's default (exact) noise reaches; `noise.measure_counts` and `noise.select`
# look them up in `jaxdp.noise` at call time, so patching the module records every call.
MEASURE, SELECT = "discrete_gaussian", "grid_exponential"


class Call(NamedTuple):
    """One recorded call to a `jaxdp.noise` primitive: its private argument and keywords."""

    primitive: str
    value: object  # the Sensitive AIM passed
    kwargs: dict


def _step(mechanism, state, t: int, release=None, root: int = 0) -> tuple[object, list[Call]]:
    """AIM's real `step` for round t, recording every primitive call. `release(primitive, output)`
    may replace what a primitive releases (a chosen round-0 output, a forced selection); the
    primitive still runs, so its Charge and key use are AIM's own."""
    calls: list[Call] = []
    with pytest.MonkeyPatch.context() as patch:
        for name in (SELECT, MEASURE):
            original = getattr(noise, name)

            def recorder(key, value, *, _name=name, _original=original, **kwargs):
                calls.append(Call(_name, value, kwargs))
                output, charge = _original(key, value, **kwargs)
                return (output if release is None else release(_name, output)), charge

            patch.setattr(noise, name, recorder)
        state, _ = mechanism.step(state, round_key(jax.random.key(root), t))
    return state, calls


def _prefix(mechanism):
    """The public state after round 0 released PREFIX_RELEASE for every attribute."""
    state = mechanism.init(stream_key(jax.random.key(0), Stream.INIT))
    chosen = jnp.asarray(np.tile(PREFIX_RELEASE, len(DOMAIN.sizes)), jnp.int32)
    state, _ = _step(mechanism, state, 0, lambda _, output: chosen)
    return state


def _force_selection(primitive, output):
    return jnp.int32(SELECTED) if primitive == SELECT else output


def _recorded_rounds(make) -> dict[str, tuple[Call, Call]]:
    """{part: (call on D, call on D')} for round 0's measurement, round 1's two draws and the
    second measurement of a round 0 that tops its 1-way counts up (`make(data, None)`; the first
    made to release (5, 95) for every attribute on both tables, so that the second's sigma, a
    function of that release, is the same on both)."""
    mechanisms = [make(D), make(D_PRIME)]
    round0 = [_step(m, m.init(stream_key(jax.random.key(0), Stream.INIT)), 0)[1] for m in mechanisms]
    prefix = _prefix(mechanisms[0])  # released values only: the same state for both datasets
    round1 = [_step(m, prefix, 1, _force_selection)[1] for m in mechanisms]
    # a count of 5 is under 3 sigmas (a value near the noise) for the honest and the halved build
    chosen = jnp.asarray(np.tile((5, 95), len(DOMAIN.sizes)), jnp.int32)
    topped = []
    with pytest.MonkeyPatch.context() as patch:
        # these binary attributes count as wide, so that round 0 tops up (which attributes may
        # trigger it is a rule on the release; the top-up measures every 1-way count)
        patch.setattr(host_loop, "WIDE", 2)
        for data in (D, D_PRIME):
            m = make(data, None)
            topped.append(
                _step(m, m.init(stream_key(jax.random.key(0), Stream.INIT)), 0, lambda _, out: chosen)[1]
            )
    assert [[c.primitive for c in calls] for calls in topped] == [[MEASURE, MEASURE]] * 2
    parts = paired_calls(round0, round1)
    parts["round 0 top-up"] = paired_calls([calls[1:] for calls in topped], round1, "round 0 top-up")[
        "round 0 top-up"
    ]
    return parts


def paired_calls(round0, round1, first: str = "round 0 measurement") -> dict[str, tuple[Call, Call]]:
    """{part: (call on D, call on D')} from the calls recorded on D and D' in round 0 (one
    measurement, named `first`) and round 1 (a selection, then a measurement), after checking that
    every noise parameter passed is the same on both (they are public)."""
    assert [c.primitive for c in round0[0]] == [MEASURE]
    assert [c.primitive for c in round1[0]] == [SELECT, MEASURE]
    parts = {
        first: (round0[0][0], round0[1][0]),
        "selection": (round1[0][0], round1[1][0]),
        "measurement": (round1[0][1], round1[1][1]),
    }
    for part, (call, call_prime) in parts.items():
        assert call.kwargs.keys() == call_prime.kwargs.keys(), part
        for name, value in call.kwargs.items():
            np.testing.assert_array_equal(np.asarray(value), np.asarray(call_prime.kwargs[name]), part)
    return parts


def _replay(call: Call, runs: int, seed: int) -> np.ndarray:
    """The primitive's release for `runs` fresh keys (looked up now, so broken_noise applies)."""
    primitive = getattr(noise, call.primitive)

    def one(value, key):
        return primitive(key, value, **call.kwargs)[0]

    keys = jax.random.split(jax.random.key(seed), runs)
    return np.asarray(jax.jit(jax.vmap(one, in_axes=(None, 0)))(call.value, keys))


def _claim(call: Call, delta: float = FAST_DELTA) -> float:
    """The call's own claim: pure epsilon for a selection (attacked with delta = 0), the exact
    (epsilon, delta) conversion of its rho for a (discrete) Gaussian."""
    if call.primitive == SELECT:
        return 2.0 * call.kwargs["sensitivity"] / call.kwargs["scale"]
    rho = accounting.charge_rho(MEASURE, call.kwargs["sensitivity"], call.kwargs["sigma"])
    return accounting.cdp_epsilon(rho, delta)


TRUE = {  # (on D, on D') the counts each measurement is of
    "round 0 measurement": (_true_counts(CODES, range(4)), _true_counts(CODES_PRIME, range(4))),
    "round 0 top-up": (_true_counts(CODES, range(4)), _true_counts(CODES_PRIME, range(4))),
    "measurement": (_true_counts(CODES, [SELECTED]), _true_counts(CODES_PRIME, [SELECTED])),
}


def attack_bound(
    part: str,
    calls: tuple[Call, Call],
    seed: int,
    sigma: float,
    true: tuple[np.ndarray, np.ndarray] | None,
    runs: int = N_FAST,
    delta: float = FAST_DELTA,
) -> float:
    """eps_lower of one part from `runs` replays on D and on D': the selection attacked by the
    event of each candidate picked, a measurement by the projection of its output on the move
    between `true`, the counts it measures on D and on D'."""
    out, out_prime = (_replay(call, runs, seed + i) for i, call in enumerate(calls))
    if part == "selection":
        return selection_attack(out, out_prime, len(calls[0].kwargs["mask"]), 0.0)
    true, true_prime = true
    # the mechanisms keep only the counts' coordinates: the zero padding gets the same noise on D and D'
    out, out_prime = out[:, : len(true)], out_prime[:, : len(true)]
    direction = (true_prime - true) / np.linalg.norm(true_prime - true)
    # projection on D -> D' in units of the honest sigma: N(0, 1) on D, N(shift, 1) on D'
    statistic = [(np.asarray(y, np.float64) - true) @ direction / sigma for y in (out, out_prime)]
    return threshold_attack(*statistic, delta)


def _bound(
    part: str, calls: tuple[Call, Call], seed: int, sigma: float, runs=N_FAST, delta=FAST_DELTA
) -> float:
    return attack_bound(part, calls, seed, sigma, TRUE.get(part), runs, delta)


PARTS = ("round 0 measurement", "round 0 top-up", "selection", "measurement")


def _scores(call: Call) -> np.ndarray:
    """The recorded selection scores in score units: AIM's exact scores are int32 grid steps of
    sensitivity / GRID_STEPS, relative to the best eligible candidate (a common shift, which
    leaves the exponential mechanism's law unchanged; exact below 2^24 steps in float32)."""
    return _reveal(call.value) * call.kwargs["sensitivity"] / noise.GRID_STEPS


def _spread(moved: np.ndarray) -> float:
    """How far a score vector moved up to a common shift, min_c max_i |moved_i - c|: what the
    exponential mechanism's privacy depends on (its law ignores a common shift)."""
    return float(np.ptp(moved)) / 2.0


def _reveal(value) -> np.ndarray:
    """A recorded private argument (float scores or int32 counts), read the sanctioned way:
    through `noise.gaussian` with a scale (1e-9) that leaves float32 values unchanged. For the
    deterministic checks only."""
    revealed, _ = noise.gaussian(jax.random.key(99), value, sigma=1e-9, sensitivity=1.0)
    return np.asarray(revealed, np.float64)


@pytest.fixture(scope="module", params=sorted(FACTORIES))
def factory(request):
    return FACTORIES[request.param]


@pytest.fixture(scope="module")
def honest(factory):
    return _recorded_rounds(lambda data, rounds=8: _build(factory, data, rounds))


@pytest.fixture(scope="module")
def halved(factory):
    """A factory bug: half the true l1 and l2 sensitivities declared."""

    def make(data, rounds=8):
        mechanism = _build(factory, data, rounds)
        rule = dataclasses.replace(mechanism.selection, l1_sensitivity=0.5, l2_sensitivity=0.5)
        return dataclasses.replace(mechanism, selection=rule)

    return _recorded_rounds(make)


def test_neighbours_are_a_worst_case(honest):
    """The scores tie on D and each moves by exactly the declared sensitivity on D' (attribute 0
    down, the others up; up to the common shift by the best score the exact sampler is given);
    the measured counts move by exactly the declared L2 sensitivity.
    Read through the primitives with no noise (deterministic)."""
    selection, selection_prime = honest["selection"]
    sensitivity = selection.kwargs["sensitivity"]
    scores, scores_prime = _scores(selection), _scores(selection_prime)
    assert np.ptp(scores) <= 1e-3 * sensitivity
    moved = scores_prime - scores
    moved = moved - (moved[1] - sensitivity)  # align the common shift: candidate 1 moves up
    np.testing.assert_allclose(moved, np.array([-1, 1, 1, 1]) * sensitivity, atol=1e-5)
    for part in ("round 0 measurement", "round 0 top-up", "measurement"):
        true, true_prime = TRUE[part]
        assert np.linalg.norm(true_prime - true) == pytest.approx(honest[part][0].kwargs["sensitivity"])
        for call, expected in zip(honest[part], TRUE[part], strict=True):  # AIM measures the counts
            revealed = _reveal(call.value)  # AIM pads the counts with zeros to a public length
            np.testing.assert_array_equal(revealed[: len(expected)], expected)
            np.testing.assert_allclose(revealed[len(expected) :], 0.0, atol=1e-6)
            (counts,) = jax.tree_util.tree_leaves(call.value)
            assert counts.dtype == jnp.int32  # exact noise is added to integers


@pytest.mark.parametrize("part", PARTS)
def test_aim_round_keeps_its_claims(honest, part):
    """eps_lower <= the claim of the call's Charge. False-failure rate 1e-5 per part.

    Over 5 other seeds (mean, sd): selection 0.73, 0.014 (claim 1; true ratio e^0.83);
    measurement 0.70, 0.025 (claim 1.13; sigma 2, shift 1/2 sigma); round 0 measurement 1.83,
    0.026 (claim 2.75; shift 1 sigma); round 0 top-up 1.68, 0.027 (claim 2.52; sigma 2.14, shift
    0.94 sigma).
    """
    calls = honest[part]
    bound = _bound(part, calls, 501, calls[0].kwargs.get("sigma", 1.0))
    assert bound < _claim(calls[0])
    if part == "selection":
        assert bound > 0.6  # the attack has power (a true ratio e^0.83)


@pytest.mark.parametrize("control", ["half the noise", "no noise"])
@pytest.mark.parametrize("part", PARTS)
def test_aim_round_controls_break_its_claims(factory, honest, part, control, broken_noise):
    """Broken primitives replaying AIM's calls exceed the honest claim, each part on its own.

    Half the noise over 5 seeds (mean, sd): selection 1.62, 0.025 (claim 1); measurement 1.86,
    0.039 (claim 1.13); round 0 measurement 4.28, 0.12 (claim 2.75); no noise: about 8 for each.
    False-failure rate: every claim is more than 12 standard deviations below the mean.

    AIM-GEM's selection under "no noise" is left out: its generator ties the scores only to
    within 1e-3, so a noiseless argmax picks the same (highest) candidate on D and D' (D' lowers
    candidate 0 and raises the others alike) and the fixed neighbours cannot tell. Its selection
    is still caught by half the noise and by the halved-sensitivity bug below.
    """
    if factory is jaxdp.aim_gem and part == "selection" and control == "no noise":
        pytest.skip("noiseless argmax over near-tied scores does not move between these neighbours")
    calls = honest[part]
    claim = _claim(calls[0])
    broken_noise(control)
    assert _bound(part, calls, 601, calls[0].kwargs.get("sigma", 1.0)) > claim, control


@pytest.mark.parametrize("part", PARTS)
def test_aim_with_halved_sensitivity_breaks_its_claims(honest, halved, part):
    """A factory bug: AIM declaring half its true l1 and l2 sensitivities calibrates half the noise
    scale, its Charges claim exactly the honest epsilons (the ledger cannot see it), and the
    attack exceeds them."""
    broken = halved[part]
    honest_call = honest[part][0]
    assert _claim(broken[0]) == pytest.approx(_claim(honest_call), rel=1e-6)
    bound = _bound(part, broken, 701, honest_call.kwargs.get("sigma", 1.0))
    assert bound > _claim(honest_call)


@pytest.mark.slow
@pytest.mark.parametrize("part", PARTS)
def test_aim_round_heavy(factory, honest, halved, part):
    """1,000,000 replays at delta = 1e-5 (as `test_private_round_heavy`): the honest part stays
    under its claim and the halved-sensitivity bug exceeds it. False-failure rate: 1e-5. AIM's
    only: AIM-GEM's calls reach the same primitives through the same code (its fast tests hold
    them to their claims)."""
    if factory is not jaxdp.aim:
        pytest.skip("the primitives' tails are tested through AIM's calls")
    calls = honest[part]
    sigma = calls[0].kwargs.get("sigma", 1.0)
    claim = _claim(calls[0], DELTA)
    assert _bound(part, calls, 801, sigma, N_SLOW, DELTA) < claim
    assert _bound(part, halved[part], 901, sigma, N_SLOW, DELTA) > claim


@pytest.mark.parametrize("factory", [jaxdp.aim, jaxdp.aim_gem], ids=["aim", "aim-gem"])
def test_declared_sensitivities_bound_every_neighbour(factory):
    """Exact check of Delta_t = max w_r with non-unit weights: a 2-way
    workload (1-way candidates w = 3, 2-way w = 6), every neighbour D + x (all 16 records x) and
    D - x (every record type present): the adaptive round's scores move by at most the declared
    sensitivity, and the largest move over the neighbours equals it (the declaration is tight).
    Deterministic. Also run for AIM-GEM, which shares AIM's selection code but scores against its
    generator's answers (a different public model state, so the bound is checked there too)."""
    two_way = all_kway(DOMAIN.sizes, 2)

    def make(data):
        return factory(data, two_way, rho=2.0, alpha=0.5, max_rounds=8, iters=1, final_iters=1)

    mechanism = make(D)
    assert sorted(set(mechanism.selection.weights)) == [3.0, 6.0]
    prefix = _prefix(mechanism)

    def scores(data):
        selection = _step(make(data), prefix, 1, _force_selection)[1][0]
        return _scores(selection), selection.kwargs["sensitivity"]

    base, sensitivity = scores(D)
    assert sensitivity == pytest.approx(6.0)
    cells = np.indices(DOMAIN.sizes).reshape(len(DOMAIN.sizes), -1).T
    neighbours = [np.vstack([CODES, [x]]) for x in cells]
    neighbours += [np.delete(CODES, i, axis=0) for i in np.unique(CODES, axis=0, return_index=True)[1]]
    moves = [_spread(scores(jaxdp.Dataset.from_codes(DOMAIN, n))[0] - base) for n in neighbours]
    assert max(moves) <= sensitivity * (1 + 1e-6)
    assert max(moves) == pytest.approx(sensitivity, rel=1e-6)
