"""AIM's selection rule with budget annealing and a privacy filter (McKenna et al., VLDB 2022,
Algorithms 2-4), as a public part: `AIMSelection`.

Composed by `jaxdp.adaptive` with any family of marginals (Private-PGM's `GraphicalModel` for
`jaxdp.aim`, GEM's `GeneratorModel` for `jaxdp.aim_gem`, or PEP, MW, RAP, GEM), it drives the
mechanism round by round from the host (`jaxdp.mechanisms.host_loop.Annealed`):

- candidates: the downward closure W+ of the workload, weights w_r = sum_s c_s |r ∩ s|;
- round 0 (Algorithm 3): one Gaussian measurement of every 1-way candidate marginal;
- round t: quality score q_r = w_r (||M_r(D) - M_r(model)||_1 - sqrt(2/pi) sigma_t n_r) with
  sensitivity Delta_t = L1 * max_{r in C_t} w_r, exponential mechanism at epsilon_t, then a
  Gaussian measurement of the picked marginal at sigma_t;
- budget annealing (Algorithm 4): sigma halves and epsilon doubles when the last measurement moved
  the model's answer on the picked marginal by at most its expected noise sqrt(2/pi) sigma n_r;
- the privacy filter (Theorem 1): when what is left cannot pay two more rounds, the next round
  spends exactly the rest and is the last.

Counts under both relations (n is public under replace-one, so counts and fractions carry the
same information): the sensitivities are n times the fraction ones there. Integer counts are
scored exactly (`grid_quality_scores`) and selected by the exact exponential mechanism
(`noise="discrete"`, the default), or on float scores by Gumbel-max (`noise="float"`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from jaxdp import _checks, noise, samplers
from jaxdp.queries import MarginalWorkload, aim_weights, downward_closure
from jaxdp.selection.host_rule import HostRule
from jaxdp.selection.records import Schedule
from jaxdp.types import Neighboring, pytree_dataclass, static_field

PAPER_ALPHA = 0.9


FEW_MARGINALS_ALPHA = 0.95


# AIM's round 0 measures each 1-way count with noise at most 1/ONE_WAY_RESOLUTION of the records
# (`AIMSelection.resolution`), spending at most alpha / FEWEST_ROUNDS of the budget on it
# (T' >= FEWEST_ROUNDS d1); both measured in bench/HISTORY.md, "Small tables"
ONE_WAY_RESOLUTION = 150.0


FEWEST_ROUNDS = 2.0


# ... and where even the whole measurement share spent on the 1-way counts (T' = d1) would measure
# them with noise above n / LOW_SIGNAL, no later round can measure a marginal usefully: round 0
# then spends alpha rho on them (T' = d1) and the one round left spends the rest
LOW_SIGNAL = 20.0


# ... and only where some noisy count of a WIDE attribute (the compression's `min_values`) is below
# AT_RISK sigmas, MST's merge threshold: a value the noise could merge or lose. Narrow attributes
# are not merged, and their rare values gain less from the top-up than the paper's many rounds
# give (16 binary attributes of 50,000 records at epsilon 0.1: bench/HISTORY.md, "Small tables")
AT_RISK = 3.0


WIDE = 20


def estimated_total(noisy: Sequence[np.ndarray]) -> float:
    """The table's size from noisy 1-way marginals measured at one noise scale: each attribute's
    summed counts, averaged by their inverse variances (an attribute of k values sums k noisy
    counts: variance k sigma^2). Post-processing of released counts."""
    sums = np.asarray([np.sum(counts, dtype=np.float64) for counts in noisy])
    weights = 1.0 / np.asarray([np.size(counts) for counts in noisy], np.float64)
    return float(weights @ sums / weights.sum())


def default_alpha(marginals: int, rounds: int) -> float:
    """AIM's default measurement share for a workload of `marginals` marginals and a run of at
    most `rounds` rounds (T).

    Where T rounds could measure every workload marginal, the selections mostly decide the order
    in which they are measured rather than which are, and budget moved from selecting to measuring
    buys more: 0.95. Where the workload has more marginals than rounds, which ones are measured
    matters, and the paper's 0.9 measured better. At epsilon 1 (bench/HISTORY.md, "AIM's
    measurement share"): 6-attribute ADULT (20 marginals, T = 96) mean L1 0.1305 against 0.1333
    over 5 seeds, raw Adult (91 marginals, T = 240) mixed error 0.0052 against 0.0063 over 3,
    and binary16 (560 marginals, T = 256) 0.0063 at 0.95 against 0.0059 at 0.9 over 3.
    """
    return FEW_MARGINALS_ALPHA if marginals <= rounds else PAPER_ALPHA


@pytree_dataclass
class AIMSelection(HostRule):
    """AIM's selection, budget annealing and privacy filter (module docstring).

    Args:
        alpha: share of each round's budget spent on the measurement (the rest on the selection).
            None (default): `default_alpha`'s rule, the paper's 0.9 where the workload has more
            marginals than the run has rounds, else 0.95.
        resolution: R, how finely round 0 must measure the 1-way counts: where the schedule
            for T rounds measures them with noise above n / R (n the table's size, public under
            replace-one, else estimated from the 1-way measurement itself: `estimated_total`)
            and some noisy count of an attribute of at least `WIDE` values is below `AT_RISK`
            sigmas (a value the noise could merge or lose; released),
            round 0 measures them again (`one_way_top_up`) so that both measurements together
            have the noise of a run calibrated for the fewer rounds T' = 2 alpha rho (n / R)^2 /
            L2^2 (at least `FEWEST_ROUNDS` d1, d1 the 1-way marginals: round 0 then spends at
            most half of the budget; at least d1 where even alpha rho spent on the 1-way counts
            would measure them with noise above n / `LOW_SIGNAL`: round 0 then spends alpha rho
            and the one round left the rest), and the rounds after are calibrated for T'
            (sigma and epsilon as if T' had been given; T still caps the rounds). Two
            Gaussian measurements of the same counts at sigma_1 and sigma_2 cost and tell what
            one at (sigma_1^-2 + sigma_2^-2)^-1/2 does, so the split loses nothing. None
            (default): the paper's schedule for T.

    Bound by `jaxdp.adaptive` (`bind`) to the workload, whose downward closure is the candidate
    set, and to the run: `max_rounds` T (default 16 d: the count the initial sigma and epsilon
    are calibrated for, and the most rounds the run takes, round 0's 1-way measurements included;
    the filter's budget usually ends it sooner).

    Privacy:
        Relation: add/remove (counts: a marginal's L2 and L1 sensitivity are 1) or replace-one
        (counts with n public: L2 sqrt(2), L1 2). Round 0: one Gaussian measurement of the d1
        one-way marginals together (L2 sensitivity sqrt(d1) times a marginal's, scale sigma_0:
        the paper's d1 separate measurements, same noise and cost). Round t >= 1: exponential
        mechanism (exact; Gumbel-max under noise="float") on q_r with sensitivity
        Delta_t = L1 * max_{r in C_t} w_r at epsilon_t, epsilon_t^2 / 8 zCDP (Cesar & Rogers
        2021), then a Gaussian measurement at sigma_t, L2^2 / (2 sigma_t^2) zCDP. The filter
        (Theorem 1; Feldman & Zrnic 2021, Rogers et al. 2016) keeps the realised sum <= rho.
        C_t (the family's `eligible`) depends on released values only. With `resolution`,
        round 0 may measure the 1-way marginals a second time (same sensitivity, sigma decided
        from the first measurement's released counts, as the annealing decides every later
        sigma): both are charged, and together they cost at most alpha rho d1 / T' <= alpha
        rho, so the filter's sum stays <= rho.
    """

    alpha: float | None = static_field(default=None)
    resolution: float | None = static_field(default=None)

    has_error_bounds: ClassVar[bool] = True

    def bind(
        self,
        workload: MarginalWorkload,
        *,
        relation: Neighboring,
        n_records: int,
        rounds: int | None,
        noise: str,
        rho_budget: float,
    ) -> AIMSelection:
        """This rule over `workload`'s downward closure for a run of at most `rounds` rounds,
        round 0 included (None: 16 d).

        Raises:
            ValueError: alpha outside (0, 1), or rounds below the workload's attribute count (or
                below 2).
        """
        del rho_budget  # AIM calibrates its rounds in `start`
        d = len(workload.sizes)
        max_rounds = 16 * d if rounds is None else _checks.positive_int(rounds, "rounds")
        alpha = default_alpha(len(workload), max_rounds) if self.alpha is None else self.alpha
        alpha = _checks.fraction(alpha, "alpha")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        candidates = downward_closure(workload)
        one_way = sum(len(c) == 1 for c in candidates.cliques)
        # Theorem 1 needs T >= d: round 0's 1-way measurements cost alpha rho d1 / T <= rho. A
        # second round at least spends what round 0 leaves.
        least = max(one_way, 2)
        if max_rounds < least:
            raise ValueError(
                f"rounds (AIM's T; max_rounds of jaxdp.aim and jaxdp.aim_gem) must be at least {least} "
                f"for a workload over {one_way} attributes, got {max_rounds}"
            )
        bound = self._bound(
            candidates,
            aim_weights(workload, candidates),
            max_rounds,
            relation=relation,
            n_records=n_records,
            noise=noise,
        )
        resolution = (
            None if self.resolution is None else _checks.positive_finite(self.resolution, "resolution")
        )
        return dataclasses.replace(bound, alpha=alpha, resolution=resolution)

    def start(self, rho_budget: float) -> Schedule:
        """The schedule before round 0: (sigma_0, epsilon_0) calibrated as if the run lasted T
        rounds (Algorithm 2, line 3)."""
        sigma0 = self.l2_sensitivity * math.sqrt(self.max_rounds / (2.0 * self.alpha * rho_budget))
        epsilon0 = math.sqrt(8.0 * (1.0 - self.alpha) * rho_budget / self.max_rounds)
        return Schedule(sigma0, epsilon0, (), False, smoothed=self.smoothed)

    def round_cost(self, sigma: float, epsilon: float) -> float:
        return self.l2_sensitivity**2 / (2.0 * sigma**2) + epsilon**2 / 8.0

    def calibrated_rounds(self, total: float, count: int, rho_budget: float) -> float:
        """T' (`resolution`): the rounds whose per-round noise sigma = L2 sqrt(T' / (2 alpha
        rho)) is total / resolution, within [max(FEWEST_ROUNDS count, 2), max_rounds] (not a
        whole number: it calibrates sigma and epsilon, and the filter ends the run); the floor
        is `count` (at least 2) where total is below LOW_SIGNAL times the sigma of T' = count,
        the whole measurement share spent on the 1-way counts (a released estimate: `total`)."""
        if self.resolution is None:
            return float(self.max_rounds)
        whole = self.l2_sensitivity * math.sqrt(count / (2.0 * self.alpha * rho_budget))
        least = max(count if total < LOW_SIGNAL * whole else FEWEST_ROUNDS * count, 2.0)
        target = max(total, 0.0) / self.resolution
        rounds = 2.0 * self.alpha * rho_budget * target**2 / self.l2_sensitivity**2
        return min(max(rounds, float(least)), float(self.max_rounds))

    def one_way_top_up(
        self, schedule: Schedule, total: float, smallest: float, sigma: float, count: int, rho_budget: float
    ) -> tuple[float, Schedule] | None:
        """`resolution`'s second measurement of round 0 (None where T's schedule measured finely
        enough, or where no wide attribute's noisy count is below AT_RISK sigmas, `smallest`:
        no value the noise could merge or lose): its sigma, and the schedule with the charge added and
        the next round's sigma and epsilon those of a run calibrated for `calibrated_rounds`."""
        if smallest >= AT_RISK * sigma:
            return None
        rounds = self.calibrated_rounds(total, count, rho_budget)
        if rounds >= self.max_rounds:
            return None
        target = self.l2_sensitivity * math.sqrt(rounds / (2.0 * self.alpha * rho_budget))
        first = self.undrawn(sigma)  # what the first measurement cost, as an unsmoothed sigma
        if target >= first:
            return None
        # the second measurement's sigma: together with the first, the cost of one at target
        sensitivity, second = self.one_way_measurement(1.0 / math.sqrt(target**-2 - first**-2), count)
        if self.noise == "discrete" and second > samplers.SIGMA_MAX:  # too little to add: none
            return None
        charge = (noise.PRIMITIVES.index(self.measure_primitive), sensitivity, second)
        epsilon = math.sqrt(8.0 * (1.0 - self.alpha) * rho_budget / rounds)
        return second, schedule._replace(sigma=target, epsilon=epsilon, charges=(*schedule.charges, charge))

    def final_parameters(self, remaining: float) -> tuple[float, float]:
        """(sigma, epsilon) that spend `remaining` (split alpha to measure, 1 - alpha to select)."""
        sigma = self.l2_sensitivity / math.sqrt(2.0 * self.alpha * remaining)
        epsilon = math.sqrt(8.0 * (1.0 - self.alpha) * remaining)
        return sigma, epsilon

    def round_parameters(
        self, schedule: Schedule, rho_budget: float
    ) -> tuple[float, float, float, float, bool]:
        """(sigma, epsilon, rho_select, rho_measure, final) of the next adaptive round."""
        final = schedule.epsilon is None
        sigma, epsilon = schedule.sigma, schedule.epsilon
        if final:  # the filter's last round: spend exactly what is left
            sigma, epsilon = self.final_parameters(rho_budget - schedule.rho_spent)
        return sigma, epsilon, epsilon**2 / 8.0, self.l2_sensitivity**2 / (2.0 * sigma**2), final

    def anneal_or_finish(
        self, schedule: Schedule, *, changed: bool, rho_budget: float, rounds_done: int, rounds: int
    ) -> Schedule:
        """Algorithm 4: halve sigma and double epsilon when the last measurement taught the model
        little; switch to the final round when the rest cannot pay for two more rounds (or the
        next round is the last the loop allows). epsilon=None marks the final round."""
        sigma, epsilon = schedule.sigma, schedule.epsilon
        if not changed:
            sigma, epsilon = sigma / 2.0, epsilon * 2.0
        remaining = rho_budget - schedule.rho_spent
        if remaining <= 2.0 * self.round_cost(sigma, epsilon) or rounds_done + 1 >= rounds:
            return schedule._replace(sigma=sigma, epsilon=None)
        return schedule._replace(sigma=sigma, epsilon=epsilon)
