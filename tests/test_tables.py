"""Table schemas (bins, edges, integer, nullable): parsing, bad declarations, raw values."""

import io
import json

import numpy as np
import pytest

from jaxdp.domain import DataError, load_domain
from jaxdp.tables import CategoricalColumn, NumericColumn, TableSchema, empty_cells, parse_table, read_table


def _schema(**age):
    spec = {"type": "numeric", "lower": 17, "upper": 90, **age}
    return {"columns": {"age": spec, "sex": {"type": "categorical", "categories": ["F", "M"]}}}


def test_the_documented_keys_parse_into_columns():
    schema = TableSchema.from_json(
        {
            "columns": {
                "a": {"type": "numeric", "lower": 0, "upper": 10, "bins": 4, "integer": True},
                "b": {"type": "numeric", "lower": 0, "upper": 1, "edges": [0.25, 0.5], "nullable": True},
                "c": {"type": "numeric", "lower": -1, "upper": 1, "binning": "quantiles", "bins": 8},
                "d": {"type": "numeric", "lower": -1, "upper": 1},
                "e": {"type": "categorical", "categories": ["x", " y "], "nullable": True},
                "f": {"type": "categorical", "size": 3},
            },
            "target": "f",
        }
    )
    a, b, c, d, e, f = schema.columns
    assert a == NumericColumn("a", 0.0, 10.0, integer=True, binning="equal-width", bins=4)
    assert b == NumericColumn("b", 0.0, 1.0, nullable=True, binning="edges", edges=(0.25, 0.5))
    assert c == NumericColumn("c", -1.0, 1.0, binning="quantiles", bins=8)
    assert d == NumericColumn("d", -1.0, 1.0)  # neither: the documented default applies
    assert e == CategoricalColumn("e", 2, ("x", "y"), nullable=True)
    assert f == CategoricalColumn("f", 3)
    assert schema.target == "f" and schema.names == ("a", "b", "c", "d", "e", "f")


def test_the_shipped_adult_schema_still_parses_as_a_domain_and_a_table_schema():

    path = "examples/adult_schema.json"
    table, domain = TableSchema.load(path), load_domain(path)
    assert table.names == domain.names and table.target == domain.target == "income>50K"
    assert all(c.integer for c in table.numeric) and len(table.numeric) == 6


def test_the_shipped_raw_adult_sample_reads_under_the_shipped_schema():
    """The guide's raw-table commands run in a clone: the sample's 1,000 records, labels with the
    file's leading spaces, all meet the schema (no category unknown, no value out of bounds)."""
    table = read_table("examples/adult-raw-sample.csv", TableSchema.load("examples/adult_schema.json"))
    assert len(table) == 1000
    assert set(table.columns()["sex"]) == {"Female", "Male"}  # " Male" in the file


@pytest.mark.parametrize(
    ("age", "message"),
    [
        ({"edges": [30, 30, 50]}, '"edges" must be strictly increasing'),
        ({"edges": [50, 30]}, '"edges" must be strictly increasing'),
        ({"edges": [10, 30]}, "strictly between the bounds (17, 90)"),
        ({"edges": [17, 30]}, "strictly between the bounds (17, 90)"),
        ({"edges": [30, 95]}, "strictly between the bounds (17, 90)"),
        ({"edges": []}, "non-empty list of cut points"),
        ({"edges": "30"}, "non-empty list of cut points"),
        ({"edges": [30, float("nan")]}, "finite numbers"),
        ({"edges": [30, True]}, "finite numbers"),
        ({"bins": 0}, '"bins" must be an integer >= 1'),
        ({"bins": -3}, '"bins" must be an integer >= 1'),
        ({"bins": 2.5}, '"bins" must be an integer >= 1'),
        ({"bins": True}, '"bins" must be an integer >= 1'),
        ({"bins": 4, "edges": [30]}, 'give "edges" or "bins"/"binning", not both'),
        ({"binning": "quantiles", "edges": [30]}, 'give "edges" or "bins"/"binning", not both'),
        ({"binning": "kmeans"}, '"binning" must be one of'),
        ({"integer": "yes"}, '"integer" must be true or false'),
        ({"nullable": 1}, '"nullable" must be true or false'),
        ({"bin": 4}, "unknown key(s) ['bin']"),
        ({"integer": True, "bins": 75}, '"bins" = 75 exceeds the 74 whole numbers in [17, 90]'),
        ({"integer": True, "edges": [30.2, 30.7]}, "leave 1 bin(s) without a whole number"),
        ({"lower": 90, "upper": 17}, "bounds must be finite numbers with lower < upper"),
        ({"lower": 17.2, "upper": 17.8, "integer": True}, "no whole number lies within the bounds"),
        ({"upper": "90"}, 'needs a number "upper"'),
    ],
)
def test_bad_declarations_name_the_column(age, message):
    with pytest.raises(DataError) as err:
        TableSchema.from_json(_schema(**age))
    assert str(err.value).startswith("column 'age': ") and message in str(err.value)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"columns": {"s": {"type": "categorical", "categories": ["a", ""]}}}, "column 's': a category"),
        ({"columns": {"s": {"type": "categorical", "size": 2, "categories": ["a", "b"]}}}, "not both"),
        ({"columns": {"s": {"type": "categorical", "size": 0}}}, "column 's': size must be"),
        ({"columns": {"s": {"type": "categorical", "categories": "ab"}}}, "must be a list of labels"),
        ({"columns": {"s": {"type": "text"}}}, "column 's': \"type\""),
        ({"columns": {"s": {"type": "categorical", "size": 2, "labels": 1}}}, "unknown key(s) ['labels']"),
        ({"columns": {}}, 'non-empty "columns"'),
        ({"columns": {"s": {"type": "categorical", "size": 2}}, "targett": "s"}, "unknown key(s)"),
        ({"columns": {"s": {"type": "numeric", "lower": 0, "upper": 1}}, "target": "s"}, "categorical"),
        ({"columns": {"s": {"type": "categorical", "size": 2}}, "target": "t"}, "not a column"),
    ],
)
def test_bad_schemas_are_refused_clearly(schema, message):
    with pytest.raises(DataError) as err:
        TableSchema.from_json(schema)
    assert message in str(err.value)


def test_empty_cells_in_any_container_form():
    assert empty_cells(["", " ", "a", "  b"]).tolist() == [True, True, False, False]
    assert empty_cells(np.array([1.0, np.nan])).tolist() == [False, True]
    assert empty_cells(np.array([1, 2])).tolist() == [False, False]
    assert empty_cells(np.array([None, "x", np.float32("nan"), 3], dtype=object)).tolist() == [
        True,
        False,
        True,
        False,
    ]


CSV = "age,sex\n39, M\n, F\n50,\n61.5, M\n"


def test_nullable_columns_keep_empty_cells_and_others_refuse_them_with_a_count():
    nullable = {
        "columns": {
            "age": {"type": "numeric", "lower": 17, "upper": 90, "nullable": True},
            "sex": {"type": "categorical", "categories": ["F", "M"], "nullable": True},
        }
    }
    table = read_table(io.StringIO(CSV), TableSchema.from_json(nullable))
    np.testing.assert_array_equal(table.values["age"], [39.0, np.nan, 50.0, 61.5])
    np.testing.assert_array_equal(table.codes["sex"], [1, 0, -1, 1])
    columns = table.columns()
    assert columns["sex"].tolist() == ["M", "F", None, "M"]
    for strict in ("age", "sex"):
        declared = json.loads(json.dumps(nullable))
        declared["columns"][strict]["nullable"] = False
        with pytest.raises(DataError) as err:
            read_table(io.StringIO(CSV), TableSchema.from_json(declared))
        assert str(err.value) == (
            f'column {strict!r}: 1 empty cell(s); declare "nullable": true if an empty cell is a value'
        )


def test_integer_columns_refuse_fractions_without_showing_them():
    schema = TableSchema.from_json(_schema(integer=True))
    with pytest.raises(DataError) as err:
        parse_table(schema, {"age": ["39", "61.5", "40"], "sex": ["M", "F", "M"]})
    assert "'age': 1 value(s) are not whole numbers" in str(err.value) and "61.5" not in str(err.value)
    table = parse_table(schema, {"age": ["39", "61", "40"], "sex": ["M", "F", "M"]})
    assert table.columns()["age"].dtype == np.int64


def test_values_outside_bounds_and_unknown_labels_keep_their_messages():
    schema = TableSchema.from_json(_schema())
    with pytest.raises(DataError, match=r"'age': 2 value\(s\) outside the declared bounds \[17, 90\]"):
        parse_table(schema, {"age": [16, 91, 40], "sex": ["M", "F", "M"]})
    with pytest.raises(DataError, match="'sex': 1 value"):
        parse_table(schema, {"age": [20, 30, 40], "sex": ["M", "X", "M"]})
    with pytest.raises(DataError, match="empty"):
        parse_table(schema, {"age": [], "sex": []})
    with pytest.raises(DataError, match="not declared"):
        parse_table(schema, {"age": [20], "sex": ["M"], "extra": [1]})
