"""Property-based fuzz of what users hand the library (issue #27): CSV text against a table schema
and against a domain, schema JSON, and command-line arguments. Every failure must be a `DataError`
or a one-line usage error that names the column or argument at fault, and never shows a cell of
the input.

Cases: `QUICK` examples per property in the quick tier, `FULL` in the full tier (the same
properties; hypothesis derandomized, so a run is repeatable and CI cannot go red by chance).
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxdp import api, cli
from jaxdp.domain import DataError, Domain, TableSchema, read_csv, read_table

QUICK, FULL = 50, 1000


def _settings(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# Column names and labels are public (declared in the schema); cells that are not declared are
# the private values no message may show. They are drawn from an alphabet no message uses, long
# enough that a match is a leak and not a coincidence.
NAMES = st.text(string.ascii_lowercase, min_size=1, max_size=6)
LABELS = st.text(string.ascii_uppercase, min_size=1, max_size=4)
SECRET = st.text("qxzjvkQXZJVK#@", min_size=5, max_size=9) | st.integers(10**6, 10**9).map(
    lambda v: f"{v}.25"
)
# Whole-table failures, which have no single column to name.
WHOLE_TABLE = (
    "the table is empty",
    "has no header row",
    "fields",
    "duplicate columns",
    "missing columns",
    "columns not declared",
    "different lengths",
)


@st.composite
def table_schemas(draw) -> dict:
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    columns = {}
    for name in names:
        nullable = draw(st.booleans())
        if draw(st.booleans()):
            categories = draw(st.lists(LABELS, min_size=1, max_size=5, unique=True))
            columns[name] = {"type": "categorical", "categories": categories, "nullable": nullable}
        else:
            lower = draw(st.integers(-50, 50))
            upper = lower + draw(st.integers(1, 100))
            columns[name] = {
                "type": "numeric",
                "lower": lower,
                "upper": upper,
                "bins": draw(st.integers(1, 6)),
            }
            columns[name]["integer"] = draw(st.booleans())
            columns[name]["nullable"] = nullable
    return {"columns": columns}


def _valid_cell(draw, spec: dict) -> str:
    if spec["nullable"] and draw(st.integers(0, 9)) == 0:
        return ""
    if spec["type"] == "categorical":
        return draw(st.sampled_from(spec["categories"]))
    value = draw(st.integers(spec["lower"], spec["upper"]))
    return str(value) if spec["integer"] or draw(st.booleans()) else f"{value}.0"


@st.composite
def tables(draw) -> tuple[dict, str, list[str]]:
    """(schema, CSV text, the undeclared cells written into it)."""
    schema = draw(table_schemas())
    header = list(schema["columns"])
    variant = draw(st.sampled_from(["as declared", "missing", "extra", "duplicate", "reordered"]))
    if variant == "missing" and len(header) > 1:
        header = header[:-1]
    elif variant == "extra":
        header = [*header, draw(NAMES.filter(lambda n: n not in schema["columns"]))]
    elif variant == "duplicate":
        header = [*header, header[0]]
    elif variant == "reordered":
        header = draw(st.permutations(header))
    secrets: list[str] = []
    rows = []
    for _ in range(draw(st.integers(0, 8))):
        row, undeclared = [], []
        for name in header:
            spec = schema["columns"].get(name)
            if spec is None or draw(st.integers(0, 5)) == 0:
                cell = draw(SECRET | st.sampled_from(["", "nan", "inf", "-1e400", " "]))
                undeclared.append(cell)
            else:
                cell = _valid_cell(draw, spec)
            row.append(cell)
        if draw(st.integers(0, 12)) == 0:  # a ragged row
            row = row[:-1] if row else ["x"]
        secrets += [cell for cell in undeclared if len(cell) >= 5 and cell in row]
        rows.append(",".join(row))
    return schema, "\n".join([",".join(header), *rows]) + "\n", secrets


def _assert_names_what_failed(message: str, names, secrets) -> None:
    assert any(repr(name) in message for name in names) or any(p in message for p in WHOLE_TABLE), message
    leaked = [s for s in secrets if s in message]
    assert not leaked, f"a cell reached the message: {message!r}"


def test_negative_control_a_message_showing_a_cell_or_no_column_fails():
    with pytest.raises(AssertionError, match="a cell reached the message"):
        _assert_names_what_failed("column 'a': 1 value(s) like qxzjv are not numbers", ["a"], ["qxzjv"])
    with pytest.raises(AssertionError):
        _assert_names_what_failed("1 value(s) are not numbers", ["a"], [])


def _read_raw(case) -> None:
    schema, text, secrets = case
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "table.csv"
        path.write_text(text)
        try:
            table = read_table(path, TableSchema.from_json(schema))
        except DataError as err:
            header = text.splitlines()[0].split(",")
            _assert_names_what_failed(str(err), [*schema["columns"], *header], secrets)
            return
    records = [line for line in text.splitlines()[1:] if line.strip()]  # blank lines are skipped
    assert len(table) == len(records) and not secrets  # read whole only when every cell is declared


@_settings(QUICK)
@given(tables())
def test_raw_csv_text_fails_only_with_a_data_error_naming_its_column(case):
    _read_raw(case)


@_settings(FULL)
@given(tables())
def test_raw_csv_text_fails_only_with_a_data_error_naming_its_column_many_cases(case):
    _read_raw(case)


@st.composite
def coded_tables(draw) -> tuple[dict, str, list[str]]:
    """(sizes, CSV of codes, the out-of-domain cells written into it): the compiled reader's path."""
    sizes = draw(st.dictionaries(NAMES, st.integers(1, 6), min_size=1, max_size=4))
    secrets, rows = [], []
    for _ in range(draw(st.integers(0, 8))):
        row = []
        for size in sizes.values():
            if draw(st.integers(0, 6)) == 0:
                cell = draw(SECRET | st.integers(size, 10**7).map(str) | st.sampled_from(["-3", "1.5", ""]))
                if len(cell) >= 5:
                    secrets.append(cell)
            else:
                cell = str(draw(st.integers(0, size - 1)))
            row.append(cell)
        rows.append(",".join(row))
    return sizes, "\n".join([",".join(sizes), *rows]) + "\n", secrets


def _read_coded(case) -> None:
    sizes, text, secrets = case
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "codes.csv"
        path.write_text(text)
        try:
            read_csv(path, Domain.from_sizes(sizes))
        except DataError as err:
            _assert_names_what_failed(str(err), list(sizes), secrets)
            return
    assert not secrets


@_settings(QUICK)
@given(coded_tables())
def test_coded_csv_text_fails_only_with_a_data_error_naming_its_column(case):
    _read_coded(case)


@_settings(FULL)
@given(coded_tables())
def test_coded_csv_text_fails_only_with_a_data_error_naming_its_column_many_cases(case):
    _read_coded(case)


# -- schema JSON -------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 50) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
COLUMN_KEYS = [
    "type",
    "categories",
    "size",
    "nullable",
    "lower",
    "upper",
    "integer",
    "bins",
    "edges",
    "binning",
]


@st.composite
def schema_documents(draw) -> dict:
    """Schema-shaped JSON: mostly the right keys with any values, sometimes anything at all."""
    columns = {}
    for name in draw(st.lists(NAMES, max_size=3, unique=True)):
        keys = draw(st.lists(st.sampled_from(COLUMN_KEYS), max_size=5, unique=True))
        spec = {k: draw(JSON_VALUES) for k in keys}
        if draw(st.booleans()):
            spec["type"] = draw(st.sampled_from(["categorical", "numeric"]))
        columns[name] = spec if draw(st.integers(0, 9)) else draw(JSON_VALUES)
    document = {"columns": columns}
    if draw(st.integers(0, 4)) == 0:
        document["target"] = draw(JSON_VALUES)
    if draw(st.integers(0, 9)) == 0:
        document[draw(st.text(max_size=5))] = draw(JSON_VALUES)
    return document


def _load_schema(document) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "schema.json"
        path.write_text(json.dumps(document))
        try:
            TableSchema.load(path)
        except DataError as err:
            message = str(err)
            assert message
            if message.startswith("column "):
                assert any(message.startswith(f"column {name!r}") for name in document["columns"]), message


@_settings(QUICK)
@given(schema_documents())
def test_any_schema_json_is_read_or_refused_with_a_data_error(document):
    _load_schema(document)


@_settings(FULL)
@given(schema_documents())
def test_any_schema_json_is_read_or_refused_with_a_data_error_many_cases(document):
    _load_schema(document)


# -- command-line arguments -----------------------------------------------------------------------------

NUMBERS = st.sampled_from(["0", "-1", "1", "0.5", "1e-12", "nan", "inf", "1e400", "x", "", "3"])
FLAGS = {
    "--mechanism": st.sampled_from(["mwem", "pep", "independent", "aim", "gem", "rap++", "nope", ""]),
    "--epsilon": NUMBERS,
    "--delta": NUMBERS,
    "--rounds": NUMBERS,
    "--rows": NUMBERS,
    "--seed": st.sampled_from(["0", "-1", "4294967296", "x"]),
    "--relation": st.sampled_from(["add-remove", "replace-one", "both"]),
    "--conversion": st.sampled_from(["exact", "simple", "loose"]),
    "--noise": st.sampled_from(["discrete", "float", "none"]),
    "--workload": st.sampled_from(["all-1way", "all-2way", "all-9way", "all-0way", "some"]),
    "--confidence": NUMBERS,
    "--compress": st.sampled_from(["off", "3", "-1", "x"]),
    "--binning-share": NUMBERS,
    "--checkpoint-every": NUMBERS,
}
# What a usage error may name besides the flags given: a budget, a workload's marginals.
ARGUMENT_WORDS = ("budget", "rho", "marginals", "all-", "rounds")


class _Reached(Exception):
    """The arguments passed every check: the run would start here."""


@st.composite
def argument_lists(draw) -> list[str]:
    args = ["--mechanism", draw(FLAGS["--mechanism"]), "--epsilon", draw(NUMBERS)]
    for flag in draw(
        st.lists(st.sampled_from([f for f in FLAGS if f not in ("--mechanism", "--epsilon")]), max_size=4)
    ):
        args += [flag, draw(FLAGS[flag])]
    if draw(st.booleans()):
        args += ["--checkpoint", "CHECKPOINT"]
    return args


def _cli(tmp_path, capsys, monkeypatch, args) -> None:
    def reached(*_, **__):
        raise _Reached

    monkeypatch.setattr(api, "execute", reached)
    args = [a.replace("CHECKPOINT", str(tmp_path / "ckpt")) for a in args]
    data = ["--data", str(tmp_path / "data.csv"), "--domain", str(tmp_path / "domain.json")]
    try:
        status = cli.main(["synth", *args, *data, "--out", str(tmp_path / "out.csv")])
    except _Reached:
        return
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and err and err[-1].startswith("jaxdp: error: "), (args, err)
    given = {flag.lstrip("-") for flag in args if flag.startswith("--")}
    words = given | {g.replace("-", "_") for g in given} | set(ARGUMENT_WORDS)
    assert any(word in err[-1] for word in words), (args, err[-1])
    assert not (tmp_path / "out.csv").exists()


@pytest.fixture
def cli_table(tmp_path):
    (tmp_path / "domain.json").write_text(
        json.dumps({"a": 3, "b": 2, "c": 4, "d": 2, "e": 3, "f": 2, "g": 2})
    )
    rows = [",".join(str((i * (j + 1)) % s) for j, s in enumerate([3, 2, 4, 2, 3, 2, 2])) for i in range(60)]
    (tmp_path / "data.csv").write_text("a,b,c,d,e,f,g\n" + "\n".join(rows) + "\n")
    return tmp_path


@_settings(QUICK)
@given(args=argument_lists())
def test_any_command_line_starts_the_run_or_fails_with_one_line_naming_the_argument(
    cli_table, capsys, monkeypatch, args
):
    _cli(cli_table, capsys, monkeypatch, args)


@_settings(FULL)
@given(args=argument_lists())
def test_any_command_line_starts_the_run_or_fails_with_one_line_naming_the_argument_many_cases(
    cli_table, capsys, monkeypatch, args
):
    _cli(cli_table, capsys, monkeypatch, args)
