"""The plain NumPy reference for `python -m jaxdp evaluate`: all 3-way marginal errors of a synthetic
table against the real one, one `bincount` per marginal (issue #17's 1.2 s script).

    python bench/numpy_marginal_errors.py REAL.csv SYNTH.csv DOMAIN.json

Prints {"max_abs", "mean_l1", "rmse"} over the normalised answers, as `evaluate` does.
"""

import itertools
import json
import sys

import numpy as np


def load(path: str, names: list[str]) -> np.ndarray:
    with open(path) as fh:
        header = fh.readline().strip().split(",")
        codes = np.loadtxt(fh, delimiter=",", dtype=np.int64, ndmin=2)
    return codes[:, [header.index(a) for a in names]]


def main(real_path: str, synth_path: str, domain_path: str) -> None:
    with open(domain_path) as fh:
        domain = json.load(fh)
    names, sizes = list(domain), list(domain.values())
    real, synth = load(real_path, names), load(synth_path, names)
    max_abs, sum_squares, n_queries, l1 = 0.0, 0.0, 0, []
    for clique in itertools.combinations(range(len(names)), 3):
        shape = [sizes[a] for a in clique]
        cells = int(np.prod(shape))
        a = np.bincount(np.ravel_multi_index(real[:, clique].T, shape), minlength=cells) / len(real)
        b = np.bincount(np.ravel_multi_index(synth[:, clique].T, shape), minlength=cells) / len(synth)
        diff = np.abs(a - b)
        max_abs, sum_squares, n_queries = (
            max(max_abs, diff.max()),
            sum_squares + diff @ diff,
            n_queries + cells,
        )
        l1.append(diff.sum())
    print(
        json.dumps(
            {
                "max_abs": max_abs,
                "mean_l1": float(np.mean(l1)),
                "rmse": float(np.sqrt(sum_squares / n_queries)),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
