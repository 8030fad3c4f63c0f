"""The Adaptive Measurements builder: a selection rule, a measurement and a family's update
composed into a mechanism whose plan, ledger and audit come for free (GEM/PEP paper, Algorithm 1).

    mech = jaxdp.adaptive(data, workload, select=jaxdp.selection.L1Error(),
                          family=jaxdp.families.PEP(), rounds=10, epsilon=1.0, delta=1e-9)

Each round t, from its round key:
1. select (private): the rule picks candidates (marginals, single queries or signed queries) by
   the error of the current answers (stream SELECT);
2. measure (private): Gaussian noise on the picks' counts (`jaxdp.measurement.GaussianCounts`,
   stream MEASURE), or nothing (`measure=None`: the game-based mechanisms learn from the picks);
3. update (post-processing): the family records the measurements and refits its representation
   (stream UPDATE for any public randomness it draws).

A mechanism may select from several query classes (`classes=`, RAP++'s categorical marginals and
threshold queries), each with its own rule, rounds and share of the budget; its rounds are
interleaved evenly. The budget is split as in the paper's Section 3.1: a class's share over its
T rounds, each round a share alpha^2 / (alpha^2 + (1 - alpha)^2) for the selection and the rest
for the measurement (all of it for the selection when nothing is measured).

Every shipped mechanism is a preset of this builder: MWEM, PEP, PMW-Pub, PEP-Pub, RAP,
RAP-softmax, GEM, GEM-Pub, DualQuery, FEM, RAP++, Independent and Gaussian build an `Adaptive`
(one compiled scan); AIM and AIM-GEM, whose rule is `jaxdp.selection.AIMSelection` (budget
annealing and a privacy filter), MST, whose rule is `jaxdp.selection.MSTSelection` (a spanning
tree on a fixed budget), and PrivBayes, whose rule is `jaxdp.selection.PrivBayesSelection` (a
Bayesian network on a fixed budget), build an `jaxdp.mechanisms.host_loop.Annealed` (a Python
loop).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.accounting import Plan
from jaxdp.domain import Dataset
from jaxdp.families import polish
from jaxdp.families.base import Family, Measured
from jaxdp.families.compression import Compression
from jaxdp.keys import Stream, require_key, split_keys, stream_key
from jaxdp.measurement import GaussianCounts
from jaxdp.mechanisms._common import (
    as_relation,
    idle_charge,
    interleave,
    make_plan,
    record_count,
    require_categorical,
)
from jaxdp.mechanisms.host_loop import Annealed, annealed
from jaxdp.mechanisms.query_classes import (
    QueryClass,
    SelectionClass,
    build_class,
    checked_queries,
    given_classes,
    relation_names,
)
from jaxdp.queries import (
    MarginalWorkload,
)
from jaxdp.selection import HostRule, Rule
from jaxdp.types import Array, Charge, Key, Neighboring, pytree_dataclass, static_field

# The default measurement (unbound: `adaptive` calibrates it to each class).
GAUSSIAN_COUNTS = GaussianCounts()


class AdaptiveState(NamedTuple):
    """model: the family's state (its representation and measurements so far); eligible: one
    (n_candidates,) bool per query class, the candidates not picked yet; rounds_done: int32."""

    model: Any
    eligible: tuple[Array, ...]
    rounds_done: Array


class AdaptiveInfo(NamedTuple):
    """charges: the round's selection charges, then its measurement's; selected: (k,) int32 the
    candidates picked (-1 padding where classes pick different numbers); query_class: int32 the
    class the round selected from; inner_steps: the family's optimiser steps this round."""

    charges: tuple[Charge, ...]
    selected: Array
    query_class: Array
    inner_steps: Array


@pytree_dataclass
class Adaptive:
    """A select-measure-update mechanism built by `adaptive` (or a preset).

    Privacy:
        Relation: `relation` (replace-one unless the rule and family fit add-remove). Each round
        runs its class's rule (stream SELECT; the charges its `calibrate` planned) and, unless
        nothing is measured, one Gaussian measurement of the picks' counts (stream MEASURE;
        `jaxdp.measurement.count_sensitivity`). A class with share rho_c of the budget over T_c
        rounds spends rho_c / T_c a round, split alpha^2 : (1 - alpha)^2 between selection and
        measurement (GEM/PEP paper, Section 3.1); `plan` holds every charge. The family's
        update, its stopping rules and the release (stream RELEASE) are post-processing.
    """

    classes: tuple[SelectionClass, ...]
    family: Family
    n_records: int = static_field()
    rounds: int = static_field()
    schedule: tuple[int, ...] = static_field()
    class_round: tuple[int, ...] = static_field()
    charge_slots: int = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    name: str = static_field(default="adaptive")
    relation: Neighboring = static_field(default=Neighboring.REPLACE_ONE)

    @property
    def jittable(self) -> bool:
        """Whether `jaxdp.run` compiles the rounds: the family's update traces (every shipped
        family but Private-PGM's does)."""
        return self.family.jittable

    @property
    def releases(self) -> str:
        """What `release` returns: "records", or "answers" for a family that releases its noisy
        answers (Gaussian)."""
        return self.family.releases

    @property
    def workload(self) -> MarginalWorkload | None:
        """The first query class's marginals (what the release is judged on)."""
        return self.classes[0].workload

    @property
    def compiled_release(self) -> bool:
        """Whether `jaxdp.execute` compiles the release as one program: not where the records
        are polished, a host loop of compiled passes (`jaxdp.contract.compiled_release`)."""
        return self.jittable and not self._polishes

    @property
    def _polishes(self) -> bool:
        family = self.family
        return (
            family.polished
            and family.releases == "records"
            and not family.numeric
            and self.workload is not None
        )

    def init(self, key: Key) -> AdaptiveState:
        require_key(key)
        eligible = tuple(jnp.ones(c.n_candidates, bool) for c in self.classes)
        return AdaptiveState(self.family.init(key), eligible, jnp.zeros((), jnp.int32))

    def step(self, state: AdaptiveState, key: Key) -> tuple[AdaptiveState, AdaptiveInfo]:
        """One round: select from the round's class, measure, record; then refit the family.

        Privacy:
            Reads the true counts of the round's class twice: the selection scores and the
            picks' counts (see the class docstring).
        """
        require_key(key)
        t = state.rounds_done
        if len(self.classes) == 1:
            which = jnp.zeros((), jnp.int32)
            model, eligible, charges, chosen = self._class_round(0, state.model, state.eligible, t, key)
        else:
            which = jnp.asarray(self.schedule, jnp.int32)[t]
            r = jnp.asarray(self.class_round, jnp.int32)[t]
            branches = [functools.partial(self._class_round, c) for c in range(len(self.classes))]
            model, eligible, charges, chosen = jax.lax.switch(
                which, branches, state.model, state.eligible, r, key
            )
        model, steps = self.family.update(model, t, stream_key(key, Stream.UPDATE), t == self.rounds - 1)
        return AdaptiveState(model, eligible, t + 1), AdaptiveInfo(charges, chosen, which, steps)

    def _class_round(self, c: int, model, eligible: tuple[Array, ...], r: Array, key: Key):
        """Class c's selection, measurement and the family's record of them (r: the class's round).

        The charges and picks are padded to the same structure for every class (idle charges of
        count 0 and -1 picks), as the branches of the round's switch must be."""
        part = self.classes[c]
        current = self.family.answers(model)
        current = current[c] if isinstance(current, tuple) else current
        mask = None if part.selection.repeats else eligible[c]
        chosen, charges = part.selection(
            stream_key(key, Stream.SELECT), part.counts, self.n_records, current, part.workload, mask, r
        )
        if part.measurement is None:
            measured = Measured(chosen, query_class=c)
        else:
            measured, measure_charges = part.measurement(stream_key(key, Stream.MEASURE), part.counts, chosen)
            measured, charges = measured._replace(query_class=c), charges + measure_charges
        model = self.family.record(model, measured, current, r)
        if not part.selection.repeats:
            eligible = (*eligible[:c], eligible[c].at[chosen].set(False), *eligible[c + 1 :])
        most = max(p.picks for p in self.classes)
        charges = charges + tuple(idle_charge(self.noise) for _ in range(self.charge_slots - len(charges)))
        chosen = jnp.concatenate([chosen, jnp.full(most - chosen.shape[0], -1, jnp.int32)])
        return model, eligible, charges, chosen

    def answers(self, state: AdaptiveState) -> Array:
        """(n_queries,) the first class's answers of the output distribution (before sampling)."""
        return self.family.output_answers(state.model)

    relaxed_answers = answers  # the name the API uses for families whose records differ from it

    @property
    def public_rows(self) -> int | None:
        """The default row count where it is known before the run: n under replace-one (public);
        None under add-remove, where it is estimated from the released measurements."""
        return self.n_records if self.relation is Neighboring.REPLACE_ONE else None

    def default_rows(self, state: AdaptiveState) -> int:
        """`public_rows`, or under add-remove the family's estimate of the record count from the
        released measurements (host code: call it outside jit)."""
        if self.public_rows is not None:
            return self.public_rows
        rows = self.family.default_rows(state.model)
        if rows is None:
            raise ValueError(f"{self.name}: under add-remove give rows (the family cannot estimate them)")
        return rows

    def conditioned(
        self, state: AdaptiveState, weights: dict[int, Any]
    ) -> tuple[AdaptiveState, float] | None:
        """(the state whose release is this one's conditional given evidence, its probability),
        where the family has an exact conditional (`Family.conditioned`: the histograms) and
        releases unpolished records; None otherwise (a saved model samples by rejection).

        Privacy:
            Post-processing of the released state only.
        """
        if self._polishes or self.family.releases != "records":
            return None
        out = self.family.conditioned(state.model, weights)
        if out is None:
            return None
        model, probability = out
        return state._replace(model=model), probability

    def release(self, state: AdaptiveState, key: Key, rows: int | None = None) -> Any:
        """The family's release: (rows, n_attributes) int32 records sampled from the output
        distribution (rows default: n under replace-one), then, for a `polished` family, each
        value revisited toward the distribution's workload answers (`families.polish`); or the
        noisy answers of a family that releases answers (Gaussian; `rows` is then unused)."""
        require_key(key)
        if self.family.releases == "answers":
            return self.family.release(state.model, key, None)
        rows = self.default_rows(state) if rows is None else _checks.positive_int(rows, "rows")
        if not self._polishes:
            return self.family.release(state.model, key, rows)
        draw_key, polish_key = split_keys(key)
        polish.start_compiling(polish_key, self.workload, rows)
        codes, answers = _draw(self.family, state.model, draw_key, rows)
        return polish.polish(polish_key, codes, np.asarray(answers, np.float64), self.workload)


@functools.partial(jax.jit, static_argnums=3)
def _draw(family: Family, model: Any, key: Key, rows: int) -> tuple[Array, Array]:
    """A polished family's records as drawn and the output answers they are polished toward."""
    return family.release(model, key, rows), family.output_answers(model)


def adaptive(
    data: Dataset,
    workload: MarginalWorkload | None = None,
    *,
    select: Rule | None = None,
    family: Family,
    rounds: int | None = None,
    classes: Sequence[QueryClass] | None = None,
    measure: GaussianCounts | None = GAUSSIAN_COUNTS,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    alpha: float | None = None,
    relation: Neighboring | str = Neighboring.REPLACE_ONE,
    public: Dataset | None = None,
    conversion: str = "exact",
    noise: str = "discrete",
    mesh: Mesh | None = None,
    name: str = "adaptive",
    label: str | None = None,
    compress: Compression | None = None,
) -> Adaptive | Annealed:
    """Compose a selection rule, a measurement and a family into a mechanism; its plan is fixed
    here, before anything runs (or, for a filter rule, its budget and the filter that keeps it).

    Args:
        data: the private records (categorical, unless the family fits numeric columns).
        workload: the marginals to answer (with `select` and `rounds`; or give `classes`).
        select: a `jaxdp.selection.Rule` (`MaxError(k=...)`, `L1Error`, `QueryError`,
            `SignedError`, `SignedErrorSamples`, `Everything`, or one of your own), or
            `jaxdp.selection.AIMSelection()` (AIM's rule: budget annealing and a privacy filter;
            the mechanism is then an `Annealed`, run as a Python loop, with `rounds` its T), or
            `jaxdp.selection.MSTSelection()` or `jaxdp.selection.PrivBayesSelection()` (MST's
            spanning tree, PrivBayes's network: also `Annealed`s, with d rounds; leave `rounds`
            unset).
        family: a family from `jaxdp.families` with its settings, or one of your own (a
            `jaxdp.families.Family`).
        rounds: T; with a rule that picks each candidate at most once, rounds x picks must not
            exceed the candidates.
        classes: several query classes instead of (workload, select, rounds): `QueryClass`es,
            each with its rule, rounds and budget weight (RAP++), for a family that fits them.
        measure: `GaussianCounts()` (default) or None: measure nothing, the family learns from
            the picks (DualQuery, FEM).
        epsilon, delta, rho, conversion: the budget, (epsilon, delta) or rho (see
            `jaxdp.accounting`).
        alpha: share of each round's budget weight for the selection (the paper's alpha;
            default 0.5). Only when the round both selects privately and measures.
        relation: "replace-one" (default: n public) or "add-remove", if the rule and the family
            fit it (the baselines do).
        public: a public dataset over the same domain (the histogram families' support, the
            generator's pretraining data).
        noise: "discrete" (default: exact discrete Gaussian and exact exponential mechanism) or
            "float" (float32 noise: faster, not meeting its delta exactly; `jaxdp.noise`).
        mesh: count the records split over this mesh's devices (`jaxdp.queries.records_mesh()`).
        name: how errors and reports name it.
        label: names the charges of a single class ("select {label}", "measure {label}").
        compress: with `AIMSelection` or `MSTSelection`, compress the domain after the noisy 1-way round
            (`jaxdp.families.Compression()`: MST's merge of the values counted below 3 sigma;
            post-processing, no privacy cost); None keeps the declared domain.

    Raises:
        TypeError: a part of the wrong kind; ValueError: bad settings, parts that do not fit
            together (named), more rounds than candidates, a workload over another domain;
        BudgetExceededError: a plan over the budget; DataError: numeric columns for a
            categorical family, an empty table, a domain too large for a histogram family.

    Privacy:
        See `Adaptive`: rho-zCDP in total under `relation`, by the plan checked here.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    _checks.one_of(noise, noise_module.NOISES, "noise")
    relation = as_relation(relation)
    if not isinstance(family, Family):
        raise TypeError(
            f"family must be a jaxdp.families.Family (PEP, MW, RAP, GEM, ..., or a subclass of your "
            f"own), got {type(family).__name__}"
        )
    if measure is not None and not isinstance(measure, GaussianCounts):
        raise TypeError(
            f"measure must be jaxdp.measurement.GaussianCounts() or None, got {type(measure).__name__}"
        )
    if relation not in family.relations:
        raise ValueError(
            f"{type(family).__name__} fits under {relation_names(family.relations)}, not {relation.value}"
        )
    if plan.conversion == "gdp":
        if not (isinstance(select, HostRule) and select.gaussian_only) or noise != "discrete":
            raise ValueError(
                "conversion 'gdp' accounts runs whose every draw is an exact discrete Gaussian "
                "(aim-gdp, swift; noise 'discrete'); use conversion 'exact' or 'pld' here"
            )
        select = dataclasses.replace(select, smoothed=True)
    if isinstance(select, HostRule):
        if classes is not None or alpha is not None or measure is None:
            raise ValueError(
                f"{type(select).__name__} selects from one workload, splits each round's budget itself "
                "and measures what it picks: give workload, and leave classes, alpha and measure unset"
            )
        return annealed(
            data,
            checked_queries(workload, data, ""),
            select=select,
            family=family,
            rounds=rounds,
            plan=plan,
            relation=relation,
            noise=noise,
            public=public,
            mesh=mesh,
            name=name,
            compress=compress,
        )
    if compress is not None:
        raise ValueError(
            "compress works with AIMSelection and MSTSelection, whose first round measures every "
            "1-way marginal; "
            f"{type(select).__name__} does not"
        )
    classes = given_classes(workload, select, rounds, classes, label)
    if not family.numeric:
        require_categorical(data, name)
    if len(classes) > 1 and not family.several_classes:
        raise ValueError(f"{type(family).__name__} fits one query class, got {len(classes)}")
    if measure is None and family.needs_measurements:
        raise ValueError(f"{type(family).__name__} fits measurements: give measure=GaussianCounts()")

    n = record_count(data, mesh)
    total_weight = math.fsum(_checks.positive_finite(c.weight, "weight") for c in classes)
    built, shapes = [], []
    for i, spec in enumerate(classes):
        part, shape, charges = build_class(
            i,
            spec,
            data,
            n,
            family,
            measure,
            plan.rho_budget * spec.weight / total_weight,
            alpha=alpha,
            relation=relation,
            noise=noise,
            mesh=mesh,
            several=len(classes) > 1,
        )
        built.append(part)
        shapes.append(shape)
        for charge in charges:
            plan = plan.with_charge(charge)
    plan = plan.check()
    family = family.bind(
        tuple(shapes),
        domain=data.domain,
        public=public,
        n_records=n if relation is Neighboring.REPLACE_ONE else None,
    )
    schedule, class_round = interleave([c.rounds for c in classes])
    slots = max(p.selection.charges_per_round() + (p.measurement is not None) for p in built)
    return Adaptive(
        classes=tuple(built),
        family=family,
        n_records=n,
        rounds=len(schedule),
        schedule=schedule,
        class_round=class_round,
        charge_slots=slots,
        plan=plan,
        noise=noise,
        name=name,
        relation=relation,
    )
