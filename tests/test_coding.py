"""Coding a raw table for a mechanism and decoding a release back to labels and units."""

import jax
import numpy as np
import pytest
from scipy import stats

from jaxdp import binning
from jaxdp.coding import TableCoding
from jaxdp.domain import Categorical, DataError, Dataset, Numeric
from jaxdp.domain.encode import LABEL_MATCHING
from jaxdp.tables import TableSchema, parse_table

SCHEMA = TableSchema.from_json(
    {
        "columns": {
            "age": {"type": "numeric", "lower": 17, "upper": 90, "integer": True, "bins": 8},
            "w": {"type": "numeric", "lower": 0, "upper": 1, "edges": [0.1, 0.5], "nullable": True},
            "colour": {"type": "categorical", "categories": ["red", "blue"], "nullable": True},
            "level": {"type": "categorical", "size": 3},
        },
        "target": "level",
    }
)


def _table(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random(n)
    w[rng.random(n) < 0.1] = np.nan
    colour = rng.choice(np.array(["red", "blue", ""], dtype=object), n, p=[0.5, 0.4, 0.1])
    return parse_table(
        SCHEMA, {"age": rng.integers(17, 91, n), "w": w, "colour": colour, "level": rng.integers(0, 3, n)}
    )


def _coding(real=False):
    cuts = {} if real else {c.name: binning.public_cuts(c) for c in SCHEMA.numeric}
    return TableCoding(SCHEMA, cuts, real=real)


def test_the_coded_domain_adds_an_empty_level_only_where_nullable():
    domain = _coding().domain
    assert domain.names == ("age", "w", "colour", "level") and domain.target == "level"
    assert [a.size for a in domain.attributes] == [8, 3 + 1, 2 + 1, 3]
    assert domain["colour"].labels == ("red", "blue", "")
    real = _coding(real=True).domain
    assert real.names == ("age", "w", "w (empty)", "colour", "level")
    assert isinstance(real["w"], Numeric) and real["w (empty)"] == Categorical("w (empty)", 2)


@pytest.mark.parametrize("real", [False, True])
def test_decoding_the_coded_table_gives_back_its_bins_labels_and_empty_cells(real):
    coding, table = _coding(real), _table()
    coded = coding.encode(table)
    decoded = coding.decode(coded, jax.random.key(0))
    np.testing.assert_array_equal(decoded.codes["colour"], table.codes["colour"])
    np.testing.assert_array_equal(decoded.codes["level"], table.codes["level"])
    np.testing.assert_array_equal(np.isnan(decoded.values["w"]), np.isnan(table.values["w"]))
    again = coding.encode(decoded)  # every value lands in its original bin (real: its own value)
    np.testing.assert_array_equal(again.codes, coded.codes)
    if real:
        np.testing.assert_allclose(decoded.values["age"], table.values["age"])
        present = ~np.isnan(table.values["w"])
        np.testing.assert_allclose(decoded.values["w"][present], table.values["w"][present], atol=1e-6)
    ages = decoded.values["age"]
    assert np.all(ages == np.round(ages)) and ages.min() >= 17 and ages.max() <= 90


def test_values_are_drawn_uniformly_within_their_bin():
    """KS test against U[0.1, 0.5) of the decoded values of bin 1 of "w" (false-failure rate
    1e-3), with a negative control (the same draws against U[0.1, 0.3)) that must reject."""
    coding = _coding()
    n = 5000
    codes = np.zeros((n, 4), np.int32)
    codes[:, 1] = 1
    decoded = coding.decode(Dataset(coding.domain, codes, np.zeros((n, 0), np.float32)), jax.random.key(7))
    w = decoded.values["w"]
    assert w.min() >= 0.1 and w.max() < 0.5
    assert stats.kstest(w, stats.uniform(0.1, 0.4).cdf).pvalue > 1e-3
    assert stats.kstest(w, stats.uniform(0.1, 0.2).cdf).pvalue < 1e-6


def test_integer_values_are_uniform_over_the_whole_numbers_of_their_bin():
    """Chi-square over the whole numbers of age's bin 3 (false-failure rate 1e-3), with a
    negative control (a bin one number wider) that must reject."""
    coding = _coding()
    cuts = binning.public_cuts(SCHEMA["age"])
    first, last = int(cuts[2]), int(cuts[3]) - 1
    n = 9000
    codes = np.zeros((n, 4), np.int32)
    codes[:, 0] = 3
    ages = coding.decode(Dataset(coding.domain, codes, np.zeros((n, 0), np.float32)), jax.random.key(1))
    ages = ages.values["age"].astype(int)
    assert ages.min() == first and ages.max() == last
    counts = np.bincount(ages - first, minlength=last - first + 1)
    assert stats.chisquare(counts).pvalue > 1e-3
    wider = np.append(counts, 0)
    assert stats.chisquare(wider).pvalue < 1e-6


def test_decoding_is_a_function_of_the_key():
    coding, table = _coding(), _table(n=500)
    coded = coding.encode(table)
    a, b = (coding.decode(coded, jax.random.key(4)).values["w"] for _ in range(2))
    c = coding.decode(coded, jax.random.key(5)).values["w"]
    np.testing.assert_array_equal(a, b)
    present = ~np.isnan(a)
    assert not np.array_equal(a[present], c[present])


def test_a_release_over_another_domain_or_table_is_refused():
    coding = _coding()
    other = TableCoding(SCHEMA, {c.name: binning.equal_width_cuts(c, 4) for c in SCHEMA.numeric})
    with pytest.raises(ValueError, match="not over this coding's domain"):
        coding.decode(other.encode(_table(n=10)), jax.random.key(0))
    with pytest.raises(DataError, match="another schema"):
        TableCoding(TableSchema(SCHEMA.columns[2:]), {}).encode(_table(n=10))


PRIVATE = TableSchema.from_json(
    {
        "columns": {
            "age": {"type": "numeric", "lower": 17, "upper": 90, "integer": True, "binning": "quantiles"},
            "w": {"type": "numeric", "lower": 0, "upper": 1, "binning": "quantiles", "nullable": True},
        }
    }
)


def _private_coding(seed=0):
    """Quantile-like cuts (a subset of each column's fine cuts) and random fine weights, a fifth
    of them 0 and one bin's all 0."""
    rng = np.random.default_rng(seed)
    cuts, fine = {}, {}
    for c in PRIVATE.numeric:
        grid = binning.fine_cuts(c)
        cuts[c.name] = np.sort(rng.choice(grid, 6, replace=False))
        weights = rng.gamma(1.0, size=len(grid) + 1) * (rng.random(len(grid) + 1) > 0.2)
        starts = np.concatenate([[c.lower], grid])
        weights[binning.bin_codes(cuts[c.name], starts) == 2] = 0.0
        fine[c.name] = weights
    return TableCoding(PRIVATE, cuts, private=frozenset(fine), fine=fine), rng


def _decode_bin(coding, column, b, n, key):
    codes = np.zeros((n, 2), np.int32)
    codes[:, PRIVATE.names.index(column)] = b
    return coding.decode(Dataset(coding.domain, codes, np.zeros((n, 0), np.float32)), key).values[column]


@pytest.mark.parametrize("column", ["age", "w"])
def test_values_in_a_private_bin_follow_the_noisy_fine_histogram(column):
    """Bin 4's decoded values fall in its fine cells in proportion to their weights (chi-square,
    false-failure rate 1e-3; cells of weight 0 get none), uniformly within a cell (KS of the
    positions within their cells, 1e-3); the negative control, uniform over the bin's cells, must
    reject. Bin 2, all of whose weights are 0, is uniform over its width."""
    coding, _ = _private_coding()
    spec = PRIVATE[column]
    grid = binning.fine_cuts(spec)
    starts = np.concatenate([[spec.lower], grid])
    ends = np.concatenate([grid, [spec.upper]])
    if spec.integer:
        starts, ends = spec.whole_number_bins(grid)
    cell_bin = binning.bin_codes(coding.cuts[column], np.concatenate([[spec.lower], grid]))
    values = _decode_bin(coding, column, 4, 20_000, jax.random.key(3))
    cells = np.flatnonzero(cell_bin == 4)
    found = binning.bin_codes(grid, values)
    assert set(found) <= set(cells)
    counts = np.bincount(found, minlength=len(grid) + 1)[cells]
    weights = coding.fine[column][cells]
    assert np.all(counts[weights == 0] == 0)
    positive = weights > 0
    expected = weights[positive] / weights[positive].sum() * counts.sum()
    assert stats.chisquare(counts[positive], expected).pvalue > 1e-3
    width = (ends - starts + (1 if spec.integer else 0))[cells]
    assert stats.chisquare(counts, width / width.sum() * counts.sum()).pvalue < 1e-6
    if not spec.integer:
        position = (values - starts[found]) / (ends[found] - starts[found])
        assert stats.kstest(position, stats.uniform().cdf).pvalue > 1e-3
    flat = _decode_bin(coding, column, 2, 20_000, jax.random.key(4))
    flat_cells = np.flatnonzero(cell_bin == 2)
    flat_counts = np.bincount(binning.bin_codes(grid, flat), minlength=len(grid) + 1)[flat_cells]
    flat_width = (ends - starts + (1 if spec.integer else 0))[flat_cells]
    assert stats.chisquare(flat_counts, flat_width / flat_width.sum() * flat_counts.sum()).pvalue > 1e-3


def test_a_private_release_places_values_by_its_fine_histogram_and_says_so():
    """Through `preprocess.prepare`: the private columns carry their noisy fine counts (cells
    within the noise pooled over their bin), the report says how values are placed, and every
    decoded value re-encodes to its bin. "w" has two clusters, [0, 0.05) and [0.5, 0.55), so one quantile
    bin spans the empty gap between them: the fine histogram keeps its values near the clusters
    (0.3% land in the gap, on the noise of its empty cells, pooled; 2% with each cell's count
    clipped at 0), where the uniform spread of the same bins (the negative control)
    puts 7.5% there."""
    import dataclasses

    from jaxdp import preprocess
    from jaxdp.types import Neighboring

    rng = np.random.default_rng(0)
    n = 20_000
    w = np.where(rng.random(n) < 0.5, rng.uniform(0, 0.05, n), rng.uniform(0.5, 0.55, n))
    table = parse_table(PRIVATE, {"age": rng.integers(17, 91, n), "w": w})
    prepared = preprocess.prepare(
        table, real=False, epsilon=1.0, delta=1e-9, conversion="exact",
        relation=Neighboring.ADD_REMOVE, key=jax.random.key(0),
    )  # fmt: skip
    coding = prepared.coding
    assert set(coding.fine) == {"age", "w"}
    for c in PRIVATE.numeric:
        assert len(coding.fine[c.name]) == len(binning.fine_cuts(c)) + 1 and coding.fine[c.name].min() >= 0
        assert (
            coding.describe()[c.name]["within_bins"]
            == f"noisy fine histogram ({len(coding.fine[c.name])} cells)"
        )
    decoded = coding.decode(prepared.dataset, jax.random.key(1))
    np.testing.assert_array_equal(coding.encode(decoded).codes, prepared.dataset.codes)
    uniform = dataclasses.replace(coding, fine={}).decode(prepared.dataset, jax.random.key(1))
    in_gap = [np.mean((t.values["w"] > 0.06) & (t.values["w"] < 0.49)) for t in (decoded, uniform)]
    assert in_gap[0] < 0.01 < 0.06 < in_gap[1]


def test_a_pile_at_a_bound_is_released_as_that_value():
    """An integer amount that is 0 in 90% of rows and 99999 (a top code) in 1%, the rest spread
    thinly over (0, 99999): its coded table through private quantile bins at epsilon 1, decoded,
    keeps 0 and 99999 as values, each within half a point of its share (0.902 and 0.0116
    against 0.902 and 0.0088 with this key; zeroing the top bin's thin cells instead of pooling
    them put 1.6% at 99999). The negative control, a first cell that holds 0 with the next 780
    whole numbers (the equal-width grid's), decoded within it, puts well under 1% of the rows at
    0."""
    import dataclasses

    from jaxdp import preprocess
    from jaxdp.types import Neighboring

    schema = TableSchema.from_json(
        {"columns": {"gain": {"type": "numeric", "lower": 0, "upper": 99999, "integer": True}}}
    )
    rng = np.random.default_rng(0)
    n = 20_000
    u = rng.random(n)
    gain = np.where(u < 0.9, 0, np.where(u < 0.91, 99999, rng.integers(1, 99999, n)))
    table = parse_table(schema, {"gain": gain})
    prepared = preprocess.prepare(
        table, real=False, epsilon=1.0, delta=1e-9, conversion="exact",
        relation=Neighboring.ADD_REMOVE, key=jax.random.key(0),
    )  # fmt: skip
    released = prepared.coding.decode(prepared.dataset, jax.random.key(1)).values["gain"]
    assert abs(np.mean(released == 0) - np.mean(gain == 0)) < 0.005
    assert abs(np.mean(released == 99999) - np.mean(gain == 99999)) < 0.005
    coarse = dataclasses.replace(prepared.coding, cuts={"gain": np.array([781.0])}, fine={})
    spread = coarse.decode(coarse.encode(table), jax.random.key(1)).values["gain"]
    assert np.mean(spread == 0) < 0.01


def test_labels_with_surrounding_spaces_meet_their_categories_and_the_report_says_so():
    """Raw UCI Adult writes " State-gov": such a label is its category, and the description a
    report carries states the rule (a fixed sentence: a count of changed cells would read the
    data), for labelled categorical columns only."""
    spaced = _table()
    table = parse_table(
        SCHEMA,
        {
            "age": spaced.values["age"],
            "w": spaced.values["w"],
            "colour": np.array([f"  {v} " if v else v for v in _table().columns()["colour"]], dtype=object),
            "level": spaced.codes["level"],
        },
    )
    np.testing.assert_array_equal(table.codes["colour"], spaced.codes["colour"])
    described = _coding().describe()
    assert described["colour"]["labels"] == LABEL_MATCHING  # the same fixed words for every table
    assert "labels" not in described["level"] and "labels" not in described["age"]
