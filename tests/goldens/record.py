"""Record `goldens.npz`: the state, Info and release of every case in `cases.py`.

Run once on the commit whose outputs are pinned (`python -m tests.goldens.record`); the commit is
stored beside the arrays. `tests/mechanisms/test_goldens.py` compares today's outputs with them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import jax
import numpy as np

from jaxdp import loop
from tests.goldens.cases import CASES, key

OUT = Path(__file__).with_name("goldens.npz")


def flatten(prefix: str, tree) -> dict[str, np.ndarray]:
    """{prefix + tree path: array} for every leaf of `tree`."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {prefix + jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def outputs(mechanism) -> dict[str, np.ndarray]:
    result = loop.run(mechanism, key())
    released = loop.release(mechanism, result.state, key())
    return {
        **flatten("state", result.state),
        **flatten("info", result.info),
        **flatten("release", released),
    }


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
    arrays = {"commit": np.asarray(commit.strip())}
    for name, build in CASES.items():
        for path, value in outputs(build()).items():
            arrays[f"{name}|{path}"] = value
        print(name, flush=True)
    np.savez_compressed(OUT, **arrays)


if __name__ == "__main__":
    main()
