"""Empirical DP of PrivBayes's private rounds on replace-one neighbours, through the primitives it
calls.

As `test_aim_round` does for AIM (whose recorder, replay and claims this reuses): PrivBayes's
real `step` runs once on D and once on D' from the same public state, its calls to the exact
primitives are recorded, and each is replayed 50,000 times from independent keys and attacked
with the Clopper-Pearson code of `test_empirical_dp`, held to the claim of its own Charge.

Covered: round 0's Gaussian on the first attribute's counts (L2 sensitivity sqrt(2): one record
changed), and a family round: the exponential mechanism on the integer dependence scores T of the
allowed families (declared sensitivity 6n + 4) and the Gaussian on the picked family's counts.
Not covered, as for AIM: key derivation, composition (the plan, checked by `jaxdp.run`), the fit
and release (post-processing), and the uniform draw of the first attribute (it reads no data).

The neighbours are a worst case of their kind for the selection. D has 100 records over a binary
parent a (5 records with a = 0) and six binary children b..g; in the rows a = 1 each child has
20 zeros and 75 ones, in the rows a = 0 four zeros and one one (so every (a, X) table has
determinant 4 * 75 - 1 * 20 = 280 and T = 4 * 280: the six families' scores tie once a is
placed). D' changes the record (a, b, c..g) = (0, 0, 1..1) into (0, 1, 0..0): b's determinant
falls by the 95 records with a = 1 and every other child's rises by as many, so T moves by 380,
down for (a, b) and up for the five others, against a declared sensitivity of 604.

Negative controls: half the noise and no noise (`broken_noise`), and a factory bug: PrivBayes
with its score sensitivity and L2 sensitivity declared at half (half the noise, Charges that
recompute to the honest claims).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp.keys import Stream, round_key, stream_key
from jaxdp.queries import all_kway
from jaxdp.selection import PrivBayesSelection
from jaxdp.selection.privbayes import dependence

from .test_aim_round import SELECT, Call, _claim, _reveal, _scores, _step, attack_bound, paired_calls

pytest.importorskip("mbi")

CHILDREN = 6
DOMAIN = jaxdp.Domain.from_sizes({name: 2 for name in "abcdefg"})
ONE_WAY = all_kway(DOMAIN.sizes, 1)
CHANGED, CHANGED_TO = (0, 0, *[1] * (CHILDREN - 1)), (0, 1, *[0] * (CHILDREN - 1))


def _codes() -> np.ndarray:
    rng = np.random.default_rng(0)
    children = np.stack([rng.permutation([0] * 20 + [1] * 75) for _ in range(CHILDREN)], axis=1)
    with_a_one = np.hstack([np.ones((95, 1), int), children])
    # a = 0: the record D' changes, three of all zeros, one with b = 1 (each child: 4 zeros, 1 one)
    with_a_zero = np.array([CHANGED, (0,) * 7, (0,) * 7, (0,) * 7, (0, 1, 0, 0, 0, 0, 0)])
    return np.vstack([with_a_zero, with_a_one])


CODES = _codes()
CODES_PRIME = CODES.copy()
CODES_PRIME[0] = CHANGED_TO
D, D_PRIME = (jaxdp.Dataset.from_codes(DOMAIN, codes) for codes in (CODES, CODES_PRIME))
N = len(CODES)


def _build(data):
    """rho 10: each of the 6 selections spends 0.5 (epsilon 2), each of the 7 measurements 1
    (sigma 1: the usefulness bound admits families of 25 cells). One parent at most: the round
    after a is placed has the same six families, and the exact sampler's replays run over 28
    candidates instead of 98."""
    return jaxdp.privbayes(data, ONE_WAY, rho=10.0, degree=1, iters=50, final_iters=1)


def _root_opening(mechanism, attribute: int) -> int:
    """A root seed whose round 0 places `attribute` first (the draw reads no data)."""
    index = mechanism.candidates.cliques.index((attribute,))
    for seed in range(200):
        key = stream_key(round_key(jax.random.key(seed), 0), Stream.SELECT)
        if mechanism.selection.opening(key) == [index]:
            return seed
    raise AssertionError("no seed places the attribute first")


def _family_counts(codes: np.ndarray, clique) -> np.ndarray:
    joint = np.zeros([2] * len(clique), np.int64)
    np.add.at(joint, tuple(codes[:, a] for a in clique), 1)
    return joint.reshape(-1)


TRUE = {
    "round 0 measurement": (_family_counts(CODES, (1,)), _family_counts(CODES_PRIME, (1,))),
    "measurement": (_family_counts(CODES, (0, 1)), _family_counts(CODES_PRIME, (0, 1))),
}


def _recorded_rounds(make) -> dict[str, tuple[Call, Call]]:
    """{part: (call on D, call on D')}: round 0 placing b (whose counts D' changes), and the
    round after a placed first (the prefix: released values only), forced to pick (a, b)."""
    mechanisms = [make(D), make(D_PRIME)]
    init = mechanisms[0].init(stream_key(jax.random.key(0), Stream.INIT))
    on_b = _root_opening(mechanisms[0], 1)
    round0 = [_step(m, init, 0, root=on_b)[1] for m in mechanisms]
    on_a = _root_opening(mechanisms[0], 0)
    prefix, _ = _step(mechanisms[0], init, 0, root=on_a)
    family = mechanisms[0].candidates.cliques.index((0, 1))

    def force(primitive, output):
        return jnp.int32(family) if primitive == SELECT else output

    round1 = [_step(m, prefix, 1, force, root=on_a)[1] for m in mechanisms]
    return paired_calls(round0, round1)


def _bound(part: str, calls: tuple[Call, Call], seed: int, sigma: float) -> float:
    return attack_bound(part, calls, seed, sigma, TRUE.get(part))


PARTS = ("round 0 measurement", "selection", "measurement")


class HalvedSensitivity(PrivBayesSelection):
    """A factory bug: PrivBayes declaring half its score sensitivity (its L2 sensitivity is
    halved on the bound rule below)."""

    @property
    def score_sensitivity(self) -> int:
        return super().score_sensitivity // 2


@pytest.fixture(scope="module")
def honest():
    return _recorded_rounds(_build)


@pytest.fixture(scope="module")
def halved():
    def make(data):
        mechanism = _build(data)
        fields = {
            f.name: getattr(mechanism.selection, f.name) for f in dataclasses.fields(mechanism.selection)
        }
        rule = HalvedSensitivity(**{**fields, "l2_sensitivity": mechanism.selection.l2_sensitivity / 2})
        return dataclasses.replace(mechanism, selection=rule)

    return _recorded_rounds(make)


def test_neighbours_are_a_worst_case_of_their_kind(honest):
    """With a placed, the six families' scores tie on D; on D' (a, b)'s falls by 380 and the five
    others' rise by 380 (in T), against a declared 6n + 4 = 604; the measured counts move by
    exactly the declared L2 sensitivity."""
    for x in range(1, 7):
        assert dependence(_family_counts(CODES, (0, x)).reshape(2, 2), 1, N) == 4 * 280
    selection, selection_prime = honest["selection"]
    mask = np.asarray(selection.kwargs["mask"])
    cliques = _build(D).candidates.cliques
    assert [cliques[i] for i in np.flatnonzero(mask)] == [(0, x) for x in range(1, 7)]
    sensitivity = selection.kwargs["sensitivity"]
    assert sensitivity == 6 * N + 4
    scores, scores_prime = _scores(selection)[mask], _scores(selection_prime)[mask]
    assert np.ptp(scores) <= 1e-6 * sensitivity
    moved = (scores_prime - scores) - (scores_prime - scores)[1]  # (a, c) as the reference
    # grid steps of 604 / 64: 380 is 40.26 steps, floored on each side
    np.testing.assert_allclose(moved[0], -760.0, atol=2 * sensitivity / 64)
    np.testing.assert_allclose(moved[1:], 0.0, atol=2 * sensitivity / 64)
    for part in ("round 0 measurement", "measurement"):
        true, true_prime = TRUE[part]
        assert np.linalg.norm(true_prime - true) == pytest.approx(honest[part][0].kwargs["sensitivity"])
        for call, expected in zip(honest[part], TRUE[part], strict=True):
            np.testing.assert_array_equal(_reveal(call.value)[: len(expected)], expected)


@pytest.mark.parametrize("part", PARTS)
def test_privbayes_round_keeps_its_claims(honest, part):
    """eps_lower <= the claim of the call's Charge. False-failure rate 1e-5 per part."""
    calls = honest[part]
    bound = _bound(part, calls, 501, calls[0].kwargs.get("sigma", 1.0))
    assert bound < _claim(calls[0])
    if part == "selection":
        assert bound > 0.5  # the attack has power


@pytest.mark.parametrize("control", ["half the noise", "no noise"])
@pytest.mark.parametrize("part", PARTS)
def test_privbayes_round_controls_break_its_claims(honest, part, control, broken_noise):
    calls = honest[part]
    claim = _claim(calls[0])
    broken_noise(control)
    assert _bound(part, calls, 601, calls[0].kwargs.get("sigma", 1.0)) > claim, control


@pytest.mark.parametrize("part", PARTS)
def test_privbayes_with_halved_sensitivity_breaks_its_claims(honest, halved, part):
    broken = halved[part]
    honest_call = honest[part][0]
    assert _claim(broken[0]) == pytest.approx(_claim(honest_call), rel=1e-6)
    assert _bound(part, broken, 701, honest_call.kwargs.get("sigma", 1.0)) > _claim(honest_call)
