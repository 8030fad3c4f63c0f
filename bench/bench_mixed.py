"""Raw UCI Adult through a table schema: AIM (default, private-quantile and equal-width bins),
RAP++, GEM and Independent on mixed-type queries and ML utility (issue #16; not a timed test).

Data: ../shared/data/dp-data-raw-adult/train.csv (32,561 rows, the private table) and test.csv
(16,281 rows, held out), read with examples/adult_schema.json (six integer numeric columns with
public bounds and no bins declared, nine categorical columns, target income>50K). Every
mechanism runs through `jaxdp.synthesize` (delta 1e-9, each mechanism's default relation) and
its release comes back in original labels and units:

- `aim`: AIM with the schema as shipped, so the documented default binning (`jaxdp.binning`);
- `aim-quantiles`, `aim-quantiles-32`: AIM, every numeric column in 16 (32) private quantile
  bins ("binning": "quantiles", 10% of rho, charged in the ledger; at most one bin per whole
  number, coinciding cut points merged);
- `aim-equal-width`, `aim-equal-width-64`, `aim-equal-width-128`: AIM, every numeric column in 16
  (64, 128) equal-width bins over its bounds (free; at most one bin per whole number);
- `gem`, `independent`: the binned baselines, 16 equal-width bins like `aim-equal-width`;
- `rap++`: numeric columns real (Section 5.1's classes: CM + mixed marginals + linear
  thresholds).

AIM and GEM answer the feature x feature x target marginals of the coded table (91, RAP++'s CM
class); Independent the 1-way marginals.

Metrics, of the released table in original units, on the held-out test split (and on train):
- `mm`: mean absolute error over 20,000 random 2-way mixed marginals 1{income = y and x_j <= tau}
  (`jaxdp.queries.mixed_marginal_answers`; tau uniform within the bounds); `mm_test_by_column`
  the same on test.csv over the queries of each numeric column x_j;
- `lt`: mean absolute error over 20,000 random class-conditional linear thresholds
  (`jaxdp.queries.linear_threshold_answers`);
- `f1`: macro F1 on test.csv of a logistic regression trained on the release
  (`jaxdp.utility.logistic_f1`; trained on train.csv for reference: `f1_real`).
Evaluation query sets come from keys of their own, not the training candidates.

Each (mechanism, epsilon, seed) is appended to --out as one JSON line (commit, load average,
seconds) as soon as it finishes; a rerun skips the points measured on the same commit (with
--resume, on any commit), so a killed run loses at most the point in progress. Seeds are the
outer loop: a partial run covers the whole grid at fewer seeds.

    PYTHONPATH=. python bench/bench_mixed.py --seeds 0 1 2 3 4
    PYTHONPATH=. python bench/bench_mixed.py --floors  # binning's own error (16-256 bins), no mechanism
    PYTHONPATH=. python bench/bench_mixed.py --table   # the table of what is recorded
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np
from _common import Recorder, git_commit, load_average
from _plots import markdown_table, read_jsonl, summarise, write_csv

import jaxdp
from jaxdp import preprocess
from jaxdp.coding import TableCoding
from jaxdp.keys import decode_key
from jaxdp.mechanisms import rap_plus as rp
from jaxdp.queries import linear_threshold_answers, mixed_marginal_answers, random_linear_thresholds
from jaxdp.tables import TableSchema, parse_table, read_table
from jaxdp.types import Neighboring
from jaxdp.utility import logistic_f1

ROOT = Path(__file__).resolve().parent.parent
RAW = Path(os.environ.get("JAXDP_SHARED_DATA", ROOT.parent / "shared" / "data")) / "dp-data-raw-adult"
SCHEMA = json.loads((ROOT / "examples" / "adult_schema.json").read_text())
KERNEL = "mixed_adult"
EPSILONS = (0.3, 1.0, 3.0)
DELTA = 1e-9
EVAL_QUERIES = 20_000
# (binning, bins) given to every numeric column of the schema; "aim" takes the schema as shipped,
# so the documented default binning; rap++ keeps numbers real. The binned baselines (gem,
# independent) get the bins the AIM variant aim-equal-width gets.
BINNINGS = {
    "aim-quantiles": ("quantiles", 16),
    "aim-quantiles-32": ("quantiles", 32),
    "aim-equal-width": ("equal-width", 16),
    "aim-equal-width-64": ("equal-width", 64),
    "aim-equal-width-128": ("equal-width", 128),
    "gem": ("equal-width", 16),
    "independent": ("equal-width", 16),
}
MECHANISMS = (
    "aim",
    "aim-paper-alpha",
    "aim-no-refit",
    "aim-quantiles",
    "aim-quantiles-32",
    "aim-equal-width",
    "aim-equal-width-64",
    "aim-equal-width-128",
    "rap++",
    "gem",
    "independent",
)
METRICS = ("mm_test", "lt_test", "f1")


def schema_for(binning: tuple[str, int] | None) -> dict:
    """The shipped schema, with every numeric column's (binning, bins) set when given (at most one
    bin per whole number)."""
    schema = json.loads(json.dumps(SCHEMA))
    if binning is not None:
        how, bins = binning
        for spec in schema["columns"].values():
            if spec["type"] == "numeric":
                spec.update(binning=how, bins=min(bins, int(spec["upper"]) - int(spec["lower"]) + 1))
    return schema


def class_conditional(names: list[str], target: str) -> list[list[str]]:
    features = [n for n in names if n != target]
    return [[a, b, target] for i, a in enumerate(features) for b in features[i + 1 :]]


def run_point(name: str, epsilon: float, seed: int, train, evaluation) -> dict:
    mechanism = "aim" if name.startswith("aim") else name
    options: dict = {}
    if name == "aim-paper-alpha":  # AIM's measurement share as in its paper, against the default
        options["alpha"] = 0.9
    if name == "aim-no-refit":  # AIM's last fit as converged (jaxdp.families.Refit off)
        options["refit"] = None
    if mechanism in ("aim", "gem"):
        options["workload"] = class_conditional(list(SCHEMA["columns"]), SCHEMA["target"])
    elif mechanism == "independent":
        options["workload"] = "all-1way"
    else:
        options["workload"] = None  # rap++: Section 5.1's classes
    start = time.perf_counter()
    result = jaxdp.synthesize(
        train.columns(), schema_for(BINNINGS.get(name)), mechanism=mechanism, epsilon=epsilon, delta=DELTA,
        key=jax.random.key(seed), **options,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    return {
        "mechanism": name,
        "epsilon": epsilon,
        "seed": seed,
        "relation": result.report["relation"],
        "rows": result.report["rows"],
        **evaluation(result.data),
        "rho_spent_over_budget": result.report["rho_spent"] / result.report["rho_budget"],
        "preprocessing_rho": result.report["preprocessing"]["rho"],
        "binning": {
            n: f"{c['coding']}, {c['bins']} bins"
            for n, c in result.report["preprocessing"]["columns"].items()
            if "bins" in c
        },
        "seconds": seconds,
        "load_avg": load_average(),
    }


def evaluator(train, test):
    """Errors and F1 of a released table (columns in original units)."""
    schema = TableSchema.from_json(SCHEMA)
    real = TableCoding(schema, {}, real=True)  # numeric columns real, normalised to the bounds
    train_mixed, test_mixed = real.encode(train), real.encode(test)
    domain = train_mixed.domain
    target = [a.name for a in domain.categorical].index(domain.target)
    sizes, n_numeric = domain.sizes, len(domain.numeric)
    mixed = rp._target_prefix_queries(jax.random.key(1001), sizes, n_numeric, EVAL_QUERIES, [target])
    linear = random_linear_thresholds(jax.random.key(1002), sizes, n_numeric, EVAL_QUERIES, [target])
    linear = linear.materialize()
    # each mixed marginal's numeric column, for the errors per column
    query_column = np.asarray(mixed.num_attrs)[:, 0]
    numeric_names = [a.name for a in domain.numeric]
    mixed_jit, linear_jit = jax.jit(mixed_marginal_answers), jax.jit(linear_threshold_answers)

    def answers(data):
        mm = np.asarray(mixed_jit(data.codes, data.numeric, mixed), np.float64) / len(data)
        lt = np.asarray(linear_jit(data.codes, data.numeric, linear), np.float64) / len(data)
        return mm, lt

    truth = {"train": answers(train_mixed), "test": answers(test_mixed)}
    f1_real = logistic_f1(train_mixed, test_mixed, domain.target)

    def evaluate(release: dict) -> dict:
        synthetic = real.encode(parse_table(schema, release))  # the release's columns, validated
        mm, lt = answers(synthetic)
        out = {"f1": logistic_f1(synthetic, test_mixed, domain.target), "f1_real": f1_real}
        for split, (mm_true, lt_true) in truth.items():
            out[f"mm_{split}"] = float(np.mean(np.abs(mm - mm_true)))
            out[f"lt_{split}"] = float(np.mean(np.abs(lt - lt_true)))
        test_error = np.abs(mm - truth["test"][0])
        out["mm_test_by_column"] = {
            name: float(np.mean(test_error[query_column == j])) for j, name in enumerate(numeric_names)
        }
        return out

    return evaluate


def floors(train, evaluation) -> list[dict]:
    """The error floor of binning itself: train.csv coded to bins and decoded (values uniform
    within their bin), with no mechanism and no noise, scored like a release; "quantiles" are
    measured at epsilon 1000 (noise scale 1/64 of a count: the exact quantiles of the fine grid).
    "none" is train.csv itself (test.csv differs from it by sampling)."""
    out = [{"binning": "none", "bins": None, **evaluation(train.columns())}]
    for how in ("equal-width", "quantiles"):
        for bins in (16, 32, 64, 128, 256):
            table = parse_table(TableSchema.from_json(schema_for((how, bins))), train.columns())
            prepared = preprocess.prepare(
                table, real=False, epsilon=1000.0, delta=DELTA, conversion="exact",
                relation=Neighboring.ADD_REMOVE, key=jax.random.key(0),
            )  # fmt: skip
            release = prepared.coding.decode(prepared.dataset, decode_key(jax.random.key(1)))
            coded = {n: len(c) + 1 for n, c in prepared.coding.cuts.items()}
            out.append({"binning": how, "bins": bins, "coded_bins": coded, **evaluation(release.columns())})
    return out


def done_points(path: str, commit: str | None, any_commit: bool) -> set[tuple[str, float, int]]:
    """Points already measured on this commit (a dirty tree resumes nothing), or on any commit."""
    if not os.path.exists(path):
        return set()
    same = commit is not None and not commit.endswith("-dirty")
    return {
        (r["mechanism"], r["epsilon"], r["seed"])
        for r in read_jsonl(path, KERNEL)
        if any_commit or (same and r.get("commit") == commit)
    }


def table(path: str) -> str:
    """Markdown tables (mean +- SE over seeds per mechanism and epsilon); a CSV beside `path`."""
    records = read_jsonl(path, KERNEL)
    columns = (*METRICS, "mm_train", "lt_train", "f1_real", "seconds")
    for r in records:  # the shape `summarise` reads; every point builds and compiles its own
        r["release"], r["wall_s"], r["includes_compile"] = {m: r[m] for m in columns}, r["seconds"], True
    rows = summarise(records, sources=("release",), metrics=columns)
    rows.sort(key=lambda r: (MECHANISMS.index(r["mechanism"]), r["epsilon"]))
    write_csv(rows, os.path.splitext(path)[0] + ".csv")
    text = markdown_table(rows, (*METRICS, "seconds"), "release", "the release", names=list(MECHANISMS))
    return text + floor_table(path)


def floor_table(path: str) -> str:
    """Markdown: the binning floors recorded by --floors (the latest record of each binning)."""
    latest = {(r["binning"], r["bins"]): r for r in read_jsonl(path, KERNEL + "_floor")}
    if not latest:
        return ""
    lines = ["\n\nbinning floors: train.csv binned and decoded, no mechanism, no noise\n"]
    lines.append("| binning | bins asked | mm_test | lt_test | f1 | bins per numeric column |")
    lines.append("|---|---|---|---|---|---|")
    for (how, bins), r in latest.items():
        coded = ", ".join(f"{n} {k}" for n, k in r.get("coded_bins", {}).items())
        lines.append(
            f"| {how} | {bins or ''} | {r['mm_test']:.4f} | {r['lt_test']:.4f} | {r['f1']:.3f} | {coded} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS), choices=MECHANISMS)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / f"{KERNEL}.jsonl"))
    parser.add_argument("--resume", action="store_true", help="skip points measured on any commit")
    parser.add_argument("--table", action="store_true", help="only print the table of --out")
    parser.add_argument("--floors", action="store_true", help="only the binning floors (no mechanism)")
    args = parser.parse_args()
    if args.table:
        print(table(args.out))
        return 0
    if not RAW.is_dir():
        print(f"bench_mixed: skipped, raw Adult not found at {RAW} (needs ../shared)", file=sys.stderr)
        return 0
    schema = TableSchema.from_json(SCHEMA)
    train, test = (read_table(RAW / f"{split}.csv", schema) for split in ("train", "test"))
    evaluate = evaluator(train, test)
    recorder = Recorder(args.out)
    if args.floors:
        for record in floors(train, evaluate):
            recorder.emit(KERNEL + "_floor", {"train": len(train)}, **record, load_avg=load_average())
        return 0
    done = done_points(args.out, git_commit(), args.resume)
    sizes = {"train": len(train), "test": len(test), "eval_queries": EVAL_QUERIES}
    for seed in args.seeds:
        for epsilon in args.epsilons:
            for name in args.mechanisms:
                if (name, epsilon, seed) not in done:
                    recorder.emit(KERNEL, sizes, **run_point(name, epsilon, seed, train, evaluate))
                    jax.clear_caches()  # each point compiles its own programs; keep memory bounded
    print(table(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
