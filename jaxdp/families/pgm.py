"""Graphical-model family (Private-PGM): the fit (`estimate`) and the model's size; its exact
marginals are in `pgm_marginals`, its records in `pgm_sampling`. `require_mbi` is the one place
`mbi` is imported: it builds the junction trees (triangulation, model size, the loss's Lipschitz
constant); the fitting is jaxdp's own (`_junction`, `_dense_junction`).

Everything here is post-processing of noisy measurements: it never sees private data.

Attributes are named by their index in the categorical domain (0..d-1), so a clique is the same
tuple of ints in jaxdp's workloads and in mbi.

Compile economy. XLA compilation, not arithmetic, dominated AIM runs while mbi compiled one
mirror-descent program per distinct list of measured cliques. `estimate` runs mbi's algorithm in
one program whose shapes do not depend on the cliques (the tree travels as padded index arrays,
see `_junction`), and merges repeated measurements of one clique exactly (`merge_repeats`). Once
a model's tables are large, its fit runs faster by a program compiled for its own tree, with
dense tables in place of index arrays (`_dense_junction`), and takes it where the iterations saved
outweigh that compile.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxdp.families import _dense_junction, _junction

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


def _aligned(table: np.ndarray, attributes: Clique, target: Clique) -> np.ndarray:
    """`table` over `attributes` (a subset of target) with axes permuted and expanded so it
    broadcasts against a table over `target`."""
    order = sorted(range(len(attributes)), key=lambda i: target.index(attributes[i]))
    shape = [table.shape[attributes.index(a)] if a in attributes else 1 for a in target]
    return np.transpose(table, order).reshape(shape)
