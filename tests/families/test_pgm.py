"""Graphical-model family: the estimators (mbi's mirror descent in one compiled program whatever the
tree, and in one per tree over dense tables), host junction-tree calibration, merged repeat
measurements, padded stratified sampling (the parts that keep AIM from compiling per model or per
shape)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp.families import pgm, pgm_marginals, pgm_sampling
from jaxdp.families._sampling import systematic, weyl_step
from tests.conftest import programs_built

mbi = pgm.require_mbi()


def _brute_force_joint(model: pgm.Model) -> np.ndarray:
    """exp(sum of the model's log-potentials) over the whole domain, normalised."""
    sizes = model.sizes
    log_joint = np.zeros(sizes)
    for clique, potential in zip(model.cliques, model.potentials, strict=True):
        shape = [sizes[a] if a in clique else 1 for a in range(len(sizes))]
        log_joint = log_joint + np.asarray(potential, np.float64).reshape(shape)
    joint = np.exp(log_joint - log_joint.max())
    return joint / joint.sum()


def _from_mbi(model) -> pgm.Model:
    """An mbi MarkovRandomField as a `pgm.Model` (the same potentials)."""
    cliques = tuple(tuple(c) for c in model.potentials.cliques)
    potentials = tuple(np.asarray(model.potentials[c].values) for c in cliques)
    return pgm.Model(tuple(model.domain.shape), cliques, potentials, float(model.total))


@pytest.mark.parametrize("joint", [False, True], ids=["tree", "joint"])
@pytest.mark.parametrize(
    "pairs",
    [
        ((0, 1), (1, 2), (3, 4)),  # a forest: two junction trees
        ((0, 1), (1, 2), (2, 3), (0, 3), (3, 4)),  # a cycle: triangulated, 3-attribute nodes
        ((0, 1), (1, 2), (2, 3), (3, 4)),  # a chain: 3-way marginals span up to 3 nodes
    ],
)
def test_calibrated_beliefs_equal_the_brute_force_joint(pairs, joint, monkeypatch):
    """Every node's belief and every 3-way marginal (across nodes and trees) equal sums of the
    brute-force joint, by inference over the tree and from the materialised joint."""
    monkeypatch.setattr(pgm_marginals, "JOINT_MAX_CELLS", 2**20 if joint else 0)
    sizes = (3, 4, 2, 5, 3)
    rng = np.random.default_rng(0)
    measurements = [pgm.Measurement((i,), rng.random(s) * 100, 2.0) for i, s in enumerate(sizes)]
    measurements += [pgm.Measurement(c, rng.random(math.prod(sizes[a] for a in c)) * 30, 2.0) for c in pairs]
    model = pgm.estimate(sizes, measurements, total=None, iters=50)
    marginals = pgm_marginals.ModelMarginals(model)
    assert (marginals._joint is not None) is joint
    joint = _brute_force_joint(model)
    everything = tuple(range(len(sizes)))
    for node in marginals.cliques:  # every junction-tree node's belief
        drop = tuple(a for a in everything if a not in node)
        np.testing.assert_allclose(marginals._beliefs[node], joint.sum(axis=drop), atol=1e-9)
    for size in (1, 2, 3, 4):  # marginals across nodes and trees, twice (messages are reused)
        for clique in [*itertools.combinations(everything, size)] * 2:
            drop = tuple(a for a in everything if a not in clique)
            marginal = marginals.marginal(clique)
            np.testing.assert_allclose(marginal, joint.sum(axis=drop).reshape(-1), atol=1e-9)
            assert not marginal.flags.writeable  # the second ask gets the first's table: shared


def test_merge_repeats_is_the_inverse_variance_average():
    a1, a2, b = np.array([1.0, 5.0]), np.array([3.0, 1.0]), np.array([2.0, 2.0, 2.0])
    merged = pgm.merge_repeats(
        [pgm.Measurement((1,), b, 1.0), pgm.Measurement((0,), a1, 1.0), pgm.Measurement((0,), a2, 2.0)]
    )
    assert [m.clique for m in merged] == [(0,), (1,)]
    np.testing.assert_allclose(merged[0].noisy, (a1 / 1.0 + a2 / 4.0) / (1.0 + 0.25))
    assert merged[0].sigma == pytest.approx(1.0 / math.sqrt(1.25))
    np.testing.assert_array_equal(merged[1].noisy, b)
    assert merged[1].sigma == 1.0


def test_merged_repeats_fit_the_model_the_repeats_fit():
    """pgm.estimate (repeats merged) and mbi on the raw list reach the same model."""
    sizes = (3, 4, 2)
    rng = np.random.default_rng(3)
    raw = [pgm.Measurement((i,), rng.random(s) * 100, 3.0) for i, s in enumerate(sizes)]
    raw += [pgm.Measurement((0, 1), rng.random(12) * 30, s) for s in (2.0, 5.0, 1.5)]
    raw += [pgm.Measurement((2,), rng.random(2) * 100, 4.0)]
    merged_model = pgm.estimate(sizes, raw, total=None, iters=500)
    linear = [mbi.LinearMeasurement(np.asarray(m.noisy, np.float32), m.clique, m.sigma) for m in raw]
    raw_model = mbi.estimation.MirrorDescent().estimate(pgm.mbi_domain(sizes), linear, iters=500)
    assert merged_model.total == pytest.approx(float(raw_model.total), rel=1e-6)
    np.testing.assert_allclose(
        pgm_marginals.ModelMarginals(merged_model).marginal((0, 1, 2)),
        pgm_marginals.ModelMarginals(_from_mbi(raw_model)).marginal((0, 1, 2)),
        atol=1e-4,
    )


# |count - m p| < 1 exactly; float32 CDFs may move a boundary point by a rounding error
ROUNDING = 1.0 + 1e-3


def test_padded_sampler_keeps_stratified_counts_and_real_categories():
    """Counts per (group, category) are m p rounded up or down (systematic sampling: a category
    whose CDF interval has length L = m p holds floor(L) or ceil(L) of the points (i + U) / m;
    i.i.d. draws would miss by ~sqrt(m p)), padded categories (p = 0) are never drawn, and an
    all-zero row is uniform over the real categories only. These hold for every key."""
    joint1 = np.array(
        [
            [0.2, 0.3, 0.0, 0.5, 0.0],
            [0.0, 0.0, 0.0, 0.0, 0.0],  # empty group: uniform over the 5 real categories
            [1.0, 1.0, 1.0, 1.0, 6.0],  # unnormalised
        ]
    )
    plan = [(0, (), np.array([[0.5, 0.25, 0.25]])), (1, (0,), joint1)]
    rows = 1003  # not a power of two: 21 padding rows
    for seed in range(3):
        codes = np.asarray(pgm_sampling.sample(jax.random.key(seed), plan, (3, 5), rows))
        assert codes.shape == (rows, 2) and codes[:, 0].max() < 3 and codes[:, 1].max() < 5
        np.testing.assert_array_less(
            np.abs(np.bincount(codes[:, 0], minlength=3) - rows * plan[0][2][0]), ROUNDING
        )
        for g, row in enumerate(joint1):
            members = codes[codes[:, 0] == g, 1]
            p = row / row.sum() if row.sum() > 0 else np.full(5, 0.2)
            np.testing.assert_array_less(
                np.abs(np.bincount(members, minlength=5) - len(members) * p), ROUNDING
            )


def test_the_sampler_spreads_categories_over_the_attributes_drawn_before():
    """C's parent is B alone, so the model makes C independent of A given B. Records drawn by
    `pgm_sampling.sample` keep that in their counts: within every (a, b) the count of each c is the
    (a, b) count times p(c | b) up to 4 records, because each group's systematic points go to its
    records in a Weyl order along the records sorted by the attributes drawn before (a golden-
    ratio Weyl sequence puts every run of consecutive points within a few of its share of each
    interval: 2-3 at most here). Negative control: the same points handed out in random order
    (no strata) miss by tens of records, as independent draws would (sqrt(m p))."""
    first = np.array([[0.1, 0.2, 0.3, 0.4]])
    second = np.array([[0.2, 0.5, 0.3], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4], [0.1, 0.1, 0.8]])
    third = np.array([[0.1, 0.2, 0.3, 0.25, 0.15], [0.5, 0.1, 0.1, 0.1, 0.2], [0.05, 0.05, 0.3, 0.3, 0.3]])
    plan = [(0, (), first), (1, (0,), second), (2, (1,), third)]
    rows = 20_000
    for seed in range(5):
        codes = np.asarray(pgm_sampling.sample(jax.random.key(seed), plan, (4, 3, 5), rows))
        counts = np.zeros((4, 3, 5))
        np.add.at(counts, tuple(codes.T), 1)
        expected = counts.sum(axis=2, keepdims=True) * third[None]
        assert np.abs(counts - expected).max() <= 4.0, seed
        unordered = systematic(
            jax.random.key(seed),
            jnp.asarray(third, jnp.float32),
            jnp.asarray(codes[:, 1], jnp.int32),
            jnp.int32(5),
            jnp.zeros((1, rows), jnp.int32),
            weyl_step(2),
        )
        control = np.zeros((4, 3, 5))
        np.add.at(control, (codes[:, 0], codes[:, 1], np.asarray(unordered)), 1)
        assert np.abs(control - expected).max() > 10.0, seed


@pytest.mark.parametrize("shared", [True, False], ids=["shared-shape", "own-shapes"])
def test_tracked_marginals_keep_their_counts_across_parent_groups(shared, monkeypatch):
    """D's parent is B; C is drawn before D but is not its parent, so the (C, D) marginal sums
    D's rounding over every B group (and, along the strata, every run of A). Tracking (C, D)
    draws D by `balanced`. Within a group a record takes only a category whose lag (expected
    count so far less count given, this record's share included) is positive, so every lag
    stays above -1, and as they sum to 0, below C - 1 for C categories of positive probability:
    each (B, D) count is within (expected - C + 1, expected + 1) per lane of 2^16 records (a
    proof; 1e-3 of slack for float32 sums). The (C, D) counts, balanced greedily and revisited,
    stay within 1 record of their expectation per lane (seen over 10 keys: at most 0.70 on one
    lane, 1.11 on two; 1.02 and 1.61 with no revisits). A category of probability 0 is never
    drawn, and the release has exactly the rows asked. Negative control: untracked, the strata (A
    first, 30 values) leave the (C, D) counts off by more than 5 records (seen 8-11). The same
    holds whether the balanced columns share one padded shape or each has its own (large
    releases)."""
    if not shared:
        monkeypatch.setattr(pgm_sampling, "_SHARED_BALANCED_WORK", 0)
    rng = np.random.default_rng(0)
    d = rng.dirichlet(np.ones(5), size=3)
    d[0, 2] = 0.0
    d /= d.sum(axis=1, keepdims=True)
    plan = [
        (0, (), rng.dirichlet(np.ones(30))[None]),
        (1, (0,), rng.dirichlet(np.ones(3), size=30)),
        (2, (), rng.dirichlet(np.ones(4))[None]),
        (3, (1,), d),
    ]
    sizes = (30, 3, 4, 5)
    positive = (d > 0).sum(axis=1)[:, None]

    def owed(codes):
        """expected - count per (B, D) and per (C, D) cell."""
        counts = np.zeros((3, 4, 5))
        np.add.at(counts, (codes[:, 1], codes[:, 2], codes[:, 3]), 1)
        expected = counts.sum(axis=2, keepdims=True) * d[:, None, :]
        return (expected - counts).sum(axis=1), (expected - counts).sum(axis=0)

    for rows, lanes in ((60_000, 1), (70_000, 2)):
        for seed in range(3):
            codes = np.asarray(
                pgm_sampling.sample(jax.random.key(seed), plan, sizes, rows, tracked=((2, 3),))
            )
            assert codes.shape == (rows, 4)
            assert not np.any((codes[:, 1] == 0) & (codes[:, 3] == 2))
            by_group, by_key = owed(codes)
            assert np.all(by_group > -lanes - 1e-3) and np.all(by_group < (positive - 1) * lanes + 1e-3)
            assert np.abs(by_key).max() <= lanes, (rows, seed)
    control = np.asarray(pgm_sampling.sample(jax.random.key(0), plan, sizes, 60_000))
    assert np.abs(owed(control)[1]).max() > 5.0


def test_balanced_release_replays_from_its_key():
    """Same key, same records; another key, other records; and a key of another generator gets
    a program of its own (the balanced columns are compiled ahead per key type)."""
    plan = [(0, (), np.array([[0.3, 0.7]])), (1, (), np.array([[0.2, 0.3, 0.5]])), (2, (0,), np.eye(2) + 0.5)]
    draw = [
        np.asarray(pgm_sampling.sample(jax.random.key(k), plan, (2, 3, 2), 999, tracked=((1, 2),)))
        for k in (4, 4, 5)
    ]
    np.testing.assert_array_equal(draw[0], draw[1])
    assert not np.array_equal(draw[0], draw[2])
    other = pgm_sampling.sample(jax.random.key(4, impl="rbg"), plan, (2, 3, 2), 999, tracked=((1, 2),))
    assert np.asarray(other).shape == (999, 3)


STRUCTURES = [
    ((0, 1), (1, 2), (3, 4)),  # a forest
    ((0, 1), (1, 2), (2, 3), (0, 3), (3, 4)),  # a cycle: triangulated, 3-attribute nodes
    ((0, 1, 2), (1, 2), (2, 3), (0, 3, 4)),  # nested cliques: a potential holds another's
    (),  # 1-way marginals only: every node alone, no messages
    ((0, 1), (1, 2), (1, 3), (1, 4)),  # a star: nodes pass on what they receive over one attribute
]


def _measurements(pairs, seed=0, sizes=(3, 4, 2, 5, 3)):
    rng = np.random.default_rng(seed)
    measurements = [pgm.Measurement((i,), rng.random(s) * 100, 2.0) for i, s in enumerate(sizes)]
    measurements += [
        pgm.Measurement(c, rng.random(math.prod(sizes[a] for a in c)) * 30, 1.5 + i)
        for i, c in enumerate(pairs)
    ]
    return measurements


def _mbi_fit(sizes, measurements, iters, warm_start=None):
    linear = [mbi.LinearMeasurement(np.asarray(m.noisy, np.float32), m.clique, m.sigma) for m in measurements]
    return mbi.estimation.MirrorDescent().estimate(
        pgm.mbi_domain(sizes), linear, iters=iters, warm_start=warm_start
    )


def _loss(model: pgm.Model, measurements) -> float:
    """mbi's objective: sum over measurements of ||total * marginal - y||^2 / (2 sigma^2)."""
    marginals = pgm_marginals.ModelMarginals(model)
    return sum(
        0.5 * np.sum((model.total * marginals.marginal(m.clique) - m.noisy) ** 2) / m.sigma**2
        for m in measurements
    )


def _use_program(monkeypatch, program: str) -> None:
    """Make `pgm.estimate` fit by the one program for every tree ("flat") or by each tree's own
    ("dense"), whatever the work."""
    from jaxdp.families import _dense_junction

    monkeypatch.setattr(_dense_junction, "worth_compiling", lambda *_: program == "dense")


@pytest.mark.parametrize("program", ["flat", "dense"])
@pytest.mark.parametrize("pairs", STRUCTURES)
def test_estimate_follows_mbis_mirror_descent(pairs, program, monkeypatch):
    """Both compiled estimators run mbi's MirrorDescent step for step: after the same number of
    iterations, from scratch and then warm-started, they reach the same loss (to 1e-5) and the
    same distribution (to 1e-3 of the largest cell; measured 2e-6 to 1e-5 with edges, 3e-4 with
    1-way marginals only, where cells heading to 0 make the float32 paths drift). Control: 5
    iterations instead of 200 leave the loss over 1e-3 higher and cells off by over 0.2."""
    _use_program(monkeypatch, program)
    sizes = (3, 4, 2, 5, 3)
    first = _measurements(pairs[:-1] if pairs else pairs, seed=1)
    measurements = _measurements(pairs, seed=2)
    ours = pgm.estimate(sizes, first, total=None, iters=100)
    theirs = _mbi_fit(sizes, first, 100)
    ours = pgm.estimate(sizes, measurements, total=None, iters=200, warm_start=ours)
    theirs = _from_mbi(_mbi_fit(sizes, measurements, 200, warm_start=theirs))
    assert ours.total == pytest.approx(theirs.total, rel=1e-9)
    assert _loss(ours, measurements) == pytest.approx(_loss(theirs, measurements), rel=1e-5)
    joint = _brute_force_joint(theirs)
    np.testing.assert_allclose(_brute_force_joint(ours), joint, atol=1e-3 * joint.max())
    if pairs:  # with 1-way marginals only, 5 iterations already reach the optimum
        early = _from_mbi(_mbi_fit(sizes, measurements, 5))
        assert _loss(early, measurements) > 1.001 * _loss(theirs, measurements)
        assert np.abs(_brute_force_joint(early) - joint).max() > 0.2 * joint.max()


def _flat_counts(tree, sizes, potentials, measured, theta, total):
    from jaxdp.families import _junction

    program, layout = _junction.build_program(tree, sizes, potentials, measured)
    padded = np.zeros(layout.length("potentials"), np.float32)
    padded[: theta.size] = theta
    counts = _junction._potential_counts(program, padded, np.float32(total), np.int32(program.sweeps))
    counts = np.asarray(_junction._measured(program, counts, layout.length("measured")))
    used = sum(math.prod(sizes[a] for a in c) for c in measured)
    np.testing.assert_array_equal(counts[used:-1], 0.0)  # padding; the spare
    return counts[:used]


def _dense_counts(tree, sizes, potentials, measured, theta, total):
    from jaxdp.families import _dense_junction

    dense = _dense_junction.dense_tree(tree, sizes, potentials, measured)
    tables = _dense_junction.potential_counts(dense, jnp.asarray(theta), np.float32(total))
    return np.asarray(_dense_junction.measured_counts(dense, tables))


@pytest.mark.parametrize("counts_of", [_flat_counts, _dense_counts], ids=["flat", "dense"])
@pytest.mark.parametrize("tables_kind", ["moderate", "extreme", "peaked"])
@pytest.mark.parametrize("pairs", STRUCTURES)
def test_tree_programs_compute_exact_marginals(pairs, tables_kind, counts_of):
    """Belief propagation by parallel sweeps over the padded index arrays (flat), and by two
    passes over each node's dense table (dense), gives every measured clique's marginal of the
    brute-force joint, for random potentials; also where whole separator values have mass far
    below float32's (slices of -300) and the tables sit at offsets of hundreds (the messages'
    stabilisers: finite, exact), and where the tables are peaked (entries of hundreds, as a long
    fit's on sharp data), so that a node's potential and its incoming messages peak at different
    cells: a log-sum-exp stabilised by the potential alone underflows there (every marginal off by
    up to 1, AIM's model on binary16 at mean L1 0.10 instead of 0.006)."""
    from jaxdp.families import _junction

    sizes = (3, 4, 2, 5, 3)
    measured = tuple(sorted({m.clique for m in _measurements(pairs)}))
    potentials = tuple(_junction.maximal(measured))
    tree, _ = mbi.junction_tree.make_junction_tree(pgm.mbi_domain(sizes), measured)
    rng = np.random.default_rng(5)
    scale = 100.0 if tables_kind == "peaked" else 2.0
    tables = tuple(rng.normal(scale=scale, size=[sizes[a] for a in c]) for c in potentials)
    if tables_kind == "extreme":
        # one value of each table's first attribute, and so a whole slice, at -300
        slices = [
            (np.arange(t.shape[0]) == rng.integers(t.shape[0])).reshape(-1, *[1] * (t.ndim - 1))
            for t in tables
        ]
        tables = tuple(t + rng.uniform(-300, 300) - 300.0 * m for t, m in zip(tables, slices, strict=True))
    theta = np.concatenate([t.reshape(-1) for t in tables]).astype(np.float32)
    total = 250.0
    measured_counts = counts_of(tree, sizes, potentials, measured, theta, total)
    joint = _brute_force_joint(pgm.Model(sizes, potentials, tables, total))
    expected = np.concatenate(
        [joint.sum(axis=tuple(a for a in range(5) if a not in c)).reshape(-1) for c in measured]
    )
    # float32 log-values of magnitude M are off by up to M eps each, and a probability by that
    # much relative for each of the few sums it goes through: 4 M eps (1e-6 for moderate tables)
    magnitude = sum(np.abs(t).max() for t in tables)
    atol = max(1e-6, 4 * magnitude * np.finfo(np.float32).eps)
    assert np.all(np.isfinite(measured_counts))
    np.testing.assert_allclose(measured_counts / total, expected, atol=atol)


def test_estimate_compiles_once_whatever_the_cliques():
    """Five fits on five different clique sets (forest, cycle, nested, ...) reuse the program the
    first compiled: the junction tree travels as data, not as program structure."""
    sizes = (3, 4, 2, 5, 3)
    pgm.estimate(sizes, _measurements(()), total=None, iters=50)
    with programs_built() as built:
        for pairs in [*STRUCTURES[:3], ((0, 4), (1, 3)), ((0, 1, 2, 3),)]:
            pgm.estimate(sizes, _measurements(pairs), total=None, iters=50)
    assert built == []


def test_no_measurements_fit_the_uniform_model():
    model = pgm.estimate((3, 4), [], total=100.0, iters=10)
    assert model.cliques == () and model.total == 100.0
    np.testing.assert_allclose(pgm_marginals.ModelMarginals(model).marginal((1,)), np.full(4, 0.25))


def test_a_dense_fit_compiles_once_per_tree(monkeypatch):
    """The dense program is compiled per tree, and only once: refitting the same cliques (other
    measurements) builds nothing; a new clique set builds one program."""
    _use_program(monkeypatch, "dense")
    sizes = (3, 4, 2, 5, 3)
    pairs = ((0, 2), (2, 4))  # cliques no other test fits, so no program of theirs serves them
    pgm.estimate(sizes, _measurements(pairs), total=None, iters=50)
    with programs_built() as built:
        pgm.estimate(sizes, _measurements(pairs, seed=7), total=None, iters=50)
    assert built == []
    with programs_built() as built:
        pgm.estimate(sizes, _measurements((*pairs, (1, 3))), total=None, iters=50)
    assert len(built) == 1


def test_layout_pads_each_kind_to_the_smallest_power_of_two_holding_it():
    from jaxdp.families import _junction

    small = _junction.Layout.holding(dict.fromkeys(_junction.KINDS, 10))
    assert small.lengths == (_junction.MIN_LENGTH,) * len(_junction.KINDS)
    assert small.grown() == small.lengths
    used = dict.fromkeys(_junction.KINDS, 100) | {"cells": 5000, "home": 9 * 5000, "pairs": 2**13 - 1}
    layout = _junction.Layout.holding(used)
    for kind, n in used.items():
        length = layout.length(kind)
        assert length & (length - 1) == 0  # a power of two
        assert n + 1 <= length and (length == _junction.MIN_LENGTH or n + 1 > length // 2), kind
    # the pairs fill their length exactly (the spare slot included): the next layout doubles them
    grown = dict(zip(_junction.KINDS, layout.grown(), strict=True))
    assert grown["pairs"] == 2 * layout.length("pairs") and grown["cells"] == 2 * layout.length("cells")
    assert grown["measured"] == layout.length("measured")


def test_model_size_is_mbis_jt_size():
    """jaxdp's bitmask triangulation gives mbi's hypothetical_model_size exactly on random clique
    sets (1 to 16 attributes, cliques of 1 to 4, trees, forests, isolated attributes)."""
    import random

    rng = random.Random(1)
    for _ in range(300):
        d = rng.randint(1, 16)
        sizes = [rng.randint(2, 100) for _ in range(d)]
        cliques = [
            tuple(sorted(rng.sample(range(d), rng.randint(1, min(d, 4))))) for _ in range(rng.randint(1, 20))
        ]
        expected = float(mbi.junction_tree.hypothetical_model_size(pgm.mbi_domain(sizes), cliques))
        assert pgm.model_size_mb(sizes, cliques) == expected, (sizes, cliques)
