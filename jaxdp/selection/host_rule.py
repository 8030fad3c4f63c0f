"""The base of selection rules that schedule their rounds from the host (`HostRule`: AIM's, MST's,
PrivBayes's, AIM-GDP's and SWIFT's), and of those whose budget is split in advance
(`FixedPlanRule`). `jaxdp.mechanisms.host_loop` drives them round by round."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

import jax
import numpy as np

from jaxdp import gdp, noise, samplers
from jaxdp.accounting import (
    MEASURE_PRIMITIVE,
    SELECT_PRIMITIVE,
    Plan,
    PlannedCharge,
    float32_ceil,
    gumbel_scale,
)
from jaxdp.queries import MarginalWorkload, marginal_sensitivity
from jaxdp.selection.records import Schedule, Selected, exponential_selected
from jaxdp.selection.scores import SQRT_2_OVER_PI, grid_quality_scores, quality_scores
from jaxdp.types import MARGINALS, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field


@pytree_dataclass
class HostRule:
    """What a rule that schedules its own rounds from the host shares (AIM's, MST's and
    PrivBayes's), driven by `jaxdp.mechanisms.host_loop.Annealed`: round 0 measures its opening
    1-way candidates in one Gaussian draw (`opening`: every one by default); each later round
    picks one candidate by the exponential mechanism on a score (by default its weighted L1
    error against the model's answers) and measures it with Gaussian noise. A subclass says how
    the rounds are budgeted (`start`, `round_parameters`, `anneal_or_finish`, `planned`), which
    candidates a round may pick (`allowed`), and whether the model is refitted between rounds
    (`refits`).

    Bound by `bind` to the candidates, their weights, the most rounds (round 0 included), the
    relation's sensitivities in counts and the noise.
    """

    candidates: MarginalWorkload | None = static_field(default=None)
    weights: tuple[float, ...] = static_field(default=())
    max_rounds: int = static_field(default=0)
    l1_sensitivity: float = static_field(default=1.0)
    l2_sensitivity: float = static_field(default=1.0)
    noise: str = static_field(default="discrete")
    # the Gaussian-DP accountant's draws (conversion "gdp", `jaxdp.gdp`): every sigma calibrated
    # from a budget share is drawn at sqrt(sigma^2 + S^2), which costs mu^2 / 2 = that share
    smoothed: bool = static_field(default=False)

    kind: ClassVar[str] = MARGINALS
    # whether every draw is a Gaussian measurement (conversion "gdp" may account the run)
    gaussian_only: ClassVar[bool] = False
    relations: ClassVar[tuple[Neighboring, ...]] = (Neighboring.ADD_REMOVE, Neighboring.REPLACE_ONE)
    # whether the family refits after every round (else only after round 0 and the last)
    refits: ClassVar[bool] = True
    # whether the score subtracts the measurement's expected L1 noise sqrt(2/pi) sigma n_r
    noise_penalty: ClassVar[bool] = True
    # whether `Annealed.error_bounds` (AIM's Section 5, which needs its score) applies
    has_error_bounds: ClassVar[bool] = False

    def _bound(
        self,
        candidates: MarginalWorkload,
        weights,
        max_rounds: int,
        *,
        relation: Neighboring,
        n_records: int,
        noise: str,
    ):
        """This rule with its candidates, weights, rounds and the relation's sensitivities set."""
        l1, l2 = marginal_sensitivity(relation, n_records)
        scale = 1.0 if relation is Neighboring.ADD_REMOVE else float(n_records)
        return dataclasses.replace(
            self,
            candidates=candidates,
            weights=tuple(float(w) for w in weights),
            max_rounds=max_rounds,
            l1_sensitivity=l1 * scale,
            l2_sensitivity=l2 * scale,
            noise=noise,
        )

    # -- the candidates ---------------------------------------------------------------------

    def one_way(self) -> list[int]:
        """The 1-way candidates (measured together in round 0)."""
        return [i for i, c in enumerate(self.candidates.cliques) if len(c) == 1]

    def span(self, i: int) -> slice:
        """Candidate i's cells in the candidates' flat counts."""
        start = self.candidates.offsets[i]
        return slice(start, start + self.candidates.cells[i])

    @property
    def largest_measurement(self) -> int:
        """The most entries one measurement can have: a candidate, or round 0's 1-way marginals."""
        return max(max(self.candidates.cells), sum(self.candidates.cells[i] for i in self.one_way()))

    def opening(self, key: Key) -> list[int]:
        """The candidates round 0 measures together: every 1-way candidate. `key` (round 0's
        SELECT stream, which no private draw uses) is for a rule that picks them at random."""
        del key
        return self.one_way()

    def allowed(self, measured: Sequence[tuple[int, ...]]) -> np.ndarray | None:
        """(n_candidates,) bool the candidates the next round may pick, given the cliques
        `measured` so far (in order), or None for every one. Public: it reads released picks."""
        del measured
        return None

    # -- the schedule -----------------------------------------------------------------------

    @property
    def measure_primitive(self) -> str:
        return MEASURE_PRIMITIVE[self.noise]

    @property
    def select_primitive(self) -> str:
        return SELECT_PRIMITIVE[self.noise]

    def planned(self, plan: Plan) -> Plan:
        """The plan fixed before the run: the budget alone where the rounds' charges are decided
        as it goes (a filter's realised plan is checked instead)."""
        return plan

    def measure_sigma(self, rho: float) -> float:
        """sigma (counts) of a marginal's measurement costing at most `rho` (`noise.count_sigma`;
        `drawn` where smoothed)."""
        return self.drawn(noise.count_sigma(self.l2_sensitivity, rho, self.noise))

    def drawn(self, sigma: float) -> float:
        """The scale a draw calibrated at `sigma` is made at, rounded up to float32: sigma, or
        where `smoothed` sqrt(sigma^2 + S^2) (its Gaussian-DP cost that of sigma unsmoothed:
        `jaxdp.gdp`)."""
        return float32_ceil(gdp.smoothed_sigma(sigma) if self.smoothed else sigma)

    def undrawn(self, sigma: float) -> float:
        """The inverse of `drawn`: the unsmoothed sigma whose cost a draw at `sigma` has."""
        return math.sqrt(sigma * sigma - gdp.SMOOTHING**2) if self.smoothed else sigma

    def one_way_measurement(self, sigma: float, count: int) -> tuple[float, float]:
        """Round 0's (L2 sensitivity, sigma): its `count` 1-way candidates measured together (L2
        sensitivity sqrt(count) times a marginal's; the papers' separate measurements, same
        noise and cost)."""
        sensitivity = math.sqrt(count) * self.l2_sensitivity
        sigma = self.drawn(sigma)
        if self.noise == "discrete":  # the exact sampler's floor; a larger sigma costs less
            sigma = max(sigma, samplers.SIGMA_MIN)
        return sensitivity, sigma

    def after_one_way(self, schedule: Schedule, sensitivity: float, sigma: float) -> Schedule:
        """The schedule once round 0 is measured."""
        charge = (noise.PRIMITIVES.index(self.measure_primitive), sensitivity, sigma)
        return schedule._replace(charges=(charge,))

    def one_way_top_up(
        self, schedule: Schedule, total: float, smallest: float, sigma: float, count: int, rho_budget: float
    ) -> tuple[float, Schedule] | None:
        """A second measurement of round 0's 1-way marginals, decided from the first: (its sigma,
        the schedule once it is measured, the rounds after calibrated for what it adds), or None
        for none (the default: round 0 is one measurement).

        Args:
            schedule: the schedule once the first measurement is charged (`after_one_way`).
            total: the table's size, n where it is public, else estimated from the first
                measurement (`estimated_total`).
            smallest: the first measurement's smallest noisy count among the attributes of at
                least `WIDE` values (released; inf where there is none).
            sigma: the first measurement's noise scale; count: the 1-way marginals it measured.
        """
        del schedule, total, smallest, sigma, count, rho_budget
        return None

    def after_round(self, schedule: Schedule, selected: Selected, sigma: float) -> Schedule:
        """The schedule after a select + measure round: its two charges added (and the noisy
        errors a Gaussian selection released)."""
        drawn = () if selected.entry is None else (selected.entry,)
        charges = (
            *schedule.charges,
            *drawn,
            (noise.PRIMITIVES.index(self.measure_primitive), self.l2_sensitivity, sigma),
        )
        schedule = schedule._replace(charges=charges)
        if selected.kept is not None:
            schedule = schedule._replace(kept=selected.kept)
        return schedule

    @staticmethod
    def learned(after: np.ndarray, before: np.ndarray, sigma: float) -> bool:
        """Algorithm 4's test: did the model's answer on the picked marginal move by more than
        the measurement's expected L1 noise sqrt(2/pi) sigma n_r?"""
        moved = float(np.abs(np.asarray(after, np.float64) - np.asarray(before, np.float64)).sum())
        return moved > SQRT_2_OVER_PI * sigma * len(before)

    def realised_plan(self, schedule: Schedule, plan: Plan) -> Plan:
        """The plan the run followed: one charge per primitive invoked, within the budget."""
        realised = Plan(plan.rho_budget, plan.epsilon, plan.delta, plan.conversion)
        # round 0's measurements (one, or two with a top-up: `one_way_top_up`) come before the
        # rounds' (selection, measurement) pairs, so their count is the parity of the total
        opening = 2 - len(schedule.charges) % 2 if schedule.charges else 0
        for i, (code, sensitivity, scale) in enumerate(schedule.charges):
            primitive = noise.PRIMITIVES[code]
            if i < opening:
                label = "measure 1-way marginals" + (" again" if i else "")
            else:
                label = f"{primitive} (round {(i - opening) // 2 + 1})"
            realised = realised.with_charge(PlannedCharge(label, primitive, sensitivity, scale))
        return realised.check()

    def reads_scores(self, schedule: Schedule) -> bool:
        """Whether the next round's selection reads the model's answers (else the driver
        computes neither them nor the eligible candidates: a pick fixed by earlier releases)."""
        del schedule
        return True

    def idle(self) -> tuple[Charge, Charge]:
        """The (selection, measurement) charges of a round that draws neither (count 0)."""
        return noise.idle(self.select_primitive), noise.idle(self.measure_primitive)

    # -- the selection ----------------------------------------------------------------------

    def prefetch(self) -> None:
        """Start compiling the selection's sampler in the background (`__call__`'s exact choice
        among every candidate; a rule that selects otherwise overrides this)."""
        if self.noise == "discrete":
            samplers.prefetch_exponential_choice(len(self.candidates.cliques))

    def __call__(
        self,
        key: Key,
        counts: Sensitive,
        model_counts: np.ndarray,
        mask: np.ndarray,
        sigma: float,
        rho_select: float,
        measured: Sequence[tuple[int, ...]] = (),
        schedule: Schedule | None = None,
    ) -> Selected:
        """The exponential mechanism over the masked candidates C_t on the weighted L1 score
        (AIM's quality score; without its noise penalty where `noise_penalty` is False).

        Args:
            key: the round's SELECT stream key.
            counts: private (candidates.n_queries,) int32 true counts of every candidate.
            model_counts: (candidates.n_queries,) the model's counts (public).
            mask: (n_candidates,) bool C_t; sigma: the round's noise; rho_select: its cost.
            measured: the cliques measured so far (unused here; a rule whose score depends on
                them reads them).
            schedule: the schedule before the round (unused here; a rule that keeps what earlier
                selections released reads it).

        Returns:
            the pick, its Charge and its ledger entry (sensitivity Delta_t, scale
            2 Delta_t / epsilon_t).

        Privacy:
            Reads the true counts; one exponential mechanism (`noise.select_grid` on exact
            integer scores, or `noise.select` under noise="float").
        """
        del measured, schedule
        weights = np.asarray(self.weights)
        delta_t = self.l1_sensitivity * float(weights[mask].max())
        scale = gumbel_scale(delta_t, rho_select)
        penalty_sigma = sigma if self.noise_penalty else 0.0
        settings = dict(scale=scale, sensitivity=delta_t, noise=self.noise)
        if self.noise == "discrete":  # exact scores on the host (`grid_quality_scores`), kept there
            steps = counts.map(
                lambda c: grid_quality_scores(
                    np.asarray(c),
                    model_counts,
                    self.candidates,
                    weights,
                    mask,
                    penalty_sigma,
                    self.l1_sensitivity,
                )
            )
            choice, charge = noise.select_grid(key, steps, mask=mask, **settings)
        else:
            scores = counts.map(quality_scores, model_counts, self.candidates, weights, penalty_sigma)
            choice, charge = noise.select(key, scores, mask=jax.device_put(mask), **settings)
        return exponential_selected(choice, charge, self.select_primitive, delta_t, scale)


@pytree_dataclass
class FixedPlanRule(HostRule):
    """A host rule whose rounds and their budgets are fixed before the run (MST, PrivBayes): no
    annealing and no filter (the driver stops after `max_rounds`), and the model refitted only
    after round 0 and the last round, since no later score reads what the rounds between
    measure."""

    refits: ClassVar[bool] = False

    def anneal_or_finish(
        self, schedule: Schedule, *, changed: bool, rho_budget: float, rounds_done: int, rounds: int
    ) -> Schedule:
        """The schedule, unchanged."""
        del changed, rho_budget, rounds_done, rounds
        return schedule
