"""One schema, one encoder (issue #26): every refusal of a bad cell is written in one module,
jaxdp/domain/encode.py, and every container a table comes in goes through it and back unchanged.

The first half reads the package's source with `ast`: the string constants of each module (the
literal parts of f-strings included; docstrings left out, since a docstring may quote a message
it does not raise) must hold each bad-cell message fragment in exactly one module. A second copy
of a message, say in a module that validates its own input, fails it (negative control).

The second half round-trips tables through every container: ADULT (the bundled reduced data),
raw Adult with examples/adult_schema.json (../shared/data, skipped when absent) and a small
table with empty cells in nullable columns.
"""

from __future__ import annotations

import ast
import functools
import io
from pathlib import Path

import numpy as np
import pytest

from jaxdp import datasets
from jaxdp.domain import (
    RawTable,
    TableSchema,
    empty_cells,
    like,
    read_table,
    table_from,
    write_columns,
)

from .conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxdp"
ENCODER = "jaxdp/domain/encode.py"
FRAGMENTS = (
    "empty cell(s)",
    "are not among",
    "are not numbers",
    "are NaN, infinite",
    "are not integers",
    "outside the declared bounds",
    "code(s) outside",
    "columns have different lengths",
    "the table is empty",
    "missing columns declared",
    "columns not declared",
)


def string_constants(source: str) -> set[str]:
    """The string constants of a module, f-string literal parts included, docstrings left out."""
    tree = ast.parse(source)
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, documented)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def homes(sources: dict[str, str], fragment: str) -> list[str]:
    """The modules (by path) whose string constants hold `fragment`."""
    return sorted(
        path for path, text in sources.items() if any(fragment in s for s in string_constants(text))
    )


def package_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_each_bad_cell_message_lives_in_the_encoder_only(fragment):
    assert homes(package_sources(), fragment) == [ENCODER]


def test_negative_control_a_second_copy_of_a_message_is_flagged():
    sources = package_sources()
    sources["jaxdp/second_reader.py"] = (
        "def check(name, bad):\n"
        "    if bad:\n"
        '        raise ValueError(f"column {name!r}: {bad} value(s) are not numbers")\n'
    )
    assert homes(sources, "are not numbers") == [ENCODER, "jaxdp/second_reader.py"]


def test_a_docstring_quoting_a_message_is_not_a_copy():
    quoting = '"""Refuses cells: "column \'x\': 2 value(s) are not numbers"."""\n'
    assert homes({"jaxdp/quoting.py": quoting}, "are not numbers") == []


# --- every container, there and back ------------------------------------------------------------

NULLABLE = TableSchema.from_json(
    {
        "columns": {
            "colour": {"type": "categorical", "categories": ["red", "green"], "nullable": True},
            "level": {"type": "categorical", "size": 3, "nullable": True},
            "income": {"type": "numeric", "lower": 0, "upper": 1000, "nullable": True},
            "age": {"type": "numeric", "lower": 17, "upper": 90, "integer": True},
        }
    }
)
NULLABLE_COLUMNS = {
    "colour": ["red", None, "green", "red"],
    "level": [0, 2, None, 1],
    "income": [10.5, 999.0, 0.0, np.nan],
    "age": [17, 90, 40, 33],
}


@functools.cache
def _adult_reduced() -> tuple[TableSchema, dict[str, np.ndarray]]:
    schema = TableSchema.from_domain(datasets.domain("adult-reduced"))
    return schema, table_from(datasets.load("adult-reduced").to_columns(), schema).columns()


@functools.cache
def _raw_adult() -> tuple[TableSchema, dict[str, np.ndarray]]:
    path = SHARED_DATA / "dp-data-raw-adult" / "train.csv"
    if not path.is_file():
        pytest.skip("../shared/data (raw Adult) is not beside this checkout (only CI and developers have it)")
    schema = TableSchema.load(ROOT / "examples" / "adult_schema.json")
    return schema, read_table(path, schema).columns()


@functools.cache
def _nullable() -> tuple[TableSchema, dict[str, np.ndarray]]:
    return NULLABLE, table_from(NULLABLE_COLUMNS, NULLABLE).columns()


TABLES = {"adult-reduced": _adult_reduced, "raw adult": _raw_adult, "nullable": _nullable}


def assert_same_cells(got, expected) -> None:
    """Equal cell by cell, an empty cell (None, NaN) equal to any other empty cell."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape
    empty = empty_cells(expected.ravel())
    np.testing.assert_array_equal(empty_cells(got.ravel()), empty)
    np.testing.assert_array_equal(got.ravel()[~empty], expected.ravel()[~empty])


def _numeric_array(table: RawTable) -> np.ndarray:
    """The table as a numeric array: codes for every categorical column, NaN where empty."""
    columns = [
        np.where(table.codes[n] < 0, np.nan, table.codes[n]) if n in table.codes else table.values[n]
        for n in table.schema.names
    ]
    return np.stack(columns, axis=1)


@pytest.mark.parametrize("name", list(TABLES))
def test_a_dict_of_columns_comes_back_as_it_went_in(name):
    schema, columns = TABLES[name]()
    back = like(columns, table_from(columns, schema))
    assert list(back) == list(columns)
    for n in columns:
        assert back[n].dtype == columns[n].dtype, n
        assert_same_cells(back[n], columns[n])


@pytest.mark.parametrize("name", list(TABLES))
def test_a_dataframe_comes_back_as_it_went_in(name):
    pd = pytest.importorskip("pandas")
    schema, columns = TABLES[name]()
    frame = pd.DataFrame(columns)
    back = like(frame, table_from(frame, schema))
    pd.testing.assert_frame_equal(back, frame)


@pytest.mark.parametrize("name", list(TABLES))
def test_an_object_array_comes_back_as_it_went_in(name):
    schema, columns = TABLES[name]()
    array = np.stack([np.asarray(columns[n], dtype=object) for n in schema.names], axis=1)
    back = like(array, table_from(array, schema))
    assert back.dtype == object
    assert_same_cells(back, array)


@pytest.mark.parametrize("name", list(TABLES))
def test_a_numeric_array_of_codes_comes_back_as_it_went_in(name):
    schema, columns = TABLES[name]()
    array = _numeric_array(table_from(columns, schema))
    table = table_from(array, schema)
    assert table.schema == schema  # labelled columns read from codes keep their labels
    back = like(array, table)
    complete = not np.isnan(array).any() and not table.values
    assert back.dtype == (np.int32 if complete else np.float64)
    assert_same_cells(back, array)


@pytest.mark.parametrize("name", list(TABLES))
def test_a_csv_file_comes_back_as_it_went_in(name, tmp_path):
    schema, columns = TABLES[name]()
    text = io.StringIO()
    write_columns(text, columns)
    path = tmp_path / "table.csv"
    path.write_text(text.getvalue())
    back = read_table(path, schema).columns()
    for n in columns:
        assert_same_cells(back[n], columns[n])
    again = io.StringIO()
    write_columns(again, back)
    assert again.getvalue() == text.getvalue()


def test_the_nullable_table_holds_its_empty_cells():
    table = table_from(NULLABLE_COLUMNS, NULLABLE)
    assert table.codes["colour"].tolist() == [0, -1, 1, 0]
    assert table.codes["level"].tolist() == [0, 2, -1, 1]
    assert np.isnan(table.values["income"]).tolist() == [False, False, False, True]


@pytest.mark.parametrize("name", list(TABLES))
def test_an_arrow_table_comes_back_as_it_went_in(name):
    pyarrow = pytest.importorskip("pyarrow", reason="the arrow extra is not installed")
    schema, columns = TABLES[name]()
    arrow = pyarrow.table({n: pyarrow.array(c, from_pandas=True) for n, c in columns.items()})
    table = table_from(arrow, schema)
    back = like(arrow, table)
    assert isinstance(back, pyarrow.Table) and back.column_names == arrow.column_names
    for n in columns:
        assert_same_cells(back.column(n).to_numpy(zero_copy_only=False), columns[n])
        assert back.column(n).null_count == arrow.column(n).null_count  # empty cells stay nulls


@pytest.mark.parametrize("name", list(TABLES))
def test_a_parquet_file_comes_back_as_it_went_in(name, tmp_path):
    pytest.importorskip("pyarrow", reason="the arrow extra is not installed")
    import pyarrow
    import pyarrow.parquet

    schema, columns = TABLES[name]()
    path = tmp_path / "table.parquet"
    pyarrow.parquet.write_table(
        pyarrow.table({n: pyarrow.array(c, from_pandas=True) for n, c in columns.items()}), path
    )
    back = read_table(path, schema).columns()
    for n in columns:
        assert_same_cells(back[n], columns[n])
