"""The mechanism contract: what `jaxdp.run` needs of a mechanism, typed and checked.

A mechanism (`Mechanism`) is any object with

- `rounds: int`, the rounds its plan pays for;
- `plan: jaxdp.accounting.Plan`, every private primitive it will invoke, fixed before it runs;
- `relation: jaxdp.Neighboring`, the neighbouring relation of its guarantee;
- `init(key) -> state`, `step(state, key) -> (state, info)` and `release(state, key) -> output`,
  where `info` meets `Info`: a `charges` tuple holding one `jaxdp.types.Charge` per private
  primitive the round invoked (what `jaxdp.noise` returns beside each draw).

and, optionally,

- `jittable: bool` (default True): False for a step with data-dependent shapes or host code,
  which `run` then drives in a Python loop with the same keys;
- `releases: str` (default "records"): "answers" for a mechanism whose release is its noisy
  answers rather than synthetic records (the Gaussian baseline);
- `compiled_release: bool` (default: `jittable`): False for a release that runs host code
  between compiled programs (records polished after they are drawn), which `jaxdp.execute`
  then calls as it is instead of compiling it as one program;
- `finished(state) -> bool` and `realised_plan(state) -> Plan` (default: never; the fixed
  `plan`), for a mechanism that adapts its budget with a privacy filter (AIM): the loop stops
  once `finished`, and the ledger is audited against the charges it decided on. Only a
  mechanism with `jittable = False` may stop early.

`check_mechanism` tells a user's mechanism what it lacks, by name, before anything runs;
`jittable`, `releases`, `compiled_release`, `finished` and `realised_plan` below are the only
readers of the optional members. `public_mechanism` is the mechanism as a user may keep it
(`jaxdp.Result.mechanism`): its settings and plan, none of its private inputs.
docs/architecture.md describes the contract with the rest of the house.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

from jaxdp import pld
from jaxdp.accounting import Plan
from jaxdp.types import Charge, Key, Neighboring, withhold


@runtime_checkable
class Info(Protocol):
    """What a round reports: the charges of the private primitives it invoked, in order."""

    charges: tuple[Charge, ...]


@runtime_checkable
class Mechanism(Protocol):
    """The shape every mechanism has (module docstring; docs/architecture.md)."""

    rounds: int
    plan: Plan
    relation: Neighboring

    def init(self, key: Key) -> Any:
        """The initial state, from the INIT stream key (public randomness only)."""

    def step(self, state: Any, key: Key) -> tuple[Any, Info]:
        """One round from the round's key: the new state and the round's Info."""

    def release(self, state: Any, key: Key) -> Any:
        """The output (records or answers) of a state, from the RELEASE stream key."""


class ContractError(TypeError):
    """A mechanism or its Info does not meet the contract (the message names what is missing)."""


_REQUIRED_METHODS = ("init", "step", "release")
RELEASES = ("records", "answers")
_FILTER_METHODS = ("finished", "realised_plan")


def check_mechanism(mechanism: object) -> Mechanism:
    """Return `mechanism` if it meets `Mechanism`, else raise ContractError naming every member
    it lacks or holds with the wrong type."""
    problems = []
    for name in _REQUIRED_METHODS:
        if not callable(getattr(mechanism, name, None)):
            problems.append(f"method {name}(...) is missing")
    rounds = getattr(mechanism, "rounds", None)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        problems.append(f"rounds must be an int >= 1 (the rounds its plan pays for), got {rounds!r}")
    if not isinstance(getattr(mechanism, "plan", None), Plan):
        problems.append("plan must be a jaxdp.accounting.Plan (the charges fixed before running)")
    if not isinstance(getattr(mechanism, "relation", None), Neighboring):
        problems.append("relation must be a jaxdp.Neighboring")
    flag = getattr(mechanism, "jittable", True)
    if not isinstance(flag, bool):
        problems.append(f"jittable, if given, must be a bool, got {flag!r}")
    if hasattr(mechanism, "compiled_release"):
        compiled = mechanism.compiled_release
        if not isinstance(compiled, bool):
            problems.append(f"compiled_release, if given, must be a bool, got {compiled!r}")
        elif compiled and flag is False:
            problems.append(
                "compiled_release = True needs jittable = True: a host-driven state is no jit argument"
            )
    released = getattr(mechanism, "releases", "records")
    if released not in RELEASES:
        problems.append(f"releases, if given, must be one of {RELEASES}, got {released!r}")
    for name in _FILTER_METHODS:
        if hasattr(mechanism, name) and not callable(getattr(mechanism, name)):
            problems.append(f"{name}, if given, must be a method")
    if flag is True and hasattr(mechanism, "finished"):
        problems.append("finished(state) needs jittable = False: a compiled scan cannot stop early")
    if flag is True and (odd := _non_array_leaves(mechanism)):
        problems.append(
            f"a jittable mechanism must be a pytree of arrays (jaxdp.types.pytree_dataclass: settings "
            f"static, private input a Sensitive leaf) so that jit takes it as an argument; leaves of "
            f"type {odd}"
        )
    if problems:
        raise ContractError(
            f"{type(mechanism).__name__} is not a jaxdp mechanism: "
            + "; ".join(problems)
            + " (see jaxdp.contract)"
        )
    pld.check(mechanism.plan)  # over budget (rho, or a PLD calibration's epsilon): refused before it runs
    return mechanism  # type: ignore[return-value]


def _non_array_leaves(mechanism: object) -> list[str]:
    leaves = jax.tree_util.tree_leaves(mechanism)
    return sorted(
        {
            type(x).__name__
            for x in leaves
            if not isinstance(x, jax.Array | np.ndarray | np.generic | int | float)
        }
    )


def check_info(info: object) -> Info:
    """Return `info` if it meets `Info`, else raise ContractError saying what it holds instead."""
    charges = getattr(info, "charges", None)
    if not isinstance(charges, tuple) or not all(isinstance(c, Charge) for c in charges):
        raise ContractError(
            f"step must return (state, info) where info.charges is a tuple of jaxdp.types.Charge, one per "
            f"private primitive the round invoked (as jaxdp.noise returns them); got {type(info).__name__} "
            f"with charges={type(charges).__name__}"
        )
    return info  # type: ignore[return-value]


def jittable(mechanism: Mechanism) -> bool:
    """Whether `run` compiles the rounds (`lax.scan` under one jit) or drives them from Python."""
    return getattr(mechanism, "jittable", True)


def compiled_release(mechanism: Mechanism) -> bool:
    """Whether `release` traces under `jax.jit` as one program (default: the rounds do)."""
    return getattr(mechanism, "compiled_release", jittable(mechanism))


def releases(mechanism: Mechanism) -> str:
    """What `release` returns: "records" (synthetic records) or "answers" (noisy answers)."""
    return getattr(mechanism, "releases", "records")


def finished(mechanism: Mechanism, state: Any) -> bool:
    """Whether a mechanism with a privacy filter has spent its budget (never, without one)."""
    return bool(mechanism.finished(state)) if hasattr(mechanism, "finished") else False


def realised_plan(mechanism: Mechanism, state: Any) -> Plan:
    """The plan a run is audited against: the factory's fixed plan, or, for a mechanism with a
    privacy filter, the charges it decided on during the run (each within the budget)."""
    return mechanism.realised_plan(state) if hasattr(mechanism, "realised_plan") else mechanism.plan


def public_mechanism(mechanism: Mechanism) -> Mechanism:
    """The mechanism with nothing private left in it: every `Sensitive` input `Withheld`, and
    under add-remove (where n is private) its record count removed (None).

    What it keeps (settings, plan, workload, the family and rule bound to the domain) reads the
    released state as before: answers, default rows, compression and error bounds; running it
    raises, naming the withheld input.

    Privacy:
        Safe to keep and pickle with the release: it holds only the public settings and plan.
    """
    public = withhold(mechanism)
    add_remove = getattr(mechanism, "relation", None) is Neighboring.ADD_REMOVE
    if add_remove and dataclasses.is_dataclass(public) and hasattr(public, "n_records"):
        public = dataclasses.replace(public, n_records=None)
    return public
