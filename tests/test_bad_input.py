"""Bad input through the Python API and the CLI: a clear error that names the argument or column
(with counts), never a private value, and nothing written.

Each bad table plants a distinctive value (SECRET) in the data; the message must not contain it.
"""

from __future__ import annotations

import importlib
import json
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import noise
from jaxdp.cli import main
from jaxdp.domain import DataError
from jaxdp.queries import MarginalWorkload, all_kway
from jaxdp.types import Sensitive

from .mechanisms.conftest import FACTORIES, tiny_dataset

SECRET = "987654"  # planted in bad tables; must never appear in a message
SCHEMA = {
    "columns": {
        "colour": {"type": "categorical", "categories": ["red", "green"]},
        "level": {"type": "categorical", "size": 3},
        "income": {"type": "numeric", "lower": 0, "upper": 1000},
    }
}
GOOD_ROWS = ["red,0,10", "green,1,20", "red,2,30"]

# (name, header, two bad rows (the counts in messages are 2), message pattern)
BAD_TABLES = [
    ("nan", "colour,level,income", ["red,nan,1", "red,nan,1"], r"'level': 2 value\(s\) are NaN"),
    ("+inf", "colour,level,income", ["red,0,inf", "red,0,inf"], r"'income': 2 value\(s\) are NaN, infinite"),
    ("-inf", "colour,level,income", ["red,-inf,1", "red,-inf,1"], r"'level': 2 value\(s\) are NaN"),
    ("code out of range", "colour,level,income", [f"red,{SECRET},1"] * 2, r"'level': 2 code\(s\) outside \[0, 3\)"),  # noqa: E501
    ("unseen label", "colour,level,income", [f"x{SECRET},0,1"] * 2, r"'colour': 2 value\(s\) are not among"),
    ("non-integer code", "colour,level,income", [f"red,1.{SECRET},1"] * 2, r"'level': 2 value\(s\) are not integers"),  # noqa: E501
    ("outside bounds", "colour,level,income", [f"red,0,{SECRET}"] * 2, r"'income': 2 value\(s\) outside the declared"),  # noqa: E501
    ("not a number", "colour,level,income", [f"red,0,x{SECRET}"] * 2, r"'income': 2 value\(s\) are not numbers"),  # noqa: E501
    ("missing column", "colour,level", [f"red,{SECRET[0]}"], r"missing columns declared in the domain: \['income'\]"),  # noqa: E501
    ("duplicate column", "colour,level,level,income", ["red,0,0,1"], r"duplicate columns: \['level'\]"),
    ("extra column", "colour,level,income,extra", [f"red,0,1,{SECRET}"], r"columns not declared in the domain: \['extra'\]"),  # noqa: E501
    ("empty table", "colour,level,income", [], r"empty \(0 records\)"),
]  # fmt: skip


def _write(tmp_path, header: str, rows: list[str]):
    data = tmp_path / "data.csv"
    good = GOOD_ROWS if rows and header == "colour,level,income" else []
    data.write_text("\n".join([header, *good, *rows]) + "\n")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


@pytest.mark.parametrize(
    ("header", "rows", "match"), [c[1:] for c in BAD_TABLES], ids=[c[0] for c in BAD_TABLES]
)
def test_bad_table_python_api(tmp_path, header, rows, match):
    data, schema = _write(tmp_path, header, rows)
    with pytest.raises(DataError, match=match) as err:
        jaxdp.read_csv(data, jaxdp.load_domain(schema))
    assert SECRET not in str(err.value)


def _cli_fails(tmp_path, capsys, argv: list[str], match: str) -> str:
    """Run the CLI; it must exit 2 with one line naming `match`, and write nothing."""
    out = tmp_path / "out"
    out.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    files = ["--out", str(out / "s.csv"), "--report", str(out / "r.json"), "--errors", str(out / "e.json")]
    assert main([*argv, *files]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxdp: error:"), err
    assert re.search(match, err[0]), err[0]
    assert list(out.iterdir()) == [], "an output file (or a temporary one) was left behind"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return err[0]


@pytest.mark.parametrize(
    ("header", "rows", "match"), [c[1:] for c in BAD_TABLES], ids=[c[0] for c in BAD_TABLES]
)
def test_bad_table_cli(tmp_path, capsys, header, rows, match):
    data, schema = _write(tmp_path, header, rows)
    argv = ["synth", "--mechanism", "mwem", "--epsilon", "1", "--data", str(data), "--schema", str(schema)]
    message = _cli_fails(tmp_path, capsys, argv, match)
    assert SECRET not in message


# --- arguments ----------------------------------------------------------------------------------

DOMAIN = jaxdp.Domain.from_sizes({"a": 3, "b": 4, "c": 2})
DATA = jaxdp.Dataset.from_codes(DOMAIN, np.array([[0, 1, 0], [1, 2, 1], [2, 3, 0]] * 20))
WORKLOAD = all_kway(DOMAIN.sizes, 2)  # 3 marginals


def _mwem(**kw):
    kw.setdefault("rounds", 2)
    if "rho" not in kw:
        kw.setdefault("epsilon", 1.0)
        kw.setdefault("delta", 1e-6)
    return jaxdp.mwem(DATA, WORKLOAD, **kw)


BAD_ARGUMENTS = [
    *[(f"epsilon={v}", lambda v=v: _mwem(epsilon=v), "epsilon must be") for v in (0, -1.0, math.nan, math.inf)],  # noqa: E501
    *[(f"delta={v}", lambda v=v: _mwem(delta=v), "delta must be") for v in (0, -1e-6, 1, 1.5, math.nan)],
    *[(f"rho={v}", lambda v=v: _mwem(rho=v), "rho must be") for v in (0, -0.5, math.nan, math.inf)],
    *[(f"alpha={v}", lambda v=v: _mwem(alpha=v), "alpha must be") for v in (-0.1, 0.0, 1.0, 1.5)],
    ("gem alpha", lambda: jaxdp.gem(DATA, WORKLOAD, rounds=1, rho=1.0, alpha=2.0), "alpha must be"),
    *[(f"rounds={v}", lambda v=v: _mwem(rounds=v), "rounds must be an integer >= 1") for v in (0, -3, 2.5)],
    (
        "rounds > candidates",
        lambda: _mwem(rounds=4),
        r"rounds x picks per round = 4 x 1 exceeds the 3 marginals",
    ),
    (
        "k > candidates",
        lambda: jaxdp.rap(DATA, WORKLOAD, rounds=1, marginals_per_round=4, rho=1.0),
        "rounds x picks per round = 1 x 4 exceeds the 3 marginals",
    ),
    ("empty workload", lambda: MarginalWorkload(DOMAIN.sizes, ()), "workload is empty"),
    ("workload attribute not in domain", lambda: jaxdp.queries.from_names(DOMAIN, [["a", "zz"]]), "'zz'"),
    ("workload of another domain", lambda: jaxdp.mwem(DATA, all_kway((3, 4), 2), rounds=1, rho=1.0), "domain"),  # noqa: E501
    (
        "domain too large for a histogram",
        lambda: jaxdp.mwem(
            jaxdp.Dataset.from_codes(jaxdp.Domain.from_sizes({f"x{i}": 90 for i in range(5)}), np.zeros((4, 5))),  # noqa: E501
            all_kway((90,) * 5, 1),
            rounds=1,
            rho=1.0,
        ),
        "dense histogram",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("call", "match"), [c[1:] for c in BAD_ARGUMENTS], ids=[c[0] for c in BAD_ARGUMENTS])
def test_bad_arguments_python_api(call, match):
    with pytest.raises(ValueError, match=match):
        call()


CLI_BASE = ["synth", "--mechanism", "mwem", "--dataset", "adult-reduced"]
BAD_CLI = [
    *[(f"epsilon={v}", ["--epsilon", v], "epsilon must be") for v in ("0", "-1", "nan", "inf")],
    *[(f"delta={v}", ["--epsilon", "1", f"--delta={v}"], "delta must be") for v in ("0", "-1e-9", "1", "1.5", "nan")],  # noqa: E501
    *[(f"rounds={v}", ["--epsilon", "1", "--rounds", v], "rounds must be an integer >= 1") for v in ("0", "-2")],  # noqa: E501
    ("epsilon too small to select", ["--epsilon", "1e-12"], "give each selection more budget"),
    ("epsilon too large to select", ["--epsilon", "1e300"], "give each selection less budget"),
    ("rounds not an integer", ["--epsilon", "1", "--rounds", "2.5"], "--rounds"),
    ("rounds > candidates", ["--epsilon", "1", "--rounds", "40", "--workload", "all-1way"], "exceeds"),
    ("domain too large", ["--epsilon", "1", "--rounds", "1", "--workload", "all-1way", "--dataset", "adult"], "dense histogram"),  # noqa: E501
]  # fmt: skip


@pytest.mark.parametrize(("extra", "match"), [c[1:] for c in BAD_CLI], ids=[c[0] for c in BAD_CLI])
def test_bad_arguments_cli(tmp_path, capsys, extra, match):
    argv = list(CLI_BASE)
    if "--dataset" in extra:  # replace the dataset
        argv = argv[:-2]
    _cli_fails(tmp_path, capsys, [*argv, *extra], match)


@pytest.mark.parametrize(
    ("workload", "match"),
    [([], "workload is empty"), ([["age", "nope"]], "'nope'"), ({"a": 1}, "JSON list of lists")],
    ids=["empty", "unknown attribute", "not a list"],
)
def test_bad_workload_file_cli(tmp_path, capsys, workload, match):
    spec = tmp_path / "w.json"
    spec.write_text(json.dumps(workload))
    _cli_fails(
        tmp_path, capsys, [*CLI_BASE, "--epsilon", "1", "--rounds", "1", "--workload", str(spec)], match
    )


# --- keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 7, np.uint32(3), jax.random.PRNGKey(0)], ids=["0", "7", "uint32", "raw"])
def test_integer_seeds_are_refused_where_a_key_is_required(seed):
    mech = jaxdp.independent(DATA, rho=1.0)
    state = jaxdp.run(mech, jax.random.key(0)).state
    for call in (
        lambda: jaxdp.run(mech, seed),
        lambda: jaxdp.release(mech, state, seed),
        lambda: mech.init(seed),
    ):
        with pytest.raises(TypeError, match="key must be a typed JAX key"):
            call()


def test_a_reused_key_is_refused():
    """With jax's key-reuse checker on (tests/conftest.py) a key drawn from twice raises in the
    primitive; every mechanism's run passes the same checker in the contract suite, so none
    reuses a key internally. (Reusing a root key for two releases is not detectable: run and
    release derive their keys by fold_in, which the checker does not count; docs/privacy.md.)"""
    key = jax.random.key(3)
    noise.gaussian(key, Sensitive(jnp.zeros(3)), sigma=1.0, sensitivity=1.0)
    with pytest.raises(jax.errors.KeyReuseError):
        noise.gaussian(key, Sensitive(jnp.zeros(3)), sigma=1.0, sensitivity=1.0)
    top_key = jax.random.key(4)
    noise.gumbel_top_k(top_key, Sensitive(jnp.zeros(5)), k=2, scale=1.0, sensitivity=1.0)
    with pytest.raises(jax.errors.KeyReuseError):
        noise.exponential(top_key, Sensitive(jnp.zeros(5)), scale=1.0, sensitivity=1.0)


# --- every shipped mechanism refuses a bad budget -----------------------------------------------

BAD_BUDGETS = [
    ({"epsilon": 0.0, "delta": 1e-6}, "epsilon must be"),
    ({"epsilon": math.nan, "delta": 1e-6}, "epsilon must be"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta must be"),
    ({"rho": -0.5}, "rho must be"),
]


@pytest.mark.parametrize(("budget", "match"), BAD_BUDGETS, ids=[m.split()[0] for _, m in BAD_BUDGETS])
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_every_mechanism_refuses_a_bad_budget(name, budget, match):
    """The budget is validated by each factory on the host, before anything is compiled or drawn,
    for every mechanism of the contract suite (AIM included)."""
    if name == "aim":
        pytest.importorskip("mbi")
    with pytest.raises(ValueError, match=match):
        FACTORIES[name](tiny_dataset(n=40), **budget)


# --- the CLI's seed -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", ["-1", "4294967296", "1.5", "x"])
def test_bad_seed_cli(tmp_path, capsys, seed):
    """--seed must be an integer in [0, 2^32) (jax.random.key keeps 32 bits of it)."""
    _cli_fails(tmp_path, capsys, [*CLI_BASE, "--epsilon", "1", "--rounds", "1", "--seed", seed], "--seed")


# --- a key reused inside a mechanism ------------------------------------------------------------


def test_a_mechanism_reusing_its_key_is_caught(monkeypatch):
    """Negative control for the contract suite's claim that no mechanism reuses a key: MWEM with
    its SELECT and MEASURE streams collapsed onto the round key (a derivation bug) draws twice
    from one key, and `jaxdp.run` raises under jax's key-reuse checker (on in tests/conftest.py).
    The honest mechanism runs with the same root key."""
    mechanism = _mwem(rounds=2)
    jaxdp.run(mechanism, jax.random.key(5))
    builder = importlib.import_module("jaxdp.mechanisms.adaptive")  # the module, not the function
    monkeypatch.setattr(builder, "stream_key", lambda key, stream: key)
    jax.clear_caches()  # the honest run's compiled program would skip the retrace
    with pytest.raises(jax.errors.KeyReuseError):
        jaxdp.run(mechanism, jax.random.key(5))
