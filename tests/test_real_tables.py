"""Raw UCI Adult in, raw table out: every kind of mechanism through a table schema whose numeric
columns declare no bins (the documented default applies: private quantile bins), empty cells
where nullable.

Data: ../shared/data/dp-data-raw-adult/train.csv (leading spaces after commas are stripped by the
reader), skipped when absent; the first 2,000 rows keep each run to seconds.
"""

import csv
import json
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main
from jaxdp.tables import TableSchema, read_table

from .conftest import SHARED_DATA

pd = pytest.importorskip("pandas")

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "examples" / "adult_schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
ROWS = 2000
SMALL_GENERATOR = {"batch": 64, "hidden": (32, 32), "latent_dim": 8, "max_steps": 10}


@pytest.fixture(scope="module")
def adult():
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout (only CI and developers have it)")
    table = read_table(SHARED_DATA / "dp-data-raw-adult" / "train.csv", TableSchema.from_json(SCHEMA))
    columns = table.columns()
    return pd.DataFrame({n: c[:ROWS] for n, c in columns.items()})


def _subschema(names):
    return {"columns": {n: SCHEMA["columns"][n] for n in names}, "target": "income>50K"}


FULL = list(SCHEMA["columns"])
REDUCED = ["age", "sex", "race", "hours-per-week", "income>50K"]  # at most 32 x 2 x 5 x 32 x 2 cells
CASES = {
    "independent": (FULL, {"workload": "all-1way"}),
    "aim": (FULL, {"workload": [["age", "income>50K"], ["fnlwgt", "sex"]], "rounds": 4, "iters": 30}),
    "gem": (
        FULL,
        {"workload": [["age", "income>50K"], ["capital-gain", "sex"]], "rounds": 2, **SMALL_GENERATOR},
    ),
    "rap-softmax": (
        FULL,
        {
            "workload": [["age", "income>50K"], ["hours-per-week", "race"]],
            "marginals_per_round": 1,  # the default rounds are then capped at the 2 marginals
            "n_rows": 100,
            "max_steps": 20,
        },
    ),
    "mwem": (REDUCED, {"workload": "all-2way", "rounds": 2}),
    "pep": (REDUCED, {"workload": "all-2way", "rounds": 2}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_raw_adult_round_trips_in_its_columns_labels_and_units(adult, name):
    names, options = CASES[name]
    if name == "aim":
        options = {**options, "final_iters": 30}
    schema = _subschema(names)
    result = jaxdp.synthesize(
        adult[names], schema, mechanism=name, epsilon=1.0, key=jax.random.key(0), **options
    )
    out = result.data
    assert isinstance(out, pd.DataFrame) and list(out.columns) == names and len(out) > 0
    for column in names:
        spec = schema["columns"][column]
        values = out[column].to_numpy()
        if spec["type"] == "categorical":
            assert set(values) <= set(spec["categories"]), column  # labels from the schema only
        else:
            assert values.dtype == np.int64, column  # whole numbers: the schema says integer
            assert values.min() >= spec["lower"] and values.max() <= spec["upper"], column
    report = result.report  # no bins declared: the default, private quantile bins, charged
    age = report["preprocessing"]["columns"]["age"]
    assert age["coding"] == "private quantile bins" and age["source"] == "private (charged)"
    assert 2 <= age["bins"] <= 32 and report["ledger"][0]["label"].startswith("private binning")
    assert report["rho_spent"] == pytest.approx(report["rho_budget"], rel=1e-6)
    assert report["rho_spent"] <= report["rho_budget"]


def test_rap_plus_plus_keeps_numeric_columns_real(adult):
    names = ["age", "fnlwgt", "sex", "race", "income>50K"]
    result = jaxdp.synthesize(
        adult[names], _subschema(names), mechanism="rap++", epsilon=1.0, key=jax.random.key(0), workload=None
    )
    out = result.data
    assert list(out.columns) == names and len(out) == ROWS
    assert out["fnlwgt"].dtype == np.int64 and out["fnlwgt"].between(0, 2_000_000).all()
    assert result.report["preprocessing"]["columns"]["fnlwgt"]["coding"].startswith("real")
    assert len(np.unique(out["fnlwgt"])) > 100  # real values, not a handful of bin draws


def _write(path, frame):
    frame.to_csv(path, index=False, na_rep="")


def test_five_percent_empty_cells_come_back_as_about_five_percent(adult, tmp_path):
    """CLI, Independent at epsilon 5 on 10,000 rows (the first 2,000 of train.csv repeated 5 times,
    fine for a count check). "age" (numeric) and "workclass" (categorical) get exactly 5% empty
    cells, "sex" none (negative control), "race" 15% (the count is tracked, not a constant).

    The released empty fraction is p + noise + sampling error: the noisy 1-way counts (sigma ~4
    counts at this budget) move p by ~0.0005, and drawing 10,000 rows adds a binomial standard
    error of at most sqrt(0.15 * 0.85 / 10,000) = 0.0036. Tolerance 0.015 is over 4 standard
    errors for every column: false-failure rate below 1e-4 per column (the run is seeded, so the
    test is deterministic; the rate says how unlucky a seed would have to be)."""
    frame = pd.concat([adult] * 5, ignore_index=True)
    n = len(frame)
    rng = np.random.default_rng(0)
    targets = {"age": 0.05, "workclass": 0.05, "race": 0.15, "sex": 0.0}
    frame = frame.astype({"age": object})
    for column, share in targets.items():
        frame.loc[rng.choice(n, round(share * n), replace=False), column] = None
    schema = json.loads(json.dumps(SCHEMA))
    for column in targets:
        schema["columns"][column]["nullable"] = True
    _write(tmp_path / "raw.csv", frame)
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    argv = ["synth", "--mechanism", "independent", "--data", str(tmp_path / "raw.csv")]
    argv += ["--schema", str(tmp_path / "schema.json"), "--epsilon", "5", "--seed", "0"]
    assert main([*argv, "--workload", "all-1way", "--out", str(tmp_path / "out.csv")]) == 0
    with open(tmp_path / "out.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == list(SCHEMA["columns"]) and len(rows) == n + 1
    header = rows[0]
    for column, share in targets.items():
        empty = np.mean([r[header.index(column)] == "" for r in rows[1:]])
        assert abs(empty - share) <= 0.015, (column, empty)
    others = [i for i, h in enumerate(header) if h not in targets]
    assert all(r[i] != "" for r in rows[1:] for i in others)


def test_a_non_nullable_column_with_one_empty_cell_is_refused_naming_it_and_the_count(
    adult, tmp_path, capsys
):
    frame = adult.astype({"fnlwgt": object})
    frame.loc[17, "fnlwgt"] = None
    _write(tmp_path / "raw.csv", frame)
    argv = ["synth", "--mechanism", "aim", "--data", str(tmp_path / "raw.csv"), "--schema", str(SCHEMA_PATH)]
    argv += ["--epsilon", "1", "--out", str(tmp_path / "o.csv"), "--report", str(tmp_path / "r.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    message = "column 'fnlwgt': 1 empty cell(s); declare \"nullable\": true if an empty cell is a value"
    assert err == [f"jaxdp: error: {message}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.csv"]
