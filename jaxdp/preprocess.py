"""A raw table's way into a mechanism and a release's way back, with the budget they share.

`prepare` validates nothing new (the table is already a `RawTable`): it settles each numeric
column's cut points, running the private quantile measurement (`jaxdp.binning`) first when the
schema asks for it, codes the table (`jaxdp.coding`) and says what budget is left for the
mechanism. `merge` puts the preprocessing's ledger, plan and description into the mechanism's
report, so that a release has one plan, one ledger and one report.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaxdp import _checks, binning, loop, pld
from jaxdp.accounting import Plan
from jaxdp.coding import TableCoding
from jaxdp.domain import Dataset, RawTable
from jaxdp.keys import preprocess_key, require_key
from jaxdp.ledger import LedgerEntry, budget_fields, rho_spent
from jaxdp.types import Key, Neighboring


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A coded table and the budget left for the mechanism.

    Attributes:
        coding: how the table was coded (public) and how to decode the release.
        dataset: the coded private records.
        budget: the mechanism factory's budget keywords: epsilon and delta when nothing was
            charged before it, else rho (what the preprocessing left).
        plan: the release's budget with the preprocessing's planned charges.
        ledger: the preprocessing's ledger entries (round -1: before the mechanism's rounds).
    """

    coding: TableCoding
    dataset: Dataset
    budget: dict[str, Any]
    plan: Plan
    ledger: list[LedgerEntry]


def prepare(
    table: RawTable,
    *,
    real: bool,
    epsilon: float,
    delta: float,
    conversion: str,
    relation: Neighboring,
    key: Key,
    noise: str = "discrete",
    binning_share: float = binning.DEFAULT_BINNING_SHARE,
) -> Prepared:
    """Code a validated table for a mechanism, measuring private quantiles first if asked.

    Args:
        table: the private table, validated against its schema.
        real: keep numeric columns real (RAP++) instead of binning them.
        epsilon, delta, conversion: the release's whole budget.
        relation: the release's neighbouring relation.
        key: the release's root key; private binning runs from `jaxdp.keys.preprocess_key(key)`.
        noise: "discrete" (default) or "float", as for the mechanism.
        binning_share: the fraction of the budget's rho spent on private quantiles, when a
            column asks for them.

    Privacy:
        Public binning (declared `bins` or `edges`) reads only the schema and costs nothing.
        Private quantile binning (asked for, or the default) is one Gaussian measurement costing
        at most `binning_share` of the budget's rho, recorded in the ledger and the plan; the
        mechanism then gets the rho left, so the release's total stays within the budget
        (zCDP composes adaptively: the coding is a public function of released counts).
    """
    key = require_key(key)
    share = _checks.fraction(binning_share, "binning_share", allow_one=False)
    # a PLD calibration (conversion "pld") needs the whole budget for the mechanism's fixed plan
    # (`jaxdp.build`): this plan then only carries the release's budget, in zCDP
    plan = Plan.from_epsilon_delta(epsilon, delta, "exact" if conversion == "pld" else conversion)
    budget: dict[str, Any] = {"epsilon": epsilon, "delta": delta}
    ledger: list[LedgerEntry] = []
    cuts: dict[str, np.ndarray] = {}
    fine: dict[str, np.ndarray] = {}
    private = () if real else tuple(c for c in table.schema.numeric if binning.is_private(c))
    if not real:
        cuts = {c.name: binning.public_cuts(c) for c in table.schema.numeric if not binning.is_private(c)}
    if private and conversion in ("pld", "gdp"):
        raise ValueError(
            f"conversion {conversion!r} calibrates a whole (epsilon, delta) budget, and private bins would "
            f"spend part of it first (columns {', '.join(c.name for c in private)}): declare their bins "
            "(edges, or equal-width bins), or use conversion 'exact'"
        )
    if private:
        mechanism = binning.quantile_measurement(
            table, private, rho=plan.share(share), relation=relation, noise=noise
        )
        # a registry mechanism: checked for key reuse by the test suite, not on every release
        run = loop.run(mechanism, preprocess_key(key), check_keys=False)
        noisy = np.asarray(run.state.model.noisy_answers)
        cuts.update(binning.split_cuts(private, noisy))
        (entry,) = run.ledger  # one Gaussian measurement of every histogram
        # the noise's deviation in the answers' units: counts, or fractions of the public n
        scale = entry.scale if relation == Neighboring.ADD_REMOVE else entry.scale / len(table)
        fine = binning.split_fine_weights(private, noisy, cuts, scale)
        label = "private binning: fine histograms of " + ", ".join(c.name for c in private)
        ledger = [dataclasses.replace(e, round=-1, label=label) for e in run.ledger]
        for charge in mechanism.plan.charges:
            plan = plan.with_charge(dataclasses.replace(charge, label=label))
        budget = {"epsilon": None, "delta": None, "rho": plan.rho_budget - rho_spent(ledger)}
    coding = TableCoding(table.schema, cuts, real=real, private=frozenset(c.name for c in private), fine=fine)
    return Prepared(coding, coding.encode(table), budget, plan, ledger)


def merge(
    report: dict[str, Any],
    ledger: list[LedgerEntry],
    prepared: Prepared,
    mechanism_plan: Plan,
    *,
    fixed: bool,
):
    """The release's report, ledger and plan: the preprocessing's and the mechanism's together.

    Args:
        report: the mechanism's report (`jaxdp.execution.execute`).
        ledger: the mechanism's audited ledger.
        prepared: what `prepare` returned.
        mechanism_plan: the plan the mechanism's ledger was audited against (an adaptive one's
            realised plan).
        fixed: whether the mechanism's charges were all fixed before it ran (its declared plan
            has them): only then is the ledger's PLD epsilon a guarantee (`epsilon_pld`).

    Returns:
        (report, ledger, plan): the budget fields are the release's (epsilon, delta, rho_budget,
        conversion), `rho_spent` and the ledger cover both parts, and `preprocessing` says how
        every column was coded and what, if anything, looking at the data cost.
    """
    if mechanism_plan.conversion == "pld":  # calibrated for the whole budget: nothing preprocessed
        plan = mechanism_plan
    else:
        plan = prepared.plan
        for charge in mechanism_plan.charges:
            plan = plan.with_charge(charge)
    pld.check(plan)
    ledger = [*prepared.ledger, *ledger]
    preprocessing_rho = rho_spent(prepared.ledger)
    merged = {
        **report,
        **budget_fields(plan, ledger, fixed=fixed),
        "ledger": [e.to_json() for e in ledger],
        "preprocessing": {
            "columns": prepared.coding.describe(),
            "rho": preprocessing_rho,
            "reads_data": bool(prepared.ledger),
        },
    }
    return merged, ledger, plan
