"""Error-vs-epsilon helpers shared by bench_histogram.py and bench_relaxed.py.

`run_grid` runs every (epsilon, mechanism, seed) of a grid and emits one JSON line per run;
`summarise` averages the runs over seeds (mean and standard error), `write_csv` and
`plot_error_vs_epsilon` turn the summary into a table and a figure. Errors are over all counting
queries of the workload, on normalised answers: max_abs (the largest), mean_abs (the mean) and
rmse; mean_l1 (the mean over marginals of the L1 distance, `jaxdp.evaluate`'s metric) is recorded
in the JSON lines too.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import jax
import matplotlib
import numpy as np
from _common import Recorder, block, load_average

import jaxdp
from jaxdp import evaluate, loop

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker

METRICS = ("max_abs", "mean_abs", "rmse")
SOURCES = ("answers", "records")  # the mechanism's own answers; answers of released records
LABELS = {
    "max_abs": "max abs error",
    "mean_abs": "mean abs error",
    "rmse": "RMSE",
    "mean_l1": "mean L1 workload error",
}


def errors(true: np.ndarray, estimate: Any, workload) -> dict[str, float]:
    """max_abs, mean_abs, rmse and mean_l1 of `estimate` against `true` (float64, on the host)."""
    estimate = np.asarray(estimate, np.float64)
    diff = np.abs(estimate - true)
    return {
        "max_abs": float(diff.max()),
        "mean_abs": float(diff.mean()),
        "rmse": float(np.sqrt(np.mean(diff**2))),
        "mean_l1": evaluate.answer_errors(true, estimate, workload)["mean_l1"],
    }


def run_grid(
    recorder: Recorder,
    kernel: str,
    data: jaxdp.Dataset,
    workload,
    factories: dict[str, Callable[..., Any]],
    answers: Callable[[Any, Any], Any],
    epsilons: Iterable[float],
    seeds: Iterable[int],
    rows: int | None = None,
) -> list[dict]:
    """Run factory(data, workload, epsilon=, delta=1/n^2) then `loop.run` for every point.

    Seeds are the inner loop, so at each (mechanism, epsilon) the first seed's wall time includes
    compiling (the mechanism's calibration is static, so each epsilon compiles anew) and the
    others reuse it. `answers(mech, state)` gives the mechanism's own (n_queries,) answers;
    `rows` records (default n) are released with the RELEASE stream and evaluated too.
    """
    n = len(data)
    true = evaluate.fractions(data, workload)
    sizes = {"records": n, "marginals": len(workload), "queries": workload.n_queries}
    out = []
    for epsilon in epsilons:
        for name, factory in factories.items():
            for i, seed in enumerate(seeds):
                start = time.perf_counter()
                mech = factory(data, workload, epsilon=epsilon, delta=1.0 / n**2)
                factory_s = time.perf_counter() - start
                key = jax.random.key(seed)
                result = loop.run(mech, key)
                block(result.state)
                run_s = time.perf_counter() - start - factory_s
                own = errors(true, answers(mech, result.state), workload)
                codes = np.asarray(loop.release(mech, result.state, key, rows=rows))
                synthetic = evaluate.fractions(jaxdp.Dataset.from_codes(data.domain, codes), workload)
                record = recorder.emit(
                    kernel,
                    sizes,
                    mechanism=name,
                    epsilon=epsilon,
                    delta=1.0 / n**2,
                    rho=mech.plan.rho_budget,
                    rounds=mech.rounds,
                    seed=seed,
                    factory_s=factory_s,
                    run_s=run_s,
                    wall_s=factory_s + run_s,
                    includes_compile=i == 0,
                    answers=own,
                    records=errors(true, synthetic, workload),
                    released_rows=len(codes),
                    load_avg=load_average(),
                )
                out.append(record)
    return out


def read_jsonl(path: str, kernel: str) -> list[dict]:
    with open(path) as fh:
        return [r for r in map(json.loads, filter(str.strip, fh)) if r["kernel"] == kernel]


def _mean_se(values: list[float]) -> tuple[float, float]:
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return statistics.fmean(values), se


def summarise(records: list[dict], sources=SOURCES, metrics=METRICS) -> list[dict]:
    """One row per (mechanism, epsilon): mean and standard error over seeds of every metric of
    every source and of the wall time; first_wall_s (compiles) and warm_wall_s (median of the
    other seeds)."""
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in records:
        groups.setdefault((r["mechanism"], r["epsilon"]), []).append(r)
    rows = []
    for (name, epsilon), runs in groups.items():
        row: dict[str, Any] = {"mechanism": name, "epsilon": epsilon, "seeds": len(runs)}
        for source in sources:
            for metric in metrics:
                col = f"{source}_{metric}"
                row[col], row[col + "_se"] = _mean_se([r[source][metric] for r in runs])
        row["wall_s"], row["wall_s_se"] = _mean_se([r["wall_s"] for r in runs])
        first = [r["wall_s"] for r in runs if r["includes_compile"]]
        warm = [r["wall_s"] for r in runs if not r["includes_compile"]]
        row["first_wall_s"] = first[0] if first else float("nan")
        row["warm_wall_s"] = statistics.median(warm) if warm else float("nan")
        rows.append(row)
    return rows


def markdown_table(rows: list[dict], metrics, source: str, what: str, names=None) -> str:
    """One markdown table per metric of `summarise` rows: a line per mechanism (in `names` order,
    default: as they come), a column per epsilon, mean +- SE over seeds."""
    eps = sorted({r["epsilon"] for r in rows})
    by = {(r["mechanism"], r["epsilon"]): r for r in rows}
    names = names or list(dict.fromkeys(r["mechanism"] for r in rows))
    lines = []
    for metric in metrics:
        lines.append(f"\n{metric} of {what} (mean +- SE over seeds; n = seeds)")
        lines.append("| mechanism | " + " | ".join(f"eps={e:g}" for e in eps) + " |")
        lines.append("|---" * (len(eps) + 1) + "|")
        for name in names:
            cells = []
            for e in eps:
                r = by.get((name, e))
                col = f"{source}_{metric}"
                cells.append("" if r is None else f"{r[col]:.4f} +- {r[col + '_se']:.4f} (n={r['seeds']})")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(rows: list[dict], path: str) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()})


def plot_error_vs_epsilon(
    rows: list[dict],
    path: str,
    title: str,
    source_labels: dict[str, str],
    metrics=METRICS,
) -> None:
    """Panels: one row per source in `source_labels`, one column per metric; one line per
    mechanism with SE bars."""
    sources = list(source_labels)
    fig, axes = plt.subplots(
        len(sources), len(metrics), figsize=(5 * len(metrics), 4.25 * len(sources)), squeeze=False
    )
    names = list(dict.fromkeys(r["mechanism"] for r in rows))
    eps = sorted({r["epsilon"] for r in rows})
    for i, source in enumerate(sources):
        for j, metric in enumerate(metrics):
            ax = axes[i, j]
            col = f"{source}_{metric}"
            for name in names:
                pts = sorted((r for r in rows if r["mechanism"] == name), key=lambda r: r["epsilon"])
                se = [0.0 if math.isnan(r[col + "_se"]) else r[col + "_se"] for r in pts]
                ax.errorbar(
                    [r["epsilon"] for r in pts],
                    [r[col] for r in pts],
                    yerr=se,
                    marker="o",
                    markersize=4,
                    capsize=3,
                    label=name,
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("epsilon")
            ax.set_ylabel(LABELS[metric])
            ax.set_title(f"{LABELS[metric]}: {source_labels[source]}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xticks(eps, [f"{e:g}" for e in eps])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axes[0, 0].legend(fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
