"""Record `goldens.npz`: the state, Info and release of every case in `cases.py`.

Run once on the commit whose outputs are pinned (`python -m tests.goldens.record`); the commit is
stored beside the arrays. `tests/mechanisms/test_goldens.py` compares today's outputs with them.

XLA's CPU code follows the host's vector width, so a few cases (the Adam fits of GEM, GEM-Pub,
RAP-softmax and RAP++) round their last bits differently on another processor, and can drift
from there. `python -m tests.goldens.record --variant NAME CASE ...` records those cases as they
come out on this host into `goldens-variants.npz` (with the host's processor and the commit): a
second pin of the same code, which the test accepts as well as the first.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
from pathlib import Path

import jax
import numpy as np

from jaxdp import loop
from tests.goldens.cases import CASES, key

OUT = Path(__file__).with_name("goldens.npz")
VARIANTS = Path(__file__).with_name("goldens-variants.npz")


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


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _host() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", help="record CASES on this host as this variant")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    if args.variant is None:
        arrays = {"commit": np.asarray(_commit())}
        for name, build in CASES.items():
            for path, value in outputs(build()).items():
                arrays[f"{name}|{path}"] = value
            print(name, flush=True)
        np.savez_compressed(OUT, **arrays)
        return
    variant = args.variant
    arrays = dict(np.load(VARIANTS)) if VARIANTS.exists() else {}
    arrays[f"{variant}#commit"] = np.asarray(_commit())
    arrays[f"{variant}#host"] = np.asarray(_host())
    for name in args.cases:
        arrays = {k: v for k, v in arrays.items() if not k.startswith(f"{variant}#{name}|")}
        for path, value in outputs(CASES[name]()).items():
            arrays[f"{variant}#{name}|{path}"] = value
        print(variant, name, flush=True)
    np.savez_compressed(VARIANTS, **arrays)


if __name__ == "__main__":
    main()
