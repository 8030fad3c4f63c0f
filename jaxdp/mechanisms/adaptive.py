"""The Adaptive Measurements builder: one selection rule, one measurement and one family's update
composed into a mechanism whose plan, ledger and audit come for free (GEM/PEP paper, Algorithm 1).

    mech = jaxdp.adaptive(data, workload, select=jaxdp.selection.L1Error(),
                          family=jaxdp.families.PEP(), rounds=10, epsilon=1.0, delta=1e-9)

Each round t, from its round key:
1. select (private): the rule picks k candidates (marginals or single queries) not measured yet,
   by the error of the current answers (stream SELECT);
2. measure (private): Gaussian noise on the chosen candidates' counts, then / n
   (`jaxdp.measurement.GaussianCounts`, stream MEASURE);
3. update (post-processing): the family records the measurements and updates its representation.

The budget is split as in the paper's Section 3.1: each round costs rho / T, a share alpha^2 /
(alpha^2 + (1 - alpha)^2) of it for the selection and the rest for the measurement. MWEM, PEP,
PMW-Pub, PEP-Pub, RAP, RAP-softmax, GEM and GEM-Pub are presets of this builder
(`jaxdp.mechanisms.mwem`, ...), and any rule composes with any family.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax.numpy as jnp
from jax.sharding import Mesh

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.domain import Dataset
from jaxdp.families.measured import Measured
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.measurement import GaussianCounts
from jaxdp.mechanisms._common import count_sigma, make_plan, private_counts, require_categorical, round_shares
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import QUERIES, Rule
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field


@runtime_checkable
class Family(Protocol):
    """What the builder asks of a family (`jaxdp.families.PEP`, `MW`, `RAP`, `GEM` meet it)."""

    def bind(self, workload, *, rounds, per_round, single_queries, domain, public) -> Family:
        """This family fitted to the workload and the run's shape (validated on the host)."""

    def init(self, key: Key) -> Any:
        """The starting model (public randomness only)."""

    def answers(self, model: Any) -> Array:
        """(n_queries,) the workload's answers of the current model (fractions)."""

    def update(self, model: Any, measured: Measured, current: Array, t: Array) -> tuple[Any, Array]:
        """Post-processing: the model after this round's measurements, and its inner steps."""

    def output_answers(self, model: Any) -> Array:
        """(n_queries,) the answers of the released distribution."""

    def sample(self, model: Any, key: Key, rows: int) -> Array:
        """(rows, n_attributes) int32 records of the released distribution."""


class AdaptiveState(NamedTuple):
    """model: the family's state (its representation and measurements so far); eligible:
    (n_candidates,) bool, not measured yet; rounds_done: int32."""

    model: Any
    eligible: Array
    rounds_done: Array


class AdaptiveInfo(NamedTuple):
    """charges: (selection, measurement); selected: (k,) int32 candidates measured this round;
    inner_steps: the family's optimiser steps this round (0 for a closed-form update)."""

    charges: tuple[Charge, Charge]
    selected: Array
    inner_steps: Array


@pytree_dataclass
class Adaptive:
    """A select-measure-update mechanism built by `adaptive` (or a preset).

    `counts` holds the workload's true int32 counts; the rule scores and the family fits
    fractions (counts / n, n public).

    Privacy:
        Relation replace-one (n public; fractions). Each of `rounds` rounds runs the selection
        rule (k exponential mechanisms on a score of sensitivity 1/n, or 2/n for the L1 error,
        stream SELECT) and one Gaussian measurement of the k candidates' counts (L2 sensitivity
        sqrt(2 k) counts for marginals, sqrt(k) for queries; stream MEASURE), divided by n
        afterwards. With epsilon_0 = sqrt(2 rho / (T (alpha^2 + (1 - alpha)^2))) the selection
        runs at 2 alpha epsilon_0 and the measurement at (1 - alpha) epsilon_0, so each round
        costs rho / T (GEM/PEP paper, Section 3.1); `plan` holds both charges. The update, the
        stopping rules of the fits and the release (stream RELEASE) are post-processing.
    """

    counts: Sensitive
    selection: Rule
    measurement: GaussianCounts
    family: Family
    workload: MarginalWorkload = static_field()
    n_records: int = static_field()
    rounds: int = static_field()
    plan: Any = static_field()
    noise: str = static_field()
    name: str = static_field(default="adaptive")
    relation: Neighboring = static_field(default=Neighboring.REPLACE_ONE)

    def init(self, key: Key) -> AdaptiveState:
        require_key(key)
        n_candidates = self.selection.n_candidates(self.workload)
        return AdaptiveState(self.family.init(key), jnp.ones(n_candidates, bool), jnp.zeros((), jnp.int32))

    def step(self, state: AdaptiveState, key: Key) -> tuple[AdaptiveState, AdaptiveInfo]:
        """One round: select, measure, update (each stream key derived once, for its part).

        Privacy:
            Reads the true counts twice: the selection scores and the chosen candidates' counts.
        """
        require_key(key)
        t = state.rounds_done
        current = self.family.answers(state.model)
        chosen, select_charge = self.selection(
            stream_key(key, Stream.SELECT),
            self.counts,
            self.n_records,
            current,
            self.workload,
            state.eligible,
        )
        measured, measure_charge = self.measurement(stream_key(key, Stream.MEASURE), self.counts, chosen)
        model, steps = self.family.update(state.model, measured, current, t)
        new = AdaptiveState(model, state.eligible.at[chosen].set(False), t + 1)
        return new, AdaptiveInfo((select_charge, measure_charge), chosen, steps)

    def answers(self, state: AdaptiveState) -> Array:
        """(n_queries,) the workload's answers of the output distribution (before sampling)."""
        return self.family.output_answers(state.model)

    relaxed_answers = answers  # the name the API uses for families whose records differ from it

    def release(self, state: AdaptiveState, key: Key, rows: int | None = None) -> Array:
        """Sample (rows, n_attributes) int32 records from the output distribution (rows default n)."""
        require_key(key)
        rows = self.n_records if rows is None else _checks.positive_int(rows, "rows")
        return self.family.sample(state.model, key, rows)


def adaptive(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    select: Rule,
    family: Family,
    rounds: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    alpha: float = 0.5,
    public: Dataset | None = None,
    conversion: str = "exact",
    noise: str = "discrete",
    mesh: Mesh | None = None,
    name: str = "adaptive",
) -> Adaptive:
    """Compose a selection rule and a family into a mechanism; its plan is fixed here.

    Args:
        data: the private records (categorical domain).
        workload: the marginals to answer.
        select: a `jaxdp.selection.Rule` (`MaxError(k=...)`, `L1Error`, `QueryError`, or one of
            your own).
        family: a family from `jaxdp.families` (`PEP`, `MW`, `RAP`, `GEM`) with its settings, or
            one meeting `Family`.
        rounds: T; each round measures k new candidates (k x T must not exceed them).
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        alpha: share of each round's budget weight for selection (the paper's alpha).
        public: a public dataset: the histogram families' support, the generator's
            pretraining data (with `pretrain_steps`).
        noise: "discrete" (default: exact discrete Gaussian and exact exponential mechanism) or
            "float" (float32 noise: faster, not meeting its delta exactly; `jaxdp.noise`).
        mesh: count the records split over this mesh's devices (`jaxdp.queries.records_mesh()`).
        name: how errors and reports name it.

    Raises:
        ValueError: bad settings, more rounds than candidates, a workload over another domain;
        BudgetExceededError: a plan over the budget; DataError: numeric columns, an empty table,
        a domain too large for a histogram family.

    Privacy:
        See `Adaptive`: rho-zCDP in total, replace-one.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    _checks.one_of(noise, noise_module.NOISES, "noise")
    if not isinstance(select, Rule):
        raise TypeError(
            f"select must be a jaxdp.selection.Rule (e.g. MaxError()), got {type(select).__name__}"
        )
    if not isinstance(family, Family):
        raise TypeError(
            f"family must be a family (jaxdp.families.PEP, MW, RAP, GEM, or one meeting "
            f"jaxdp.mechanisms.adaptive.Family), got {type(family).__name__}"
        )
    require_categorical(data, name)
    if workload.sizes != data.domain.sizes:
        raise ValueError("workload was built for a different domain than the data's")
    rounds = _checks.positive_int(rounds, "rounds")
    k = _checks.positive_int(select.k, "k (picks per round)")
    alpha = _checks.fraction(alpha, "alpha", allow_one=False)
    candidates = select.n_candidates(workload)
    if rounds * k > candidates:
        unit = "counting queries" if select.candidates == QUERIES else "marginals"
        raise ValueError(
            f"rounds x picks per round = {rounds} x {k} exceeds the {candidates} {unit} of the workload "
            "(each is measured at most once)"
        )
    family = family.bind(
        workload,
        rounds=rounds,
        per_round=k,
        single_queries=select.candidates == QUERIES,
        domain=data.domain,
        public=public,
    )
    n = len(data)
    counts = private_counts(data, workload, mesh)
    rho_select, rho_measure = round_shares(plan.rho_budget, rounds, alpha)
    selection, select_charge = select.calibrate(rho_select, n, noise, rounds)
    measurement, measure_charge = GaussianCounts.calibrate(
        workload, select.candidates, k, n, lambda s: count_sigma(s, rho_measure, noise), noise, rounds
    )
    plan = plan.with_charge(select_charge).with_charge(measure_charge).check()
    return Adaptive(counts, selection, measurement, family, workload, n, rounds, plan, noise, name)
