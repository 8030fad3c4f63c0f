"""Empirical DP of MST's private rounds on add/remove neighbours, through the primitives it calls.

As `test_aim_round` does for AIM (whose recorder, replay and claims this reuses): MST's real
`step` runs once on D and once on D' from the same public state, its calls to the exact
primitives are recorded (the private argument MST computed and the scale, declared sensitivity and
mask it passed), and each call is replayed 50,000 times from independent keys and attacked with
the Clopper-Pearson code of `test_empirical_dp`, held to the claim of the call's own Charge.

Covered: round 0 (the Gaussian on every 1-way marginal together, L2 sensitivity sqrt(d)) and one
edge round: the exponential mechanism on the pairs' L1 errors against the 1-way model (sensitivity
1, the pairs the tree allows as its mask) and the Gaussian on the picked pair. Not covered, as for
AIM: key derivation (the contract suite), composition over rounds (the plan, checked by
`jaxdp.run`), and the fit and release (post-processing).

The neighbours are a worst case for the selection. D has 100 records over four binary attributes,
every attribute 50/50, and pair joints found by an integer program (scipy's milp, once; the test
below checks them): (a, b) has 26 records on its diagonal cells and 24 off it, and so do (b, c),
(b, d), (c, d); (a, c) and (a, d) the other way round. D' adds r = (0, 1, 1, 1). Round 0 is made
to release (50, 50) for every attribute, so the 1-way model puts 25 records in every pair cell
and every pair's L1 error is 4: the scores tie. Adding r moves (a, b)'s error to 3 (its cell
(0, 1) held 24) and every other pair's to 5: the scores move by the full sensitivity in opposite
directions.

Negative controls: half the noise and no noise (`broken_noise`), and a factory bug: MST with
halved declared l1/l2 sensitivities (half the noise, Charges that recompute to the honest claims).
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp.keys import Stream, stream_key
from jaxdp.queries import all_kway

from .test_aim_round import SELECT, Call, _claim, _reveal, _scores, _step, attack_bound, paired_calls

pytest.importorskip("mbi")

DOMAIN = jaxdp.Domain.from_sizes({"a": 2, "b": 2, "c": 2, "d": 2})
ONE_WAY = all_kway(DOMAIN.sizes, 1)
ADDED = (0, 1, 1, 1)
PREFIX_RELEASE = (50, 50)
# records per cell of D (a, b, c, d), in itertools.product order
CELL_COUNTS = (10, 8, 4, 4, 4, 2, 6, 12, 4, 4, 8, 8, 8, 10, 6, 2)
DIAGONAL_HEAVY = {(0, 1), (1, 2), (1, 3), (2, 3)}  # the other pairs, (0, 2) and (0, 3), are light
PAIR_AB = (0, 1)  # the pair the edge round measures (forced in the recorded run)


def _codes() -> np.ndarray:
    cells = list(itertools.product(range(2), repeat=4))
    rows = [cell for cell, count in zip(cells, CELL_COUNTS, strict=True) for _ in range(count)]
    return np.random.default_rng(0).permutation(np.array(rows))


CODES = _codes()
CODES_PRIME = np.vstack([CODES, [ADDED]])
D, D_PRIME = (jaxdp.Dataset.from_codes(DOMAIN, codes) for codes in (CODES, CODES_PRIME))


def _build(data):
    """rho 2: round 0 spends 2/3 (sigma sqrt(3)); each of the 3 edges 2/9 to select (epsilon
    4/3) and 2/9 to measure (sigma 1.5). iters: the 1-way fit converges."""
    return jaxdp.mst(data, ONE_WAY, rho=2.0, iters=200, final_iters=1)


def _pair_joint(codes: np.ndarray, pair) -> np.ndarray:
    return np.bincount(2 * codes[:, pair[0]] + codes[:, pair[1]], minlength=4)


TRUE = {
    "round 0 measurement": tuple(
        np.concatenate([np.bincount(c[:, j], minlength=2) for j in range(4)]) for c in (CODES, CODES_PRIME)
    ),
    "measurement": (_pair_joint(CODES, PAIR_AB), _pair_joint(CODES_PRIME, PAIR_AB)),
}


def _recorded_rounds(make) -> dict[str, tuple[Call, Call]]:
    """{part: (call on D, call on D')} for round 0's measurement and round 1's two draws."""
    mechanisms = [make(D), make(D_PRIME)]
    init = stream_key(jax.random.key(0), Stream.INIT)
    round0 = [_step(m, m.init(init), 0)[1] for m in mechanisms]
    released = jnp.asarray(np.tile(PREFIX_RELEASE, 4), jnp.int32)
    prefix, _ = _step(mechanisms[0], mechanisms[0].init(init), 0, lambda _, output: released)
    pair = mechanisms[0].candidates.cliques.index(PAIR_AB)

    def force(primitive, output):
        return jnp.int32(pair) if primitive == SELECT else output

    round1 = [_step(m, prefix, 1, force)[1] for m in mechanisms]
    return paired_calls(round0, round1)


def _bound(part: str, calls: tuple[Call, Call], seed: int, sigma: float) -> float:
    return attack_bound(part, calls, seed, sigma, TRUE.get(part))


PARTS = ("round 0 measurement", "selection", "measurement")


@pytest.fixture(scope="module")
def honest():
    return _recorded_rounds(_build)


@pytest.fixture(scope="module")
def halved():
    def make(data):
        mechanism = _build(data)
        rule = dataclasses.replace(mechanism.selection, l1_sensitivity=0.5, l2_sensitivity=0.5)
        return dataclasses.replace(mechanism, selection=rule)

    return _recorded_rounds(make)


def test_the_table_is_the_one_described():
    for j in range(4):
        assert np.bincount(CODES[:, j], minlength=2).tolist() == [50, 50]
    for pair in itertools.combinations(range(4), 2):
        heavy = [26, 24, 24, 26] if pair in DIAGONAL_HEAVY else [24, 26, 26, 24]
        assert _pair_joint(CODES, pair).tolist() == heavy, pair


def test_neighbours_are_a_worst_case(honest):
    """The pairs' scores tie on D, and on D' (a, b)'s moves down by the sensitivity while every
    other pair's moves up by it; the 1-way marginals are masked out; the measured counts move
    by exactly the declared L2 sensitivity (read through the primitives with no noise)."""
    selection, selection_prime = honest["selection"]
    mask = np.asarray(selection.kwargs["mask"])
    cliques = _build(D).candidates.cliques
    assert [cliques[i] for i in np.flatnonzero(mask)] == list(itertools.combinations(range(4), 2))
    sensitivity = selection.kwargs["sensitivity"]
    assert sensitivity == 1.0
    scores, scores_prime = _scores(selection)[mask], _scores(selection_prime)[mask]
    assert np.ptp(scores) <= 1e-6 * sensitivity  # the read-out adds noise of scale 1e-9
    moved = scores_prime - scores
    moved = moved - (moved[1] - sensitivity)  # align the common shift: pair (a, c) moves up
    np.testing.assert_allclose(moved, np.array([-1, 1, 1, 1, 1, 1]) * sensitivity, atol=1e-6)
    for part in ("round 0 measurement", "measurement"):
        true, true_prime = TRUE[part]
        assert np.linalg.norm(true_prime - true) == pytest.approx(honest[part][0].kwargs["sensitivity"])
        for call, expected in zip(honest[part], TRUE[part], strict=True):
            revealed = _reveal(call.value)
            np.testing.assert_array_equal(revealed[: len(expected)], expected)


@pytest.mark.parametrize("part", PARTS)
def test_mst_round_keeps_its_claims(honest, part):
    """eps_lower <= the claim of the call's Charge. False-failure rate 1e-5 per part (the
    attack's Clopper-Pearson bounds)."""
    calls = honest[part]
    bound = _bound(part, calls, 501, calls[0].kwargs.get("sigma", 1.0))
    assert bound < _claim(calls[0])
    if part == "selection":
        assert bound > 0.5  # the attack has power (a true ratio e^(4/3) between the extremes)


@pytest.mark.parametrize("control", ["half the noise", "no noise"])
@pytest.mark.parametrize("part", PARTS)
def test_mst_round_controls_break_its_claims(honest, part, control, broken_noise):
    """Broken primitives replaying MST's calls exceed the honest claim, each part on its own."""
    calls = honest[part]
    claim = _claim(calls[0])
    broken_noise(control)
    assert _bound(part, calls, 601, calls[0].kwargs.get("sigma", 1.0)) > claim, control


@pytest.mark.parametrize("part", PARTS)
def test_mst_with_halved_sensitivity_breaks_its_claims(honest, halved, part):
    """MST declaring half its true sensitivities: Charges that claim the honest epsilons, and an
    attack that exceeds them."""
    broken = halved[part]
    honest_call = honest[part][0]
    assert _claim(broken[0]) == pytest.approx(_claim(honest_call), rel=1e-6)
    assert _bound(part, broken, 701, honest_call.kwargs.get("sigma", 1.0)) > _claim(honest_call)
