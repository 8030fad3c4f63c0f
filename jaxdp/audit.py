"""The audit of a run: its ledger checked against the plan (`jaxdp.ledger`, re-exported here),
every key it derived, and its replay from the root key.

`replay` re-derives every key from the root key and re-runs the mechanism to show the recorded
output is exactly what that key produces.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxdp.keys import Stream, round_key, stream_key
from jaxdp.ledger import AuditError, LedgerEntry, check_ledger, ledger_from_info, rho_spent
from jaxdp.loop import ManyResult, run, run_many
from jaxdp.types import Key

__all__ = [
    "AuditError",
    "LedgerEntry",
    "check_ledger",
    "derived_keys",
    "ledger_from_info",
    "replay",
    "replay_many",
    "rho_spent",
]


def derived_keys(root: Key, rounds: int) -> dict[tuple[str, int, str], Key]:
    """Every key a standard mechanism run derives from `root`, by (phase, round, stream).

    For audits and tests only: keys are as secret as the root and must never be stored.
    """
    keys: dict[tuple[str, int, str], Key] = {
        ("init", -1, "INIT"): stream_key(root, Stream.INIT),
        ("release", -1, "RELEASE"): stream_key(root, Stream.RELEASE),
    }
    for t in range(rounds):
        k_t = round_key(root, t)
        for s in (Stream.SELECT, Stream.MEASURE, Stream.UPDATE):
            keys[("round", t, s.name)] = stream_key(k_t, s)
    return keys


def replay(mechanism, key: Key, result) -> bool:
    """Re-run `mechanism` from `key` and report whether state and Info are bit-identical.

    `result` is a `RunResult`: from `run`, or one seed of a `run_many` that looped
    (`ManyResult.seed(i)`, replayed with `keys[i]`)."""
    again = run(mechanism, key, _rounds_run(result.info))
    return _identical((result.state, result.info), (again.state, again.info))


def replay_many(mechanism, keys: Key, result: ManyResult) -> list[bool]:
    """Re-run `run_many` from the same keys and batching; for each seed, whether its state and
    Info are bit-identical (a "map" or "vmap" batch is reproducible as a batch, not seed by
    seed)."""
    rounds = _rounds_run(result.seed(0).info)
    again = run_many(mechanism, keys, rounds, batching=result.batching)
    return [
        _identical((result.seed(i).state, result.seed(i).info), (again.seed(i).state, again.seed(i).info))
        for i in range(result.seeds)
    ]


def _rounds_run(info) -> int:
    return int(np.asarray(jax.tree_util.tree_leaves(info)[0]).shape[0])


def _identical(a, b) -> bool:
    same = jax.tree_util.tree_map(lambda x, y: bool(np.array_equal(np.asarray(x), np.asarray(y))), a, b)
    return all(jax.tree_util.tree_leaves(same))
