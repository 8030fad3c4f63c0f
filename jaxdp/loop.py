"""The driver: runs a mechanism's rounds from a root key. This is the jit boundary.

Every compiled program here takes the mechanism as an argument, so its private leaves
(`Sensitive`) are inputs of the program, never constants baked into it; `jit_step` gives the
same for a single step. `run` checks key reuse by default (`check_keys`): a key handed to two
private primitives is caught while tracing (`jax.errors.KeyReuseError`).

A mechanism is anything meeting `jaxdp.contract.Mechanism` (checked before it runs). Jittable
mechanisms run under `lax.scan` inside one `jax.jit`, in blocks of rounds when progress is
reported (at most two compiled programs: the block and a shorter last block). Mechanisms that
declare `jittable = False` (data-dependent shapes, host solvers) run in a Python loop with the
same `step(state, key)` contract and the same keys. Such a mechanism may also adapt its budget
(a privacy filter, as AIM does): it then offers `finished(state)`, which ends the loop early, and
`realised_plan(state)`, the charges it actually decided on, which the ledger is checked against.
"""

from __future__ import annotations

import contextlib
import functools
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
    check_keys: bool = True,
) -> RunResult:
    """Run `rounds` rounds (default: all the mechanism planned) from the root key.

    Args:
        mechanism: meets `jaxdp.contract.Mechanism` (ContractError naming what it lacks if not).
        key: the root key (secret: it determines every draw).
        rounds: rounds to run; never more than the mechanism planned.
        progress: optional callback(rounds_done, rounds_total) called between blocks, or True
            to report only through the "jaxdp.loop" logger (one INFO line per block).
        blocks: number of blocks the rounds are split into when `progress` is given.
        check_keys: run under `jax.debug_key_reuse(True)`, so that a key consumed twice (e.g. a
            round's SELECT key handed to the measurement too) raises `jax.errors.KeyReuseError`
            while tracing, before anything runs on the data. False leaves JAX's setting as it
            is: `jaxdp.synthesize` does so for the registry's mechanisms, whose key use the
            test suite checks with the same flag on.

    Returns:
        RunResult with the final state, stacked Info and the checked ledger.

    Raises:
        ContractError: the mechanism or its Info does not meet the contract.
        KeyReuseError: a key was consumed twice (with `check_keys`).
        BudgetExceededError: more rounds than planned, or a ledger that does not match the plan.

    Privacy:
        The ledger is rebuilt from the charges of every round and matched, entry by entry, with
        the mechanism's plan (or the charges its privacy filter decided on); a mismatch raises.
    """
    mechanism = contract.check_mechanism(mechanism)
    key = require_key(key)
    planned = mechanism.rounds
    rounds = planned if rounds is None else _checks.positive_int(rounds, "rounds")
    if rounds > planned:
        raise BudgetExceededError(f"rounds={rounds} exceeds the {planned} rounds the plan pays for")
    with _key_reuse_checked(check_keys):
        if contract.jittable(mechanism):
            state, info = _run_jitted(mechanism, key, rounds, progress, blocks)
        else:
            state, info = _run_python(mechanism, key, rounds, progress)
    ledger = ledger_from_info(info)
    check_ledger(ledger, realised_plan(mechanism, state), complete=rounds == planned)
    return RunResult(state, info, ledger)


def _key_reuse_checked(check: bool):
    return jax.debug_key_reuse(True) if check else contextlib.nullcontext()


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


@jax.jit
def _step_jit(mechanism, state, key):
    state, info = mechanism.step(state, key)
    return state, contract.check_info(info)


def jit_step(mechanism) -> Callable[[Any, Key], tuple[Any, Any]]:
    """A compiled `step(state, key) -> (state, info)` of `mechanism`, for stepping by hand.

    The mechanism is an argument of the compiled program (`functools.partial` of one jitted
    function), never a closure: its `Sensitive` leaves enter each call as inputs. Writing
    `jax.jit(mechanism.step)` instead closes over the bound mechanism, and its private values
    become constants of the compiled program (visible in its text, kept in caches).

    Args:
        mechanism: a jittable mechanism (`jaxdp.contract`).

    Returns:
        step(state, key): one round; `key` is the round's key (`jaxdp.keys.round_key(root, t)`).

    Raises:
        ContractError: the mechanism does not meet the contract; ValueError: it is not jittable.
    """
    mechanism = contract.check_mechanism(mechanism)
    if not contract.jittable(mechanism):
        raise ValueError(
            f"{type(mechanism).__name__} is not jittable (jittable = False): call its step directly"
        )
    return functools.partial(_step_jit, mechanism)


def release(mechanism, state, key: Key, **kwargs):
    """Release the mechanism's output from the final state with the RELEASE stream key."""
    key = require_key(key)
    return mechanism.release(state, stream_key(key, Stream.RELEASE), **kwargs)
