"""The command line: the issue's done-when run, reproducibility, exact evaluation, bad input."""

import csv
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from jaxdp import datasets
from jaxdp.cli import main

ADULT_SIZES = datasets.domain("adult").sizes


@pytest.fixture(scope="module")
def adult_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    argv = ["synth", "--mechanism", "independent", "--dataset", "adult", "--epsilon", "1", "--seed", "0"]
    argv += ["--out", str(out / "s.csv"), "--report", str(out / "r.json"), "--errors", str(out / "e.json")]
    assert main(argv) == 0
    return out


def _read_codes(path):
    with open(path) as fh:
        rows = list(csv.reader(fh))
    return rows[0], np.array(rows[1:], dtype=np.int64)


def test_synth_writes_in_domain_rows_and_a_report(adult_run):
    header, codes = _read_codes(adult_run / "s.csv")
    assert header == list(datasets.domain("adult").names)
    assert codes.shape == (48842, 13)
    assert (codes >= 0).all() and (codes < np.array(ADULT_SIZES)).all()
    report = json.loads((adult_run / "r.json").read_text())
    for key in ("mechanism", "epsilon", "delta", "rho_budget", "rho_spent", "conversion", "relation"):
        assert key in report
    assert report["rows"] == 48842 and report["seconds"] > 0
    assert report["rho_spent"] <= report["rho_budget"]
    assert len(report["ledger"]) == 1 and report["ledger"][0]["primitive"] == "discrete_gaussian"
    assert report["relation"] == "replace-one" and report["conversion"] == "exact"
    assert report["delta"] == 1e-9  # the documented default
    assert report["noise"] == "discrete-gaussian"  # exact noise by default, named in the report


def _numpy_errors(real, synth, k):
    """Independent reference: loops of np.bincount over every k-way marginal, float64."""
    diffs, l1 = [], []
    for clique in itertools.combinations(range(real.shape[1]), k):
        shape = [ADULT_SIZES[a] for a in clique]
        size = int(np.prod(shape))
        index_r = np.ravel_multi_index(tuple(real[:, a] for a in clique), shape)
        index_s = np.ravel_multi_index(tuple(synth[:, a] for a in clique), shape)
        p = np.bincount(index_r, minlength=size) / len(real)
        q = np.bincount(index_s, minlength=size) / len(synth)
        diffs.append(np.abs(p - q))
        l1.append(np.abs(p - q).sum())
    diff = np.concatenate(diffs)
    return {"max_abs": diff.max(), "mean_l1": np.mean(l1), "rmse": np.sqrt(np.mean(diff**2))}


@pytest.mark.parametrize("k", [2, 3])
def test_evaluate_agrees_with_numpy(adult_run, tmp_path, capsys, k):
    real_path = tmp_path / "real.csv"
    from jaxdp.domain import write_csv

    write_csv(real_path, datasets.load("adult"))
    domain_path = tmp_path / "domain.json"
    domain_path.write_text(json.dumps(dict(zip(datasets.domain("adult").names, ADULT_SIZES, strict=True))))
    capsys.readouterr()
    argv = ["evaluate", "--real", str(real_path), "--synth", str(adult_run / "s.csv")]
    assert main([*argv, "--domain", str(domain_path), "--workload", f"all-{k}way"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    want = _numpy_errors(_read_codes(real_path)[1], _read_codes(adult_run / "s.csv")[1], k)
    for key in ("max_abs", "mean_l1", "rmse"):
        assert abs(got[key] - want[key]) <= 1e-9, key
    if k == 3:
        errors = json.loads((adult_run / "e.json").read_text())
        assert abs(errors["mean_l1"] - want["mean_l1"]) <= 1e-9
        assert "not differentially private" in errors["warning"]


def test_same_seed_is_bit_identical(adult_run, tmp_path):
    argv = ["synth", "--mechanism", "independent", "--dataset", "adult", "--epsilon", "1", "--seed", "0"]
    assert main([*argv, "--out", str(tmp_path / "again.csv")]) == 0
    assert (tmp_path / "again.csv").read_bytes() == (adult_run / "s.csv").read_bytes()


def test_without_seed_the_key_comes_from_os_entropy(tmp_path):
    argv = ["synth", "--mechanism", "independent", "--dataset", "adult-reduced", "--epsilon", "1"]
    assert main([*argv, "--out", str(tmp_path / "a.csv")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b.csv")]) == 0
    assert (tmp_path / "a.csv").read_bytes() != (tmp_path / "b.csv").read_bytes()


def test_gaussian_releases_answers_not_records(tmp_path, capsys):
    argv = ["synth", "--mechanism", "gaussian", "--dataset", "adult-reduced", "--epsilon", "1"]
    argv += ["--seed", "1", "--workload", "all-2way", "--out", str(tmp_path / "a.csv")]
    assert main([*argv, "--report", str(tmp_path / "r.json")]) == 0
    assert "not records" in capsys.readouterr().err
    with open(tmp_path / "a.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["marginal", "cell", "answer"]
    sizes = datasets.domain("adult-reduced").sizes
    assert len(rows) - 1 == sum(a * b for a, b in itertools.combinations(sizes, 2))
    assert json.loads((tmp_path / "r.json").read_text())["output"] == "noisy answers"


def test_schema_input_round_trips_labels_and_workload_file(tmp_path):
    schema = {
        "columns": {
            "colour": {"type": "categorical", "categories": ["red", "green", "blue"]},
            "size": {"type": "categorical", "categories": ["S", "M", "L", "XL"]},
        }
    }
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    rng = np.random.default_rng(0)
    with open(tmp_path / "raw.csv", "w") as fh:
        fh.write("colour,size\n")
        for c, s in zip(rng.integers(0, 3, 300), rng.integers(0, 4, 300), strict=True):
            fh.write(f"{['red', 'green', 'blue'][c]}, {['S', 'M', 'L', 'XL'][s]}\n")
    (tmp_path / "w.json").write_text(json.dumps([["colour", "size"]]))
    argv = ["synth", "--mechanism", "independent", "--data", str(tmp_path / "raw.csv")]
    argv += ["--schema", str(tmp_path / "schema.json"), "--epsilon", "2", "--seed", "3"]
    argv += ["--workload", str(tmp_path / "w.json"), "--out", str(tmp_path / "out.csv")]
    assert main(argv) == 0
    with open(tmp_path / "out.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["colour", "size"] and len(rows) == 301
    assert {r[0] for r in rows[1:]} <= {"red", "green", "blue"}
    assert {r[1] for r in rows[1:]} <= {"S", "M", "L", "XL"}


BASE = ["synth", "--mechanism", "independent", "--dataset", "adult-reduced", "--seed", "0"]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--epsilon", "0"], "epsilon"),
        (["--epsilon", "-1"], "epsilon"),
        (["--epsilon", "nan"], "epsilon"),
        (["--epsilon", "inf"], "epsilon"),
        (["--epsilon", "1", "--delta", "0"], "delta"),
        (["--epsilon", "1", "--delta", "1"], "delta"),
        (["--epsilon", "1", "--delta", "1.5"], "delta"),
        (["--epsilon", "one"], "epsilon"),
        (["--epsilon", "1", "--rounds", "5"], "one round"),
        (["--epsilon", "1", "--rows", "0"], "rows"),
        (["--epsilon", "1", "--workload", "all-9way"], "k must be"),
        (["--epsilon", "1", "--workload", "nosuchfile.json"], "cannot read"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line_and_no_output(tmp_path, capsys, extra, match):
    out = tmp_path / "out.csv"
    assert main([*BASE, *extra, "--out", str(out), "--report", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxdp: error:") and match in err[0]
    assert list(tmp_path.iterdir()) == []


def test_unknown_mechanism_and_bad_files(tmp_path, capsys):
    def fails(argv, match):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and match in err[0], err
        assert not (tmp_path / "o.csv").exists()

    out = ["--out", str(tmp_path / "o.csv")]
    fails(["synth", "--mechanism", "nope", "--dataset", "adult", "--epsilon", "1", *out], "unknown mechanism")
    missing = ["--data", str(tmp_path / "none.csv"), "--domain", str(tmp_path / "none.json")]
    fails(["synth", "--mechanism", "independent", "--epsilon", "1", *missing, *out], "cannot read")
    (tmp_path / "d.json").write_text(json.dumps({"a": 2}))
    (tmp_path / "x.csv").write_text("a\n0\n7\n1\n")
    bad = ["--data", str(tmp_path / "x.csv"), "--domain", str(tmp_path / "d.json")]
    fails(
        ["synth", "--mechanism", "independent", "--epsilon", "1", *bad, *out], "'a': 1 code(s) outside [0, 2)"
    )
    fails(["synth", "--mechanism", "independent", "--epsilon", "1", "--dataset", "adult", "--out",
           str(tmp_path / "no" / "dir.csv")], "directory does not exist")  # fmt: skip


def test_module_entry_point_exits_nonzero_without_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxdp",
            "synth",
            "--mechanism",
            "independent",
            "--dataset",
            "adult",
            "--epsilon",
            "-1",
            "--out",
            str(tmp_path / "o.csv"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "o.csv").exists()


def test_adaptive_histogram_mechanisms_run_from_the_cli(tmp_path, capsys):
    from jaxdp.domain import write_csv

    public = tmp_path / "public.csv"
    data = datasets.load("adult-reduced")
    write_csv(public, type(data)(data.domain, data.codes[::50], data.numeric[::50]))
    common = ["--dataset", "adult-reduced", "--epsilon", "1", "--seed", "0", "--rounds", "3"]
    for name in ("mwem", "pep", "pmw-pub", "pep-pub"):
        extra = ["--public", str(public)] if name.endswith("-pub") else []
        out = tmp_path / f"{name}.csv"
        argv = ["synth", "--mechanism", name, *common, *extra, "--out", str(out), "--report"]
        assert (
            main([*argv, str(tmp_path / f"{name}.json"), "--errors", str(tmp_path / f"{name}-e.json")]) == 0
        )
        report = json.loads((tmp_path / f"{name}.json").read_text())
        assert len(report["ledger"]) == 6 and report["rho_spent"] <= report["rho_budget"]
        assert {e["primitive"] for e in report["ledger"]} == {"discrete_exponential", "discrete_gaussian"}
        errors = json.loads((tmp_path / f"{name}-e.json").read_text())
        assert ("best_mixture_error" in errors) == name.endswith("-pub")
        assert "round 3/3" in capsys.readouterr().err


def test_histogram_mechanisms_refuse_what_they_cannot_do(tmp_path, capsys):
    out = ["--out", str(tmp_path / "o.csv")]
    assert main(["synth", "--mechanism", "pep", "--dataset", "adult", "--epsilon", "1", *out]) == 2
    assert "dense histogram" in capsys.readouterr().err
    assert (
        main(["synth", "--mechanism", "pep-pub", "--dataset", "adult-reduced", "--epsilon", "1", *out]) == 2
    )
    assert "--public is required" in capsys.readouterr().err
    argv = ["synth", "--mechanism", "pep", "--dataset", "adult-reduced", "--epsilon", "1", "--rounds", "99"]
    assert main([*argv, *out]) == 2
    assert "exceeds the 35 marginals" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "rounds"), [("gem", 2), ("rap", 1), ("rap-softmax", 1), ("dualquery", 3), ("fem", 3)]
)
def test_relaxed_and_oracle_mechanisms_run_from_the_cli(tmp_path, name, rounds):
    out, errors = tmp_path / "o.csv", tmp_path / "e.json"
    argv = ["synth", "--mechanism", name, "--dataset", "adult-reduced", "--epsilon", "1", "--seed", "0"]
    argv += ["--rounds", str(rounds), "--workload", "all-2way", "--out", str(out), "--errors", str(errors)]
    assert main([*argv, "--report", str(tmp_path / "r.json")]) == 0
    header, codes = _read_codes(out)
    sizes = np.array(datasets.domain("adult-reduced").sizes)
    assert header == list(datasets.domain("adult-reduced").names)
    assert len(codes) == 48842 and (codes >= 0).all() and (codes < sizes).all()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["rho_spent"] <= report["rho_budget"] and report["ledger"]
    assert ("relaxed" in json.loads(errors.read_text())) == name.startswith(("gem", "rap"))


@pytest.mark.parametrize("name", ["pep", "gem"])
def test_mechanisms_run_on_a_csv_with_a_domain_file(tmp_path, name):
    from jaxdp.domain import Dataset, write_csv

    full = datasets.load("adult-reduced")
    data = Dataset(full.domain, full.codes[:3000], full.numeric[:3000])
    write_csv(tmp_path / "data.csv", data)
    (tmp_path / "domain.json").write_text(
        json.dumps(dict(zip(data.domain.names, data.domain.sizes, strict=True)))
    )
    argv = [
        "synth",
        "--mechanism",
        name,
        "--data",
        str(tmp_path / "data.csv"),
        "--domain",
        str(tmp_path / "domain.json"),
    ]
    argv += [
        "--epsilon",
        "1",
        "--seed",
        "0",
        "--rounds",
        "2",
        "--workload",
        "all-2way",
        "--out",
        str(tmp_path / "o.csv"),
    ]
    assert main(argv) == 0
    header, codes = _read_codes(tmp_path / "o.csv")
    assert header == list(data.domain.names) and len(codes) == 3000


def test_float_noise_is_an_explicit_option_named_in_the_report(tmp_path, capsys):
    out, report = tmp_path / "s.csv", tmp_path / "r.json"
    argv = ["synth", "--mechanism", "independent", "--dataset", "adult-reduced", "--epsilon", "1"]
    assert main([*argv, "--seed", "0", "--noise", "float", "--out", str(out), "--report", str(report)]) == 0
    written = json.loads(report.read_text())
    assert written["noise"] == "float-gaussian"
    assert [e["primitive"] for e in written["ledger"]] == ["gaussian"]
    assert "does not meet the stated delta" in capsys.readouterr().err
    assert main([*argv, "--noise", "exact", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--noise" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()
