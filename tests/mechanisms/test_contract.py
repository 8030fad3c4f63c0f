"""The contract every mechanism passes (DESIGN.md section 7)."""

import jax
import numpy as np
import pytest

from jaxdp import audit, checkpoint, contract, loop
from jaxdp.api import noise_name
from jaxdp.checkpoint import Checkpoint
from jaxdp.keys import Stream, round_key, stream_key
from jaxdp.types import Sensitive
from tests.conftest import StoppedAfterSaves, stop_after_saves

from .conftest import tiny_dataset


def _leaves_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb, strict=True)
    )


def _skip_unless_jittable(mech):
    if not contract.jittable(mech):
        pytest.skip("runs as a Python loop with a data-adaptive state (AIM): no compiled program")


def _python_rounds(mech, key):
    """The states of the rounds run as a Python loop of steps, each step compiled on its own (no
    lax.scan): what loop.run's scan must equal. Compiled rather than op by op because eager
    rounds cost minutes on the 2-core CPU (DualQuery: 55 s of CPU for four rounds)."""
    init, step = jax.jit(type(mech).init), jax.jit(type(mech).step)
    state = init(mech, stream_key(key, Stream.INIT))
    yield state
    for t in range(mech.rounds):
        state, _ = step(mech, state, round_key(key, t))
        yield state


def test_jit_parity(build):
    mech, key = build(), jax.random.key(0)
    _skip_unless_jittable(mech)  # run would loop in Python too: nothing compiled to compare
    jitted = loop.run(mech, key).state
    *_, looped = _python_rounds(mech, key)
    for x, y in zip(jax.tree_util.tree_leaves(jitted), jax.tree_util.tree_leaves(looped), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=1e-5)


def test_state_shapes_are_fixed(build):
    mech, key = build(), jax.random.key(1)
    _skip_unless_jittable(mech)
    states = [jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), s) for s in _python_rounds(mech, key)]
    assert len(states) == mech.rounds + 1 and all(s == states[0] for s in states)


def test_same_key_same_output_different_key_different_output(build):
    mech = build()
    first = loop.run(mech, jax.random.key(2))
    second = loop.run(mech, jax.random.key(2))
    other = loop.run(mech, jax.random.key(3))
    assert _leaves_equal(first.state, second.state) and _leaves_equal(first.info, second.info)
    assert not _leaves_equal(first.state, other.state)
    out_a = loop.release(mech, first.state, jax.random.key(2))
    out_b = loop.release(mech, second.state, jax.random.key(2))
    assert _leaves_equal(out_a, out_b)  # rap++ releases (codes, numeric): compare every leaf
    assert audit.replay(mech, jax.random.key(2), first)


def test_step_is_traced_once(build, monkeypatch):
    mech = build(epsilon=0.777)  # a plan no other test uses, so the first run must compile
    _skip_unless_jittable(mech)
    cls = type(mech)
    traces = []
    original = cls.step

    def counting_step(self, state, key):
        traces.append(1)
        return original(self, state, key)

    monkeypatch.setattr(cls, "step", counting_step)
    loop.run(mech, jax.random.key(4))
    after_first = len(traces)
    loop.run(mech, jax.random.key(5))  # same shapes and plan: the compiled program is reused
    assert after_first == 1 and len(traces) == after_first


def test_ledger_equals_plan_and_budget_is_kept(build):
    mech = build()
    result = loop.run(mech, jax.random.key(6))
    plan = contract.realised_plan(mech, result.state)  # the fixed plan, or what a filter decided
    planned = sum(c.times for c in plan.charges)
    assert len(result.ledger) == planned
    audit.check_ledger(list(result.ledger), plan)  # complete: every planned draw happened
    spent = audit.rho_spent(result.ledger)
    assert spent <= mech.plan.rho_budget
    assert spent == pytest.approx(plan.rho_planned, rel=1e-12)
    # exact noise by default: every primitive invoked is an integer one, and the report says so
    assert all(e.primitive.startswith("discrete_") for e in result.ledger), result.ledger
    assert noise_name(result.ledger) in ("discrete-gaussian", "exact-exponential")


def test_more_rounds_than_planned_are_refused(build):
    mech = build()
    with pytest.raises(ValueError, match="exceeds"):
        loop.run(mech, jax.random.key(7), rounds=mech.rounds + 1)


def _private_arrays(mech) -> list[np.ndarray]:
    found = jax.tree_util.tree_leaves(mech, is_leaf=lambda x: isinstance(x, Sensitive))
    return [
        np.asarray(leaf) for s in found if isinstance(s, Sensitive) for leaf in jax.tree_util.tree_leaves(s)
    ]


def test_no_private_array_in_the_compiled_program(build):
    data = tiny_dataset()
    mech = build(data)
    _skip_unless_jittable(mech)
    private = _private_arrays(mech)
    assert private, "the mechanism holds its private input as Sensitive leaves"
    key = jax.random.key(8)

    def program(m, k):
        state = m.init(stream_key(k, Stream.INIT))
        return loop._scan_rounds(m, state, k, 0, m.rounds)

    closed = jax.make_jaxpr(program)(mech, key)
    for const in closed.consts:
        const = np.asarray(const)
        for value in private:
            assert not (const.shape == value.shape and np.array_equal(const, value)), "private data baked in"
        assert not (const.shape == data.codes.shape and np.array_equal(const, data.codes))
    # and every private array enters the program as an argument instead
    arg_shapes = [tuple(v.aval.shape) for v in closed.jaxpr.invars]
    assert all(value.shape in arg_shapes for value in private)


def test_integer_seed_is_refused(build):
    with pytest.raises(TypeError, match="typed JAX key"):
        loop.run(build(), 0)


def test_state_and_info_hold_no_key_and_no_private_value(build):
    """State and Info are releasable: no key material and no private array may hide in them."""
    mech = build()
    # a root key with no small words, so counters in the state cannot match it by chance
    root = jax.random.wrap_key_data(np.array([0x9E3779B9, 0x7F4A7C15], np.uint32))
    result = loop.run(mech, root)
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves((result.state, result.info))]
    assert all(not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) for x in leaves)
    key_words = {
        int(w)
        for k in audit.derived_keys(root, mech.rounds).values()
        for w in np.ravel(jax.random.key_data(k))
    } | {int(w) for w in np.ravel(jax.random.key_data(root))}
    for x in leaves:
        if x.dtype in (np.uint32, np.int32) and x.size:
            assert not key_words & {int(v) & 0xFFFFFFFF for v in np.ravel(x)[:100_000]}, (
                "key material in state"
            )
    for private in _private_arrays(mech):
        for x in leaves:
            assert not (x.shape == private.shape and np.array_equal(x, private)), (
                "a private array is in state"
            )


def test_a_stopped_run_resumes_to_the_same_bytes_from_a_checkpoint_with_no_key_or_private_value(
    build, tmp_path, monkeypatch
):
    """Stopped after its first checkpoint and resumed, a run ends in the uninterrupted run's state,
    Info and ledger. The checkpoint file (raw arrays, uncompressed) contains neither the words of
    the root key or of any key derived from it nor any private array's bytes; the control writes a
    private array into a state and finds it."""
    mech = build()
    root = jax.random.wrap_key_data(np.array([0x9E3779B9, 0x7F4A7C15], np.uint32))
    whole = loop.run(mech, root, checkpoint=Checkpoint(tmp_path / "run", every=1))
    content = (tmp_path / "run" / checkpoint.FILE).read_bytes()
    secret_keys = [root, *audit.derived_keys(root, mech.rounds).values()]
    for key in secret_keys:  # 8 bytes each: a match by chance has odds below 1e-9
        assert np.asarray(jax.random.key_data(key)).tobytes() not in content, "key material in the checkpoint"
    private = [p for p in _private_arrays(mech) if p.nbytes >= 16]
    assert private
    for value in private:
        assert value.tobytes() not in content, "a private array is in the checkpoint"
    with Checkpoint(tmp_path / "control") as control:
        control.save(1, (private[0],), ())
    assert private[0].tobytes() in (tmp_path / "control" / checkpoint.FILE).read_bytes()

    if mech.rounds < 2:
        return
    with monkeypatch.context() as patched:
        stop_after_saves(patched, 1)
        with pytest.raises(StoppedAfterSaves):
            loop.run(mech, root, checkpoint=Checkpoint(tmp_path / "stopped", every=1))
    resumed = loop.run(mech, root, checkpoint=Checkpoint(tmp_path / "stopped", every=1))
    assert resumed.resumed_from == 1
    assert _leaves_equal((resumed.state, resumed.info), (whole.state, whole.info))
    assert resumed.ledger == whole.ledger


def test_the_fingerprint_of_the_settings_is_the_same_in_every_process(build):
    """A checkpoint's "mechanism settings" digest the text of the mechanism's static fields: it
    must hold no address (another in every process: no resume would match) and no elided array
    (a change inside it would go unnoticed)."""
    text = str(jax.tree_util.tree_structure(build()))
    assert "0x" not in text and "..." not in text
