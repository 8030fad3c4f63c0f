"""The CSV readers: NumPy's compiled reader for files of numbers, the text reader for the rest.

`read_table` and `read_csv` parse a file whose columns all hold numbers with `np.loadtxt`, and
hand anything else to the text reader; both feed the one encoder. These tests pin that the
compiled path is taken where it should be (so the agreement below is not the text reader
agreeing with itself) and that the two readers give the same table, or the same message, on
every case, bundled ADULT included.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.domain import DataError, Dataset, Domain, TableSchema, read_columns, read_csv, read_table, text

SIZES = Domain.from_sizes({"a": 3, "b": 4})
MIXED = TableSchema.from_json(
    {
        "columns": {
            "a": {"type": "categorical", "size": 3},
            "x": {"type": "numeric", "lower": 0, "upper": 10, "nullable": True},
        }
    }
)


def outcome(read):
    """("ok", codes and values) or ("error", the message), for comparing two readers."""
    try:
        got = read()
    except DataError as err:
        return "error", str(err)
    if isinstance(got, Dataset):
        return "ok", got.codes.tolist(), got.numeric.tolist()
    return (
        "ok",
        {n: np.asarray(c).tolist() for n, c in got.codes.items()},
        {n: np.where(np.isnan(v), -1.0, v).tolist() for n, v in got.values.items()},
    )


@pytest.mark.parametrize(
    ("content", "compiled"),
    [
        ("a,b\n0,1\n2,3\n", True),
        ("a,b\n 0, 1\n\n2 ,3\n", True),  # spaces around cells, a blank line
        ("b,a\n1,0\n", True),  # columns in another order
        ("a,b\n0,4\n", True),  # a code outside the size: parsed, then refused by the encoder
        ("a,b\n-1,0\n", True),
        ("a,b\n", True),  # no records
        ("a,b\n0,1.0\n", False),  # a whole number written as a float
        ("a,b\n0,\n", False),  # an empty cell
        ("a,b\nx,1\n", False),  # not a number
        ("a,b\n0,1,2\n", False),  # a ragged row
        ('a,b\n"0",1\n', False),  # quoted
        ("a,b\n99999999999,1\n", False),  # beyond int32
        ("a,c\n0,1\n", False),  # a column the domain lacks
        ("a,b\n  ,  \n0,1\n", False),  # a row of blank cells, skipped by the text reader
        ("a,b\n0,1.5\n", False),  # a fraction in a code column (NumPy < 2 truncated it, warning)
        ("a,b\r\n0,1\r\n2,3\r\n", True),  # Windows line ends
        ("\ufeffa,b\n0,1\n", True),  # a byte-order mark (Excel's "CSV UTF-8"): not part of a name
        ("a,b\n0,1\n0,1\n" + "2,3\n" * 5000 + "1,x\n", False),  # a bad cell far down the file
    ],
)
def test_the_compiled_reader_and_the_text_reader_agree(content, compiled, tmp_path):
    path = tmp_path / "table.csv"
    path.write_text(content)
    schema = TableSchema.from_domain(SIZES)
    assert (text._read_numbers(path, schema) is not None) == compiled
    assert outcome(lambda: read_csv(path, SIZES)) == outcome(
        lambda: Dataset.from_columns(SIZES, read_columns(path))
    )


@pytest.mark.parametrize(
    ("content", "compiled"),
    [
        ("a,x\n0,2.5\n1,10\n", True),
        ("a,x\n0,inf\n", True),  # parsed, then refused by the encoder
        ("a,x\n0,11\n", True),
        ("a,x\n0,nan\n", False),  # text "nan" is a value that is no number, not an empty cell
        ("a,x\n0,\n2,1e1\n", False),  # an empty cell of a nullable column
    ],
    ids=["values", "inf", "outside", "nan", "empty"],
)
def test_numeric_and_nullable_columns_read_alike(content, compiled, tmp_path):
    path = tmp_path / "table.csv"
    path.write_text(content)
    assert (text._read_numbers(path, MIXED) is not None) == compiled
    got = outcome(lambda: read_table(path, MIXED))
    assert got == outcome(lambda: jaxdp.domain.parse_table(MIXED, read_columns(path)))
    if "nan" in content:
        assert got[0] == "error" and "NaN, infinite" in got[1]


def test_a_byte_order_mark_is_read_by_every_reader(tmp_path):
    """Excel's "CSV UTF-8" starts with a byte-order mark: the compiled reader, the text reader
    (labels), gzip, a stream the caller opened, and a schema file with one all read the header
    as written."""
    bom = "\ufeff"
    numbers = tmp_path / "numbers.csv"
    numbers.write_text(bom + "a,b\n0,1\n2,3\n", encoding="utf-8")
    assert text._read_numbers(numbers, TableSchema.from_domain(SIZES)) is not None
    assert read_csv(numbers, SIZES).codes.tolist() == [[0, 1], [2, 3]]
    packed = tmp_path / "numbers.csv.gz"
    packed.write_bytes(gzip.compress(numbers.read_bytes()))
    assert read_csv(packed, SIZES).codes.tolist() == [[0, 1], [2, 3]]
    with numbers.open(encoding="utf-8") as stream:  # the BOM reaches the reader as a character
        assert read_csv(stream, SIZES).codes.tolist() == [[0, 1], [2, 3]]
    labelled = tmp_path / "labelled.csv"
    labelled.write_text(bom + "colour,x\nred,2.5\nblue,\n", encoding="utf-8")
    schema = {
        "columns": {
            "colour": {"type": "categorical", "categories": ["red", "blue"]},
            "x": {"type": "numeric", "lower": 0, "upper": 10, "nullable": True},
        }
    }
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(bom + json.dumps(schema), encoding="utf-8")
    table = read_table(labelled, TableSchema.load(schema_file))
    assert np.asarray(table.codes["colour"]).tolist() == [0, 1]
    assert jaxdp.load_domain(schema_file).names == ("colour", "x")


def test_a_stream_and_labelled_columns_go_to_the_text_reader(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("a,b\n0,1\n")
    with path.open() as stream:
        assert text._read_numbers(stream, TableSchema.from_domain(SIZES)) is None
    labelled = TableSchema.from_json(
        {"columns": {"a": {"type": "categorical", "categories": ["0", "1", "2"]}}}
    )
    assert text._read_numbers(path, labelled) is None


@pytest.mark.parametrize("name", jaxdp.datasets.NAMES)
def test_bundled_data_reads_through_the_compiled_reader_as_through_the_text_reader(name):
    domain = jaxdp.datasets.domain(name).without_labels()  # the shipped files hold codes
    with resources.as_file(resources.files(jaxdp.datasets) / f"{name}.csv.gz") as path:
        assert text._read_numbers(path, TableSchema.from_domain(domain)) is not None
        fast = read_csv(path, domain)
        slow = Dataset.from_columns(domain, read_columns(path))
    np.testing.assert_array_equal(fast.codes, slow.codes)
    assert fast.codes.dtype == np.int32 and fast.domain == domain


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ({"a": [0, 5], "x": [1.0, 2.0]}, r"'a': 1 code\(s\) outside \[0, 3\)"),
        ({"a": [0, 1], "x": [1.0, 12.0]}, r"'x': 1 value\(s\) outside the declared bounds"),
        ({"a": [0, None], "x": [1.0, 2.0]}, r"'a': 1 empty cell\(s\)"),
        ({"a": [0, 1]}, r"missing columns declared in the domain: \['x'\]"),
    ],
    ids=["code outside", "value outside", "empty cell", "missing column"],
)
def test_parquet_and_arrow_input_get_the_encoders_messages(cells, message, tmp_path):
    pytest.importorskip("pyarrow", reason="the arrow extra is not installed")
    import pyarrow
    import pyarrow.parquet

    arrow = pyarrow.table(cells)
    path = tmp_path / "bad.parquet"
    pyarrow.parquet.write_table(arrow, path)
    for read in (lambda: jaxdp.domain.table_from(arrow, MIXED), lambda: read_table(path, MIXED)):
        with pytest.raises(DataError, match=message):
            read()


def test_an_unreadable_parquet_file_is_named_without_its_content(tmp_path):
    pytest.importorskip("pyarrow", reason="the arrow extra is not installed")
    path = tmp_path / "broken.parquet"
    path.write_text("a,x\n0,1\n")
    with pytest.raises(DataError, match=r"cannot read Parquet .*broken\.parquet.*: Arrow"):
        read_table(path, MIXED)


def test_synthesize_takes_and_returns_an_arrow_table():
    pyarrow = pytest.importorskip("pyarrow", reason="the arrow extra is not installed")
    data = jaxdp.datasets.load("adult-reduced")
    arrow = pyarrow.table(data.to_columns())
    result = jaxdp.synthesize(
        arrow, data.domain, mechanism="independent", epsilon=1.0, workload="all-1way", key=jax.random.key(0)
    )
    assert isinstance(result.data, pyarrow.Table) and result.data.column_names == list(data.domain.names)
    assert result.data.num_rows == len(data)
    first = data.domain.attributes[0]  # labelled: the container holds labels, as it came in
    np.testing.assert_array_equal(
        result.data.column(first.name).to_numpy(zero_copy_only=False),
        np.asarray(first.labels, dtype=object)[result.synthetic.codes[:, 0]],
    )


SECRET = "4815162342"


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
@pytest.mark.parametrize("cell", [SECRET, SECRET + ".5", "-" + SECRET, SECRET + "e400"])
def test_no_cell_reaches_an_error_through_either_reader(cell, suffix, tmp_path):
    # NumPy's reader quotes the cell it refuses; its error must never surface, chained or not.
    import gzip

    path = tmp_path / f"table{suffix}"
    content = f"a,b\n0,1\n{cell},2\n"
    path.write_bytes(gzip.compress(content.encode()) if suffix.endswith(".gz") else content.encode())
    with pytest.raises(DataError) as caught:
        read_csv(path, SIZES)
    assert SECRET not in str(caught.value)
    assert caught.value.__context__ is None and caught.value.__cause__ is None


def test_a_pipe_is_read_by_the_text_reader_once(tmp_path):
    import os

    read_end, write_end = os.pipe()
    os.write(write_end, b"a,b\n0,1\n2,\n")
    os.close(write_end)
    with pytest.raises(DataError, match=r"'b': 1 empty cell"):  # not "no header row"
        read_csv(f"/dev/fd/{read_end}", SIZES)
    os.close(read_end)


def test_a_table_checked_against_another_schema_is_refused_as_a_dataset():
    table = jaxdp.domain.parse_table(MIXED, {"a": [0, 1], "x": [1.0, None]})
    with pytest.raises(DataError, match="not checked against this domain's schema"):
        Dataset.from_table(Domain.from_sizes({"a": 3, "x": 2}), table)


def test_duplicate_columns_are_refused_whatever_the_container():
    pandas = pytest.importorskip("pandas", reason="the pandas extra is not installed")
    frame = pandas.DataFrame([[0, 1, 2]], columns=["a", "b", "a"])
    with pytest.raises(DataError, match=r"duplicate columns: \['a'\]"):
        Dataset.from_columns(SIZES, frame)


def test_answers_from_an_arrow_table_come_back_as_one():
    pyarrow = pytest.importorskip("pyarrow", reason="the arrow extra is not installed")
    data = jaxdp.datasets.load("adult-reduced")
    answers = jaxdp.synthesize(
        pyarrow.table(data.to_columns()),
        data.domain,
        mechanism="gaussian",
        epsilon=1.0,
        workload="all-1way",
        key=jax.random.key(0),
    )
    assert isinstance(answers.data, pyarrow.Table)
    assert answers.data.column_names == ["marginal", "cell", "answer"]
    np.testing.assert_array_equal(answers.data.column("answer").to_numpy(), answers.answers)
