"""Bins of numeric columns: equal width, declared edges, private quantiles (charged)."""

import math

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import binning, loop
from jaxdp.audit import rho_spent
from jaxdp.tables import NumericColumn, TableSchema, parse_table
from jaxdp.types import Neighboring


def _column(**kw):
    return NumericColumn("x", kw.pop("lower", 0.0), kw.pop("upper", 10.0), **kw)


@pytest.mark.parametrize(("lower", "upper", "bins"), [(0, 10, 4), (17, 90, 16), (1, 16, 16), (0.5, 7.5, 3)])
def test_equal_width_integer_bins_split_the_whole_numbers_as_evenly_as_possible(lower, upper, bins):
    column = _column(lower=lower, upper=upper, integer=True)
    whole = np.arange(math.ceil(lower), math.floor(upper) + 1)
    per_bin = np.bincount(binning.bin_codes(binning.equal_width_cuts(column, bins), whole), minlength=bins)
    assert len(per_bin) == bins and per_bin.min() >= 1 and per_bin.max() - per_bin.min() <= 1


def test_equal_width_continuous_bins_have_equal_width_and_cover_the_bounds():
    cuts = binning.equal_width_cuts(_column(lower=-1.0, upper=3.0), 8)
    np.testing.assert_allclose(np.diff(np.concatenate([[-1.0], cuts, [3.0]])), 0.5)
    codes = binning.bin_codes(cuts, np.array([-1.0, -0.5, -0.49, 2.99, 3.0]))
    assert codes.tolist() == [0, 1, 1, 7, 7]  # [c_i, c_i+1), the upper bound in the last bin


def test_default_and_declared_bins():
    assert binning.is_private(_column()) and binning.bins_asked(_column()) == binning.DEFAULT_BINS == 32
    assert binning.bins_asked(_column(integer=True, lower=1, upper=5)) == 5  # one bin per whole number
    assert len(binning.public_cuts(_column(binning="equal-width"))) == binning.DEFAULT_BINS - 1
    whole = _column(integer=True, lower=1, upper=5, binning="equal-width")
    assert binning.public_cuts(whole).tolist() == [2, 3, 4, 5]
    assert binning.public_cuts(_column(binning="edges", edges=(2.0, 7.5))).tolist() == [2.0, 7.5]
    assert not binning.is_private(_column(binning="equal-width", bins=3))
    with pytest.raises(ValueError, match="chosen privately"):
        binning.public_cuts(_column())


def _brute_force_quantile_cuts(fine, counts, bins):
    """Reference: for each i / bins, the first fine cut with at least that mass below it."""
    total, cuts = counts.sum(), []
    for i in range(1, bins):
        for j, cut in enumerate(fine):
            if counts[: j + 1].sum() >= total * i / bins:
                cuts.append(cut)
                break
    return np.unique(cuts)


@pytest.mark.parametrize("seed", range(20))
def test_quantile_cuts_of_exact_counts_match_a_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    cells = int(rng.integers(2, 40))
    counts = rng.integers(0, 50, cells) * (rng.random(cells) < 0.6)
    counts[rng.integers(cells)] += 1
    fine = np.arange(1.0, cells)
    bins = int(rng.integers(1, 12))
    got = binning.quantile_cuts(fine, counts, bins)
    np.testing.assert_array_equal(got, _brute_force_quantile_cuts(fine, counts, bins))
    assert np.all(np.diff(got) > 0) and len(got) <= bins - 1


def test_noisy_counts_that_swamp_the_data_fall_back_to_a_flat_histogram():
    fine = np.arange(1.0, 8.0)
    np.testing.assert_array_equal(binning.quantile_cuts(fine, -np.ones(8), 4), [2.0, 4.0, 6.0])


SCHEMA = TableSchema.from_json(
    {
        "columns": {
            "age": {"type": "numeric", "lower": 17, "upper": 90, "integer": True, "binning": "quantiles"},
            "w": {
                "type": "numeric",
                "lower": 0,
                "upper": 1,
                "binning": "quantiles",
                "bins": 4,
                "nullable": True,
            },
            "hours": {"type": "numeric", "lower": 1, "upper": 99, "bins": 8, "nullable": True},
            "y": {"type": "categorical", "categories": ["a", "b"]},
        }
    }
)


def _table(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    hours = rng.integers(1, 100, n).astype(float)
    hours[: n // 20] = np.nan
    w = rng.beta(0.5, 3.0, n)
    w[-n // 10 :] = np.nan  # empty cells are measured in a cell of their own, not in the quantiles
    return parse_table(
        SCHEMA,
        {
            "age": np.clip(np.round(rng.gamma(6.0, 7.0, n)) + 17, 17, 90),
            "w": w,
            "hours": hours,
            "y": rng.choice(["a", "b"], n),
        },
    )


def test_with_a_huge_budget_private_cuts_are_the_exact_quantile_cuts():
    table = _table()
    private = tuple(c for c in SCHEMA.numeric if binning.is_private(c))
    mech = binning.quantile_measurement(table, private, rho=1e9, relation=Neighboring.ADD_REMOVE)
    assert mech.classes[0].measurement.sigma == pytest.approx(
        1 / 64
    )  # the exact sampler's floor: noise is 0 w.p. ~1
    run = loop.run(mech, jax.random.key(0))
    cuts = binning.split_cuts(private, np.asarray(run.state.model.noisy_answers))
    for column in private:
        fine = binning.fine_cuts(column)
        values = table.values[column.name]
        counts = np.bincount(binning.bin_codes(fine, values[~np.isnan(values)]), minlength=len(fine) + 1)
        reference = _brute_force_quantile_cuts(fine, counts, binning.bins_asked(column))
        np.testing.assert_array_equal(cuts[column.name], reference)


@pytest.mark.parametrize(("lower", "upper"), [(0, 99999), (17, 90), (0, 128), (-5, 300), (0.5, 4356.5)])
def test_the_fine_grid_of_an_integer_column_keeps_its_bounds_whole_numbers_apart(lower, upper):
    """FINE_CELLS cells (one per whole number where there are fewer), each holding at least one
    whole number; with more, each bound's whole number alone in its cell (where piles sit) and
    the cells between equal width to within one whole number."""
    column = NumericColumn("x", lower, upper, integer=True)
    first, last = column.whole_numbers
    starts, ends = column.whole_number_bins(binning.fine_cuts(column))
    held = ends - starts + 1
    assert held.min() >= 1 and held.sum() == last - first + 1
    if last - first + 1 <= binning.FINE_CELLS:
        assert np.all(held == 1)
        return
    assert len(held) == binning.FINE_CELLS and held[0] == held[-1] == 1
    assert held[1:-1].max() - held[1:-1].min() <= 1


@pytest.mark.parametrize("seed", range(4))
def test_fine_weights_pool_the_cells_within_the_noise_over_their_bin(seed):
    """`split_fine_weights` against a cell-by-cell reference: a cell keeps its noisy count where
    it exceeds `EMPTY_BELOW` noise deviations; the other cells of a bin share their counts' sum,
    clipped at 0, in proportion to their widths (whole numbers counted one by one for an integer
    column). The weights do not depend on the answers' units (counts, or fractions with the
    noise's deviation in fractions)."""
    rng = np.random.default_rng(seed)
    columns = (
        NumericColumn("w", 0.0, 1.0),
        NumericColumn("age", 17, 90, integer=True),
        NumericColumn("gain", 0, 99999, integer=True),
    )
    sigma = 5.0
    blocks, cuts = [], {}
    for c in columns:
        fine = binning.fine_cuts(c)
        blocks.append(
            rng.normal(0.0, sigma, len(fine) + 1) + rng.choice([0.0, 40.0], len(fine) + 1, p=[0.6, 0.4])
        )
        cuts[c.name] = np.sort(rng.choice(fine, 5, replace=False))
    blocks[0][: len(blocks[0]) // 2] = rng.normal(0.0, sigma, len(blocks[0]) // 2)  # bins of noise alone
    noisy = np.concatenate(blocks)
    weights = binning.split_fine_weights(columns, noisy, cuts, sigma)
    for c, block in zip(columns, blocks, strict=True):
        fine = binning.fine_cuts(c)
        if c.integer:
            first, last = c.whole_numbers
            width = np.bincount(
                np.searchsorted(fine, np.arange(first, last + 1), "right"), minlength=len(block)
            )
        else:
            width = np.diff(np.concatenate([[c.lower], fine, [c.upper]]))
        starts = np.concatenate([[c.lower], fine])
        expected = np.zeros(len(block))
        for b in range(len(cuts[c.name]) + 1):
            cells = [
                i for i, start in enumerate(starts) if np.searchsorted(cuts[c.name], start, "right") == b
            ]
            pooled = [i for i in cells if block[i] <= binning.EMPTY_BELOW * sigma]
            mass = max(sum(block[i] for i in pooled), 0.0)
            for i in cells:
                expected[i] = mass * width[i] / sum(width[j] for j in pooled) if i in pooled else block[i]
        np.testing.assert_allclose(weights[c.name], expected, rtol=1e-9, atol=1e-9)
        n = 1234.0
        fractions = binning.split_fine_weights(columns, noisy / n, cuts, sigma / n)
        np.testing.assert_allclose(fractions[c.name] * n, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("relation", "factor"), [(Neighboring.ADD_REMOVE, 1), (Neighboring.REPLACE_ONE, 2)])
def test_histogram_sensitivity_holds_on_neighbouring_tables(relation, factor):
    """One record removed (or replaced) moves the measured histograms by exactly the declared L2
    sensitivity in the worst case: a record present in both columns, moved in both."""
    table = _table(n=300)
    private = tuple(c for c in SCHEMA.numeric if binning.is_private(c))
    columns = {n: table.values[n] for n in ("age", "w", "hours")}
    columns["y"] = np.where(table.codes["y"] == 0, "a", "b")
    if relation is Neighboring.ADD_REMOVE:
        other = {n: v[1:] for n, v in columns.items()}
    else:
        other = {n: v.copy() for n, v in columns.items()}
        other["age"][0] = 90.0 if columns["age"][0] < 50 else 17.0
        other["w"][0] = 1.0 if columns["w"][0] < 0.5 else 0.0
    built = [
        binning.quantile_measurement(t, private, rho=1.0, relation=relation)
        for t in (table, parse_table(SCHEMA, other))
    ]
    # tests may look: the data is theirs
    counts = [np.asarray(m.classes[0].counts._value, np.int64) for m in built]
    sensitivity = built[0].classes[0].measurement.sensitivity
    assert sensitivity == pytest.approx(math.sqrt(factor * len(private)))
    assert np.sqrt(np.sum((counts[0] - counts[1]) ** 2)) == pytest.approx(sensitivity)
    assert counts[0].sum() == len(private) * 300  # every record counted once per column (empty: its cell)


def _release(**kw):
    table = _table(n=2000)
    return jaxdp.synthesize(
        table,
        None,
        mechanism="independent",
        epsilon=1.0,
        key=jax.random.key(kw.pop("seed", 0)),
        **kw,
    )


def test_private_binning_is_charged_in_the_ledger_and_the_plan_and_the_budget_is_spent_exactly():
    result = _release()
    report = result.report
    first = result.ledger[0]
    assert first.round == -1 and first.primitive == "discrete_gaussian"
    assert first.label == "private binning: fine histograms of age, w"
    planned = [c for c in result.plan.charges if c.label == first.label]
    assert len(planned) == 1 and planned[0].rho == pytest.approx(first.rho, rel=1e-12)
    share = binning.DEFAULT_BINNING_SHARE
    assert first.rho == pytest.approx(share * report["rho_budget"], rel=1e-6)
    assert report["ledger"][0] == first.to_json() and len(report["ledger"]) == 2
    assert report["rho_spent"] == pytest.approx(report["rho_budget"], rel=1e-6)
    assert report["rho_spent"] <= report["rho_budget"]
    assert report["rho_spent"] == pytest.approx(rho_spent(result.ledger), rel=1e-12)
    assert result.plan.rho_planned <= result.plan.rho_budget == report["rho_budget"]
    assert report["epsilon"] == 1.0 and report["delta"] == 1e-9 and report["conversion"] == "exact"
    columns = report["preprocessing"]["columns"]
    assert columns["age"]["source"] == columns["w"]["source"] == "private (charged)"
    assert columns["hours"]["source"] == "public (schema)" and columns["y"]["source"] == "public (schema)"
    assert report["preprocessing"]["reads_data"] and report["preprocessing"]["rho"] == first.rho


def test_public_binning_charges_nothing_and_says_so():
    result = jaxdp.synthesize(
        _table(n=500).columns(),
        {
            "columns": {
                "age": {"type": "numeric", "lower": 17, "upper": 90, "integer": True, "bins": 8},
                "w": {"type": "numeric", "lower": 0, "upper": 1, "edges": [0.1, 0.3], "nullable": True},
                "hours": {"type": "numeric", "lower": 1, "upper": 99, "bins": 8, "nullable": True},
                "y": {"type": "categorical", "categories": ["a", "b"]},
            }
        },
        mechanism="independent",
        epsilon=1.0,
        key=jax.random.key(0),
    )
    report = result.report
    assert [e["primitive"] for e in report["ledger"]] == ["discrete_gaussian"]
    assert report["ledger"][0]["round"] == 0 and report["preprocessing"]["rho"] == 0.0
    assert not report["preprocessing"]["reads_data"]
    assert {c["source"] for c in report["preprocessing"]["columns"].values()} == {"public (schema)"}
    assert report["preprocessing"]["columns"]["w"] == {
        "coding": "declared edges",
        "bins": 3,
        "edges": [0.1, 0.3],
        "source": "public (schema)",
        "integer": False,
        "nullable": True,
    }


def test_private_binning_is_replayable_from_the_root_key_and_uses_its_own_stream():
    same = [_release(seed=3).report["preprocessing"]["columns"]["age"]["edges"] for _ in range(2)]
    assert same[0] == same[1]
    edges = {tuple(_release(seed=s).report["preprocessing"]["columns"]["w"]["edges"]) for s in range(6)}
    assert len(edges) > 1  # the noise moves the cut points: they are read from noisy counts
    with pytest.raises(ValueError, match="binning_share"):
        _release(binning_share=1.0)
