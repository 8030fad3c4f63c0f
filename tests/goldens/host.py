"""Goldens of the mechanisms driven from the host (`Annealed`: AIM, MST, PrivBayes), and their
recorder.

The host loop's state changes structure every round, so it is pinned by what it released rather
than leaf by leaf: the ledger and the realised plan, the candidate each round picked, every noisy
measurement (integers under the default exact noise: pinned exactly), the compressed domain's
sizes, and the fitted model's answers to the workload (float64 from a fit on those exact
inputs: compared at `ANSWERS_FRACTION` of the smallest measurement noise, in answer units).

    python -m tests.goldens.host    # record host_goldens.json at the current commit
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import jax
import numpy as np

import jaxdp
from jaxdp import loop
from jaxdp.families import Compression
from jaxdp.queries import all_kway
from tests.goldens.cases import BUDGET, key
from tests.mechanisms.conftest import tiny_dataset

OUT = Path(__file__).with_name("host_goldens.json")
# 1% of the smallest measurement noise: a hundredth of what separates two keys' runs, far above
# what another summation order does to a fit on the same exact inputs
ANSWERS_FRACTION = 0.01
FIT = {"iters": 50, "final_iters": 50}


def _workload():
    return all_kway(tiny_dataset().domain.sizes, 2)


CASES = {
    # the paper's alpha, as when the golden was recorded (6 marginals in 6 rounds would take
    # default_alpha's 0.95; that rule has its own test)
    "aim": lambda: jaxdp.aim(tiny_dataset(), _workload(), max_rounds=6, alpha=0.9, **FIT, **BUDGET),
    "mst": lambda: jaxdp.mst(tiny_dataset(), _workload(), **FIT, **BUDGET),
    "mst-replace-one": lambda: jaxdp.mst(
        tiny_dataset(), _workload(), relation="replace-one", **FIT, **BUDGET
    ),
    "privbayes": lambda: jaxdp.privbayes(tiny_dataset(), _workload(), **FIT, **BUDGET),
}
# negative controls, each a genuine change: AIM's budget split, MST's compression threshold
# (post-processing of the same noisy counts), a budget for another delta, PrivBayes's usefulness
CHANGED = {
    "aim": lambda: jaxdp.aim(tiny_dataset(), _workload(), max_rounds=6, alpha=0.8, **FIT, **BUDGET),
    "mst": lambda: jaxdp.mst(
        tiny_dataset(), _workload(), compress=Compression(threshold=5.0, min_values=1), **FIT, **BUDGET
    ),
    "mst-replace-one": lambda: jaxdp.mst(
        tiny_dataset(), _workload(), relation="replace-one", **FIT, **{**BUDGET, "delta": 1e-7}
    ),
    "privbayes": lambda: jaxdp.privbayes(tiny_dataset(), _workload(), theta=8.0, **FIT, **BUDGET),
}


def outputs(mechanism) -> dict:
    """What a run of `mechanism` from the goldens' key released (module docstring)."""
    result = loop.run(mechanism, key())
    state = result.state
    released = {
        "ledger": [entry.to_json() for entry in result.ledger],
        "plan": dataclasses.asdict(mechanism.realised_plan(state)),
        "picks": [int(r.selected) for r in state.records],
        "measurements": [[list(m.clique), np.asarray(m.noisy).tolist()] for m in state.measurements],
        "compressed_sizes": None if state.compressed is None else list(state.compressed.sizes),
        "answers": np.asarray(mechanism.answers(state), np.float64).tolist(),
    }
    return json.loads(json.dumps(released))  # as recorded: tuples become lists


def answers_tolerance(mechanism, recorded: dict) -> float:
    """`ANSWERS_FRACTION` of the smallest Gaussian scale of the ledger, in answer units
    (fractions: counts over the public n under replace-one, over the model's total otherwise)."""
    sigma = min(e["scale"] for e in recorded["ledger"] if e["primitive"].endswith("gaussian"))
    total = mechanism.n_records
    return ANSWERS_FRACTION * sigma / total


def main() -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    recorded = {
        "commit": commit,
        "jax": jax.__version__,
        "cases": {n: outputs(b()) for n, b in CASES.items()},
    }
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")


if __name__ == "__main__":
    main()
