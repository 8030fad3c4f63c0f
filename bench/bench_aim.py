"""AIM (Private-PGM estimation): workload error, seconds per run, compiles, time per round.

The issue's settings: epsilon = 1, delta = 1e-9, all 3-way marginals of
- ADULT: a 6-attribute projection (age, education-num, marital-status, occupation, sex,
  income>50K) or all 14 attributes, data from ../shared/data/private-pgm/ (skipped with a message
  when absent);
- bnet9: 9 attributes of sizes up to 501 from a seeded Bayes net (135,727 records; with
  `--max-cells 10000`, the 3-way marginals of at most 10,000 cells: large cliques to fit);
- binary16: 16 binary attributes (560 3-way marginals, 65,536 cells in the whole domain), 50,000
  records drawn from a seeded Bayes net (`binary16`; `--write-table DIR` writes it as CSV and
  domain JSON for the CLI).
Workload error is AIM's (Definition 2, unweighted): the mean over workload marginals of the L1
distance between the normalised marginals of the real and synthetic tables (`jaxdp.evaluate`, key
"mean_l1").

    python bench/bench_aim.py [--table adult|binary16] [--attributes 6|14] [--seeds 0 1 2 3 4]
        [--epsilon 1] [--out F.jsonl] [--iters 1000] [--final-iters 3000] [--tol 1e-2 | --tol none]
        [--compilation-cache DIR] [--write-table DIR] [--compress off 3 3:uniform] [--alpha 0.9 0.95]
        [--refit default off]
    python bench/bench_aim.py --table bnet9 --max-cells 10000   # large cliques (issue #24)
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import sys
import time

import jax
import numpy as np
from _common import Recorder, load_average
from jax import monitoring

import jaxdp
from jaxdp import evaluate, loop
from jaxdp.domain import Dataset, Domain
from jaxdp.families import Compression
from jaxdp.queries import MarginalWorkload, all_kway

DATA_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "private-pgm")
SIX = ("age", "education-num", "marital-status", "occupation", "sex", "income>50K")


def load_adult(attributes: int) -> Dataset | None:
    csv = os.path.join(DATA_DIR, "adult.csv")
    if not os.path.exists(csv):
        for alt in ("/work/shared/data/private-pgm",):
            if os.path.exists(os.path.join(alt, "adult.csv")):
                csv = os.path.join(alt, "adult.csv")
        if not os.path.exists(csv):
            print(f"bench_aim: skipped, ADULT not found at {DATA_DIR} (needs ../shared)", file=sys.stderr)
            return None
    with open(os.path.join(os.path.dirname(csv), "adult-domain.json")) as f:
        sizes = json.load(f)
    with open(csv) as f:
        header = f.readline().strip().split(",")
    codes = np.loadtxt(csv, delimiter=",", skiprows=1, dtype=np.int32)
    names = list(SIX) if attributes == 6 else header
    columns = [header.index(c) for c in names]
    domain = Domain.from_sizes({c: sizes[c] for c in names})
    return Dataset.from_codes(domain, codes[:, columns])


def binary16(rows: int = 50_000, seed: int = 2024) -> Dataset:
    """16 binary attributes drawn from a seeded Bayes net: attribute i has up to 3 parents among
    the attributes before it, and P(x_i = 1 | parents) ~ Beta(0.5, 0.5) per parent value (strong,
    varied dependences). The same table for the same (rows, seed)."""
    rng = np.random.default_rng(seed)
    codes = np.zeros((rows, 16), np.int32)
    for i in range(16):
        parents = rng.choice(i, size=min(i, 3), replace=False) if i else np.zeros(0, int)
        table = rng.beta(0.5, 0.5, size=2 ** len(parents))
        index = np.zeros(rows, np.int64)
        for p in parents:
            index = 2 * index + codes[:, p]
        codes[:, i] = rng.random(rows) < table[index]
    return Dataset.from_codes(Domain.from_sizes({f"b{i}": 2 for i in range(16)}), codes)


BNET9_SIZES = (33, 3, 3, 33, 33, 33, 33, 76, 501)


def bnet9(rows: int = 135_727, seed: int = 2026) -> Dataset:
    """9 attributes of the sizes of the held-out table in issue #24 (33, 3, 3, 33, 33, 33, 33, 76,
    501) drawn from a seeded Bayes net: attribute i has up to 2 parents among the attributes
    before it, P(x_i | parents) ~ Dirichlet(0.5) per parent value. Its 3-way marginals of at most
    10,000 cells make AIM fit large cliques."""
    rng = np.random.default_rng(seed)
    codes = np.zeros((rows, len(BNET9_SIZES)), np.int32)
    for i, size in enumerate(BNET9_SIZES):
        parents = rng.choice(i, size=min(i, 2), replace=False) if i else np.zeros(0, int)
        configs = int(np.prod([BNET9_SIZES[p] for p in parents]))
        table = rng.dirichlet(np.full(size, 0.5), size=configs)
        index = np.zeros(rows, np.int64)
        for p in parents:
            index = index * BNET9_SIZES[p] + codes[:, p]
        cdf = np.cumsum(table[index], axis=1)
        codes[:, i] = np.minimum((rng.random((rows, 1)) > cdf).sum(axis=1), size - 1)
    return Dataset.from_codes(Domain.from_sizes({f"x{i}": s for i, s in enumerate(BNET9_SIZES)}), codes)


def write_table(data: Dataset, directory: str, name: str) -> None:
    """`name`.csv (header and codes) and `name`-domain.json (sizes) for `python -m jaxdp`."""
    os.makedirs(directory, exist_ok=True)
    names = data.domain.names
    np.savetxt(
        os.path.join(directory, f"{name}.csv"),
        data.codes,
        fmt="%d",
        delimiter=",",
        header=",".join(names),
        comments="",
    )
    with open(os.path.join(directory, f"{name}-domain.json"), "w") as f:
        json.dump(dict(zip(names, data.domain.sizes, strict=True)), f)


class CompileLog:
    """XLA compiles (count, seconds) while active: compile seconds depend less on the shared
    CPU's load than wall seconds, and a fresh process pays them all."""

    def __init__(self):
        self.count, self.seconds, self.active = 0, 0.0, False
        monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, duration: float, **_: object) -> None:
        if self.active and event == "/jax/core/compile/backend_compile_duration":
            self.count += 1
            self.seconds += duration

    def start(self) -> None:
        self.count, self.seconds, self.active = 0, 0.0, True

    def stop(self) -> tuple[int, float]:
        self.active = False
        return self.count, self.seconds


COMPILES = CompileLog()


class TimingLog(logging.Handler):
    """Collects AIM's per-round timings from its debug log."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.rounds: list[dict] = []

    def emit(self, record):
        timing = getattr(record, "aim_timing", None)
        if timing is not None:
            self.rounds.append(dict(timing))


def run_once(data, workload, seed: int, epsilon: float, delta: float, **options) -> dict:
    handler = TimingLog()
    log = logging.getLogger("jaxdp.mechanisms.aim")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    COMPILES.start()
    start, cpu_start = time.perf_counter(), time.process_time()
    mech = jaxdp.aim(data, workload, epsilon=epsilon, delta=delta, **options)
    result = loop.run(mech, jax.random.key(seed))
    fit_s = time.perf_counter() - start
    codes = np.asarray(loop.release(mech, result.state, jax.random.key(seed)))
    total_s = time.perf_counter() - start
    cpu_s = time.process_time() - cpu_start
    compiles, compile_s = COMPILES.stop()
    log.removeHandler(handler)
    synthetic = Dataset.from_codes(data.domain, codes)
    errors = evaluate.workload_errors(data, synthetic, workload)
    bounds = mech.error_bounds(result.state, 0.95, synthetic=codes)
    true_l1 = np.add.reduceat(
        np.abs(
            evaluate._counts(data.codes, workload)
            - evaluate._counts(codes, workload) * len(data) / len(codes)
        ),
        np.asarray(workload.offsets),
    )
    # the fitted model's own answers, over the declared domain (a compressed run's merged cells
    # spread as its release spreads them)
    model_errors = evaluate.answer_errors(
        evaluate.fractions(data, workload), np.asarray(mech.answers(result.state)), workload
    )
    score = [r["score_s"] for r in handler.rounds]
    return {
        "seed": seed,
        "epsilon": epsilon,
        "mean_l1": errors["mean_l1"],
        "model_mean_l1": model_errors["mean_l1"],
        "run_s": fit_s,
        "total_s": total_s,
        "cpu_s": cpu_s,  # process CPU seconds of run + release (all threads)
        "compiles": compiles,  # XLA compiles during run + release, and their seconds
        "compile_s": compile_s,
        "compilation_cache": jax.config.jax_compilation_cache_dir,
        "rounds": int(result.state.rounds_done),
        "score_s_per_round_median": float(np.median(score)) if score else None,
        "score_s_per_round_max": float(np.max(score)) if score else None,
        "filter_s_per_round_median": float(np.median([r["filter_s"] for r in handler.rounds]))
        if score
        else None,
        "fit_s_per_round_median": float(np.median([r["fit_s"] for r in handler.rounds])) if score else None,
        "fit_s_total": float(sum(r["fit_s"] for r in handler.rounds)),
        "eligible_max": max((r["eligible"] for r in handler.rounds), default=0),
        "bounds_cover": float(np.mean(bounds.bound >= true_l1)),
        "bound_median_ratio": float(np.median(bounds.bound / np.maximum(true_l1, 1e-9))),
        "rho_spent_over_budget": float(result.state.schedule.rho_spent / mech.plan.rho_budget),
        "compressed_sizes": None if result.state.compressed is None else list(result.state.compressed.sizes),
        "load_avg": load_average(),
        # XLA's optimisation level changes compile time, which dominates AIM's run time
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", choices=("adult", "binary16", "bnet9"), default="adult")
    parser.add_argument(
        "--max-cells", type=int, default=None, help="keep the 3-way marginals of at most this many cells"
    )
    parser.add_argument("--attributes", type=int, choices=(6, 14), default=6, help="ADULT's attributes")
    parser.add_argument("--write-table", default=None, help="write the table as CSV + domain JSON here")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--out", default=None)
    parser.add_argument("--iters", type=int, default=1000, help="mirror-descent cap per round")
    parser.add_argument("--final-iters", type=int, default=3000, help="cap for the last round")
    parser.add_argument(
        "--noise",
        nargs="+",
        default=["discrete"],
        choices=("discrete", "float"),
        help="noise kinds to run; several run side by side, alternating within each seed",
    )
    parser.add_argument(
        "--tol",
        type=lambda v: None if v == "none" else float(v),
        default=1e-2,
        help='early stop; "none" = off',
    )
    parser.add_argument(
        "--compress",
        nargs="+",
        default=["off"],
        help='domain compression settings to run side by side within each seed: "off", or '
        'THRESHOLD[:SPREAD] (e.g. "3": AIM\'s default, with the noisy spread; "3:uniform"; '
        "jaxdp.families.Compression)",
    )
    parser.add_argument(
        "--alpha",
        nargs="+",
        type=float,
        default=[None],
        help="AIM's measurement shares to run side by side within each seed (default: AIM's own)",
    )
    parser.add_argument(
        "--refit",
        nargs="+",
        choices=["default", "off"],
        default=["default"],
        help="AIM's last-fit refit (jaxdp.families.Refit) as by default or off, side by side per seed",
    )
    parser.add_argument(
        "--compilation-cache",
        default=None,
        help="JAX persistent compilation cache directory (off by default; results never depend on it)",
    )
    args = parser.parse_args()
    if args.compilation_cache:
        jax.config.update("jax_compilation_cache_dir", args.compilation_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    tables = {"binary16": binary16, "bnet9": bnet9}
    data = tables[args.table]() if args.table in tables else load_adult(args.attributes)
    if data is None:
        return
    table = args.table if args.table in tables else f"adult{args.attributes}"
    if args.write_table:
        write_table(data, args.write_table, table)
    workload = all_kway(data.domain.sizes, 3)
    if args.max_cells is not None:
        kept = tuple(c for c, n in zip(workload.cliques, workload.cells, strict=True) if n <= args.max_cells)
        workload = MarginalWorkload(workload.sizes, kept)
    recorder = Recorder(args.out)
    for seed in args.seeds:
        for noise in args.noise:
            for compress, alpha, refit in itertools.product(args.compress, args.alpha, args.refit):
                options = {
                    "iters": args.iters,
                    "final_iters": args.final_iters,
                    "tol": args.tol,
                    "noise": noise,
                    **({} if alpha is None else {"alpha": alpha}),
                }
                row = run_once(
                    data, workload, seed, args.epsilon, args.delta, compress=_compression(compress),
                    **options, **({"refit": None} if refit == "off" else {}),
                )  # fmt: skip
                recorder.emit(
                    "aim",
                    {
                        "table": table,
                        "attributes": len(data.domain.sizes),
                        "marginals": len(workload),
                        "records": len(data),
                    },
                    **options,
                    compress=compress,
                    refit=refit,
                    **row,
                )


def _compression(setting: str) -> Compression | None:
    """'off', or THRESHOLD[:SPREAD] (the spread defaults to `Compression`'s, "noisy")."""
    if setting == "off":
        return None
    threshold, _, spread = setting.partition(":")
    return Compression(float(threshold), spread) if spread else Compression(float(threshold))


if __name__ == "__main__":
    main()
