"""Lanes: several runs of one mechanism's structure as one compiled program.

A sweep over seeds runs one mechanism from many keys. A sweep over budgets (an epsilon grid) runs
the mechanisms one factory builds at several budgets: they hold their noise scales as data
(`noise.GaussianScale`, `noise.SelectionScale`), so they differ only in leaves and in their
plans. The compiled rounds never read a plan: the charges a round records carry the scales it
drew with, and each lane's ledger is audited against that lane's own plan afterwards, so a lane
that drew at another lane's scale would fail its audit.

`lanes_of` checks that the mechanisms share one structure (every static setting but the plan),
keeps each leaf that is equal in every lane once and stacks the others on a leading lane axis;
`Lanes.mechanism` rebuilds one lane's mechanism inside the program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Lanes(NamedTuple):
    """Mechanisms of one structure, as one program's arguments.

    treedef: the structure (static); batched: the positions of the leaves that differ between
    lanes (static); shared: every leaf, None at the batched positions; stacked: the batched
    leaves, each with a leading (lanes,) axis.
    """

    treedef: Any
    batched: tuple[int, ...]
    shared: tuple
    stacked: tuple

    def mechanism(self, lane_leaves: Sequence) -> Any:
        """The mechanism of the lane whose batched leaves are `lane_leaves`."""
        leaves = list(self.shared)
        for position, leaf in zip(self.batched, lane_leaves, strict=True):
            leaves[position] = leaf
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


def lanes_of(mechanisms: Sequence) -> Lanes:
    """The lanes of `mechanisms` (one per lane; the same object may fill several lanes).

    Raises:
        ValueError: a mechanism differs from the first in a static setting other than its plan
            (named), or in a leaf's shape or dtype.
    """
    first = mechanisms[0]
    flat = [jax.tree_util.tree_flatten_with_path(_with_plan_of(m, first)) for m in mechanisms]
    treedef = flat[0][1]
    for lane, (_, lane_treedef) in enumerate(flat[1:], start=1):
        if lane_treedef != treedef:
            where = _static_difference(first, mechanisms[lane], "mechanism") or "its pytree structure"
            raise ValueError(
                f"mechanism {lane} differs from mechanism 0 in {where}: the lanes of one program may "
                "differ only in data (noise scales, private inputs) and plans; run such mechanisms "
                'with batching="loop" or separately'
            )
    columns = list(zip(*(leaves for leaves, _ in flat), strict=True))
    batched = tuple(i for i, column in enumerate(columns) if not _all_same([leaf for _, leaf in column]))
    for i in batched:
        path, leaf = columns[i][0]
        for lane, (_, other) in enumerate(columns[i][1:], start=1):
            if (np.shape(other), jnp.result_type(other)) != (np.shape(leaf), jnp.result_type(leaf)):
                raise ValueError(
                    f"mechanism {lane}'s leaf {jax.tree_util.keystr(path)} has shape {np.shape(other)} and "
                    f"dtype {jnp.result_type(other)}, mechanism 0's {np.shape(leaf)} and "
                    f"{jnp.result_type(leaf)}: the lanes of one program share their shapes"
                )
    shared = tuple(None if i in batched else column[0][1] for i, column in enumerate(columns))
    stacked = tuple(jnp.stack([leaf for _, leaf in columns[i]]) for i in batched)
    return Lanes(treedef, batched, shared, stacked)


def _with_plan_of(mechanism, first):
    """`mechanism` holding the first mechanism's plan: plans are host accounting (static), so
    they alone may differ between lanes."""
    if mechanism is first or not dataclasses.is_dataclass(mechanism) or not hasattr(mechanism, "plan"):
        return mechanism
    return dataclasses.replace(mechanism, plan=first.plan)


def _all_same(leaves: list) -> bool:
    first = leaves[0]
    return all(
        leaf is first
        or (
            np.shape(leaf) == np.shape(first)
            and jnp.result_type(leaf) == jnp.result_type(first)
            and bool(jnp.array_equal(leaf, first))
        )
        for leaf in leaves[1:]
    )


def _static_difference(a, b, path: str) -> str | None:
    """The first static field, by path, where two mechanisms' settings differ (the plan aside)."""
    if type(a) is not type(b):
        return f"{path} ({type(a).__name__} against {type(b).__name__})"
    if dataclasses.is_dataclass(a):
        for field in dataclasses.fields(a):
            if field.name == "plan":
                continue
            x, y, where = getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}"
            if field.metadata.get("static", False):
                if _differs(x, y):
                    return f"{where} ({_short(x)} against {_short(y)})"
            elif found := _static_difference(x, y, where):
                return found
    elif isinstance(a, list | tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if found := _static_difference(x, y, f"{path}[{i}]"):
                return found
    return None


def _differs(x, y) -> bool:
    try:
        return bool(x != y)
    except ValueError:  # arrays: their elements compare
        return not np.array_equal(x, y)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
