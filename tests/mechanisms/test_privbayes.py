"""PrivBayes: the network, theta-usefulness, the exact score and its sensitivity, the fixed plan,
refusals."""

import itertools
import math

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import loop
from jaxdp.keys import round_key
from jaxdp.queries import all_kway
from jaxdp.selection import PrivBayesSelection
from jaxdp.selection.privbayes import dependence
from jaxdp.types import Neighboring

from ._host import assert_replays, fits_of, record_selections, revealed_steps, synth_on_adult
from .conftest import tiny_dataset

pytest.importorskip("mbi")

FAST = {"iters": 50, "final_iters": 50}


def _privbayes(data=None, **kw):
    data = data or tiny_dataset()
    return jaxdp.privbayes(
        data, all_kway(data.domain.sizes, 2), **{"epsilon": 1.0, "delta": 1e-6, **FAST, **kw}
    )


def _chain(n: int = 3000, seed: int = 0, sizes=(4, 3, 4, 2, 5, 3)) -> jaxdp.Dataset:
    """Attributes that each copy the previous one's value (mod their size) 80% of the time."""
    rng = np.random.default_rng(seed)
    columns = [rng.integers(0, sizes[0], n)]
    for size in sizes[1:]:
        keep = rng.random(n) < 0.8
        columns.append(np.where(keep, columns[-1] % size, rng.integers(0, size, n)))
    domain = jaxdp.Domain.from_sizes({f"x{i}": s for i, s in enumerate(sizes)})
    return jaxdp.Dataset.from_codes(domain, np.stack(columns, 1))


def _families(state) -> list[tuple[int, ...]]:
    return [m.clique for m in state.measurements]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("degree", [None, 1, 2])
def test_the_families_form_a_network_within_the_usefulness_bound(seed, degree):
    """Round 0 places one attribute; every later round places exactly one more, whose parents are
    all placed and form a maximal set within the bound (and the degree)."""
    data = _chain()
    mechanism = _privbayes(data, degree=degree)
    state = loop.run(mechanism, jax.random.key(seed)).state
    families = _families(state)
    sizes = data.domain.sizes
    bound = mechanism.selection.bound
    assert len(families) == 6 and len(families[0]) == 1
    placed = set(families[0])
    for family in families[1:]:
        (child,) = set(family) - placed
        parents = set(family) - {child}
        assert parents <= placed
        assert math.prod(sizes[a] for a in family) <= bound
        if degree is not None:
            assert len(parents) <= degree
        grow = [
            a for a in placed - parents if sizes[child] * math.prod(sizes[b] for b in parents | {a}) <= bound
        ]
        assert not grow or (degree is not None and len(parents) == degree), (family, grow)
        placed.add(child)
    assert placed == set(range(6))


def test_the_first_attribute_is_drawn_at_random():
    firsts = set()
    for seed in range(12):
        state = loop.run(_privbayes(_chain()), jax.random.key(seed)).state
        firsts.add(_families(state)[0][0])
    assert len(firsts) >= 3  # 6 equally likely: all 12 draws in 2 or fewer has probability < 1e-4


def test_dependence_is_twice_n_squared_times_the_papers_r():
    """T against R = 1/2 ||Pr[X, Pi] - Pr[X] Pr[Pi]||_1 computed in float64 from fractions."""
    rng = np.random.default_rng(0)
    for shape, axis in [((3, 4), 0), ((3, 4), 1), ((2, 3, 4), 1), ((5,), 0)]:
        joint = rng.integers(0, 50, shape)
        n = int(joint.sum())
        p = joint / n
        child = p.sum(axis=tuple(a for a in range(p.ndim) if a != axis), keepdims=True)
        parents = p.sum(axis=axis, keepdims=True)
        r = 0.5 * np.abs(p - child * parents).sum()
        assert dependence(joint, axis, n) == pytest.approx(2 * n * n * r, rel=1e-12)


def _tables(n: int, cells: int) -> np.ndarray:
    """(count, cells) int64: every table of n records over `cells` cells (stars and bars)."""
    bars = itertools.combinations(range(n + cells - 1), cells - 1)
    return np.array([np.diff((-1, *cuts, n + cells - 1)) - 1 for cuts in bars], np.int64)


def largest_move(shape: tuple[int, ...], axis: int, n: int) -> int:
    """max |T(D) - T(D')| over every table D of n records on `shape` (X on `axis`, the other axes
    the parents) and every D' that replaces one of its records, T through `dependence` (one call
    per table; each neighbour looked up among the tables by its code)."""
    tables = _tables(n, math.prod(shape))
    scores = np.array([dependence(table.reshape(shape), axis, n) for table in tables])
    weights = (n + 1) ** np.arange(tables.shape[1], dtype=np.int64)
    codes = tables @ weights
    order = np.argsort(codes)
    largest = 0
    for source, target in itertools.permutations(range(tables.shape[1]), 2):
        has = tables[:, source] > 0
        moved = codes[has] - weights[source] + weights[target]
        neighbour = order[np.searchsorted(codes[order], moved)]
        assert (codes[neighbour] == moved).all()
        largest = max(largest, int(np.abs(scores[neighbour] - scores[has]).max(initial=0)))
    return largest


def proved_largest_move(values: int, cells: int, n: int) -> int:
    """The largest move of T over tables of n records, X of `values` values and Pi of `cells`
    cells (`jaxdp.selection.privbayes`'s docstring): 6n - 2 - 2 ceil(2 sqrt n) from 3 and 3 on."""
    if min(values, cells) == 1:
        return 0
    if min(values, cells) == 2:
        return 4 * n - 4
    return 6 * n - 2 - 2 * (math.isqrt(4 * n - 1) + 1)  # ceil(2 sqrt n), exactly


# (shape, X's axis) -> the largest |T(D) - T(D')| over every table of n = 1, 2, ... records and
# every replacement of one record (exhaustive, `largest_move`).
LARGEST_MOVES = {
    ((4,), 0): (0, 0, 0, 0, 0, 0),  # a family without parents
    ((2, 2), 0): (0, 4, 8, 12, 16, 20, 24, 28, 32, 36),
    ((2, 3), 0): (0, 4, 8, 12, 16, 20, 24, 28),
    ((3, 2), 0): (0, 4, 8, 12, 16, 20, 24, 28),
    ((3, 3), 0): (0, 4, 8, 14, 18, 24, 28, 34, 40),
    ((3, 4), 0): (0, 4, 8, 14, 18, 24),
    ((4, 4), 0): (0, 4, 8, 14, 18),
    ((2, 3, 2), 1): (0, 4, 8, 14, 18),  # X of 3 values, two binary parents: Pi of 4 cells
    ((2, 2, 3), 0): (0, 4, 8, 12, 16),  # X binary, Pi of 6 cells
}


def _bound_rule(n: int) -> PrivBayesSelection:
    return PrivBayesSelection().bind(
        all_kway((3, 3), 1),
        relation=Neighboring.REPLACE_ONE,
        n_records=n,
        rounds=None,
        noise="discrete",
        rho_budget=1.0,
    )


@pytest.mark.parametrize(
    ("shape", "axis"), list(LARGEST_MOVES), ids=[f"{'x'.join(map(str, s))}-X{a}" for s, a in LARGEST_MOVES]
)
def test_the_largest_move_of_dependence_is_exact_over_every_small_table(shape, axis):
    """Every table of n records and every replacement of one record (exhaustive): the largest
    |T(D) - T(D')| is pinned, is the proved one (4n - 4 when X or Pi has 2 values, 6n - 2 -
    2 ceil(2 sqrt n) from 3 and 3 on), and stays under 6n - 6 < 6n + 4, the score sensitivity a
    bound rule declares for that n (the paper's bound, slack by 2 ceil(2 sqrt n) + 6)."""
    values = shape[axis]
    cells = math.prod(shape) // values
    for n, pinned in enumerate(LARGEST_MOVES[shape, axis], start=1):
        assert largest_move(shape, axis, n) == pinned, n
        assert pinned == proved_largest_move(values, cells, n), n
        assert pinned <= 6 * n - 6 < _bound_rule(n).score_sensitivity == 6 * n + 4


def test_the_proved_largest_move_is_reached_for_every_n():
    """The docstring's neighbours reach 6n - 2 - 2m, m = ceil(2 sqrt n) = min{A + B : AB >= n}:
    the record alone in its cell (x1, p1), A - 1 more records in row x1 (at p3), B - 1 more in
    column p1 (at x3), the rest at (x3, p3), row x2 and column p2 empty; it moves to (x2, p2).
    Through `dependence`, on 3 x 3 tables and on 4 x 5 ones (the spare values empty), up to large n."""
    for n in [*range(1, 301), 1000, 10**4, 10**6]:
        m = math.isqrt(4 * n - 1) + 1
        assert m == min(a + -(-n // a) for a in range(1, min(n, 2000) + 1))  # ceil(2 sqrt n)
        a, b = m // 2, m - m // 2  # ab = floor(m^2 / 4) >= n
        before = np.array([[1, 0, a - 1], [0, 0, 0], [b - 1, 0, n + 1 - a - b]])
        after = before.copy()
        after[0, 0], after[1, 1] = 0, 1
        for table, moved in [
            (before, after),
            (np.pad(before, ((0, 1), (0, 2))), np.pad(after, ((0, 1), (0, 2)))),
        ]:
            assert dependence(moved, 0, n) - dependence(table, 0, n) == proved_largest_move(3, 3, n), n
            assert dependence(table.T, 1, n) == dependence(table, 0, n)  # X on either axis


def test_a_round_scores_each_allowed_family_by_its_dependence(monkeypatch):
    """Exactness against a brute-force reference: round 1's grid scores are floor(T 64 / (6n +
    4)) of each allowed family, over the families the rule allows only."""
    n = 5000
    data = _chain(n=n)
    mechanism = _privbayes(data)
    state = mechanism.init(jax.random.key(0))
    state, _ = mechanism.step(state, round_key(jax.random.key(0), 0))
    calls = record_selections(monkeypatch)
    mechanism.step(state, round_key(jax.random.key(0), 1))
    ((value, kwargs),) = calls
    mask = np.asarray(kwargs["mask"])
    assert kwargs["sensitivity"] == 6 * n + 4
    (first,) = _families(state)[0]
    rule = mechanism.selection
    allowed = [rule.candidates.cliques[i] for i in np.flatnonzero(mask)]
    # a child outside V = {first}, with `first` as its parent where the bound admits it
    assert sum(len(c) == 2 for c in allowed) >= 3 and all(len(c) == 1 or first in c for c in allowed)
    assert all(c != (first,) for c in allowed)
    steps = np.rint(revealed_steps(value)[mask]).astype(np.int64)
    reference = []
    for clique in allowed:
        joint = np.zeros([data.domain.sizes[a] for a in clique], np.int64)
        np.add.at(joint, tuple(data.codes[:, a] for a in clique), 1)
        (child,) = set(clique) - {first} or set(clique)
        reference.append(dependence(joint, clique.index(child), n) * 64 // (6 * n + 4))
    reference = np.asarray(reference)
    np.testing.assert_array_equal(steps - steps.max(), reference - reference.max())


def test_a_strong_dependence_is_found():
    """At a large budget every attribute's parents include its chain neighbour (negative
    control: on a table of independent columns some attribute's do not, for some key)."""
    data = _chain(n=20_000)
    mechanism = _privbayes(data, epsilon=20.0, degree=1)
    state = loop.run(mechanism, jax.random.key(0)).state
    pairs = sorted(c for c in _families(state) if len(c) == 2)
    assert pairs == [(i, i + 1) for i in range(5)]
    rng = np.random.default_rng(1)
    independent = jaxdp.Dataset.from_codes(
        data.domain, np.stack([rng.integers(0, s, 20_000) for s in data.domain.sizes], 1)
    )
    chains = [
        sorted(
            c
            for c in _families(
                loop.run(_privbayes(independent, epsilon=20.0, degree=1), jax.random.key(s)).state
            )
            if len(c) == 2
        )
        for s in range(3)
    ]
    assert any(c != [(i, i + 1) for i in range(5)] for c in chains)


def test_the_plan_is_fixed_before_the_run_and_followed():
    mechanism = _privbayes(_chain())
    plan = mechanism.plan
    assert [(c.label, c.times) for c in plan.charges] == [
        ("measure the first attribute", 1),
        ("select a family", 5),
        ("measure a family", 5),
    ]
    select = plan.charges[1]
    assert (
        select.rho == pytest.approx(0.3 * plan.rho_budget, rel=1e-6) and select.rho <= 0.3 * plan.rho_budget
    )
    measure = plan.charges[0].rho + plan.charges[2].rho
    assert measure == pytest.approx(0.7 * plan.rho_budget, rel=1e-6)
    result = loop.run(mechanism, jax.random.key(3))
    realised = mechanism.realised_plan(result.state)
    planned = sorted((c.primitive, c.sensitivity, c.scale) for c in plan.charges for _ in range(c.times))
    assert sorted((c.primitive, c.sensitivity, c.scale) for c in realised.charges) == planned
    assert result.state.rounds_done == 6 and mechanism.finished(result.state)


def test_the_model_is_fitted_after_the_first_round_and_the_last_only(monkeypatch):
    assert fits_of(_privbayes(_chain()), monkeypatch) == [1, 6]


def test_refusals():
    data = tiny_dataset()
    workload = all_kway(data.domain.sizes, 2)
    with pytest.raises(ValueError, match="do not give rounds"):
        jaxdp.privbayes(data, workload, epsilon=1.0, delta=1e-6, rounds=3)
    one = jaxdp.Dataset.from_codes(jaxdp.Domain.from_sizes({"a": 3}), np.zeros((10, 1), np.int32))
    with pytest.raises(ValueError, match="at least 2"):
        jaxdp.privbayes(one, all_kway(one.domain.sizes, 1), epsilon=1.0, delta=1e-6)
    with pytest.raises(ValueError, match="beta"):
        jaxdp.privbayes(data, workload, epsilon=1.0, delta=1e-6, beta=1.0)
    with pytest.raises(ValueError, match="theta"):
        jaxdp.privbayes(data, workload, epsilon=1.0, delta=1e-6, theta=0.0)
    with pytest.raises(ValueError, match="supports relation replace-one, not add-remove"):
        jaxdp.api.build("privbayes", data, workload, epsilon=1.0, delta=1e-6, relation="add-remove")
    mechanism = _privbayes()
    with pytest.raises(ValueError, match="error bounds are AIM's"):
        mechanism.error_bounds(loop.run(mechanism, jax.random.key(0)).state)
    wide = jaxdp.Dataset.from_codes(
        jaxdp.Domain.from_sizes({f"b{i}": 2 for i in range(24)}), np.zeros((200_000, 24), np.int32)
    )
    with pytest.raises(ValueError, match="give degree"):
        jaxdp.privbayes(wide, all_kway(wide.domain.sizes, 1), epsilon=10.0, delta=1e-6)


def test_replay_is_bit_identical():
    assert_replays(lambda: _privbayes(_chain()))


def test_the_command_line_runs_privbayes(tmp_path):
    report, rows = synth_on_adult(tmp_path, "privbayes")
    assert report["mechanism"] == "privbayes" and report["relation"] == "replace-one"
    assert report["rho_spent"] <= report["rho_budget"]
    assert len(report["ledger"]) == 1 + 2 * 12  # the first attribute, then 12 families
    assert rows == 48_842
