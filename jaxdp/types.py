"""Shared types: array aliases, the neighbouring relation, the `Sensitive` taint and the
primitives' `Charge` (the mechanism contract is `jaxdp.contract`).

`Sensitive` marks a value computed from the private data. It is a pytree whose only leaf is the
value, so `jax.jit` receives it as an argument and never bakes it into a compiled program as a
constant. Code outside `jaxdp.noise` may transform a sensitive value (`.map`) but cannot read it:
the result stays `Sensitive` until a noise primitive releases it. It cannot leave the process by
accident either: it refuses to be pickled, converted to an array, branched on or shown.

What is handed back to a user (`jaxdp.Result`) holds `Withheld` in its place (`withhold`):
nothing of the value, so the mechanism's settings, plan and post-processing stay usable and any
attempt to spend privacy on it fails with a message that says why.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
Key = jax.Array  # a typed key, as made by jax.random.key / jaxdp.keys.secure_root_key

T = TypeVar("T")


class Neighboring(enum.Enum):
    """Which pairs of datasets the privacy guarantee treats as neighbours.

    ADD_REMOVE: D' is D with one record added or removed; the record count n is private, so
        mechanisms measure counts.
    REPLACE_ONE: D' is D with one record replaced; n is public, so mechanisms measure
        normalised answers (fractions), whose sensitivity carries a 1/n.
    """

    ADD_REMOVE = "add-remove"
    REPLACE_ONE = "replace-one"


# What a selection rule picks, and what a family is told it picks: the marginals of a workload
# (measured whole), single counting queries, or counting queries and their negations (q, 1 - q).
MARGINALS = "marginals"
QUERIES = "queries"
SIGNED_QUERIES = "signed queries"


@jax.tree_util.register_pytree_node_class
class Sensitive:
    """A value derived from private data; only `jaxdp.noise` may release it.

    Args:
        value: any pytree of arrays computed from the private records.
    """

    __slots__ = ("_value",)

    def __init__(self, value: Any):
        self._value = value

    def map(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Sensitive:
        """Apply `fn` to the private value; the result is still private."""
        return Sensitive(fn(self._value, *args, **kwargs))

    def tree_flatten(self):
        return (self._value,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0])

    def __repr__(self) -> str:
        # Shapes are public (they follow from the declared domain and workload); values are not.
        shapes = jax.tree_util.tree_map(lambda a: getattr(a, "shape", "?"), self._value)
        return f"Sensitive(<hidden>, shapes={shapes})"

    def __array__(self, *args, **kwargs):
        raise TypeError("a Sensitive value cannot be converted to an array; release it via jaxdp.noise")

    def __bool__(self):
        raise TypeError("a Sensitive value cannot be branched on; release it via jaxdp.noise")

    def __reduce_ex__(self, protocol):
        raise TypeError(
            "a Sensitive value (computed from the private table) cannot be pickled: keep the release "
            "(a Result: its mechanism is already the public part) or "
            "jaxdp.contract.public_mechanism(mechanism), which keeps the settings and plan only"
        )

    def __deepcopy__(self, memo):
        # a copy in memory stays in the process (pickling, which `copy` falls back on, refuses)
        return type(self)(self._value)


@jax.tree_util.register_pytree_node_class
class Withheld(Sensitive):
    """Where a `Sensitive` value was, in what a user is handed: nothing of it, not even its shape
    (a table's shape under add-remove holds the private record count).

    `map` gives `Withheld` again (a transform of nothing is nothing), so post-processing that
    only passes the private value along still runs; a noise primitive refuses it (`_value`).
    It has no leaves: a mechanism holding it pickles and compiles with no private input.
    """

    __slots__ = ()

    def __init__(self):  # not Sensitive's: there is no value to store
        pass

    @property
    def _value(self):
        raise TypeError(
            "this private input was withheld: a mechanism handed back by jaxdp (Result.mechanism) "
            "keeps its settings and plan but not the table; build it again from the data to run it"
        )

    def map(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Withheld:
        del fn, args, kwargs
        return self

    def tree_flatten(self):
        return (), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        del aux, children
        return cls()

    def __repr__(self) -> str:
        return "Withheld(<private input not kept>)"

    def __reduce_ex__(self, protocol):
        return (Withheld, ())

    def __deepcopy__(self, memo):
        return self


def withhold(tree: T) -> T:
    """`tree` with every `Sensitive` value in it replaced by `Withheld` (nothing of it).

    Privacy:
        The result holds no value computed from the private data through a `Sensitive` leaf;
        static settings are kept as they are (the mechanisms keep none that is private but the
        record count under add-remove, which `jaxdp.contract.public_mechanism` removes).
    """
    return jax.tree_util.tree_map(
        lambda x: Withheld() if isinstance(x, Sensitive) else x,
        tree,
        is_leaf=lambda x: isinstance(x, Sensitive),
    )


def static_field(**kwargs: Any) -> Any:
    """A dataclass field that is pytree metadata (hashable, part of the compiled program)."""
    return dataclasses.field(metadata={"static": True}, **kwargs)


def pytree_dataclass(cls: type[T]) -> type[T]:
    """Make `cls` a frozen dataclass registered as a pytree.

    Fields declared with `static_field()` are metadata (static under jit: sizes, rounds,
    workload structure, plans); all other fields are leaves (arrays, noise scales, `Sensitive`
    inputs).
    """
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    meta = tuple(f.name for f in fields if f.metadata.get("static", False))
    data = tuple(f.name for f in fields if not f.metadata.get("static", False))
    keys = tuple(jax.tree_util.GetAttrKey(name) for name in data)

    # Registered as a custom node, not with `jax.tree_util.register_dataclass`: the treedefs of
    # two classes registered that way compare equal when their fields and static values do (jax
    # 0.10), although their hashes differ, so a jit cache keyed by treedef could run a subclass
    # through its parent's compiled step wherever two keys meet in one hash bucket. A custom
    # node's treedef holds its class.
    def flatten(obj):
        return [getattr(obj, name) for name in data], tuple(getattr(obj, name) for name in meta)

    def flatten_with_keys(obj):
        leaves, statics = flatten(obj)
        return list(zip(keys, leaves, strict=True)), statics

    def unflatten(statics, leaves):
        return cls(**dict(zip(data, leaves, strict=True)), **dict(zip(meta, statics, strict=True)))

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    return cls


class Charge(NamedTuple):
    """One invocation of a private primitive, as recorded in a round's Info.

    Fields are arrays so that `lax.scan` can stack them over rounds; `jaxdp.audit` turns them into
    host-side ledger entries and recomputes rho in float64 from (primitive, sensitivity, scale).

    primitive: int32 code of the primitive (see `jaxdp.noise.PRIMITIVES`).
    sensitivity: the declared sensitivity (L2 for Gaussian, L1 for Laplace, score sensitivity for
        selection).
    scale: the noise scale used (sigma, Laplace b, or the Gumbel scale).
    count: how many outputs it released (k for top-k, else 1).
    """

    primitive: Array
    sensitivity: Array
    scale: Array
    count: Array


def array_module(x: object) -> Any:
    """NumPy for a NumPy array, `jax.numpy` for anything else. Values the host computed stay on
    the host (the host loop's counts, scores and masks), where each JAX operation outside a trace
    would compile a program of its own; integer arithmetic is the same in both."""
    return np if isinstance(x, np.ndarray) else jnp
