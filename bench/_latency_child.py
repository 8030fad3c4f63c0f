"""The measured process of `bench_latency.py`: `python -m jaxdp ARGS` with its phases timed.

Run as `python bench/_latency_child.py ARGS`; writes {"status", "phases", "programs", "cache_hits"}
as JSON to the file named by $JAXDP_BENCH_PHASES_OUT. Only the standard library is imported before
the clock starts, so `import` holds everything JAX, NumPy and jaxdp cost.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import time

PHASES_ENV = "JAXDP_BENCH_PHASES_OUT"


def main(argv: list[str]) -> None:
    """Inside the measured process: time the phases of `python -m jaxdp argv`."""
    started = time.perf_counter()
    import jax.monitoring

    durations = {"trace": 0.0, "lower": 0.0, "compile": 0.0}
    counts = {"programs": 0, "cache_hits": 0}
    event_phase = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "compile",
    }

    def on_duration(event: str, seconds: float, **_) -> None:
        if event in event_phase:
            durations[event_phase[event]] += seconds
            counts["programs"] += event_phase[event] == "compile"

    def on_event(event: str, **_) -> None:
        counts["cache_hits"] += event == "/jax/compilation_cache/cache_hits"

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    import jaxdp.cli as cli

    imported = time.perf_counter()
    spent = {"load": 0.0, "write": 0.0}

    def timed(phase, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[phase] += time.perf_counter() - start

        return wrapper

    cli.read_csv = timed("load", cli.read_csv)
    cli.datasets.load = timed("load", cli.datasets.load)
    cli.atomic_open = timed_context(spent, cli.atomic_open)
    sys.argv = ["jaxdp", *argv]
    status = 0
    try:
        runpy.run_module("jaxdp", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        status = done.code or 0
    main_s = time.perf_counter() - imported
    phases = {"import": imported - started, **spent, **durations}
    phases["run"] = main_s - sum(spent.values()) - sum(durations.values())
    with open(os.environ[PHASES_ENV], "w") as fh:
        json.dump({"status": status, "phases": phases, **counts}, fh)


def timed_context(spent: dict, opener):
    """`opener` (a context manager factory) with the time inside its `with` block added to write."""

    @contextlib.contextmanager
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            with opener(*args, **kwargs) as fh:
                yield fh
        finally:
            spent["write"] += time.perf_counter() - start

    return wrapper


if __name__ == "__main__":
    main(sys.argv[1:])
