"""High-level API: a table and its declared schema in, a private release with its report out.

`synthesize(data, schema, mechanism=..., epsilon=..., delta=..., key=...)` validates the table
against the schema (never inferring a domain from the data), builds the named mechanism from the
registry, runs it, audits its ledger and returns a `Result`: the release in the container the
table came in (a pandas DataFrame, a dict of columns, a NumPy array or a `Dataset`), the privacy
report the command line writes, the ledger, and error bounds where the mechanism offers them.

The registry (`MECHANISMS`, extended with `register`) is the one list of mechanisms; the command
line reads it too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxdp import containers, contract, datasets, loop, preprocess
from jaxdp._background import Compiler
from jaxdp._jit import fast_compiled
from jaxdp._version import __version__
from jaxdp.accounting import Plan, epsilon_from_rho
from jaxdp.binning import DEFAULT_BINNING_SHARE
from jaxdp.coding import TableCoding
from jaxdp.domain import Categorical, DataError, Dataset, Domain, read_json
from jaxdp.evaluate import answer_errors, fractions, workload_errors
from jaxdp.keys import decode_key, require_key
from jaxdp.ledger import LedgerEntry, rho_spent
from jaxdp.mechanisms import (
    aim,
    aim_gem,
    dualquery,
    fem,
    gaussian,
    gem,
    gem_pub,
    independent,
    mwem,
    pep,
    pep_pub,
    pmw_pub,
    rap,
    rap_plus_plus,
    rap_softmax,
)
from jaxdp.mechanisms.rap_plus import default_classes
from jaxdp.queries import MarginalWorkload, all_kway, from_names
from jaxdp.tables import RawTable, TableSchema, is_table_schema
from jaxdp.types import Key, Neighboring

DEFAULT_DELTA = 1e-9
DEFAULT_WORKLOAD = "all-3way"

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
        rounds: default rounds when none are given (None: the factory's own default).
        one_round: the mechanism runs exactly one round (no `rounds` option).
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
        compresses: takes `compress=` (`jaxdp.families.Compression` or None) and reports what
            it merged (the report's `compression`).
    """

    factory: Callable[..., Any]
    rounds: int | None = None
    one_round: bool = False
    public: bool = False
    cap_rounds: bool = False
    relaxed: bool = True
    error_bounds: Callable[..., dict[str, Any]] | None = None
    own_workload: bool = False
    mesh: bool = False
    relations: tuple[Neighboring, ...] = (Neighboring.REPLACE_ONE,)
    real_numeric: bool = False
    per_round: int = 1
    compresses: bool = False


def _independent(data: Dataset, workload: MarginalWorkload, *, mesh: Mesh | None = None, **budget):
    return independent(data, mesh=mesh, **budget)  # measures the 1-way marginals whatever the workload


def _aim(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int | None = None,
    mesh: Mesh | None = None,
    **options,
):
    """AIM picks its own rounds by budget annealing: `rounds` caps them (its T)."""
    if rounds is not None:
        options["max_rounds"] = rounds
    return aim(data, workload, mesh=mesh, **options)


def _aim_gem(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int | None = None,
    mesh: Mesh | None = None,
    **options,
):
    """AIM's selection and filter with GEM's generator: `rounds` caps the rounds (its T)."""
    if rounds is not None:
        options["max_rounds"] = rounds
    return aim_gem(data, workload, mesh=mesh, **options)


def _aim_error_bounds(mechanism, state, synthetic: Dataset, confidence: float, domain: Domain) -> dict:
    """AIM's per-marginal L1 error bounds of the released records (post-processing: publishable)."""
    if isinstance(confidence, bool) or not isinstance(confidence, float | int) or not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    bounds = mechanism.error_bounds(state, float(confidence), synthetic=synthetic.codes)
    return {
        "confidence": float(confidence),
        "units": "L1 distance between count vectors; normalised: divided by the released row count",
        "marginals": [
            {
                "marginal": list(names),
                "l1_bound": float(b),
                "l1_bound_normalised": float(nb),
                "supported": bool(s),
            }
            for names, b, nb, s in zip(
                mechanism.workload.names(domain),
                bounds.bound,
                bounds.normalised,
                bounds.supported,
                strict=True,
            )
        ],
    }


def _rap_plus_plus(data: Dataset, workload: MarginalWorkload | None, *, rounds: int | None = None, **budget):
    """RAP++ over Section 5.1's query classes: categorical marginals (`workload`, or every
    feature x feature x target marginal when None), mixed marginals and linear thresholds. The
    random threshold queries are public: drawn from a fixed query-set key, not the noise key."""
    classes = default_classes(data.domain, jax.random.key(0), workload=workload, marginal_rounds=rounds)
    return rap_plus_plus(data, classes, **budget)


def measured_workload(mechanism, workload: MarginalWorkload | None) -> MarginalWorkload:
    """The marginals a release is judged on: `workload`, or those a mechanism that builds its
    own query classes chose (rap++: its categorical-marginal class)."""
    return mechanism.classes[0].workload if workload is None else workload


# Default rounds: the papers' settings on ADULT (reduced), capped at what the workload offers
# where each marginal is measured at most once (the cap is logged); entries without one keep their
# factory's default. Both relations where the mechanism can measure counts with n private.
_BOTH = (Neighboring.REPLACE_ONE, Neighboring.ADD_REMOVE)
_AIM_RELATIONS = (Neighboring.ADD_REMOVE, Neighboring.REPLACE_ONE)  # add-remove, as in the paper
MECHANISMS: dict[str, MechanismSpec] = {
    "independent": MechanismSpec(_independent, one_round=True, relations=_BOTH, mesh=True, relaxed=False),
    "gaussian": MechanismSpec(gaussian, one_round=True, relations=_BOTH, mesh=True, relaxed=False),
    "mwem": MechanismSpec(mwem, rounds=25, cap_rounds=True, mesh=True),
    "pep": MechanismSpec(pep, rounds=25, cap_rounds=True, mesh=True),
    "pmw-pub": MechanismSpec(pmw_pub, rounds=25, cap_rounds=True, public=True, mesh=True),
    "pep-pub": MechanismSpec(pep_pub, rounds=25, cap_rounds=True, public=True, mesh=True),
    "rap": MechanismSpec(rap, rounds=10, cap_rounds=True, per_round=5, mesh=True),
    "rap-softmax": MechanismSpec(rap_softmax, rounds=10, cap_rounds=True, per_round=5, mesh=True),
    "gem": MechanismSpec(gem, rounds=50, cap_rounds=True, mesh=True),
    "gem-pub": MechanismSpec(gem_pub, rounds=50, cap_rounds=True, public=True, mesh=True),
    "dualquery": MechanismSpec(dualquery, rounds=100),
    "fem": MechanismSpec(fem, rounds=200),
    "aim": MechanismSpec(
        _aim, error_bounds=_aim_error_bounds, relations=_AIM_RELATIONS, mesh=True, compresses=True
    ),
    "rap++": MechanismSpec(_rap_plus_plus, own_workload=True, real_numeric=True),
    "aim-gem": MechanismSpec(_aim_gem, relations=_AIM_RELATIONS, mesh=True, compresses=True),
}
# Works on any categorical domain with no dense histogram and no extra dependency, in about a
# minute on ADULT; AIM is more accurate on small domains but needs the `pgm` extra and is slower.
DEFAULT_MECHANISM = "rap-softmax"


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


# -- inputs ---------------------------------------------------------------------------------------


def as_domain(schema: Domain | Mapping[str, Any] | str | os.PathLike) -> Domain:
    """A declared domain from a `Domain`, a JSON-style dict (schema or sizes form, see
    `jaxdp.domain`) or the path of a JSON file holding one."""
    if isinstance(schema, Domain):
        return schema
    if isinstance(schema, Mapping):
        return Domain.from_schema(schema) if "columns" in schema else Domain.from_sizes(schema)
    if isinstance(schema, str | os.PathLike):
        return Domain.load(schema)
    raise TypeError(
        f"schema must be a jaxdp.Domain, a dict or a JSON file path, got {type(schema).__name__}; "
        "the domain is always declared, never read from the data"
    )


def as_dataset(data: Any, schema: Domain | Mapping[str, Any] | str | os.PathLike | None) -> Dataset:
    """Validate a table against its declared schema.

    Args:
        data: a pandas DataFrame or a dict of columns (labels where the schema declares them,
            codes otherwise, numeric columns in original units), a 2-D NumPy array with the
            schema's columns in order (numeric dtype: codes and values; object/str dtype:
            labels), or a `Dataset` (whose domain must equal the schema, if one is given).
        schema: the declared domain (see `as_domain`); may be None only for a `Dataset`.

    Raises:
        DataError: naming the column and the number of bad values, never a value.
    """
    if isinstance(data, Dataset):
        if schema is not None and as_domain(schema) != data.domain:
            raise DataError("the Dataset's domain differs from the declared schema")
        return data
    if schema is None:
        raise TypeError("schema is required: the domain is always declared, never read from the data")
    domain = as_domain(schema)
    if containers.is_dataframe(data) or isinstance(data, Mapping):
        return Dataset.from_columns(domain, {str(c): np.asarray(data[c]) for c in data})
    if isinstance(data, np.ndarray):
        if data.ndim != 2 or data.shape[1] != len(domain):
            raise DataError(f"an array must have shape (n_records, {len(domain)}), got {data.shape}")
        if data.dtype.kind in "biuf":
            kinds = [isinstance(a, Categorical) for a in domain.attributes]
            codes = data[:, [j for j, c in enumerate(kinds) if c]]
            numeric = data[:, [j for j, c in enumerate(kinds) if not c]]
            return Dataset.from_codes(domain, codes, numeric)
        return Dataset.from_columns(domain, {a.name: data[:, j] for j, a in enumerate(domain.attributes)})
    raise TypeError(
        f"data must be a pandas DataFrame, a dict of columns, a 2-D NumPy array or a jaxdp.Dataset, "
        f"got {type(data).__name__}"
    )


def workload_from_spec(spec: str | MarginalWorkload | list, domain: Domain) -> MarginalWorkload:
    """A workload from "all-Kway", the name of a shipped workload (`jaxdp.datasets.WORKLOADS`),
    a list of lists of attribute names, the path of a JSON file holding such a list, or a
    `MarginalWorkload` (returned as is)."""
    if isinstance(spec, MarginalWorkload):
        return spec
    if spec in datasets.WORKLOADS:
        return from_names(domain, datasets.workload(spec))
    if isinstance(spec, list):
        if not all(isinstance(m, list | tuple) for m in spec):
            raise ValueError("workload must be a list of lists of attribute names")
        return from_names(domain, [list(m) for m in spec])
    if spec.startswith("all-") and spec.endswith("way"):
        try:
            k = int(spec[4:-3])
        except ValueError:
            raise ValueError(f"workload {spec!r}: expected all-Kway, e.g. all-3way") from None
        return all_kway(domain.sizes, k)
    try:
        marginals = json.loads(Path(spec).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"workload: cannot read {spec!r}: {type(err).__name__}") from None
    if not isinstance(marginals, list) or not all(isinstance(m, list) for m in marginals):
        raise ValueError("workload file must hold a JSON list of lists of attribute names")
    return from_names(domain, marginals)


def as_table_schema(schema: Any) -> TableSchema | None:
    """A table schema from a `TableSchema`, a dict in the ``"columns"`` form or the path of a
    JSON file holding one; None for the other declarations (a `Domain`, the sizes form)."""
    if isinstance(schema, TableSchema):
        return schema
    if is_table_schema(schema):
        return TableSchema.from_json(schema)
    if isinstance(schema, str | os.PathLike):
        obj = read_json(schema, "schema")
        return TableSchema.from_json(obj) if is_table_schema(obj) else None
    return None


@dataclasses.dataclass(frozen=True)
class Inputs:
    """A release's private input as its mechanism reads it.

    Attributes:
        data: the coded private records.
        budget: the factory's budget keywords (epsilon and delta, or the rho preprocessing left).
        public: the coded public table, if any.
        prepared: the coding of a table schema's columns and what it charged (None for input
            already coded).
    """

    data: Dataset
    budget: dict[str, Any]
    public: Dataset | None = None
    prepared: preprocess.Prepared | None = None


def prepare_inputs(
    name: str,
    data: Any,
    schema: Any,
    *,
    epsilon: float,
    delta: float,
    key: Key,
    relation: Neighboring | str | None = None,
    conversion: str = "exact",
    public: Any = None,
    noise: str = "discrete",
    binning_share: float = DEFAULT_BINNING_SHARE,
) -> Inputs:
    """Validate a table and code it for mechanism `name`.

    A table schema (the ``"columns"`` form, `jaxdp.tables`) codes numeric columns to bins for
    the mechanisms over categories and keeps them real for rap++, with empty cells where
    nullable; private quantile bins, if the schema asks for them, are measured here, charged
    `binning_share` of the budget's rho. Any other declaration (a `Domain`, the sizes form, or
    a `Dataset` as data) is used as given (`as_dataset`).

    Raises:
        DataError: the table does not fit the schema (column and count named, never a value).
        ValueError: bad budget, relation or share.

    Privacy:
        See `jaxdp.preprocess.prepare`: only private quantile binning reads the data, and it
        is charged to the release's budget and recorded in its ledger.
    """
    table_schema = None if isinstance(data, Dataset) else as_table_schema(schema)
    if isinstance(data, RawTable):
        if table_schema is not None and table_schema != data.schema:
            raise DataError("the table was validated against another schema than the one given")
        table_schema = data.schema
    if table_schema is None:
        dataset = as_dataset(data, schema)
        public_data = None if public is None else as_dataset(public, dataset.domain)
        return Inputs(dataset, {"epsilon": epsilon, "delta": delta}, public_data)
    table = data if isinstance(data, RawTable) else containers.table_from(data, table_schema)
    prepared = preprocess.prepare(
        table,
        real=mechanism_spec(name).real_numeric,
        epsilon=epsilon,
        delta=delta,
        conversion=conversion,
        relation=mechanism_relation(name, relation),
        key=key,
        noise=noise,
        binning_share=binning_share,
    )
    public_data = None
    if public is not None:
        public_table = public if isinstance(public, RawTable) else containers.table_from(public, table_schema)
        public_data = prepared.coding.encode(public_table)
    return Inputs(prepared.dataset, prepared.budget, public_data, prepared)


def finish(result: Result, inputs: Inputs, key: Key) -> Result:
    """A release decoded to its table's columns, labels and units (values within bins drawn
    with `jaxdp.keys.decode_key(key)`), with the preprocessing in its report, ledger and plan;
    `result` unchanged for input that came coded.

    Privacy:
        Post-processing of the release; the ledger gains the preprocessing's entries.
    """
    prepared = inputs.prepared
    if prepared is None:
        return result
    report, ledger, plan = preprocess.merge(result.report, result.ledger, prepared, result.plan)
    data = result.data
    if result.synthetic is not None:
        data = prepared.coding.decode(result.synthetic, decode_key(require_key(key)))
    return dataclasses.replace(
        result, data=data, report=report, ledger=ledger, plan=plan, coding=prepared.coding
    )


# -- building and running -------------------------------------------------------------------------


def build(
    name: str,
    data: Dataset,
    workload: MarginalWorkload | None,
    *,
    epsilon: float | None,
    delta: float | None = DEFAULT_DELTA,
    rho: float | None = None,
    relation: Neighboring | str | None = None,
    conversion: str = "exact",
    rounds: int | None = None,
    public: Dataset | None = None,
    mesh: Mesh | None = None,
    **options: Any,
):
    """Build registered mechanism `name` (its plan is fixed and checked here, before any run).

    The budget is (epsilon, delta), or rho with epsilon and delta None (what a release's
    preprocessing left, `jaxdp.preprocess`). `relation` None is the mechanism's default (the
    first of its registry entry's `relations`). Default rounds of a mechanism that measures each
    marginal at most once are capped at the workload's marginals (logged on the "jaxdp" logger).
    `mesh` (one axis "records", `jaxdp.queries.records_mesh()`) splits the records over its
    devices to count them, for the factories that take a `mesh` keyword.

    Raises:
        ValueError: unknown mechanism, rounds given to a one-round mechanism, public data
            missing or unexpected, a mesh for a mechanism that cannot use one, or any error of
            the factory.
    """
    spec = mechanism_spec(name)
    relation = mechanism_relation(name, relation)
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
    return spec.factory(data, workload, **options, **budget)


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


@dataclasses.dataclass(frozen=True)
class Result:
    """What `synthesize` returns.

    Attributes:
        data: the release, in the container the input came in: synthetic records (DataFrame,
            dict of columns, NumPy array or Dataset), or for mechanisms that release answers
            (gaussian) the noisy answers (a DataFrame with columns marginal, cell, answer when
            the input was one; otherwise a (n_queries,) float64 array).
        report: the privacy report (the command line's `--report`), safe to publish except
            `seconds` (a timing side channel on the table's size).
        ledger: one entry per private primitive invoked, audited against the plan.
        error_bounds: the mechanism's uncertainty quantification, or None if it has none.
        synthetic: the synthetic records as a `Dataset` (None for answer releases).
        answers: the released noisy answers (None for record releases).
        mechanism: the built mechanism (its plan, workload and settings).
        state: its final state.
        plan: the release's plan, which its ledger was audited against: the budget, the
            preprocessing's charges (private binning) and the mechanism's.
        coding: how a table schema's columns were coded for the mechanism (None for inputs
            already coded: a `Dataset`, a sizes-form domain).
    """

    data: Any
    report: dict[str, Any]
    ledger: list[LedgerEntry]
    error_bounds: Any | None
    synthetic: Dataset | None = dataclasses.field(default=None, repr=False)
    answers: np.ndarray | None = dataclasses.field(default=None, repr=False)
    mechanism: Any = dataclasses.field(default=None, repr=False)
    state: Any = dataclasses.field(default=None, repr=False)
    plan: Plan | None = dataclasses.field(default=None, repr=False)
    coding: TableCoding | None = dataclasses.field(default=None, repr=False)


def execute(
    name: str,
    mechanism: Any,
    key: Key,
    domain: Domain,
    *,
    rows: int | None = None,
    progress: loop.Progress | bool | None = None,
    started: float | None = None,
    confidence: float = 0.95,
) -> Result:
    """Run a built mechanism, release its output and write its report (`data` left as a
    `Dataset` or the answer vector; `synthesize` converts it to the input's container).

    Args:
        name: the registry name (recorded in the report).
        progress: passed to `loop.run` (True: one log line per block of rounds).
        started: `time.perf_counter()` at the start of the job (default: now), for `seconds`.
        confidence: of the error bounds, for mechanisms that give them (their report gains
            `error_bounds`).
    """
    started = time.perf_counter() if started is None else started
    spec = mechanism_spec(name)
    key = require_key(key)
    answers_out = contract.releases(mechanism) == "answers"
    if answers_out:
        rows = None
    _release_ahead(mechanism, key, rows)
    # The registry's mechanisms are checked for key reuse by the test suite, not on every release.
    run = loop.run(mechanism, key, progress=progress if mechanism.rounds > 1 else None, check_keys=False)
    synthetic = answers = None
    if rows is None and not answers_out and hasattr(mechanism, "default_rows"):
        # Under add-remove the row count is read from the noisy state on the host: inside the
        # compiled release it would be a tracer.
        rows = mechanism.default_rows(run.state)
    if answers_out:
        answers = np.asarray(_released(mechanism, run.state, key, rows), np.float64)
        released, n_rows = answers, int(answers.shape[0])
    else:
        out = _released(mechanism, run.state, key, rows)
        if isinstance(out, Dataset):
            synthetic = out
        elif isinstance(out, tuple):  # (codes, numeric in [0, 1]): a mixed-type release
            synthetic = Dataset(domain, *(np.asarray(x) for x in out))
        else:
            codes = np.asarray(out)
            synthetic = Dataset(domain, codes, np.zeros((codes.shape[0], 0), np.float32))
        released, n_rows = synthetic, len(synthetic)
    spent = rho_spent(run.ledger)
    plan = mechanism.plan
    report = {
        "mechanism": name,
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "rho_budget": plan.rho_budget,
        "rho_spent": spent,
        # A plan with a rho budget (what preprocessing left) has no delta to convert at.
        "epsilon_spent": None if plan.delta is None else epsilon_from_rho(spent, plan.delta, plan.conversion),
        "conversion": plan.conversion,
        "relation": mechanism.relation.value,
        "noise": noise_name(run.ledger),
        "ledger": [e.to_json() for e in run.ledger],
        "seconds": time.perf_counter() - started,
        "rows": n_rows,
        "output": "noisy answers" if answers_out else "synthetic records",
        "preprocessing": None,
        "jaxdp_version": __version__,
    }
    if spec.compresses:
        report["compression"] = mechanism.compression_report(run.state)
    bounds = None
    if spec.error_bounds is not None:
        bounds = spec.error_bounds(mechanism, run.state, synthetic, confidence, domain)
        report["error_bounds"] = bounds
    plan = loop.realised_plan(mechanism, run.state)
    return Result(released, report, run.ledger, bounds, synthetic, answers, mechanism, run.state, plan)


# The report's "noise": what the measurements added, or what the selections drew where a
# mechanism measures nothing (DualQuery, FEM).
_MEASUREMENT_NOISE = {
    "discrete_gaussian": "discrete-gaussian",
    "discrete_laplace": "discrete-laplace",
    "gaussian": "float-gaussian",
    "laplace": "float-laplace",
}
_SELECTION_NOISE = {
    "discrete_exponential": "exact-exponential",
    "discrete_top_k": "exact-exponential",
    "exponential": "float-gumbel",
    "gumbel_top_k": "float-gumbel",
}


def noise_name(ledger: list[LedgerEntry]) -> str:
    """The report's `noise` field from the primitives the ledger records, e.g.
    "discrete-gaussian" (exact integer noise) or "float-gaussian" (`noise="float"`); several
    kinds are joined with "+"."""
    used = {e.primitive for e in ledger}
    names = sorted({_MEASUREMENT_NOISE[p] for p in used if p in _MEASUREMENT_NOISE})
    names = names or sorted({_SELECTION_NOISE[p] for p in used if p in _SELECTION_NOISE})
    return "+".join(names) or "none"


def _release(mechanism, state, key, rows=None):
    return (
        loop.release(mechanism, state, key)
        if rows is None
        else loop.release(mechanism, state, key, rows=rows)
    )


# One compiled program per release shape: sampling op by op compiles every small op separately
# (half a minute for GEM on ADULT on a 2-core CPU).
_release_jit = jax.jit(_release, static_argnums=3)
# A release of up to FAST_RELEASE_ROWS records is mostly its compile (PEP on ADULT-reduced:
# 0.95 s to compile, 0.02 s to run), so it compiles with XLA:CPU's quicker code generator
# (`jaxdp._jit`): 0.33 s less to compile, and at 10^6 records 0.29 s less to compile and 0.06 s
# more to run. Beyond, the run outgrows what the compile saves.
FAST_RELEASE_ROWS = 2**20
_release_fast_compiled = fast_compiled(_release, static_argnums=3)


def _release_compiler(mechanism, rows: int | None):
    """The release's jitted function: fast-compiled where the release is small."""
    if contract.releases(mechanism) == "answers":
        return _release_fast_compiled
    if rows is None:
        rows = getattr(mechanism, "public_rows", None)
    return _release_jit if rows is None or rows > FAST_RELEASE_ROWS else _release_fast_compiled


# Release programs by signature, compiled on a thread of their own, so that a release can start
# compiling before the rounds run, and a process that releases the same shapes again (a notebook,
# a loop over seeds) compiles them once.
_release_programs = Compiler("jaxdp-release-ahead")


def _release_program(mechanism, state, key: Key, rows: int | None, *, wait: bool = True):
    """The compiled release for these arguments' shapes (state may be shapes only)."""
    arguments = (mechanism, state, key)
    signature = (
        rows,
        jax.tree.structure(arguments),
        tuple((x.shape, x.dtype) for x in jax.tree.leaves(arguments)),
    )
    release = _release_compiler(mechanism, rows)
    return _release_programs.program(signature, lambda: release.lower(*arguments, rows), wait=wait)


def _compiles_ahead(mechanism) -> bool:
    """Whether the release goes through `_release_programs`: a jittable mechanism on one device
    (with several, the state's shardings would have to be part of the signature)."""
    return contract.jittable(mechanism) and jax.device_count() == 1


def _release_ahead(mechanism, key: Key, rows: int | None) -> bool:
    """Start compiling the release, so that it compiles while the rounds compile and run (a
    second of a cold run's few on a 2-core CPU: PEP's histogram release). Only where the
    program is known before the rounds: not for a row count read from the noisy state
    (add-remove). Returns whether it started."""
    if not _compiles_ahead(mechanism):
        return False
    if rows is None and contract.releases(mechanism) != "answers":
        rows = getattr(mechanism, "public_rows", None)
        if rows is None:
            return False
    _release_program(mechanism, loop.state_shapes(mechanism, key), key, rows, wait=False)
    return True


def _released(mechanism, state, key: Key, rows: int | None):
    """The release, by the compiled program of its shapes (the one compiled ahead, if any)."""
    if not _compiles_ahead(mechanism):
        release = _release_compiler(mechanism, rows) if contract.jittable(mechanism) else _release
        return release(mechanism, state, key, rows)
    return _release_program(mechanism, state, key, rows)(mechanism, state, key)


def release_errors(real: Dataset, result: Result, workload: MarginalWorkload) -> dict[str, Any]:
    """max_abs, mean_l1, rmse of a release against the real table (plus "relaxed": the fitted
    distribution's own errors, for every mechanism whose spec is `relaxed`).

    Uses the real data: NOT differentially private, for the data holder only.
    """
    if result.answers is not None:
        relation = result.mechanism.relation
        estimated = result.answers if relation is Neighboring.REPLACE_ONE else result.answers / len(real)
        return answer_errors(fractions(real, workload), estimated, workload)
    errors: dict[str, Any] = workload_errors(real, result.synthetic, workload)
    if mechanism_spec(result.report["mechanism"]).relaxed:
        relaxed = np.asarray(result.mechanism.relaxed_answers(result.state), np.float64)
        errors["relaxed"] = answer_errors(fractions(real, workload), relaxed, workload)
    return errors


def answers_table(workload: MarginalWorkload, domain: Domain, answers: np.ndarray) -> dict[str, list]:
    """Noisy answers as columns marginal ("a|b|c"), cell (row-major index), answer."""
    names = ["|".join(n) for n in workload.names(domain)]
    table: dict[str, list] = {"marginal": [], "cell": [], "answer": []}
    for i, (start, cells) in enumerate(zip(workload.offsets, workload.cells, strict=True)):
        table["marginal"] += [names[i]] * cells
        table["cell"] += list(range(cells))
        table["answer"] += [float(a) for a in answers[start : start + cells]]
    return table


# -- the one call ---------------------------------------------------------------------------------


def synthesize(
    data: Any,
    schema: Domain | Mapping[str, Any] | str | os.PathLike | None,
    *,
    mechanism: str = DEFAULT_MECHANISM,
    epsilon: float,
    delta: float = DEFAULT_DELTA,
    key: Key,
    workload: str | list | MarginalWorkload | None = DEFAULT_WORKLOAD,
    rounds: int | None = None,
    rows: int | None = None,
    public: Any = None,
    relation: Neighboring | str | None = None,
    conversion: str = "exact",
    progress: bool = False,
    confidence: float = 0.95,
    mesh: Mesh | None = None,
    binning_share: float = DEFAULT_BINNING_SHARE,
    **options: Any,
) -> Result:
    """Release a differentially private synthetic version of a table.

    Args:
        data: the private table: pandas DataFrame, dict of columns, 2-D NumPy array
            (`jaxdp.containers`), a `jaxdp.tables.RawTable`, or a `Dataset` (already coded).
        schema: the declared domain, never inferred from the data: a table schema (a dict in the
            ``"columns"`` form, `jaxdp.tables`: labelled categories, numeric bounds with
            bins/edges/integer, nullable columns), the sizes form, a `Domain`, or a JSON file
            path holding one. With a table schema every mechanism runs: numeric columns become
            bins (kept real for rap++) and the release comes back in the table's columns,
            labels and units, empty cells where the release has them.
        mechanism: a name in `MECHANISMS`.
        epsilon, delta: the (epsilon, delta)-DP budget; delta defaults to 1e-9, a fixed value
            that does not depend on the (private) record count.
        key: the root key, `jax.random.key(seed)` for a reproducible run or
            `jaxdp.secure_root_key()` for a release. Secret: it regenerates the noise.
        workload: "all-Kway", a list of lists of attribute names, or a `MarginalWorkload`; None
            for rap++'s class-conditional marginals on the schema's target.
        rounds: rounds of an adaptive mechanism (default: its registry default).
        rows: synthetic rows (default: the record count under replace-one).
        public: a public table over the same schema (pmw-pub, pep-pub, gem-pub).
        relation: "replace-one" (n public) or "add-remove"; None: the mechanism's default (its
            registry entry's first `relations`), recorded in the report.
        conversion: "exact" or "simple" zCDP-to-(epsilon, delta) conversion.
        progress: report progress (a tqdm bar when tqdm is installed, else one log line per
            block of rounds on the "jaxdp" logger). Off by default.
        confidence: of the per-marginal error bounds (aim).
        mesh: count the records split over this mesh's devices (one axis "records":
            `jaxdp.queries.records_mesh()`; independent, gaussian, mwem, pep, pmw-pub, pep-pub,
            rap, rap-softmax, gem, gem-pub, aim, aim-gem). The release equals the single-device
            one up to float summation order: noise is added once, to the summed counts.
        binning_share: the fraction of the budget's rho spent on private quantile bins, when
            the table schema asks for them (`"binning": "quantiles"`).
        **options: the mechanism factory's own keywords (e.g. batch for gem).

    Returns:
        A `Result`; `data` comes back in the input's container (a DataFrame for a DataFrame).

    Raises:
        DataError: the table does not fit the schema (column and count named, never a value).
        ValueError: bad arguments; BudgetExceededError: the plan exceeds the budget.

    Privacy:
        (epsilon, delta)-DP for the stated relation, by the release's plan (private binning, if
        any, and the mechanism); `report` and `ledger` record every private primitive and are
        checked against the plan. Decoding to original units is post-processing.
    """
    started = time.perf_counter()
    key = require_key(key)
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise ValueError(f"rows must be an integer >= 1, got {rows!r}")
    relation = mechanism_relation(mechanism, relation)
    inputs = prepare_inputs(
        mechanism,
        data,
        schema,
        epsilon=epsilon,
        delta=delta,
        key=key,
        relation=relation,
        conversion=conversion,
        public=public,
        noise=options.get("noise", "discrete"),
        binning_share=binning_share,
    )
    domain = inputs.data.domain
    work = None if workload is None else workload_from_spec(workload, domain)
    mech = build(
        mechanism,
        inputs.data,
        work,
        **inputs.budget,
        relation=relation,
        conversion=conversion,
        rounds=rounds,
        public=inputs.public,
        mesh=mesh,
        **options,
    )
    with _progress_reporter(progress) as report_progress:
        result = execute(
            mechanism, mech, key, domain, rows=rows, progress=report_progress, confidence=confidence
        )
        result = finish(result, inputs, key)
        result = dataclasses.replace(
            result, report={**result.report, "seconds": time.perf_counter() - started}
        )
    work = measured_workload(mech, work)
    return dataclasses.replace(result, data=_like_input(data, result, work, domain))


def _like_input(data: Any, result: Result, workload: MarginalWorkload, domain: Domain) -> Any:
    """The release in the container the private table came in."""
    if result.answers is not None:
        if containers.is_dataframe(data):
            return type(data)(answers_table(workload, domain, result.answers))
        return result.answers
    if isinstance(result.data, RawTable):  # a table schema's release, decoded
        return containers.like(data, result.data)
    synthetic = result.synthetic
    if isinstance(data, Dataset):
        return synthetic
    columns = synthetic.to_columns()
    if containers.is_dataframe(data):
        return type(data)(columns)
    if isinstance(data, Mapping):
        return columns
    if data.dtype.kind in "biuf":  # codes in, codes out (numeric columns in original units)
        cat = {a.name: j for j, a in enumerate(synthetic.domain.categorical)}
        stacked = np.stack(
            [synthetic.codes[:, cat[n]] if n in cat else columns[n] for n in synthetic.domain.names], axis=1
        )
        return stacked if synthetic.domain.numeric else stacked.astype(np.int32)
    return np.stack([np.asarray(columns[n], dtype=object) for n in synthetic.domain.names], axis=1)


class _progress_reporter:
    """Context manager giving `loop.run`'s progress argument: None when off, a tqdm updater
    when tqdm is installed, else True (log lines on the "jaxdp" logger)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return None
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return True
        self._tqdm = tqdm
        return self._update

    def _update(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = self._tqdm(total=total, unit="round", desc="jaxdp")
        self.bar.update(done - self.bar.n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False
