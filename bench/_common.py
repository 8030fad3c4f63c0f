"""Benchmark helpers shared by the scripts in bench/ (DESIGN.md section 6).

Timings are medians of repeats after a warm-up call; compile time is measured apart with
`jax.jit(fn).lower(*args).compile()`; every record carries the device and library versions. Records
are printed as JSON lines (one object per line) and optionally appended to a file.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

import jax


def environment() -> dict[str, Any]:
    """Device, host and versions, for every record."""
    dev = jax.devices()[0]
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    versions = {"python": platform.python_version()}
    # jaxdp's distribution is jaxdp-synth ("jaxdp" on PyPI is an unrelated project).
    for key, dist in (("jax", "jax"), ("jaxlib", "jaxlib"), ("numpy", "numpy"), ("jaxdp", "jaxdp-synth")):
        try:
            versions[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[key] = None
    return {
        "commit": git_commit(),
        "device": f"{dev.platform}:{getattr(dev, 'device_kind', '?')}",
        "n_devices": jax.device_count(),
        "host_cpu": cpu,
        "host_cores": os.cpu_count(),
        "versions": versions,
    }


def git_commit(checkout: str | os.PathLike | None = None) -> str | None:
    """`git describe --always --dirty` of a checkout (default: the one the benchmark runs from;
    None outside git): every record names the code it measured."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
            cwd=checkout if checkout is not None else os.path.dirname(os.path.abspath(__file__)),
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def block(x: Any) -> Any:
    """Wait for every array in `x` (async dispatch would otherwise time only the launch)."""
    return jax.block_until_ready(x)


def compile_seconds(fn: Callable, *args: Any, **kwargs: Any) -> tuple[Callable, float]:
    """Compile `jax.jit(fn)` for these arguments; returns (compiled, seconds spent compiling)."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    start = time.perf_counter()
    compiled = jitted.lower(*args, **kwargs).compile()
    return compiled, time.perf_counter() - start


def temp_bytes(compiled: Any) -> int | None:
    """XLA's scratch memory for one call of a compiled program (None if the backend won't say)."""
    try:
        return int(compiled.memory_analysis().temp_size_in_bytes)
    except Exception:  # not every backend/version implements memory_analysis
        return None


def time_call(fn: Callable, *args: Any, repeats: int = 7, warmup: int = 1) -> dict[str, float]:
    """Median / min / max seconds of `fn(*args)` over `repeats` calls after `warmup` calls."""
    for _ in range(warmup):
        block(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(fn(*args))
        times.append(time.perf_counter() - start)
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "repeats": repeats,
    }


def child_record(script: str, *args: str, env: dict[str, str]) -> dict[str, Any]:
    """Run `python script *args` in a fresh process (a cold measurement: it shares no compiled
    program with this one) and return the JSON object its last line prints."""
    out = subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


class Recorder:
    """Prints records as JSON lines (and appends them to `path` if given)."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.env = environment()

    def emit(self, kernel: str, sizes: dict[str, Any], **fields: Any) -> dict[str, Any]:
        record = {"kernel": kernel, "sizes": sizes, **fields, **self.env}
        line = json.dumps(record, default=_jsonable)
        print(line, flush=True)
        if self.path:
            with open(self.path, "a") as fh:
                fh.write(line + "\n")
        return record


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def load_average() -> float | None:
    """1-minute load average (a busy host inflates timings; it is recorded with them)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


if __name__ == "__main__":  # pragma: no cover
    json.dump(environment(), sys.stdout, indent=1)
