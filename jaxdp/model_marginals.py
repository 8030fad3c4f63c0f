"""A model's answers as one table: the noisy marginals it measured, with their noise, and its own
answers to the workload, with their error bounds where the mechanism gives them (`Model.marginals`).

"The contingency table is the real product": the measured marginals are the release's raw
material (each cell's noisy count and the standard deviation of its noise, over the domain the run
measured: compressed where it merged rare values), and the model's answers are what its records
follow. Cells are named in the release's terms: labels, a numeric column's bins as `[lower, upper)`
in its units, `(empty)` for the empty cell, `merged: a|b` for a compressed attribute's merged code.

Post-processing of released values only.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from jaxdp import contract
from jaxdp.coding import TableCoding
from jaxdp.domain import Domain, NumericColumn
from jaxdp.types import Neighboring

COLUMNS = ("kind", "marginal", "cell", "value", "fraction", "std", "l1_bound", "domain")


def marginals_table(model: Any) -> dict[str, list]:
    """`Model.marginals`: the columns of COLUMNS, one row per cell (module docstring)."""
    table: dict[str, list] = {name: [] for name in COLUMNS}
    mechanism, state = model.mechanism, model.state
    labels = _labels(model.domain, model.coding)
    coded = [a.name for a in model.domain.categorical]  # what marginals' attributes index
    compressed = getattr(state, "compressed", None)
    if contract.releases(mechanism) == "answers":
        _noisy_answers(table, model, labels, coded)
        return table
    for measurement in getattr(state, "measurements", ()):
        names = [coded[a] for a in measurement.clique]
        cells = _cells(measurement.clique, labels, compressed)
        noisy = np.asarray(measurement.noisy, np.float64)
        sigma = np.broadcast_to(np.asarray(measurement.sigma, np.float64), noisy.shape)
        merged = compressed is not None and any(not compressed.kept[a].all() for a in measurement.clique)
        for cell, value, std in zip(cells, noisy, sigma, strict=True):
            _append(table, "measured", names, cell, float(value), None, float(std), None, merged)
    workload = mechanism.workload
    answers = np.asarray(mechanism.relaxed_answers(state), np.float64)
    bounds = (model.report.get("error_bounds") or {}).get("marginals")
    for j, clique in enumerate(workload.cliques):
        names = [coded[a] for a in clique]
        span = answers[workload.offsets[j] : workload.offsets[j] + workload.cells[j]]
        bound = bounds[j] if bounds else None
        for cell, fraction in zip(_cells(clique, labels, None), span, strict=True):
            _append(
                table,
                "model",
                names,
                cell,
                float(fraction) * model.rows,
                float(fraction),
                None,
                None if bound is None else bound["l1_bound"],
                bound is not None and bound.get("domain") == "compressed",
            )
    return table


def _noisy_answers(table, model, labels, coded) -> None:
    """A release of noisy answers (Gaussian): they are the measurements, in counts with their
    noise's standard deviation (fractions too under replace-one, where n is public)."""
    mechanism = model.mechanism
    workload = mechanism.workload
    answers = np.asarray(mechanism.relaxed_answers(model.state), np.float64)
    sigma = float(mechanism.classes[0].measurement.sigma)  # counts
    n = mechanism.n_records if mechanism.relation is Neighboring.REPLACE_ONE else None
    for j, clique in enumerate(workload.cliques):
        span = answers[workload.offsets[j] : workload.offsets[j] + workload.cells[j]]
        for cell, answer in zip(_cells(clique, labels, None), span, strict=True):
            count, fraction = (answer * n, answer) if n is not None else (answer, None)
            _append(
                table,
                "measured",
                [coded[a] for a in clique],
                cell,
                float(count),
                fraction,
                sigma,
                None,
                False,
            )


def _append(table, kind, names, cell, value, fraction, std, bound, compressed) -> None:
    for column, item in zip(
        COLUMNS,
        (
            kind,
            "|".join(names),
            cell,
            value,
            fraction,
            std,
            bound,
            "compressed" if compressed else "declared",
        ),
        strict=True,
    ):
        table[column].append(item)


def _labels(domain: Domain, coding: TableCoding | None) -> list[list[str]]:
    """Each coded attribute's values, named in the release's terms."""
    out = []
    for attribute in domain.categorical:
        column = (
            coding.schema[attribute.name]
            if coding is not None and attribute.name in coding.schema.names
            else None
        )
        if isinstance(column, NumericColumn):
            edges = [column.lower, *coding.cuts[column.name], column.upper]
            names = [f"[{lo:g}, {hi:g})" for lo, hi in itertools.pairwise(edges)]
            out.append([*names, "(empty)"] if column.nullable else names)
        elif attribute.labels is not None:
            out.append([label if label != "" else "(empty)" for label in attribute.labels])
        else:
            names = [str(code) for code in range(attribute.size)]
            if getattr(column, "nullable", False):  # the last code is the empty cell
                names[-1] = "(empty)"
            out.append(names)
    return out


def _cells(clique: tuple[int, ...], labels: list[list[str]], compressed) -> list[str]:
    """The cells of a marginal, row-major, over the compressed domain where given."""
    values = []
    for a in clique:
        if compressed is None or compressed.kept[a].all():
            values.append(labels[a])
            continue
        kept = [labels[a][v] for v in np.flatnonzero(compressed.kept[a])]
        values.append([*kept, "merged: " + "|".join(labels[a][v] for v in compressed.merged(a))])
    return ["|".join(cell) for cell in itertools.product(*values)]
