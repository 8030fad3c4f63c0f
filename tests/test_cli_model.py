"""The command line after a release: `synth --model --marginals`, `sample` (in a new process),
`report --html`, `schema --data`, and `evaluate` scoring every column of a table schema."""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main
from jaxdp.conditions import condition
from jaxdp.domain import TableSchema, read_table

pytest.importorskip("mbi")

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = {
    "columns": {
        "age": {"type": "numeric", "lower": 17, "upper": 90, "integer": True, "bins": 8},
        "hours": {"type": "numeric", "lower": 1, "upper": 99, "edges": [20, 35, 41, 60]},
        "sex": {"type": "categorical", "categories": ["Female", "Male"]},
        "work": {"type": "categorical", "categories": ["private", "public", "self"], "nullable": True},
        "income": {"type": "categorical", "categories": ["<=50K", ">50K"]},
    },
    "target": "income",
}


def _write_table(tmp: Path, n: int = 4000) -> tuple[Path, Path]:
    rng = np.random.default_rng(11)
    sex = rng.choice(["Female", "Male"], n)
    age = np.where(sex == "Female", rng.integers(17, 60, n), rng.integers(25, 91, n))
    hours = rng.integers(1, 100, n)
    work = rng.choice(["private", "public", "self", ""], n, p=[0.6, 0.2, 0.15, 0.05])
    income = np.where((age > 40) & (hours > 40), ">50K", rng.choice(["<=50K", ">50K"], n, p=[0.85, 0.15]))
    path = tmp / "real.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(SCHEMA["columns"])
        writer.writerows(zip(age, hours, sex, work, income, strict=True))
    schema = tmp / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return path, schema


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("release")
    real, schema = _write_table(tmp)
    argv = ["synth", "--mechanism", "aim", "--data", str(real), "--schema", str(schema), "--epsilon", "2"]
    argv += [
        "--seed",
        "5",
        "--workload",
        "all-2way",
        "--out",
        str(tmp / "s.csv"),
        "--report",
        str(tmp / "r.json"),
    ]
    argv += [
        "--errors",
        str(tmp / "e.json"),
        "--model",
        str(tmp / "m.jaxdp"),
        "--marginals",
        str(tmp / "marg.csv"),
    ]
    assert main(argv) == 0
    return tmp, real, schema


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_synth_writes_the_model_and_its_marginals(release):
    tmp, _, _ = release
    model = jaxdp.load_model(tmp / "m.jaxdp")
    assert model.report == {
        k: v for k, v in json.loads((tmp / "r.json").read_text()).items() if k != "seconds"
    }
    marginals = _rows(tmp / "marg.csv")
    assert {r["kind"] for r in marginals} == {"measured", "model"}
    assert all(float(r["std"]) > 0 for r in marginals if r["kind"] == "measured")
    assert any(r["cell"].startswith("[20, 35)") for r in marginals)  # the declared edges, as ranges


def test_sample_in_a_new_process_meets_the_condition_and_follows_the_models_conditional(release):
    """`sample --where` in a process of its own (no data, no compile cache): every record meets
    both conditions, and each category's count of the other columns is the conditioned model's
    within the release's rounding (4 records a cell: `tests/test_models.py`)."""
    tmp = release[0]
    out = tmp / "sample.csv"
    command = [sys.executable, "-m", "jaxdp", "sample", "--model", str(tmp / "m.jaxdp"), "--rows", "3000"]
    command += ["--where", "sex=Female", "--where", "age=30:45", "--seed", "9", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXDP_")}
    done = subprocess.run(
        command, capture_output=True, text=True, env=env | {"JAXDP_NO_COMPILE_CACHE": "1"}, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no privacy spent" in done.stderr
    rows = _rows(out)
    assert len(rows) == 3000
    assert {r["sex"] for r in rows} == {"Female"}
    ages = np.array([int(r["age"]) for r in rows])
    assert ages.min() >= 30 and ages.max() <= 45
    model = jaxdp.load_model(tmp / "m.jaxdp")
    wanted = condition({"sex": "Female", "age": "30:45"}, model.domain, model.coding)
    state, _ = model.mechanism.conditioned(model.state, wanted.weights)
    answers = np.asarray(model.mechanism.relaxed_answers(state), np.float64)
    workload = model.mechanism.workload
    j = workload.cliques.index((model.domain.names.index("work"), model.domain.names.index("income")))
    expected = 3000 * answers[workload.offsets[j] : workload.offsets[j] + workload.cells[j]].reshape(4, 2)
    labels = {"private": 0, "public": 1, "self": 2, "": 3}
    counts = np.zeros((4, 2))
    for r in rows:
        counts[labels[r["work"]], ["<=50K", ">50K"].index(r["income"])] += 1
    assert np.abs(counts - expected).max() <= 4.0


def test_sample_with_a_key_file_replays_and_bad_conditions_are_one_line(release, capsys):
    tmp, _, _ = release
    capsys.readouterr()
    key_file = tmp / "sample.key"
    outs = [tmp / "a.csv", tmp / "b.csv"]
    for out in outs:
        argv = [
            "sample",
            "--model",
            str(tmp / "m.jaxdp"),
            "--rows",
            "200",
            "--key-file",
            str(key_file),
            "--out",
            str(out),
        ]
        assert main(argv) == 0
    assert outs[0].read_text() == outs[1].read_text()
    capsys.readouterr()
    for where, message in (
        ("height=1:2", "'height' is not a column"),
        ("sex=Other", "no category 'Other'"),
        ("sex", "COLUMN=VALUE"),
    ):
        out = tmp / "bad.csv"
        assert (
            main(
                [
                    "sample",
                    "--model",
                    str(tmp / "m.jaxdp"),
                    "--where",
                    where,
                    "--seed",
                    "1",
                    "--out",
                    str(out),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and not out.exists()
    (tmp / "broken.jaxdp").write_bytes((tmp / "m.jaxdp").read_bytes()[:1000])
    assert (
        main(["sample", "--model", str(tmp / "broken.jaxdp"), "--seed", "1", "--out", str(tmp / "c.csv")])
        == 2
    )
    assert "truncated" in capsys.readouterr().err


def test_evaluate_scores_every_column_and_agrees_with_the_errors_report(release, capsys):
    """A table schema's numeric columns are scored too: on the release's bins with --model (the
    synth's --errors exactly), on the schema's declared bins without it; the output says which."""
    tmp, real, schema = release
    capsys.readouterr()
    argv = [
        "evaluate",
        "--real",
        str(real),
        "--synth",
        str(tmp / "s.csv"),
        "--domain",
        str(schema),
        "--workload",
        "all-2way",
    ]
    assert main([*argv, "--model", str(tmp / "m.jaxdp")]) == 0
    with_model = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    errors = json.loads((tmp / "e.json").read_text())
    for metric in ("max_abs", "mean_l1", "rmse"):
        assert with_model[metric] == pytest.approx(errors[metric], rel=1e-12)
    assert set(with_model["numeric_columns"]) == {"age", "hours"}
    assert main(argv) == 0
    declared = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "declared bins" in declared["numeric_columns"]["hours"]
    assert errors["marginals"] == len(list(itertools.combinations(SCHEMA["columns"], 2)))


def test_report_writes_a_page_and_its_numbers(release, capsys):
    tmp, real, schema = release
    argv = ["report", "--real", str(real), "--schema", str(schema), "--synth", str(tmp / "s.csv")]
    argv += [
        "--model",
        str(tmp / "m.jaxdp"),
        "--html",
        str(tmp / "report.html"),
        "--json",
        str(tmp / "q.json"),
    ]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "not differentially private" in summary["warning"]
    numbers = json.loads((tmp / "q.json").read_text())
    assert {c["column"] for c in numbers["column_shapes"]} == set(SCHEMA["columns"])
    assert len(numbers["column_pair_trends"]) == 10
    assert 0.0 <= numbers["scores"]["Overall"] <= 1.0
    assert numbers["utility"]["target"] == "income"
    page = (tmp / "report.html").read_text()
    assert "Not private." in page and "application/json" in page
    pytest.importorskip("matplotlib")
    assert page.count("data:image/png;base64,") == 4


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: the page is not rendered")
def test_the_report_page_renders_in_headless_chromium(release, tmp_path):
    """The page renders: a screenshot of it is not blank (its pixels vary: text, tables, plots)."""
    pytest.importorskip("matplotlib")
    from matplotlib import image

    source, real, schema = release
    page = tmp_path / "report.html"
    argv = ["report", "--real", str(real), "--schema", str(schema), "--synth", str(source / "s.csv")]
    assert main([*argv, "--html", str(page)]) == 0
    shot = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    command = [CHROMIUM, *flags, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}"]
    subprocess.run(
        [*command, "--window-size=1200,2400", page.as_uri()], capture_output=True, timeout=120, check=False
    )
    pixels = image.imread(shot)
    assert pixels.shape[:2] == (2400, 1200) and pixels.std() > 0.05


def test_schema_drafts_a_schema_and_says_loudly_it_is_not_private(release, capsys):
    tmp, real, _ = release
    out = tmp / "drafted.json"
    assert main(["schema", "--data", str(real), "--target", "income", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "NOT private" in err and "Review" in err
    drafted = json.loads(out.read_text())
    assert drafted["columns"]["age"] == {"type": "numeric", "lower": 17, "upper": 90, "integer": True}
    assert drafted["columns"]["work"] == {
        "type": "categorical",
        "categories": ["private", "public", "self"],
        "nullable": True,
    }
    assert drafted["target"] == "income"
    assert len(read_table(real, TableSchema.load(out))) == 4000  # the draft reads its table
    assert main(["schema", "--data", str(real), "--target", "age"]) == 2
    assert "must be a categorical column" in capsys.readouterr().err


def test_the_synthesizer_is_glue_over_synthesize_and_the_model(release, tmp_path):
    pd = pytest.importorskip("pandas")
    _, real, schema = release
    frame = pd.read_csv(real, keep_default_na=False)
    synthesizer = jaxdp.Synthesizer("aim", epsilon=2.0, schema=str(schema), workload="all-2way")
    synthesizer.fit(frame, key=jax.random.key(5))
    same = jaxdp.synthesize(
        frame, str(schema), mechanism="aim", epsilon=2.0, key=jax.random.key(5), workload="all-2way"
    )
    sampled = synthesizer.sample(key=jax.random.key(5))
    assert isinstance(sampled, pd.DataFrame)
    pd.testing.assert_frame_equal(sampled, same.data)
    subgroup = synthesizer.sample(300, key=jax.random.key(6), where={"sex": "Male"})
    assert len(subgroup) == 300 and set(subgroup["sex"]) == {"Male"}
    synthesizer.save(tmp_path / "s.jaxdp")
    loaded = jaxdp.Synthesizer.load(tmp_path / "s.jaxdp")
    pd.testing.assert_frame_equal(loaded.sample(key=jax.random.key(5)), same.data)
    assert loaded.privacy_report["epsilon"] == 2.0
    numbers = loaded.report(frame, sampled, html=tmp_path / "r.html")
    assert numbers["utility"]["target"] == "income" and (tmp_path / "r.html").exists()
    with pytest.raises(ValueError, match="fit the synthesizer first"):
        jaxdp.Synthesizer("aim", epsilon=1.0).sample(key=jax.random.key(0))
