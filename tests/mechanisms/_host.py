"""Helpers the tests of the host-driven mechanisms (MST, PrivBayes) share."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np

import jaxdp
from jaxdp import loop, noise
from jaxdp.families import Compression
from jaxdp.mechanisms import host_loop


def record_selections(monkeypatch) -> list[tuple[object, dict]]:
    """The (private argument, keywords) of every exact selection made after this call."""
    calls: list[tuple[object, dict]] = []
    original = noise.grid_exponential

    def record(key, value, **kwargs):
        calls.append((value, kwargs))
        return original(key, value, **kwargs)

    monkeypatch.setattr(noise, "grid_exponential", record)
    return calls


def revealed_steps(value) -> np.ndarray:
    """A recorded selection's integer grid scores, read through `noise.gaussian` at a scale
    (1e-9) that leaves them unchanged."""
    revealed, _ = noise.gaussian(jax.random.key(9), value, sigma=1e-9, sensitivity=1.0)
    return np.asarray(revealed, np.float64)


def fits_of(mechanism, monkeypatch) -> list[int]:
    """How many measurements each Private-PGM fit of a run of `mechanism` had."""
    fits: list[int] = []
    original = jaxdp.families.pgm.estimate

    def counting(*args, **kwargs):
        fits.append(len(args[1]))
        return original(*args, **kwargs)

    monkeypatch.setattr(jaxdp.families.pgm, "estimate", counting)
    loop.run(mechanism, jax.random.key(0))
    return fits


def assert_replays(build) -> None:
    """Two runs of `build()` from one key release the same records and ledger, bit for bit."""
    runs = []
    for _ in range(2):
        mechanism = build()
        result = loop.run(mechanism, jax.random.key(5))
        runs.append((np.asarray(loop.release(mechanism, result.state, jax.random.key(6))), result.ledger))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert [e.to_json() for e in runs[0][1]] == [e.to_json() for e in runs[1][1]]


def synth_on_adult(tmp_path, mechanism: str) -> tuple[dict, int]:
    """The issue's command, `python -m jaxdp synth --mechanism M --dataset adult --epsilon 1`
    (with a seed): its report and the rows it wrote."""
    out, report = tmp_path / "s.csv", tmp_path / "r.json"
    command = [sys.executable, "-m", "jaxdp", "synth", "--mechanism", mechanism, "--dataset", "adult"]
    command += ["--epsilon", "1", "--seed", "0", "--out", str(out), "--report", str(report)]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(report.read_text()), len(out.read_text().splitlines()) - 1


def round_zero_releases(monkeypatch, released: np.ndarray | None = None) -> list[tuple[np.ndarray, float]]:
    """(the noisy counts, sigma) of every round-0 measurement of a host-rule run after this call
    (AIM's and MST's every 1-way marginal, one vector). With `released`, round 0 releases that
    vector instead of its noisy counts (its Charge is the real one), as if the noise had drawn it:
    whatever the table, the rest of the run sees the same release."""
    calls: list[tuple[np.ndarray, float]] = []
    in_round_zero = [False]
    initialise, measure = host_loop.Annealed._initialise, host_loop.measure_on_host

    def round_zero(self, state, key):
        in_round_zero[0] = True
        try:
            return initialise(self, state, key)
        finally:
            in_round_zero[0] = False

    def measuring(key, counts, index, **kwargs):
        noisy, charge = measure(key, counts, index, **kwargs)
        if in_round_zero[0]:
            if released is not None:
                assert np.shape(released) == noisy.shape, "the forced release must have round 0's cells"
                noisy = np.array(released, np.float64)
            calls.append((noisy.copy(), float(kwargs["sigma"])))
        return noisy, charge

    monkeypatch.setattr(host_loop.Annealed, "_initialise", round_zero)
    monkeypatch.setattr(host_loop, "measure_on_host", measuring)
    return calls


def merge_from_release(mechanism, noisy: np.ndarray, sigma: float, of=Compression.of):
    """The compression `mechanism` decides from round 0's released noisy counts `noisy` (every
    1-way candidate's, in candidate order), recomputed outside the run (`of`: the merge rule,
    bound here so that a patched one is not used)."""
    rule = mechanism.selection
    per_attribute: list = list(mechanism.workload.sizes)
    start = 0
    for i in rule.opening(None):
        cells = rule.candidates.cells[i]
        per_attribute[rule.candidates.cliques[i][0]] = noisy[start : start + cells]
        start += cells
    assert start == noisy.size
    merge = of(mechanism.compression, per_attribute, sigma)
    return merge if merge.changed else None


def assert_same_merge(first, second) -> None:
    """Two compressions (None: nothing merged) keep and spread the same values."""
    assert (first is None) == (second is None), (first, second)
    if first is not None:
        for a, b in zip(first.kept + first.spread, second.kept + second.spread, strict=True):
            np.testing.assert_array_equal(a, b)
