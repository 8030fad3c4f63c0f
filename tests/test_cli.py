"""The command line: the issue's done-when run, reproducibility, exact evaluation, bad input."""

import csv
import itertools
import json
import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import api, datasets
from jaxdp.cli import main
from tests.conftest import small_rounds

ADULT = datasets.domain("adult")
ADULT_SIZES = ADULT.sizes


@pytest.fixture(scope="module")
def adult_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    argv = ["synth", "--mechanism", "independent", "--dataset", "adult", "--epsilon", "1", "--seed", "0"]
    argv += ["--out", str(out / "s.csv"), "--report", str(out / "r.json"), "--errors", str(out / "e.json")]
    assert main(argv) == 0
    return out


def _read_codes(path, domain=ADULT):
    """A written CSV's header and codes: labels mapped back through the domain's own lists."""
    with open(path) as fh:
        rows = list(csv.reader(fh))
    columns = []
    for j, name in enumerate(rows[0]):
        labels = domain[name].labels
        code = {label: i for i, label in enumerate(labels)}.__getitem__ if labels else int
        columns.append([code(row[j]) for row in rows[1:]])
    return rows[0], np.array(columns, dtype=np.int64).T


def test_synth_writes_in_domain_rows_and_a_report(adult_run):
    header, codes = _read_codes(adult_run / "s.csv")
    assert header == list(ADULT.names)
    with open(adult_run / "s.csv") as fh:  # the bundled table's labels, not its codes
        assert next(csv.DictReader(fh))["sex"] in {"Female", "Male"}
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
    domain_path.write_text(json.dumps(ADULT.to_json()))
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


def test_synth_reads_a_parquet_table_as_it_reads_the_same_csv(tmp_path):
    pytest.importorskip("pyarrow", reason="the arrow extra is not installed")
    import pyarrow
    import pyarrow.parquet

    data = jaxdp.datasets.load("adult-reduced").without_labels()
    (tmp_path / "domain.json").write_text(
        json.dumps(dict(zip(data.domain.names, data.domain.sizes, strict=True)))
    )
    pyarrow.parquet.write_table(pyarrow.table(data.to_columns()), tmp_path / "table.parquet")
    jaxdp.write_csv(tmp_path / "table.csv", data)
    outputs = []
    for source in ("table.parquet", "table.csv"):
        argv = ["synth", "--mechanism", "independent", "--data", str(tmp_path / source)]
        argv += ["--domain", str(tmp_path / "domain.json"), "--epsilon", "1", "--seed", "0"]
        argv += ["--out", str(tmp_path / f"{source}.out.csv")]
        assert main(argv) == 0
        outputs.append((tmp_path / f"{source}.out.csv").read_text())
    assert outputs[0] == outputs[1]


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


@pytest.mark.parametrize("name", ["pep", "gem"])
def test_mechanisms_run_on_a_csv_with_a_domain_file(tmp_path, name):
    from jaxdp.domain import Dataset, write_csv

    full = datasets.load("adult-reduced")
    data = Dataset(full.domain.without_labels(), full.codes[:3000], full.numeric[:3000])
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
    header, codes = _read_codes(tmp_path / "o.csv", data.domain)
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


def _tiny_csvs(tmp_path):
    """A 400-row, 4-attribute coded table, a 60-row public table over it, their domain file."""
    from jaxdp.domain import write_csv

    from .mechanisms.conftest import tiny_dataset

    data = tiny_dataset()
    write_csv(tmp_path / "data.csv", data)
    write_csv(tmp_path / "public.csv", tiny_dataset(n=60, seed=99))
    (tmp_path / "domain.json").write_text(
        json.dumps(dict(zip(data.domain.names, data.domain.sizes, strict=True)))
    )
    return data


# Rounds small enough for the tiny table (AIM's filter: `small_rounds`).
PAIR_ROUNDS = {
    "dualquery": 2,
    "fem": 2,
    "mwem": 2,
    "pep": 2,
    "pmw-pub": 2,
    "pep-pub": 2,
}


def _pair_rounds(name: str) -> int:
    return small_rounds(name, 4, PAIR_ROUNDS.get(name, 1))  # the tiny table's 4 attributes


REGISTRY_PAIRS = [(name, r.value) for name, spec in api.MECHANISMS.items() for r in spec.relations]


@pytest.mark.parametrize(("name", "relation"), REGISTRY_PAIRS)
def test_every_mechanism_runs_under_every_relation_the_registry_allows(tmp_path, name, relation):
    data = _tiny_csvs(tmp_path)
    spec = api.MECHANISMS[name]
    argv = ["synth", "--mechanism", name, "--data", str(tmp_path / "data.csv")]
    argv += ["--domain", str(tmp_path / "domain.json"), "--epsilon", "1", "--seed", "0"]
    argv += ["--relation", relation, "--workload", "all-2way", "--out", str(tmp_path / "o.csv")]
    argv += ["--report", str(tmp_path / "r.json"), "--errors", str(tmp_path / "e.json")]
    if not (spec.one_round or spec.fixed_rounds):
        argv += ["--rounds", str(_pair_rounds(name))]
    if spec.public:
        argv += ["--public", str(tmp_path / "public.csv")]
    assert main(argv) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["relation"] == relation and report["ledger"]
    assert report["rho_spent"] <= report["rho_budget"]
    errors = json.loads((tmp_path / "e.json").read_text())
    assert ("relaxed" in errors) == spec.relaxed  # the fitted distribution's own errors, besides the records'
    assert ("best_mixture_error" in errors) == spec.public
    if report["output"] == "synthetic records":
        header, codes = _read_codes(tmp_path / "o.csv", data.domain)
        assert header == list(data.domain.names) and len(codes) > 0
        assert (codes >= 0).all() and (codes < np.array(data.domain.sizes)).all()


def test_a_relation_the_mechanism_does_not_support_is_refused_naming_both(tmp_path, capsys):
    _tiny_csvs(tmp_path)
    argv = ["synth", "--mechanism", "gem", "--data", str(tmp_path / "data.csv"), "--domain"]
    argv += [str(tmp_path / "domain.json"), "--epsilon", "1", "--relation", "add-remove"]
    assert main([*argv, "--out", str(tmp_path / "o.csv")]) == 2
    assert "'gem' supports relation replace-one, not add-remove" in capsys.readouterr().err
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("name", ["aim", "independent", "gem"])
def test_one_default_relation_per_mechanism_in_the_cli_the_api_and_the_report(tmp_path, name):
    data = _tiny_csvs(tmp_path)
    default = api.MECHANISMS[name].relations[0].value
    argv = ["synth", "--mechanism", name, "--data", str(tmp_path / "data.csv"), "--domain"]
    argv += [str(tmp_path / "domain.json"), "--epsilon", "1", "--seed", "0", "--workload", "all-2way"]
    argv += ["--rounds", str(_pair_rounds(name))] if name != "independent" else []
    assert main([*argv, "--out", str(tmp_path / "o.csv"), "--report", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["relation"] == default
    options = {"rounds": _pair_rounds(name)} if name != "independent" else {}
    result = jaxdp.synthesize(
        data, None, mechanism=name, epsilon=1.0, key=jax.random.key(0), workload="all-2way", **options
    )
    assert result.report["relation"] == default == result.mechanism.relation.value
    assert default == ("add-remove" if name == "aim" else "replace-one")  # as README's table says


def test_default_rounds_are_capped_at_the_workload_and_the_cap_is_logged(caplog):
    """GEM's 50 default rounds on a 15-marginal workload (the issue: 50 against 37 marginals was
    refused); RAP's 10 rounds of 5 marginals against 15 marginals."""
    from jaxdp.queries import from_cliques

    from .mechanisms.conftest import tiny_dataset

    data = tiny_dataset()
    cliques = [c for k in (1, 2, 3, 4) for c in itertools.combinations(range(4), k)]
    workload = from_cliques(data.domain.sizes, cliques)
    caplog.set_level(logging.INFO, logger="jaxdp")
    gem = api.build("gem", data, workload, epsilon=1.0, batch=32, hidden=(8,), latent_dim=4)
    rap = api.build("rap", data, workload, epsilon=1.0)
    assert len(workload) == 15 and gem.rounds == 15 and rap.rounds == 3
    messages = [r.getMessage() for r in caplog.records]
    assert "gem: default rounds 50 capped at 15, what the workload's 15 marginals allow" in messages
    assert "rap: default rounds 10 capped at 3, what the workload's 15 marginals allow" in messages
    with pytest.raises(ValueError, match="exceeds the 15 marginals"):  # explicit rounds are never capped
        api.build("gem", data, workload, epsilon=1.0, rounds=16)


def test_a_raw_table_with_a_schema_comes_back_in_its_columns_and_units(tmp_path):
    schema = {
        "columns": {
            "height": {"type": "numeric", "lower": 100, "upper": 220, "integer": True, "bins": 12},
            "colour": {"type": "categorical", "categories": ["red", "green"], "nullable": True},
            "weight": {"type": "numeric", "lower": 0, "upper": 200, "edges": [50, 80, 120]},
        }
    }
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    rng = np.random.default_rng(1)
    with open(tmp_path / "raw.csv", "w") as fh:
        fh.write("height,colour,weight\n")
        for h, c, w in zip(
            rng.integers(150, 200, 400), rng.integers(0, 3, 400), rng.random(400), strict=True
        ):
            fh.write(f"{h}, {['red', 'green', ''][c]}, {60 + 40 * w:.3f}\n")
    argv = ["synth", "--mechanism", "aim", "--data", str(tmp_path / "raw.csv"), "--schema"]
    argv += [str(tmp_path / "schema.json"), "--epsilon", "3", "--seed", "1", "--workload", "all-2way"]
    argv += ["--rounds", "3", "--out", str(tmp_path / "o.csv"), "--report", str(tmp_path / "r.json")]
    assert main(argv) == 0
    with open(tmp_path / "o.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["height", "colour", "weight"]
    heights = [int(r[0]) for r in rows[1:]]  # whole numbers, as declared
    assert min(heights) >= 100 and max(heights) <= 220
    assert {r[1] for r in rows[1:]} <= {"red", "green", ""}
    assert all(0 <= float(r[2]) <= 200 for r in rows[1:])
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["relation"] == "add-remove" and report["mechanism"] == "aim"
    assert report["preprocessing"]["columns"]["weight"]["edges"] == [50, 80, 120]


def _readme_main_job() -> list[str]:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", readme, flags=re.S).group(1)
    return shlex.split(first.split("python -m jaxdp ", 1)[1])


def test_the_readme_main_job_is_aim_on_adult_with_the_workload_the_package_ships():
    argv = _readme_main_job()
    options = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert argv[0] == "synth" and options["--mechanism"] == "aim" and options["--dataset"] == "adult"
    assert options["--workload"] in datasets.WORKLOADS
    assert {"--out", "--report", "--errors"} <= set(options)
    workload = api.workload_from_spec(options["--workload"], datasets.domain("adult"))
    assert len(workload) == 12 and all(
        "income>50K" in names for names in workload.names(datasets.domain("adult"))
    )


@pytest.mark.slow
def test_the_readme_main_job_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(_readme_main_job()) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["mechanism"] == "aim" and report["relation"] == "add-remove"
    assert report["rho_spent"] == pytest.approx(report["rho_budget"], rel=1e-6)
    assert len(report["error_bounds"]["marginals"]) == 12
    errors = json.loads((tmp_path / "errors.json").read_text())
    # seed 0: AIM 0.0089, Independent 0.183 (it ignores how each attribute moves with income)
    assert errors["marginals"] == 12 and errors["mean_l1"] < 0.05
    header, codes = _read_codes(tmp_path / "synth.csv")
    assert header == list(datasets.domain("adult").names) and abs(len(codes) - 48842) < 500
