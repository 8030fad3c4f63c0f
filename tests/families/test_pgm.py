"""Graphical-model family: host junction-tree calibration, merged repeat measurements, padded
stratified sampling (the parts that keep AIM from compiling per model or per shape)."""

import itertools
import math

import jax
import numpy as np
import pytest

from jaxdp.families import pgm

mbi = pgm.require_mbi()


def _brute_force_joint(model) -> np.ndarray:
    """exp(sum of the model's log-potentials) over the whole domain, normalised."""
    sizes = model.domain.shape
    log_joint = np.zeros(sizes)
    for clique in model.potentials.cliques:
        factor = model.potentials[clique]
        attrs = tuple(factor.domain.attributes)
        shape = [sizes[a] if a in attrs else 1 for a in range(len(sizes))]
        log_joint = log_joint + np.asarray(factor.values, np.float64).reshape(shape)
    joint = np.exp(log_joint - log_joint.max())
    return joint / joint.sum()


@pytest.mark.parametrize(
    "pairs",
    [
        ((0, 1), (1, 2), (3, 4)),  # a forest: two junction trees
        ((0, 1), (1, 2), (2, 3), (0, 3), (3, 4)),  # a cycle: triangulated, 3-attribute nodes
    ],
)
def test_calibrated_beliefs_equal_the_brute_force_joint(pairs):
    sizes = (3, 4, 2, 5, 3)
    rng = np.random.default_rng(0)
    measurements = [pgm.Measurement((i,), rng.random(s) * 100, 2.0) for i, s in enumerate(sizes)]
    measurements += [pgm.Measurement(c, rng.random(math.prod(sizes[a] for a in c)) * 30, 2.0) for c in pairs]
    model = pgm.estimate(sizes, measurements, total=None, iters=50)
    marginals = pgm.ModelMarginals(model)
    joint = _brute_force_joint(model)
    everything = tuple(range(len(sizes)))
    for node in marginals.cliques:  # every junction-tree node's belief
        drop = tuple(a for a in everything if a not in node)
        np.testing.assert_allclose(marginals._beliefs[node], joint.sum(axis=drop), atol=1e-9)
    for clique in itertools.combinations(everything, 3):  # marginals across nodes and trees
        drop = tuple(a for a in everything if a not in clique)
        np.testing.assert_allclose(marginals.marginal(clique), joint.sum(axis=drop).reshape(-1), atol=1e-9)


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
        pgm.ModelMarginals(merged_model).marginal((0, 1, 2)),
        pgm.ModelMarginals(raw_model).marginal((0, 1, 2)),
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
        codes = np.asarray(pgm.sample(jax.random.key(seed), plan, (3, 5), rows))
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


def test_host_oracle_equals_mbi_message_passing():
    """Outside a trace the estimator's oracle calibrates on the host; it must return what mbi's
    compiled message passing returns for the same potentials (a cycle, so nodes hold 3
    attributes, and a total != 1)."""
    sizes = (3, 4, 2, 5)
    cliques = [(0, 1), (1, 2), (2, 3), (0, 3)]
    domain = pgm.mbi_domain(sizes)
    rng = np.random.default_rng(4)
    potentials = mbi.CliqueVector(
        domain,
        cliques,
        {
            c: mbi.Factor(domain.project(c), rng.normal(size=[sizes[a] for a in c]).astype(np.float32))
            for c in cliques
        },
    )
    host = pgm._host_or_compiled_oracle(potentials, 250.0)
    compiled = mbi.marginal_oracles.message_passing_hugin(potentials, 250.0)
    for c in cliques:
        np.testing.assert_allclose(np.asarray(host[c].values), np.asarray(compiled[c].values), rtol=1e-4)
