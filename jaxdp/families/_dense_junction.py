"""Mirror descent over one junction tree's dense tables: a program compiled per tree.

`_junction` runs any tree with one program, the tree travelling as index arrays: every step
gathers and scatters over (cell, neighbour) pairs, 6-10 ns per padded entry on the 2-core CPU. On
a model whose tables hold tens of thousands of cells, a fit of a thousand iterations then spends
seconds in scatters (issue #24: AIM on a table with attributes of up to 501 values). Here the tree
is program structure instead: every node's table keeps its shape, a message is a log-sum-exp over
the axes outside its separator, and a belief's marginal is a sum over axes, all dense reductions
(a step costs 7-15% of the flat program's on large models). The price is a compile per tree, so
`pgm.estimate` takes this program only where the iterations it saves outweigh that compile
(`worth_compiling`). It compiles with XLA:CPU's classic emitters (`jaxdp._jit`): measured on
bnet9's last tree, 0.51 s instead of 0.84 s, its steps as fast (1000 in 0.23 s against 0.22 s).

Belief propagation is Shafer-Shenoy's two passes (leaves to root, then back), each message an
exact, max-stabilised log-sum-exp; the potentials, the loss and the optimisation are
`_junction`'s (`descend`), on the same flat vectors of potential and measured cells (unpadded), so
both programs fit the same model, up to float32 rounding in other orders (which, over a long fit,
can tip an Armijo test and let the two paths drift slowly apart).

Everything here is post-processing of released measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from jaxdp._background import Compiler
from jaxdp._jit import fast_compiled
from jaxdp.families._junction import BLOCK, Clique, descend, smallest_holding
from jaxdp.types import Array

# What `worth_compiling` weighs, measured on the 2-core CPU over the 16 trees of an AIM run on
# `bench/bench_aim.py --table bnet9` (5-9 nodes, 0-5 edges): a dense program compiles in 0.44-1.11 s,
# most of it growing with the messages (two per edge); a step of the flat program costs 6-10 ns
# per padded index entry; a dense step costs 7-15% of a flat one on large models.
COMPILE_S_FIXED = 0.4
COMPILE_S_PER_EDGE = 0.12
FLAT_S_PER_ENTRY = 8e-9


class DenseTree(NamedTuple):
    """A junction tree as program structure (hashable: it keys the compiled programs).

    sizes: attribute sizes. nodes: the tree's cliques (ascending attributes). edges: (child,
    parent) node indices, children before their parents (leaves to roots). potentials: cliques
    of the log-potentials, in theta's order; home: the node holding each. measured: cliques of
    the measurements, in the measured vector's order; route: the potential holding each.
    """

    sizes: tuple[int, ...]
    nodes: tuple[Clique, ...]
    edges: tuple[tuple[int, int], ...]
    potentials: tuple[Clique, ...]
    home: tuple[int, ...]
    measured: tuple[Clique, ...]
    route: tuple[int, ...]


def dense_tree(
    tree: Any, sizes: Sequence[int], potentials: Sequence[Clique], measured: Sequence[Clique]
) -> DenseTree:
    """The `DenseTree` of a junction tree (networkx graph over ascending attribute tuples,
    possibly a forest) with potentials and measurements as in `_junction.build_program`."""
    import networkx as nx  # a dependency of mbi

    nodes = tuple(sorted(tree.nodes))
    index = {node: i for i, node in enumerate(nodes)}
    edges = []
    for component in sorted(nx.connected_components(tree), key=min):
        root = min(component)
        # breadth-first (parent, child) pairs, reversed: every child comes before its parent
        edges += [(index[c], index[p]) for p, c in reversed(list(nx.bfs_edges(tree, root)))]
    return DenseTree(
        sizes=tuple(int(s) for s in sizes),
        nodes=nodes,
        edges=tuple(edges),
        potentials=tuple(potentials),
        home=tuple(smallest_holding(nodes, c, sizes) for c in potentials),
        measured=tuple(measured),
        route=tuple(smallest_holding(potentials, c, sizes) for c in measured),
    )


def worth_compiling(tree: DenseTree, flat_entries: int, max_blocks: int) -> bool:
    """Whether a fit of up to `max_blocks` blocks by the flat program, whose step touches
    `flat_entries` padded index entries (`_junction.Layout`), would take longer than compiling
    this tree's program (whose own steps, far cheaper on a model that large, are left out)."""
    compile_s = COMPILE_S_FIXED + COMPILE_S_PER_EDGE * len(tree.edges)
    return max_blocks * BLOCK * flat_entries * FLAT_S_PER_ENTRY > compile_s


def _shape(tree: DenseTree, clique: Clique) -> tuple[int, ...]:
    return tuple(tree.sizes[a] for a in clique)


def _broadcast(table: Array, clique: Clique, node: Clique, sizes: Sequence[int]) -> Array:
    """A table on `clique` (a subset of `node`, both ascending) with `node`'s axes: size 1 on
    the attributes it lacks (row-major order is kept, so a reshape does it)."""
    return table.reshape([sizes[a] if a in clique else 1 for a in node])


def _outside(node: Clique, clique: Clique) -> tuple[int, ...]:
    """The axes of `node`'s table over attributes outside `clique`."""
    return tuple(i for i, a in enumerate(node) if a not in clique)


def _tables(tree: DenseTree, flat: Array, cliques: Sequence[Clique]) -> list[Array]:
    """The row-major tables of `cliques` concatenated in `flat`."""
    sizes = [math.prod(_shape(tree, c)) for c in cliques]
    starts = np.cumsum([0, *sizes])
    return [flat[starts[i] : starts[i + 1]].reshape(_shape(tree, c)) for i, c in enumerate(cliques)]


def potential_counts(tree: DenseTree, theta: Array, total: Array) -> list[Array]:
    """The model's counts on every potential clique (total times its marginal), one table each,
    for log-potentials `theta` (flat, in `tree.potentials` order)."""
    sizes, nodes = tree.sizes, tree.nodes
    log_phi = [jnp.zeros(_shape(tree, node), theta.dtype) for node in nodes]
    for table, clique, home in zip(
        _tables(tree, theta, tree.potentials), tree.potentials, tree.home, strict=True
    ):
        log_phi[home] = log_phi[home] + _broadcast(table, clique, nodes[home], sizes)
    received: list[dict[int, Array]] = [{} for _ in nodes]  # node -> sender -> log-message

    def send(source: int, target: int) -> None:
        # Shafer-Shenoy: the source's potential times everything it received from its other
        # neighbours, summed over its cells outside the separator
        terms = sum((m for s, m in received[source].items() if s != target), log_phi[source])
        separator = tuple(a for a in nodes[source] if a in nodes[target])
        message = logsumexp(terms, axis=_outside(nodes[source], separator))
        received[target][source] = _broadcast(message, separator, nodes[target], sizes)

    for child, parent in tree.edges:
        send(child, parent)
    for child, parent in reversed(tree.edges):
        send(parent, child)
    beliefs = []
    for potential, messages in zip(log_phi, received, strict=True):
        log_belief = sum(messages.values(), potential)
        beliefs.append(jnp.exp(log_belief - logsumexp(log_belief)))
    return [
        total * jnp.sum(beliefs[home], axis=_outside(nodes[home], clique))
        for clique, home in zip(tree.potentials, tree.home, strict=True)
    ]


def measured_counts(tree: DenseTree, potential_tables: Sequence[Array]) -> Array:
    """(measured,) counts on every measured cell, summed from its potential clique's table."""
    return jnp.concatenate(
        [
            jnp.sum(potential_tables[p], axis=_outside(tree.potentials[p], clique)).reshape(-1)
            for clique, p in zip(tree.measured, tree.route, strict=True)
        ]
    )


def _gradient(tree: DenseTree, residual: Array) -> Array:
    """(potentials,) the gradient in the potentials' marginals: each measured cell's residual
    added to every cell of its potential that sums into it."""
    parts = [jnp.zeros(_shape(tree, c), residual.dtype) for c in tree.potentials]
    for table, clique, p in zip(
        _tables(tree, residual, tree.measured), tree.measured, tree.route, strict=True
    ):
        parts[p] = parts[p] + _broadcast(table, clique, tree.potentials[p], tree.sizes)
    return jnp.concatenate([part.reshape(-1) for part in parts])


def _mirror_descent(
    tree: DenseTree,
    theta: Array,
    noisy: Array,
    precision: Array,
    total: Array,
    alpha: Array,
    max_blocks: Array,
    tol: Array,
    floor: Array,
) -> tuple[Array, Array, Array]:
    def counts_of(theta):
        return measured_counts(tree, potential_counts(tree, theta, total))

    def gradient_of(residual):
        return _gradient(tree, residual)

    return descend(counts_of, gradient_of, theta, noisy, precision, alpha, max_blocks, tol, floor)


# Compiled mirror descent, one per tree (by XLA:CPU's quicker code generator: `jaxdp._jit`), kept
# for the trees of a few AIM runs (a run fits 10-25 trees; a long-lived process must not keep
# every program it ever compiled)
_mirror_descent_program = fast_compiled(_mirror_descent, static_argnums=0)
_programs = Compiler("jaxdp-dense-fit", capacity=64)


def fit(
    tree: DenseTree,
    theta: np.ndarray,
    noisy: np.ndarray,
    precision: np.ndarray,
    total: float,
    alpha: float,
    max_blocks: int,
    tol: float,
    floor: float,
) -> tuple[Array, Array, Array]:
    """`_junction.fit`'s mirror descent by the dense program of `tree` (theta, noisy and
    precision unpadded, in `tree.potentials` and `tree.measured` order)."""
    arguments = (
        theta,
        noisy,
        precision,
        np.float32(total),
        np.float32(alpha),
        np.int32(max_blocks),
        np.float32(tol),
        np.float32(floor),
    )
    compiled = _programs.program(tree, lambda: _mirror_descent_program.lower(tree, *arguments))
    return compiled(*arguments)
