"""The Adaptive Measurements loop over the histogram family, shared by MWEM, PEP and their
public-data variants (PMW-Pub, PEP-Pub); they differ only in the update rule and the support.

Each round: select a marginal (or a single counting query) with the exponential mechanism on its
error under the current distribution, measure its counts with the Gaussian mechanism (exact
discrete Gaussian noise by default), then update the distribution from all measurements so far
(post-processing).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
from jax.sharding import Mesh

from jaxdp import _checks, selection
from jaxdp import noise as noise_module
from jaxdp.accounting import (
    MEASURE_PRIMITIVE,
    SELECT_PRIMITIVE,
    Plan,
    PlannedCharge,
    gumbel_scale,
)
from jaxdp.domain import DataError, Dataset
from jaxdp.families.histogram import (
    DenseSupport,
    MarginalPadding,
    Measurements,
    PublicSupport,
    probabilities,
    project_to_simplex,
    sample_support,
)
from jaxdp.families.projection import (
    entropy_projection,
    multiplicative_weights,
    replay_multiplicative_weights,
)
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import (
    as_relation,
    count_sigma,
    count_unit,
    make_plan,
    private_counts,
    require_categorical,
    round_shares,
)
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field

RULES = ("mwem", "pep")
OUTPUTS = ("last", "average")


class HistogramState(NamedTuple):
    """log_weights: (n_support,) current distribution; average: (n_support,) running mean of the
    per-round distributions; measurements: released measurements; eligible: what selection may
    still pick ((n_marginals,) or (n_queries,) bool); rounds_done; rho_spent."""

    log_weights: Array
    average: Array
    measurements: Measurements
    eligible: Array
    rounds_done: Array
    rho_spent: Array


class HistogramInfo(NamedTuple):
    """charges: (selection, measurement); selected: the marginal or query measured this round."""

    charges: tuple[Charge, Charge]
    selected: Array


@pytree_dataclass
class AdaptiveHistogram:
    """MWEM / PEP / PMW-Pub / PEP-Pub; build with their factories.

    `counts` holds the workload's true int32 counts; selection scores and updates use fractions
    (counts / n, n public). `sigma` and `measure_sensitivity` are in counts. `noise` picks the
    primitives: "discrete" (the default) measures with exact discrete Gaussian noise and selects
    with the exact exponential mechanism; "float" uses float32 Gaussian noise and Gumbel-max
    (faster, but its delta is not met exactly; see `jaxdp.noise`).

    Privacy:
        Relation replace-one (n public). Each of `rounds` rounds runs one exponential mechanism
        (score = max cell error of a marginal, or a query's error, in fractions; sensitivity
        1/n; stream SELECT) and one Gaussian measurement of counts (a whole marginal with L2
        sensitivity sqrt(2), or one query with sensitivity 1; stream MEASURE), divided by n
        afterwards (post-processing). With epsilon_0 = sqrt(2 rho / (T (alpha^2 +
        (1 - alpha)^2))) the selection runs at 2 alpha epsilon_0 and the measurement at noise
        sensitivity / ((1 - alpha) epsilon_0), so each round costs rho / T (GEM/PEP paper,
        Section 3.1). Updates and release are post-processing (stream RELEASE samples the
        output).
    """

    counts: Sensitive
    support: DenseSupport | PublicSupport
    padding: MarginalPadding
    workload: MarginalWorkload = static_field()
    rule: str = static_field()
    n_records: int = static_field()
    rounds: int = static_field()
    marginal_trick: bool = static_field()
    select_scale: float = static_field()
    select_sensitivity: float = static_field()
    sigma: float = static_field()
    measure_sensitivity: float = static_field()
    max_steps: int = static_field()
    tolerance: float = static_field()
    replay_passes: int = static_field()
    step_size: float = static_field()
    output: str = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    relation: Neighboring = static_field(default=Neighboring.REPLACE_ONE)

    def init(self, key: Key) -> HistogramState:
        require_key(key)
        n = self.support.n_support
        n_candidates = len(self.workload) if self.marginal_trick else self.workload.n_queries
        return HistogramState(
            log_weights=jnp.zeros(n, jnp.float32),
            average=jnp.zeros(n, jnp.float32),
            measurements=Measurements.empty(self.rounds, self.padding.max_cells),
            eligible=jnp.ones(n_candidates, bool),
            rounds_done=jnp.zeros((), jnp.int32),
            rho_spent=jnp.zeros((), jnp.float32),
        )

    def step(self, state: HistogramState, key: Key) -> tuple[HistogramState, HistogramInfo]:
        """One round: select, measure, update.

        Privacy:
            Reads the true counts twice: the selection scores (their fractions against the
            current distribution) and the measured marginal's or query's counts.
        """
        require_key(key)
        t = state.rounds_done
        current = self.support.answers(probabilities(state.log_weights))
        select_key, measure_key = stream_key(key, Stream.SELECT), stream_key(key, Stream.MEASURE)
        unit = count_unit(self.relation, self.n_records)
        true_fractions = self.counts.map(lambda c: c * unit)
        if self.marginal_trick:
            chosen, select_charge = selection.select_marginal(
                select_key,
                true_fractions,
                current,
                self.workload,
                state.eligible,
                scale=self.select_scale,
                sensitivity=self.select_sensitivity,
                noise=self.noise,
            )
            noisy, measure_charge = self._measure(
                measure_key, self.counts.map(lambda c: self.padding.marginal(c, chosen))
            )
            marginal, cell = chosen, jnp.int32(-1)
            target = project_to_simplex(noisy, self.padding.valid[marginal])
        else:
            chosen, select_charge = selection.select_query(
                select_key,
                true_fractions,
                current,
                state.eligible,
                scale=self.select_scale,
                sensitivity=self.select_sensitivity,
                noise=self.noise,
            )
            noisy, measure_charge = self._measure(measure_key, self.counts.map(lambda c: c[chosen]))
            marginal = jnp.asarray(self.workload.marginal_of_query())[chosen]
            cell = chosen - jnp.asarray(self.workload.offsets, jnp.int32)[marginal]
            target = jnp.zeros(self.padding.max_cells, jnp.float32).at[cell].set(jnp.clip(noisy, 0.0, 1.0))
        meas = state.measurements.record(t, marginal, cell, target)
        log_weights = self._update(state.log_weights, meas, t)
        probs = probabilities(log_weights)
        new = HistogramState(
            log_weights=log_weights,
            average=state.average + (probs - state.average) / (t + 1).astype(jnp.float32),
            measurements=meas,
            eligible=state.eligible.at[chosen].set(False),
            rounds_done=t + 1,
            rho_spent=state.rho_spent + self.plan.rho_planned / self.rounds,
        )
        return new, HistogramInfo((select_charge, measure_charge), chosen)

    def _measure(self, key: Key, true_counts: Sensitive) -> tuple[Array, Charge]:
        """Noisy fractions of `true_counts`: Gaussian noise on the counts, then / n.

        Privacy:
            One Gaussian measurement in counts (`noise.measure_counts`, sigma and sensitivity in
            counts); the division by the public n is post-processing.
        """
        noisy_counts, charge = noise_module.measure_counts(
            key, true_counts, sigma=self.sigma, sensitivity=self.measure_sensitivity, noise=self.noise
        )
        return noisy_counts * count_unit(self.relation, self.n_records), charge

    def _update(self, log_weights: Array, meas: Measurements, t: Array) -> Array:
        if self.rule == "pep":
            return entropy_projection(
                self.support,
                self.padding,
                log_weights,
                meas,
                max_steps=self.max_steps,
                tolerance=self.tolerance,
            )
        log_weights = multiplicative_weights(
            self.support, self.padding, log_weights, meas, t, step_size=self.step_size
        )
        return replay_multiplicative_weights(
            self.support, self.padding, log_weights, meas, passes=self.replay_passes, step_size=self.step_size
        )

    def distribution(self, state: HistogramState) -> Array:
        """(n_support,) the output distribution: last iterate or average of iterates."""
        return probabilities(state.log_weights) if self.output == "last" else state.average

    def release(self, state: HistogramState, key: Key, rows: int | None = None) -> Array:
        """Sample (rows, n_attributes) int32 records from the output distribution (rows default n)."""
        require_key(key)
        rows = self.n_records if rows is None else _checks.positive_int(rows, "rows")
        index = sample_support(key, self.distribution(state), rows)
        return self.support.records(index)


def build(
    rule: str,
    data: Dataset,
    workload: MarginalWorkload,
    *,
    epsilon: float | None,
    delta: float | None,
    rho: float | None,
    rounds: int,
    alpha: float,
    marginal_trick: bool,
    public: Dataset | None,
    relation: Neighboring | str,
    conversion: str,
    max_steps: int = 0,
    tolerance: float = 0.0,
    replay_passes: int = 0,
    step_size: float = 0.5,
    output: str = "last",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> AdaptiveHistogram:
    """Validate, calibrate and build an AdaptiveHistogram (see the mwem/pep factories)."""
    plan = make_plan(epsilon, delta, rho, conversion)
    _checks.one_of(noise, noise_module.NOISES, "noise")
    if as_relation(relation) is not Neighboring.REPLACE_ONE:
        raise ValueError(f"{rule} measures normalised answers: relation must be 'replace-one' (n public)")
    require_categorical(data, rule)
    if workload.sizes != data.domain.sizes:
        raise ValueError("workload was built for a different domain than the data's")
    rounds = _checks.positive_int(rounds, "rounds")
    alpha = _checks.fraction(alpha, "alpha", allow_one=False)
    _checks.one_of(output, OUTPUTS, "output")
    candidates = len(workload) if marginal_trick else workload.n_queries
    if rounds > candidates:
        unit = "marginals" if marginal_trick else "counting queries"
        raise ValueError(
            f"rounds={rounds} exceeds the {candidates} {unit} of the workload (each is measured at most once)"
        )
    if public is None:
        support = DenseSupport.of(workload)
    else:
        if public.domain.sizes != data.domain.sizes:
            raise DataError("the public dataset must have the same domain as the private one")
        support = PublicSupport.of(public.codes, workload)

    n = len(data)
    counts = private_counts(data, workload, mesh)
    rho_select, rho_measure = round_shares(plan.rho_budget, rounds, alpha)
    select_sensitivity = selection.score_sensitivity(Neighboring.REPLACE_ONE, n)
    # replacing a record moves two cells of a marginal by one count each
    measure_sensitivity = math.sqrt(2.0) if marginal_trick else 1.0
    select_scale = gumbel_scale(select_sensitivity, rho_select)
    sigma = count_sigma(measure_sensitivity, rho_measure, noise)
    plan = (
        plan.with_charge(
            PlannedCharge("select", SELECT_PRIMITIVE[noise], select_sensitivity, select_scale, times=rounds)
        )
        .with_charge(
            PlannedCharge("measure", MEASURE_PRIMITIVE[noise], measure_sensitivity, sigma, times=rounds)
        )
        .check()
    )
    return AdaptiveHistogram(
        counts=counts,
        support=support,
        padding=MarginalPadding.of(workload),
        workload=workload,
        rule=rule,
        n_records=n,
        rounds=rounds,
        marginal_trick=bool(marginal_trick),
        select_scale=select_scale,
        select_sensitivity=select_sensitivity,
        sigma=sigma,
        measure_sensitivity=measure_sensitivity,
        max_steps=int(max_steps),
        tolerance=float(tolerance),
        replay_passes=int(replay_passes),
        step_size=float(step_size),
        output=output,
        plan=plan,
        noise=noise,
    )
