"""The registry of mechanism names the API and the command line share, and the one way to build
a registered mechanism.

Each preset registers itself beside its factory (`register("pep", MechanismSpec(pep, ...))` at
the foot of its module), declaring what the API must know before building it: default rounds,
relations, public data, mesh, error bounds. Adding a mechanism touches its own file and the
package's import list. `MECHANISMS` lists them in the order the package imports its presets.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.compression import Compression
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Neighboring

DEFAULT_DELTA = 1e-9
# Works on any categorical domain with no dense histogram and no extra dependency, in about a
# minute on ADULT; AIM is more accurate on small domains but needs the `pgm` extra and is slower.
DEFAULT_MECHANISM = "rap-softmax"
# Both relations, where the mechanism can measure counts with n private.
BOTH_RELATIONS = (Neighboring.REPLACE_ONE, Neighboring.ADD_REMOVE)

_logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class MechanismSpec:
    """How the API and the command line build and read one mechanism: its factory, defaults and
    what it accepts (what it releases, and whether its release compiles, the built mechanism
    says itself: `jaxdp.contract.releases`, `jaxdp.contract.jittable`).

    Attributes:
        factory: (data, workload, **budget, **options) -> mechanism, where budget is epsilon,
            delta, conversion (and relation, for a factory with several `relations`), and
            options may hold rounds, public, mesh and the factory's own keywords.
        rounds: default rounds when none are given (None: the factory's own default): the
            papers' settings on ADULT (reduced).
        one_round: the mechanism runs exactly one round (no `rounds` option).
        fixed_rounds: the mechanism's rounds are its algorithm's (MST, PrivBayes: one per
            attribute); its factory refuses any other `rounds`.
        public: the mechanism needs a public table over the same domain.
        cap_rounds: the default rounds are capped at the workload's marginal count (mechanisms
            that measure each marginal at most once), divided by the marginals measured a round.
        per_round: the marginals the factory measures each round by default
            (`marginals_per_round`), for that cap.
        relaxed: the mechanism fits a distribution (histogram, relaxed rows, generator,
            graphical model, multiset of best responses) whose own answers to the workload
            (`relaxed_answers(state)`) are reported beside its records' (`release_errors`,
            "relaxed"); False where they are not answers to the workload (Independent's model
            covers the 1-way marginals, Gaussian releases answers).
        error_bounds: (mechanism, state, synthetic Dataset, confidence, domain) -> a JSON-able
            dict of per-marginal error bounds, for mechanisms with uncertainty quantification;
            None otherwise.
        own_workload: given no workload, the factory builds its query classes from the schema
            (rap++: class-conditional marginals on the schema's target).
        mesh: the factory takes `mesh=` (a `jaxdp.queries.records_mesh()`) and counts the
            records split over its devices.
        relations: the neighbouring relations the mechanism supports; the first is its default,
            the same through the API and the command line. A factory supporting more than one
            takes `relation=`, the others take none (replace-one: n public).
        real_numeric: takes numeric columns as real values (rap++); the others see each numeric
            column of a table schema as its bins (`jaxdp.binning`).
        conversion: the calibration a release uses when none is named (`jaxdp.accounting.CALIBRATIONS`):
            "exact" (zCDP), or "gdp" where the mechanism's draws are all Gaussian and measured to
            do better under it (AIM-GDP, SWIFT).
        compression: the mechanism takes `compress=` (a `jaxdp.families.Compression` or None)
            and reports what it merged (the report's `compression`); this is the compression the
            command line's `--compress THRESHOLD` sets the threshold of. None: no `compress=`.
    """

    factory: Callable[..., Any]
    rounds: int | None = None
    one_round: bool = False
    fixed_rounds: bool = False
    conversion: str = "exact"
    public: bool = False
    cap_rounds: bool = False
    relaxed: bool = True
    error_bounds: Callable[..., dict[str, Any]] | None = None
    own_workload: bool = False
    mesh: bool = False
    relations: tuple[Neighboring, ...] = (Neighboring.REPLACE_ONE,)
    real_numeric: bool = False
    per_round: int = 1
    compression: Compression | None = None


MECHANISMS: dict[str, MechanismSpec] = {}


def rounds_cap(factory: Callable[..., Any]) -> Callable[..., Any]:
    """A budget-annealing factory (AIM's kind picks its own rounds) taking the API's `rounds` as
    the cap on them (its `max_rounds`, T)."""

    def capped(data: Dataset, workload: MarginalWorkload, *, rounds: int | None = None, **options):
        if rounds is not None:
            options["max_rounds"] = rounds
        return factory(data, workload, **options)

    return capped


def default_conversion(name: str, conversion: str | None, *, spent_first: bool) -> str:
    """`conversion`, or where None the mechanism's registry `conversion`; zCDP's ("exact") where
    part of the budget was `spent_first` (private bins: the mechanism gets a rho, and "gdp" and
    "pld" calibrate a whole (epsilon, delta))."""
    if conversion is not None:
        return conversion
    return "exact" if spent_first else mechanism_spec(name).conversion


def register(name: str, spec: MechanismSpec) -> None:
    """Add a mechanism to the registry the API and the command line share."""
    if not isinstance(spec, MechanismSpec):
        raise TypeError(f"spec must be a MechanismSpec, got {type(spec).__name__}")
    MECHANISMS[name] = spec


def mechanism_spec(name: str) -> MechanismSpec:
    """The registry entry of `name`; ValueError listing the choices when there is none."""
    if name not in MECHANISMS:
        raise ValueError(f"unknown mechanism {name!r}; choose one of: {', '.join(MECHANISMS)}")
    return MECHANISMS[name]


def mechanism_relation(name: str, relation: Neighboring | str | None) -> Neighboring:
    """The relation a run of `name` uses: `relation`, or the mechanism's default when None.

    Raises:
        ValueError: a relation the mechanism does not support (the choices are listed).
    """
    supported = mechanism_spec(name).relations
    if relation is None:
        return supported[0]
    values = [r.value for r in Neighboring]
    if not isinstance(relation, Neighboring) and relation not in values:
        raise ValueError(f"relation must be one of {values}, got {relation!r}")
    relation = Neighboring(relation)
    if relation not in supported:
        names = " or ".join(r.value for r in supported)
        raise ValueError(f"mechanism {name!r} supports relation {names}, not {relation.value}")
    return relation


def measured_workload(mechanism, workload: MarginalWorkload | None) -> MarginalWorkload:
    """The marginals a release is judged on: `workload`, or those a mechanism that builds its
    own query classes chose (rap++: its categorical-marginal class)."""
    return mechanism.classes[0].workload if workload is None else workload


def build(
    name: str,
    data: Dataset,
    workload: MarginalWorkload | None,
    *,
    epsilon: float | None,
    delta: float | None = DEFAULT_DELTA,
    rho: float | None = None,
    relation: Neighboring | str | None = None,
    conversion: str | None = None,
    rounds: int | None = None,
    public: Dataset | None = None,
    mesh: Mesh | None = None,
    **options: Any,
):
    """Build registered mechanism `name` (its plan is fixed and checked here, before any run).

    The budget is (epsilon, delta), or rho with epsilon and delta None (what a release's
    preprocessing left, `jaxdp.preprocess`). `relation` None is the mechanism's default (the
    first of its registry entry's `relations`); `conversion` None its registry `conversion`.
    Default rounds of a mechanism that measures each marginal at most once are capped at the
    workload's marginals (logged on the "jaxdp" logger).
    `mesh` (one axis "records", `jaxdp.queries.records_mesh()`) splits the records over its
    devices to count them, for the factories that take a `mesh` keyword.

    Raises:
        ValueError: unknown mechanism, rounds given to a one-round mechanism, public data
            missing or unexpected, a mesh for a mechanism that cannot use one, or any error of
            the factory.
    """
    spec = mechanism_spec(name)
    relation = mechanism_relation(name, relation)
    conversion = default_conversion(name, conversion, spent_first=rho is not None)
    if mesh is not None:
        if not spec.mesh:
            raise ValueError(f"mechanism {name!r} does not count records over a mesh; leave mesh=None")
        options["mesh"] = mesh
    if workload is None and not spec.own_workload:
        raise ValueError(f"mechanism {name!r} needs a workload")
    if spec.one_round and rounds is not None and rounds != 1:
        raise ValueError(f"mechanism {name!r} runs exactly one round; do not give rounds")
    if public is not None and not spec.public:
        raise ValueError(f"mechanism {name!r} uses no public data")
    if public is None and spec.public:
        raise ValueError(f"mechanism {name!r} needs a public table over the same domain")
    budget = dict(epsilon=epsilon, delta=delta, conversion=conversion)
    if len(spec.relations) > 1:
        budget["relation"] = relation
    if rho is not None:
        budget["rho"] = rho
    if not spec.one_round:
        if rounds is None and spec.rounds is not None:
            per_round = options.get("marginals_per_round", spec.per_round)
            rounds = _default_rounds(name, spec, workload, per_round)
        if rounds is not None:
            options["rounds"] = rounds
    if public is not None:
        options["public"] = public
    if conversion == "pld":
        return _calibrated_by_pld(name, lambda **b: spec.factory(data, workload, **options, **b), budget)
    return spec.factory(data, workload, **options, **budget)


def _calibrated_by_pld(name: str, build_at: Callable[..., Any], budget: dict[str, Any]):
    """The mechanism with its fixed plan's noise calibrated by the plan's privacy loss
    distribution (`jaxdp.pld.rho_factor`): built for the zCDP budget of (epsilon, delta), then
    again for the largest multiple of that rho whose plan still spends at most (epsilon, delta)
    by `jaxdp.pld.plan_epsilon` (the zCDP budget itself where the PLD gains nothing). Its plan
    says conversion "pld", and its check reruns that accounting."""
    from jaxdp import pld  # dp_accounting loads only for a PLD calibration

    budget = dict(budget)
    epsilon, delta = budget.pop("epsilon"), budget.pop("delta")
    budget["conversion"] = "exact"
    if budget.pop("rho", None) is not None or epsilon is None:
        raise ValueError(
            "conversion 'pld' calibrates a whole (epsilon, delta) budget, and private bins spent part "
            "of this one first: declare every numeric column's bins (edges, or equal-width bins), or "
            "use conversion 'exact'"
        )
    first = build_at(epsilon=epsilon, delta=delta, **budget)
    if not first.plan.charges:
        raise ValueError(
            f"conversion 'pld': mechanism {name!r} decides its charges as it runs (a zCDP filter), and "
            "no privacy-loss-distribution filter is proved for its rounds here; use conversion 'exact'"
        )

    def stated(mechanism):
        plan = dataclasses.replace(
            mechanism.plan, epsilon=float(epsilon), delta=float(delta), conversion="pld"
        )
        return dataclasses.replace(mechanism, plan=pld.check(plan))

    factor = pld.rho_factor(first.plan.charges, epsilon, delta)
    if factor > 1.0:
        try:
            return stated(build_at(epsilon=None, delta=None, rho=factor * first.plan.rho_budget, **budget))
        except ValueError:  # a plan that does not scale with its rho (or refuses it): keep zCDP's
            _logger.info("%s: its plan does not scale with rho; calibrated by zCDP", name)
    return stated(first)


def _default_rounds(name: str, spec: MechanismSpec, workload: MarginalWorkload, per_round: int) -> int:
    """The registry's default rounds, capped where each marginal is measured at most once."""
    if not spec.cap_rounds or workload is None:
        return spec.rounds
    valid = isinstance(per_round, int) and not isinstance(per_round, bool) and per_round >= 1
    available = max(1, len(workload) // per_round) if valid else len(workload)
    if spec.rounds > available:
        _logger.info(
            "%s: default rounds %d capped at %d, what the workload's %d marginals allow",
            name,
            spec.rounds,
            available,
            len(workload),
        )
        return available
    return spec.rounds
