"""The driver: runs a mechanism's rounds from a root key. This is the jit boundary.

A mechanism is anything meeting `jaxdp.contract.Mechanism` (checked before it runs). Jittable
mechanisms run under `lax.scan` inside one `jax.jit`, in blocks of rounds when progress is
reported (at most two compiled programs: the block and a shorter last block). Mechanisms that
declare `jittable = False` (data-dependent shapes, host solvers) run in a Python loop with the
same `step(state, key)` contract and the same keys. Such a mechanism may also adapt its budget
(a privacy filter, as AIM does): it then offers `finished(state)`, which ends the loop early, and
`realised_plan(state)`, the charges it actually decided on, which the ledger is checked against.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, contract
from jaxdp.accounting import BudgetExceededError
from jaxdp.contract import realised_plan
from jaxdp.keys import Stream, require_key, round_key, stream_key
from jaxdp.ledger import LedgerEntry, check_ledger, ledger_from_info
from jaxdp.types import Key

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


class RunResult(NamedTuple):
    """state: final state; info: per-round Info stacked on a leading (rounds,) axis;
    ledger: one entry per private primitive invoked, checked against the plan."""

    state: Any
    info: Any
    ledger: list[LedgerEntry]


def _scan_rounds(mechanism, state, key: Key, first: jax.Array, length: int):
    def body(carry, t):
        state, info = mechanism.step(carry, round_key(key, t))
        return state, contract.check_info(info)  # at trace time: the structure, not the values

    return jax.lax.scan(body, state, first + jnp.arange(length, dtype=jnp.int32))


_scan_jit = jax.jit(_scan_rounds, static_argnames="length")
_init_jit = jax.jit(lambda mechanism, key: mechanism.init(stream_key(key, Stream.INIT)))


def run(
    mechanism,
    key: Key,
    rounds: int | None = None,
    *,
    progress: Progress | bool | None = None,
    blocks: int = 10,
) -> RunResult:
    """Run `rounds` rounds (default: all the mechanism planned) from the root key.

    Args:
        mechanism: meets `jaxdp.contract.Mechanism` (ContractError naming what it lacks if not).
        key: the root key (secret: it determines every draw).
        rounds: rounds to run; never more than the mechanism planned.
        progress: optional callback(rounds_done, rounds_total) called between blocks, or True
            to report only through the "jaxdp.loop" logger (one INFO line per block).
        blocks: number of blocks the rounds are split into when `progress` is given.

    Returns:
        RunResult with the final state, stacked Info and the checked ledger.

    Raises:
        ContractError: the mechanism or its Info does not meet the contract.
        BudgetExceededError: more rounds than planned, or a ledger that does not match the plan.
    """
    mechanism = contract.check_mechanism(mechanism)
    key = require_key(key)
    planned = mechanism.rounds
    rounds = planned if rounds is None else _checks.positive_int(rounds, "rounds")
    if rounds > planned:
        raise BudgetExceededError(f"rounds={rounds} exceeds the {planned} rounds the plan pays for")
    if contract.jittable(mechanism):
        state, info = _run_jitted(mechanism, key, rounds, progress, blocks)
    else:
        state, info = _run_python(mechanism, key, rounds, progress)
    ledger = ledger_from_info(info)
    check_ledger(ledger, realised_plan(mechanism, state), complete=rounds == planned)
    return RunResult(state, info, ledger)


def _block_sizes(rounds: int, progress: Progress | bool | None, blocks: int) -> list[int]:
    """Rounds per compiled block: one block without progress reporting; otherwise about
    `blocks` equal blocks, preferring a block size that divides `rounds` (one compiled program)
    and falling back to a shorter last block (a second program)."""
    if progress is None or progress is False or rounds == 1:
        return [rounds]
    target = -(-rounds // max(1, blocks))
    size = next((s for s in range(target, 2 * target + 1) if rounds % s == 0), target)
    return [size] * (rounds // size) + ([rounds % size] if rounds % size else [])


def _run_jitted(mechanism, key, rounds, progress, blocks):
    state = _init_jit(mechanism, key)
    infos, done = [], 0
    for size in _block_sizes(rounds, progress, blocks):
        state, info = _scan_jit(mechanism, state, key, jnp.asarray(done, jnp.int32), size)
        infos.append(info)
        done += size
        _report(progress, done, rounds)
    info = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *infos)
    return state, info


def _run_python(mechanism, key, rounds, progress):
    state = mechanism.init(stream_key(key, Stream.INIT))
    infos = []
    for t in range(rounds):
        state, info = mechanism.step(state, round_key(key, t))
        infos.append(contract.check_info(info))
        _report(progress, t + 1, rounds)
        if contract.finished(mechanism, state):
            break
    info = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *infos)
    return state, info


def _report(progress: Progress | bool | None, done: int, total: int) -> None:
    logger.info("round %d/%d", done, total)
    if callable(progress):
        progress(done, total)


def release(mechanism, state, key: Key, **kwargs):
    """Release the mechanism's output from the final state with the RELEASE stream key."""
    key = require_key(key)
    return mechanism.release(state, stream_key(key, Stream.RELEASE), **kwargs)
