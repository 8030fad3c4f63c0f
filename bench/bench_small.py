"""AIM, MST, PrivBayes and Independent on small tables (1,000-1,300 records, wide attributes):
where a 1-way share goes when the noise of round 0 is as large as a value's count (issue #49).

The tables (`TABLES`, all reproducible from files under ../shared/data):
- adult9: 1,304 records drawn without replacement (numpy seed 49) from Private-PGM's ADULT
  (`private-pgm/adult.csv`, already coded), 9 attributes: age (85), workclass (9), education-num
  (16), marital-status (7), occupation (15), sex (2), capital-gain (100), hours-per-week (99),
  income>50K (2);
- pums: SmartNoise's PUMS sample (`smartnoise/PUMS.csv`, 1,000 records): age (0-94, 95
  values), sex (2), educ (1-16 as codes 0-16, 17), race (1-6 as codes 0-6, 7), married (2),
  and income in 50 public equal-width bins of 10,000 over 0..500,000 (bin 0 holds 32%);
- pile: adult9 with age replaced by a 91-value attribute "age91" holding 16% of the records on
  its top code (90): the records of the oldest 16% (by age, ties broken by a seeded draw) take
  code 90, the others codes 0-89 by their rank in age (90 equal slices of the ranks: ~12
  records a value, monotone in age, so it keeps age's dependence on the other attributes).
  The regime of the issue's held-out table (1,304 rows, the 91-value attribute's top code
  holding 16%).

The workload: every 3-way marginal of at most 10,000 cells; the score: the mean over those
marginals of the L1 distance between normalised marginals, and the largest cell error
(`jaxdp.evaluate.workload_errors`), of the released records and of the fitted model's own answers
(`jaxdp.api.release_errors`' "relaxed"); and, per attribute of at least 20 values, the error of
its released 1-way marginal (its largest cell, and the pile's share where there is one).

Variants (`--variants`), each a registry default changed for one run (`variant`): "default";
"compress-off" (no domain compression); "compress-T" (threshold T sigmas); "spread-S" (merged
codes spread by S: uniform or noisy, `jaxdp.families.Compression`); "refit-off"
(AIM's last-fit refit off); "polish-off" (the release's polish skipped,
`jaxdp.families.polish.polish` patched to return the records as drawn); "resolution-off"
(AIM's round 0 calibrated for T = 16 d whatever the table's size: the schedule before issue
#49, `jaxdp.selection.AIMSelection`'s resolution None); "low-signal-off" (round 0 never takes
alpha rho where the table is small against the noise: `jaxdp.selection.aim.LOW_SIGNAL` 0);
"add-remove" (Independent under AIM's relation: its default is replace-one).

    PYTHONPATH=. python bench/bench_small.py --tables adult9 pums pile --mechanisms aim independent \
        --epsilons 0.1 1 10 --seeds 0 1 2 --out bench/results/small_tables.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import jax
import numpy as np
from _common import Recorder, load_average
from bench_aim import write_table

import jaxdp
from jaxdp import api
from jaxdp.domain import Dataset, Domain
from jaxdp.families import polish
from jaxdp.queries import MarginalWorkload, all_kway
from jaxdp.selection import aim as aim_selection

SHARED = Path(os.environ.get("JAXDP_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
ADULT9 = (
    "age",
    "workclass",
    "education-num",
    "marital-status",
    "occupation",
    "sex",
    "capital-gain",
    "hours-per-week",
    "income>50K",
)
ADULT_ROWS, ADULT_SEED = 1304, 49
PILE_SHARE, PILE_SIZE = 0.16, 91
MAX_CELLS = 10_000


def _require(path: Path) -> Path:
    if not path.exists():
        raise SystemExit(f"bench_small: {path} is absent (needs ../shared/data beside the checkout)")
    return path


def adult9(rows: int = ADULT_ROWS, seed: int = ADULT_SEED) -> Dataset:
    """1,304 ADULT records (module docstring), the same for the same (rows, seed)."""
    import json

    directory = SHARED / "private-pgm"
    with open(_require(directory / "adult-domain.json")) as f:
        sizes = json.load(f)
    csv = _require(directory / "adult.csv")
    with open(csv) as f:
        header = f.readline().strip().split(",")
    codes = np.loadtxt(csv, delimiter=",", skiprows=1, dtype=np.int32)
    picked = np.sort(np.random.default_rng(seed).choice(len(codes), size=rows, replace=False))
    columns = [header.index(c) for c in ADULT9]
    return Dataset.from_codes(Domain.from_sizes({c: sizes[c] for c in ADULT9}), codes[picked][:, columns])


def pums() -> Dataset:
    """SmartNoise's 1,000-record PUMS sample with income in 50 equal-width bins (module docstring)."""
    csv = _require(SHARED / "smartnoise" / "PUMS.csv")
    with open(csv) as f:
        header = f.readline().strip().split(",")
    raw = np.loadtxt(csv, delimiter=",", skiprows=1).astype(np.int64)  # "1e+05" among the incomes
    column = {name: raw[:, i] for i, name in enumerate(header)}
    income = np.minimum(column["income"] // 10_000, 49)  # public bins over 0..500,000
    sizes = {"age": 95, "sex": 2, "educ": 17, "race": 7, "married": 2, "income": 50}
    values = {"age": column["age"], "sex": column["sex"], "educ": column["educ"], "race": column["race"]}
    values |= {"married": column["married"], "income": income}
    codes = np.stack([values[name] for name in sizes], axis=1).astype(np.int32)
    return Dataset.from_codes(Domain.from_sizes(sizes), codes)


def pile(share: float = PILE_SHARE, size: int = PILE_SIZE, seed: int = ADULT_SEED) -> Dataset:
    """adult9 with age replaced by a `size`-value attribute with `share` of the records on its top
    code (module docstring)."""
    base = adult9()
    age = base.codes[:, 0]
    tiebreak = np.random.default_rng(seed + 1).random(len(age))
    order = np.lexsort((tiebreak, age))  # by age, ties at random
    rank = np.empty(len(age), np.int64)
    rank[order] = np.arange(len(age))
    n_top = round(share * len(age))
    rest = len(age) - n_top
    wide = np.where(rank >= rest, size - 1, rank * (size - 1) // max(rest, 1))
    codes = base.codes.copy()
    codes[:, 0] = wide
    names = ("age91", *ADULT9[1:])
    sizes = (size, *base.domain.sizes[1:])
    return Dataset.from_codes(Domain.from_sizes(dict(zip(names, sizes, strict=True))), codes)


def _bench_aim_table(name: str) -> Callable[[], Dataset]:
    def load() -> Dataset:
        import bench_aim  # beside this script

        if name == "binary16":
            return bench_aim.binary16()
        data = bench_aim.load_adult(6)
        if data is None:
            raise SystemExit("bench_small: ADULT needs ../shared/data/private-pgm beside the checkout")
        return data

    return load


TABLES: dict[str, Callable[[], Dataset]] = {"adult9": adult9, "pums": pums, "pile": pile}
# the mechanisms whose round 0 follows AIMSelection's resolution (and so its LOW_SIGNAL floor)
LOW_SIGNAL_RULED = ("aim", "aim-gdp", "aim-gem")
# the tables the earlier accuracy work measured on (30,000-50,000 records), judged on every 3-way
# marginal as there: "no worse on the others"
LARGE = {
    "adult6": _bench_aim_table("adult6"),
    "adult-reduced": lambda: jaxdp.datasets.load("adult-reduced"),
    "binary16": _bench_aim_table("binary16"),
}


def workload_of(data: Dataset, max_cells: int | None = MAX_CELLS) -> MarginalWorkload:
    """Every 3-way marginal of at most `max_cells` cells (None: every one)."""
    full = all_kway(data.domain.sizes, 3)
    if max_cells is None:
        return full
    kept = tuple(c for c, n in zip(full.cliques, full.cells, strict=True) if n <= max_cells)
    return MarginalWorkload(full.sizes, kept)


def write_case(data: Dataset, workload: MarginalWorkload, directory: str, name: str) -> tuple[str, str, str]:
    """A table as the command line reads it, in `directory`: `name`.csv and `name`-domain.json
    (`bench_aim.write_table`) and workload.json (the workload's cliques by attribute name).
    Returns the three paths."""
    write_table(data, directory, name)
    names = data.domain.names
    cliques = os.path.join(directory, "workload.json")
    with open(cliques, "w") as fh:
        json.dump([[names[i] for i in c] for c in workload.cliques], fh)
    return os.path.join(directory, f"{name}.csv"), os.path.join(directory, f"{name}-domain.json"), cliques


@contextlib.contextmanager
def _together(contexts):
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield


def variant(mechanism: str, name: str) -> tuple[dict, contextlib.AbstractContextManager] | None:
    """(build options, context) of a variant (module docstring) for a registry mechanism, or None
    where it changes nothing of that mechanism's; "A+B" combines two. Each changes one of the
    mechanism's defaults (the compression's: the registry spec's)."""
    if "+" in name:
        parts = [variant(mechanism, part) for part in name.split("+")]
        if any(part is None for part in parts):
            return None
        return {k: v for options, _ in parts for k, v in options.items()}, _together([c for _, c in parts])
    compression = api.mechanism_spec(mechanism).compression
    nothing = contextlib.nullcontext()
    if name == "default":
        return {}, nothing
    if name == "add-remove":  # Independent under AIM's relation (its default is replace-one)
        return ({"relation": "add-remove"}, nothing) if mechanism == "independent" else None
    if mechanism == "independent":
        return None
    if name == "low-signal-off":
        return (
            ({}, mock.patch.object(aim_selection, "LOW_SIGNAL", 0.0))
            if mechanism in LOW_SIGNAL_RULED
            else None
        )
    if name == "polish-off":
        return {}, mock.patch.object(polish, "polish", lambda key, codes, answers, workload: codes)
    if name == "refit-off":
        return ({"refit": None}, nothing) if mechanism == "aim" else None
    if name == "resolution-off":
        return ({"resolution": None}, nothing) if mechanism in ("aim", "aim-gem") else None
    if compression is None:  # no compression to change
        return None
    if name == "compress-off":
        return {"compress": None}, nothing
    if name.startswith("compress-"):
        threshold = float(name.split("-", 1)[1])
        return {"compress": dataclasses.replace(compression, threshold=threshold)}, nothing
    if name.startswith("spread-"):
        return {"compress": dataclasses.replace(compression, spread=name.split("-", 1)[1])}, nothing
    raise SystemExit(f"unknown variant {name!r}")


def one_way_errors(real: Dataset, synthetic: Dataset) -> dict:
    """Per attribute of at least 20 values: the largest error of its released 1-way share, and
    the real and released shares of its most common value."""
    out = {}
    for a, (name, size) in enumerate(zip(real.domain.names, real.domain.sizes, strict=True)):
        if size < 20:
            continue
        truth = np.bincount(real.codes[:, a], minlength=size) / len(real)
        released = np.bincount(np.asarray(synthetic.codes)[:, a], minlength=size) / max(len(synthetic), 1)
        top = int(truth.argmax())
        out[name] = {
            "max_abs": float(np.abs(truth - released).max()),
            "top_value": top,
            "top_share": float(truth[top]),
            "top_released": float(released[top]),
        }
    return out


def run_once(mechanism: str, data: Dataset, workload, seed: int, epsilon: float, setting: str) -> dict:
    options, context = variant(mechanism, setting)
    start = time.perf_counter()
    with context:
        mech = api.build(mechanism, data, workload, epsilon=epsilon, delta=1e-9, **options)
        result = api.execute(mechanism, mech, jax.random.key(seed), data.domain)
    seconds = time.perf_counter() - start
    errors = api.release_errors(data, result, workload)
    compression = result.report.get("compression") or {}
    return {
        "mean_l1": errors["mean_l1"],
        "max_abs": errors["max_abs"],
        "model_mean_l1": errors["relaxed"]["mean_l1"] if "relaxed" in errors else None,
        "model_max_abs": errors["relaxed"]["max_abs"] if "relaxed" in errors else None,
        "one_way": one_way_errors(data, result.synthetic),
        "rows": len(result.synthetic),
        "merged": {k: len(v) for k, v in compression.get("merged", {}).items()},
        "rounds": int(getattr(result.state, "rounds_done", 1) or 1),
        "seconds": seconds,
        # equal digests: the same release bit for bit
        "digest": hashlib.sha256(np.ascontiguousarray(result.synthetic.codes).tobytes()).hexdigest()[:16],
    }


def summary(path: str, labels: list[str] | None = None) -> None:
    """A markdown table of a results file: per (table, mechanism, epsilon, label, variant), the
    mean over seeds of the records' mean L1 and max error (each seed's values in brackets)."""
    import json

    groups: dict = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if labels and r.get("label") not in labels:
                continue
            key = (r["sizes"]["table"], r["mechanism"], r["epsilon"], r.get("label"), r["variant"])
            groups.setdefault(key, []).append(r)
    print("| table | mechanism | epsilon | label | variant | mean L1 | max error | seeds |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2])):
        rows = sorted(groups[key], key=lambda r: r["seed"])
        l1 = [r["mean_l1"] for r in rows]
        top = [r["max_abs"] for r in rows]
        each_l1, each_top = (" ".join(f"{x:.3f}" for x in xs) for xs in (l1, top))
        print(
            f"| {key[0]} | {key[1]} | {key[2]:g} | {key[3]} | {key[4]} | {np.mean(l1):.3f} ({each_l1}) "
            f"| {np.mean(top):.3f} ({each_top}) | {len(rows)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", default=None, help="print a results file as a table and exit")
    parser.add_argument("--tables", nargs="+", choices=(*TABLES, *LARGE), default=list(TABLES))
    parser.add_argument("--mechanisms", nargs="+", default=["aim", "independent"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.1, 1.0, 10.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["default"])
    parser.add_argument("--label", default=None, help="recorded with every record (e.g. before/after)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.summary:
        summary(args.summary, [args.label] if args.label else None)
        return
    recorder = Recorder(args.out)
    for table in args.tables:
        data = TABLES[table]() if table in TABLES else LARGE[table]()
        workload = workload_of(data, MAX_CELLS if table in TABLES else None)
        attributes = dict(zip(data.domain.names, data.domain.sizes, strict=True))
        sizes = {"table": table, "records": len(data), "attributes": attributes, "marginals": len(workload)}
        for mechanism in args.mechanisms:
            settings = [v for v in args.variants if variant(mechanism, v) is not None]
            for epsilon in args.epsilons:
                for setting in settings:
                    for seed in args.seeds:
                        row = run_once(mechanism, data, workload, seed, epsilon, setting)
                        recorder.emit(
                            "small_tables",
                            sizes,
                            label=args.label,
                            mechanism=mechanism,
                            variant=setting,
                            epsilon=epsilon,
                            delta=1e-9,
                            seed=seed,
                            load_avg=load_average(),
                            **row,
                        )
                        print(
                            f"# {table} {mechanism} {setting} eps={epsilon} seed={seed}: "
                            f"mean L1 {row['mean_l1']:.3f} max {row['max_abs']:.3f} ({row['seconds']:.0f} s)",
                            file=sys.stderr,
                            flush=True,
                        )


if __name__ == "__main__":
    main()
