"""Running a built mechanism and releasing its output: `execute`, with the release compiled ahead
(`jaxdp.releasing`) while the rounds compile and run.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from jaxdp import contract, loop, models, releasing
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
    releasing.release_ahead(mechanism, key, rows)
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
        answers = np.asarray(releasing.released(mechanism, run.state, key, rows), np.float64)
        released, n_rows = answers, int(answers.shape[0])
    else:
        out = releasing.released(mechanism, run.state, key, rows)
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
    kept = models.model(
        mechanism, run.state, name=name, rows=n_rows, domain=domain, report=report, ledger=run.ledger
    )
    return Result(
        released, report, run.ledger, bounds, synthetic, answers, kept.mechanism, run.state, plan, model=kept
    )


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
