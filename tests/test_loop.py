"""The driver: key-reuse checking, `jit_step`, and no private value in any compiled program."""

import math
from typing import NamedTuple

import chex
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import loop, noise, selection
from jaxdp.accounting import Plan, PlannedCharge, gaussian_sigma, gumbel_scale
from jaxdp.keys import Stream, round_key, stream_key
from jaxdp.queries import MarginalWorkload, all_kway, marginal_counts
from jaxdp.types import Charge, Neighboring, Sensitive, pytree_dataclass, static_field

from .mechanisms.conftest import tiny_dataset


class PickInfo(NamedTuple):
    charges: tuple[Charge, Charge]


@pytree_dataclass
class SelectThenMeasure:
    """A hand-composed mechanism: pick a marginal (exponential mechanism on its max cell error
    against the uniform answers), measure its first cell. `reuse_select_key`: the bug under
    test, the measurement draws from the SELECT key the selection consumed."""

    counts: Sensitive
    workload: MarginalWorkload = static_field()
    n_records: int = static_field()
    select_scale: float = static_field()
    sigma: float = static_field()
    plan: Plan = static_field()
    reuse_select_key: bool = static_field()
    rounds: int = static_field(default=2)
    relation: Neighboring = static_field(default=Neighboring.REPLACE_ONE)

    def init(self, key):
        return jnp.zeros(self.workload.n_queries, jnp.float32)

    def step(self, state, key):
        uniform = jnp.concatenate([jnp.full(c, 1.0 / c) for c in self.workload.cells])
        select_key = stream_key(key, Stream.SELECT)
        scores = self.counts.map(
            lambda c: selection.max_cell_errors(c / self.n_records, uniform, self.workload)
        )
        chosen, select_charge = noise.select(
            select_key, scores, scale=self.select_scale, sensitivity=1.0 / self.n_records, noise="discrete"
        )
        first = jnp.asarray(self.workload.offsets, jnp.int32)[chosen]
        noisy, measure_charge = noise.measure_counts(
            select_key if self.reuse_select_key else stream_key(key, Stream.MEASURE),
            self.counts.map(lambda c: c[first]),
            sigma=self.sigma,
            sensitivity=math.sqrt(2.0),
            noise="discrete",
        )
        return state.at[first].set(noisy / self.n_records), PickInfo((select_charge, measure_charge))

    def release(self, state, key):
        return state


def select_then_measure(reuse_select_key=False):
    data = tiny_dataset()
    workload = all_kway(data.domain.sizes, 2)
    n = len(data)
    scale, sigma = gumbel_scale(1.0 / n, 0.1), gaussian_sigma(math.sqrt(2.0), 0.1)
    plan = (
        Plan.from_rho(1.0)
        .with_charge(PlannedCharge("select", "discrete_exponential", 1.0 / n, scale, times=2))
        .with_charge(PlannedCharge("measure", "discrete_gaussian", math.sqrt(2.0), sigma, times=2))
        .check()
    )
    counts = Sensitive(marginal_counts(jnp.asarray(data.codes), workload, jnp.int32))
    return SelectThenMeasure(counts, workload, n, scale, sigma, plan, reuse_select_key)


def test_a_select_key_reused_for_the_measurement_is_caught():
    assert loop.run(select_then_measure(), jax.random.key(0)).ledger  # the correct composition runs
    reusing = select_then_measure(reuse_select_key=True)
    with pytest.raises(jax.errors.KeyReuseError):
        loop.run(reusing, jax.random.key(0))
    # negative control: without the check the reuse passes the run and the audit silently
    with jax.debug_key_reuse(False):
        result = loop.run(reusing, jax.random.key(0), check_keys=False)
    assert len(result.ledger) == 4


def test_jit_step_takes_the_mechanism_as_an_argument():
    mech = select_then_measure()
    step = jaxdp.jit_step(mech)
    key = jax.random.key(1)
    state = mech.init(stream_key(key, Stream.INIT))
    for t in range(mech.rounds):
        state, _ = step(state, round_key(key, t))
    np.testing.assert_array_equal(state, loop.run(mech, key).state)
    private = np.asarray(marginal_counts(jnp.asarray(tiny_dataset().codes), mech.workload, jnp.int32))
    bound = jax.make_jaxpr(jax.jit(mech.step))(state, round_key(key, 0))
    assert any(_same(c, private) for c in _constants(bound)), "negative control: a bound step bakes it in"
    assert step.func is loop._step_jit and step.args == (mech,)  # the mechanism is passed, not closed over
    passed = jax.make_jaxpr(step.func)(mech, state, round_key(key, 0))
    assert not any(_same(c, private) for c in _constants(passed))


def test_jit_step_refuses_a_python_loop_mechanism():
    from .mechanisms.conftest import FACTORIES

    with pytest.raises(ValueError, match="not jittable"):
        jaxdp.jit_step(FACTORIES["aim"](tiny_dataset(), epsilon=1.0, delta=1e-6))


def _same(const, private: np.ndarray) -> bool:
    const = np.asarray(const)
    return const.shape == private.shape and np.array_equal(const, private)


def _constants(closed) -> list:
    """Every constant of a closed jaxpr and of all the jaxprs nested in it (jit, scan, while,
    cond bodies)."""
    found = list(closed.consts)
    stack = [closed.jaxpr]
    while stack:
        jaxpr = stack.pop()
        for eqn in jaxpr.eqns:
            for param in eqn.params.values():
                for sub in param if isinstance(param, tuple | list) else (param,):
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        found += list(sub.consts)
                        stack.append(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        stack.append(sub)
    return found


def _private_arrays(mech) -> list[np.ndarray]:
    found = jax.tree_util.tree_leaves(mech, is_leaf=lambda x: isinstance(x, Sensitive))
    return [np.asarray(x) for s in found if isinstance(s, Sensitive) for x in jax.tree_util.tree_leaves(s)]


@pytest.mark.parametrize(
    "name", ["pep", "rap", "gem", "fem", "dualquery", "rap++", "independent", "gaussian"]
)
def test_no_compiled_program_of_run_holds_a_private_value(name):
    from .mechanisms.conftest import FACTORIES

    mech = FACTORIES[name](tiny_dataset(), epsilon=1.0, delta=1e-6)
    private = _private_arrays(mech)
    assert private
    key = jax.random.key(2)
    state = loop._init_jit(mech, key)
    programs = {
        "init": jax.make_jaxpr(loop._init_jit)(mech, key),
        "rounds": jax.make_jaxpr(lambda m, s, k: loop._scan_jit(m, s, k, jnp.int32(0), m.rounds))(
            mech, state, key
        ),
    }
    for label, closed in programs.items():
        consts = _constants(closed)
        assert not any(_same(c, p) for c in consts for p in private), f"{name}: {label} holds private data"


@pytest.mark.parametrize("name", ["independent", "pep", "rap-softmax", "fem"])
def test_run_many_loops_each_seed_exactly_as_run(name):
    from .mechanisms.conftest import FACTORIES

    mech = FACTORIES[name](tiny_dataset(), epsilon=1.0, delta=1e-6)
    keys = jax.random.split(jax.random.key(3), 3)
    many = jaxdp.run_many(mech, keys)
    assert many.batching == "loop" and many.seeds == 3
    assert jax.tree_util.tree_leaves(many.state)[0].shape[0] == 3
    for i, key in enumerate(keys):
        single = loop.run(mech, key)
        seed = many.seed(i)
        chex.assert_trees_all_equal((seed.state, seed.info), (single.state, single.info))
        assert seed.ledger == single.ledger
        chex.assert_trees_all_equal(
            loop.release(mech, seed.state, key), loop.release(mech, single.state, key)
        )
        assert jaxdp.audit.replay(mech, key, seed)
    assert not jaxdp.audit.replay(mech, keys[1], many.seed(0))  # negative control: another seed's key


@pytest.mark.parametrize(
    ("name", "batching"),
    [("gaussian", "vmap"), ("pep", "vmap"), ("gaussian", "map"), ("pep", "map"), ("rap-softmax", "map")],
)
def test_run_many_in_one_program_audits_each_seed_and_replays_as_a_batch(name, batching):
    from .mechanisms.conftest import FACTORIES

    mech = FACTORIES[name](tiny_dataset(), epsilon=1.0, delta=1e-6)
    keys = jax.random.split(jax.random.key(4), 4)
    many = jaxdp.run_many(mech, keys, batching=batching)
    assert many.batching == batching
    assert all(len(ledger) == sum(c.times for c in mech.plan.charges) for ledger in many.ledgers)
    assert all(jaxdp.rho_spent(ledger) == pytest.approx(mech.plan.rho_planned) for ledger in many.ledgers)
    assert jaxdp.audit.replay_many(mech, keys, many) == [True] * 4
    # On these small cases, on a CPU, the program's lanes round as the single runs do
    # (docs/architecture.md says why a lane need not, and why its privacy does not depend on it;
    # on an H200 RAP-softmax's mapped lanes did not).
    if jax.default_backend() != "cpu":
        return
    for i, key in enumerate(keys):
        single = loop.run(mech, key)
        chex.assert_trees_all_equal(many.seed(i).info, single.info)
        chex.assert_trees_all_close(many.seed(i).state, single.state, rtol=1e-5, atol=1e-6)


def test_run_many_loops_a_python_loop_mechanism_and_says_so(caplog):
    from .mechanisms.conftest import FACTORIES

    mech = FACTORIES["aim"](tiny_dataset(), epsilon=1.0, delta=1e-6)
    keys = jax.random.split(jax.random.key(5), 2)
    with caplog.at_level("WARNING", logger="jaxdp.loop"):
        many = jaxdp.run_many(mech, keys, batching="vmap")
    assert "runs its 2 lanes one after another" in caplog.text
    assert many.batching == "loop" and not many.stacked
    for i, key in enumerate(keys):
        assert jaxdp.audit.replay(mech, key, many.seed(i))
        assert jaxdp.rho_spent(many.ledgers[i]) <= mech.plan.rho_budget


def test_run_many_refuses_bad_keys_and_batched_info_needs_its_ledgers():
    mech = select_then_measure()
    with pytest.raises(TypeError, match=r"keys\[0\] must be a typed JAX key"):
        jaxdp.run_many(mech, [0, 1])
    with pytest.raises(TypeError, match="one-dimensional"):
        jaxdp.run_many(mech, jax.random.key(0))
    with pytest.raises(ValueError, match="batching"):
        jaxdp.run_many(mech, jax.random.split(jax.random.key(0), 2), batching="pmap")
    many = jaxdp.run_many(mech, [jax.random.key(0), jax.random.key(1)])
    with pytest.raises(ValueError, match=r"ManyResult\.ledgers"):
        jaxdp.audit.ledger_from_info(many.info)


@pytest.mark.parametrize("batching", ["map", "vmap"])
def test_no_compiled_program_of_run_many_holds_a_private_value(batching):
    mech = select_then_measure()
    private = _private_arrays(mech)
    keys = jax.random.split(jax.random.key(6), 2)
    lanes = loop.lanes_of([mech, mech])

    def program(shared, stacked, keys):
        return loop._lanes_jit(
            shared, stacked, keys, lanes.treedef, lanes.batched, rounds=mech.rounds, batching=batching
        )

    closed = jax.make_jaxpr(program)(lanes.shared, lanes.stacked, keys)
    assert not any(_same(c, p) for c in _constants(closed) for p in private)
    arg_shapes = [tuple(v.aval.shape) for v in closed.jaxpr.invars]
    assert all(p.shape in arg_shapes for p in private)  # it enters as an argument instead


def test_short_histogram_rounds_compile_for_a_short_run_and_the_rest_with_xla_defaults(monkeypatch):
    # PEP's and MWEM's rounds on a small histogram compile with XLA:CPU's quicker code generator
    # (jaxdp/_jit.py); past SHORT_RUN_WORK, and for families whose rounds run long (RAP's Adam
    # fit, DualQuery's oracle), the rounds keep XLA's default code.
    from tests.mechanisms.conftest import FACTORIES, tiny_dataset

    data = tiny_dataset()
    key = jax.random.key(0)
    for name, short in (("pep", True), ("mwem", True), ("rap-softmax", False), ("dualquery", False)):
        mech = FACTORIES[name](data, epsilon=1.0, delta=1e-6)
        state = loop._init_jit(mech, key)
        expected = loop._scan_fast_compiled if short else loop._scan_jit
        assert loop._rounds_program(mech, state) is expected, name
    pep = FACTORIES["pep"](data, epsilon=1.0, delta=1e-6)
    state = loop._init_jit(pep, key)
    work = pep.rounds * sum(math.prod(x.shape) for x in jax.tree.leaves(state))
    monkeypatch.setattr(loop, "SHORT_RUN_WORK", work)
    assert loop._rounds_program(pep, state) is loop._scan_fast_compiled
    monkeypatch.setattr(loop, "SHORT_RUN_WORK", work - 1)
    assert loop._rounds_program(pep, state) is loop._scan_jit
    monkeypatch.undo()
    # `run` goes through the program chosen, in one block, in blocks, and for part of the rounds
    # (the planned rounds decide, so a run in parts compiles what a whole run does).
    from tests.conftest import CallCounter

    fast = CallCounter(loop._scan_fast_compiled)
    monkeypatch.setattr(loop, "_scan_fast_compiled", fast)
    loop.run(pep, key)
    loop.run(pep, key, progress=True, blocks=2)
    loop.run(pep, key, rounds=1)
    assert fast.calls == 1 + 2 + 1
    loop.run(FACTORIES["rap-softmax"](data, epsilon=1.0, delta=1e-6), key)
    assert fast.calls == 4
