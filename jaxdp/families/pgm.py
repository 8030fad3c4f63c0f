"""Graphical-model family (Private-PGM): estimation, exact marginals, model size and keyed
sampling. The only module that imports `mbi`, which builds the junction trees (triangulation,
model size, the loss's Lipschitz constant); the fitting is jaxdp's own (`_junction`,
`_dense_junction`).

Everything here is post-processing of noisy measurements: it never sees private data.

Attributes are named by their index in the categorical domain (0..d-1), so a clique is the same
tuple of ints in jaxdp's workloads and in mbi.

Marginals of the fitted model (`ModelMarginals`) are exact and computed on the host with NumPy:
the junction tree is calibrated by log-space sum-product over the model's potentials, and the
model is Markov with respect to that tree, so p(x) = prod_C mu_C / prod_S mu_S over the tree's
cliques C and separators S. A marginal inside one clique is a sum of that clique's belief; any
other marginal is one `einsum` over the beliefs of the smallest subtree covering it, each non-root
clique entering as the conditional mu_C / mu_{C ∩ parent}. Nothing is compiled per model or per
queried marginal (the peers' per-candidate XLA compile is what makes their AIM slow).

Compile economy. XLA compilation, not arithmetic, dominated AIM runs while mbi compiled one
mirror-descent program per distinct list of measured cliques. `estimate` runs mbi's algorithm in
one program whose shapes do not depend on the cliques (the tree travels as padded index arrays,
see `_junction`), and merges repeated measurements of one clique exactly (`merge_repeats`). Once
a model's tables are large, its fit runs faster by a program compiled for its own tree, with
dense tables in place of index arrays (`_dense_junction`), and takes it where the iterations saved
outweigh that compile. Sampling pads its tables and columns to power-of-two buckets
(`padded_length`), so it compiles once per bucket rather than once per attribute.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._background import Compiler
from jaxdp.families import _dense_junction, _junction
from jaxdp.families._sampling import balanced, padded_length, systematic, weyl_step
from jaxdp.types import Array, Key

Clique = tuple[int, ...]


def require_mbi() -> Any:
    """Import `mbi` (Private-PGM) or explain how to install it."""
    try:
        with warnings.catch_warnings():
            # mbi warns at import about float32 mode (harmless below 100k records; counts here are
            # float32 throughout) and about the compilation cache; neither is actionable here.
            warnings.simplefilter("ignore")
            import mbi
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError('AIM needs Private-PGM (the `mbi` package): pip install "mbi>=2.0"') from err
    return mbi


class Measurement(NamedTuple):
    """A released noisy marginal: `noisy` (prod of clique sizes,) counts, row-major over the
    ascending `clique`, with Gaussian noise of standard deviation `sigma` (counts): one scale for
    every cell, or one per cell (a compressed domain's merged cell sums several draws)."""

    clique: Clique
    noisy: np.ndarray
    sigma: float | np.ndarray

    def variances(self) -> np.ndarray:
        """(cells,) float64 each cell's noise variance."""
        return np.broadcast_to(np.asarray(self.sigma, np.float64) ** 2, np.shape(self.noisy))

    def pooled_scale(self) -> float:
        """The one noise scale whose variance, summed over the cells, is theirs (the scale of
        the measurement's total)."""
        return float(self.sigma) if np.ndim(self.sigma) == 0 else float(np.sqrt(self.variances().mean()))

    def smallest_scale(self) -> float:
        return float(self.sigma) if np.ndim(self.sigma) == 0 else float(np.min(self.sigma))


def mbi_domain(sizes: Sequence[int]):
    mbi = require_mbi()
    return mbi.Domain(list(range(len(sizes))), [int(s) for s in sizes])


def model_size_mb(sizes: Sequence[int], cliques: Sequence[Clique]) -> float:
    """Megabytes of the junction tree implied by `cliques` (Private-PGM's JT-SIZE): 8 bytes per
    cell of the maximal cliques of the graph the cliques draw, triangulated as mbi triangulates
    it (`mbi.junction_tree.make_junction_tree`: no fill-in when the graph is a tree, else greedy
    elimination of the attribute whose neighbourhood has the fewest cells, ties to the lowest
    index). Computed here on bitmask adjacency (microseconds), once per graph: AIM's filter asks
    for hundreds of candidates a round, most of which draw a graph asked for before.
    """
    edges = frozenset(pair for c in cliques for pair in itertools.combinations(sorted(c), 2))
    return _graph_size_mb(tuple(int(s) for s in sizes), edges)


@functools.lru_cache(maxsize=2**16)
def _graph_size_mb(sizes: tuple[int, ...], edges: frozenset[tuple[int, int]]) -> float:
    d = len(sizes)
    neighbours = [0] * d
    for a, b in edges:
        neighbours[a] |= 1 << b
        neighbours[b] |= 1 << a
    cells = _cells_of_masks(sizes)
    if edges and len(edges) == d - 1 and _connected(neighbours):  # a tree: its edges are the cliques
        return sum(sizes[a] * sizes[b] for a, b in edges) * 8 / 2**20
    cliques, remaining = [], list(range(d))
    while remaining:
        a = min(remaining, key=lambda v: cells(neighbours[v] | 1 << v))  # first minimum wins
        remaining.remove(a)
        later = neighbours[a]
        cliques.append(later | 1 << a)
        for b in remaining:  # eliminate a: its neighbours become a clique
            if later >> b & 1:
                neighbours[b] = (neighbours[b] | later) & ~(1 << b) & ~(1 << a)
    maximal = {c for c in cliques if not any(c != o and c & o == c for o in cliques)}
    return sum(cells(c) for c in maximal) * 8 / 2**20


@functools.lru_cache(maxsize=64)
def _cells_of_masks(sizes: tuple[int, ...]):
    """mask -> product of the sizes of its attributes, by exact integer tables per byte."""
    tables = []
    for start in range(0, len(sizes), 8):
        chunk = sizes[start : start + 8]
        table = [1] * (1 << len(chunk))
        for mask in range(1, len(table)):
            low = (mask & -mask).bit_length() - 1
            table[mask] = table[mask & (mask - 1)] * chunk[low]
        tables.append(table)

    def cells(mask: int) -> int:
        product = 1
        for table in tables:
            product *= table[mask & 0xFF]
            mask >>= 8
        return product

    return cells


def _connected(neighbours: list[int]) -> bool:
    seen, frontier = 1, 1
    while frontier:
        reached = 0
        for a in range(len(neighbours)):
            if frontier >> a & 1:
                reached |= neighbours[a]
        frontier = reached & ~seen
        seen |= reached
    return seen == (1 << len(neighbours)) - 1


class Model(NamedTuple):
    """A fitted graphical model: p(x) proportional to exp(sum_c potentials[c][x_c]) over the
    measured `cliques` (ascending attributes; each table's axes in that order), with `total`
    records (the counts' scale)."""

    sizes: tuple[int, ...]
    cliques: tuple[Clique, ...]
    potentials: tuple[np.ndarray, ...]
    total: float


def estimate(
    sizes: Sequence[int],
    measurements: Sequence[Measurement],
    *,
    total: float | None,
    iters: int,
    warm_start: Model | None = None,
    tol: float | None = None,
    discrepancy: float | None = None,
) -> Model:
    """Fit a graphical model to the measurements by mirror descent (MLE under Gaussian noise).

    Private-PGM's estimator (mbi's `MirrorDescent`, step for step) run by one compiled program
    whatever the measured cliques (`_junction`): the junction tree is data, padded to a few
    sizes, so an AIM run compiles a few programs, not one per round. A model whose iterations
    over the padded arrays would take longer than compiling its own tree's dense program is
    fitted by that one instead (`_dense_junction.worth_compiling`).

    Args:
        sizes: categorical attribute sizes.
        measurements: the released noisy marginals (counts).
        total: the record count if it is public; None to estimate it from the measurements
            (minimum-variance unbiased combination of their sums).
        iters: mirror-descent iterations at most (rounded up to blocks of 50).
        warm_start: a previous model whose potentials start the optimisation.
        tol: stop before `iters` once two consecutive blocks of 50 iterations each lower the
            loss by at most this fraction of it; None runs all `iters`.
        discrepancy: stop at the first iterate whose loss is at most this fraction of the loss
            the true counts would have in expectation (`residual_ratio`); None never stops so.

    Returns:
        the fitted `Model` (post-processing of the measurements only).
    """
    mbi = require_mbi()
    sizes = tuple(int(s) for s in sizes)
    domain = mbi_domain(sizes)
    merged = merge_repeats(measurements)
    cliques = tuple(m.clique for m in merged)
    if total is None:
        # each measurement's sum estimates the total with the variance of its cells' sum
        pooled = [m.pooled_scale() for m in merged]
        total = mbi.estimation.minimum_variance_unbiased_total(_linear(mbi, merged, pooled))
    # the loss's curvature is set by its most precise cell (a safe bound where cells differ)
    steepest = [m.smallest_scale() for m in merged]
    lipschitz = (
        mbi.marginal_loss.calculate_l2_lipschitz_from_metadata(domain, _linear(mbi, merged, steepest))
        if merged
        else 1.0
    )
    tree, _ = mbi.junction_tree.make_junction_tree(domain, cliques)
    maximal = _junction.maximal(cliques)
    theta = _flat([t.reshape(-1) for t in _warm(warm_start, maximal, sizes)])
    noisy = _flat([m.noisy for m in merged])
    precision = _flat([1.0 / m.variances() for m in merged])
    options = (
        total,
        2.0 / (lipschitz * total),
        math.ceil(iters / _junction.BLOCK),
        -np.inf if tol is None else tol,
        -np.inf if discrepancy is None else discrepancy * _noise_loss(merged),
    )
    theta = _fit(tree, sizes, maximal, cliques, theta, noisy, precision, *options)
    theta_start = np.cumsum([0] + [math.prod(sizes[a] for a in c) for c in maximal])
    potentials = tuple(
        theta[theta_start[i] : theta_start[i + 1]].reshape([sizes[a] for a in c])
        for i, c in enumerate(maximal)
    )
    return Model(sizes, tuple(maximal), potentials, float(total))


def _flat(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The parts concatenated as one float32 vector (empty without parts: a model with no
    measurements is the uniform distribution)."""
    return np.concatenate([np.zeros(0, np.float32), *parts]).astype(np.float32)


def _fit(
    tree,
    sizes: tuple[int, ...],
    maximal: list[Clique],
    cliques: tuple[Clique, ...],
    theta: np.ndarray,
    noisy: np.ndarray,
    precision: np.ndarray,
    total: float,
    alpha: float,
    max_blocks: int,
    tol: float,
    floor: float,
) -> np.ndarray:
    """Fitted log-potentials (flat, in `maximal`'s order) by mirror descent from `theta`: by the
    tree's own dense program where its saved iterations outweigh compiling it, else by the one
    program for every tree (`_dense_junction`, `_junction`).

    The two programs round differently in float32, so the choice is a function of the fit's
    public inputs alone (the tree, its sizes, the iteration cap), never of what this process
    has compiled already: the same key then releases the same bytes after any other run."""
    program, layout = _junction.build_program(tree, sizes, maximal, cliques)
    dense = _dense_junction.dense_tree(tree, sizes, maximal, cliques)
    if _dense_junction.worth_compiling(dense, sum(layout.lengths), max_blocks):
        fitted, _, _ = _dense_junction.fit(
            dense, theta, noisy, precision, total, alpha, max_blocks, tol, floor
        )
        return np.asarray(fitted)
    padded = [np.zeros(layout.length(kind), np.float32) for kind in ("potentials", "measured", "measured")]
    for out, values in zip(padded, (theta, noisy, precision), strict=True):
        out[: values.size] = values
    fitted, _, _ = _junction.fit(program, layout, *padded, total, alpha, max_blocks, tol, floor)
    return np.asarray(fitted)[: theta.size]


def one_way_model(
    sizes: Sequence[int], measurements: Sequence[Measurement], *, total: float | None, tol: float | None
) -> Model | None:
    """The model of the 1-way measurements alone (every measured attribute independent of the
    rest), or None where none was measured: the start `refit` descends from."""
    ones = [m for m in measurements if len(m.clique) == 1]
    return estimate(sizes, ones, total=total, iters=1000, tol=tol) if ones else None


def refit(
    sizes: Sequence[int],
    measurements: Sequence[Measurement],
    *,
    total: float | None,
    iters: int,
    tol: float | None,
    discrepancy: float,
) -> Model:
    """The measurements fitted afresh from `one_way_model` (its fit stopped by `tol`) and
    stopped at `discrepancy` (`estimate`): `GraphicalModel`'s refit."""
    start = one_way_model(sizes, measurements, total=total, tol=tol)
    return estimate(sizes, measurements, total=total, iters=iters, warm_start=start, discrepancy=discrepancy)


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


def _noise_loss(merged: Sequence[Measurement]) -> float:
    """The loss's expectation at the true counts: half the measured cells."""
    return 0.5 * sum(np.size(m.noisy) for m in merged)


def _linear(mbi, measurements: Sequence[Measurement], scales: Sequence[float]) -> list:
    """The measurements as mbi's identity `LinearMeasurement`s with these noise scales."""
    return [
        mbi.LinearMeasurement(np.asarray(m.noisy, np.float32), m.clique, scale)
        for m, scale in zip(measurements, scales, strict=True)
    ]


def prefetch() -> None:
    """Start compiling the smallest model's fitting program in the background."""
    _junction.prefetch()


def _warm(model: Model | None, cliques: Sequence[Clique], sizes: Sequence[int]) -> list[np.ndarray]:
    """Log-potential tables on `cliques` that start a fit from `model` (zeros without one): each
    of the model's potentials is added into the smallest of `cliques` holding it. The new cliques
    hold every old one (measurements only accumulate), so the distribution is the model's."""
    tables = [np.zeros([sizes[a] for a in c], np.float32) for c in cliques]
    for old, potential in zip(model.cliques, model.potentials, strict=True) if model else ():
        i = _junction.smallest_holding(cliques, old, sizes)
        tables[i] = tables[i] + _aligned(potential, old, cliques[i])
    return tables


def merge_repeats(measurements: Sequence[Measurement]) -> list[Measurement]:
    """One measurement per distinct clique, sorted by clique.

    Repeated measurements y_1..y_k of one clique (noise sigma_i) become their inverse-variance
    average with sigma^-2 = sum_i sigma_i^-2. mbi's loss sum_i ||mu - y_i||^2 / (2 sigma_i^2)
    equals ||mu - y_bar||^2 / (2 sigma^2) plus a constant, so the fitted model, the gradient's
    Lipschitz constant and the minimum-variance total are unchanged; only the loss value moves by
    that constant. The sort makes the clique list (which fixes mbi's compiled program) depend
    only on the set of cliques measured.
    """
    precision: dict[Clique, np.ndarray] = {}
    weighted: dict[Clique, np.ndarray] = {}
    for m in measurements:
        clique, weight = tuple(m.clique), 1.0 / m.variances()
        term = weight * np.asarray(m.noisy, np.float64)
        weighted[clique] = weighted[clique] + term if clique in weighted else term
        precision[clique] = precision[clique] + weight if clique in precision else weight
    return [Measurement(c, weighted[c] / precision[c], _scales(precision[c])) for c in sorted(precision)]


def _scales(precision: np.ndarray) -> float | np.ndarray:
    """The noise scale of each cell of a given precision: one float when all cells share it."""
    sigma = np.sqrt(1.0 / precision)
    return float(sigma[0]) if sigma.size and np.all(sigma == sigma[0]) else sigma


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


def _aligned(table: np.ndarray, attributes: Clique, target: Clique) -> np.ndarray:
    """`table` over `attributes` (a subset of target) with axes permuted and expanded so it
    broadcasts against a table over `target`."""
    order = sorted(range(len(attributes)), key=lambda i: target.index(attributes[i]))
    shape = [table.shape[attributes.index(a)] if a in attributes else 1 for a in target]
    return np.transpose(table, order).reshape(shape)


def _logsumexp(table: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if not axes:
        return table
    peak = np.max(table, axis=axes, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):  # a slice of all -inf sums to log(0) = -inf
        return np.log(np.sum(np.exp(table - peak), axis=axes)) + np.squeeze(peak, axis=axes)


def sample(
    key: Key,
    plan: list[tuple[int, Clique, np.ndarray]],
    sizes: Sequence[int],
    rows: int,
    tracked: Sequence[Clique] = (),
) -> Array:
    """(rows, d) int32 records drawn from the model by ancestral, stratified sampling.

    Each attribute is drawn from its conditional given its parents (earlier attributes of its
    junction-tree clique) by `systematic`: within each group of records sharing the parents'
    values, the group's counts are its expected counts rounded up or down (Private-PGM's
    low-variance rounding), and the categories are spread evenly over the records sorted by the
    attributes drawn before (the strata), so the records' counts on marginals outside the tree's
    cliques track the model's conditional independences too. Drawn independently, records would
    leave up to two records per cell off and their non-clique marginals noisy, and that shows in
    the workload error (bench/HISTORY.md, "AIM's records against its model").

    `tracked` names the marginals whose records' counts should follow the model (the workload's,
    over the model's domain). An attribute in one of them with attributes drawn before it that
    are not all its parents (a marginal outside its clique, which sums over many parent groups)
    is drawn by `balanced` instead, keeping its group's counts and those of every such key
    (the marginal's other attributes) near their expectations at once (bench/HISTORY.md,
    "Releases that keep what was measured"). Keys of more than 2^22 cells x categories, and
    those past 2^26 record cells in all (the largest keys kept), are left to the strata.

    Tables are padded to powers of two above their parent groups (plus a spare group) and
    categories, and the rows to a power of two, so the sampler compiles once per bucket, not per
    attribute or row count; while the largest padded table is small, every attribute shares its
    shape, and so do the balanced columns (one compile each per release) until visiting every
    record at the shared shape costs more than compiling each its own (`_SHARED_BALANCED_WORK`);
    the balanced programs compile in the background as the release starts. Padded categories
    have probability 0 and are never chosen; padded rows form a group of their own (the spare
    last one) and are dropped.
    """
    padded_rows = padded_length(rows)
    shared = (
        padded_length(max(joint.shape[0] for _, _, joint in plan) + 1),
        padded_length(max(joint.shape[1] for _, _, joint in plan)),
    )
    owns = [(padded_length(joint.shape[0] + 1), padded_length(joint.shape[1])) for _, _, joint in plan]
    shapes = [shared if math.prod(shared) <= _SHARED_TABLE_CELLS else own for own in owns]
    keys = [
        _keys(a, parents, [b for b, _, _ in plan[:i]], tracked, sizes, shapes[i][1], rows)
        for i, (a, parents, _) in enumerate(plan)
    ]
    # the balanced columns share one shape too (keys and lag cells padded to the most of any)
    # while a visit of every record at that shape stays cheap; past it each has its own
    shared_keys = (
        padded_length(max(len(k) for k in keys)),
        padded_length(max(sum(math.prod(sizes[b] for b in key) for key in k) for k in keys) + 1),
    )
    if padded_rows * shared_keys[0] * shared[1] > _SHARED_BALANCED_WORK:
        shapes = [own if k else shape for own, shape, k in zip(owns, shapes, keys, strict=True)]
    # each balanced column's padded keys and lag cells; their programs start compiling now, so
    # each compiles while the columns before it are drawn
    balanced_shapes = [
        (
            shared_keys
            if shape == shared
            else (padded_length(len(k)), padded_length(sum(math.prod(sizes[b] for b in c) for c in k) + 1))
        )
        if k
        else None
        for shape, k in zip(shapes, keys, strict=True)
    ]
    signatures = [
        None if keyed is None else (str(key.dtype), shape, padded_rows, *keyed)
        for shape, keyed in zip(shapes, balanced_shapes, strict=True)
    ]
    for signature in signatures:
        if signature is not None:
            _balanced_program(key, signature, wait=False)
    columns: dict[int, np.ndarray] = {}
    strata = np.zeros((len(sizes), padded_rows), np.int32)  # the columns drawn so far, in order
    for i, (a, parents, joint) in enumerate(plan):
        n_groups, size = joint.shape
        shape = shapes[i]
        table = np.zeros(shape, np.float32)
        table[:n_groups, :size] = joint
        group = np.full(padded_rows, shape[0] - 1, np.int32)
        group[:rows] = _cell_index(parents, columns, sizes, rows)
        column = (jax.random.fold_in(key, a), jnp.asarray(table), jnp.asarray(group), jnp.int32(size))
        if keys[i]:
            width, lag_rows = balanced_shapes[i]
            cells = _key_cells(keys[i], columns, sizes, rows, padded_rows, width)
            lags = jnp.zeros((lag_rows, shape[1]), jnp.float32)
            program = _balanced_program(key, signatures[i])
            choice = program(
                *column, jnp.asarray(cells), _key_weights(keys[i], sizes, width), lags, jnp.int32(rows)
            )
        else:
            choice = systematic(*column, jnp.asarray(strata), weyl_step(a))
        columns[a] = np.asarray(choice)[:rows]
        strata[i, :rows] = columns[a]
    return jnp.asarray(np.stack([columns[a] for a in range(len(sizes))], axis=1), jnp.int32)


# 16 MB of float32 lags per key (a lane's), 256 MB of int32 record cells in all: keys past
# either are left to the strata
_KEY_CELLS = 2**22
_KEY_COLUMNS = 2**26


_balanced_programs = Compiler("jaxdp-release")


def _balanced_program(key: Key, signature: tuple, *, wait: bool = True):
    """`balanced` compiled for one column's (key type, table shape, rows, keys, lag cells)."""
    _, (n_groups, width), rows, n_keys, lag_rows = signature

    def lower():
        def shaped(*shape, dtype=jnp.int32):
            return jax.ShapeDtypeStruct(shape, dtype)

        return balanced.lower(
            key,
            shaped(n_groups, width, dtype=jnp.float32),
            shaped(rows),
            shaped(),
            shaped(rows, n_keys),
            shaped(n_keys, dtype=jnp.float32),
            shaped(lag_rows, width, dtype=jnp.float32),
            shaped(),
        )

    return _balanced_programs.program(signature, lower, wait=wait)


def _keys(a: int, parents: Clique, drawn: list[int], tracked, sizes, width: int, rows: int) -> list[Clique]:
    """The keys `a` is balanced over: each tracked marginal holding `a` whose other attributes
    are drawn and are not exactly the parents of `a` contributes them (once; each of at most _KEY_CELLS
    lags, and at most _KEY_COLUMNS record cells in all)."""
    keys = set()
    for clique in tracked:
        rest = tuple(b for b in clique if b != a)
        # a key equal to the parents is the group itself; any other sums over groups or splits them
        summed = len(rest) < len(clique) and set(rest) <= set(drawn) and set(rest) != set(parents)
        if summed and math.prod(sizes[b] for b in rest) * width <= _KEY_CELLS:
            keys.add(rest)
    # the most cells first (where counts are sparsest), as many as _KEY_COLUMNS allows
    most = max(0, _KEY_COLUMNS // padded_length(rows))
    return sorted(keys, key=lambda k: (-math.prod(sizes[b] for b in k), k))[:most]


def _key_weights(keys: list[Clique], sizes, width: int) -> Array:
    """(width,) float32 each key's weight in a balanced column's score: the square root of its
    cells over the most any key has (0 for the padding keys). A key's lags per cell shrink as its
    cells grow (the same records spread over more of them), so with equal weights the coarse
    keys decide and the sparse ones, where records lose most against the model, go unbalanced.
    AIM, epsilon 1, against equal weights: records' mean L1 on 6-attribute ADULT 0.1332 against
    0.1342 (seeds 0-4; the model's own 0.1336), records / model on 14 attributes 1.024 against
    1.027 (seeds 0-1), raw Adult's mixed-marginal error unchanged (0.0063, 0.0056, seeds 0-1).
    Weights of the cells themselves did as well on ADULT-6 but lost 8% on raw Adult, whose
    metric rests on the coarse marginals."""
    cells = np.array([math.prod(sizes[b] for b in key) for key in keys], np.float64)
    weights = np.zeros(width, np.float32)
    weights[: len(keys)] = np.sqrt(cells / cells.max())
    return jnp.asarray(weights)


def _cell_index(attributes: Clique, columns, sizes, rows: int) -> np.ndarray:
    """(rows,) int64 each record's flat cell over `attributes` (row-major, the first slowest)."""
    index = np.zeros(rows, np.int64)
    for b in attributes:
        index = index * sizes[b] + columns[b]
    return index


def _key_cells(keys, columns, sizes, rows: int, padded_rows: int, width: int) -> np.ndarray:
    """(padded_rows, width) int32 each record's cell of each key, the keys' cells laid out one
    after another; padding records and the `width - len(keys)` padding keys get the cell after
    them all."""
    cells = np.zeros((padded_rows, width), np.int64)
    n_cells = 0
    for j, k in enumerate(keys):
        cells[:rows, j] = n_cells + _cell_index(k, columns, sizes, rows)
        n_cells += math.prod(sizes[b] for b in k)
    cells[rows:] = n_cells
    cells[:, len(keys) :] = n_cells
    return cells.astype(np.int32)


# 16 MB of float32: above it, padding every table to the largest would cost more than compiling
_SHARED_TABLE_CELLS = 2**22
# record x key x category lags gathered per balanced column: above it, a balanced column padded
# to the widest one costs more than a compile of its own (bnet9's 512 categories and 32 keys
# padded: 5 s a column on the 2-core CPU, where most need 33 categories and 8 keys)
_SHARED_BALANCED_WORK = 2**26
