"""The high-level API: containers in and out, a declared schema, the same run as the core."""

import logging
import sys

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import api, loop, releasing
from jaxdp.domain import DataError, Dataset, domain_from_schema
from jaxdp.queries import all_kway
from jaxdp.tables import TableSchema

pd = pytest.importorskip("pandas")

SCHEMA = {
    "columns": {
        "colour": {"type": "categorical", "categories": ["red", "green", "blue"]},
        "size": {"type": "categorical", "categories": ["S", "M", "L", "XL"]},
        "flag": {"type": "categorical", "size": 2},
    }
}
REPORT_KEYS = {
    "mechanism",
    "epsilon",
    "delta",
    "rho_budget",
    "rho_spent",
    "epsilon_spent",
    "accountant",
    "epsilon_zcdp",
    "epsilon_pld",
    "epsilon_gdp",
    "conversion",
    "noise",
    "relation",
    "ledger",
    "seconds",
    "rows",
    "output",
    "preprocessing",
    "jaxdp_version",
}


def _frame(n=300, seed=0):
    rng = np.random.default_rng(seed)
    colour = rng.integers(0, 3, n)
    size = (colour + rng.integers(0, 2, n)) % 4
    flag = rng.integers(0, 2, n)
    return pd.DataFrame(
        {
            "colour": np.array(["red", "green", "blue"])[colour],
            "size": np.array(["S", "M", "L", "XL"])[size],
            "flag": flag,
        }
    )


def _mwem(data, **kw):
    schema = kw.pop("schema", SCHEMA)
    kw.setdefault("workload", "all-2way")
    return jaxdp.synthesize(
        data, schema, mechanism="mwem", epsilon=1.0, key=jax.random.key(3), rounds=3, **kw
    )


def test_dataframe_in_dataframe_out_with_labels_and_an_audited_report():
    frame = _frame()
    result = _mwem(frame)
    assert isinstance(result.data, pd.DataFrame)
    assert list(result.data.columns) == ["colour", "size", "flag"] and len(result.data) == len(frame)
    assert set(result.data["colour"]) <= {"red", "green", "blue"}
    assert set(result.data["flag"]) <= {0, 1}
    assert set(result.report) == REPORT_KEYS and result.report["mechanism"] == "mwem"
    assert len(result.ledger) == 6 and result.report["rho_spent"] <= result.report["rho_budget"]
    assert result.error_bounds is None


def test_the_api_runs_exactly_the_functional_core():
    frame = _frame()
    result = _mwem(frame)
    data = Dataset.from_columns(domain_from_schema(SCHEMA), {c: frame[c].to_numpy() for c in frame})
    mech = jaxdp.mwem(data, all_kway(data.domain.sizes, 2), rounds=3, epsilon=1.0, delta=1e-9)
    run = jaxdp.run(mech, jax.random.key(3))
    codes = np.asarray(jaxdp.release(mech, run.state, jax.random.key(3)))
    np.testing.assert_array_equal(result.synthetic.codes, codes)
    assert [e.to_json() for e in result.ledger] == [e.to_json() for e in run.ledger]


def test_containers_mirror_the_input():
    frame = _frame()
    domain = domain_from_schema(SCHEMA)
    from_frame = _mwem(frame).synthetic.codes
    as_dict = _mwem({c: frame[c].to_list() for c in frame})
    assert isinstance(as_dict.data, dict) and list(as_dict.data) == ["colour", "size", "flag"]
    labels = _mwem(frame.to_numpy())  # object array: labels
    assert labels.data.dtype == object and labels.data.shape == (len(frame), 3)
    codes = Dataset.from_columns(domain, {c: frame[c].to_numpy() for c in frame}).codes
    coded = _mwem(codes)  # numeric array: codes
    assert coded.data.dtype == np.int32
    dataset = _mwem(Dataset(domain, codes, np.zeros((len(codes), 0), np.float32)), schema=None)
    assert isinstance(dataset.data, Dataset)
    for result in (as_dict, labels, coded, dataset):  # same records, same key: same release
        np.testing.assert_array_equal(result.synthetic.codes, from_frame)
    np.testing.assert_array_equal(coded.data, from_frame)


def test_the_domain_is_declared_never_inferred():
    frame = _frame()
    with pytest.raises(TypeError, match="schema is required"):
        _mwem(frame, schema=None)
    bad = frame.assign(colour=frame["colour"].where(frame.index % 7 != 0, "purple"))
    with pytest.raises(DataError, match="'colour'") as err:
        _mwem(bad)
    assert "purple" not in str(err.value)
    with pytest.raises(DataError, match="not declared"):
        _mwem(frame.assign(extra=1))


def test_bad_arguments_are_refused_before_running():
    frame = _frame()
    with pytest.raises(ValueError, match="unknown mechanism"):
        jaxdp.synthesize(frame, SCHEMA, mechanism="nope", epsilon=1.0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="exactly one round"):
        jaxdp.synthesize(frame, SCHEMA, mechanism="independent", epsilon=1.0, key=jax.random.key(0), rounds=3)
    with pytest.raises(ValueError, match="public"):
        jaxdp.synthesize(frame, SCHEMA, mechanism="pmw-pub", epsilon=1.0, key=jax.random.key(0))
    with pytest.raises(TypeError):
        jaxdp.synthesize(frame, SCHEMA, epsilon=1.0, key=0)


def test_answer_releases_come_back_as_a_table():
    result = jaxdp.synthesize(
        _frame(), SCHEMA, mechanism="gaussian", epsilon=1.0, key=jax.random.key(1), workload=[["colour"]]
    )
    assert list(result.data.columns) == ["marginal", "cell", "answer"] and len(result.data) == 3
    assert result.report["output"] == "noisy answers" and result.synthetic is None


def test_public_data_and_registry_extensions():
    frame = _frame()
    public = _frame(n=50, seed=5)
    result = jaxdp.synthesize(
        frame,
        SCHEMA,
        mechanism="pmw-pub",
        epsilon=1.0,
        key=jax.random.key(2),
        rounds=2,
        public=public,
        workload="all-2way",
    )
    assert len(result.ledger) == 4
    spec = api.MECHANISMS["independent"]
    api.register("independent-with-bounds", api.MechanismSpec(spec.factory, one_round=True, error_bounds=_b))
    try:
        bounded = jaxdp.synthesize(
            frame, SCHEMA, mechanism="independent-with-bounds", epsilon=1.0, key=jax.random.key(2)
        )
    finally:
        del api.MECHANISMS["independent-with-bounds"]
    assert bounded.error_bounds == {"sigma": bounded.mechanism.classes[0].measurement.sigma}
    assert bounded.report["error_bounds"] == bounded.error_bounds


def _b(mechanism, state, synthetic, confidence, domain):
    return {"sigma": mechanism.classes[0].measurement.sigma}


def test_silent_by_default(capsys, caplog):
    caplog.set_level(logging.WARNING, logger="jaxdp")
    _mwem(_frame())
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "" and not caplog.records


def test_progress_logs_one_line_per_block_and_changes_nothing(caplog, monkeypatch):
    frame = _frame()
    quiet = _mwem(frame)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # no tqdm: log lines instead of a bar
    caplog.set_level(logging.INFO, logger="jaxdp")
    loud = _mwem(frame, progress=True)
    lines = [r.getMessage() for r in caplog.records if r.name == loop.__name__]
    assert lines == ["round 1/3", "round 2/3", "round 3/3"]
    np.testing.assert_array_equal(quiet.synthetic.codes, loud.synthetic.codes)


def test_progress_bar_when_tqdm_is_installed(capsys):
    """tqdm is in the test extra, so the bar is tested wherever the suite runs."""
    _mwem(_frame(), progress=True)
    assert "3/3" in capsys.readouterr().err


def test_a_records_mesh_is_forwarded_or_refused(monkeypatch):
    """On one device a one-device mesh runs the sharded counting path: the same release; a
    mechanism that cannot count over a mesh, or a mesh of the wrong shape, is refused."""
    from jax.sharding import Mesh

    from jaxdp.queries import records_mesh

    frame = _frame(n=301)
    plain = _mwem(frame)
    built, build = [], api.build
    monkeypatch.setattr(
        api, "build", lambda *args, **kwargs: built.append(build(*args, **kwargs)) or built[-1]
    )
    meshed = _mwem(frame, mesh=records_mesh())
    # the built mechanism's counts live on the mesh (the Result keeps them withheld)
    assert built[0].classes[0].counts._value.sharding.mesh.axis_names == ("records",)
    np.testing.assert_array_equal(meshed.synthetic.codes, plain.synthetic.codes)
    with pytest.raises(ValueError, match="'dualquery' does not count records over a mesh"):
        jaxdp.synthesize(
            frame, SCHEMA, mechanism="dualquery", epsilon=1.0, key=jax.random.key(0), mesh=records_mesh()
        )
    with pytest.raises(ValueError, match="mesh must be a one-dimensional"):
        _mwem(frame, mesh=Mesh(np.asarray(jax.devices()[:1]), ("rows",)))


TABLE = {
    "columns": {
        "colour": {"type": "categorical", "categories": ["red", "green", "blue"], "nullable": True},
        "height": {"type": "numeric", "lower": 1.0, "upper": 2.2, "bins": 4},
        "size": {"type": "categorical", "categories": ["S", "M", "L", "XL"]},
    }
}


def _table_frame(n=300, seed=0):
    frame = _frame(n, seed).drop(columns="flag")
    rng = np.random.default_rng(seed)
    colour = frame["colour"].astype(object)
    colour[rng.random(n) < 0.1] = None
    return pd.DataFrame({"colour": colour, "height": 1.5 + 0.5 * rng.random(n), "size": frame["size"]})


def test_a_public_table_is_coded_like_the_private_one():
    result = jaxdp.synthesize(
        _table_frame(),
        TABLE,
        mechanism="pmw-pub",
        epsilon=1.0,
        key=jax.random.key(2),
        rounds=2,
        public=_table_frame(n=60, seed=5),
        workload="all-2way",
    )
    out = result.data
    assert list(out.columns) == ["colour", "height", "size"] and len(out) == 300
    assert out["height"].between(1.0, 2.2).all() and set(out["size"]) <= {"S", "M", "L", "XL"}
    assert set(out["colour"].dropna()) <= {"red", "green", "blue"}
    assert result.report["preprocessing"]["columns"]["height"]["edges"] == pytest.approx([1.3, 1.6, 1.9])


def test_answer_releases_of_a_table_are_over_its_coded_columns():
    result = jaxdp.synthesize(
        _table_frame(),
        TABLE,
        mechanism="gaussian",
        epsilon=1.0,
        key=jax.random.key(1),
        workload=[["colour", "height"]],
    )
    assert list(result.data.columns) == ["marginal", "cell", "answer"]
    assert len(result.data) == (3 + 1) * 4  # colour's empty level times height's 4 bins
    assert result.report["preprocessing"]["columns"]["colour"]["nullable"] is True


@pytest.mark.parametrize("container", ["dict", "labels", "codes"])
def test_table_releases_come_back_in_the_input_container(container):
    frame = _table_frame(n=200)
    schema = TableSchema.from_json(TABLE)
    if container == "dict":
        data = {c: frame[c].tolist() for c in frame}
    elif container == "labels":
        data = frame.to_numpy(dtype=object)
    else:  # codes for the categorical columns, NaN where empty
        codes = {"colour": ["red", "green", "blue"], "size": ["S", "M", "L", "XL"]}
        data = np.stack(
            [
                frame["colour"]
                .map(lambda v: np.nan if v is None else codes["colour"].index(v))
                .to_numpy(float),
                frame["height"].to_numpy(float),
                frame["size"].map(codes["size"].index).to_numpy(float),
            ],
            axis=1,
        )
    result = jaxdp.synthesize(data, TABLE, mechanism="independent", epsilon=1.0, key=jax.random.key(0))
    reference = jaxdp.synthesize(frame, schema, mechanism="independent", epsilon=1.0, key=jax.random.key(0))
    np.testing.assert_array_equal(result.synthetic.codes, reference.synthetic.codes)  # same records
    out = result.data
    if container == "dict":  # None where empty (the DataFrame shows it as NaN)
        assert list(out) == ["colour", "height", "size"]
        assert pd.Series(out["colour"]).fillna("-").tolist() == reference.data["colour"].fillna("-").tolist()
    elif container == "labels":
        assert out.dtype == object and out.shape == (200, 3) and set(out[:, 2]) <= {"S", "M", "L", "XL"}
    else:
        assert out.dtype == np.float64 and out.shape == (200, 3)
        np.testing.assert_array_equal(np.isnan(out[:, 0]), reference.data["colour"].isna().to_numpy())
        assert set(out[:, 2]) <= {0.0, 1.0, 2.0, 3.0}


def test_small_releases_compile_for_a_short_run_and_large_ones_with_xla_defaults(monkeypatch):
    # The fast-compiled release draws what the eager release draws (the next test); here, which
    # releases get it: those of at most FAST_RELEASE_ROWS records, and every answers release,
    # whether compiled ahead or at the release.
    from tests.conftest import CallCounter
    from tests.mechanisms.conftest import tiny_dataset

    data = tiny_dataset()
    mech = jaxdp.pep(data, all_kway(data.domain.sizes, 2), rounds=3, epsilon=1.0, delta=1e-6)
    assert releasing._release_compiler(mech, None) is releasing._release_fast_compiled  # n = len(data)
    assert releasing._release_compiler(mech, releasing.FAST_RELEASE_ROWS) is releasing._release_fast_compiled
    assert releasing._release_compiler(mech, releasing.FAST_RELEASE_ROWS + 1) is releasing._release_jit
    answers = jaxdp.gaussian(data, all_kway(data.domain.sizes, 2), epsilon=1.0, delta=1e-6)
    assert releasing._release_compiler(answers, None) is releasing._release_fast_compiled
    fast = CallCounter(releasing._release_fast_compiled)
    monkeypatch.setattr(releasing, "_release_fast_compiled", fast)
    key = jax.random.key(3)
    state = loop.run(mech, key).state
    releasing.released(mech, state, key, 17)  # compiled at the release, on the release thread
    monkeypatch.setattr(releasing, "_compiles_ahead", lambda mechanism: False)
    releasing.released(mech, state, key, 17)  # the plain path
    assert (fast.lowerings, fast.calls) == (1, 1)


def test_a_release_compiled_ahead_draws_what_the_release_draws():
    # `execute` compiles the release on another thread while the rounds run (rows known before
    # the run: n under replace-one). Its records are those of the plain release, and a row count
    # that differs from the one compiled for gets a program of its own.
    from tests.conftest import programs_built
    from tests.mechanisms.conftest import tiny_dataset

    data = tiny_dataset()
    mech = jaxdp.pep(data, all_kway(data.domain.sizes, 2), rounds=3, epsilon=1.0, delta=1e-6)
    key = jax.random.key(7)
    assert releasing.release_ahead(mech, key, None)
    state = loop.run(mech, key).state
    releasing._release_program(mech, loop.state_shapes(mech, key), key, len(data))  # wait for it
    for rows, compiles in ((len(data), 0), (123, 1)):
        with programs_built() as built:
            got = np.asarray(releasing.released(mech, state, key, rows))
        assert len(built) == compiles  # the program compiled ahead is the one used
        np.testing.assert_array_equal(got, np.asarray(loop.release(mech, state, key, rows=rows)))
        assert got.shape == (rows, len(data.domain.sizes))
    add_remove = jaxdp.independent(data, epsilon=1.0, delta=1e-6, relation="add-remove")
    assert not releasing.release_ahead(add_remove, key, None)  # its rows come from the noisy state
    assert releasing.release_ahead(add_remove, key, 50)
    # wait for it: a compile left running would write to the test cache after the test
    releasing._release_program(add_remove, loop.state_shapes(add_remove, key), key, 50)
