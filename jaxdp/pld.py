"""Privacy-loss-distribution (PLD) accounting of a fixed plan, through Google's `dp_accounting`.

jaxdp's budget is zCDP (`jaxdp.accounting`). For a plan fixed before the run (every charge known
in advance: Independent, Gaussian, MST, PrivBayes and the fixed-round mechanisms), the privacy
loss distribution of the whole composition gives the tightest (epsilon, delta) a theorem allows
for the profiles used; for a composition of Gaussians it spends about 10% more rho than the
Canonne-Kamath-Steinke conversion at delta = 1e-9 (bench/HISTORY.md, "PLD accounting").

The profile of each primitive (`charge_pld`), all composed by `dp_accounting`'s PLD (Meiser &
Mohammadi 2018; Koskela et al. 2020; Doroshenko et al. 2022, "connect the dots"), pessimistic
estimates throughout, so every epsilon here is an upper bound:
- discrete Gaussian of scale sigma on integer counts with declared L2 sensitivity sqrt(k): the
  exact PLD of k one-dimensional discrete Gaussians with shift 1 (Canonne, Kamath & Steinke
  2020, Sec. 2): jaxdp measures unweighted marginal counts with independent noise in every cell,
  so neighbours move at most k cells by one each (k = m marginals under add-remove, 2 m under
  replace-one), and fewer moved cells compose fewer such losses. A declared sensitivity whose
  square is not a whole number has no profile here.
- Gaussian (float noise): `from_gaussian_mechanism` at the declared sensitivity (float noise
  does not meet its stated delta at all, `jaxdp.noise`; kept so its runs report a figure).
- discrete Laplace (L1 sensitivity k on integer counts): k discrete Laplace losses of shift 1,
  by the same argument; Laplace (float): `from_laplace_mechanism` on k unit shifts. Both hold
  only while no cell moves by more than one (no mechanism measures with Laplace noise today).
- exponential mechanism and Gumbel top-k (epsilon = 2 sensitivity / scale a selection, k
  selections for top-k, Durfee & Rogers 2019): the pure epsilon-DP profile
  (`from_privacy_parameters`), all that this module proves of them. jaxdp's zCDP accounting
  uses their bounded-range bound epsilon^2 / 8 (Cesar & Rogers 2021), which composes better over
  many selections, so `plan_epsilon` reports the smaller of the two epsilons: both are
  guarantees.

No adaptive run is accounted here: AIM's rounds choose their noise from earlier releases, and a
PLD of the realised charges is a guarantee only with a filter proved for that composition; AIM
keeps the zCDP filter (`jaxdp.selection.AIMSelection`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

from jaxdp import _checks
from jaxdp.accounting import BudgetExceededError, Plan, PlannedCharge, cdp_epsilon

# dp_accounting's grid of privacy-loss values; its pessimistic estimate rounds every loss up to
# the grid, so a coarser grid only overstates epsilon (1e-4: within 1e-3 of the exact epsilon
# on the plans here, tests/privacy/test_pld.py)
DISCRETISATION = 1e-4
# relative slack for a squared sensitivity read as a whole number of moved cells: the ledger holds
# sensitivities in float32 (sqrt(14) squared there is 14 + 5e-7)
_WHOLE = 1e-6

GAUSSIANS = ("discrete_gaussian", "gaussian")
SELECTIONS = ("exponential", "gumbel_top_k", "discrete_exponential", "discrete_top_k")


def moved_cells(primitive: str, sensitivity: float) -> int | None:
    """How many counts a neighbour moves by one for a measurement's declared sensitivity (L2 for
    a Gaussian: its square; L1 for a Laplace: itself), or None where that is not a whole number."""
    cells = sensitivity**2 if primitive in GAUSSIANS else sensitivity
    whole = round(cells)
    if whole < 1 or abs(cells - whole) > _WHOLE * whole:
        return None
    return whole


@functools.lru_cache(maxsize=512)
def _charge_pld(primitive: str, sensitivity: float, scale: float, count: int, times: int):
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    if primitive in SELECTIONS:
        epsilon = 2.0 * sensitivity / scale
        pure = common.DifferentialPrivacyParameters(epsilon, 0.0)
        return pld.from_privacy_parameters(pure, value_discretization_interval=DISCRETISATION).self_compose(
            count * times
        )
    cells = moved_cells(primitive, sensitivity)
    if cells is None:
        return None
    if primitive == "discrete_gaussian":
        one = pld.from_discrete_gaussian_mechanism(
            scale, sensitivity=1, value_discretization_interval=DISCRETISATION
        )
    elif primitive == "gaussian":
        one = pld.from_gaussian_mechanism(scale, sensitivity=1, value_discretization_interval=DISCRETISATION)
    elif primitive == "discrete_laplace":
        # jaxdp's discrete Laplace of scale b: P(x) proportional to exp(-|x| / b)
        one = pld.from_discrete_laplace_mechanism(
            1.0 / scale, sensitivity=1, value_discretization_interval=DISCRETISATION
        )
    elif primitive == "laplace":
        one = pld.from_laplace_mechanism(scale, sensitivity=1, value_discretization_interval=DISCRETISATION)
    else:
        raise ValueError(f"unknown primitive {primitive!r}")
    return one.self_compose(cells * times)


def charge_pld(charge: PlannedCharge):
    """The PLD of one planned charge (all its `times`), or None where this module has no profile
    for it (module docstring)."""
    return _charge_pld(
        charge.primitive, float(charge.sensitivity), float(charge.scale), charge.count, charge.times
    )


def pld_epsilon(charges: Iterable[PlannedCharge], delta: float) -> float | None:
    """The PLD epsilon at `delta` of the charges composed, or None where a charge has no profile
    or there are none."""
    delta = _checks.open_unit(delta, "delta")
    composed = None
    for charge in charges:
        part = charge_pld(charge)
        if part is None:
            return None
        composed = part if composed is None else composed.compose(part)
    return None if composed is None else float(composed.get_epsilon_for_delta(delta))


def plan_epsilon(charges: Iterable[PlannedCharge], delta: float) -> tuple[float, str]:
    """(epsilon, accountant) of a fixed plan's charges at `delta`: the smaller of the PLD and the
    zCDP (exact conversion) epsilons, and which of "pld" and "zcdp" states it."""
    charges = tuple(charges)
    zcdp = cdp_epsilon(math.fsum(c.rho for c in charges), delta)
    pld = pld_epsilon(charges, delta)
    return (pld, "pld") if pld is not None and pld < zcdp else (zcdp, "zcdp")


def check(plan: Plan) -> Plan:
    """Return `plan`, or raise BudgetExceededError: its rho over budget (`Plan.check`), or, for a
    plan calibrated here (conversion "pld"), its charges' `plan_epsilon` above its epsilon."""
    plan.check()
    if plan.conversion == "pld":
        spent, _ = plan_epsilon(plan.charges, plan.delta)
        if spent > plan.epsilon:
            raise BudgetExceededError(
                f"plan spends epsilon={spent:.6g} at delta={plan.delta:.3g} by its privacy loss "
                f"distribution but the budget is epsilon={plan.epsilon:.6g}"
            )
    return plan


def ledger_charges(entries: Iterable) -> tuple[PlannedCharge, ...]:
    """A run's ledger entries (`jaxdp.ledger.LedgerEntry`) as planned charges, the entries with
    the same primitive, sensitivity, scale and count counted as one charge's `times` (so that
    `pld_epsilon` composes them by repeated squaring)."""
    times: dict[tuple, int] = {}
    for e in entries:
        key = (e.primitive, float(e.sensitivity), float(e.scale), int(e.count))
        times[key] = times.get(key, 0) + 1
    return tuple(PlannedCharge(k[0], k[0], k[1], k[2], k[3], n) for k, n in times.items())


def scaled(charges: Iterable[PlannedCharge], factor: float) -> tuple[PlannedCharge, ...]:
    """The charges of the same plan built for `factor` times its rho: every noise scale divided
    by sqrt(factor) (each primitive's rho is quadratic in 1 / scale)."""
    root = math.sqrt(factor)
    return tuple(
        PlannedCharge(c.label, c.primitive, c.sensitivity, c.scale / root, c.count, c.times) for c in charges
    )


def rho_factor(
    charges: Iterable[PlannedCharge], epsilon: float, delta: float, *, tolerance: float = 1e-4
) -> float:
    """The largest factor f >= 1 (to `tolerance`) by which the plan's rho can grow, every scale
    divided by sqrt(f), with `plan_epsilon` still at most `epsilon`; 1 where the zCDP conversion
    is already the tighter (the PLD gains nothing)."""
    epsilon = _checks.positive_finite(epsilon, "epsilon")
    charges = tuple(charges)

    def fits(factor: float) -> bool:
        return plan_epsilon(scaled(charges, factor), delta)[0] <= epsilon

    if not fits(1.0 + tolerance):
        return 1.0
    low, high = 1.0 + tolerance, 2.0
    while fits(high):  # pragma: no cover - a PLD more than doubling rho is beyond these profiles
        low, high = high, 2.0 * high
    while high - low > tolerance:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
