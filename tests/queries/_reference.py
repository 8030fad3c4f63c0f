"""Brute-force NumPy references: plain loops over records, independent of the kernels."""

from __future__ import annotations

import numpy as np


def marginal_counts(codes: np.ndarray, sizes, cliques) -> np.ndarray:
    """Counts per marginal by looping over records; cells row-major (NumPy's own ravel order)."""
    out = []
    for c in cliques:
        table = np.zeros([sizes[a] for a in c], np.int64)
        for row in codes:
            table[tuple(int(row[a]) for a in c)] += 1
        out.append(table.ravel())
    return np.concatenate(out)


def relaxed_marginals(probs: np.ndarray, sizes, cliques, weights=None) -> np.ndarray:
    """Mean (or weighted sum) over rows of the per-cell product of block probabilities."""
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n = probs.shape[0]
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, np.float64)
    out = []
    for c in cliques:
        table = np.zeros([sizes[a] for a in c])
        for k in range(n):
            for cell in np.ndindex(*table.shape):
                value = w[k]
                for a, v in zip(c, cell, strict=True):
                    value *= probs[k, offsets[a] + v]
                table[cell] += value
        out.append(table.ravel())
    return np.concatenate(out)


def histogram_marginals(hist: np.ndarray, cliques) -> np.ndarray:
    """Marginals of a dense histogram by looping over every cell of the domain."""
    out = []
    for c in cliques:
        table = np.zeros([hist.shape[a] for a in c])
        for cell in np.ndindex(*hist.shape):
            table[tuple(cell[a] for a in c)] += hist[cell]
        out.append(table.ravel())
    return np.concatenate(out)
