"""Running a built mechanism and releasing its output: `execute`, with the release compiled ahead.

The release's program is compiled on a thread of its own while the rounds compile and run, where
its shapes are known before the run, and kept by signature, so that a process releasing the same
shapes again (a notebook, a loop over seeds) compiles it once.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from jaxdp import contract, loop
from jaxdp._background import Compiler
from jaxdp._jit import fast_compiled
from jaxdp.checkpoint import Checkpoint
from jaxdp.domain import Dataset, Domain
from jaxdp.keys import require_key
from jaxdp.mechanisms.registry import mechanism_spec
from jaxdp.report import Result, privacy_report
from jaxdp.types import Key


def execute(
    name: str,
    mechanism: Any,
    key: Key,
    domain: Domain,
    *,
    rows: int | None = None,
    progress: loop.Progress | bool | None = None,
    started: float | None = None,
    confidence: float = 0.95,
    checkpoint: Checkpoint | None = None,
) -> Result:
    """Run a built mechanism, release its output and write its report (`data` left as a
    `Dataset` or the answer vector; `synthesize` converts it to the input's container).

    Args:
        name: the registry name (recorded in the report).
        progress: passed to `loop.run` (True: one log line per block of rounds).
        started: `time.perf_counter()` at the start of the job (default: now), for `seconds`.
        confidence: of the error bounds, for mechanisms that give them (their report gains
            `error_bounds`).
        checkpoint: passed to `loop.run`: the rounds are checkpointed, and resumed from the
            checkpoint already there (the report's `checkpoint` says from which round).
    """
    started = time.perf_counter() if started is None else started
    spec = mechanism_spec(name)
    key = require_key(key)
    answers_out = contract.releases(mechanism) == "answers"
    if answers_out:
        rows = None
    _release_ahead(mechanism, key, rows)
    # The registry's mechanisms are checked for key reuse by the test suite, not on every release.
    run = loop.run(
        mechanism,
        key,
        progress=progress if mechanism.rounds > 1 else None,
        check_keys=False,
        checkpoint=checkpoint,
    )
    synthetic = answers = None
    if rows is None and not answers_out and hasattr(mechanism, "default_rows"):
        # Under add-remove the row count is read from the noisy state on the host: inside the
        # compiled release it would be a tracer.
        rows = mechanism.default_rows(run.state)
    if answers_out:
        answers = np.asarray(_released(mechanism, run.state, key, rows), np.float64)
        released, n_rows = answers, int(answers.shape[0])
    else:
        out = _released(mechanism, run.state, key, rows)
        if isinstance(out, Dataset):
            synthetic = out
        elif isinstance(out, tuple):  # (codes, numeric in [0, 1]): a mixed-type release
            synthetic = Dataset(domain, *(np.asarray(x) for x in out))
        else:
            codes = np.asarray(out)
            synthetic = Dataset(domain, codes, np.zeros((codes.shape[0], 0), np.float32))
        released, n_rows = synthetic, len(synthetic)
    seconds = time.perf_counter() - started
    report = privacy_report(name, mechanism, run.ledger, n_rows, answers_out, seconds)
    if checkpoint is not None:
        report["checkpoint"] = {"every": checkpoint.every, "resumed_from_round": run.resumed_from}
    if spec.compression is not None:
        report["compression"] = mechanism.compression_report(run.state)
    bounds = None
    if spec.error_bounds is not None:
        bounds = spec.error_bounds(mechanism, run.state, synthetic, confidence, domain)
        report["error_bounds"] = bounds
    plan = loop.realised_plan(mechanism, run.state)
    return Result(released, report, run.ledger, bounds, synthetic, answers, mechanism, run.state, plan)


def _release(mechanism, state, key, rows=None):
    return (
        loop.release(mechanism, state, key)
        if rows is None
        else loop.release(mechanism, state, key, rows=rows)
    )


# One compiled program per release shape: sampling op by op compiles every small op separately
# (half a minute for GEM on ADULT on a 2-core CPU).
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


# Release programs by signature, compiled on a thread of their own, so that a release can start
# compiling before the rounds run, and a process that releases the same shapes again (a notebook,
# a loop over seeds) compiles them once.
_release_programs = Compiler("jaxdp-release-ahead")


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


def _release_ahead(mechanism, key: Key, rows: int | None) -> bool:
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


def _released(mechanism, state, key: Key, rows: int | None):
    """The release, by the compiled program of its shapes (the one compiled ahead, if any)."""
    if not _compiles_ahead(mechanism):
        release = _release_compiler(mechanism, rows) if contract.compiled_release(mechanism) else _release
        return release(mechanism, state, key, rows)
    return _release_program(mechanism, state, key, rows)(mechanism, state, key)


class progress_reporter:
    """Context manager giving `loop.run`'s progress argument: None when off, a tqdm updater
    when tqdm is installed, else True (log lines on the "jaxdp" logger)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return None
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return True
        self._tqdm = tqdm
        return self._update

    def _update(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = self._tqdm(total=total, unit="round", desc="jaxdp")
        self.bar.update(done - self.bar.n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False
