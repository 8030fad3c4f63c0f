"""The mechanism contract (`jaxdp.contract`): what it asks for, and the errors that say what is
missing."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import pytest

import jaxdp
from jaxdp import contract, loop, noise
from jaxdp.accounting import Plan, PlannedCharge
from jaxdp.keys import Stream, stream_key
from jaxdp.types import Charge, Neighboring, Sensitive, pytree_dataclass, static_field

from .mechanisms.conftest import FACTORIES, tiny_dataset


class CountInfo(NamedTuple):
    charges: tuple[Charge, ...]


@pytree_dataclass
class NoisyTotal:
    """The smallest mechanism: one Gaussian measurement of the record count (add/remove)."""

    total: Sensitive
    plan: Plan = static_field()
    rounds: int = static_field(default=1)
    relation: Neighboring = static_field(default=Neighboring.ADD_REMOVE)

    def init(self, key):
        return jnp.zeros((), jnp.float32)

    def step(self, state, key):
        noisy, charge = noise.measure_counts(
            stream_key(key, Stream.MEASURE), self.total, sigma=2.0, sensitivity=1.0, noise="discrete"
        )
        return noisy, CountInfo((charge,))

    def release(self, state, key):
        return state


def noisy_total(n=100):
    plan = Plan.from_rho(1.0).with_charge(PlannedCharge("total", "discrete_gaussian", 1.0, 2.0)).check()
    return NoisyTotal(Sensitive(jnp.asarray(n, jnp.int32)), plan)


def test_a_minimal_mechanism_meets_the_contract_and_runs():
    mech = noisy_total()
    assert isinstance(mech, contract.Mechanism)
    result = jaxdp.run(mech, jax.random.key(0))
    assert [e.label for e in result.ledger] == ["total"]


@pytest.mark.parametrize("name", ["independent", "mwem", "rap", "aim"])
def test_shipped_mechanisms_meet_the_contract(name):
    mech = FACTORIES[name](tiny_dataset(), epsilon=1.0, delta=1e-6)
    assert contract.check_mechanism(mech) is mech and isinstance(mech, contract.Mechanism)


class Incomplete:
    rounds = 0
    relation = "replace-one"

    def init(self, key):
        return None


def test_a_mechanism_missing_members_is_told_each_by_name():
    with pytest.raises(contract.ContractError) as err:
        jaxdp.run(Incomplete(), jax.random.key(0))
    message = str(err.value)
    for missing in ("step(...) is missing", "release(...) is missing", "rounds must be", "plan must be"):
        assert missing in message
    assert "relation must be a jaxdp.Neighboring" in message
    assert "init" not in message.split("is not a jaxdp mechanism:")[1].split(";")[0]


def test_a_jittable_mechanism_must_be_a_pytree():
    class Plain(NoisyTotal):  # a subclass of a pytree dataclass that is not registered itself
        pass

    mech = noisy_total()
    with pytest.raises(contract.ContractError, match=r"must be a pytree of arrays.*Plain"):
        jaxdp.run(Plain(mech.total, mech.plan), jax.random.key(0))


def test_compiled_release_defaults_to_jittable_and_must_be_a_bool():
    mech = noisy_total()
    assert contract.compiled_release(mech)

    @pytree_dataclass
    class HostRelease(NoisyTotal):
        compiled_release = "no"

    with pytest.raises(contract.ContractError, match="compiled_release, if given, must be a bool"):
        jaxdp.run(HostRelease(mech.total, mech.plan), jax.random.key(0))

    class HostRounds(NoisyTotal):  # a Python loop: its release is not compiled either
        jittable = False

    assert not contract.compiled_release(HostRounds(mech.total, mech.plan))

    class Claiming(HostRounds):  # ... unless it claims so, which the contract refuses
        compiled_release = True

    with pytest.raises(contract.ContractError, match="compiled_release = True needs jittable = True"):
        jaxdp.run(Claiming(mech.total, mech.plan), jax.random.key(0))


def test_a_step_that_reshapes_its_state_is_told_which_leaf():
    @pytree_dataclass
    class Growing(NoisyTotal):
        def step(self, state, key):
            state, info = super().step(state, key)
            return jnp.stack([state, state]), info

    mech = noisy_total()
    with pytest.raises(contract.ContractError, match="same structure, shapes and dtypes"):
        loop.run(Growing(mech.total, mech.plan), jax.random.key(0))


def test_a_subclass_never_runs_through_its_parents_compiled_program():
    """Mechanisms are jit arguments, so their treedef keys the compiled program. Classes made by
    `pytree_dataclass` with the same fields must still have different treedefs: with jax's own
    `register_dataclass` they compare equal while hashing apart, and a jitted call ran another
    class's program whenever two met in one bucket of jax's cache (12-17% of 300 such calls in
    a measurement before the fix; it made the reshaping test above fail at random)."""

    @pytree_dataclass
    class Base:
        x: jax.Array

        def value(self):
            return self.x

    def subclass(offset):
        @pytree_dataclass
        class Shifted(Base):
            def value(self):
                return self.x + offset

        return Shifted

    first, second = subclass(1), subclass(2)
    assert jax.tree.structure(first(jnp.int32(0))) != jax.tree.structure(second(jnp.int32(0)))
    value = jax.jit(lambda mechanism: mechanism.value())
    answers = [int(value(subclass(offset)(jnp.int32(0)))) for offset in range(100)]
    assert answers == list(range(100))


def test_early_stopping_needs_a_python_loop():
    @pytree_dataclass
    class Stops(NoisyTotal):
        def finished(self, state):
            return True

    mech = noisy_total()
    stops = Stops(mech.total, mech.plan)
    with pytest.raises(contract.ContractError, match="needs jittable = False"):
        contract.check_mechanism(stops)


@pytest.mark.parametrize("info", [(), {"charges": ()}, CountInfo(charges=[])])
def test_info_without_a_charges_tuple_is_refused(info):
    with pytest.raises(contract.ContractError, match=r"info.charges is a tuple of jaxdp.types.Charge"):
        contract.check_info(info)


def test_a_step_returning_no_charges_is_refused_while_tracing():
    @pytree_dataclass
    class Silent(NoisyTotal):
        def step(self, state, key):
            return state, ()

    mech = noisy_total()
    with pytest.raises(contract.ContractError, match=r"info\.charges"):
        loop.run(Silent(mech.total, mech.plan), jax.random.key(0))
