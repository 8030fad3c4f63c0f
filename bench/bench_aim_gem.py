"""AIM-GEM (AIM's selection + GEM's generator) against AIM and GEM on 6-attribute ADULT.

epsilon = 1, delta = 1e-9, all 3-way marginals of (age, education-num, marital-status,
occupation, sex, income>50K), data from ../shared/data/private-pgm/ (as bench_aim.py). Each
mechanism runs with its factory defaults, except GEM's rounds: its default 50 exceeds the 20
marginals it may measure once each, so it runs 20. Relations: AIM and AIM-GEM add/remove (their
default, the paper's), GEM replace-one (the only one it supports).

Per run: mean L1 workload error of the released records (`evaluate.workload_errors`, "mean_l1")
and of the fitted model itself before sampling ("model_mean_l1"), seconds to build and run
("run_s") and with the release ("total_s"), rounds, and the 1-minute load average (the 2-core
host is shared: timings are pessimistic).

    python bench/bench_aim_gem.py [--seeds 0 1 2] [--mechanisms aim-gem aim gem] [--out F.jsonl]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from _common import Recorder, load_average
from bench_aim import load_adult

import jaxdp
from jaxdp import evaluate, loop
from jaxdp.domain import Dataset
from jaxdp.queries import all_kway


def _model_answers(mech, state) -> np.ndarray:
    """(workload.n_queries,) fractions of the fitted model itself (no sampling)."""
    return np.asarray(mech.relaxed_answers(state), np.float64)


def build(name: str, data, workload, epsilon: float, delta: float):
    if name == "aim-gem":
        return jaxdp.aim_gem(data, workload, epsilon=epsilon, delta=delta)
    if name == "aim":
        return jaxdp.aim(data, workload, epsilon=epsilon, delta=delta)
    return jaxdp.gem(data, workload, epsilon=epsilon, delta=delta, rounds=min(50, len(workload)))


def run_once(name: str, data, workload, seed: int, epsilon: float, delta: float) -> dict:
    load_before = load_average()
    start = time.perf_counter()
    mech = build(name, data, workload, epsilon, delta)
    result = loop.run(mech, jax.random.key(seed))
    jax.block_until_ready(jax.tree_util.tree_leaves(result.state))
    run_s = time.perf_counter() - start
    codes = np.asarray(loop.release(mech, result.state, jax.random.key(seed)))
    total_s = time.perf_counter() - start
    synthetic = Dataset.from_codes(data.domain, codes)
    model = evaluate.answer_errors(
        evaluate.fractions(data, workload), _model_answers(mech, result.state), workload
    )
    return {
        "mechanism": name,
        "seed": seed,
        "epsilon": epsilon,
        "delta": delta,
        "relation": mech.relation.value,
        "mean_l1": evaluate.workload_errors(data, synthetic, workload)["mean_l1"],
        "model_mean_l1": model["mean_l1"],
        "rows": int(codes.shape[0]),
        "rounds": int(result.state.rounds_done),
        "rho_spent_over_budget": float(jaxdp.rho_spent(result.ledger) / mech.plan.rho_budget),
        "run_s": run_s,
        "total_s": total_s,
        "load_avg_before": load_before,
        "load_avg_after": load_average(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--mechanisms", nargs="+", default=["aim-gem", "aim", "gem"])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    data = load_adult(6)
    if data is None:
        return
    workload = all_kway(data.domain.sizes, 3)
    recorder = Recorder(args.out)
    sizes = {"attributes": 6, "marginals": len(workload), "records": len(data)}
    for seed in args.seeds:
        for name in args.mechanisms:
            recorder.emit(
                "aim_gem_compare", sizes, **run_once(name, data, workload, seed, args.epsilon, args.delta)
            )


if __name__ == "__main__":
    main()
