"""Programs compiled for a short run: XLA:CPU's quicker code generator, where the run is brief.

XLA:CPU generates fusion code with its MLIR fusion emitters by default. Its classic elemental
emitters (`xla_cpu_use_fusion_emitters=False`) compile jaxdp's programs in 30-40% less time, but
the code they make runs slower: measured on the 2-core CPU (`bench/README.md`, "Compile
options"), the relaxed kernels' value and gradient compile in 0.78 s instead of 1.28 s and run
6% slower, exact marginal counts of 10^6 records run 1.86x slower, DualQuery's rounds 35% and
AIM's fit on large cliques 19% slower. So the default stays XLA's, and `fast_compiled` is for
programs whose compile outweighs their run: PEP's 25 rounds on ADULT-reduced compile in 1.05 s
instead of 1.77 s and run 0.15 s slower; its release compiles in 0.62 s instead of 0.95 s.

An XLA that does not know the option (an older one, or a later one without the classic
emitters) compiles these programs with its defaults. The option names XLA:CPU's code generator
only: GPU and TPU compiles ignore it. It is chosen at the first compile, not at import: asking
needs a backend, and importing jaxdp must not start one (a user may still pick the platform).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

FAST_COMPILE_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def compiler_options() -> dict[str, Any]:
    """`FAST_COMPILE_OPTIONS` when this XLA accepts them (one trivial compile tells), else none."""
    try:
        jax.jit(lambda x: x, compiler_options=FAST_COMPILE_OPTIONS).lower(np.float32(0)).compile()
    except jax.errors.JaxRuntimeError as error:
        if "compile option" not in str(error):
            raise
        return {}
    return dict(FAST_COMPILE_OPTIONS)


class _FastCompiled:
    """`jax.jit(fun, **kwargs)` compiled with `compiler_options()` where it compiles on its own.

    JAX takes compiler options on top-level programs only: called inside another trace (any
    argument a tracer), the program is inlined into the caller and compiles with the caller's.
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
                options = compiler_options() or None
                self._top_level = jax.jit(self._fun, compiler_options=options, **self._kwargs)
            return self._top_level

    def __call__(self, *args, **kwargs):
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            return self._inlined(*args, **kwargs)
        return (self._top_level or self._program())(*args, **kwargs)

    def lower(self, *args, **kwargs) -> jax.stages.Lowered:
        return (self._top_level or self._program()).lower(*args, **kwargs)


def fast_compiled(fun: Callable, **kwargs) -> Any:
    """`jax.jit(fun, **kwargs)` (the same arguments, `compiler_options` excepted) compiled by
    XLA:CPU's quicker code generator: for a program that runs briefly after its compile."""
    return _FastCompiled(fun, kwargs)
