"""Record `goldens.npz`: what every case of `cases.py` produces, for
`tests/mechanisms/test_goldens.py` to compare today's code with.

Run it once on the commit whose outputs are pinned (`python -m tests.goldens.record`); the commit
and JAX's version are stored beside the arrays. There is one recording: the test's tolerances
(see `pin_kind` and `answers_tolerance`) hold on any x86-64 processor, whatever vector width XLA's
CPU code uses, so no machine needs a recording of its own.

Per case the file holds every leaf of the final state and the stacked Info, the release, the
output distribution's answers to the case's workload, and the ledger and plan as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
from pathlib import Path

import jax
import numpy as np

from jaxdp import loop
from tests.goldens.cases import CASES, key

OUT = Path(__file__).with_name("goldens.npz")

# Leaves an Adam fit produces (RAP's rows, GEM's network, RAP++'s mixed rows). They are not
# compared leaf by leaf: their parametrisations have directions the loss does not see (a Dense
# bias ahead of batch normalisation, a constant added to a softmax block), and Adam's update
# lr * m / sqrt(v) turns a gradient that is only rounding into a step of up to lr, so these leaves
# differ visibly between vector widths while the distribution they describe does not. What they
# mean is pinned instead: the answers of the fitted distribution, and the release drawn from the
# recorded parameters.
FITTED_PARAMETERS = ("state.model.params", "state.model.ema_params")
# Float leaves computed from the fitted distribution's answers: compared at the answers' tolerance.
FROM_FITTED_ANSWERS = ("state.model.error_ema",)


def flatten(prefix: str, tree) -> dict[str, np.ndarray]:
    """{prefix + tree path: array} for every leaf of `tree`."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {prefix + jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def fits_by_adam(paths) -> bool:
    """Whether a case's state holds parameters fitted by Adam (`FITTED_PARAMETERS`)."""
    return any(path.startswith(FITTED_PARAMETERS) for path in paths)


def outputs(mechanism) -> dict[str, np.ndarray]:
    """Everything pinned of one run of `mechanism` from the goldens' key: state, Info, release,
    answers (the output distribution's, float64 for the comparison), ledger and plan (JSON)."""
    result = loop.run(mechanism, key())
    released = loop.release(mechanism, result.state, key())
    return {
        **flatten("state", result.state),
        **flatten("info", result.info),
        **flatten("release", released),
        "answers": np.asarray(mechanism.answers(result.state), np.float64),
        "ledger": np.asarray(json.dumps([entry.to_json() for entry in result.ledger])),
        "plan": np.asarray(json.dumps(dataclasses.asdict(mechanism.plan))),
    }


def state_from(recorded: dict[str, np.ndarray], like) -> object:
    """The recorded state rebuilt in the structure of `like` (today's state of the same case).

    Raises:
        KeyError: a leaf of today's state has no recording (the state's structure changed).
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(like)
    values = [
        np.asarray(recorded["state" + jax.tree_util.keystr(path)]).reshape(np.shape(leaf))
        for path, leaf in leaves
    ]
    return jax.tree_util.tree_unflatten(treedef, values)


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    arrays = {"commit": np.asarray(_commit()), "jax": np.asarray(jax.__version__)}
    for name, build in CASES.items():
        for path, value in outputs(build()).items():
            arrays[f"{name}|{path}"] = value
        print(name, flush=True)
    np.savez_compressed(OUT, **arrays)


if __name__ == "__main__":
    main()
