"""Graphical-model family (Private-PGM, via the `mbi` package): estimation, exact marginals,
model size and keyed sampling. The only module that imports `mbi`.

Everything here is post-processing of noisy measurements: it never sees private data.

Attributes are named by their index in the categorical domain (0..d-1), so a clique is the same
tuple of ints in jaxdp's workloads and in mbi.

Marginals of the fitted model (`ModelMarginals`) are exact and computed on the host with NumPy:
the model is Markov with respect to its junction tree, so p(x) = prod_C mu_C / prod_S mu_S over
the tree's cliques C and separators S. A marginal inside one clique is a sum of that clique's
belief; any other marginal is one `einsum` over the beliefs of the smallest subtree covering it,
each non-root clique entering as the conditional mu_C / mu_{C ∩ parent}. Nothing is compiled per
queried marginal (the peers' per-candidate XLA compile is what makes their AIM slow).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

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
        raise ImportError('AIM needs Private-PGM (the `mbi` package): pip install "jaxdp[pgm]"') from err
    return mbi


class Measurement(NamedTuple):
    """A released noisy marginal: `noisy` (prod of clique sizes,) counts, row-major over the
    ascending `clique`, with Gaussian noise of standard deviation `sigma` (counts)."""

    clique: Clique
    noisy: np.ndarray
    sigma: float


def mbi_domain(sizes: Sequence[int]):
    mbi = require_mbi()
    return mbi.Domain(list(range(len(sizes))), [int(s) for s in sizes])


def model_size_mb(sizes: Sequence[int], cliques: Sequence[Clique]) -> float:
    """Megabytes of the junction tree implied by `cliques` (Private-PGM's JT-SIZE)."""
    mbi = require_mbi()
    return float(mbi.junction_tree.hypothetical_model_size(mbi_domain(sizes), [tuple(c) for c in cliques]))


def estimate(
    sizes: Sequence[int],
    measurements: Sequence[Measurement],
    *,
    total: float | None,
    iters: int,
    warm_start: Any = None,
    tol: float | None = None,
) -> Any:
    """Fit a graphical model to the measurements by mirror descent (MLE under Gaussian noise).

    Args:
        sizes: categorical attribute sizes.
        measurements: the released noisy marginals (counts).
        total: the record count if it is public; None to estimate it from the measurements
            (minimum-variance unbiased combination of their sums).
        iters: mirror-descent iterations.
        warm_start: a previous model whose potentials start the optimisation.
        tol: stop before `iters` once two consecutive blocks of 50 iterations each lower the
            loss by at most this fraction of it; None runs all `iters`.

    Returns:
        an `mbi.MarkovRandomField`.
    """
    mbi = require_mbi()
    domain = mbi_domain(sizes)
    linear = [
        mbi.LinearMeasurement(np.asarray(m.noisy, np.float32), tuple(m.clique), float(m.sigma))
        for m in measurements
    ]
    estimator = mbi.estimation.MirrorDescent()
    return estimator.estimate(
        domain, linear, known_total=total, iters=iters, warm_start=warm_start, tol=tol, patience=2
    )


class ModelMarginals:
    """Exact marginals of a fitted model, from its junction-tree beliefs (host NumPy).

    Args:
        model: an `mbi.MarkovRandomField`.
    """

    def __init__(self, model: Any):
        mbi = require_mbi()
        self.total = float(model.total)
        tree, _ = mbi.junction_tree.make_junction_tree(model.domain, [tuple(c) for c in model.cliques])
        self._tree = tree
        nodes = list(tree.nodes)
        potentials = model.potentials.expand(nodes)
        beliefs = mbi.marginal_oracles.message_passing_stable(potentials, 1.0)
        self._beliefs: dict[Clique, np.ndarray] = {}
        for node in nodes:
            factor = beliefs.project(node)
            table = np.asarray(factor.datavector(flatten=False), np.float64)
            self._beliefs[tuple(node)] = np.clip(table, 0.0, None) / max(table.sum(), 1e-300)
        self._conditionals: dict[tuple[Clique, Clique], np.ndarray] = {}

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

    def _covering_tree(self, clique: Clique):
        """The smallest set of tree edges (parent -> child) and roots covering `clique`."""
        import networkx as nx  # a dependency of mbi

        chosen = []
        for a in clique:
            if not any(a in c for c in chosen):
                chosen.append(min((c for c in self._beliefs if a in c), key=lambda c: self._beliefs[c].size))
        roots, edges = [], []
        components: dict[int, list[Clique]] = {}
        for c in chosen:
            comp = next(i for i, cc in enumerate(nx.connected_components(self._tree)) if c in cc)
            components.setdefault(comp, []).append(c)
        for members in components.values():
            root = members[0]
            roots.append(root)
            nodes = {root}
            for other in members[1:]:
                nodes.update(nx.shortest_path(self._tree, root, other))
            sub = self._tree.subgraph(nodes)
            edges.extend(nx.bfs_edges(sub, root))
        return roots, edges

    def marginal(self, clique: Clique) -> np.ndarray:
        """(prod of sizes,) float64 probabilities of `clique` (ascending attributes), row-major."""
        clique = tuple(clique)
        home = [c for c in self._beliefs if set(clique) <= set(c)]
        if home:
            c = min(home, key=lambda c: self._beliefs[c].size)
            drop = tuple(i for i, a in enumerate(c) if a not in clique)
            return self._beliefs[c].sum(axis=drop).reshape(-1)
        roots, edges = self._covering_tree(clique)
        operands: list[Any] = []
        for root in roots:
            operands += [self._beliefs[root], list(root)]
        for parent, child in edges:
            operands += [self._conditional(child, parent), list(child)]
        return np.einsum(*operands, list(clique), optimize="greedy").reshape(-1)

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


def sample(key: Key, plan: list[tuple[int, Clique, np.ndarray]], sizes: Sequence[int], rows: int) -> Array:
    """(rows, d) int32 records drawn from the model by ancestral, stratified sampling.

    Each attribute is drawn from its conditional given its parents (earlier attributes of its
    junction-tree clique). Within each group of records sharing the parents' values, the records
    are put in random order and record i of m takes the inverse CDF at (i + U_i) / m: every
    record is still marginally a draw from the conditional, but the group's counts match its
    expected counts to within one per cell (the low-variance "randomised rounding" of
    Private-PGM, here driven by `fold_in(key, attribute)`).
    """
    columns: dict[int, Array] = {}
    for a, parents, joint in plan:
        table = jnp.asarray(joint, jnp.float32)
        if parents:
            strides = [math.prod(sizes[p] for p in parents[i + 1 :]) for i in range(len(parents))]
            index = sum(columns[p] * s for p, s in zip(parents, strides, strict=True))
        else:
            index = jnp.zeros(rows, jnp.int32)
        columns[a] = _stratified(jax.random.fold_in(key, a), table, index)
    return jnp.stack([columns[a] for a in range(len(sizes))], axis=1).astype(jnp.int32)


@jax.jit
def _stratified(key: Key, table: Array, group: Array) -> Array:
    """One column: record i of its group (size m, random order) takes the inverse CDF of its
    group's row of `table` (unnormalised probabilities) at (rank_i + U_i) / m."""
    rows = group.shape[0]
    n_groups, size = table.shape
    totals = table.sum(axis=1, keepdims=True)
    probs = jnp.where(totals > 0, table / jnp.where(totals > 0, totals, 1.0), 1.0 / size)
    cdf = jnp.cumsum(probs, axis=1)
    order_key, offset_key = jax.random.split(key)
    order = jnp.lexsort((jax.random.uniform(order_key, (rows,)), group))
    sorted_group = group[order]
    counts = jnp.bincount(group, length=n_groups)
    starts = jnp.cumsum(counts) - counts
    rank = jnp.arange(rows) - starts[sorted_group]
    u = (rank + jax.random.uniform(offset_key, (rows,))) / counts[sorted_group]
    choice = jnp.minimum(jnp.sum(cdf[sorted_group] <= u[:, None], axis=1), size - 1)
    return jnp.zeros(rows, jnp.int32).at[order].set(choice.astype(jnp.int32))
