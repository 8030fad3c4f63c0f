"""What a CLI release publishes: the report carries the checked ledger, and neither the report nor
the log holds a key, raw noise or a true answer. (State and Info are checked for every mechanism
by the contract suite, `tests/mechanisms/test_contract.py`; same-seed bit-identity and the OS
entropy default by `tests/test_cli.py`.)
"""

from __future__ import annotations

import json
import logging
import re

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import audit
from jaxdp.cli import main
from jaxdp.evaluate import fractions
from jaxdp.queries import all_kway

SEED = 20240607
N_RECORDS = 137  # a prime: true fractions k/137 have long, distinctive decimal expansions


def _table(tmp_path):
    rng = np.random.default_rng(1)
    codes = np.stack([rng.integers(0, s, N_RECORDS) for s in (3, 4, 2)], axis=1)
    codes[:, 1] = (codes[:, 0] + rng.integers(0, 2, N_RECORDS)) % 4
    data = jaxdp.Dataset.from_codes(jaxdp.Domain.from_sizes({"a": 3, "b": 4, "c": 2}), codes)
    jaxdp.write_csv(tmp_path / "d.csv", data)
    (tmp_path / "domain.json").write_text(json.dumps({"a": 3, "b": 4, "c": 2}))
    return data


def _numbers(text: str) -> set[str]:
    """Every number in `text`, at 6 significant digits."""
    found = set()
    for token in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text):
        value = float(token)
        found.add(f"{value:.6g}")
    return found


@pytest.mark.parametrize(("mechanism", "rounds"), [("independent", None), ("mwem", 3)])
def test_report_carries_the_ledger_and_no_secret(tmp_path, capsys, caplog, mechanism, rounds):
    data = _table(tmp_path)
    argv = [
        "synth",
        "--mechanism",
        mechanism,
        "--epsilon",
        "1",
        "--seed",
        str(SEED),
        "--workload",
        "all-2way",
    ]
    argv += ["--data", str(tmp_path / "d.csv"), "--domain", str(tmp_path / "domain.json")]
    argv += ["--out", str(tmp_path / "s.csv"), "--report", str(tmp_path / "r.json")]
    argv += [] if rounds is None else ["--rounds", str(rounds)]
    with caplog.at_level(logging.DEBUG):
        assert main(argv) == 0
    report_text = (tmp_path / "r.json").read_text()
    report = json.loads(report_text)
    published = report_text + capsys.readouterr().err + caplog.text

    # the ledger: one entry per planned draw, summing to the rho spent, within the budget
    ledger = report["ledger"]
    assert ledger and all(
        set(e) == {"round", "primitive", "sensitivity", "scale", "count", "rho", "label"} for e in ledger
    )
    assert sum(e["rho"] for e in ledger) == pytest.approx(report["rho_spent"], rel=1e-12)
    assert report["rho_spent"] <= report["rho_budget"] * (1 + 1e-12)

    # no key material: neither the root key's words nor any key the run derives from it
    root = jax.random.key(SEED)
    planned_rounds = max(e["round"] for e in ledger) + 1
    words = {
        int(w)
        for k in audit.derived_keys(root, planned_rounds).values()
        for w in np.ravel(jax.random.key_data(k))
    }
    words |= {int(w) for w in np.ravel(jax.random.key_data(root))}
    assert not {w for w in words if w > 1000} & {int(t) for t in re.findall(r"\d+", published)}

    # no true answer of the workload (the 2-way fractions k/137 that are not 0 or 1)
    true = np.asarray(fractions(data, all_kway(data.domain.sizes, 2)), np.float64)
    distinctive = {f"{a:.6g}" for a in true if 0 < a < 1}
    assert distinctive, "the table has fractional answers to look for"
    assert not distinctive & _numbers(published), "a true answer appears in the report or the log"


def test_ledger_audit_replays_from_the_root_key():
    """`audit.replay` re-derives every key from the root and reproduces state and Info bit for
    bit; a different root does not (so the check has teeth)."""
    data = jaxdp.Dataset.from_codes(
        jaxdp.Domain.from_sizes({"a": 3, "b": 2}), np.array([[0, 1], [2, 0]] * 30)
    )
    mech = jaxdp.mwem(data, all_kway((3, 2), 1), rounds=2, epsilon=1.0, delta=1e-6)
    result = jaxdp.run(mech, jax.random.key(11))
    audit.check_ledger(list(result.ledger), mech.plan)
    assert audit.replay(mech, jax.random.key(11), result)
    assert not audit.replay(mech, jax.random.key(12), result)
