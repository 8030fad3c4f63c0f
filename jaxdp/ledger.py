"""The privacy ledger: one entry per private primitive a run invoked, checked against the plan.

The ledger is rebuilt on the host from the `Charge`s a mechanism put in each round's Info.
`check_ledger` proves that every entry was paid for by the plan (same primitive, sensitivity,
noise scale and count, compared at the float32 precision the draws used) and that the plan fits
the budget; each entry's rho is the plan's exact float64 cost. This module sits below the loop
(`jaxdp.loop` audits every run with it) and below the replay (`jaxdp.audit`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import numpy as np

from jaxdp import gdp, pld
from jaxdp.accounting import CONVERSIONS, BudgetExceededError, Plan, epsilon_from_rho
from jaxdp.noise import PRIMITIVES


class AuditError(BudgetExceededError):
    """The ledger does not match the plan: a draw was not paid for, or the plan was not kept."""


@dataclasses.dataclass(frozen=True)
class LedgerEntry:
    """One invocation of a private primitive."""

    round: int
    primitive: str
    sensitivity: float
    scale: float
    count: int
    rho: float
    label: str

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _entries(info) -> Iterator[tuple[int, str, float, float, int]]:
    for charge in info.charges:
        primitive = np.atleast_1d(np.asarray(charge.primitive))
        if primitive.ndim != 1:
            raise ValueError(
                f"ledger_from_info takes one run's Info (charges stacked over rounds, shape "
                f"(rounds,)), got charges of shape {primitive.shape}; for run_many's batched Info "
                "use ManyResult.ledgers"
            )
        sensitivity = np.atleast_1d(np.asarray(charge.sensitivity, np.float32))
        scale = np.atleast_1d(np.asarray(charge.scale, np.float32))
        count = np.atleast_1d(np.asarray(charge.count))
        for t in range(primitive.shape[0]):
            if count[t] > 0:  # a charge with count 0 is a primitive that did not run
                yield t, PRIMITIVES[int(primitive[t])], sensitivity[t], scale[t], int(count[t])


def ledger_from_info(info) -> list[LedgerEntry]:
    """Unmatched ledger (rho and label filled by `check_ledger`), in round order."""
    rows = sorted(_entries(info), key=lambda e: e[0])
    return [
        LedgerEntry(t, prim, float(sens), float(scale), count, math.nan, "")
        for t, prim, sens, scale, count in rows
    ]


def check_ledger(ledger: list[LedgerEntry], plan: Plan, *, complete: bool = True) -> None:
    """Match every ledger entry to a planned charge, in place of its rho and label.

    Args:
        ledger: entries from `ledger_from_info`; their `rho` and `label` are filled in.
        plan: the mechanism's plan.
        complete: if True, every planned charge must have been spent exactly as planned.

    Raises:
        AuditError: an entry no planned charge pays for, or (complete) a planned charge unspent,
            or a plan over its budget.
    """
    pld.check(plan)
    remaining = [c.times for c in plan.charges]
    for i, entry in enumerate(ledger):
        for j, c in enumerate(plan.charges):
            if (
                remaining[j] > 0
                and c.primitive == entry.primitive
                and c.count == entry.count
                and np.float32(c.sensitivity) == np.float32(entry.sensitivity)
                and np.float32(c.scale) == np.float32(entry.scale)
            ):
                remaining[j] -= 1
                ledger[i] = dataclasses.replace(entry, rho=c.rho / c.times, label=c.label)
                break
        else:
            raise AuditError(
                f"round {entry.round}: {entry.primitive} (sensitivity {entry.sensitivity:.6g}, "
                f"scale {entry.scale:.6g}, count {entry.count}) is not in the plan"
            )
    if complete and any(remaining):
        unspent = [c.label for c, r in zip(plan.charges, remaining, strict=True) if r]
        raise AuditError(f"planned charges not spent as planned: {unspent}")


def rho_spent(ledger: list[LedgerEntry]) -> float:
    """Total rho of a checked ledger (exact float64 sum)."""
    return math.fsum(e.rho for e in ledger)


def budget_fields(plan: Plan, ledger: list[LedgerEntry], *, fixed: bool) -> dict:
    """A report's budget fields for a checked ledger spent under `plan`.

    `epsilon_zcdp` converts the rho spent at the plan's delta (its zCDP conversion, the exact one
    for a PLD or GDP calibration); `epsilon_pld` is the ledger's privacy-loss-distribution epsilon
    (`jaxdp.pld.pld_epsilon`) where the run's charges were `fixed` before it started, else None
    (adaptive rounds: no PLD filter here); `epsilon_gdp` is the ledger's Gaussian-DP epsilon
    (`jaxdp.gdp.spent_epsilon`) where the plan was calibrated by it ("gdp": every draw an exact
    discrete Gaussian, under its filter), else None; `accountant` names the one whose figure is
    `epsilon_spent`: "pld" or "gdp" where the plan was calibrated by it and it is the tighter,
    else "zcdp". A plan with only a rho budget (what preprocessing left) has no delta: None for
    each.
    """
    spent = rho_spent(ledger)
    fields = {
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "rho_budget": plan.rho_budget,
        "rho_spent": spent,
        "accountant": "zcdp",
        "epsilon_spent": None,
        "epsilon_zcdp": None,
        "epsilon_pld": None,
        "epsilon_gdp": None,
        "conversion": plan.conversion,
    }
    if plan.delta is None:
        return fields
    zcdp = epsilon_from_rho(spent, plan.delta, plan.conversion if plan.conversion in CONVERSIONS else "exact")
    by_pld = pld.pld_epsilon(pld.ledger_charges(ledger), plan.delta) if fixed and ledger else None
    by_gdp = None
    if plan.conversion == "gdp" and ledger:
        mu2 = gdp.charges_mu2((e.primitive, e.sensitivity, e.scale, e.count) for e in ledger)
        by_gdp = gdp.spent_epsilon(mu2, plan.delta)
    fields |= {"epsilon_zcdp": zcdp, "epsilon_pld": by_pld, "epsilon_gdp": by_gdp}
    if plan.conversion == "pld" and by_pld is not None and by_pld < zcdp:
        return fields | {"accountant": "pld", "epsilon_spent": by_pld}
    if by_gdp is not None and by_gdp < zcdp:
        return fields | {"accountant": "gdp", "epsilon_spent": by_gdp}
    return fields | {"epsilon_spent": zcdp}
