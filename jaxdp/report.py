"""What a release says of itself: the `Result` of a run, its privacy report, and (for the data
holder only) its errors against the real table.

The report is the command line's `--report`: the budget and what the ledger spent, the relation,
the noise, the ledger itself, the release's size and kind, and the preprocessing, compression and
error bounds where a release has them. Its fields are an interface other tools read.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxdp._version import __version__
from jaxdp.accounting import Plan
from jaxdp.coding import TableCoding
from jaxdp.domain import Dataset, Domain
from jaxdp.evaluate import answer_errors, fractions, workload_errors
from jaxdp.ledger import LedgerEntry, budget_fields
from jaxdp.mechanisms.registry import mechanism_spec
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Neighboring


@dataclasses.dataclass(frozen=True)
class Result:
    """What `synthesize` returns.

    Attributes:
        data: the release, in the container the input came in: synthetic records (DataFrame,
            dict of columns, NumPy array or Dataset), or for mechanisms that release answers
            (gaussian) the noisy answers (a DataFrame with columns marginal, cell, answer when
            the input was one; otherwise a (n_queries,) float64 array).
        report: the privacy report (the command line's `--report`), safe to publish except
            `seconds` (a timing side channel on the table's size).
        ledger: one entry per private primitive invoked, audited against the plan.
        error_bounds: the mechanism's uncertainty quantification, or None if it has none.
        synthetic: the synthetic records as a `Dataset` (None for answer releases).
        answers: the released noisy answers (None for record releases).
        mechanism: the built mechanism's public part (`jaxdp.contract.public_mechanism`): its
            plan, workload and settings, its private inputs withheld; it cannot run again.
        state: its final state.
        plan: the release's plan, which its ledger was audited against: the budget, the
            preprocessing's charges (private binning) and the mechanism's.
        coding: how a table schema's columns were coded for the mechanism (None for inputs
            already coded: a `Dataset`, a sizes-form domain).
        model: the release's model (`jaxdp.models.Model`): what it released, to sample again,
            condition, query, judge and save (no private value in it).
    """

    data: Any
    report: dict[str, Any]
    ledger: list[LedgerEntry]
    error_bounds: Any | None
    synthetic: Dataset | None = dataclasses.field(default=None, repr=False)
    answers: np.ndarray | None = dataclasses.field(default=None, repr=False)
    mechanism: Any = dataclasses.field(default=None, repr=False)
    state: Any = dataclasses.field(default=None, repr=False)
    plan: Plan | None = dataclasses.field(default=None, repr=False)
    coding: TableCoding | None = dataclasses.field(default=None, repr=False)
    model: Any = dataclasses.field(default=None, repr=False)


def privacy_report(
    name: str, mechanism, ledger: list[LedgerEntry], rows: int, answers: bool, seconds: float
) -> dict:
    """The report of a mechanism's run (before any preprocessing is merged in, `jaxdp.preprocess`).

    Args:
        name: the registry name.
        mechanism: the built mechanism (its plan and relation).
        ledger: the run's audited ledger.
        rows: the released records, or answers.
        answers: whether the release is noisy answers rather than records.
        seconds: the job's time so far (a timing side channel on the table's size).
    """
    return {
        "mechanism": name,
        # a fixed plan has its charges before the run (an adaptive one, AIM's, none)
        **budget_fields(mechanism.plan, ledger, fixed=bool(mechanism.plan.charges)),
        "relation": mechanism.relation.value,
        "noise": noise_name(ledger),
        "ledger": [e.to_json() for e in ledger],
        "seconds": seconds,
        "rows": rows,
        "output": "noisy answers" if answers else "synthetic records",
        "preprocessing": None,
        "jaxdp_version": __version__,
    }


# The report's "noise": what the measurements added, or what the selections drew where a
# mechanism measures nothing (DualQuery, FEM).
_MEASUREMENT_NOISE = {
    "discrete_gaussian": "discrete-gaussian",
    "discrete_laplace": "discrete-laplace",
    "gaussian": "float-gaussian",
    "laplace": "float-laplace",
}
_SELECTION_NOISE = {
    "discrete_exponential": "exact-exponential",
    "discrete_top_k": "exact-exponential",
    "exponential": "float-gumbel",
    "gumbel_top_k": "float-gumbel",
}


def noise_name(ledger: list[LedgerEntry]) -> str:
    """The report's `noise` field from the primitives the ledger records, e.g.
    "discrete-gaussian" (exact integer noise) or "float-gaussian" (`noise="float"`); several
    kinds are joined with "+"."""
    used = {e.primitive for e in ledger}
    names = sorted({_MEASUREMENT_NOISE[p] for p in used if p in _MEASUREMENT_NOISE})
    names = names or sorted({_SELECTION_NOISE[p] for p in used if p in _SELECTION_NOISE})
    return "+".join(names) or "none"


def release_errors(real: Dataset, result: Result, workload: MarginalWorkload) -> dict[str, Any]:
    """max_abs, mean_l1, rmse of a release against the real table (plus "relaxed": the fitted
    distribution's own errors, for every mechanism whose spec is `relaxed`).

    Uses the real data: NOT differentially private, for the data holder only.
    """
    if result.answers is not None:
        relation = result.mechanism.relation
        estimated = result.answers if relation is Neighboring.REPLACE_ONE else result.answers / len(real)
        return answer_errors(fractions(real, workload), estimated, workload)
    errors: dict[str, Any] = workload_errors(real, result.synthetic, workload)
    if mechanism_spec(result.report["mechanism"]).relaxed:
        relaxed = np.asarray(result.mechanism.relaxed_answers(result.state), np.float64)
        errors["relaxed"] = answer_errors(fractions(real, workload), relaxed, workload)
    return errors


def answers_table(workload: MarginalWorkload, domain: Domain, answers: np.ndarray) -> dict[str, list]:
    """Noisy answers as columns marginal ("a|b|c"), cell (row-major index), answer."""
    names = ["|".join(n) for n in workload.names(domain)]
    table: dict[str, list] = {"marginal": [], "cell": [], "answer": []}
    for i, (start, cells) in enumerate(zip(workload.offsets, workload.cells, strict=True)):
        table["marginal"] += [names[i]] * cells
        table["cell"] += list(range(cells))
        table["answer"] += [float(a) for a in answers[start : start + cells]]
    return table
