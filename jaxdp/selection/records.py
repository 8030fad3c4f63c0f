"""What a host-scheduled run's selection rule releases and carries between rounds, all public: each
round's `RoundRecord`, the `Schedule` of noise scales and charges the rule anneals, and what one
round's selection did (`Selected`)."""

from __future__ import annotations

from typing import NamedTuple

from jaxdp import gdp, noise
from jaxdp.accounting import (
    charge_rho,
)
from jaxdp.types import Charge


class RoundRecord(NamedTuple):
    """What round t of AIM released about its selection (all public).

    selected: candidate index r_t; sigma, epsilon: the round's noise scale and selection epsilon;
    score_sensitivity: Delta_t = max_{r in C_t} w_r (times the relation's L1 sensitivity);
    n_eligible: |C_t|; selected_error: ||M_{r_t}(p_hat_{t-1}) - y_t||_1 (counts).
    """

    selected: int
    sigma: float
    epsilon: float
    score_sensitivity: float
    n_eligible: int
    selected_error: float


class Schedule(NamedTuple):
    """The annealing state between rounds (host floats, all public).

    sigma, epsilon: the next round's parameters (epsilon None: the filter's final round comes
    next); charges: (primitive code, sensitivity, scale) of every primitive invoked, in order
    (the realised plan, and the one source of the rho spent); done: the budget is spent;
    kept: what the rule keeps of its selections' releases for later rounds (None: nothing; the
    noisy errors of `jaxdp.selection.NoisyErrorSelection`, the measurement plan of
    `jaxdp.selection.SwiftSelection`); smoothed: the charges are costed by the Gaussian-DP
    accountant (`jaxdp.gdp.charge_mu`, in mu^2 / 2), as the rule's draws are (`HostRule.smoothed`).
    """

    sigma: float
    epsilon: float | None
    charges: tuple[tuple[int, float, float], ...]
    done: bool
    kept: tuple | None = None
    smoothed: bool = False

    @property
    def rho_spent(self) -> float:
        """The budget the charges so far spent, summed in order (as the filter adds them up): rho,
        or mu^2 / 2 where `smoothed`."""
        if self.smoothed:
            return sum(
                gdp.charge_mu(noise.PRIMITIVES[code], sens, scale) ** 2 / 2.0
                for code, sens, scale in self.charges
            )
        return sum(charge_rho(noise.PRIMITIVES[code], sens, scale) for code, sens, scale in self.charges)


class Selected(NamedTuple):
    """What a round's selection did (all public): the picked candidate; the selection's Charge;
    the (primitive code, sensitivity, scale) the schedule records for it (None: the pick read
    released values only and drew nothing); the epsilon of an exponential-mechanism selection
    (0 otherwise); the schedule's `kept` after it (None: unchanged); the rho the pick's
    measurement spends (None: the round's, `round_parameters`); whether it is the run's last."""

    choice: int
    charge: Charge
    entry: tuple[int, float, float] | None
    epsilon: float
    kept: tuple | None = None
    measure_rho: float | None = None
    last: bool = False


def exponential_selected(
    choice, charge: Charge, primitive: str, sensitivity: float, scale: float
) -> Selected:
    """The `Selected` of an exponential mechanism at `scale` for score sensitivity `sensitivity`."""
    entry = (noise.PRIMITIVES.index(primitive), float(sensitivity), float(scale))
    return Selected(int(choice), charge, entry, 2.0 * float(sensitivity) / float(scale))
