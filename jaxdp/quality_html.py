"""The quality report as one self-contained HTML file: its plots as embedded PNGs, its numbers in
tables and, whole, as JSON inside the page (`jaxdp.quality` computes them).

Plots (matplotlib, the `report` extra; without it the page has the tables alone and says so):
each column's distribution, real against synthetic; the pairwise association (Cramer's V) of the
real table, the synthetic one and their difference; the workload's per-marginal errors; the
utility test's scores.

**The page is computed from the real data: it is not differentially private.** It says so at its
top; keep it with the data holder.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from pathlib import Path
from typing import Any

from jaxdp._io import atomic_open

COLUMNS_PER_ROW = 4


def write_html(
    numbers: dict[str, Any], path: str | os.PathLike, *, title: str = "jaxdp quality report"
) -> Path:
    """Write the report page (atomically; owner-only). Returns the path."""
    path = Path(path)
    with atomic_open(path) as fh:
        fh.write(page(numbers, title=title))
    return path


def page(numbers: dict[str, Any], *, title: str = "jaxdp quality report") -> str:
    """The report page's HTML text."""
    figures = _figures(numbers)
    scores = numbers["scores"]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p class='warning'><strong>Not private.</strong> This report is computed from the real data: "
        "it is not differentially private. Keep it with the data holder; do not publish it.</p>",
        f"<p>{numbers['rows']['real']:,} real rows, {numbers['rows']['synthetic']:,} synthetic rows.</p>",
        "<h2>Scores</h2>",
        _table(
            ["score", "value", "what it measures"],
            [
                ["Column Shapes", _f(scores["Column Shapes"]), "each column's distribution (1 = identical)"],
                ["Column Pair Trends", _f(scores["Column Pair Trends"]), "each pair's joint trend"],
                ["Overall", _f(scores["Overall"]), "the mean of the two"],
                ["workload mean L1", _f(numbers["workload"]["mean_l1"]), numbers["workload"]["scored"]],
                ["workload max error", _f(numbers["workload"]["max_abs"]), "largest error of one cell"],
            ],
        ),
    ]
    if numbers.get("sdmetrics"):
        sd = numbers["sdmetrics"]
        rows = [[k, _f(v)] for k, v in sd.items() if k != "version"]
        parts += [
            f"<p>sdmetrics {html.escape(sd['version'])}'s QualityReport on the same tables:</p>",
            _table(["score", "value"], rows),
        ]
    else:
        parts.append("<p class='note'>sdmetrics is not installed: its own QualityReport is not shown.</p>")
    if figures is None:
        parts.append(
            "<p class='note'>matplotlib is not installed (pip install 'jaxdp-synth[report]'): no plots.</p>"
        )
        figures = {}
    parts += ["<h2>Columns</h2>", _image(figures.get("columns"), "each column, real against synthetic")]
    parts.append(
        _table(
            ["column", "score", "metric"],
            [[c["column"], _f(c["score"]), c["metric"]] for c in numbers["column_shapes"]],
        )
    )
    parts += [
        "<h2>Pairs</h2>",
        _image(figures.get("association"), "pairwise association, real and synthetic"),
    ]
    worst = sorted(numbers["column_pair_trends"], key=lambda p: p["score"])[:10]
    parts += [
        "<p>The ten pairs whose trends the synthetic table keeps least:</p>",
        _table(
            ["pair", "score", "metric"],
            [[" x ".join(p["columns"]), _f(p["score"]), p["metric"]] for p in worst],
        ),
    ]
    parts += ["<h2>Workload</h2>", _image(figures.get("workload"), "per-marginal L1 errors")]
    parts.append(
        _table(
            ["numeric column", "scored on"],
            [[k, v] for k, v in numbers["workload"]["numeric_columns"].items()],
        )
        if numbers["workload"]["numeric_columns"]
        else ""
    )
    utility = numbers.get("utility")
    if utility:
        parts += [
            f"<h2>Train on synthetic, test on real: {html.escape(utility['target'])}</h2>",
            _image(figures.get("utility"), "utility"),
            _table(
                ["trained on", "macro F1", "accuracy"],
                [
                    [
                        "real (80%)",
                        _f(utility["train_on_real"]["macro_f1"]),
                        _f(utility["train_on_real"]["accuracy"]),
                    ],
                    [
                        "synthetic",
                        _f(utility["train_on_synthetic"]["macro_f1"]),
                        _f(utility["train_on_synthetic"]["accuracy"]),
                    ],
                ],
            ),
            f"<p>Tested on {utility['test_rows']:,} held-out real rows.</p>",
        ]
    data = json.dumps(numbers).replace("</", "<\\/")
    parts += [f"<script type='application/json' id='numbers'>{data}</script>", "</body></html>"]
    return "\n".join(parts)


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}"
    ".warning{background:#fde8e8;border:1px solid #d33;padding:.6em}.note{color:#666}img{max-width:100%}"
)


def _f(x: float) -> str:
    return f"{x:.4f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _image(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"


def _figures(numbers: dict[str, Any]) -> dict[str, bytes] | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    out = {"columns": _columns_figure(plt, numbers["distributions"])}
    out["association"] = _association_figure(plt, numbers["association"])
    out["workload"] = _workload_figure(plt, numbers["workload"])
    if numbers.get("utility"):
        out["utility"] = _utility_figure(plt, numbers["utility"])
    return out


def _png(plt, figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _columns_figure(plt, distributions: dict[str, Any]) -> bytes:
    names = list(distributions)
    rows = math.ceil(len(names) / COLUMNS_PER_ROW)
    figure, axes = plt.subplots(
        rows, COLUMNS_PER_ROW, figsize=(4 * COLUMNS_PER_ROW, 2.8 * rows), squeeze=False
    )
    for ax, name in zip(axes.flat, names, strict=False):
        d = distributions[name]
        if d["kind"] == "categorical":
            shown = [i for i, (p, q) in enumerate(zip(d["real"], d["synthetic"], strict=True)) if p or q][:30]
            x = range(len(shown))
            ax.bar([i - 0.2 for i in x], [d["real"][i] for i in shown], width=0.4, label="real")
            ax.bar([i + 0.2 for i in x], [d["synthetic"][i] for i in shown], width=0.4, label="synthetic")
            ax.set_xticks(list(x), [str(d["labels"][i])[:12] for i in shown], rotation=70, fontsize=7)
        else:
            edges = d["edges"]
            ax.stairs(d["real"], edges, label="real")
            ax.stairs(d["synthetic"], edges, label="synthetic")
        ax.set_title(name, fontsize=9)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    figure.tight_layout()
    return _png(plt, figure)


def _association_figure(plt, association: dict[str, Any]) -> bytes:
    import numpy as np

    names = association["columns"]
    real, synthetic = np.asarray(association["real"]), np.asarray(association["synthetic"])
    figure, axes = plt.subplots(1, 3, figsize=(15, 5))
    for ax, (title, matrix, cmap) in zip(
        axes,
        (
            ("real", real, "viridis"),
            ("synthetic", synthetic, "viridis"),
            ("|real - synthetic|", np.abs(real - synthetic), "magma"),
        ),
        strict=True,
    ):
        image = ax.imshow(matrix, vmin=0, vmax=1, cmap=cmap)
        ax.set_title(f"Cramer's V: {title}", fontsize=10)
        ax.set_xticks(range(len(names)), [n[:10] for n in names], rotation=90, fontsize=7)
        ax.set_yticks(range(len(names)), [n[:10] for n in names], fontsize=7)
        figure.colorbar(image, ax=ax, fraction=0.046)
    figure.tight_layout()
    return _png(plt, figure)


def _workload_figure(plt, workload: dict[str, Any]) -> bytes:
    errors = [m["l1"] for m in workload["marginals"]]
    figure, ax = plt.subplots(figsize=(7, 3))
    ax.hist(errors, bins=min(40, max(5, len(errors) // 3)))
    ax.set_xlabel("L1 error of a marginal (fractions)")
    ax.set_ylabel("marginals")
    ax.set_title(f"{workload['scored']}: mean {workload['mean_l1']:.4f}", fontsize=10)
    return _png(plt, figure)


def _utility_figure(plt, utility: dict[str, Any]) -> bytes:
    figure, ax = plt.subplots(figsize=(5, 3))
    kinds = ["train_on_real", "train_on_synthetic"]
    for offset, metric in ((-0.2, "macro_f1"), (0.2, "accuracy")):
        ax.bar([i + offset for i in range(2)], [utility[k][metric] for k in kinds], width=0.4, label=metric)
    ax.set_xticks(range(2), ["trained on real", "trained on synthetic"])
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title(f"predicting {utility['target']} on held-out real rows", fontsize=10)
    return _png(plt, figure)
