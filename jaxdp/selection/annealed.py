"""AIM's selection rule with budget annealing and a privacy filter (McKenna et al., VLDB 2022,
Algorithms 2-4), as a public part: `AIMSelection`.

Composed by `jaxdp.adaptive` with any family of marginals (Private-PGM's `GraphicalModel` for
`jaxdp.aim`, GEM's `GeneratorModel` for `jaxdp.aim_gem`, or PEP, MW, RAP, GEM), it drives the
mechanism round by round from the host (`jaxdp.mechanisms.annealed.Annealed`):

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
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, gdp, noise, samplers
from jaxdp.accounting import (
    MEASURE_PRIMITIVE,
    SELECT_PRIMITIVE,
    Plan,
    PlannedCharge,
    charge_rho,
    float32_ceil,
    gumbel_scale,
)
from jaxdp.queries import MarginalWorkload, aim_weights, downward_closure, marginal_sensitivity
from jaxdp.types import MARGINALS, Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


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


@jax.jit
def _candidate_l1(true_counts: Array, model_counts: Array, segments: Array, template: Array) -> Array:
    """(n_candidates,) ||M_r(D) - M_r(p_hat)||_1; `template` only carries the output length."""
    return jax.ops.segment_sum(
        jnp.abs(true_counts - model_counts), segments, num_segments=template.shape[0], indices_are_sorted=True
    )


def quality_scores(
    true_counts: Array, model_counts: Array, candidates: MarginalWorkload, weights: Array, sigma: float
) -> Array:
    """(n_candidates,) AIM's q_r = w_r (||M_r(D) - M_r(model)||_1 - sqrt(2/pi) sigma n_r).

    Args:
        true_counts, model_counts: (candidates.n_queries,) counts of every candidate cell.
        weights: (n_candidates,) w_r; sigma: the round's measurement noise scale.
    """
    segments = jnp.asarray(candidates.marginal_of_query())
    template = jnp.zeros(len(candidates), jnp.float32)
    penalty = SQRT_2_OVER_PI * sigma * np.asarray(candidates.cells, np.float64)
    true_counts = jnp.asarray(true_counts, jnp.float32)  # exact: counts are below 2^24
    l1 = _candidate_l1(true_counts, jnp.asarray(model_counts, jnp.float32), segments, template)
    return jnp.asarray(weights, jnp.float32) * (l1 - jnp.asarray(penalty, jnp.float32))


# Exact quality scores (noise="discrete"), on the host in int64. The L1 error is counted in
# steps of 1 / COUNT_STEPS counts, the weights w_r / w_max in steps of 2^-WEIGHT_BITS; see
# `grid_quality_steps` for the bound.
COUNT_STEPS = 64
WEIGHT_BITS = 16
_MODEL_TOTAL_LIMIT = 2.0**32  # a marginal's public model counts are scaled to sum to at most this
_PENALTY_LIMIT = 2**40


def grid_quality_scores(
    true_counts: np.ndarray,
    model_counts: np.ndarray,
    candidates: MarginalWorkload,
    weights: np.ndarray,
    mask: np.ndarray,
    sigma: float,
    l1_sensitivity: float,
) -> np.ndarray:
    """(n_candidates,) int32 `grid_quality_steps` relative to the best eligible one: max(Q_r,
    best - 2^30) - best, in [-2^30, 0] (masked candidates get -2^30), what the sampler takes."""
    mask = np.asarray(mask, bool)
    quality = grid_quality_steps(true_counts, model_counts, candidates, weights, mask, sigma, l1_sensitivity)
    return relative_to_best(quality, mask)


def relative_to_best(quality: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(n,) int32 integer scores `quality` relative to the best masked one, max(Q_r, best - 2^30)
    - best in [-2^30, 0] (-2^30 where masked out): what the exact sampler takes. If each Q_r
    moves by at most GRID_STEPS between neighbours, so does each of these (a max of two such
    functions, less one), and the shift by the best leaves the exponential mechanism's law
    unchanged."""
    best = quality[mask].max()
    relative = np.maximum(quality, best - noise.GRID_LIMIT) - best
    return np.where(mask, relative, -noise.GRID_LIMIT).astype(np.int32)


def candidate_l1_steps(
    true_counts: np.ndarray, model_counts: np.ndarray, candidates: MarginalWorkload, steps: int
) -> np.ndarray:
    """(n_candidates,) int64 E_r = sum_cells |K c - round(K mu)| with K = `steps`: each candidate's
    L1 error in steps of 1 / K counts, exact (the true counts c, private; the model's counts mu,
    public, clipped to >= 0 and scaled to sum to at most 2^32 per marginal, so E_r < 2^40 for
    K <= 64). A neighbour moves c by 1 in at most L1 cells (the relation's L1 sensitivity), so
    E_r moves by at most K L1."""
    segments = candidates.marginal_of_query()
    mu = np.clip(np.asarray(model_counts, np.float64), 0.0, _MODEL_TOTAL_LIMIT)
    totals = np.bincount(segments, weights=mu, minlength=len(candidates))
    mu = mu * np.minimum(1.0, _MODEL_TOTAL_LIMIT / np.maximum(totals, 1.0))[segments]
    model = np.rint(steps * mu).astype(np.int64)
    errors = np.abs(steps * np.asarray(true_counts, np.int64) - model)
    return np.add.reduceat(errors, np.asarray(candidates.offsets, np.int64))


def grid_quality_steps(
    true_counts: np.ndarray,
    model_counts: np.ndarray,
    candidates: MarginalWorkload,
    weights: np.ndarray,
    mask: np.ndarray,
    sigma: float,
    l1_sensitivity: float,
) -> np.ndarray:
    """(n_candidates,) int64 AIM quality scores Q_r in grid steps of Delta_t / GRID_STEPS,
    computed exactly from the true counts (0 for masked candidates).

    With K = COUNT_STEPS, L = l1_sensitivity (a marginal's L1 sensitivity in counts: 2 under
    replace-one, 1 under add-remove), W_r = floor(2^16 w_r / w_max) over the eligible candidates
    (w_max = max_{r in C_t} w_r, so Delta_t = L w_max) and D = 2^16 K L / GRID_STEPS:

        E_r = sum_cells |K c - M|,  M = round(K mu) (public model counts mu, clipped to >= 0 and
              scaled to sum to at most 2^32 per marginal),
        P_r = round(K sqrt(2/pi) sigma n_r)  (public),
        Q_r = floor(W_r (E_r - P_r) / D)  ~  q_r / (Delta_t / GRID_STEPS).

    A neighbouring dataset moves c by +-1 in at most two cells of a marginal (replace-one) or one
    (add-remove): E_r moves by at most K L, W_r (E_r - P_r) by at most 2^16 K L = GRID_STEPS D,
    and the floor of a quotient by D by at most GRID_STEPS (floor(x) - floor(y) < x - y + 1 with
    x - y <= GRID_STEPS). The best eligible Q moves by at most GRID_STEPS too, so max(Q_r,
    best - 2^30) does (a max of two such functions), and subtracting the best from every
    candidate leaves the exponential mechanism's law unchanged (`grid_quality_scores`). Every
    product stays below 2^58.

    Args:
        true_counts: (candidates.n_queries,) the true integer counts (private).
        model_counts: (candidates.n_queries,) the model's counts (public).
        weights: (n_candidates,) w_r; mask: (n_candidates,) bool C_t; sigma: the round's noise.
        l1_sensitivity: L, the declared L1 sensitivity of a marginal in counts (a multiple of
            2^-16; the bound above holds if the true one is at most L).
    """
    steps = noise.GRID_STEPS
    # D = 2^16 K L / GRID_STEPS must be a whole number: L a multiple of 2^-16 counts (in practice
    # 2 or 1; (2 / n) * n may miss 2 by an ulp, hence the rounding)
    scaled_ell = 2**WEIGHT_BITS * COUNT_STEPS * float(l1_sensitivity) / steps
    divisor = round(scaled_ell)
    if divisor < 1 or abs(divisor - scaled_ell) > 1e-9 * divisor:
        raise ValueError(
            "exact AIM scores need an L1 sensitivity that is a multiple of 2^-16 counts, "
            f"got {l1_sensitivity!r}"
        )
    cells = np.asarray(candidates.cells, np.int64)
    l1 = candidate_l1_steps(true_counts, model_counts, candidates, COUNT_STEPS)
    penalty = np.rint(np.minimum(COUNT_STEPS * SQRT_2_OVER_PI * float(sigma) * cells, _PENALTY_LIMIT))
    mask = np.asarray(mask, bool)
    weights = np.asarray(weights, np.float64)
    w_max = float(weights[mask].max())
    scaled = np.where(mask, np.floor(weights * 2.0**WEIGHT_BITS / w_max), 0.0).astype(np.int64)
    return (scaled * (l1 - penalty.astype(np.int64))) // divisor  # floor division, |.| < 2^57


@pytree_dataclass
class HostRule:
    """What a rule that schedules its own rounds from the host shares (AIM's, MST's and
    PrivBayes's), driven by `jaxdp.mechanisms.annealed.Annealed`: round 0 measures its opening
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
        settings = dict(scale=scale, sensitivity=delta_t, noise=self.noise, mask=jnp.asarray(mask))
        if self.noise == "discrete":  # exact int64 scores on the host (`grid_quality_scores`)
            steps = counts.map(
                lambda c: jnp.asarray(
                    grid_quality_scores(
                        np.asarray(c),
                        model_counts,
                        self.candidates,
                        weights,
                        mask,
                        penalty_sigma,
                        self.l1_sensitivity,
                    )
                )
            )
            choice, charge = noise.select_grid(key, steps, **settings)
        else:
            scores = counts.map(quality_scores, model_counts, self.candidates, weights, penalty_sigma)
            choice, charge = noise.select(key, scores, **settings)
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


PAPER_ALPHA = 0.9
FEW_MARGINALS_ALPHA = 0.95
# AIM's round 0 measures each 1-way count with noise at most 1/ONE_WAY_RESOLUTION of the records
# (`AIMSelection.resolution`), spending at most alpha / FEWEST_ROUNDS of the budget on it
# (T' >= FEWEST_ROUNDS d1); both measured in bench/HISTORY.md, "Small tables"
ONE_WAY_RESOLUTION = 150.0
FEWEST_ROUNDS = 2.0
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
            most half of the budget), and the rounds after are calibrated for T'
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
        whole number: it calibrates sigma and epsilon, and the filter ends the run)."""
        if self.resolution is None:
            return float(self.max_rounds)
        least = max(FEWEST_ROUNDS * count, 2.0)
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
