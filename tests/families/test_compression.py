"""Domain compression (MST's merge of rarely counted values): post-processing of released noisy
1-way counts, decoded back to the declared domain on release."""

import itertools

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import loop
from jaxdp.domain import Dataset
from jaxdp.families import CompressedDomain, Compression
from jaxdp.ledger import rho_spent
from jaxdp.queries import all_kway, marginal_counts
from tests.mechanisms._host import assert_same_merge, merge_from_release, round_zero_releases
from tests.mechanisms.conftest import TINY_DOMAIN, tiny_dataset

BUDGET = {"epsilon": 0.3, "delta": 1e-6}
# The tiny domain's attributes have 2-5 values: below the default `min_values`, so the tests merge
# with it lowered to 1.
MERGING = Compression(min_values=1)
SMALL = {"max_rounds": 8, "iters": 20, "final_iters": 20}


def _aim(data, compress=MERGING, **kw):
    return jaxdp.aim(data, all_kway(data.domain.sizes, 2), compress=compress, **BUDGET, **{**SMALL, **kw})


def _skewed(seed=0, n=400):
    """The tiny domain with rare values in b and d, so that compression merges some."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = rng.choice(4, n, p=[0.02, 0.03, 0.9, 0.05])
    c = rng.integers(0, 2, n)
    d = rng.choice(5, n, p=[0.45, 0.45, 0.04, 0.03, 0.03])
    return Dataset.from_codes(TINY_DOMAIN, np.stack([a, b, c, d], axis=1))


def _one_way_counts(data) -> np.ndarray:
    """The table's true 1-way counts, every attribute's in order (round 0's measurement)."""
    return np.concatenate(
        [np.bincount(data.codes[:, a], minlength=s) for a, s in enumerate(data.domain.sizes)]
    )


def _two_tables():
    """Two tables whose true 1-way counts differ on both sides of the merge threshold: the first
    has _skewed's rare values in b and d, the second has them common."""
    first = _skewed()
    rng = np.random.default_rng(2)
    codes = first.codes.copy()
    codes[:, 1] = rng.choice(4, len(codes), p=[0.25, 0.25, 0.25, 0.25])
    codes[:, 3] = rng.choice(5, len(codes), p=[0.2] * 5)
    second = Dataset.from_codes(first.domain, codes)
    assert not np.array_equal(_one_way_counts(first), _one_way_counts(second))
    return first, second


# A round-0 release both tables are made to give (a, b, c, d in order): b's values 0, 1 and 3 and
# d's 2, 3 and 4 under 3 sigma (round 0's sigma is about 41 at this budget: 3 sigma about 122).
FORCED = np.array([130.0, 140.0, 130.0, 10.0, 20.0, 350.0, -5.0, 200.0, 200.0, 190.0, 180.0, 15.0, 8.0, 2.0])


def _merges_under_a_forced_release(monkeypatch, tables, truth_of=None):
    """Each table's merge and round-0 ledger, round 0 forced to release FORCED. `truth_of`: the
    negative control, the mutation that feeds the table's true 1-way counts to the merge in place
    of the released ones (as `Compression.of(true counts, sigma)` would in `_initialise`)."""
    released = round_zero_releases(monkeypatch, FORCED)
    original = Compression.of
    merges, ledgers = [], []
    for data in tables:
        if truth_of is not None:
            truth = [np.bincount(data.codes[:, a], minlength=s) for a, s in enumerate(data.domain.sizes)]
            monkeypatch.setattr(
                Compression, "of", lambda self, noisy, sigma, t=truth: original(self, t, sigma)
            )
        mechanism = _aim(data)
        run = loop.run(mechanism, jax.random.key(3), rounds=1)
        merges.append((mechanism, run.state.compressed))
        ledgers.append(run.ledger)
    return merges, ledgers, released


def _check_merges_read_the_release_only(merges, ledgers, released) -> None:
    (_, first), (_, second) = merges
    assert first is not None and first.changed
    assert_same_merge(first, second)
    assert ledgers[0] == ledgers[1]
    for (mechanism, merge), (noisy, sigma) in zip(merges, released, strict=True):
        assert_same_merge(merge, merge_from_release(mechanism, noisy, sigma))


def test_the_merge_is_a_function_of_the_released_counts_only(monkeypatch):
    """Round 0 forced to release the same noisy 1-way counts for two tables whose true 1-way
    counts differ: the same merge, the one recomputed from the release, and the same ledger.

    Negative control (`test_a_merge_that_reads_the_true_counts_is_caught`): feeding the true 1-way
    counts to `Compression.of` in `Annealed._initialise` (the mutation this test was checked
    against by editing the source too) gives two different merges, neither the recomputed one."""
    _check_merges_read_the_release_only(*_merges_under_a_forced_release(monkeypatch, _two_tables()))


def test_a_merge_that_reads_the_true_counts_is_caught(monkeypatch):
    merges, ledgers, released = _merges_under_a_forced_release(monkeypatch, _two_tables(), truth_of=True)
    with pytest.raises(AssertionError):
        _check_merges_read_the_release_only(merges, ledgers, released)


@pytest.mark.parametrize("seed", range(3))
def test_the_merge_is_recomputed_from_round_zeros_release(monkeypatch, seed):
    """With real noise: the merge a run decides is the one recomputed from what round 0 released
    (and a 1-way measurement with the merged values summed, as the state holds it)."""
    released = round_zero_releases(monkeypatch)
    mechanism = _aim(_skewed(seed))
    state = loop.run(mechanism, jax.random.key(seed), rounds=1).state
    ((noisy, sigma),) = released
    assert state.compressed is not None
    assert_same_merge(state.compressed, merge_from_release(mechanism, noisy, sigma))


def test_compression_spends_nothing(monkeypatch):
    """Same key with and without compression: the same plan, the same round 0 (its noisy counts
    and its charge), a merge that reads nothing but round 0's release, one selection and one
    measurement a round after it, and the whole budget spent by the filter in both."""
    data = _skewed()
    on, off = _aim(data), _aim(data, compress=None)
    assert on.plan == off.plan
    key = jax.random.key(5)
    released = round_zero_releases(monkeypatch)
    first = [loop.run(m, key, rounds=1) for m in (on, off)]
    assert first[0].ledger == first[1].ledger
    np.testing.assert_array_equal(released[0][0], released[1][0])
    assert_same_merge(first[0].state.compressed, merge_from_release(on, *released[0]))
    assert first[0].state.compressed is not None and first[1].state.compressed is None
    ones = [m for m in first[1].state.measurements if len(m.clique) == 1]
    for m, merged in zip(ones, first[0].state.measurements, strict=True):
        counts, _ = first[0].state.compressed.one_way(m.clique[0], m.noisy, m.sigma)
        np.testing.assert_allclose(merged.noisy, counts)
    for m in (on, off):
        result = loop.run(m, key)
        labels = [e.primitive for e in result.ledger]
        assert labels[0] == "discrete_gaussian" and len(labels) == 2 * result.state.rounds_done - 1
        # the ledger recomputes rho from the float32 scales its charges carry
        assert rho_spent(result.ledger) == pytest.approx(m.plan.rho_budget, rel=1e-6)


def _domain(kept, spread):
    return CompressedDomain(tuple(np.asarray(k) for k in kept), tuple(np.asarray(s, float) for s in spread))


def test_threshold_and_spreads():
    """Values below threshold x sigma merge; one merged value alone is no merge; the noisy spread
    follows the clipped noisy counts (uniform where none is positive)."""
    noisy = [np.array([10.0, 2.0, -1.0, 30.0]), np.array([5.0, 1.0]), np.array([1.0, -2.0, 0.5])]
    noisy_spread = Compression(threshold=3.0, min_values=1).of(noisy, sigma=1.0)
    np.testing.assert_array_equal(noisy_spread.kept[0], [True, False, False, True])
    np.testing.assert_allclose(noisy_spread.spread[0], [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(noisy_spread.kept[1], [True, True])  # one merged value: kept
    np.testing.assert_array_equal(noisy_spread.kept[2], [False, False, False])  # all merged
    np.testing.assert_allclose(noisy_spread.spread[2], [2 / 3, 0.0, 1 / 3])
    assert noisy_spread.sizes == (3, 2, 1)
    uniform = Compression(threshold=3.0, spread="uniform", min_values=1).of(noisy, sigma=1.0)
    np.testing.assert_allclose(uniform.spread[0], [0.0, 0.5, 0.5, 0.0])
    none_positive = Compression(min_values=1).of([np.array([-1.0, -2.0, 9.0])], sigma=1.0)
    np.testing.assert_allclose(none_positive.spread[0], [0.5, 0.5, 0.0])
    small = Compression(min_values=4).of(noisy, sigma=1.0)  # only the 4-value attribute may merge
    assert small.sizes == (3, 2, 3)
    # "shrunk": towards the merged values' mean by the share of their spread that is not noise
    group = [np.array([4.0, 9.0, 2.0, 5.0, 500.0])]  # the first four merged in each case
    noise_only = Compression(threshold=3.0, spread="shrunk", min_values=1).of(group, sigma=100.0)
    # the group's variance (26/3) is far below sigma^2: all noise, the uniform spread
    np.testing.assert_allclose(noise_only.spread[0], [0.25, 0.25, 0.25, 0.25, 0.0])
    exact = Compression(threshold=1e8, spread="shrunk", min_values=1).of(group, sigma=1e-6)
    # no noise: the counts as measured
    np.testing.assert_allclose(exact.spread[0], [0.2, 0.45, 0.1, 0.25, 0.0], rtol=1e-9)
    between = Compression(threshold=30.0, spread="shrunk", min_values=1).of(group, sigma=2.0)
    # variance 26/3, signal 14/3 of it: each count 14/26 of the way from the mean 5 to itself
    np.testing.assert_allclose(between.spread[0][:4], (5 + 14 / 26 * (group[0][:4] - 5)) / 20, rtol=1e-12)
    with pytest.raises(ValueError, match="threshold"):
        Compression(threshold=0.0).checked()
    with pytest.raises(ValueError, match="spread"):
        Compression(spread="median").checked()
    with pytest.raises(ValueError, match="min_values"):
        Compression(min_values=0).checked()


def test_decoding_restores_every_value():
    """Kept values decode to themselves; a merged code decodes to the merged values only, in
    counts equal to their shares of it rounded (systematic sampling); the same key gives the
    same records."""
    compressed = _domain(
        [[True, False, True, False, False], [True, True, True]],
        [[0.0, 0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0]],
    )
    assert compressed.sizes == (3, 3)
    rng = np.random.default_rng(0)
    original = rng.integers(0, (5, 3), size=(2000, 2))
    codes = np.stack([compressed.codes(0)[original[:, 0]], compressed.codes(1)[original[:, 1]]], 1)
    decoded = np.asarray(compressed.records(jax.random.key(1), codes))
    kept = np.isin(original[:, 0], [0, 2])
    np.testing.assert_array_equal(decoded[kept], original[kept])
    np.testing.assert_array_equal(decoded[:, 1], original[:, 1])
    merged = decoded[~kept, 0]
    assert set(np.unique(merged)) <= {1, 3, 4}
    shares = np.bincount(merged, minlength=5)[[1, 3, 4]]
    np.testing.assert_array_less(np.abs(shares - merged.size * np.array([0.5, 0.3, 0.2])), 1.0 + 1e-3)
    np.testing.assert_array_equal(decoded, np.asarray(compressed.records(jax.random.key(1), codes)))


def test_answers_spread_a_compressed_distribution_as_its_release_does():
    """The answers over the declared domain equal the marginals of the joint distribution that
    spreads each merged code over its values by their shares (brute force over the tiny domain)."""
    compressed = _domain(
        [[True, True, True], [False, True, False, True], [True, True], [True, False, False, True, False]],
        [[0, 0, 0], [0.25, 0, 0.75, 0], [0, 0], [0, 0.2, 0.3, 0, 0.5]],
    )
    workload = all_kway(TINY_DOMAIN.sizes, 2)
    small = compressed.workload(workload)
    joint = np.random.default_rng(2).random(small.sizes)
    joint /= joint.sum()
    cells = itertools.product(*(range(s) for s in TINY_DOMAIN.sizes))
    share = [np.where(k, 1.0, s) for k, s in zip(compressed.kept, compressed.spread, strict=True)]
    full = np.zeros(TINY_DOMAIN.sizes)
    for cell in cells:
        code = tuple(int(compressed.codes(a)[v]) for a, v in enumerate(cell))
        full[cell] = joint[code] * np.prod([share[a][v] for a, v in enumerate(cell)])
    assert full.sum() == pytest.approx(1.0)
    marginals = np.concatenate(
        [full.sum(axis=tuple(i for i in range(4) if i not in c)).reshape(-1) for c in workload.cliques]
    )
    small_marginals = np.concatenate(
        [joint.sum(axis=tuple(i for i in range(4) if i not in c)).reshape(-1) for c in small.cliques]
    )
    np.testing.assert_allclose(compressed.answers(small_marginals, workload), marginals, atol=1e-12)


def test_counts_over_the_compressed_domain_are_those_of_the_compressed_records():
    """`cell_map` sums a marginal's counts into the compressed marginal's cells: the counts of
    the records with their codes mapped."""
    data = _skewed()
    compressed = loop.run(_aim(data), jax.random.key(3), rounds=1).state.compressed
    workload = all_kway(TINY_DOMAIN.sizes, 2)
    counts = np.asarray(marginal_counts(data.codes, workload), np.int64)
    summed = np.bincount(
        compressed.cell_map(workload), weights=counts, minlength=compressed.workload(workload).n_queries
    )
    mapped = np.stack([compressed.codes(a)[data.codes[:, a]] for a in range(4)], 1)
    np.testing.assert_array_equal(summed, np.asarray(marginal_counts(mapped, compressed.workload(workload))))


def test_a_compressed_release_is_over_the_declared_domain_and_the_report_lists_merges():
    data = _skewed()
    result = jaxdp.synthesize(
        data,
        data.domain,
        mechanism="aim",
        epsilon=0.3,
        key=jax.random.key(0),
        rounds=8,
        iters=20,
        final_iters=20,
        compress=MERGING,
    )
    report = result.report["compression"]
    assert report["threshold_sigmas"] == 3.0 and report["spread"] == "noisy"
    assert report["merged"] and set(report["merged"]) <= set(data.domain.names)
    codes = result.synthetic.codes
    assert np.all(codes < np.asarray(data.domain.sizes)) and len(codes) == result.report["rows"]
    # each error bound says what it covers: the compressed cells where an attribute merged values
    for entry in result.report["error_bounds"]["marginals"]:
        merged = {name: report["merged"][name] for name in entry["marginal"] if name in report["merged"]}
        if merged:
            assert entry["domain"] == "compressed" and entry["merged"] == merged
        else:
            assert entry["domain"] == "declared" and "merged" not in entry
    assert "compressed" in {e["domain"] for e in result.report["error_bounds"]["marginals"]}
    off = jaxdp.synthesize(
        data, data.domain, mechanism="aim", epsilon=0.3, key=jax.random.key(0), rounds=8, compress=None
    )
    assert off.report["compression"] is None


def test_attributes_outside_the_workload_are_kept_whole():
    """A workload over b and d only: round 0 measures their 1-way marginals, not a's or c's, so
    the merge covers the domain's every attribute (a and c kept whole) and the release has them
    all, decoded to the declared sizes."""
    data = _skewed()
    workload = jaxdp.queries.MarginalWorkload(data.domain.sizes, ((1, 3),))
    mechanism = jaxdp.aim(data, workload, compress=MERGING, **BUDGET, **SMALL)
    run = loop.run(mechanism, jax.random.key(0))
    compressed = run.state.compressed
    assert compressed is not None and len(compressed.kept) == len(data.domain.sizes)
    assert compressed.kept[0].all() and compressed.kept[2].all()
    assert not (compressed.kept[1].all() and compressed.kept[3].all())
    codes = np.asarray(mechanism.release(run.state, jax.random.key(1)))
    assert codes.shape[1] == 4 and np.all(codes < np.asarray(data.domain.sizes))


def test_compression_is_refused_where_it_cannot_apply():
    data = tiny_dataset()
    workload = all_kway(data.domain.sizes, 2)
    with pytest.raises(ValueError, match="compress works with AIMSelection"):
        jaxdp.adaptive(
            data,
            workload,
            select=jaxdp.selection.MaxError(),
            family=jaxdp.families.PEP(),
            rounds=2,
            compress=Compression(),
            epsilon=1.0,
            delta=1e-6,
        )
