"""The same key gives the same release in any process, after any other run (DESIGN.md section 13).

A program choice that read what the process had compiled already (the dense junction-tree fit,
once some earlier fit had compiled it) made a replay in the same process differ from the first
run by float32 rounding: `audit.replay` said False. Each case here runs on a table past the dense
threshold (`tests/_replay_cases.py`), so its fits take both fitting programs, and is released
three times from one key: once first, once after other fits of the same trees (a longer fit of the
same model, and the other cases), and once in a fresh process (no compile cache, the cases in
reverse order). The releases must be byte-equal, the ledgers equal and `audit.replay` True.

Negative control: a perturbed fit (the final model fitted one block of iterations further; one
more Adam step for AIM-GEM) releases other bytes and fails `audit.replay` against the unperturbed
mechanism: a comparison that could not see so small a change would not see the rounding either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxdp import audit, loop
from jaxdp.families import GraphicalModel, _dense_junction, _junction, pgm
from tests import _replay_cases as cases

pytest.importorskip("mbi")

ROOT = Path(__file__).resolve().parents[1]
GRAPHICAL = tuple(name for name in cases.CASES if name != "aim-gem")  # AIM-GEM fits a generator


@pytest.fixture(scope="module")
def data():
    return cases.table()


def _fits_by_program(monkeypatch) -> dict[str, int]:
    """How many fits each fitting program ran after this call."""
    counts = {"dense": 0, "flat": 0}
    for module, label in ((_dense_junction, "dense"), (_junction, "flat")):
        original = module.fit

        def counting(*args, _original=original, _label=label, **kwargs):
            counts[_label] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, "fit", counting)
    return counts


def _other_fits(data, names) -> None:
    """What a notebook or a loop over seeds runs between two releases: a long fit of the cases'
    model (which compiles its tree's dense program) and a run of each named case from another key."""
    measured = [
        pgm.Measurement(clique, _marginal(data, clique).astype(np.float64), 10.0)
        for clique in cases.WORKLOAD.cliques
    ]
    pgm.estimate(data.domain.sizes, measured, total=float(len(data)), iters=3000)
    for name in names:
        loop.run(cases.build(name, data), jax.random.key(99))


def _marginal(data, clique) -> np.ndarray:
    shape = [data.domain.sizes[a] for a in clique]
    return np.bincount(
        np.ravel_multi_index(data.codes[:, list(clique)].T, shape), minlength=int(np.prod(shape))
    )


def _check_replays(name: str, data, monkeypatch, between=tuple(cases.CASES)) -> str:
    counts = _fits_by_program(monkeypatch)
    mechanism = cases.build(name, data)
    key = jax.random.key(cases.KEY_SEED)
    first = loop.run(mechanism, key)
    if name in GRAPHICAL:
        assert counts["dense"] and counts["flat"], f"{name}'s fits did not take both programs: {counts}"
    records, ledger = cases.released(name, mechanism)
    _other_fits(data, between)
    again_records, again_ledger = cases.released(name, cases.build(name, data))
    np.testing.assert_array_equal(records, again_records)
    assert ledger == again_ledger
    assert audit.replay(mechanism, key, first)
    return cases.digest(records, ledger)


def _fresh_process_digests(names: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXDP_", "JAX_COMPILATION_CACHE"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "tests._replay_cases", *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_aim_replays_after_other_fits(data, monkeypatch):
    _check_replays("aim", data, monkeypatch, between=("aim",))


def test_every_case_replays_in_this_process_and_in_a_fresh_one(data, monkeypatch):
    here = {name: _check_replays(name, data, monkeypatch) for name in cases.CASES}
    assert _fresh_process_digests(list(reversed(cases.CASES))) == here


def _one_block_further(monkeypatch, name: str):
    """The perturbed fit: for the graphical models, the run's final model fitted one block further
    (`pgm.estimate` warm-started from it for one block of mirror descent, the fit's unit of
    iterations: the final fits stop by `tol` or the discrepancy rule, so a larger cap alone would
    change nothing); for AIM-GEM's generator, one more Adam step of its final fit."""
    if name not in GRAPHICAL:
        _, options = cases.CASES[name]
        return {"final_iters": options["final_iters"] + 1}
    original = GraphicalModel.update

    def update(self, model, t, key, last):
        model, steps = original(self, model, t, key, last)
        if last:
            further = pgm.estimate(
                self.workload.sizes,
                model.measurements,
                total=self.known_total,
                iters=1,
                warm_start=model.fitted,
                tol=None,
            )
            model = model._replace(fitted=further)
        return model, steps

    monkeypatch.setattr(GraphicalModel, "update", update)
    return {}


@pytest.mark.parametrize("name", list(cases.CASES))
def test_a_fit_one_step_further_is_caught(name, data, monkeypatch):
    mechanism = cases.build(name, data)
    key = jax.random.key(cases.KEY_SEED)
    first = loop.run(mechanism, key)
    records, ledger = cases.released(name, mechanism)
    perturbed = cases.build(name, data, **_one_block_further(monkeypatch, name))
    perturbed_run = loop.run(perturbed, key)
    perturbed_records, perturbed_ledger = cases.released(name, perturbed)
    monkeypatch.undo()
    assert ledger == perturbed_ledger  # the fit is post-processing: the same charges
    assert not np.array_equal(records, perturbed_records)
    assert not audit.replay(mechanism, key, perturbed_run)
    assert audit.replay(mechanism, key, first)


def test_run_manys_seeds_release_the_same_in_either_order(data):
    """A loop over seeds: seed i's run does not depend on the seeds before it."""
    mechanism = cases.build("aim", data)
    keys = jax.random.split(jax.random.key(cases.KEY_SEED), 2)
    forward = loop.run_many(mechanism, keys)
    backward = loop.run_many(mechanism, keys[::-1])
    for i, j in ((0, 1), (1, 0)):
        leaves = zip(
            jax.tree_util.tree_leaves(forward.seed(i).state),
            jax.tree_util.tree_leaves(backward.seed(j).state),
            strict=True,
        )
        assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in leaves)
        assert forward.ledgers[i] == backward.ledgers[j]
