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
from jaxdp.loop import run
from jaxdp.types import Key

__all__ = [
    "AuditError",
    "LedgerEntry",
    "check_ledger",
    "derived_keys",
    "ledger_from_info",
    "replay",
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
    """Re-run `mechanism` from `key` and report whether state and Info are bit-identical."""
    again = run(mechanism, key, int(np.asarray(jax.tree_util.tree_leaves(result.info)[0]).shape[0]))
    same = jax.tree_util.tree_map(
        lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))),
        (result.state, result.info),
        (again.state, again.info),
    )
    return all(jax.tree_util.tree_leaves(same))
