"""A release's model (`jaxdp.models`): it samples the release again, conditions exactly where the
family allows it, saves to a file that holds no private value, and refuses a bad file."""

from __future__ import annotations

import itertools
import json
import os
import stat

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import _serial, api
from jaxdp.conditions import condition
from jaxdp.families import pgm, pgm_marginals
from jaxdp.queries import all_kway
from tests._needles import found_in, marginal, needles

pytest.importorskip("mbi")

SCHEMA = {
    "columns": {
        "age": {"type": "numeric", "lower": 17, "upper": 90, "integer": True, "bins": 8},
        "income": {"type": "numeric", "lower": 0, "upper": 100000, "bins": 5, "nullable": True},
        "sex": {"type": "categorical", "categories": ["Female", "Male"]},
        "colour": {"type": "categorical", "categories": ["red", "green", "blue", "violet"], "nullable": True},
    }
}
RARE_VALUE = 12345.678901  # one record's income: a value no bin edge or bound equals
RARE_LABEL = "violet"  # one record's colour


def _table(n: int = 3000, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    sex = rng.choice(["Female", "Male"], n)
    age = np.where(sex == "Female", rng.integers(17, 50, n), rng.integers(30, 91, n))
    income = np.round(rng.uniform(0, 100000, n), 2)
    income[0] = RARE_VALUE
    colour = rng.choice(["red", "green", "blue", None], n, p=[0.5, 0.3, 0.15, 0.05]).astype(object)
    colour[1] = RARE_LABEL
    return {"age": age, "income": income, "sex": sex, "colour": colour}


@pytest.fixture(scope="module")
def released():
    table = _table()
    result = jaxdp.synthesize(
        table, SCHEMA, mechanism="aim", epsilon=2.0, key=jax.random.key(7), workload="all-2way"
    )
    return table, result


def test_the_model_samples_the_release_again_and_after_a_save(released, tmp_path):
    """sample(root key) is the release, bit for bit, before and after save/load; the file is
    owner-only; another key gives other records; sampling spends nothing (the ledger is the
    release's)."""
    _, result = released
    model = result.model
    again = model.sample(jax.random.key(7))
    for name in SCHEMA["columns"]:
        np.testing.assert_array_equal(again.columns()[name], result.data[name])
    path = model.save(tmp_path / "model.jaxdp")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = jaxdp.load_model(path)
    assert loaded.report == model.report and "seconds" not in loaded.report
    assert [e.to_json() for e in loaded.ledger] == result.report["ledger"]
    np.testing.assert_array_equal(loaded.sample(jax.random.key(7)).values["income"], result.data["income"])
    other = loaded.sample(jax.random.key(8), rows=500)
    assert len(other) == 500 and not np.array_equal(other.values["income"], result.data["income"][:500])


def _private_needles(table: dict) -> dict[str, set[bytes]]:
    """The rare value in every encoding a copy would take, and windows of the records."""
    rare = np.array([RARE_VALUE])
    found = {
        "rare value": {rare.astype("<f8").tobytes(), rare.astype("<f4").tobytes(), repr(RARE_VALUE).encode()},
        "records": needles(np.asarray(table["income"])) | needles(np.asarray(table["age"])),
    }
    return found


def test_a_saved_model_holds_no_private_value(released, tmp_path):
    """Scan the file for a value one record holds and windows of the table's columns; and the one
    record's rare label (public: the schema declares it) is mentioned exactly as often as in the
    model of the same release made without that record. Negative control: a file that holds the
    table (written by the same writer) is caught on each."""
    table, result = released
    path = result.model.save(tmp_path / "model.jaxdp")
    private = _private_needles(table)
    data = {"model": path.read_bytes()}
    for kind, found in private.items():
        assert found_in(data, found) == [], f"the model file holds the private {kind}"
    without = dict(table, colour=np.where(table["colour"] == RARE_LABEL, "red", table["colour"]))
    other = jaxdp.synthesize(
        without, SCHEMA, mechanism="aim", epsilon=2.0, key=jax.random.key(7), workload="all-2way"
    ).model.save(tmp_path / "without.jaxdp")
    mentions = data["model"].count(RARE_LABEL.encode())
    assert mentions == other.read_bytes().count(RARE_LABEL.encode())
    leaky = {}
    for name, rows in (("with", table), ("without", without)):
        arrays: list[np.ndarray] = []
        with open(tmp_path / name, "wb") as fh:
            tree = {**{k: np.asarray(rows[k]) for k in ("income", "age")}, "colour": list(rows["colour"])}
            _serial.write_zip(fh, {"tree": _serial.encode(tree, arrays)}, arrays)
        leaky[name] = (tmp_path / name).read_bytes()
    for kind, found in private.items():
        assert "with" in found_in(leaky, found), f"the scan missed the {kind}"
    assert leaky["with"].count(RARE_LABEL.encode()) > leaky["without"].count(RARE_LABEL.encode())


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: b[:300] + bytes([b[300] ^ 0xFF]) + b[301:], "corrupt"),
        (lambda b: b"not a model at all", "truncated, or not a model"),
    ],
    ids=["truncated", "changed", "foreign"],
)
def test_a_damaged_file_is_refused_with_a_line_saying_so(released, tmp_path, damage, message):
    path = released[1].model.save(tmp_path / "model.jaxdp")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(jaxdp.ModelFileError, match=message):
        jaxdp.load_model(path)


def test_another_file_of_arrays_or_another_format_version_is_refused(released, tmp_path):
    foreign = tmp_path / "checkpoint.npz"
    with open(foreign, "wb") as fh:
        _serial.write_zip(fh, {"format": 1, "state": None}, [])
    with pytest.raises(jaxdp.ModelFileError, match="not a jaxdp model file"):
        jaxdp.load_model(foreign)
    newer = tmp_path / "newer.jaxdp"
    with open(newer, "wb") as fh:
        _serial.write_zip(fh, {"format": "jaxdp-model", "format_version": 99}, [])
    with pytest.raises(jaxdp.ModelFileError, match="format 99"):
        jaxdp.load_model(newer)
    with pytest.raises(jaxdp.ModelFileError, match="cannot read model"):
        jaxdp.load_model(tmp_path / "missing.jaxdp")


def _renamed(path, tmp_path, names: dict[str, str]):
    """The model file at `path` rewritten with its classes under other names (a valid file)."""
    with open(path, "rb") as fh:
        manifest, arrays = _serial.read_zip(fh)
    text = json.dumps(manifest)
    for now, then in names.items():
        text = text.replace(f'"{now}"', f'"{then}"')
    older = tmp_path / "older.jaxdp"
    with open(older, "wb") as fh:
        _serial.write_zip(fh, json.loads(text), arrays)
    return older


def _as_written_before(model, tmp_path, name: str):
    """`model` saved, and the same file with every class `_serial.MOVED` knows named at its old
    place: (the file's old names, the model read back from the rewritten file)."""
    path = model.save(tmp_path / name)
    with open(path, "rb") as fh:
        written = json.dumps(_serial.read_zip(fh)[0])
    assert not any(f'"{then}"' in written for then in _serial.MOVED)  # written under the new names
    old_names = {now: then for then, now in _serial.MOVED.items() if f'"{now}"' in written}
    return set(old_names.values()), jaxdp.load_model(_renamed(path, tmp_path, old_names))


def _samples_alike(one, other, key) -> None:
    for name in SCHEMA["columns"]:
        np.testing.assert_array_equal(one.sample(key).columns()[name], other.sample(key).columns()[name])


def test_a_model_saved_before_its_classes_moved_loads_and_samples_the_same(released, tmp_path):
    """A file naming the classes where an earlier version defined them (`_serial.MOVED`) reads
    back as the model saved now; a class named at an old place it never had is still refused."""
    model = released[1].model
    old_names, older = _as_written_before(model, tmp_path, "model.jaxdp")
    assert len(old_names) >= 4, old_names  # the driver, its state, AIM's rule and its schedule
    _samples_alike(older, model, jax.random.key(3))
    stranger = {"jaxdp.mechanisms.host_loop:Annealed": "jaxdp.mechanisms.annealed:AnnealedRule"}
    with pytest.raises(jaxdp.ModelFileError):
        jaxdp.load_model(_renamed(tmp_path / "model.jaxdp", tmp_path, stranger))


def test_a_compiled_mechanisms_model_saved_before_the_samplers_moved_loads(released, tmp_path):
    """A compiled mechanism's model holds its noise scales' sampler parameters (`GaussianParams`,
    `DyadicRate`), which lived in one module `jaxdp.samplers` before it became a package."""
    table = released[0]
    result = jaxdp.synthesize(
        table, SCHEMA, mechanism="mwem", epsilon=1.0, key=jax.random.key(2), workload="all-2way", rounds=3
    )
    old_names, older = _as_written_before(result.model, tmp_path, "mwem.jaxdp")
    assert {"jaxdp.samplers:GaussianParams", "jaxdp.samplers:DyadicRate"} <= old_names
    _samples_alike(older, result.model, jax.random.key(4))


def _brute_joint(model: pgm.Model) -> np.ndarray:
    log_p = np.zeros(model.sizes)
    for clique, table in zip(model.cliques, model.potentials, strict=True):
        shape = [model.sizes[a] if a in clique else 1 for a in range(len(model.sizes))]
        log_p = log_p + np.asarray(table, np.float64).reshape(shape)
    p = np.exp(log_p - log_p.max())
    return p / p.sum()


def test_a_graphical_model_conditions_exactly():
    """`pgm_marginals.conditioned` against brute force over a small domain: the conditional's every
    marginal is the joint times the evidence weights, normalised (zeros and a fraction among
    them, an attribute in no clique too), and the evidence's probability is their sum."""
    rng = np.random.default_rng(3)
    sizes = (3, 4, 2, 5)
    cliques = ((0, 1), (1, 2))  # attribute 3 is in no clique
    model = pgm.Model(sizes, cliques, tuple(rng.normal(size=[sizes[a] for a in c]) for c in cliques), 100.0)
    weights = {1: np.array([1.0, 0.0, 0.5, 1.0]), 3: np.array([0.0, 1.0, 1.0, 0.0, 0.0])}
    conditioned, probability = pgm_marginals.conditioned(model, weights)
    joint = _brute_joint(model)
    weighted = joint * weights[1].reshape(1, 4, 1, 1) * weights[3].reshape(1, 1, 1, 5)
    assert probability == pytest.approx(weighted.sum(), rel=1e-9)
    marginals = pgm_marginals.ModelMarginals(conditioned)
    for clique in itertools.chain.from_iterable(itertools.combinations(range(4), k) for k in (1, 2)):
        drop = tuple(a for a in range(4) if a not in clique)
        expected = (weighted / weighted.sum()).sum(axis=drop).reshape(-1)
        np.testing.assert_allclose(marginals.marginal(clique), expected, atol=1e-12)
    _, none = pgm_marginals.conditioned(model, {1: np.zeros(4)})
    assert none == 0.0


def _aim_model(seed: int = 0):
    data = jaxdp.datasets.load("adult-reduced")
    workload = all_kway(data.domain.sizes, 2)
    mechanism = jaxdp.aim(data, workload, epsilon=1.0, delta=1e-9)
    return jaxdp.model(mechanism, jaxdp.run(mechanism, jax.random.key(seed)).state), workload


def _counts(codes: np.ndarray, workload, sizes) -> np.ndarray:
    return np.concatenate([marginal(codes, c, sizes) for c in workload.cliques])


def test_a_conditional_release_follows_the_models_conditional():
    """AIM on ADULT-reduced, conditioned on two of education's values: every record meets the
    condition, and every workload cell's count is within the release's rounding of the
    conditioned model's count (4 records; seen at most 2.45 at 20,000 rows: the sampler's
    per-group rounding and the polish, against a standard deviation of about 30 for records drawn
    independently)."""
    model, workload = _aim_model()
    where = {"education": ["11th", "12th"]}  # codes 1 and 2
    wanted = condition(where, model.domain, None)
    state, probability = model.mechanism.conditioned(model.state, wanted.weights)
    assert 0.0 < probability < 1.0
    answers = np.asarray(model.mechanism.relaxed_answers(state), np.float64)
    for rows in (5000, 20000):
        records = model.sample(jax.random.key(1), rows=rows, where=where)
        assert len(records) == rows and set(np.unique(records.codes[:, 0])) <= {1, 2}
        deviation = np.abs(_counts(records.codes, workload, model.domain.sizes) - rows * answers)
        assert deviation.max() <= 4.0, (rows, deviation.max())


def test_a_compressed_domains_merged_values_condition_exactly():
    """A condition on some of a merged code's values: the merged cell keeps the share of its
    spread they hold, and the spread follows them; the declared-domain answers then equal the
    unconditioned answers restricted to the condition and renormalised (a 2-way marginal and the
    condition's probability, to the float32 answers' rounding)."""
    from jaxdp.families import Compression
    from tests.families.test_compression import _skewed

    data = _skewed(n=2000)
    workload = all_kway(data.domain.sizes, 2)
    mechanism = jaxdp.aim(
        data, workload, epsilon=0.3, delta=1e-6, compress=Compression(min_values=1), max_rounds=8, iters=50
    )
    state = jaxdp.run(mechanism, jax.random.key(3)).state
    assert state.compressed is not None and state.compressed.merged(1)
    merged = state.compressed.merged(1)
    weight = np.ones(data.domain.sizes[1])
    weight[merged[0]] = 0.0  # one merged value ruled out
    conditioned, probability = mechanism.conditioned(state, {1: weight})
    before = np.asarray(mechanism.relaxed_answers(state), np.float64)
    after = np.asarray(mechanism.relaxed_answers(conditioned), np.float64)
    pair = workload.cliques.index((0, 1))
    cells = slice(workload.offsets[pair], workload.offsets[pair] + workload.cells[pair])
    before, after = before[cells].reshape(3, 4), after[cells].reshape(3, 4)
    # the answers are float32: the comparison holds to their rounding
    assert probability == pytest.approx(float(before.sum(axis=0) @ weight), rel=1e-6)
    np.testing.assert_allclose(after, before * weight / probability, atol=1e-6)


def test_a_condition_on_a_raw_table_holds_in_its_units(released):
    """Labels, the empty cell and a numeric range in the table's units: every record meets them;
    "range or empty" and "" in a list of labels read as the empty cell."""
    _, result = released
    records = result.model.sample(
        jax.random.key(2), rows=800, where={"sex": "Female", "age": (30, 40), "colour": ["red", ""]}
    )
    assert len(records) == 800
    columns = records.columns()
    assert set(columns["sex"]) == {"Female"}
    assert columns["age"].min() >= 30 and columns["age"].max() <= 40
    assert set(columns["colour"]) <= {"red", None}
    either = result.model.sample(jax.random.key(3), rows=500, where={"income": "0:20000,"})
    values = either.values["income"]
    assert np.all(np.isnan(values) | ((values >= 0) & (values <= 20000)))


def _cdf_gap(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.union1d(a, b)
    return float(
        np.max(
            np.abs(
                np.searchsorted(np.sort(a), grid, "right") / a.size
                - np.searchsorted(np.sort(b), grid, "right") / b.size
            )
        )
    )


def test_a_range_is_drawn_from_its_bins_distribution_within_it(released):
    """A range that cuts bins: the conditioned ages are distributed as the unconditioned release's
    ages that fall in the range (two-sample Kolmogorov-Smirnov gap under 0.045, the 1e-4 critical
    value for independent samples of these sizes; the releases round, so they agree more closely).
    Negative control, run once by mutation: a decode that ignores the range within the bins (and
    clips) piles ages on 30 and 40 (51% of them, against 21%), a gap near 0.15."""
    _, result = released
    conditioned = result.model.sample(jax.random.key(4), rows=4000, where={"age": (30, 40)}).values["age"]
    everyone = result.model.sample(jax.random.key(5), rows=40000).values["age"]
    inside = everyone[(everyone >= 30) & (everyone <= 40)]
    assert inside.size > 3000
    assert _cdf_gap(conditioned, inside) < 0.045


def test_a_release_with_private_quantile_bins_is_sampled_again_by_its_model(tmp_path):
    """The fine-histogram decode of private quantile bins replays from the model too."""
    schema = {
        "columns": {
            **SCHEMA["columns"],
            "income": {"type": "numeric", "lower": 0, "upper": 100000, "binning": "quantiles"},
        }
    }
    table = _table(n=2000, seed=1)
    result = jaxdp.synthesize(
        table, schema, mechanism="aim", epsilon=2.0, key=jax.random.key(9), workload="all-2way"
    )
    loaded = jaxdp.load_model(result.model.save(tmp_path / "q.jaxdp"))
    np.testing.assert_array_equal(loaded.sample(jax.random.key(9)).values["income"], result.data["income"])


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"height": (1, 2)}, "'height' is not a column"),
        ({"sex": "Other"}, "'sex' has no category 'Other'"),
        ({"age": (10, 15)}, "outside its bounds"),
        ({"age": (40, 30)}, "reversed"),
        ({"income": 500.0}, "continuous: a single value has no mass"),
        ({"sex": None}, "'sex' has no empty cells"),
        ({}, "at least one column"),
        ({"sex": []}, "'sex' names no value"),
        ({"age": [(20, 30), (40, 50)]}, "takes one range"),
        ({"age": [(20, 30), None]}, "'age' has no empty cells"),
    ],
)
def test_a_condition_outside_the_schema_is_refused_by_name(released, where, message):
    with pytest.raises(ValueError, match=message):
        released[1].model.sample(jax.random.key(0), where=where)


def test_a_histogram_conditions_exactly():
    """PEP (a histogram over the whole domain): the conditioned output distribution is the
    restriction of the unconditioned one, renormalised (its 2-way answers, to float32 rounding),
    and every record of the conditional release meets the condition."""
    data = jaxdp.datasets.load("adult-reduced")
    workload = all_kway(data.domain.sizes, 2)
    mechanism = api.build("pep", data, workload, epsilon=1.0, delta=1e-9)
    model = jaxdp.model(mechanism, jaxdp.run(mechanism, jax.random.key(0)).state, domain=data.domain)
    weight = np.array([1.0, 0.0, 1.0, 0.0, 0.0])  # race 0 or 2
    state, probability = model.mechanism.conditioned(model.state, {3: weight})
    before = np.asarray(model.mechanism.relaxed_answers(model.state), np.float64)
    after = np.asarray(model.mechanism.relaxed_answers(state), np.float64)
    pair = workload.cliques.index((3, 4))  # race x sex
    cells = slice(workload.offsets[pair], workload.offsets[pair] + workload.cells[pair])
    expected = before[cells].reshape(5, 2) * weight[:, None]
    assert probability == pytest.approx(expected.sum(), rel=1e-5)
    np.testing.assert_allclose(after[cells].reshape(5, 2), expected / probability, atol=1e-6)
    records = model.sample(jax.random.key(1), rows=3000, where={"race": ["Amer-Indian-Eskimo", "Black"]})
    assert len(records) == 3000 and set(np.unique(records.codes[:, 3])) <= {0, 2}


def test_a_family_without_an_exact_conditional_samples_by_rejection():
    """Independent (a product of noisy 1-way marginals, no exact conditional here) samples by
    rejection: every record meets the condition; a condition below the acceptance floor is
    refused, naming the floor."""
    data = jaxdp.datasets.load("adult-reduced")
    mechanism = api.build("independent", data, all_kway(data.domain.sizes, 2), epsilon=1.0, delta=1e-9)
    model = jaxdp.model(mechanism, jaxdp.run(mechanism, jax.random.key(0)).state, domain=data.domain)
    assert model.mechanism.conditioned(model.state, {4: np.array([0.0, 1.0])}) is None
    records = model.sample(
        jax.random.key(1),
        rows=3000,
        where={"sex": "Male", "race": ["Amer-Indian-Eskimo", "Asian-Pac-Islander"]},
    )
    assert len(records) == 3000
    assert set(np.unique(records.codes[:, 4])) == {1} and set(np.unique(records.codes[:, 3])) <= {0, 1}
    with pytest.raises(ValueError, match="below the 1%"):
        model.sample(
            jax.random.key(1), rows=10, where={"education": "10th", "race": "White", "occupation": "?"}
        )


def test_answers_releases_have_no_records_to_sample(released):
    data = jaxdp.datasets.load("adult-reduced")
    result = jaxdp.synthesize(
        data, data.domain, mechanism="gaussian", epsilon=1.0, key=jax.random.key(0), workload="all-2way"
    )
    with pytest.raises(ValueError, match="noisy answers, not records"):
        result.model.sample(jax.random.key(0))


def test_a_noisy_answer_releases_marginals_are_its_measurements():
    """Gaussian's model lists its noisy answers as measured cells: counts with the measurement's
    sigma (and fractions under replace-one, n public)."""
    data = jaxdp.datasets.load("adult-reduced")
    for relation in ("replace-one", "add-remove"):
        result = jaxdp.synthesize(
            data,
            data.domain,
            mechanism="gaussian",
            epsilon=1.0,
            key=jax.random.key(0),
            workload="all-2way",
            relation=relation,
        )
        table = result.model.marginals()
        assert set(table["kind"]) == {"measured"} and len(table["value"]) == len(result.answers)
        sigma = result.report["ledger"][0]["scale"]
        assert table["std"][0] == pytest.approx(sigma, rel=1e-6)
        counts = result.answers * (len(data) if relation == "replace-one" else 1)
        np.testing.assert_allclose(table["value"], counts, rtol=1e-9)
        assert (table["fraction"][0] is None) == (relation == "add-remove")


def test_marginals_name_a_mixed_releases_categorical_marginals():
    """RAP++'s workload indexes the categorical attributes only: its marginals are named by them."""
    result = jaxdp.synthesize(
        _table(n=1500),
        SCHEMA,
        mechanism="rap++",
        epsilon=2.0,
        key=jax.random.key(0),
        rounds=1,
        workload=[["sex", "colour"]],
    )
    assert set(result.model.marginals()["marginal"]) == {"sex|colour"}


def test_marginals_list_the_measurements_with_their_noise_and_the_workload_with_its_bounds(released):
    _, result = released
    table = result.model.marginals()
    kinds = np.asarray(table["kind"])
    measured = kinds == "measured"
    assert measured.any() and (kinds == "model").any()
    measurements = result.model.state.measurements
    assert measured.sum() == sum(np.size(m.noisy) for m in measurements)
    assert all(s > 0 for s, k in zip(table["std"], kinds, strict=True) if k == "measured")
    bounds = result.report["error_bounds"]["marginals"]
    model_rows = [i for i, k in enumerate(kinds) if k == "model"]
    assert {table["l1_bound"][i] for i in model_rows} == {b["l1_bound"] for b in bounds}
    assert any(c.startswith("[") for c in table["cell"])  # numeric bins named by their ranges
    assert any("(empty)" in c for c in table["cell"])
