"""Empirical DP of the selection rounds of AIM-GDP and SWIFT on add/remove neighbours, through
the primitives they call (the method and neighbours of `test_aim_round`).

Both mechanisms share AIM's round 0 and measurements (`test_aim_round` attacks them); what is new
is their selection, a discrete Gaussian measurement of the candidates' exact L1 errors
(`jaxdp.selection.noisy_errors.measure_errors`: AIM-GDP's every round, SWIFT's round 1, which
then plans its measurements from the release). Each mechanism's real `step` runs once on D and
once on D' from the same public state (round 0 released (15, 85) for every attribute, so every
candidate's error is 10 on D; D' adds r = (0, 1, 1, 1), which moves attribute 0's error to 9 and
the others' to 11: every error moves by its full sensitivity, a worst case), the selection's call
to `noise.discrete_gaussian` is recorded, and it is replayed 50,000 times from fresh keys and
attacked by the projection of its output on the move D -> D' (threshold events), held to the
claim of its own Charge, cdp_epsilon(rho, delta). The measurement that follows is attacked the
same way, with the released errors forced so that both tables pick (and plan) alike.

Negative controls: half the noise and no noise at the primitive, and a factory bug (half the
true sensitivities declared: half the noise scale, with Charges that recompute to the honest
claims). An exact check walks every neighbour with non-unit workload weights.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import accounting, gdp
from jaxdp.keys import Stream, stream_key
from jaxdp.queries import all_kway
from jaxdp.selection.scores import COUNT_STEPS
from jaxdp.selection.swift import ONE_WAY_SHARE, SELECT_SHARE

from .test_aim_round import (
    CODES,
    D_PRIME,
    DOMAIN,
    MEASURE,
    ONE_WAY,
    SELECTED,
    TRUE,
    D,
    _prefix,
    _reveal,
    _step,
    attack_bound,
)
from .test_mechanism_rounds import FAST_DELTA

pytest.importorskip("mbi")

# rho / T = 0.25 split evenly for AIM-GDP, as `test_aim_round`: the selection's 4 errors (round 1
# measures every candidate) at sigma 4 counts, twice their L2 sensitivity 2, the measurement at
# sigma 2. SWIFT's errors get SELECT_SHARE (1 - ONE_WAY_SHARE) of rho: 0.125 here, the same sigma
# 4 counts.
SWIFT_RHO = 0.125 / (SELECT_SHARE * (1.0 - ONE_WAY_SHARE))
GDP_EPSILON = gdp.epsilon_of(2.0, 1e-5)
FACTORIES = {
    "aim-gdp": lambda data, workload: jaxdp.aim_gdp(
        data, workload, rho=2.0, alpha=0.5, max_rounds=8, iters=200, final_iters=1
    ),
    "swift": lambda data, workload: jaxdp.swift(data, workload, rho=SWIFT_RHO, iters=200, final_iters=1),
    # the same budget under the Gaussian-DP accountant (mu^2 / 2 = 2, every draw smoothed): held
    # to its Gaussian-DP claims
    "aim-gdp/gdp": lambda data, workload: jaxdp.aim_gdp(
        data,
        workload,
        epsilon=GDP_EPSILON,
        delta=1e-5,
        conversion="gdp",
        alpha=0.5,
        max_rounds=8,
        iters=200,
        final_iters=1,
    ),
}
# (mechanism, part) attacked. SWIFT's measurements are AIM's code (`test_aim_round`) at the rhos
# of its plan, a function of the released errors (`test_swift.py` checks the plan's sums). Under
# "gdp" the selection (noise of hundreds of steps, where the smoothing of 2 steps is nothing): the
# smoothing's bound on a count measurement near it is checked exactly (`test_gdp.py`: the
# discrete Gaussian's own Gaussian-DP parameter, and dp_accounting's loss distribution of it),
# beyond what 50,000 replays can resolve.
CASES = [
    ("aim-gdp", "selection"),
    ("aim-gdp", "measurement"),
    ("swift", "selection"),
    ("aim-gdp/gdp", "selection"),
]


def _build(name: str, data, l1_sensitivity: float | None = None, workload=ONE_WAY):
    """The mechanism on `data`; `l1_sensitivity`: a factory bug declaring another (l1 and l2)."""
    mechanism = FACTORIES[name](data, workload)
    if l1_sensitivity is None:
        return mechanism
    rule = dataclasses.replace(
        mechanism.selection, l1_sensitivity=l1_sensitivity, l2_sensitivity=l1_sensitivity
    )
    return dataclasses.replace(mechanism, selection=rule)


def _forcing_pick():
    """A release hook making round 1's selection pick SELECTED (candidate 0, the subset's first)
    on both tables, so that the measurement after it is of the same marginal: the selection's
    noisy errors are replaced, the primitive still runs."""
    seen = []

    def release(primitive, output):
        seen.append(primitive)
        if len(seen) == 1:
            assert primitive == MEASURE
            forced = jnp.zeros_like(output).at[SELECTED].set(10**6)
            return forced
        return output

    return release


def _recorded(make) -> dict:
    """{part: (call on D, call on D')} of round 1 from the public prefix, after checking that
    the noise parameters passed are the same on both tables."""
    mechanisms = [make(D), make(D_PRIME)]
    prefix = _prefix(mechanisms[0])
    calls = [_step(m, prefix, 1, _forcing_pick())[1] for m in mechanisms]
    for recorded in calls:
        assert [c.primitive for c in recorded] == [MEASURE, MEASURE]
    parts = {"selection": (calls[0][0], calls[1][0]), "measurement": (calls[0][1], calls[1][1])}
    for part, (call, call_prime) in parts.items():
        for name, value in call.kwargs.items():
            np.testing.assert_array_equal(np.asarray(value), np.asarray(call_prime.kwargs[name]), part)
    return parts


@functools.cache
def _honest(name: str) -> dict:
    return _recorded(lambda data: _build(name, data))


@functools.cache
def _halved(name: str) -> dict:
    return _recorded(lambda data: _build(name, data, l1_sensitivity=0.5))


def _true(part: str, calls) -> tuple[np.ndarray, np.ndarray]:
    """What the part measures on D and D': the selection's exact errors (its private argument,
    read without noise), the measurement's counts."""
    if part == "selection":
        return tuple(_reveal(call.value)[:4] for call in calls)
    return TRUE["measurement"]


def _claim(name: str, call, delta: float = FAST_DELTA) -> float:
    """The call's own claim: its Gaussian-DP epsilon (`jaxdp.gdp.charge_mu`) under conversion
    "gdp", else its zCDP rho's exact conversion."""
    sensitivity, sigma = call.kwargs["sensitivity"], call.kwargs["sigma"]
    if name.endswith("/gdp"):
        return gdp.epsilon_of(gdp.charge_mu(MEASURE, sensitivity, sigma), delta)
    return accounting.cdp_epsilon(accounting.charge_rho(MEASURE, sensitivity, sigma), delta)


def _bound(part, calls, seed, sigma):
    return attack_bound(part.replace("selection", "errors"), calls, seed, sigma, _true(part, calls))


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_noisy_errors_move_by_the_declared_sensitivity(name):
    """The selection measures the 4 candidates' exact errors, int32 steps of 1/64 count: 10
    counts each on D, and on D' attribute 0's one count down and the others' one up, an L2 move of
    exactly the declared sensitivity 64 sqrt(4) (a worst case); the padding is zeros."""
    call, call_prime = _honest(name)["selection"]
    errors, errors_prime = (_reveal(c.value) for c in (call, call_prime))
    np.testing.assert_allclose(errors[:4], [10 * COUNT_STEPS] * 4, atol=1e-6)
    np.testing.assert_allclose(errors_prime[:4], np.array([9, 11, 11, 11]) * COUNT_STEPS, atol=1e-6)
    np.testing.assert_allclose(errors[4:], 0.0, atol=1e-6)
    assert np.linalg.norm(errors_prime - errors) == pytest.approx(call.kwargs["sensitivity"])
    assert call.kwargs["sensitivity"] == pytest.approx(COUNT_STEPS * 2.0)
    (values,) = jax.tree_util.tree_leaves(call.value)
    assert values.dtype == jnp.int32  # exact noise is added to integers


@pytest.mark.parametrize(("name", "part"), CASES)
def test_noisy_error_round_keeps_its_claims(name, part):
    """eps_lower <= the claim of the call's Charge (sigma twice the sensitivity: claim 1.13 at
    delta 1e-2; the attack gives about 0.7). False-failure rate 1e-5 per part."""
    calls = _honest(name)[part]
    bound = _bound(part, calls, 511, calls[0].kwargs["sigma"])
    assert bound < _claim(name, calls[0])
    assert bound > 0.5  # the attack has power


@pytest.mark.parametrize("control", ["half the noise", "no noise"])
@pytest.mark.parametrize(("name", "part"), CASES)
def test_noisy_error_round_controls_break_its_claims(name, part, control, broken_noise):
    """Broken primitives replaying the recorded calls exceed the honest claim, each part alone (half
    the noise: about 1.85 against 1.13, as `test_aim_round`'s measurement)."""
    calls = _honest(name)[part]
    claim = _claim(name, calls[0])
    broken_noise(control)
    assert _bound(part, calls, 611, calls[0].kwargs["sigma"]) > claim, control


@pytest.mark.parametrize(("name", "part"), CASES)
def test_halved_sensitivity_breaks_its_claims(name, part):
    """Half the true sensitivity declared: half the noise, Charges recomputing to the honest
    claims (the ledger cannot see it), and the attack exceeds them."""
    broken, honest_call = _halved(name)[part], _honest(name)[part][0]
    assert _claim(name, broken[0]) == pytest.approx(_claim(name, honest_call), rel=1e-6)
    assert _bound(part, broken, 711, honest_call.kwargs["sigma"]) > _claim(name, honest_call)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_noisy_errors_bound_every_neighbour(name):
    """Exact: with a 2-way workload (weights 3 and 6, which enter only the post-processing),
    every neighbour D + x (all 16 records) and D - x (every record type present) moves each
    candidate's error by at most 64 steps (one count), and the measured vector by at most the
    declared L2 sensitivity, which some neighbour reaches. Deterministic."""
    two_way = all_kway(DOMAIN.sizes, 2)
    mechanism = _build(name, D, workload=two_way)
    prefix = _prefix(mechanism)

    def errors(data):
        call = _step(_build(name, data, workload=two_way), prefix, 1, _forcing_pick())[1][0]
        return _reveal(call.value), call.kwargs["sensitivity"]

    base, sensitivity = errors(D)
    cells = np.indices(DOMAIN.sizes).reshape(len(DOMAIN.sizes), -1).T
    neighbours = [np.vstack([CODES, [x]]) for x in cells]
    neighbours += [np.delete(CODES, i, axis=0) for i in np.unique(CODES, axis=0, return_index=True)[1]]
    moves = [errors(jaxdp.Dataset.from_codes(DOMAIN, n))[0] - base for n in neighbours]
    assert max(np.abs(m).max() for m in moves) == pytest.approx(COUNT_STEPS)
    norms = [np.linalg.norm(m) for m in moves]
    assert max(norms) <= sensitivity * (1 + 1e-6)
    assert max(norms) == pytest.approx(sensitivity, rel=1e-6)


def test_subset_reads_released_errors_only():
    """S_t: every eligible candidate without a released error, then the best by released errors
    at this sigma, at most `per_round` in all; a candidate outside C_t never."""
    rule = jaxdp.aim_gdp(D, all_kway(DOMAIN.sizes, 2), rho=2.0, max_rounds=8).selection
    n = len(rule.candidates)
    stale = np.full(n, np.nan)
    mask = np.ones(n, bool)
    mask[3] = False
    np.testing.assert_array_equal(rule.subset(stale, mask, 1.0), np.flatnonzero(mask))
    stale = np.arange(n, dtype=np.float64) * 100.0
    stale[5] = np.nan
    small = dataclasses.replace(rule, per_round=3)
    picked = small.subset(stale, mask, 1.0)
    assert 5 in picked and 3 not in picked and len(picked) == 3
    scores = small.scores(stale, np.arange(n), 1.0)
    others = [i for i in picked if i != 5]
    assert min(scores[others]) >= max(scores[i] for i in range(n) if mask[i] and i not in picked and i != 5)


@pytest.mark.parametrize("factory", [jaxdp.aim_gdp, jaxdp.swift], ids=["aim-gdp", "swift"])
def test_whole_run_draws_only_gaussians_and_spends_its_budget(factory):
    """A whole run: the ledger matches the realised plan (`jaxdp.run` checks it), every private
    draw is a discrete Gaussian, and the rho spent is the budget."""
    mechanism = factory(D, all_kway(DOMAIN.sizes, 2), rho=0.5, iters=50, final_iters=50)
    result = jaxdp.run(mechanism, stream_key(jax.random.key(3), Stream.INIT))
    primitives = {entry.primitive for entry in result.ledger}
    assert primitives == {"discrete_gaussian"}
    assert jaxdp.rho_spent(result.ledger) == pytest.approx(0.5, rel=1e-6)
