"""AIM's last fit: the model's workload error against how closely it follows the measurements.

For each seed, AIM runs with `refit=None` (its last fit warm-started and converged); then the
same measurements are fitted again by the refit's own `pgm.refit` (from the model of the 1-way
measurements alone) and stopped at each level of
`pgm_marginals.residual_ratio` (the loss over the noise's own: 1 is where the true counts would sit), and
the model's mean L1 on the workload (`jaxdp.evaluate`, the fitted distribution's answers, no
records) is recorded beside the converged one's. This is the evidence for `jaxdp.families.Refit`
(bench/README.md, "AIM's last fit"). Epsilon 1, delta 1e-9, all 3-way marginals.

    PYTHONPATH=. python bench/bench_refit.py --table adult6 --seeds 0 1 2 3 4 [--out F.jsonl]
    (tables: adult6, adult14, adult-reduced, binary16, raw-adult: bench_mixed.py's AIM, its model
    scored on its own workload over train.csv; the ADULT ones need ../shared/data)
"""

from __future__ import annotations

import argparse
import sys

import bench_mixed
import jax
import numpy as np
from _common import Recorder, load_average
from bench_aim import binary16, load_adult

import jaxdp
from jaxdp import evaluate, loop
from jaxdp.families import pgm, pgm_marginals
from jaxdp.queries import all_kway
from jaxdp.tables import TableSchema, read_table

LEVELS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7)
TABLES = {
    "adult6": lambda: load_adult(6),
    "adult14": lambda: load_adult(14),
    "adult-reduced": lambda: jaxdp.datasets.load("adult-reduced"),
    "binary16": binary16,
}


def run_seed(data, workload, seed: int, levels) -> dict:
    mech = jaxdp.aim(data, workload, epsilon=1.0, delta=1e-9, refit=None)
    state = loop.run(mech, jax.random.key(seed)).state
    return {"seed": seed, **stopped_levels(mech, state, evaluate.fractions(data, workload), levels)}


def run_raw_adult_seed(train, seed: int, levels) -> dict:
    """bench_mixed.py's AIM on raw Adult's `train` table (the shipped schema: private quantile
    bins from 10% of the budget; the class-conditional workload), its model scored on the
    workload over `train` coded by the release's own bins."""
    columns = list(bench_mixed.SCHEMA["columns"])
    result = jaxdp.synthesize(
        train.columns(), bench_mixed.SCHEMA, mechanism="aim", epsilon=1.0, delta=bench_mixed.DELTA,
        key=jax.random.key(seed), refit=None,
        workload=bench_mixed.class_conditional(columns, bench_mixed.SCHEMA["target"]),
    )  # fmt: skip
    truth = evaluate.fractions(result.coding.encode(train), result.mechanism.workload)
    return {"seed": seed, **stopped_levels(result.mechanism, result.state, truth, levels)}


def stopped_levels(mech, state, truth: np.ndarray, levels) -> dict:
    """The converged model's ratio and mean L1, and the mean L1 of the refit stopped at each
    level."""
    model = state.model

    def mean_l1(fitted) -> float:
        answers = mech.answers(state._replace(model=model._replace(fitted=fitted)))
        return evaluate.answer_errors(truth, np.asarray(answers), mech.workload)["mean_l1"]

    converged = pgm_marginals.residual_ratio(pgm_marginals.ModelMarginals(model.fitted), model.measurements)
    converged_mean_l1 = mean_l1(model.fitted)
    stopped = {}
    for level in levels:
        # a level at or below the converged ratio stops nowhere sooner: the converged model
        stopped[str(level)] = (
            converged_mean_l1
            if level <= converged
            else mean_l1(
                pgm.refit(
                    model.fitted.sizes,
                    model.measurements,
                    total=mech.family.known_total,
                    iters=mech.family.final_iters,
                    tol=mech.family.tol,
                    discrepancy=level,
                )
            )
        )
    return {"converged_ratio": converged, "converged_mean_l1": converged_mean_l1, "stopped": stopped}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--table", choices=[*sorted(TABLES), "raw-adult"], default="adult6")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--levels", nargs="+", type=float, default=list(LEVELS))
    parser.add_argument("--out", default=None, help="append one JSON line per seed here")
    args = parser.parse_args()
    recorder = Recorder(args.out)
    if args.table == "raw-adult":
        if not bench_mixed.RAW.is_dir():
            print(f"bench_refit: skipped, raw Adult not found at {bench_mixed.RAW}", file=sys.stderr)
            return
        train = read_table(bench_mixed.RAW / "train.csv", TableSchema.from_json(bench_mixed.SCHEMA))
        for seed in args.seeds:
            row = run_raw_adult_seed(train, seed, args.levels)
            recorder.emit("aim_refit", {"table": args.table}, **row, load_avg=load_average())
        return
    data = TABLES[args.table]()
    if data is None:
        return
    workload = all_kway(data.domain.sizes, 3)
    for seed in args.seeds:
        row = run_seed(data, workload, seed, args.levels)
        recorder.emit(
            "aim_refit",
            {"table": args.table, "attributes": len(data.domain.sizes), "marginals": len(workload)},
            **row,
            load_avg=load_average(),
        )


if __name__ == "__main__":
    main()
