"""Coding a raw table for a mechanism and decoding a release back to labels and units."""

import jax
import numpy as np
import pytest
from scipy import stats

from jaxdp import binning
from jaxdp.coding import TableCoding
from jaxdp.domain import Categorical, DataError, Dataset, Numeric
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
