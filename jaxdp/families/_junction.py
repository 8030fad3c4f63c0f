"""Mirror descent over a junction tree in one compiled program whatever the tree.

Private-PGM's estimator (McKenna, Sheldon & Miklau 2019, Algorithm 1) as mbi implements it
compiles one program per list of measured cliques: belief propagation is unrolled over the tree's
edges, every table keeping its own shape. AIM measures a new clique every round, so that is one
XLA compile per round. Here the tree is data instead of program structure:

- every junction-tree node's table is a range of one flat vector of cells;
- every directed edge's message is a range of one flat vector of messages;
- belief propagation is `sweeps` (the forest's diameter) parallel Shafer-Shenoy sweeps, each a
  gather and two segment reductions over (cell, neighbour) pairs: after d sweeps every message
  whose sending side has depth < d is exact, so after the diameter all are;
- the parameters are log-potentials on the maximal measured cliques (as in mbi), each added into
  the smallest tree node holding it; a measured clique's counts are summed from the smallest
  potential clique holding it.

Every kind of index array is padded to a power-of-two length of its own (`Layout`), with spare
slots that absorb the padding; so the program compiles once per layout, and a whole AIM run
reaches a few layouts however many rounds it runs.
A step's gathers and scatters cost 6-10 ns per padded entry on the 2-core CPU; a model with large
tables is fitted by its own tree's dense program instead (`_dense_junction`, which shares
`descend`).

The optimisation is mbi's `MirrorDescent` step for step (Armijo line search, step size
2 / (L total), blocks of 50 iterations, the same early stop), on the same loss
sum_M ||mu_M - y_M||^2 / (2 sigma_M^2), so it follows the same path to the same model (placing a
potential in another tree node that holds it does not change the distribution).

Everything here is post-processing of released measurements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._background import Compiler
from jaxdp.types import Array

Clique = tuple[int, ...]

# mbi's block length (iterations between early-stopping checks) and patience
BLOCK = 50
PATIENCE = 2

# The kinds of arrays of a program (see `TreeProgram`). Each is padded to a power of two of its
# own: padding every kind to one scale in fixed proportions wasted most of the work where a model's
# proportions differed (bnet9's potentials lie in few large nodes: the home pairs filled a fifth
# of their share, and the fit ran 1.7x slower). MIN_LENGTH: below it a program costs about the
# same to run, and one compile serves every small model.
KINDS = ("cells", "messages", "pairs", "home", "potentials", "route", "measured")
MIN_LENGTH = 2**11

# Once a kind is more than PREFETCH_FILL full, the layout with it doubled is compiled in the
# background (XLA compiles on another core while this one fits): a model grows round by round,
# so a run rarely waits for a compile after its first.
PREFETCH_FILL = 0.6


class Layout(NamedTuple):
    """The padded length of each kind of array (in `KINDS` order; a program compiles once per
    layout) and how many entries of each are real."""

    lengths: tuple[int, ...]
    used: tuple[int, ...]

    @classmethod
    def holding(cls, used: dict[str, int]) -> Layout:
        """The smallest layout whose arrays hold `used` entries of each kind plus a spare slot."""
        counts = tuple(used[kind] for kind in KINDS)
        return cls(tuple(max(MIN_LENGTH, 1 << n.bit_length()) for n in counts), counts)

    def length(self, kind: str) -> int:
        return self.lengths[KINDS.index(kind)]

    def grown(self) -> tuple[int, ...]:
        """The lengths with every kind past `PREFETCH_FILL` doubled (the layout a growing model
        reaches next)."""
        return tuple(
            2 * n if used + 1 > PREFETCH_FILL * n else n
            for n, used in zip(self.lengths, self.used, strict=True)
        )


class TreeProgram(NamedTuple):
    """Index arrays that run belief propagation and mirror descent on one junction tree. Each
    kind of array (`KINDS`) has its own padded length (`Layout`); the last slot of the cells,
    messages, potentials and measured cells is a spare: padding points there and it never feeds
    a real value.

    node_of_cell: (cells,) each cell's tree node. pair_cell, pair_in, pair_out: (pairs,) for each
    (cell of node s, neighbour t) the cell, the index of the message t -> s it reads at the cell's
    separator value and the index of the message s -> t it feeds. message_real: (messages,) True
    on real message entries. home_cell, home_potential: (home,) for each (potential cell, cell of
    the smallest node holding its clique) pair. route_potential, route_measured: (route,) for each
    (measured cell, cell of the smallest potential clique holding its clique) pair. sweeps:
    parallel sweeps that make every message exact (the forest's diameter).
    """

    node_of_cell: np.ndarray
    pair_cell: np.ndarray
    pair_in: np.ndarray
    pair_out: np.ndarray
    message_real: np.ndarray
    home_cell: np.ndarray
    home_potential: np.ndarray
    route_potential: np.ndarray
    route_measured: np.ndarray
    sweeps: int


def maximal(cliques: Sequence[Clique]) -> list[Clique]:
    """The cliques not inside another one (the model's potentials live on these)."""
    return [c for c in cliques if not any(set(c) < set(o) for o in cliques)]


def build_program(
    tree: Any, sizes: Sequence[int], potentials: Sequence[Clique], measured: Sequence[Clique]
) -> tuple[TreeProgram, Layout]:
    """The `TreeProgram` of a junction tree (networkx graph over ascending attribute tuples,
    possibly a forest) with log-potentials on the cliques `potentials` (each inside a tree node)
    fitted to measurements on `measured` (each inside a potential clique). Cliques have
    ascending attributes; their cells are row-major and concatenated in the order given.

    Returns:
        (the program, its layout).
    """
    import networkx as nx  # a dependency of mbi

    nodes = sorted(tree.nodes)
    cell_count = [math.prod(sizes[a] for a in node) for node in nodes]
    cell_start = np.cumsum([0, *cell_count])
    messages: dict[tuple[Clique, Clique], int] = {}
    n_messages = 0
    for s, t in sorted([*tree.edges, *((t, s) for s, t in tree.edges)]):
        messages[(s, t)] = n_messages
        n_messages += math.prod(sizes[a] for a in s if a in t)
    pair_cell, pair_in, pair_out = [], [], []
    for i, node in enumerate(nodes):
        local = np.arange(cell_count[i])
        for other in sorted(tree.neighbors(node)):
            separator = _project(node, tuple(a for a in node if a in other), sizes, local)
            pair_cell.append(cell_start[i] + local)
            pair_in.append(messages[(other, node)] + separator)
            pair_out.append(messages[(node, other)] + separator)
    home_cell, home_potential = _containment(nodes, potentials, sizes)
    route_potential, route_measured = _containment(potentials, measured, sizes)
    layout = Layout.holding(
        {
            "cells": int(cell_start[-1]),
            "messages": n_messages,
            "pairs": _total(pair_cell),
            "home": _total(home_cell),
            "potentials": sum(math.prod(sizes[a] for a in c) for c in potentials),
            "route": _total(route_measured),
            "measured": sum(math.prod(sizes[a] for a in c) for c in measured),
        }
    )
    cells, messages, pairs, home, potentials_length, route, measured_length = layout.lengths
    node_of_cell = np.full(cells, cells - 1, np.int32)
    node_of_cell[: cell_start[-1]] = np.repeat(np.arange(len(nodes)), cell_count)
    message_real = np.zeros(messages, bool)
    message_real[:n_messages] = True
    sweeps = max((nx.diameter(tree.subgraph(c)) for c in nx.connected_components(tree)), default=0)
    program = TreeProgram(
        node_of_cell=node_of_cell,
        pair_cell=_padded(pair_cell, pairs, cells - 1),
        pair_in=_padded(pair_in, pairs, messages - 1),
        pair_out=_padded(pair_out, pairs, messages - 1),
        message_real=message_real,
        home_cell=_padded(home_cell, home, cells - 1),
        home_potential=_padded(home_potential, home, potentials_length - 1),
        route_potential=_padded(route_potential, route, potentials_length - 1),
        route_measured=_padded(route_measured, route, measured_length - 1),
        sweeps=np.int32(sweeps),
    )
    return program, layout


def _containment(
    outer: Sequence[Clique], inner: Sequence[Clique], sizes: Sequence[int]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """For each clique of `inner`, pairs (cell of the smallest `outer` clique holding it, its
    cell there), both as indices into the concatenated cells of `outer` and of `inner`."""
    outer_cells = [math.prod(sizes[a] for a in c) for c in outer]
    outer_start = np.cumsum([0, *outer_cells])
    big, small = [], []
    inner_start = 0
    for clique in inner:
        i = smallest_holding(outer, clique, sizes)
        local = np.arange(outer_cells[i])
        big.append(outer_start[i] + local)
        small.append(inner_start + _project(outer[i], clique, sizes, local))
        inner_start += math.prod(sizes[a] for a in clique)
    return big, small


def smallest_holding(outer: Sequence[Clique], clique: Clique, sizes: Sequence[int]) -> int:
    """The index of the smallest of `outer` (in cells) holding `clique`, the first on ties: where
    a potential lives, where a measured clique is counted from, where a warm start's potential
    goes."""
    holding = [j for j, c in enumerate(outer) if set(clique) <= set(c)]
    return min(holding, key=lambda j: math.prod(sizes[a] for a in outer[j]))


def _total(parts: list[np.ndarray]) -> int:
    return sum(len(p) for p in parts)


def _project(node: Clique, clique: Clique, sizes: Sequence[int], local: np.ndarray) -> np.ndarray:
    """For each row-major cell of `node`, the row-major index of its value on `clique` (a subset
    of the node, ascending)."""
    coords = np.unravel_index(local, [sizes[a] for a in node])
    if not clique:
        return np.zeros_like(local)
    return np.ravel_multi_index([coords[node.index(a)] for a in clique], [sizes[a] for a in clique])


def _padded(parts: list[np.ndarray], length: int, spare: int) -> np.ndarray:
    """The concatenated index arrays, padded to `length` with the `spare` index."""
    out = np.full(length, spare, np.int32)
    if parts:
        flat = np.concatenate(parts)
        out[: len(flat)] = flat
    return out


def _segment_logsumexp(values: Array, segments: Array, length: int) -> Array:
    """log sum exp of `values` per segment (-inf for an empty segment)."""
    peak = jax.ops.segment_max(values, segments, num_segments=length, mode="promise_in_bounds")
    peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
    total = _segment_sum(jnp.exp(values - peak[segments]), segments, length)
    return jnp.log(total) + peak


def _potential_counts(program: TreeProgram, theta: Array, total: Array, sweeps: Array) -> Array:
    """(potentials,) the model's counts on every potential cell (total times its clique's
    marginal), for log-potentials `theta`."""
    cells, messages = program.node_of_cell.shape[0], program.message_real.shape[0]
    log_phi = _segment_sum(theta[program.home_potential], program.home_cell, cells)
    own = log_phi[program.pair_cell]

    def incoming(sent):
        return _segment_sum(sent[program.pair_in], program.pair_cell, cells)

    def sweep(_, sent):
        # Shafer-Shenoy: what node s sends to t is its potential times everything it received
        # from its other neighbours, summed over the cells outside the separator. The log-sum-exp
        # takes its stabiliser from the whole sum in every sweep: one taken from the potential
        # alone (fewer segment maxima) lets every term underflow where the potential and the
        # incoming messages peak at different cells, and the model fits nonsense.
        others = incoming(sent)[program.pair_cell] - sent[program.pair_in]
        values = _segment_logsumexp(own + others, program.pair_out, messages)
        return jnp.where(program.message_real, values, 0.0)

    sent = jax.lax.fori_loop(0, sweeps, sweep, jnp.zeros(messages, theta.dtype))
    log_belief = log_phi + incoming(sent)
    log_belief = (
        log_belief - _segment_logsumexp(log_belief, program.node_of_cell, cells)[program.node_of_cell]
    )
    belief = jnp.exp(log_belief)
    return total * _segment_sum(belief[program.home_cell], program.home_potential, theta.shape[0])


def _measured(program: TreeProgram, potential_counts: Array, measured: int) -> Array:
    """(measured,) counts on every measured cell, summed from its potential clique's counts."""
    return _segment_sum(potential_counts[program.route_potential], program.route_measured, measured)


def _segment_sum(values: Array, segments: Array, length: int) -> Array:
    return jax.ops.segment_sum(values, segments, num_segments=length, mode="promise_in_bounds")


class _State(NamedTuple):
    theta: Array
    counts: Array
    alpha: Array
    loss: Array


class _Carry(NamedTuple):
    """The descent's loop state: the iterate, iterations done (step 0 evaluates the start), the
    loss at the last block's end and the blocks in a row that stalled."""

    state: _State
    iteration: Array
    previous: Array
    stalls: Array


@jax.jit
def mirror_descent(
    program: TreeProgram,
    theta: Array,
    noisy: Array,
    precision: Array,
    total: Array,
    alpha: Array,
    max_blocks: Array,
    tol: Array,
    floor: Array,
) -> tuple[Array, Array, Array]:
    """`descend` over the padded index arrays of `program` (the tree as data; `sweeps` is a
    traced count). Padding is 0 in theta, noisy and precision (a 0 precision drops a cell from
    the loss)."""
    sweeps = jnp.asarray(program.sweeps, jnp.int32)

    def counts_of(theta):
        return _measured(program, _potential_counts(program, theta, total, sweeps), noisy.shape[0])

    def gradient_of(residual):
        return _segment_sum(residual[program.route_measured], program.route_potential, theta.shape[0])

    return descend(counts_of, gradient_of, theta, noisy, precision, alpha, max_blocks, tol, floor)


def descend(
    counts_of: Callable[[Array], Array],
    gradient_of: Callable[[Array], Array],
    theta: Array,
    noisy: Array,
    precision: Array,
    alpha: Array,
    max_blocks: Array,
    tol: Array,
    floor: Array,
) -> tuple[Array, Array, Array]:
    """mbi's `MirrorDescent` with Armijo line search, `BLOCK` iterations at a time (traced:
    call it inside a jitted function).

    Args:
        counts_of: (potentials,) log-potentials -> (measured,) the model's counts on every
            measured cell.
        gradient_of: (measured,) the loss's gradient in the measured counts -> (potentials,) its
            gradient in the potentials' marginals (mbi's dL, the mirror-descent direction).
        theta: starting log-potentials on the potential cells.
        noisy: the measurements; precision: 1 / sigma^2 of each measured cell.
        alpha: the first step size, 2 / (L total).
        max_blocks: blocks of `BLOCK` iterations at most; tol: stop once `PATIENCE` consecutive
            blocks each lowered the loss by at most tol * max(loss, 1) (-inf: never).
        floor: stop at the first iterate whose loss is at most this (-inf: never; the
            discrepancy stop of `pgm.estimate`).

    Returns:
        (log-potentials, final loss, blocks run).
    """

    def loss_of(counts):
        return 0.5 * jnp.sum(precision * (counts - noisy) ** 2)

    def step(carry: _Carry) -> _Carry:
        # Step 0 only evaluates the starting point, through the same `counts_of` as every step:
        # the program then holds one copy of belief propagation, not two (half the compile).
        state, iteration = carry.state, carry.iteration
        started = iteration > 0
        residual = precision * (state.counts - noisy)
        candidate = jnp.where(started, state.theta - state.alpha * gradient_of(residual), state.theta)
        counts = counts_of(candidate)
        new_loss = loss_of(counts)
        armijo = state.loss - new_loss >= 0.5 * state.alpha * jnp.dot(residual, state.counts - counts)
        accept = armijo | ~started
        state = _State(
            theta=jnp.where(accept, candidate, state.theta),
            counts=jnp.where(accept, counts, state.counts),
            alpha=jnp.where(started, jnp.where(armijo, 1.01, 0.5) * state.alpha, state.alpha),
            loss=jnp.where(accept, new_loss, state.loss),
        )
        block_end = started & (iteration % BLOCK == 0)
        stalled = carry.previous - state.loss <= tol * jnp.maximum(jnp.abs(state.loss), 1.0)
        return _Carry(
            state=state,
            iteration=iteration + 1,
            previous=jnp.where(block_end, state.loss, carry.previous),
            stalls=jnp.where(block_end, jnp.where(stalled, carry.stalls + 1, 0), carry.stalls),
        )

    def running(carry: _Carry) -> Array:
        within = (carry.iteration <= max_blocks * BLOCK) & (carry.stalls < PATIENCE)
        return within & (carry.state.loss > floor)

    infinity = jnp.asarray(jnp.inf, theta.dtype)
    start = _State(theta, jnp.zeros_like(noisy), alpha, infinity)
    end = jax.lax.while_loop(running, step, _Carry(start, jnp.int32(0), infinity, jnp.int32(0)))
    blocks = (end.iteration - 1) // BLOCK
    return end.state.theta, end.state.loss, blocks


# Compiled mirror descent, one per layout (compiled in the background: see `PREFETCH_FILL`)
_programs = Compiler("jaxdp-fit")


def fit(
    program: TreeProgram,
    layout: Layout,
    theta: np.ndarray,
    noisy: np.ndarray,
    precision: np.ndarray,
    total: float,
    alpha: float,
    max_blocks: int,
    tol: float,
    floor: float,
) -> tuple[Array, Array, Array]:
    """`mirror_descent` by the compiled program of the program's layout (see `mirror_descent`
    for the arguments; `layout` from `build_program`)."""
    compiled = _executable(layout.lengths)
    if layout.grown() != layout.lengths:
        prefetch(layout.grown())
    scalars = (np.float32(total), np.float32(alpha), np.int32(max_blocks), np.float32(tol), np.float32(floor))
    return compiled(program, theta, noisy, precision, *scalars)


def prefetch(lengths: tuple[int, ...] = (MIN_LENGTH,) * len(KINDS)) -> None:
    """Start compiling the program of a layout's `lengths` in the background (AIM's factory asks
    for the smallest, so round 0's fit finds it compiled while the records are being counted)."""
    _executable(lengths, wait=False)


def _executable(lengths: tuple[int, ...], *, wait: bool = True):
    return _programs.program(lengths, lambda: _lowered(lengths), wait=wait)


def _lowered(lengths: tuple[int, ...]) -> jax.stages.Lowered:
    def shaped(kind: str, dtype) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((lengths[KINDS.index(kind)],), dtype)

    program = TreeProgram(
        node_of_cell=shaped("cells", jnp.int32),
        pair_cell=shaped("pairs", jnp.int32),
        pair_in=shaped("pairs", jnp.int32),
        pair_out=shaped("pairs", jnp.int32),
        message_real=shaped("messages", jnp.bool_),
        home_cell=shaped("home", jnp.int32),
        home_potential=shaped("home", jnp.int32),
        route_potential=shaped("route", jnp.int32),
        route_measured=shaped("route", jnp.int32),
        sweeps=jax.ShapeDtypeStruct((), jnp.int32),
    )
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    arrays = (
        shaped("potentials", jnp.float32),
        shaped("measured", jnp.float32),
        shaped("measured", jnp.float32),
    )
    blocks = jax.ShapeDtypeStruct((), jnp.int32)
    return mirror_descent.lower(program, *arrays, scalar, scalar, blocks, scalar, scalar)
