"""Programs compiled for a short run: XLA:CPU's quicker code generator, where the run is brief.

XLA:CPU generates fusion code with its MLIR fusion emitters by default. Its classic elemental
emitters (`xla_cpu_use_fusion_emitters=False`) compile jaxdp's programs in 30-40% less time, but
the code they make runs slower: measured on the 2-core CPU (`bench/HISTORY.md`, "Compile
options"), the relaxed kernels' value and gradient compile in 0.78 s instead of 1.28 s and run
6% slower, exact marginal counts of 10^6 records run 1.86x slower, DualQuery's rounds 35% and
AIM's fit on large cliques 19% slower. So the default stays XLA's, and `fast_compiled` is for
programs whose compile outweighs their run: PEP's 25 rounds on ADULT-reduced compile in 1.05 s
instead of 1.77 s and run 0.15 s slower; its release compiles in 0.62 s instead of 0.95 s. A
junction tree's own fitting program (`families._dense_junction`: many small reductions, compiled
per tree) compiles in 0.51 s instead of 0.84 s on bnet9's last tree and runs as fast.

Where XLA does not take the option (an older XLA, a later one without the classic emitters, a
backend other than the CPU's), or the user chose the emitters in `XLA_FLAGS`, these programs
compile with XLA's defaults. The choice is made at the first compile, not at import: asking needs
a backend, and importing jaxdp must not start one (a user may still pick the platform).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

FAST_COMPILE_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
logger = logging.getLogger("jaxdp")


def _probe(options: dict[str, Any]) -> None:
    """Compile a trivial program with `options` (raises what XLA raises)."""
    jax.jit(lambda x: x, compiler_options=options).lower(np.float32(0)).compile()


@functools.cache
def compiler_options() -> dict[str, Any]:
    """`FAST_COMPILE_OPTIONS` where XLA:CPU compiles the programs and takes them, else none."""
    if jax.default_backend() != "cpu":
        return {}
    if any(name in os.environ.get("XLA_FLAGS", "") for name in FAST_COMPILE_OPTIONS):
        return {}  # the user's own choice of code generator stands
    try:
        _probe(FAST_COMPILE_OPTIONS)
    except jax.errors.JaxRuntimeError as error:
        logger.info("XLA's default code generator for every program: %s", error)
        return {}
    return dict(FAST_COMPILE_OPTIONS)


class _FastCompiled:
    """`jax.jit(fun, **kwargs)` compiled with `compiler_options()` where it compiles on its own.

    JAX takes compiler options on top-level programs only: called inside another trace, the
    program is inlined into the caller and compiles with the caller's.
    """

    def __init__(self, fun: Callable, kwargs: dict[str, Any]):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._kwargs = kwargs
        self._inlined = jax.jit(fun, **kwargs)
        self._top_level = None
        self._lock = threading.Lock()  # a background compiler may make the first call

    def _program(self):
        with self._lock:
            if self._top_level is None:
                options = compiler_options()
                self._top_level = (
                    jax.jit(self._fun, compiler_options=options, **self._kwargs) if options else self._inlined
                )
            return self._top_level

    def __call__(self, *args, **kwargs):
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            return self._inlined(*args, **kwargs)
        try:
            return (self._top_level or self._program())(*args, **kwargs)
        except ValueError as error:
            if "top-level" not in str(error):
                raise
            return self._inlined(*args, **kwargs)  # inside a trace, with concrete arguments only

    def lower(self, *args, **kwargs) -> jax.stages.Lowered:
        return (self._top_level or self._program()).lower(*args, **kwargs)


def fast_compiled(fun: Callable, **kwargs) -> Any:
    """`jax.jit(fun, **kwargs)` (the same arguments, `compiler_options` excepted) compiled by
    XLA:CPU's quicker code generator: for a program that runs briefly after its compile."""
    return _FastCompiled(fun, kwargs)


class BySize:
    """`fun` jitted twice, chosen by the records it visits: the quicker code generator
    (`fast_compiled`) for up to `rows` records, where its compile outweighs its run, XLA's
    default past them. The choice reads a shape only, so a release is the same program whatever
    ran before it in the process."""

    def __init__(self, fun: Callable, rows: int, **kwargs):
        functools.update_wrapper(self, fun)
        self._rows = rows
        self._fast = fast_compiled(fun, **kwargs)
        self._default = jax.jit(fun, **kwargs)

    def for_rows(self, rows: int) -> Any:
        return self._fast if rows <= self._rows else self._default
