"""Run command-line jobs in this process and record every program JAX lowers (for test_compile_cache).

    python tests/_cache_probe.py OUT_DIR JOBS_JSON [--bake CSV]

JOBS_JSON is a list of argument lists, each run as `jaxdp.cli.main(argv)` (what `python -m jaxdp`
runs; the CLI turns the persistent cache on itself, in `$XDG_CACHE_HOME/jaxdp/xla` unless told
otherwise). Every closed jaxpr handed to JAX's lowering is walked, nested jaxprs included, and each
constant's raw bytes are written to OUT_DIR/constants/; OUT_DIR/programs.json lists the programs'
names and each job's exit status. `--bake CSV` is the negative control: it also compiles a
counting program that closes over the table in CSV and a noise program that closes over its true
all-2way fractions, so both are constants of their programs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.extend.core as jcore
import numpy as np
from jax._src.interpreters import pxla  # the one call every jit lowering goes through

from jaxdp import _compile_cache, cli
from jaxdp.domain import load_domain, read_csv
from jaxdp.queries import all_kway, marginal_counts


def _constants(closed) -> list[np.ndarray]:
    """Every constant of a closed jaxpr and of the jaxprs nested in its equations' parameters."""
    found, stack, seen = [], [closed], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, jcore.ClosedJaxpr):
            found += [_host(c) for c in item.consts]
            stack.append(item.jaxpr)
        elif isinstance(item, jcore.Jaxpr):
            for eqn in item.eqns:
                found += [_host(v.val) for v in eqn.invars if isinstance(v, jcore.Literal)]
                for value in eqn.params.values():
                    stack += value if isinstance(value, tuple | list) else [value]
    return found


def _host(value) -> np.ndarray:
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        value = jax.random.key_data(value)
    return np.asarray(value)


def main(out_dir: str, jobs_path: str, bake: str | None) -> None:
    out = Path(out_dir)
    (out / "constants").mkdir(parents=True)
    names: list[str] = []
    original = pxla.lower_sharding_computation

    def recording(closed_jaxpr, api_name, fun_name, *args, **kwargs):
        for i, const in enumerate(_constants(closed_jaxpr)):
            (out / "constants" / f"{len(names)}-{i}.bin").write_bytes(const.tobytes())
        names.append(str(fun_name))
        return original(closed_jaxpr, api_name, fun_name, *args, **kwargs)

    pxla.lower_sharding_computation = recording
    statuses = [cli.main(argv) for argv in json.loads(Path(jobs_path).read_text())]
    if bake is not None:
        _compile_cache.enable()  # as the CLI does: the baked program goes to the same cache
        domain = load_domain(Path(bake).with_suffix(".json"))
        codes = read_csv(bake, domain).codes
        workload = all_kway(domain.sizes, 2)
        baked_records = jax.jit(lambda: marginal_counts(codes, workload, jax.numpy.int32))
        fractions = np.asarray(baked_records()).astype(np.float32) / np.float32(len(codes))
        baked_answers = jax.jit(lambda key: fractions + jax.random.normal(key, fractions.shape))
        jax.block_until_ready(baked_answers(jax.random.key(0)))
    (out / "programs.json").write_text(json.dumps({"programs": names, "statuses": statuses}))


if __name__ == "__main__":
    args = sys.argv[1:]
    bake_csv = args[args.index("--bake") + 1] if "--bake" in args else None
    main(args[0], args[1], bake_csv)
