"""Exact selection scores: the int32/int64 grid scores of every exact caller move by at most
GRID_STEPS steps between neighbouring count vectors, and equal a Python-integer reference.

What is checked, per score function (the selection rules' `grid_scores`, RAP++'s and FEM's, AIM's
`grid_quality_scores`):
- equality with a brute-force reference in Python integers (`fractions` where a rational enters),
  so no int32 overflow or float rounding hides in the implementation, at n = 10^6 and at the
  documented limit n = GRID_MAX_RECORDS = 2^24 - 1;
- sensitivity: |score(D) - score(D')| <= GRID_STEPS on random and adversarial neighbouring count
  vectors (replace-one: in each marginal one cell loses a record and one gains it; add-remove:
  one cell of each marginal gains one), and = GRID_STEPS on the adversarial ones (the bound is
  tight, so a wrong factor of two would fail);
- the negative control: the float32 path these replace (`selection.max_cell_errors` on counts / n,
  then `noise._quantised_gaps`) moves by more than its 66-step allowance on some neighbouring pair
  at n = 10^6: the gap that the integer scores close;
- the exact sampler's law on grid scores (chi-square, control rejected) and determinism.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import noise, selection
from jaxdp.domain import domain_from_schema
from jaxdp.mechanisms import rap_plus
from jaxdp.queries import aim_weights, all_kway, downward_closure
from jaxdp.selection import GRID_MAX_RECORDS, L1Error, MaxError, QueryError, Rule, SelectionBudget
from jaxdp.selection import scores as aim_scores
from jaxdp.selection.games import MAX_EXACT_ROUNDS, signed_steps
from jaxdp.selection.games import sample_steps as dualquery_grid_scores
from jaxdp.types import Sensitive, pytree_dataclass

from .test_exact_samplers import _check_selection, _exp_law, _select_counts

STEPS = noise.GRID_STEPS
WORKLOAD = all_kway((3, 4, 2), 2)  # 3 marginals, 12 + 6 + 8 = 26 cells
CANDIDATES = downward_closure(all_kway((3, 4, 2, 2), 2))
NS = (1_000_000, GRID_MAX_RECORDS)
MIXED_DOMAIN = domain_from_schema(
    {
        "columns": {
            "a": {"type": "categorical", "size": 3},
            "b": {"type": "categorical", "size": 2},
            "x": {"type": "numeric", "lower": 0, "upper": 1},
        }
    }
)


def _random_counts(rng, workload, n: int) -> np.ndarray:
    """Counts of each marginal summing to n (as a table's would)."""
    return np.concatenate([rng.multinomial(n, np.full(c, 1.0 / c)) for c in workload.cells]).astype(np.int64)


def _replace_one(rng, counts, workload) -> np.ndarray:
    """A neighbour under replace-one: in each marginal one cell with a record loses it and one
    cell (possibly the same) gains one."""
    out = counts.copy()
    for start, cells in zip(workload.offsets, workload.cells, strict=True):
        block = out[start : start + cells]
        lose = rng.choice(np.flatnonzero(block > 0))
        block[lose] -= 1
        block[rng.integers(cells)] += 1
    return out


def _add_one(rng, counts, workload) -> np.ndarray:
    out = counts.copy()
    for start, cells in zip(workload.offsets, workload.cells, strict=True):
        out[start + rng.integers(cells)] += 1
    return out


def _current_near(rng, counts, n, workload, spread: float) -> np.ndarray:
    """Public current answers (fractions, float32) near the truth, each marginal normalised."""
    p = counts / n + rng.normal(0.0, spread, counts.shape)
    p = np.clip(p, 0.0, 1.0)
    segments = workload.marginal_of_query()
    p = p / np.bincount(segments, weights=p)[segments]
    return p.astype(np.float32)


# --- Python-integer references ----------------------------------------------------------------------


def _public_steps(current: np.ndarray, n: int, s: int) -> list[int]:
    """The public answers in steps as shipped (`answers_in_steps`: float32 round(s n p)). They are
    public, so how they are rounded is free; the references take them as given and check the
    arithmetic on the private counts."""
    return np.asarray(selection.answers_in_steps(jnp.asarray(current), n, s)).tolist()


def _ref_rule(rule: str, counts, current, n: int, workload) -> list[int]:
    s = 32 if rule == "l1" else 64
    if rule == "l1":  # the public rescale of a marginal summing above 2, in float32 as shipped
        m = np.asarray(selection.l1_answers_in_steps(jnp.asarray(current), n, s, workload)).tolist()
    else:
        m = _public_steps(current, n, s)
    errors = [abs(s * int(c) - int(mi)) for c, mi in zip(counts, m, strict=True)]
    if rule == "query":
        return errors
    out = []
    for start, cells in zip(workload.offsets, workload.cells, strict=True):
        block = errors[start : start + cells]
        out.append(sum(block) if rule == "l1" else max(block))
    return out


# --- the rules, RAP++ and FEM ------------------------------------------------------------------------


def _rule_steps(rule: str, counts, current, n, workload) -> np.ndarray:
    obj = {"max": MaxError(), "l1": L1Error(), "query": QueryError()}[rule]
    return np.asarray(obj.grid_scores(jnp.asarray(counts, jnp.int32), jnp.asarray(current), n, workload))


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("relation", ["replace-one", "add-remove"])
@pytest.mark.parametrize("rule", ["max", "l1", "query"])
def test_rule_scores_are_exact_and_move_by_at_most_grid_steps(rule, relation, n):
    rng = np.random.default_rng([len(rule), len(relation), n])
    neighbour_of = _replace_one if relation == "replace-one" else _add_one
    worst = 0
    for trial in range(20):
        counts = _random_counts(rng, WORKLOAD, n)
        current = _current_near(rng, counts, n, WORKLOAD, 10.0 ** rng.uniform(-8, -1))
        if trial == 0 and rule == "l1":  # public answers summing to 2 per marginal: the L1 bound's edge
            current = np.clip(current * 2.0, 0.0, 1.0).astype(np.float32)
        other = neighbour_of(rng, counts, WORKLOAD)
        a = _rule_steps(rule, counts, current, n, WORKLOAD)
        b = _rule_steps(rule, other, current, n, WORKLOAD)
        assert a.dtype == np.int32
        assert a.tolist() == _ref_rule(rule, counts, current, n, WORKLOAD)
        assert b.tolist() == _ref_rule(rule, other, current, n, WORKLOAD)
        worst = max(worst, int(np.abs(a.astype(np.int64) - b).max()))
    assert worst <= STEPS


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("rule", ["max", "l1", "query"])
def test_rule_scores_reach_but_never_exceed_grid_steps_on_adversarial_neighbours(rule, n):
    """Public answers exactly on the grid (errors 0): replacing a record moves a maximum or a
    single cell by exactly s = 64, and an L1 error by 2 s = 64 (one cell loses, one gains)."""
    s = 32 if rule == "l1" else 64
    counts = np.concatenate([np.full(c, n // c) for c in WORKLOAD.cells]).astype(np.int64)
    for start, cells in zip(WORKLOAD.offsets, WORKLOAD.cells, strict=True):
        counts[start] += n - counts[start : start + cells].sum()
    # current = c / n in float32 is not exactly on the grid; a rule reads answers through
    # answers_in_steps, so pick p with round(s n p) = s c exactly (the nearest float32 works)
    current = (counts / n).astype(np.float32)
    assert _public_steps(current, n, s) == (s * counts).tolist()
    other = counts.copy()
    for start in WORKLOAD.offsets:
        other[start] -= 1
        other[start + 1] += 1
    a = _rule_steps(rule, counts, current, n, WORKLOAD).astype(np.int64)
    b = _rule_steps(rule, other, current, n, WORKLOAD).astype(np.int64)
    assert np.abs(a - b).max() == STEPS
    assert b.tolist() == _ref_rule(rule, other, current, n, WORKLOAD)


@pytest.mark.parametrize("n", NS)
def test_rap_plus_and_fem_scores_are_the_rule_helpers_and_move_by_at_most_grid_steps(n):
    """RAP++ scores by `max_cell_error_steps` / `cell_error_steps` with 64 steps per count (checked
    above); FEM by +-(64 c - m): exact and within GRID_STEPS, at most."""
    classes = rap_plus.default_classes(MIXED_DOMAIN, jax.random.key(0))
    for rule in (c.select for c in classes):
        assert isinstance(rule, selection.MaxError | selection.QueryError) and rule.top_k
        assert selection.steps_per_count(rule.unit_sensitivity) == STEPS == selection.GRID_STEPS_PER_COUNT
    rng = np.random.default_rng(7)
    for _ in range(20):
        counts = _random_counts(rng, WORKLOAD, n)
        current = _current_near(rng, counts, n, WORKLOAD, 1e-4)
        m = selection.answers_in_steps(jnp.asarray(current), n, STEPS)
        other = _replace_one(rng, counts, WORKLOAD)
        a = np.asarray(signed_steps(jnp.asarray(counts, jnp.int32), m), np.int64)
        b = np.asarray(signed_steps(jnp.asarray(other, jnp.int32), m), np.int64)
        ref = [STEPS * int(c) - int(x) for c, x in zip(counts, _public_steps(current, n, STEPS), strict=True)]
        assert a.tolist() == ref + [-r for r in ref]
        assert np.abs(a - b).max() <= STEPS


def test_the_float32_path_exceeded_its_allowance_at_large_n():
    """Negative control: the float score the rules used before (fractions c / n in float32,
    `max_cell_errors`, then `noise._quantised_gaps` at sensitivity 1/n), evaluated op by op as
    written (each float32 operation rounded: what jax does outside jit, and what a backend that
    does not fuse the division into the subtraction computes), moves by up to 77 steps, more
    than its GRID_STEPS + 2 = 66 allowance, between replace-one neighbours at n = 10^7 (below the
    factories' 2^24 limit): c / n rounds to multiples of 2^-24 ~ 0.6 / n there. (Under jit on
    CPU, XLA fuses c / n - p and the excess did not show in our trials: whether the float path
    kept its claim depended on the compiler.) The integer scores of the same pairs move by
    GRID_STEPS at most."""
    n, workload = 10_000_000, all_kway((2,), 1)  # one 2-cell marginal: fractions in [0.5, 1)
    sensitivity = 1.0 / n
    current = jnp.asarray([0.701, 0.299], jnp.float32)

    def old_steps(counts):
        scores = selection.max_cell_errors(jnp.asarray(counts, jnp.int32) / n, current, workload)
        # a fixed candidate at the clip makes the best constant: quantised = 2^23 - gap
        gaps, _ = noise._quantised_gaps(jnp.append(scores, 1.0), sensitivity, None)
        return 2**23 - np.asarray(gaps[:-1], np.int64)

    moves, new_moves = [], []
    for shift in range(8):
        counts = np.asarray([7_000_000 + shift, 3_000_000 - shift])
        other = counts + np.asarray([1, -1])  # one record moves from cell 1 to cell 0
        moves.append(int(np.abs(old_steps(counts) - old_steps(other)).max()))
        a = _rule_steps("max", counts, np.asarray(current), n, workload).astype(np.int64)
        b = _rule_steps("max", other, np.asarray(current), n, workload).astype(np.int64)
        new_moves.append(int(np.abs(a - b).max()))
    assert max(moves) > STEPS + 2, moves
    assert max(new_moves) <= STEPS


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("last", [1, 37, MAX_EXACT_ROUNDS - 1])
def test_dualquery_scores_are_exact_and_move_by_at_most_grid_steps(last, n):
    """DualQuery's floor(+-64 n u / t_b), u = t c / n - S: equal to Python integers (16-bit-digit
    uint32 arithmetic, no overflow up to n = 2^24 - 1 and t_b = 2^15 - 1), moving by at most
    GRID_STEPS when one count moves by 1, and by exactly GRID_STEPS when t = t_b."""
    rng = np.random.default_rng([n, last])
    worst = 0
    for trial in range(10):
        t = last if trial == 0 else int(rng.integers(0, last + 1))
        counts = rng.integers(0, n + 1, 64)
        counts[:2] = (0, n)
        sums = rng.integers(0, t + 1, 64).astype(np.float32)
        sums[2:4] = (0, t)
        other = np.clip(counts + rng.choice([-1, 1], 64), 0, n)
        got = [
            np.asarray(
                dualquery_grid_scores(jnp.asarray(c, jnp.int32), jnp.int32(t), jnp.asarray(sums), n, last)
            )
            for c in (counts, other)
        ]
        for c, g in zip((counts, other), got, strict=True):
            ref = [(64 * (t * int(ci) - n * int(si))) // last for ci, si in zip(c, sums, strict=True)]
            ref += [(64 * (n * int(si) - t * int(ci))) // last for ci, si in zip(c, sums, strict=True)]
            assert g.tolist() == ref
        move = int(np.abs(got[0].astype(np.int64) - got[1]).max())
        assert move <= STEPS
        if t == last:
            assert move == STEPS
        worst = max(worst, move)
    assert worst == STEPS


# --- AIM ---------------------------------------------------------------------------------------------


def _ref_aim(counts, model, candidates, weights, mask, sigma, ell) -> list[int]:
    """AIM's exact scores Q_r (unshifted) in Python integers and Fractions."""
    k, bits = aim_scores.COUNT_STEPS, aim_scores.WEIGHT_BITS
    w_max = Fraction(max(float(w) for w, ok in zip(weights, mask, strict=True) if ok))
    quality = []
    for i, (start, cells) in enumerate(zip(candidates.offsets, candidates.cells, strict=True)):
        mu = [min(max(float(x), 0.0), 2.0**32) for x in model[start : start + cells]]
        assert math.fsum(mu) <= 2.0**32  # the shipped rescale never triggers in these tests
        e = sum(
            abs(k * int(c) - round(Fraction(x) * k))
            for c, x in zip(counts[start : start + cells], mu, strict=True)
        )
        p = round(Fraction(k * aim_scores.SQRT_2_OVER_PI * sigma * cells))
        w = math.floor(Fraction(float(weights[i])) * 2**bits / w_max) if mask[i] else 0
        quality.append((w * (e - p)) // (2**bits * k * int(ell) // STEPS))
    return quality


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("relation", ["replace-one", "add-remove"])
def test_aim_scores_are_exact_and_move_by_at_most_grid_steps(relation, n):
    """grid_quality_steps equals the Python-integer reference and moves by at most GRID_STEPS
    (random models, weights, masks and sigmas; L = 2 replace-one, 1 add-remove); the int32 scores
    handed to the sampler are those minus the best eligible one (a shift: the same law)."""
    rng = np.random.default_rng(3 if relation == "replace-one" else 4)
    ell = 2.0 if relation == "replace-one" else 1.0
    neighbour_of = _replace_one if relation == "replace-one" else _add_one
    weights = np.asarray(aim_weights(all_kway((3, 4, 2, 2), 2), CANDIDATES), np.float64)
    worst = 0
    for trial in range(10):
        counts = _random_counts(rng, CANDIDATES, n)
        model = counts + rng.normal(0.0, 10.0 ** rng.uniform(0, 4), counts.shape)
        mask = rng.random(len(CANDIDATES)) < 0.7
        mask[rng.integers(len(CANDIDATES))] = True
        w = weights * rng.uniform(0.5, 2.0, weights.shape) if trial % 2 else weights
        sigma = float(10.0 ** rng.uniform(0, 3))
        other = neighbour_of(rng, counts, CANDIDATES)
        args = (CANDIDATES, w, mask, sigma, ell)
        a = aim_scores.grid_quality_steps(counts, model, *args)
        b = aim_scores.grid_quality_steps(other, model, *args)
        assert a.tolist() == _ref_aim(counts, model, *args)
        assert b.tolist() == _ref_aim(other, model, *args)
        worst = max(worst, int(np.abs(a - b)[mask].max()))
        shifted = aim_scores.grid_quality_scores(counts, model, *args)
        assert shifted.dtype == np.int32
        assert shifted[mask].tolist() == (a[mask] - a[mask].max()).tolist()
    assert worst <= STEPS


@pytest.mark.parametrize("relation", ["replace-one", "add-remove"])
def test_aim_scores_reach_grid_steps_on_adversarial_neighbours(relation):
    """Model = truth (every error 0 on D) and equal weights, sigma = 0: a neighbour moves the
    scores of the marginals it touches by exactly GRID_STEPS (the bound is tight), n = 2^24 - 1."""
    n, ell = GRID_MAX_RECORDS, 2.0 if relation == "replace-one" else 1.0
    rng = np.random.default_rng(6)
    counts = _random_counts(rng, CANDIDATES, n)
    model = counts.astype(np.float64)
    other = counts.copy()
    for start in CANDIDATES.offsets:
        other[start + 1] += 1
        if relation == "replace-one":
            other[start] -= 1
    args = (CANDIDATES, np.ones(len(CANDIDATES)), np.ones(len(CANDIDATES), bool), 0.0, ell)
    a = aim_scores.grid_quality_steps(counts, model, *args)
    b = aim_scores.grid_quality_steps(other, model, *args)
    assert not a.any()
    assert b.tolist() == _ref_aim(other, model, *args) == [STEPS] * len(CANDIDATES)


# --- the sampler on grid scores ------------------------------------------------------------------------

GRID_SCORES = np.array([0, 64, 128, 192, 96, 160, 576, 32, 161, 191, -256, 172], np.int32)
GRID_MASK = np.array([True, True, True, True, True, True, False, True, True, True, True, True])


def _grid_law(scores, mask, scale, sensitivity):
    numerator, denominator = noise._selection_rate(scale, sensitivity, STEPS)
    rate = numerator / denominator
    ideal = sensitivity / (scale * STEPS)
    assert ideal * (1 - 2.0**-11) <= rate <= ideal
    gaps = scores[mask].max() - scores.astype(np.int64)
    return _exp_law(gaps, mask, rate)


@pytest.mark.parametrize("k", [1, 2])
def test_grid_sampler_matches_the_exact_law_and_is_deterministic(k):
    """noise.grid_exponential / grid_top_k: 50,000 first picks follow exp(rate steps) / Z with
    rate = epsilon / (2 GRID_STEPS) (chi-square; the law at scale x 0.8 rejected, miss < 1e-12);
    the masked candidate is never chosen; the same key gives the same picks.
    False-failure rate: 1e-4."""
    scale, sensitivity = 1.0, 1.0
    mask, scores = jnp.asarray(GRID_MASK), Sensitive(jnp.asarray(GRID_SCORES))

    def one(key):
        if k == 1:
            return noise.grid_exponential(key, scores, scale=scale, sensitivity=sensitivity, mask=mask)[0][
                None
            ]
        return noise.grid_top_k(key, scores, k=k, scale=scale, sensitivity=sensitivity, mask=mask)[0]

    keys = jax.random.split(jax.random.key(8100 + k), 50_000)
    picks = np.asarray(jax.jit(jax.vmap(one))(keys))
    assert not np.any(picks == 6)
    if k == 2:
        assert np.all(picks[:, 0] != picks[:, 1])
    counts = _select_counts(picks[:, 0], GRID_SCORES.size)
    law = _grid_law(GRID_SCORES, GRID_MASK, scale, sensitivity)
    _check_selection(counts, law, _grid_law(GRID_SCORES, GRID_MASK, 0.8 * scale, sensitivity))
    same_keys = jax.random.split(jax.random.key(8100 + k), 50_000)[:100]  # fresh, equal keys
    again = np.asarray(jax.jit(jax.vmap(one))(same_keys))
    np.testing.assert_array_equal(again, picks[:100])


def test_grid_entry_points_refuse_float_scores_and_clip_safely():
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="int32 scores in grid steps"):
        noise.grid_exponential(key, Sensitive(jnp.asarray([0.0, 1.0])), scale=1.0, sensitivity=1.0)
    with pytest.raises(TypeError, match="int32 scores in grid steps"):
        noise.select_top_k_grid(
            key, Sensitive(jnp.asarray([0.0, 1.0])), k=1, scale=1.0, sensitivity=1.0, noise="discrete"
        )
    extreme = jnp.asarray([-(2**31), 2**31 - 1, 0], jnp.int32)  # gaps must not overflow
    gaps, _ = noise._grid_gaps(extreme, None)
    assert np.asarray(gaps).tolist() == [2**30, 0, 2**30]
    choice, charge = noise.grid_exponential(key, Sensitive(extreme), scale=1.0, sensitivity=1.0)
    assert int(choice) == 1 and int(charge.primitive) == noise.PRIMITIVES.index("discrete_exponential")


@pytree_dataclass
class _Mean(Rule):
    def scores(self, true_answers, current, workload):
        return selection.l1_errors(true_answers, current, workload)


@pytree_dataclass
class _MaxSquared(MaxError):
    def scores(self, true_answers, current, workload):  # overrides the float score only
        return selection.max_cell_errors(true_answers, current, workload) ** 2


def test_which_rules_are_exact_and_the_range_is_enforced():
    assert MaxError().exact and L1Error().exact and QueryError().exact
    assert not _Mean().exact  # a rule of one's own: float path with its allowance
    assert not _MaxSquared().exact  # overriding scores alone never reuses MaxError's grid scores
    budget = SelectionBudget(0.1, 0.1, 1)
    MaxError().calibrate(budget, GRID_MAX_RECORDS, "discrete")
    with pytest.raises(ValueError, match="exact selection scores need"):
        MaxError().calibrate(budget, GRID_MAX_RECORDS + 1, "discrete")
    _Mean().calibrate(budget, GRID_MAX_RECORDS + 1, "discrete")  # float path: no int32 range
    with pytest.raises(ValueError, match="whole number"):
        selection.steps_per_count(3.0)


def test_rule_selection_is_deterministic_under_a_fixed_key():
    rng = np.random.default_rng(5)
    n = 1_000_000
    counts = _random_counts(rng, WORKLOAD, n)
    current = jnp.asarray(_current_near(rng, counts, n, WORKLOAD, 1e-3))
    eligible = jnp.ones(len(WORKLOAD), bool)
    for rule in (MaxError(k=2), L1Error()):
        calibrated, _ = rule.calibrate(SelectionBudget(0.5, 0.5, 1), n, "discrete")
        picks = [
            np.asarray(
                calibrated(
                    jax.random.key(9),
                    Sensitive(jnp.asarray(counts, jnp.int32)),
                    n,
                    current,
                    WORKLOAD,
                    eligible,
                    jnp.int32(0),
                )[0]
            )
            for _ in range(2)
        ]
        np.testing.assert_array_equal(*picks)


def test_dualquery_refuses_rounds_beyond_the_exact_range():
    from jaxdp.mechanisms.dualquery import dualquery

    from ..mechanisms.conftest import tiny_dataset

    data = tiny_dataset(n=50)
    with pytest.raises(ValueError, match="rounds must be <= 32768"):
        dualquery(data, all_kway(data.domain.sizes, 1), rounds=MAX_EXACT_ROUNDS + 1, rho=0.1)
