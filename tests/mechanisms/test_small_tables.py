"""AIM on small tables (issue #49): round 0 measures the 1-way counts to the table's size
(`jaxdp.selection.AIMSelection`'s resolution), a pile on a wide attribute survives the
compression, and AIM is no worse than Independent at a low budget."""

import math
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import api, audit, loop
from jaxdp.domain import Dataset, Domain
from jaxdp.mechanisms import host_loop
from jaxdp.queries import MarginalWorkload, all_kway
from jaxdp.selection import aim as aim_selection
from jaxdp.selection.aim import estimated_total

from ._host import assert_same_merge, merge_from_release, round_zero_releases
from .conftest import tiny_dataset
from .test_aim import _aim

PILE = 90  # the wide attribute's top code


def _pile_table(n: int = 1304, seed: int = 0) -> Dataset:
    """A small table with a pile on one value of a wide attribute, the regime of issue #49's held-out
    table (1,304 records; a 91-value attribute whose top code holds 16%): "wide" has 91 values,
    about 15% of the records on its top code and the rest spread evenly over 0-89 (about 12 a
    value); b (2 values), c (7), d (15) and e (2) depend on it and on each other."""
    rng = np.random.default_rng(seed)
    wide = np.where(rng.random(n) < 0.16, PILE, rng.integers(0, PILE, n))
    b = (rng.random(n) < np.where(wide >= 60, 0.75, 0.3)).astype(np.int32)
    c = (3 * b + rng.integers(0, 4, n)) % 7
    d = (2 * c + rng.integers(0, 3, n)) % 15
    e = (rng.random(n) < np.where(wide == PILE, 0.8, 0.2 + 0.04 * (d % 5))).astype(np.int32)
    domain = Domain.from_sizes({"wide": 91, "b": 2, "c": 7, "d": 15, "e": 2})
    return Dataset.from_codes(domain, np.stack([wide, b, c, d, e], axis=1).astype(np.int32))


def _registry(name: str, data: Dataset, epsilon: float, **options):
    """A mechanism as the API builds it (registry defaults), on every 3-way marginal (all of at
    most 10,000 cells on the pile table, as in the issue's workload)."""
    return api.build(name, data, all_kway(data.domain.sizes, 3), epsilon=epsilon, delta=1e-9, **options)


def _round_zero_sigma(ledger) -> float:
    """The noise scale of round 0's measurements together: (sum of sigma^-2)^-1/2."""
    return sum(e.scale**-2 for e in ledger if e.round == 0) ** -0.5


def test_round_zero_of_a_small_table_is_measured_to_its_size(monkeypatch):
    """At epsilon 1 on 1,304 records, T = 16 d = 80 rounds would measure every 1-way count with
    sigma ~ 53 (n / 25). The default resolution (150) has round 0 measure them a second time, so
    that the two together have the sigma of a run calibrated for T' = 2 d = 10 rounds (the floor:
    2 alpha rho (n / 150)^2 is ~2 here), and calibrates the rounds after for T' too. Both
    measurements are charged at the same sensitivity, round 0 costs alpha rho d / T', the realised
    plan names both, and the state holds their inverse-variance average at the combined sigma (the
    merge is the one recomputed from that average)."""
    data = _pile_table()
    mech = _registry("aim", data, 1.0)
    rule, rho, d = mech.selection, mech.plan.rho_budget, 5
    released = round_zero_releases(monkeypatch)
    run = loop.run(mech, jax.random.key(0), rounds=1)
    (first, sigma_1), (second, sigma_2) = released
    assert [(e.round, e.primitive) for e in run.ledger] == [(0, "discrete_gaussian")] * 2
    assert run.ledger[0].sensitivity == run.ledger[1].sensitivity == pytest.approx(math.sqrt(d))
    assert sigma_1 == pytest.approx(math.sqrt(16 * d / (2 * rule.alpha * rho)), rel=1e-6)
    target = math.sqrt(2 * d / (2 * rule.alpha * rho))
    combined = (sigma_1**-2 + sigma_2**-2) ** -0.5
    assert combined == pytest.approx(target, rel=1e-6) and target < len(data) / 25
    assert audit.rho_spent(run.ledger) == pytest.approx(rule.alpha * rho * d / (2 * d), rel=1e-6)
    schedule = run.state.schedule
    assert schedule.sigma == pytest.approx(target, rel=1e-12)
    assert schedule.epsilon == pytest.approx(math.sqrt(8 * (1 - rule.alpha) * rho / (2 * d)), rel=1e-12)
    labels = [c.label for c in mech.realised_plan(run.state).charges]
    assert labels == ["measure 1-way marginals", "measure 1-way marginals again"]
    # the inverse-variance average, in the order the mechanism computes it (the merge compares
    # floats exactly)
    average = (first * sigma_1**-2 + second * sigma_2**-2) / (sigma_1**-2 + sigma_2**-2)
    assert_same_merge(run.state.compressed, merge_from_release(mech, average, combined))
    (b,) = [m for m in run.state.measurements if m.clique == (1,)]  # b: 2 values, never merged
    np.testing.assert_allclose(b.noisy, average[91:93], rtol=1e-12)
    assert b.sigma == pytest.approx(combined, rel=1e-12)
    # the whole run: the filter spends the budget and never more, the top-up included
    result = loop.run(mech, jax.random.key(0))
    assert audit.rho_spent(result.ledger) == pytest.approx(rho, rel=1e-6)
    assert audit.rho_spent(result.ledger) <= rho * (1 + 1e-9)


def test_round_zero_of_a_large_table_is_the_papers():
    """Where T's schedule already measures the 1-way counts within n / 150 (200,000 records at
    epsilon 1: sigma ~ 35), round 0 is one measurement and the run is the paper's: the same ledger
    and measurements as with resolution None. A `max_rounds` given calibrates the run for it (no
    resolution)."""
    data = tiny_dataset(n=200_000)
    runs = []
    for options in ({}, {"resolution": None}):
        mech = jaxdp.aim(data, all_kway(data.domain.sizes, 2), epsilon=1.0, delta=1e-6, **options)
        assert mech.selection.resolution == options.get("resolution", 150.0)
        runs.append(loop.run(mech, jax.random.key(4), rounds=3))
    assert [e.to_json() for e in runs[0].ledger] == [e.to_json() for e in runs[1].ledger]
    assert [e.round for e in runs[0].ledger].count(0) == 1
    for m, n in zip(runs[0].state.measurements, runs[1].state.measurements, strict=True):
        np.testing.assert_array_equal(m.noisy, n.noisy)
    assert _aim().selection.resolution is None  # max_rounds=4 given


def _binary_table(wide: bool) -> Dataset:
    """20,000 records of 8 binary attributes, attribute 0's value 1 on 8% of them (~1,600), the
    others about even; `wide`: and a ninth attribute of 30 values, uniform (~670 a value)."""
    rng = np.random.default_rng(3)
    codes = (rng.random((20_000, 8)) < 0.5).astype(np.int32)
    codes[:, 0] = rng.random(20_000) < 0.08
    sizes = {f"b{i}": 2 for i in range(8)}
    if wide:
        codes = np.column_stack([codes, rng.integers(0, 30, 20_000)]).astype(np.int32)
        sizes["w"] = 30
    return Dataset.from_codes(Domain.from_sizes(sizes), codes)


def test_round_zero_is_topped_up_only_where_a_wide_attributes_count_is_near_the_noise():
    """Epsilon 0.1: T = 16 d measures the 1-way counts with sigma ~ 750-800, above n / 150 = 133.
    On 8 binary attributes the rare value (~1,600, about 2 sigmas) is in a narrow attribute,
    which is never merged: round 0 is one measurement and the run is the paper's (on bench's
    binary16 the top-up's 32 rounds fit worse than the paper's 256). Control: with a 30-value
    attribute (~670 a value, under 1 sigma) round 0 is topped up."""
    rounds = {}
    for wide in (False, True):
        data = _binary_table(wide)
        mech = jaxdp.aim(data, all_kway(data.domain.sizes, 2), epsilon=0.1, delta=1e-9)
        sigma = mech.selection.start(mech.plan.rho_budget).sigma
        assert sigma > len(data) / 150
        run = loop.run(mech, jax.random.key(0), rounds=1)
        rounds[wide] = [e.round for e in run.ledger].count(0)
    assert rounds == {False: 1, True: 2}


# (table sizes, epsilon, the forced release's size over the first table's): at epsilon 1, T'
# between 2 d and T, so the second sigma follows the size; at epsilon 0.1 the sizes straddle the
# low-signal threshold (LOW_SIGNAL sigma ~ 2,440 records: T' floored at d below it, 2 d above)
# and the release says 1,500 records
TOP_UPS = {"resolution": ((4000, 6000), 1.0, 1.25), "low signal": ((1500, 4000), 0.1, 1.0)}


def _top_up_ledgers(monkeypatch, true_size: bool, case: str) -> list:
    """Round 0's ledger on the two tables of `TOP_UPS[case]`, round 0 forced to release the same
    counts. `true_size`: the mutation that gives the top-up the table's true size (`total =
    len(data)` in `Annealed._initialise`) in place of the one estimated from the release."""
    sizes, epsilon, scale = TOP_UPS[case]
    tables = [_pile_table(n=sizes[0]), _pile_table(n=sizes[1], seed=1)]
    forced = (
        np.concatenate(
            [np.bincount(tables[0].codes[:, a], minlength=s) for a, s in enumerate(tables[0].domain.sizes)]
        )
        * scale
    )
    round_zero_releases(monkeypatch, forced)
    ledgers = []
    for data in tables:
        if true_size:
            size = float(len(data))
            monkeypatch.setattr(host_loop, "estimated_total", lambda noisy, n=size: n)
        ledgers.append(loop.run(_registry("aim", data, epsilon), jax.random.key(1), rounds=1).ledger)
    return ledgers


@pytest.mark.parametrize("case", TOP_UPS)
def test_the_top_up_reads_round_zeros_release_only(monkeypatch, case):
    """The second measurement's sigma is a function of the first's released counts (the table's
    size estimated from them, `estimated_total`), both where it follows the size and where the
    low-signal floor decides it: two tables of different sizes made to release the same counts
    get the same ledger. Negative control (`test_a_top_up_that_reads_the_true_size_is_caught`):
    given the true sizes, their second sigmas differ."""
    first, second = _top_up_ledgers(monkeypatch, False, case)
    assert len(first) == 2 and [e.to_json() for e in first] == [e.to_json() for e in second]


@pytest.mark.parametrize("case", TOP_UPS)
def test_a_top_up_that_reads_the_true_size_is_caught(monkeypatch, case):
    first, second = _top_up_ledgers(monkeypatch, True, case)
    assert len(first) == len(second) == 2 and first[1].scale != second[1].scale


@pytest.mark.parametrize("released", [10_000, 10])
def test_whether_round_zero_tops_up_reads_the_release(monkeypatch, released):
    """4,000 pile records at epsilon 1 (sigma ~ 53 at T; ~37 records a wide value, under 3 sigma):
    round 0 made to release `released` for every count. 10,000 (far above 3 sigma): no top-up,
    whatever the true counts; 10: the top-up. A rule that read the true counts would top up
    both."""
    data = _pile_table(n=4000)
    cells = sum(data.domain.sizes)
    round_zero_releases(monkeypatch, np.full(cells, float(released)))
    run = loop.run(_registry("aim", data, 1.0), jax.random.key(2), rounds=1)
    assert [e.round for e in run.ledger].count(0) == (1 if released == 10_000 else 2)


def test_estimated_total_weighs_each_attribute_by_its_inverse_variance():
    """An attribute of k values sums k noisy counts (variance k sigma^2): weights 1 / k."""
    noisy = [np.array([10.0, 20.0]), np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]  # sums 30 and 21
    assert estimated_total(noisy) == pytest.approx((30 / 2 + 21 / 6) / (1 / 2 + 1 / 6))


def _pile_share(result) -> float:
    return float(np.mean(np.asarray(result.synthetic.codes)[:, 0] == PILE))


@pytest.mark.parametrize("seed", range(3))
def test_a_pile_on_a_wide_attribute_is_released_within_its_noise(seed):
    """The pile table at epsilon 1, registry defaults: the released count of the pile is within
    5 sigma of the true one, sigma the noise of round 0's two 1-way measurements together (16.2
    counts here, from the ledger; the pile, at 196 records, is far above the 3 sigma merge
    threshold). The measurement's own error exceeds 4 sigma with probability 6e-5 (two-sided
    Gaussian tail); the fit and the release moved the count from its measurement by at most 7
    counts (0.45 sigma) over seeds 0-9, where the released count's error was between -1.6 and
    +2.5 sigma (seed 0: +2.5, a +2.4 sigma draw of the noise). Negative control
    (`test_the_papers_schedule_loses_the_pile_on_a_small_table`): round 0 calibrated for
    T = 16 d (resolution None) merges the pile on seed 4 and releases it 9.8 sigma off."""
    data = _pile_table()
    result = api.execute("aim", _registry("aim", data, 1.0), jax.random.key(seed), data.domain)
    sigma = _round_zero_sigma(result.ledger)
    true = int(np.sum(data.codes[:, 0] == PILE))
    released = _pile_share(result) * len(data)
    assert sigma < 20 and abs(released - true) <= 5 * sigma, (released, true, sigma)


def test_the_papers_schedule_loses_the_pile_on_a_small_table():
    """Negative control of `test_a_pile_on_a_wide_attribute_is_released_within_its_noise`: with
    round 0 calibrated for T = 16 d = 80 rounds (resolution None, the schedule before issue #49),
    sigma is 53 counts, the pile's noisy count falls under 3 sigma on seed 4 (as on 3 of seeds
    0-9), its value is merged with the 90 others and spread by their noisy counts, and its
    released count is off by more than 5 sigma of the default's round 0 (the sigma of 2 d
    rounds)."""
    data = _pile_table()
    mech = _registry("aim", data, 1.0, resolution=None)
    result = api.execute("aim", mech, jax.random.key(4), data.domain)
    assert not result.state.compressed.kept[0][PILE]
    rule, rho = mech.selection, mech.plan.rho_budget
    sigma = math.sqrt(2 * 5 / (2 * rule.alpha * rho))
    true = int(np.sum(data.codes[:, 0] == PILE))
    assert abs(_pile_share(result) * len(data) - true) > 5 * sigma


# -- never worse than Independent -----------------------------------------------------------------

ADULT_SAMPLE = ("age", "workclass", "education", "marital-status", "occupation", "sex")
ADULT_SAMPLE += ("native-country", "hours-per-week", "income>50K")


def _adult_sample(n: int = 1304, seed: int = 49) -> Dataset:
    """A small table from the bundled ADULT in the regime of issue #49's held-out table: 1,304
    records drawn without replacement, 9 attributes, age replaced by a 91-value "wide" whose top
    code holds the oldest 16% of the records and whose other 90 codes split the rest by their
    rank in age (~12 records a value; it keeps age's dependence on the other attributes). Like
    bench/bench_small.py's "pile" table, from bundled data."""
    full = jaxdp.datasets.load("adult")
    rng = np.random.default_rng(seed)
    columns = [full.domain.names.index(name) for name in ADULT_SAMPLE]
    codes = np.asarray(full.codes)[np.sort(rng.choice(len(full), n, replace=False))][:, columns]
    order = np.lexsort((rng.random(n), codes[:, 0]))  # by age, ties at random
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    rest = n - round(0.16 * n)
    codes[:, 0] = np.where(rank >= rest, PILE, rank * PILE // rest)
    sizes = {"wide": PILE + 1} | {
        name: full.domain.sizes[c] for name, c in zip(ADULT_SAMPLE[1:], columns[1:], strict=True)
    }
    return Dataset.from_codes(Domain.from_sizes(sizes), codes.astype(np.int32))


def _mean_l1(name: str, data: Dataset, workload, epsilon: float, seeds, **options) -> float:
    """The mean over seeds of a registry mechanism's mean L1 workload error."""
    errors = []
    for seed in seeds:
        mech = api.build(name, data, workload, epsilon=epsilon, delta=1e-9, **options)
        result = api.execute(name, mech, jax.random.key(seed), data.domain)
        errors.append(api.release_errors(data, result, workload)["mean_l1"])
    return float(np.mean(errors))


def _small_workload(data: Dataset) -> MarginalWorkload:
    """Every 3-way marginal of at most 10,000 cells (issue #49's workload)."""
    full = all_kway(data.domain.sizes, 3)
    return MarginalWorkload(
        full.sizes, tuple(c for c, n in zip(full.cliques, full.cells, strict=True) if n <= 10_000)
    )


SEEDS = range(3)


def test_aim_is_no_worse_than_independent_at_a_low_budget_on_a_small_table():
    """AIM's defaults against Independent's at epsilon 0.1 on 1,304 ADULT records (72 3-way
    marginals), mean L1 over seeds 0-2: AIM's may not exceed Independent's (margin 1.0x). Measured
    on seeds 0-4: AIM 1.258 (sd 0.062 a seed), Independent 1.395 (sd 0.013): the margin is 3.8
    standard errors of AIM's 3-seed mean away. Negative control
    (`test_the_papers_schedule_is_worse_than_independent_on_a_small_table`): round 0 calibrated
    for T = 16 d (resolution None) measured 1.568, 1.12x Independent's."""
    data = _adult_sample()
    workload = _small_workload(data)
    aim = _mean_l1("aim", data, workload, 0.1, SEEDS)
    independent = _mean_l1("independent", data, workload, 0.1, SEEDS)
    assert aim <= independent, (aim, independent)


def test_the_papers_schedule_is_worse_than_independent_on_a_small_table():
    data = _adult_sample()
    workload = _small_workload(data)
    paper = _mean_l1("aim", data, workload, 0.1, SEEDS, resolution=None)
    independent = _mean_l1("independent", data, workload, 0.1, SEEDS)
    assert paper > 1.05 * independent, (paper, independent)


# -- a table too small for any round after the 1-way one (PUMS at epsilon 0.1) ---------------------

PUMS_SEEDS = range(8)


def _pums(shared: Path) -> Dataset:
    """SmartNoise's 1,000-record PUMS sample (../shared/data/smartnoise, MIT), income in 50 public
    bins of 10,000 (bench/bench_small.py's "pums")."""
    raw = np.loadtxt(shared / "smartnoise" / "PUMS.csv", delimiter=",", skiprows=1).astype(np.int64)
    age, sex, educ, race, income, married = raw.T  # the file's column order
    sizes = {"age": 95, "sex": 2, "educ": 17, "race": 7, "married": 2, "income": 50}
    codes = np.stack([age, sex, educ, race, married, np.minimum(income // 10_000, 49)], axis=1)
    return Dataset.from_codes(Domain.from_sizes(sizes), codes.astype(np.int32))


def _pums_errors(shared: Path, **options) -> tuple[float, float]:
    """(AIM's, Independent's) mean L1 over PUMS_SEEDS at epsilon 0.1, both under add/remove."""
    data = _pums(shared)
    workload = _small_workload(data)
    aim = _mean_l1("aim", data, workload, 0.1, PUMS_SEEDS, **options)
    independent = _mean_l1("independent", data, workload, 0.1, PUMS_SEEDS, relation="add-remove")
    return aim, independent


def test_aim_is_no_worse_than_independent_where_the_noise_swamps_the_table(shared_data):
    """PUMS (1,000 records, 6 attributes) at epsilon 0.1: even the whole measurement share would
    measure the 1-way counts with sigma ~ 118, n / 8.5, under n / LOW_SIGNAL, so round 0 spends
    alpha rho on them (T' = d), the one round left spends the rest and never more, and AIM's mean
    L1 over seeds 0-7 may exceed Independent's (same relation) by at most 5%. Measured: AIM 1.389
    against Independent's 1.376 (1.010x; seeds 0-19: 1.389 against 1.369, sd 0.07 and 0.05 a
    seed; Independent under its default replace-one 1.449). Negative control below: without the
    rule (round 0 at half the budget, the rest on rounds that measure noise) AIM measured 1.461
    (1.062x)."""
    data = _pums(shared_data)
    mech = _registry("aim", data, 0.1)
    result = loop.run(mech, jax.random.key(0))
    rule, rho = mech.selection, mech.plan.rho_budget
    whole = math.sqrt(6 / (2 * rule.alpha * rho))
    assert len(data) < aim_selection.LOW_SIGNAL * whole
    round_zero = sum(e.rho for e in result.ledger if e.round == 0)
    assert round_zero == pytest.approx(rule.alpha * rho, rel=1e-6)
    assert max(e.round for e in result.ledger) == 1
    assert audit.rho_spent(result.ledger) <= rho * (1 + 1e-9)
    aim, independent = _pums_errors(shared_data)
    assert aim <= 1.05 * independent, (aim, independent)


def test_without_the_low_signal_rule_aim_is_worse_than_independent_on_pums(shared_data, monkeypatch):
    monkeypatch.setattr(aim_selection, "LOW_SIGNAL", 0.0)
    aim, independent = _pums_errors(shared_data)
    assert aim > 1.05 * independent, (aim, independent)
