"""How good a synthetic table is, judged against the real one: the numbers of the quality report.

**This reads the real data: it is not differentially private.** It is for the data holder,
never for publication beside the release.

`quality(real, synthetic, schema)` scores every column of the schema, numeric ones included:

- column shapes: per column, 1 - the total variation distance between the real and synthetic
  distributions of a categorical column (its empty cell a category), 1 - the Kolmogorov-Smirnov
  statistic of a numeric one (over the cells that hold a number): sdmetrics' TVComplement and
  KSComplement;
- column pair trends: per pair, 1 - half the difference of the Pearson correlations of two
  numeric columns (CorrelationSimilarity), else 1 - the total variation distance between the
  pair's joint distributions (ContingencySimilarity), numeric columns cut into `PAIR_BINS`
  equal-width bins over their public bounds (sdmetrics cuts at bins read from the real column;
  where it is installed its own scores are reported beside these, `sdmetrics`);
- association: Cramer's V of every pair (numeric columns cut as above), real and synthetic;
- the workload's errors, per marginal, on the release's coding (`coding`: the bins the release
  was made with) or, without it, on the schema's declared bins (a column declared with private
  quantiles is cut into equal-width bins over its bounds: the report says which);
- train on synthetic, test on real: a logistic regression for a target column
  (`jaxdp.utility`), trained on the synthetic rows and on 80% of the real ones, both tested on
  the other 20% of the real rows (a split drawn from `seed`).

The scores in `[0, 1]` are higher for closer tables; `Column Shapes`, `Column Pair Trends` and
their mean (`Overall`) summarise them as sdmetrics' QualityReport does.
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import numpy as np

from jaxdp import binning
from jaxdp.coding import TableCoding
from jaxdp.domain import CategoricalColumn, Dataset, NumericColumn, RawTable, TableSchema
from jaxdp.evaluate import fractions
from jaxdp.queries import all_kway

PAIR_BINS = 10
TEST_SHARE = 0.2
WARNING = "computed from the real data: not differentially private; for the data holder, do not publish"


def quality(
    real: RawTable | Dataset,
    synthetic: RawTable | Dataset,
    schema: TableSchema | None = None,
    *,
    coding: TableCoding | None = None,
    target: str | None = None,
    workload: int = 2,
    seed: int = 0,
) -> dict[str, Any]:
    """The quality report's numbers (module docstring), as JSON-able values.

    Args:
        real, synthetic: the tables, read against the same schema (or the same coded domain).
        schema: their schema (default: theirs, or the coded domain's).
        coding: the release's coding, to score the workload on the bins it was made with.
        target: the column the utility test predicts (default: the schema's target; none
            without one).
        workload: K of the all-K-way marginals scored.
        seed: the real table's train/test split.

    Raises:
        ValueError: tables of other schemas, an empty table, a target that is not categorical.
    """
    real, synthetic = _as_table(real), _as_table(synthetic)
    schema = schema or real.schema
    if real.schema != schema or synthetic.schema != schema:
        raise ValueError("the real and synthetic tables must be read against the same schema")
    if len(real) == 0 or len(synthetic) == 0:
        raise ValueError("the real and the synthetic table must each hold records")
    names = list(schema.names)
    shapes = {c.name: _shape_score(c, real, synthetic) for c in schema.columns}
    cut_real = {c.name: _cut(c, real) for c in schema.columns}
    cut_synthetic = {c.name: _cut(c, synthetic) for c in schema.columns}
    pairs, association = [], {"real": _eye(len(names)), "synthetic": _eye(len(names))}
    for (i, a), (j, b) in itertools.combinations(enumerate(schema.columns), 2):
        score, metric = _pair_score(a, b, real, synthetic, cut_real, cut_synthetic)
        pairs.append({"columns": [a.name, b.name], "score": score, "metric": metric})
        for kind, cuts in (("real", cut_real), ("synthetic", cut_synthetic)):
            v = _cramers_v(*cuts[a.name], *cuts[b.name])
            association[kind][i][j] = association[kind][j][i] = v
    column_shapes = float(np.mean(list(shapes.values())))
    pair_trends = float(np.mean([p["score"] for p in pairs])) if pairs else 1.0
    target = target if target is not None else schema.target
    return {
        "warning": WARNING,
        "rows": {"real": len(real), "synthetic": len(synthetic)},
        "scores": {
            "Column Shapes": column_shapes,
            "Column Pair Trends": pair_trends,
            "Overall": (column_shapes + pair_trends) / 2,
        },
        "column_shapes": [
            {"column": c.name, "score": shapes[c.name], "metric": _shape_metric(c)} for c in schema.columns
        ],
        "column_pair_trends": pairs,
        "association": {"columns": names, **association},
        "distributions": {c.name: _distribution(c, real, synthetic) for c in schema.columns},
        "workload": _workload_errors(real, synthetic, schema, coding, workload),
        "utility": None if target is None else _utility(real, synthetic, schema, target, seed),
        "sdmetrics": _sdmetrics(real, synthetic, schema),
    }


def _as_table(table: RawTable | Dataset) -> RawTable:
    if isinstance(table, RawTable):
        return table
    schema = TableSchema.from_domain(table.domain)
    codes = {a.name: table.codes[:, j] for j, a in enumerate(table.domain.categorical)}
    values = {
        a.name: a.lower + table.numeric[:, j].astype(np.float64) * (a.upper - a.lower)
        for j, a in enumerate(table.domain.numeric)
    }
    return RawTable(schema, codes, values)


def _eye(n: int) -> list[list[float]]:
    return np.eye(n).tolist()


def _shape_metric(column) -> str:
    return "TVComplement" if isinstance(column, CategoricalColumn) else "KSComplement"


def _shape_score(column, real: RawTable, synthetic: RawTable) -> float:
    if isinstance(column, CategoricalColumn):
        p, q = (_shares(t.codes[column.name], column.size) for t in (real, synthetic))
        return 1.0 - 0.5 * float(np.abs(p - q).sum())
    a, b = (t.values[column.name][~np.isnan(t.values[column.name])] for t in (real, synthetic))
    if a.size == 0 or b.size == 0:
        return float(a.size == b.size)
    return 1.0 - _ks_statistic(a, b)


def _shares(codes: np.ndarray, size: int) -> np.ndarray:
    """Shares of each code, the empty cell (-1) last."""
    counts = np.bincount(np.where(codes < 0, size, codes), minlength=size + 1).astype(np.float64)
    return counts / counts.sum()


def _ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    grid = np.union1d(a, b)
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / a.size
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def _cut(column, table: RawTable) -> tuple[np.ndarray, int]:
    """(a categorical view of the column: codes 0..k-1, k) with the empty cell its last code and a
    numeric column cut into PAIR_BINS equal-width bins over its bounds."""
    if isinstance(column, CategoricalColumn):
        codes = table.codes[column.name]
        return np.where(codes < 0, column.size, codes), column.size + 1
    values = table.values[column.name]
    cuts = column.lower + (column.upper - column.lower) * np.arange(1, PAIR_BINS) / PAIR_BINS
    empty = np.isnan(values)
    return np.where(
        empty, PAIR_BINS, np.searchsorted(cuts, np.where(empty, column.lower, values), "right")
    ), PAIR_BINS + 1


def _joint(x: np.ndarray, kx: int, y: np.ndarray, ky: int) -> np.ndarray:
    return np.bincount(x * ky + y, minlength=kx * ky).reshape(kx, ky).astype(np.float64) / len(x)


def _pair_score(a, b, real, synthetic, cut_real, cut_synthetic) -> tuple[float, str]:
    if isinstance(a, NumericColumn) and isinstance(b, NumericColumn):
        r, s = _correlation(real, a.name, b.name), _correlation(synthetic, a.name, b.name)
        if r is not None and s is not None:
            return 1.0 - abs(r - s) / 2.0, "CorrelationSimilarity"
    p = _joint(*cut_real[a.name], *cut_real[b.name])
    q = _joint(*cut_synthetic[a.name], *cut_synthetic[b.name])
    return 1.0 - 0.5 * float(np.abs(p - q).sum()), "ContingencySimilarity"


def _correlation(table: RawTable, a: str, b: str) -> float | None:
    x, y = table.values[a], table.values[b]
    both = ~(np.isnan(x) | np.isnan(y))
    if both.sum() < 2 or np.std(x[both]) == 0 or np.std(y[both]) == 0:
        return None
    return float(np.corrcoef(x[both], y[both])[0, 1])


def _cramers_v(x: np.ndarray, kx: int, y: np.ndarray, ky: int) -> float:
    joint = _joint(x, kx, y, ky)
    rows, cols = joint.sum(1), joint.sum(0)
    expected = np.outer(rows, cols)
    keep = expected > 0
    chi2 = float(np.sum((joint[keep] - expected[keep]) ** 2 / expected[keep]))  # chi^2 / n
    k = min(int((rows > 0).sum()), int((cols > 0).sum())) - 1
    return float(np.sqrt(chi2 / k)) if k > 0 else 0.0


def _distribution(column, real: RawTable, synthetic: RawTable) -> dict[str, Any]:
    """What the distribution plot draws: shares per category (empty last), or per bin."""
    if isinstance(column, CategoricalColumn):
        labels = [*(column.labels or [str(c) for c in range(column.size)]), "(empty)"]
        p, q = (_shares(t.codes[column.name], column.size) for t in (real, synthetic))
        return {"kind": "categorical", "labels": labels, "real": p.tolist(), "synthetic": q.tolist()}
    edges = np.linspace(column.lower, column.upper, 2 * PAIR_BINS + 1)
    out = {"kind": "numeric", "edges": edges.tolist()}
    for name, table in (("real", real), ("synthetic", synthetic)):
        values = table.values[column.name]
        counts, _ = np.histogram(values[~np.isnan(values)], bins=edges)
        out[name] = (counts / max(len(values), 1)).tolist()
        out[f"{name}_empty"] = float(np.isnan(values).mean())
    return out


def coded(
    real: RawTable, synthetic: RawTable, schema: TableSchema, coding: TableCoding | None = None
) -> tuple[Dataset, Dataset, dict[str, str]]:
    """Both tables coded for scoring a workload on every column (module docstring): on the
    release's `coding` where given, else on the schema's declared bins; and how each numeric
    column was cut."""
    coding, how = _evaluation_coding(schema, coding)
    return coding.encode(real), coding.encode(synthetic), how


def _evaluation_coding(schema: TableSchema, coding: TableCoding | None) -> tuple[TableCoding, dict]:
    """The coding the workload is scored on, and how each numeric column was cut."""
    if coding is not None and not coding.real:
        return coding, {c.name: "the release's bins" for c in schema.numeric}
    cuts, how = {}, {}
    for c in schema.numeric:
        if binning.is_private(c):
            cuts[c.name] = binning.equal_width_cuts(c, binning.bins_asked(c))
            how[c.name] = (
                f"{len(cuts[c.name]) + 1} equal-width bins (the release's private quantiles are not "
                "known here: give its model)"
            )
        else:
            cuts[c.name] = binning.public_cuts(c)
            how[c.name] = f"{len(cuts[c.name]) + 1} declared bins"
    return TableCoding(schema, cuts), how


def _workload_errors(real, synthetic, schema, coding, k: int) -> dict[str, Any]:
    coded_real, coded_synthetic, how = coded(real, synthetic, schema, coding)
    workload = all_kway(coded_real.domain.sizes, min(k, len(coded_real.domain.sizes)))
    diff = np.abs(fractions(coded_real, workload) - fractions(coded_synthetic, workload))
    l1 = [float(diff[o : o + c].sum()) for o, c in zip(workload.offsets, workload.cells, strict=True)]
    names = workload.names(coded_real.domain)
    return {
        "marginals": [{"marginal": list(n), "l1": e} for n, e in zip(names, l1, strict=True)],
        "max_abs": float(diff.max()),
        "mean_l1": float(np.mean(l1)),
        "numeric_columns": how,
        "scored": f"all {len(workload)} {k}-way marginals of the {len(schema.columns)} columns",
    }


def _features(table: RawTable, schema: TableSchema, target: str) -> tuple[np.ndarray, np.ndarray]:
    """One-hot categorical columns (empty a category), numeric ones in [0, 1] of their bounds
    with an empty flag, the target left out; and the target's codes."""
    blocks = []
    for c in schema.columns:
        if c.name == target:
            continue
        if isinstance(c, CategoricalColumn):
            codes = table.codes[c.name]
            blocks.append(np.eye(c.size + 1, dtype=np.float32)[np.where(codes < 0, c.size, codes)])
        else:
            values = table.values[c.name]
            empty = np.isnan(values)
            unit = (np.where(empty, c.lower, values) - c.lower) / (c.upper - c.lower)
            blocks += [unit[:, None].astype(np.float32), empty[:, None].astype(np.float32)]
    labels = table.codes[target]
    return np.concatenate(blocks, axis=1), np.where(labels < 0, schema[target].size, labels).astype(np.int32)


def _utility(real, synthetic, schema, target: str, seed: int) -> dict[str, Any]:
    from jaxdp import utility  # optax: loaded when the report predicts a target

    column = schema[target]
    if not isinstance(column, CategoricalColumn):
        raise ValueError(f"the utility test's target {target!r} must be a categorical column")
    classes = column.size + column.nullable  # an empty target cell is a class of its own
    x, y = _features(real, schema, target)
    order = np.asarray(jax.random.permutation(jax.random.key(seed), len(y)))
    test = order[: max(1, int(TEST_SHARE * len(y)))]
    train = order[len(test) :]
    xs, ys = _features(synthetic, schema, target)

    def scores(train_x, train_y) -> dict[str, float]:
        w, b = utility.fit_logistic(train_x, train_y, classes)
        predicted = utility.predict(w, b, x[test])
        return {
            "macro_f1": utility.macro_f1(y[test], predicted, classes),
            "accuracy": float(np.mean(predicted == y[test])),
        }

    return {
        "target": target,
        "test_rows": len(test),
        "train_on_real": scores(x[train], y[train]),
        "train_on_synthetic": scores(xs, ys),
    }


def _sdmetrics(real: RawTable, synthetic: RawTable, schema: TableSchema) -> dict[str, Any] | None:
    """sdmetrics' own QualityReport scores, where sdmetrics is installed (None otherwise)."""
    try:
        import pandas as pd
        import sdmetrics
        from sdmetrics.reports.single_table import QualityReport
    except ImportError:
        return None
    frames = [pd.DataFrame(t.columns()) for t in (real, synthetic)]
    metadata = {
        "columns": {
            c.name: {"sdtype": "categorical" if isinstance(c, CategoricalColumn) else "numerical"}
            for c in schema.columns
        }
    }
    report = QualityReport()
    report.generate(*frames, metadata, verbose=False)
    properties = report.get_properties()
    return {
        "version": sdmetrics.__version__,
        **{row["Property"]: float(row["Score"]) for _, row in properties.iterrows()},
        "Overall": float(report.get_score()),
    }
