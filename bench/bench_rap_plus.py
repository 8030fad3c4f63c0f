"""RAP++ on raw UCI Adult (mixed types, no binning) vs RAP-softmax on the same data binned.

Data: ../shared/data/dp-data-raw-adult/{train,test}.csv read with examples/adult_schema.json
(numeric: age, fnlwgt, education-num, capital-gain, capital-loss, hours-per-week with public
bounds; target income>50K). The private table is train.csv (32,561 rows); test.csv is held out
for the ML evaluation only.

Mechanisms at each epsilon (delta = 1e-9, replace-one):
- `rap++`: CM (feature x feature x target marginals, 8 rounds x 1) + MM (2,000 random
  numeric-prefix x target candidates, 20 rounds x 10) + LT (2,000 random class-conditional
  linear thresholds, 20 rounds x 10); n' = 500 rows, sigma 8 doubling 8 times, 25 Adam steps a
  stage;
- `rap++(cm+lt)`: the paper's training classes only (CM + LT), same settings (`--variants`);
- `rap-softmax-binned`: every numeric column cut into 30 equal-width bins over its public bounds,
  RAP-softmax on the feature x feature x target marginals of the binned table (14 rounds x 2
  marginals, n' = 500); numeric outputs decoded uniformly inside their bin.

Metrics (on the private table; evaluation sets drawn with keys of their own, not the training
candidates): mean absolute error over 20,000 random 2-way mixed marginals 1{income = y and
x_j <= tau} and over 20,000 random class-conditional linear thresholds; macro F1 on test.csv of
a logistic regression trained on the synthetic rows vs on train.csv.

    python bench/bench_rap_plus.py --seeds 0 --out bench/results/rap_plus_adult.jsonl
    python bench/bench_rap_plus.py --quick   # smoke run
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np
from _common import environment

import jaxdp
from jaxdp.domain import Categorical, Dataset, Domain, load_domain
from jaxdp.mechanisms import rap_plus as rp
from jaxdp.queries import (
    from_cliques,
    linear_threshold_answers,
    mixed_marginal_answers,
    random_linear_thresholds,
)
from jaxdp.utility import logistic_f1

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT.parent / "shared" / "data" / "dp-data-raw-adult"
SCHEMA = ROOT / "examples" / "adult_schema.json"
BINS = 30
EVAL_QUERIES = 20_000
DELTA = 1e-9


def class_conditional(sizes, target: int):
    others = [a for a in range(len(sizes)) if a != target]
    cliques = [tuple(sorted((a, b, target))) for i, a in enumerate(others) for b in others[i + 1 :]]
    return from_cliques(sizes, cliques)


def binned(data: Dataset) -> Dataset:
    """The table with each numeric column as a categorical of BINS equal-width public bins."""
    attrs, cols = [], []
    cat = {a.name: j for j, a in enumerate(data.domain.categorical)}
    num = {a.name: j for j, a in enumerate(data.domain.numeric)}
    for a in data.domain.attributes:
        if isinstance(a, Categorical):
            attrs.append(Categorical(a.name, a.size))
            cols.append(data.codes[:, cat[a.name]])
        else:
            attrs.append(Categorical(a.name, BINS))
            cols.append(np.minimum((data.numeric[:, num[a.name]] * BINS).astype(np.int32), BINS - 1))
    return Dataset.from_codes(Domain(tuple(attrs), data.domain.target), np.stack(cols, axis=1))


def unbinned(codes: np.ndarray, domain: Domain, key) -> Dataset:
    """Binned synthetic codes back to the mixed domain: numeric uniform inside its bin."""
    cat_codes, numeric = [], []
    u = np.asarray(jax.random.uniform(key, codes.shape))
    for j, a in enumerate(domain.attributes):
        if isinstance(a, Categorical):
            cat_codes.append(codes[:, j])
        else:
            numeric.append((codes[:, j] + u[:, j]) / BINS)
    return Dataset(domain, np.stack(cat_codes, 1).astype(np.int32), np.stack(numeric, 1).astype(np.float32))


def query_errors(real: Dataset, synth: Dataset, mixed, linear) -> dict:
    def frac(d, f, q):
        return np.asarray(jax.jit(f)(d.codes, d.numeric, q), np.float64) / len(d)

    mm = np.abs(frac(real, mixed_marginal_answers, mixed) - frac(synth, mixed_marginal_answers, mixed))
    lt = np.abs(frac(real, linear_threshold_answers, linear) - frac(synth, linear_threshold_answers, linear))
    return {"mm_mean": mm.mean(), "mm_max": mm.max(), "lt_mean": lt.mean(), "lt_max": lt.max()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.15, 0.5, 1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", action="store_true", help="also run RAP++ on CM + LT only")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="bench/results/rap_plus_adult.jsonl")
    args = parser.parse_args()
    if not RAW.is_dir():
        print(f"skipped: raw Adult not found at {RAW} (needs ../shared next to the repository)")
        return 0
    domain = load_domain(SCHEMA)
    train = jaxdp.read_csv(RAW / "train.csv", domain)
    test = jaxdp.read_csv(RAW / "test.csv", domain)
    target = domain.target
    y = [a.name for a in domain.categorical].index(target)
    sizes, n_num = domain.sizes, len(domain.numeric)
    n_eval = 2000 if args.quick else EVAL_QUERIES
    mixed_eval = rp._target_prefix_queries(jax.random.key(1001), sizes, n_num, n_eval, [y])
    linear_eval = random_linear_thresholds(jax.random.key(1002), sizes, n_num, n_eval, [y]).materialize()
    train_binned = binned(train)
    bin_workload = class_conditional(train_binned.domain.sizes, y)
    real_f1 = logistic_f1(train, test, target)
    env = environment()
    quick = dict(mixed_rounds=3, linear_rounds=3, marginal_rounds=2) if args.quick else {}
    settings = dict(n_rows=500, sigma_start=8.0, stages=8, max_stage_steps=25)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    records = []
    for eps in args.epsilons:
        for seed in args.seeds:
            runs = {}
            classes = rp.default_classes(domain, jax.random.key(0), **quick)
            runs["rap++"] = lambda c=classes, e=eps: jaxdp.rap_plus_plus(
                train, c, epsilon=e, delta=DELTA, **settings
            )
            if args.variants:
                cm_lt = [c for c in classes if c.label != "mixed_marginals"]
                runs["rap++(cm+lt)"] = lambda c=cm_lt, e=eps: jaxdp.rap_plus_plus(
                    train, c, epsilon=e, delta=DELTA, **settings
                )
            runs["rap-softmax-binned"] = lambda e=eps: jaxdp.rap_softmax(
                train_binned,
                bin_workload,
                epsilon=e,
                delta=DELTA,
                rounds=2 if args.quick else 14,
                marginals_per_round=2,
                n_rows=500,
            )
            for name, factory in runs.items():
                key = jax.random.key(seed)
                start = time.perf_counter()
                mech = factory()
                result = jaxdp.run(mech, key)
                released = jaxdp.release(mech, result.state, key)
                seconds = time.perf_counter() - start
                if name.startswith("rap++"):
                    synth = Dataset(domain, *(np.asarray(x) for x in released))
                else:
                    synth = unbinned(np.asarray(released), domain, jax.random.fold_in(key, 99))
                rec = {
                    "kernel": "rap_plus_adult",
                    "mechanism": name,
                    "epsilon": eps,
                    "seed": seed,
                    **query_errors(train, synth, mixed_eval, linear_eval),
                    "f1_synthetic": logistic_f1(synth, test, target),
                    "f1_real": real_f1,
                    "seconds": seconds,
                    "rho_spent": jaxdp.rho_spent(result.ledger),
                    "eval_queries": n_eval,
                    "env": env,
                }
                records.append(rec)
                print(json.dumps(rec), flush=True)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")
    write_table(records, str(Path(args.out).with_suffix(".csv")))
    return 0


def write_table(records: list[dict], path: str) -> None:
    fields = [
        "mechanism",
        "epsilon",
        "seed",
        "mm_mean",
        "lt_mean",
        "mm_max",
        "lt_max",
        "f1_synthetic",
        "f1_real",
        "seconds",
    ]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)


if __name__ == "__main__":
    sys.exit(main())
