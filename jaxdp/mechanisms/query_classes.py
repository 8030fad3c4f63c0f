"""A mechanism's query classes: what `jaxdp.adaptive` is given of each (`QueryClass`: queries, a
rule, rounds, a share of the budget) and what it builds of it (`SelectionClass`: the true counts,
the rule and the measurement calibrated to the class's share, and their planned charges), with
the checks that name a part that does not fit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.domain import DataError, Dataset
from jaxdp.families.base import ClassShape
from jaxdp.measurement import GaussianCounts
from jaxdp.mechanisms._common import (
    class_counts,
    round_shares,
)
from jaxdp.queries import (
    LinearThresholdQueries,
    MarginalWorkload,
    MixedMarginalQueries,
    RandomLinearThresholds,
)
from jaxdp.selection import Rule, SelectionBudget
from jaxdp.types import MARGINALS, Sensitive, pytree_dataclass, static_field


@dataclasses.dataclass(frozen=True)
class QueryClass:
    """One class of queries a mechanism selects from.

    Args:
        queries: a `MarginalWorkload`, or threshold queries over a mixed-type domain
            (`jaxdp.queries.MixedMarginalQueries`, `LinearThresholdQueries`,
            `RandomLinearThresholds`).
        select: the rule that picks from them (`jaxdp.selection`).
        rounds: the rounds that select from this class.
        weight: its share of the budget, relative to the other classes'.
        label: names its charges in the plan ("select {label}", "measure {label}").
    """

    queries: Any
    select: Rule
    rounds: int
    weight: float = 1.0
    label: str | None = None


@pytree_dataclass
class SelectionClass:
    """A query class as built into a mechanism: its true int32 counts (private), its calibrated
    rule and measurement (None: nothing measured), its marginals (None for threshold queries)."""

    counts: Sensitive
    selection: Rule
    measurement: GaussianCounts | None
    workload: MarginalWorkload | None = static_field()
    n_queries: int = static_field()
    n_candidates: int = static_field()
    picks: int = static_field()


def relation_names(relations) -> str:
    return " or ".join(r.value for r in relations)


def given_classes(workload, select, rounds, classes, label) -> tuple[QueryClass, ...]:
    """The mechanism's query classes: `classes`, or the one made of (workload, select, rounds)."""
    if classes is None:
        if workload is None or select is None or rounds is None:
            raise ValueError("give workload, select and rounds (or classes)")
        return (QueryClass(workload, select, rounds, label=label),)
    if workload is not None or select is not None or rounds is not None:
        raise ValueError("give either classes or (workload, select, rounds), not both")
    classes = tuple(classes)
    if not classes or not all(isinstance(c, QueryClass) for c in classes):
        raise TypeError("classes must be a non-empty sequence of jaxdp.mechanisms.QueryClass")
    return classes


def build_class(i, spec, data, n, family, measure, rho, *, alpha, relation, noise, mesh, several):
    """(the class built: counts, calibrated rule and measurement; what the family is told of it;
    its planned charges)."""
    where = f"classes[{i}]: " if several else ""
    rule = spec.select
    if not isinstance(rule, Rule):
        raise TypeError(
            f"{where}select must be a jaxdp.selection.Rule (e.g. MaxError()), got {type(rule).__name__}"
        )
    if relation not in rule.relations:
        raise ValueError(
            f"{where}{type(rule).__name__} scores under {relation_names(rule.relations)}, "
            f"not {relation.value}"
        )
    if rule.candidates not in family.candidates:
        raise ValueError(
            f"{where}{type(family).__name__} does not fit picks of {rule.candidates} ({type(rule).__name__})"
        )
    queries = checked_queries(spec.queries, data, where)
    workload = queries if isinstance(queries, MarginalWorkload) else None
    if workload is None and rule.candidates == MARGINALS:
        raise ValueError(f"{where}{type(rule).__name__} picks marginals; threshold queries have none")
    n_queries = workload.n_queries if workload is not None else len(queries)
    rounds = _checks.positive_int(spec.rounds, f"{where}rounds")
    n_candidates = rule.n_candidates(workload, n_queries)
    k = _checks.positive_int(rule.picks(n_candidates), f"{where}k (picks per round)")
    if not rule.repeats and rounds * k > n_candidates:
        unit = "marginals" if rule.candidates == MARGINALS else "counting queries"
        raise ValueError(
            f"{where}rounds x picks per round = {rounds} x {k} exceeds the {n_candidates} {unit} of the "
            f"{'workload' if workload is not None else 'class'} (each is measured at most once)"
        )
    selects, measures = rule.charges_per_round() > 0, measure is not None
    if alpha is not None and not (selects and measures):
        raise ValueError("alpha splits a round between a private selection and a measurement; this has one")
    if selects and measures:
        alpha = _checks.fraction(0.5 if alpha is None else alpha, "alpha", allow_one=False)
        rho_select, rho_measure = round_shares(rho, rounds, alpha)
        budget = SelectionBudget(rho_select, rho_select * rounds, rounds)
    else:
        rho_select = rho_measure = rho / rounds
        budget = SelectionBudget(rho_select, rho, rounds)
    counts = class_counts(data, queries, mesh)
    selection, charges = rule.calibrate(budget, n, noise)
    measurement = None
    if measures:
        measurement, measure_charges = measure.calibrate(
            workload,
            candidates=rule.candidates,
            k=k,
            n_candidates=n_candidates,
            relation=relation,
            sigma_for=lambda s: noise_module.count_sigma(s, rho_measure, noise),
            noise=noise,
            times=rounds,
        )
        charges = charges + measure_charges
    if spec.label is not None:
        charges = tuple(dataclasses.replace(c, label=f"{c.label} {spec.label}") for c in charges)
    part = SelectionClass(counts, selection, measurement, workload, n_queries, n_candidates, k)
    return part, ClassShape(queries, rounds, k, rule.candidates, rounds * k), charges


def checked_queries(queries, data: Dataset, where: str):
    """The class's queries, checked against the data's domain (a key-defined family of linear
    thresholds is materialised: its candidates are picked by index)."""
    if isinstance(queries, MarginalWorkload):
        if queries.sizes != data.domain.sizes:
            raise DataError(f"{where}workload was built for a different domain than the data's")
        return queries
    if not isinstance(queries, MixedMarginalQueries | LinearThresholdQueries | RandomLinearThresholds):
        raise TypeError(
            f"{where}queries must be a MarginalWorkload or threshold queries, got {type(queries).__name__}"
        )
    if tuple(queries.sizes) != tuple(data.domain.sizes) or queries.n_numeric != len(data.domain.numeric):
        raise DataError(f"{where}queries were built for a different domain than the data's")
    return queries.materialize() if isinstance(queries, RandomLinearThresholds) else queries
