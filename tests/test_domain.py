"""Domains, encoding, decoding and refusal of bad input (without leaking values)."""

import io
import json

import numpy as np
import pytest

from jaxdp.domain import (
    Categorical,
    DataError,
    Dataset,
    Domain,
    Numeric,
    domain_from_schema,
    load_domain,
    read_csv,
    write_csv,
)

SCHEMA = {
    "columns": {
        "age": {"type": "numeric", "lower": 17, "upper": 90},
        "sex": {"type": "categorical", "categories": ["Female", "Male"]},
        "level": {"type": "categorical", "size": 3},
    },
    "target": "sex",
}


@pytest.fixture
def domain():
    return domain_from_schema(SCHEMA)


def _csv(text: str) -> io.StringIO:
    return io.StringIO(text)


def test_schema_round_trip(domain):
    assert domain_from_schema(domain.to_json()) == domain
    assert domain.names == ("age", "sex", "level")
    assert domain.sizes == (2, 3)
    assert domain.target == "sex"
    assert domain.one_hot_offsets() == (0, 1, 3)
    assert domain.one_hot_width == 6


def test_sizes_form(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"a": 3, "b": 2}))
    dom = load_domain(path)
    assert dom.sizes == (3, 2) and dom.n_cells == 6 and dom.is_categorical


def test_encode_decode_round_trip_with_labels_and_units(domain, tmp_path):
    data = read_csv(_csv("age,sex,level\n17,Female,0\n90, Male ,2\n53.5,Male,1\n"), domain)
    assert data.codes.tolist() == [[0, 0], [1, 2], [1, 1]]
    np.testing.assert_allclose(data.numeric[:, 0], [0.0, 1.0, (53.5 - 17) / 73], rtol=1e-6)
    out = tmp_path / "out.csv"
    write_csv(out, data)
    again = read_csv(out, domain)
    np.testing.assert_array_equal(again.codes, data.codes)
    np.testing.assert_allclose(again.numeric, data.numeric, atol=1e-6)
    cols = again.to_columns()
    assert cols["sex"].tolist() == ["Female", "Male", "Male"]
    np.testing.assert_allclose(cols["age"], [17, 90, 53.5], atol=1e-4)


def test_one_hot_blocks(domain):
    data = Dataset.from_codes(domain, np.array([[1, 2]]), np.array([[90.0]]))
    np.testing.assert_array_equal(data.one_hot(), [[1.0, 0, 1, 0, 0, 1]])


SECRET = "31337"  # a value that must never appear in an error message


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (f"age,sex,level\n{SECRET},Male,0\n", r"'age': 1 value\(s\) outside the declared bounds"),
        ("age,sex,level\nnan,Male,0\n", r"'age': 1 value\(s\) are NaN"),
        ("age,sex,level\ninf,Male,0\n", r"'age': 1 value\(s\) are NaN"),
        ("age,sex,level\n,Male,0\n", r"'age': 1 empty cell\(s\); declare \"nullable\": true"),
        (f"age,sex,level\n20,{SECRET},0\n20,Other,1\n", r"'sex': 2 value\(s\) are not among its 2"),
        ("age,sex,level\n20,Male,3\n", r"'level': 1 code\(s\) outside \[0, 3\)"),
        ("age,sex,level\n20,Male,-1\n", r"'level': 1 code\(s\) outside"),
        ("age,sex,level\n20,Male,1.5\n", r"'level': 1 value\(s\) are not integers"),
        (f"age,sex,level\n20,Male,x{SECRET}\n", r"'level': 1 value\(s\) are not numbers"),
        ("age,sex\n20,Male\n", r"missing columns declared in the domain: \['level'\]"),
        ("age,sex,level,extra\n20,Male,1,0\n", r"columns not declared in the domain: \['extra'\]"),
        ("age,sex,sex,level\n20,Male,Male,1\n", r"duplicate columns: \['sex'\]"),
        ("age,sex,level\n", "empty"),
        ("age,sex,level\n20,Male\n", "do not have 3 fields"),
        ("", "no header"),
    ],
)
def test_bad_input_is_refused_with_column_and_count(domain, text, match):
    with pytest.raises(DataError, match=match) as err:
        read_csv(_csv(text), domain)
    assert SECRET not in str(err.value)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Categorical("a", 0), "size must be an integer >= 1"),
        (lambda: Categorical("a", -2), "size must be an integer >= 1"),
        (lambda: Categorical("a", 2, ("x", "x")), "distinct"),
        (lambda: Numeric("x", 1.0, 1.0), "lower < upper"),
        (lambda: Numeric("x", float("nan"), 1.0), "finite"),
        (lambda: Domain(()), "at least one attribute"),
        (lambda: Domain((Categorical("a", 2), Categorical("a", 3))), "duplicate attribute"),
        (lambda: Domain.from_sizes({"a": 2.5}), "'a': size must be an integer"),
        (lambda: domain_from_schema({"columns": {"a": {"type": "text"}}}), "'a'"),
        (lambda: domain_from_schema({"columns": {"a": {"type": "numeric", "lower": 0}}}), '"upper"'),
        (lambda: domain_from_schema({"columns": {"a": {"type": "categorical"}}}), "categories"),
        (lambda: Domain((Numeric("x", 0.0, 1.0),), target="x"), "target"),
    ],
)
def test_bad_domains_are_refused(build, match):
    with pytest.raises(DataError, match=match):
        build()


def test_from_codes_validates_arrays():
    dom = Domain.from_sizes({"a": 2, "b": 3})
    with pytest.raises(DataError, match=r"'b': 1 code\(s\) outside"):
        Dataset.from_codes(dom, np.array([[0, 3], [1, 1]]))
    with pytest.raises(DataError, match="shape"):
        Dataset.from_codes(dom, np.array([0, 1]))
    with pytest.raises(DataError, match="empty"):
        Dataset.from_codes(dom, np.zeros((0, 2), int))
    ok = Dataset.from_codes(dom, np.array([[0, 2], [1, 1]]))
    assert ok.codes.dtype == np.int32 and len(ok) == 2


def test_unreadable_file_is_named(tmp_path, domain):
    with pytest.raises(DataError, match="cannot read CSV"):
        read_csv(tmp_path / "missing.csv", domain)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="cannot read domain file"):
        load_domain(bad)


def test_checked_numeric_keeps_its_name_and_counts_bad_values():
    from jaxdp.domain import Numeric, checked_numeric

    income = Numeric("income", 0.0, 100.0)
    np.testing.assert_array_equal(checked_numeric(income, ["1", 2.5, np.int64(100)]), [1.0, 2.5, 100.0])
    for values, message in (([101.0, -1.0], "2 value"), (["x"], "not numbers"), ([np.inf], "NaN, infinite")):
        with pytest.raises(DataError, match=rf"'income': .*{message}"):
            checked_numeric(income, values)
