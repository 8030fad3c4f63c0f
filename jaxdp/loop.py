"""The driver: runs a mechanism's rounds from a root key. This is the jit boundary.

`run_many` runs one mechanism from many root keys (seeds), or one factory's mechanisms at several
budgets (an epsilon grid), and audits each lane's ledger; by default the lanes run one after
another (`batching="loop"`), each exactly as `run` runs it; `batching="map"` runs them all in one
compiled program, lane after lane (the fastest way on CPU), and `batching="vmap"` all at once
(docs/architecture.md, "Many seeds").

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
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, contract
from jaxdp._jit import fast_compiled
from jaxdp.accounting import BudgetExceededError
from jaxdp.checkpoint import Checkpoint, CheckpointError, Saved
from jaxdp.contract import realised_plan
from jaxdp.keys import Stream, require_key, require_keys, round_key, stream_key
from jaxdp.lanes import Lanes, lanes_of
from jaxdp.ledger import LedgerEntry, check_ledger, ledger_from_info
from jaxdp.types import Key

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
BATCHINGS = ("loop", "map", "vmap")


class RunResult(NamedTuple):
    """state: final state; info: per-round Info stacked on a leading (rounds,) axis;
    ledger: one entry per private primitive invoked, checked against the plan; resumed_from:
    the rounds a checkpoint held when the run resumed from it (None: it started afresh)."""

    state: Any
    info: Any
    ledger: list[LedgerEntry]
    resumed_from: int | None = None


def _scan_rounds(mechanism, state, key: Key, first: jax.Array, length: int):
    def body(carry, t):
        state, info = mechanism.step(carry, round_key(key, t))
        _check_state_shapes(carry, state)  # at trace time, as the Info: structure, not values
        return state, contract.check_info(info)

    return jax.lax.scan(body, state, first + jnp.arange(length, dtype=jnp.int32))


def _check_state_shapes(before, after) -> None:
    """A compiled step keeps the state's pytree, shapes and dtypes (fixed-shape buffers)."""
    import chex  # on the first trace only, so that `import jaxdp` stays fast

    try:
        chex.assert_trees_all_equal_shapes_and_dtypes(before, after)
    except (AssertionError, ValueError) as err:
        raise contract.ContractError(
            f"step must return a state of the same structure, shapes and dtypes as the one it was given "
            f"(preallocated buffers and a mask, so that the rounds compile to one scan): {err}"
        ) from None


_scan_jit = jax.jit(_scan_rounds, static_argnames="length")
_scan_fast_compiled = fast_compiled(_scan_rounds, static_argnames="length")
# Rounds of a family with `short_rounds` (PEP, MWEM) compile with XLA:CPU's quicker code generator
# (`jaxdp._jit`) while rounds x the state's elements stay within SHORT_RUN_WORK. Measured on the
# 2-core CPU (`bench/HISTORY.md`, "Compile options"): PEP on ADULT-reduced, 25 rounds of a
# 732k-element state (1.8e7), compiles its rounds 0.7 s faster and runs them 0.15 s slower, so
# the bound leaves room on both sides. Other families keep XLA's default code, which runs
# DualQuery's rounds 35% faster, and AIM's fit 19%.
SHORT_RUN_WORK = 2**25


def _rounds_program(mechanism, state):
    """The jitted rounds of `mechanism`: compiled for a short run where they are short. Decided
    by the planned rounds, not the rounds of this call, so that a run in parts compiles what a
    run in one go does."""
    if not getattr(getattr(mechanism, "family", None), "short_rounds", False):
        return _scan_jit
    work = mechanism.rounds * sum(math.prod(np.shape(leaf)) for leaf in jax.tree.leaves(state))
    return _scan_fast_compiled if work <= SHORT_RUN_WORK else _scan_jit


_init_jit = jax.jit(lambda mechanism, key: mechanism.init(stream_key(key, Stream.INIT)))


def state_shapes(mechanism, key: Key) -> Any:
    """The shapes and dtypes of a jittable mechanism's state (every round keeps them), traced
    from its init without running anything."""
    return jax.eval_shape(_init_jit, mechanism, require_key(key))


def run(
    mechanism,
    key: Key,
    rounds: int | None = None,
    *,
    progress: Progress | bool | None = None,
    blocks: int = 10,
    check_keys: bool = True,
    checkpoint: Checkpoint | None = None,
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
        checkpoint: write the state every `checkpoint.every` rounds and after the last
            (`jaxdp.checkpoint`), and resume from the checkpoint already there, if any, when its
            fingerprint matches this run's (mechanism settings and inputs, key, rounds, interval
            and whatever the caller put in it). A jitted run compiles its rounds in blocks of
            `every` rounds; `progress` is then reported once per block.

    Returns:
        RunResult with the final state, stacked Info and the checked ledger.

    Raises:
        ContractError: the mechanism or its Info does not meet the contract.
        KeyReuseError: a key was consumed twice (with `check_keys`).
        BudgetExceededError: more rounds than planned, or a ledger that does not match the plan.
        CheckpointError: the checkpoint is another run's, corrupt, or in use.

    Privacy:
        The ledger is rebuilt from the charges of every round and matched, entry by entry, with
        the mechanism's plan (or the charges its privacy filter decided on); a mismatch raises.
        A resumed run draws round t's noise from round t's key, as the uninterrupted run would:
        its ledger, state and release are those of the uninterrupted run, and nothing is spent
        twice (the rounds before the checkpoint are not run again).
    """
    mechanism = contract.check_mechanism(mechanism)
    key = require_key(key)
    rounds = _rounds(mechanism, rounds)
    store = None if checkpoint is None else checkpoint.for_run(mechanism, key, rounds)
    with _key_reuse_checked(check_keys), store or contextlib.nullcontext():
        saved = None if store is None else _resumable(store.load(), store, rounds)
        if contract.jittable(mechanism):
            state, info = _run_jitted(mechanism, key, rounds, progress, blocks, store, saved)
        else:
            state, info = _run_python(mechanism, key, rounds, progress, store, saved)
    ledger = _audited_ledger(mechanism, state, info, complete=rounds == mechanism.rounds)
    return RunResult(state, info, ledger, None if saved is None else saved.rounds_done)


def _resumable(saved: Saved | None, store: Checkpoint, rounds: int) -> Saved | None:
    if saved is None:
        return None
    if not 0 < saved.rounds_done <= rounds:
        raise CheckpointError(f"checkpoint {str(store.path)!r} holds {saved.rounds_done} rounds of {rounds}")
    logger.info("resuming from checkpoint %s after round %d/%d", store.path, saved.rounds_done, rounds)
    return saved


def _rounds(mechanism, rounds: int | None) -> int:
    """The rounds to run: all that were planned by default, never more."""
    planned = mechanism.rounds
    rounds = planned if rounds is None else _checks.positive_int(rounds, "rounds")
    if rounds > planned:
        raise BudgetExceededError(f"rounds={rounds} exceeds the {planned} rounds the plan pays for")
    return rounds


def _audited_ledger(mechanism, state, info, *, complete: bool) -> list[LedgerEntry]:
    ledger = ledger_from_info(info)
    check_ledger(ledger, realised_plan(mechanism, state), complete=complete)
    return ledger


def _key_reuse_checked(check: bool):
    return jax.debug_key_reuse(True) if check else contextlib.nullcontext()


def _block_sizes(rounds: int, progress: Progress | bool | None, blocks: int) -> list[int]:
    """Rounds per compiled block: one block without progress reporting; otherwise about
    `blocks` equal blocks, preferring a block size that divides `rounds` (one compiled program)
    and falling back to a shorter last block (a second program)."""
    if progress is None or progress is False or rounds == 1:
        return [rounds]
    target = -(-rounds // max(1, blocks))
    return _chunks(rounds, next((s for s in range(target, 2 * target + 1) if rounds % s == 0), target))


def _chunks(rounds: int, size: int) -> list[int]:
    """`rounds` in blocks of `size` from round 0, the last one shorter if need be."""
    return [size] * (rounds // size) + ([rounds % size] if rounds % size else [])


def _run_jitted(mechanism, key, rounds, progress, blocks, store: Checkpoint | None, saved: Saved | None):
    state = _init_jit(mechanism, key)
    scan = _rounds_program(mechanism, state)
    # With checkpoints, blocks end where they are written: a resumed run compiles the same blocks.
    sizes = _block_sizes(rounds, progress, blocks) if store is None else _chunks(rounds, store.every)
    done, info = 0, None
    if saved is not None:
        state, info, done = _placed_like(state, saved.state, store), saved.info, saved.rounds_done
        if done % store.every and done != rounds:
            raise CheckpointError(
                f"checkpoint {str(store.path)!r} holds {done} rounds: not where this run writes one"
            )
        sizes = sizes[done // store.every :] if done < rounds else []
        _report(progress, done, rounds)
    for size in sizes:
        state, block = scan(mechanism, state, key, jnp.asarray(done, jnp.int32), size)
        info = block if info is None else jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), info, block)
        done += size
        if store is not None:
            store.save(done, state, info)
        _report(progress, done, rounds)
    return state, info


def _placed_like(state, saved_state, store: Checkpoint):
    """The checkpoint's state placed as a fresh one is (its sharding, or left uncommitted where
    the fresh leaf is, so that it may meet the mechanism's leaves on their devices), with the
    fresh one's structure, shapes and dtypes."""
    fresh, treedef = jax.tree_util.tree_flatten(state)
    leaves, saved_treedef = jax.tree_util.tree_flatten(saved_state)
    if saved_treedef != treedef or any(
        (np.shape(a), a.dtype) != (b.shape, b.dtype) for a, b in zip(leaves, fresh, strict=True)
    ):
        raise CheckpointError(
            f"checkpoint {str(store.path)!r} holds a state of another structure than this run's"
        )
    return jax.tree_util.tree_unflatten(
        treedef,
        [jax.device_put(a, b.sharding if b.committed else None) for a, b in zip(leaves, fresh, strict=True)],
    )


def _run_python(mechanism, key, rounds, progress, store: Checkpoint | None, saved: Saved | None):
    state = mechanism.init(stream_key(key, Stream.INIT))
    infos, start = [], 0
    if saved is not None:
        state, start = saved.state, saved.rounds_done
        infos = [jax.tree_util.tree_map(lambda x, t=t: x[t], saved.info) for t in range(start)]
        _report(progress, start, rounds)
        if contract.finished(mechanism, state):  # the filter had ended the run: nothing is left
            start = rounds
    for t in range(start, rounds):
        state, info = mechanism.step(state, round_key(key, t))
        infos.append(contract.check_info(info))
        finished = contract.finished(mechanism, state)
        if store is not None and ((t + 1) % store.every == 0 or t + 1 == rounds or finished):
            store.save(t + 1, state, _stacked(infos))
        _report(progress, t + 1, rounds)
        if finished:
            if t + 1 < rounds:  # a privacy filter stops when the budget is spent, not at its cap
                logger.info("the budget is spent: the run ends after round %d of at most %d", t + 1, rounds)
            break
    return state, _stacked(infos)


def _stacked(infos: list) -> Any:
    """Per-round Info of a Python loop stacked on a leading (rounds,) axis, on the host."""
    return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *infos)


def _report(progress: Progress | bool | None, done: int, total: int) -> None:
    logger.info("round %d/%d", done, total)
    if callable(progress):
        progress(done, total)


class ManyResult(NamedTuple):
    """What `run_many` returns.

    Attributes:
        state: each seed's final state, its leaves stacked on a leading (seeds,) axis; for a
            mechanism that runs as a Python loop (`jittable = False`, AIM), whose states need
            not share shapes, a tuple with one state per seed.
        info: each seed's Info stacked over rounds, then over seeds: (seeds, rounds, ...)
            leaves (a tuple per seed for a Python-loop mechanism, whose rounds may differ).
        ledgers: one ledger per seed, each checked against the plan as `run` checks one.
        batching: how the seeds ran, "loop", "map" or "vmap" (see `run_many`).
        stacked: whether state and Info are stacked (False: tuples of per-seed values).
    """

    state: Any
    info: Any
    ledgers: tuple[list[LedgerEntry], ...]
    batching: str
    stacked: bool = True

    @property
    def seeds(self) -> int:
        return len(self.ledgers)

    def seed(self, i: int) -> RunResult:
        """Seed i's run, as `run` returns one."""
        if self.stacked:
            state, info = jax.tree_util.tree_map(lambda x: x[i], (self.state, self.info))
        else:
            state, info = self.state[i], self.info[i]
        return RunResult(state, info, self.ledgers[i])


def run_many(
    mechanism,
    keys: Key,
    rounds: int | None = None,
    *,
    batching: str = "loop",
    check_keys: bool = True,
) -> ManyResult:
    """Run one mechanism from many root keys (seeds), or several budgets of one mechanism (an
    epsilon grid), auditing each lane's ledger.

    Args:
        mechanism: meets `jaxdp.contract.Mechanism`, run from every key; or a sequence of such
            mechanisms, one per key (lane), built by one factory with the same settings but
            their budgets, e.g. `[jaxdp.pep(data, w, epsilon=e, delta=1e-9) for e in grid]`: they
            hold their noise scales as data, so they differ only in leaves and plans, and "map"
            and "vmap" run them as one compiled program. Settings that change what is compiled
            (rounds, sizes, options) must be equal in every lane; one that is not is named.
        keys: (lanes,) root keys, e.g. `jax.random.split(jax.random.key(0), 8)`; each as secret
            as a single run's key.
        rounds: rounds per lane (default: all the mechanisms planned).
        batching: "loop" (default): the lanes run one after another through `run`'s compiled
            program, so lane i's state, Info, ledger and release are exactly those of
            `run(mechanism_i, keys[i])` and `audit.replay` reproduces any lane. "map": one
            program running the lanes one after another (`jax.lax.map`): no host round trip
            between lanes, as fast as the loop or faster on the 2-core CPU. "vmap": one program
            running every lane at once, for accelerators (on the 2-core CPU it was slower than
            the loop for every mechanism measured). The lanes of one program are private runs
            like any other (each ledger is audited), but the program is compiled as a whole, so
            its floats may round differently from `run`'s (batched kernels do), and a rounding
            difference can change an exact selection: a lane need not equal
            `run(mechanism_i, keys[i])`, and `audit.replay_many` replays the batch bit for bit
            (docs/architecture.md, "Many seeds"). A mechanism with `jittable = False` (AIM)
            always runs as a loop: asking it for "map" or "vmap" logs a warning and loops.
        check_keys: as for `run`.

    Returns:
        ManyResult with the stacked states and Info and one audited ledger per lane.

    Raises:
        As `run`, for any lane; ValueError: a sequence whose length is not the number of keys,
            or whose mechanisms differ in more than data and plans ("map" and "vmap").

    Privacy:
        Each lane is a separate run with its own root key, audited against its own mechanism's
        plan: a lane that drew at another lane's noise scale fails its audit. Releasing the
        outputs of several lanes of the same data composes their costs.
    """
    keys = require_keys(keys)
    mechanisms = _per_lane(mechanism, keys.shape[0])
    rounds = _rounds(mechanisms[0], rounds)
    _checks.one_of(batching, BATCHINGS, "batching")
    jittable = all(contract.jittable(m) for m in mechanisms)
    if batching != "loop" and not jittable:
        logger.warning(
            "%s runs as a Python loop (jittable = False): run_many runs its %d lanes one after another",
            type(mechanisms[0]).__name__,
            keys.shape[0],
        )
        batching = "loop"
    if batching == "loop":
        runs = [run(m, key, rounds, check_keys=check_keys) for m, key in zip(mechanisms, keys, strict=True)]
        ledgers = tuple(r.ledger for r in runs)
        if not jittable:
            states, infos = tuple(r.state for r in runs), tuple(r.info for r in runs)
            return ManyResult(states, infos, ledgers, batching, stacked=False)
        state, info = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[(r.state, r.info) for r in runs])
        return ManyResult(state, info, ledgers, batching)
    lanes = lanes_of(mechanisms)
    with _key_reuse_checked(check_keys):
        state, info = _lanes_jit(
            lanes.shared, lanes.stacked, keys, lanes.treedef, lanes.batched, rounds=rounds, batching=batching
        )
    ledgers = tuple(
        _audited_ledger(
            m, *jax.tree_util.tree_map(lambda x, i=i: x[i], (state, info)), complete=rounds == m.rounds
        )
        for i, m in enumerate(mechanisms)
    )
    return ManyResult(state, info, ledgers, batching)


def _per_lane(mechanism, lanes: int) -> tuple:
    """One checked mechanism per lane: the one given for every lane, or the sequence given."""
    if not isinstance(mechanism, list | tuple):
        return (contract.check_mechanism(mechanism),) * lanes
    if len(mechanism) != lanes:
        raise ValueError(f"mechanism: {len(mechanism)} mechanisms for {lanes} keys; give one per key")
    return tuple(contract.check_mechanism(m) for m in mechanism)


def _lanes(shared, stacked, keys, treedef, batched, rounds: int, batching: str):
    """Every lane's run in one program: lane after lane ("map") or all lanes at once ("vmap")."""
    lanes = Lanes(treedef, batched, shared, stacked)

    def one(lane_leaves, key):
        mechanism = lanes.mechanism(lane_leaves)
        state = mechanism.init(stream_key(key, Stream.INIT))
        return _scan_rounds(mechanism, state, key, jnp.zeros((), jnp.int32), rounds)

    if batching == "map":
        return jax.lax.map(lambda lane: one(*lane), (stacked, keys))
    return jax.vmap(one)(stacked, keys)


_lanes_jit = jax.jit(_lanes, static_argnums=(3, 4), static_argnames=("rounds", "batching"))


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
