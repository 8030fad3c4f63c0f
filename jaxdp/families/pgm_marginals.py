"""A fitted graphical model's exact marginals, and the model conditioned on evidence (`conditioned`).

Marginals of the fitted model (`ModelMarginals`) are exact and computed on the host with NumPy:
the junction tree is calibrated by log-space sum-product over the model's potentials, and the
model is Markov with respect to that tree, so p(x) = prod_C mu_C / prod_S mu_S over the tree's
cliques C and separators S. A marginal inside one clique is a sum of that clique's belief; any
other marginal is one `einsum` over the beliefs of the smallest subtree covering it, each non-root
clique entering as the conditional mu_C / mu_{C ∩ parent}. Nothing is compiled per model or per
queried marginal (the peers' per-candidate XLA compile is what makes their AIM slow).

Post-processing of noisy measurements: nothing here sees private data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxdp.families.pgm import (
    Clique,
    Measurement,
    Model,
    _aligned,
    _noise_loss,
    mbi_domain,
    merge_repeats,
    require_mbi,
)


def residual_ratio(marginals: ModelMarginals, measurements: Sequence[Measurement]) -> float:
    """The fit's loss, sum over measured cells of (model count - noisy count)^2 / (2 sigma^2),
    over its expectation at the true counts (half the measured cells: each cell's noise has
    variance sigma^2). Below 1 the model follows the noise closer than the truth would."""
    merged = merge_repeats(measurements)
    loss = sum(
        0.5 * float(np.sum((marginals.marginal(m.clique) * marginals.total - m.noisy) ** 2 / m.variances()))
        for m in merged
    )
    return loss / _noise_loss(merged)


# Models over a domain of at most this many cells keep their whole joint distribution (float64):
# every marginal is then summed from it (`_summed_to`), cheaper than inference over the tree
# (binary16: 65,536 cells).
JOINT_MAX_CELLS = 2**20


class ModelMarginals:
    """Exact marginals of a fitted model, from its junction-tree beliefs (host NumPy).

    Args:
        model: a `Model` from `estimate`.
    """

    def __init__(self, model: Model):
        import networkx as nx  # a dependency of mbi

        mbi = require_mbi()
        self.total = float(model.total)
        tree, _ = mbi.junction_tree.make_junction_tree(mbi_domain(model.sizes), model.cliques)
        self._tree = tree
        potentials = {
            c: np.asarray(p, np.float64) for c, p in zip(model.cliques, model.potentials, strict=True)
        }
        self._beliefs = calibrate(tree, potentials, dict(enumerate(model.sizes)))
        self._conditionals: dict[tuple[Clique, Clique], np.ndarray] = {}
        # each component rooted at its smallest node: parents and depths for covering subtrees
        self._parent: dict[Clique, Clique | None] = {}
        self._depth: dict[Clique, int] = {}
        for component in nx.connected_components(tree):
            root = min(component)
            self._parent[root], self._depth[root] = None, 0
            for parent, child in nx.bfs_edges(tree.subgraph(component), root):
                self._parent[child], self._depth[child] = parent, self._depth[parent] + 1
        self._smallest = {
            a: min((c for c in self._beliefs if a in c), key=lambda c: self._beliefs[c].size)
            for a in range(len(model.sizes))
        }
        self._below: dict[Clique, frozenset[int]] = {}  # the attributes of each node's subtree
        for node in sorted(self._parent, key=lambda n: -self._depth[n]):
            self._below[node] = self._below.get(node, frozenset()) | frozenset(node)
            parent = self._parent[node]
            if parent is not None:
                self._below[parent] = self._below.get(parent, frozenset()) | self._below[node]
        self._messages: dict[tuple[Clique, frozenset[int]], tuple[np.ndarray, list[int]]] = {}
        self._marginals: dict[Clique, np.ndarray] = {}  # read-only: AIM asks each model twice
        self._joint = None
        if math.prod(model.sizes) <= JOINT_MAX_CELLS:
            everything = set(range(len(model.sizes)))
            self._joint = np.einsum(
                *(
                    x
                    for top, children in self._covering_trees(tuple(everything))
                    for x in self._collect(top, None, children, everything)
                ),
                sorted(everything),
            )

    @property
    def cliques(self) -> list[Clique]:
        return list(self._beliefs)

    def _conditional(self, child: Clique, parent: Clique) -> np.ndarray:
        key = (child, parent)
        if key not in self._conditionals:
            belief = self._beliefs[child]
            drop = tuple(i for i, a in enumerate(child) if a not in parent)
            separator = belief.sum(axis=drop, keepdims=True)
            self._conditionals[key] = np.divide(
                belief, separator, out=np.zeros_like(belief), where=separator > 0
            )
        return self._conditionals[key]

    def _covering_trees(self, clique: Clique) -> list[tuple[Clique, dict[Clique, list[Clique]]]]:
        """For each tree of the forest that `clique` touches, the smallest subtree holding the
        smallest node of each of its attributes: (its top node, node -> children within)."""
        tops: dict[Clique, set[Clique]] = {}
        for node in {self._smallest[a] for a in clique}:  # grouped by their component's root
            top = node
            while self._parent[top] is not None:
                top = self._parent[top]
            tops.setdefault(top, set()).add(node)
        trees = []
        for members in tops.values():
            nodes, frontier = set(members), set(members)
            while len(frontier) > 1:  # climb the deepest node until all paths meet
                deepest = max(frontier, key=lambda n: self._depth[n])
                frontier.remove(deepest)
                frontier.add(self._parent[deepest])
                nodes.add(self._parent[deepest])
            (top,) = frontier
            children: dict[Clique, list[Clique]] = {n: [] for n in nodes}
            for n in sorted(nodes):
                if n != top:
                    children[self._parent[n]].append(n)
            trees.append((top, children))
        return trees

    def marginal(self, clique: Clique) -> np.ndarray:
        """(prod of sizes,) float64 probabilities of `clique` (ascending attributes), row-major;
        read-only (computed once per model)."""
        clique = tuple(clique)
        if clique not in self._marginals:
            table = self._computed_marginal(clique).reshape(-1)
            table.flags.writeable = False
            self._marginals[clique] = table
        return self._marginals[clique]

    def _computed_marginal(self, clique: Clique) -> np.ndarray:
        if self._joint is not None:
            return _summed_to(self._joint, tuple(range(self._joint.ndim)), clique)
        home = [c for c in self._beliefs if set(clique) <= set(c)]
        if home:
            c = min(home, key=lambda c: self._beliefs[c].size)
            return _summed_to(self._beliefs[c], c, clique)
        wanted = set(clique)
        operands: list[Any] = []
        for top, children in self._covering_trees(clique):
            operands += self._collect(top, None, children, wanted)
        return np.einsum(*operands, list(clique))

    def _collect(
        self, node: Clique, parent: Clique | None, children: dict[Clique, list[Clique]], wanted: set[int]
    ) -> tuple[np.ndarray, list[int]]:
        """Sum-product over the covering subtree below `node`: the table over the wanted
        attributes found there and the separator with `parent`, summing every other attribute
        out as early as possible (the top node enters as its belief, the others as their
        conditional given the separator with their parent). Below the top, a table depends only
        on the node and the wanted attributes of its subtree: it is computed once per model."""
        key = (node, frozenset(wanted & self._below[node]))
        if parent is not None and key in self._messages:
            return self._messages[key]
        table = self._beliefs[node] if parent is None else self._conditional(node, parent)
        operands: list[Any] = [table, list(node)]
        carried: list[int] = []
        for child in children[node]:
            message, attributes = self._collect(child, node, children, wanted)
            operands += [message, attributes]
            carried += [a for a in attributes if a not in node and a not in carried]
        keep = [a for a in node if a in wanted or (parent is not None and a in parent)] + carried
        result = np.einsum(*operands, keep, optimize=len(operands) > 4), keep
        if parent is not None:
            self._messages[key] = result
        return result

    def counts(self, cliques: Sequence[Clique]) -> np.ndarray:
        """Concatenated marginals of `cliques` scaled to the model's total (counts)."""
        if not cliques:
            return np.zeros(0)
        return self.total * np.concatenate([self.marginal(c) for c in cliques])

    def sampling_plan(self) -> list[tuple[int, Clique, np.ndarray]]:
        """Ancestral-sampling order: (attribute, parents, conditional table of shape
        (prod of parent sizes, size of attribute)). Parents precede their children."""
        import networkx as nx

        plan: list[tuple[int, Clique, np.ndarray]] = []
        done: set[int] = set()
        for component in nx.connected_components(self._tree):
            root = min(component)
            order = [root] + [child for _, child in nx.bfs_edges(self._tree.subgraph(component), root)]
            for node in order:
                for a in node:
                    if a in done:
                        continue
                    parents = tuple(b for b in node if b in done)
                    drop = tuple(i for i, b in enumerate(node) if b not in parents and b != a)
                    joint = self._beliefs[node].sum(axis=drop)  # axes: node order restricted
                    kept = [b for b in node if b in parents or b == a]
                    joint = np.moveaxis(joint, kept.index(a), -1).reshape(-1, joint.shape[kept.index(a)])
                    plan.append((a, parents, joint))
                    done.add(a)
        return plan


def _summed_to(table: np.ndarray, attributes: Clique, keep: Clique) -> np.ndarray:
    """`table` (axes over `attributes`) with every attribute outside `keep` summed out, one axis
    at a time and the largest first: numpy sums several strided axes at once far slower (the 20
    3-way marginals of ADULT-6's 363k-cell joint in 11 ms instead of 85 ms)."""
    axes = list(attributes)
    for a in sorted((a for a in axes if a not in keep), key=lambda a: -table.shape[axes.index(a)]):
        table = table.sum(axis=axes.index(a))
        axes.remove(a)
    return table


def calibrate(
    tree: Any, log_potentials: dict[Clique, np.ndarray], sizes: dict[int, int]
) -> dict[Clique, np.ndarray]:
    """Normalised beliefs of every junction-tree node, by log-space sum-product (host NumPy).

    Args:
        tree: the junction tree (networkx graph over cliques, possibly a forest).
        log_potentials: log-potential tables, each over a clique contained in some tree node,
            axes in the clique's attribute order.
        sizes: attribute -> number of categories.

    Returns:
        node -> probability table over the node's attributes (axes in node order), summing to 1.
    """
    beliefs = {}
    for node, table in _log_beliefs(tree, log_potentials, sizes).items():
        table = np.exp(table - _logsumexp(table, tuple(range(table.ndim))))
        beliefs[node] = table / table.sum()
    return beliefs


def log_partition(tree: Any, log_potentials: dict[Clique, np.ndarray], sizes: dict[int, int]) -> float:
    """log Z, the log of the sum over the whole domain of exp(sum of the log-potentials)."""
    import networkx as nx  # a dependency of mbi

    log_beliefs = _log_beliefs(tree, log_potentials, sizes)
    roots = [tuple(min(component)) for component in nx.connected_components(tree)]
    total = sum(float(_logsumexp(log_beliefs[r], tuple(range(log_beliefs[r].ndim)))) for r in roots)
    covered = {a for node in tree.nodes for a in node}
    return total + sum(math.log(sizes[a]) for a in sizes if a not in covered)


def _log_beliefs(
    tree: Any, log_potentials: dict[Clique, np.ndarray], sizes: dict[int, int]
) -> dict[Clique, np.ndarray]:
    """Every node's unnormalised log-belief (two sum-product passes; each sums to log Z over its
    component)."""
    import networkx as nx  # a dependency of mbi

    log_phi = {node: np.zeros([sizes[a] for a in node]) for node in tree.nodes}
    for clique, table in log_potentials.items():
        home = min((n for n in tree.nodes if set(clique) <= set(n)), key=len)
        log_phi[home] = log_phi[home] + _aligned(table, clique, home)
    messages: dict[tuple[Clique, Clique], np.ndarray] = {}

    def send(source: Clique, target: Clique) -> None:
        table = log_phi[source]
        for other in tree.neighbors(source):
            if other != target:
                table = table + _aligned(messages[(other, source)], _shared(other, source), source)
        summed = tuple(i for i, a in enumerate(source) if a not in target)
        messages[(source, target)] = _logsumexp(table, summed)

    for component in nx.connected_components(tree):
        root = min(component)
        edges = list(nx.bfs_edges(tree, root))  # (parent, child), parents first
        for parent, child in reversed(edges):  # collect towards the root
            send(child, parent)
        for parent, child in edges:  # distribute from the root
            send(parent, child)
    log_beliefs = {}
    for node in tree.nodes:
        table = log_phi[node]
        for other in tree.neighbors(node):
            table = table + _aligned(messages[(other, node)], _shared(other, node), node)
        log_beliefs[tuple(node)] = table
    return log_beliefs


def conditioned(model: Model, weights: dict[int, np.ndarray]) -> tuple[Model, float]:
    """(the model's distribution given evidence, the evidence's probability under the model).

    Evidence weighs each value of some attributes (`weights`: attribute -> (size,) in [0, 1]; 0
    rules a value out, 1 keeps it whole, a fraction keeps that share of its mass); the
    conditional is p(x) times the product of the weights of x's values, normalised: the model
    with a potential log w_a on each weighed attribute (-inf where w_a is 0), which the junction
    tree of the model's cliques holds (a 1-way clique sits inside a clique of its attribute, or
    alone where none has it). Exact, whatever the model.

    Post-processing of the fitted model only.
    """
    mbi = require_mbi()
    sizes = dict(enumerate(model.sizes))

    def log_z(cliques, potentials) -> float:
        tree, _ = mbi.junction_tree.make_junction_tree(mbi_domain(model.sizes), cliques)
        return log_partition(
            tree, dict(zip(cliques, (np.asarray(p, np.float64) for p in potentials), strict=True)), sizes
        )

    with np.errstate(divide="ignore"):
        evidence = [np.log(np.asarray(weights[a], np.float64)) for a in sorted(weights)]
    cliques = (*model.cliques, *((a,) for a in sorted(weights)))
    potentials = (*model.potentials, *evidence)
    merged: dict[Clique, np.ndarray] = {}
    for clique, table in zip(cliques, potentials, strict=True):  # a repeated clique: one table
        merged[clique] = merged[clique] + table if clique in merged else np.asarray(table, np.float64)
    before, after = log_z(model.cliques, model.potentials), log_z(tuple(merged), tuple(merged.values()))
    probability = math.exp(after - before) if math.isfinite(after) else 0.0
    return Model(model.sizes, tuple(merged), tuple(merged.values()), model.total), probability


def _shared(source: Clique, target: Clique) -> Clique:
    """The separator's attributes, in `source` order (the axes of a message from source)."""
    return tuple(a for a in source if a in target)


def _logsumexp(table: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if not axes:
        return table
    peak = np.max(table, axis=axes, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):  # a slice of all -inf sums to log(0) = -inf
        return np.log(np.sum(np.exp(table - peak), axis=axes)) + np.squeeze(peak, axis=axes)
