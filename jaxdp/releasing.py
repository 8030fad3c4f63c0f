"""The release's compiled programs: what `execute` and a saved model (`jaxdp.model`) both call, so
that a model samples by the very program its first release ran.

A release compiles as one program per shape (sampling op by op compiles every small op
separately: half a minute for GEM on ADULT on a 2-core CPU), on a thread of its own, so that it
can start compiling before the rounds run, and is kept by signature, so that a process releasing
the same shapes again (a notebook, a loop over seeds, a model sampled twice) compiles it once.
"""

from __future__ import annotations

import jax

from jaxdp import contract, loop
from jaxdp._background import Compiler
from jaxdp._jit import fast_compiled
from jaxdp.types import Key


def _release(mechanism, state, key, rows=None):
    return (
        loop.release(mechanism, state, key)
        if rows is None
        else loop.release(mechanism, state, key, rows=rows)
    )


_release_jit = jax.jit(_release, static_argnums=3)
# A release of up to FAST_RELEASE_ROWS records is mostly its compile (PEP on ADULT-reduced:
# 0.95 s to compile, 0.02 s to run), so it compiles with XLA:CPU's quicker code generator
# (`jaxdp._jit`): 0.33 s less to compile, and at 10^6 records 0.29 s less to compile and 0.06 s
# more to run. Beyond, the run outgrows what the compile saves.
FAST_RELEASE_ROWS = 2**20
_release_fast_compiled = fast_compiled(_release, static_argnums=3)


def _release_compiler(mechanism, rows: int | None):
    """The release's jitted function: fast-compiled where the release is small."""
    if contract.releases(mechanism) == "answers":
        return _release_fast_compiled
    if rows is None:
        rows = getattr(mechanism, "public_rows", None)
    return _release_jit if rows is None or rows > FAST_RELEASE_ROWS else _release_fast_compiled


_release_programs = Compiler("jaxdp-release-ahead", capacity=64)


def _release_program(mechanism, state, key: Key, rows: int | None, *, wait: bool = True):
    """The compiled release for these arguments' shapes (state may be shapes only)."""
    arguments = (mechanism, state, key)
    signature = (
        rows,
        jax.tree.structure(arguments),
        tuple((x.shape, x.dtype) for x in jax.tree.leaves(arguments)),
    )
    release = _release_compiler(mechanism, rows)
    return _release_programs.program(signature, lambda: release.lower(*arguments, rows), wait=wait)


def _compiles_ahead(mechanism) -> bool:
    """Whether the release goes through `_release_programs`: a release compiled as one program
    (`contract.compiled_release`), on one device of this process (with several, the state's
    shardings would have to be part of the signature)."""
    return contract.compiled_release(mechanism) and jax.local_device_count() == 1


def release_ahead(mechanism, key: Key, rows: int | None) -> bool:
    """Start compiling the release, so that it compiles while the rounds compile and run (a
    second of a cold run's few on a 2-core CPU: PEP's histogram release). Only where the
    program is known before the rounds: not for a row count read from the noisy state
    (add-remove). Returns whether it started."""
    if not _compiles_ahead(mechanism):
        return False
    if rows is None and contract.releases(mechanism) != "answers":
        rows = getattr(mechanism, "public_rows", None)
        if rows is None:
            return False
    _release_program(mechanism, loop.state_shapes(mechanism, key), key, rows, wait=False)
    return True


def released(mechanism, state, key: Key, rows: int | None):
    """The release, by the compiled program of its shapes (the one compiled ahead, if any)."""
    if not _compiles_ahead(mechanism):
        release = _release_compiler(mechanism, rows) if contract.compiled_release(mechanism) else _release
        return release(mechanism, state, key, rows)
    return _release_program(mechanism, state, key, rows)(mechanism, state, key)
