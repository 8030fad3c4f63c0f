"""High-level API: a table and its declared schema in, a private release with its report out.

`synthesize(data, schema, mechanism=..., epsilon=..., delta=..., key=...)` validates the table
against the schema (never inferring a domain from the data), builds the named mechanism from the
registry, runs it, audits its ledger and returns a `Result`: the release in the container the
table came in (a pandas DataFrame, a dict of columns, a NumPy array or a `Dataset`), the privacy
report the command line writes, the ledger, and error bounds where the mechanism offers them.

The path of a release, one module per step: `jaxdp.inputs` (the table and its schema in),
`jaxdp.mechanisms.registry` (the mechanism built by name), `jaxdp.execution` (run and released),
`jaxdp.report` (what it says of itself), and back out through `jaxdp.inputs.finish`. Their public
names are re-exported here, where earlier releases defined them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from typing import Any

from jax.sharding import Mesh

from jaxdp.binning import DEFAULT_BINNING_SHARE
from jaxdp.checkpoint import DEFAULT_EVERY, Checkpoint
from jaxdp.domain import Dataset, Domain, RawTable, columns_like, is_arrow_table, is_dataframe, like
from jaxdp.execution import execute, progress_reporter
from jaxdp.inputs import (
    Inputs,
    as_dataset,
    as_domain,
    as_table_schema,
    finish,
    prepare_inputs,
    release_fingerprint,
    workload_from_spec,
)
from jaxdp.keys import require_key
from jaxdp.mechanisms.registry import (
    DEFAULT_DELTA,
    DEFAULT_MECHANISM,
    MECHANISMS,
    MechanismSpec,
    build,
    measured_workload,
    mechanism_relation,
    mechanism_spec,
    register,
)
from jaxdp.queries import MarginalWorkload, spans_processes
from jaxdp.releasing import FAST_RELEASE_ROWS
from jaxdp.report import Result, answers_table, noise_name, release_errors
from jaxdp.types import Key, Neighboring

__all__ = [
    "DEFAULT_DELTA",
    "DEFAULT_MECHANISM",
    "DEFAULT_WORKLOAD",
    "FAST_RELEASE_ROWS",
    "MECHANISMS",
    "Inputs",
    "MechanismSpec",
    "Result",
    "answers_table",
    "as_dataset",
    "as_domain",
    "as_table_schema",
    "build",
    "execute",
    "finish",
    "measured_workload",
    "mechanism_relation",
    "mechanism_spec",
    "noise_name",
    "prepare_inputs",
    "register",
    "release_errors",
    "release_fingerprint",
    "synthesize",
    "workload_from_spec",
]

DEFAULT_WORKLOAD = "all-3way"


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
    conversion: str | None = None,
    progress: bool = False,
    confidence: float = 0.95,
    mesh: Mesh | None = None,
    binning_share: float = DEFAULT_BINNING_SHARE,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    keep_checkpoint: bool = False,
    **options: Any,
) -> Result:
    """Release a differentially private synthetic version of a table.

    Args:
        data: the private table: pandas DataFrame, pyarrow Table, dict of columns, 2-D NumPy array
            (`jaxdp.domain.encode`), a `jaxdp.domain.RawTable`, or a `Dataset` (already coded).
        schema: the declared domain, never inferred from the data: a table schema (a dict in the
            ``"columns"`` form, `jaxdp.domain.schema`: labelled categories, numeric bounds with
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
        conversion: "exact" or "simple" zCDP-to-(epsilon, delta) conversion; "pld": a
            mechanism whose plan is fixed before it runs has its noise calibrated by the plan's
            privacy loss distribution (`jaxdp.pld`) where that is tighter than zCDP (about 10%
            more rho for an all-Gaussian plan at delta 1e-9); refused for AIM and AIM-GEM (no
            PLD filter for their adaptive rounds) and where private bins spend budget first;
            "gdp": AIM-GDP and SWIFT under a Gaussian-DP filter (`jaxdp.gdp`). None (default):
            the mechanism's registry `conversion` ("gdp" for AIM-GDP and SWIFT, measured to lower
            their error; "exact" for the others, and wherever private bins spend budget first).
            Every report names the `accountant` that states `epsilon_spent` and gives
            `epsilon_zcdp`, and where they apply `epsilon_pld` and `epsilon_gdp`.
        progress: report progress (a tqdm bar when tqdm is installed, else one log line per
            block of rounds on the "jaxdp" logger). Off by default.
        confidence: of the per-marginal error bounds (aim).
        mesh: count the records split over this mesh's devices (one axis "records":
            `jaxdp.queries.records_mesh()`; independent, gaussian, mwem, pep, pmw-pub, pep-pub,
            rap, rap-softmax, gem, gem-pub, aim, aim-gem, mst). The release equals the single-device
            one up to float summation order: noise is added once, to the summed counts. Over a
            mesh spanning several processes (`jax.distributed`), `data` is this process's own
            rows, and every process releases what one process holding all of them would.
        binning_share: the fraction of the budget's rho spent on private quantile bins, when
            the table schema asks for them (`"binning": "quantiles"`).
        checkpoint: a directory to checkpoint the rounds in (`jaxdp.checkpoint`; created
            owner-only): every `checkpoint_every` rounds (default 10) and after the last, the state and the
            rounds' Info are written atomically. Called again with the same arguments and key
            after a kill, the run resumes from the checkpoint there and releases exactly what
            the uninterrupted run releases, spending nothing twice; a checkpoint of any other
            run is refused (CheckpointError naming what differs). Removed after the release
            unless `keep_checkpoint`.
        **options: the mechanism factory's own keywords (e.g. batch for gem).

    Returns:
        A `Result`; `data` comes back in the input's container (a DataFrame for a DataFrame).

    Raises:
        DataError: the table does not fit the schema (column and count named, never a value).
        ValueError: bad arguments; BudgetExceededError: the plan exceeds the budget;
            CheckpointError: the checkpoint directory holds another run's checkpoint, a corrupt
            one, or is in use.

    Privacy:
        (epsilon, delta)-DP for the stated relation, by the release's plan (private binning, if
        any, and the mechanism); `report` and `ledger` record every private primitive and are
        checked against the plan. Decoding to original units is post-processing.
    """
    started = time.perf_counter()
    key = require_key(key)
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise ValueError(f"rows must be an integer >= 1, got {rows!r}")
    if checkpoint is None and (keep_checkpoint or checkpoint_every is not None):
        raise ValueError("checkpoint_every and keep_checkpoint need checkpoint=DIR")
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
    if mesh is not None and spans_processes(mesh) and inputs.prepared is not None and inputs.prepared.ledger:
        raise ValueError(
            "mesh: private quantile bins would be measured on one process's rows only; over a mesh "
            "spanning several processes declare every numeric column's bins (edges, or equal-width bins)"
        )
    domain = inputs.data.domain
    work = None if workload is None else workload_from_spec(workload, domain)
    mech = build(
        mechanism,
        inputs.data,
        work,
        **inputs.budget,
        relation=relation,
        conversion=inputs.conversion,
        rounds=rounds,
        public=inputs.public,
        mesh=mesh,
        **options,
    )
    store = None
    if checkpoint is not None:
        fingerprint = release_fingerprint(
            name=mechanism,
            inputs=inputs,
            workload=work,
            epsilon=epsilon,
            delta=delta,
            relation=relation,
            conversion=inputs.conversion,
            noise=options.get("noise", "discrete"),
        )
        every = DEFAULT_EVERY if checkpoint_every is None else checkpoint_every
        store = Checkpoint(checkpoint, every=every, fingerprint=fingerprint)
    with progress_reporter(progress) as report_progress:
        result = execute(
            mechanism,
            mech,
            key,
            domain,
            rows=rows,
            progress=report_progress,
            confidence=confidence,
            checkpoint=store,
        )
        result = finish(result, inputs, key)
        result = dataclasses.replace(
            result, report={**result.report, "seconds": time.perf_counter() - started}
        )
    work = measured_workload(mech, work)
    result = dataclasses.replace(result, data=_like_input(data, result, work, domain))
    if store is not None and not keep_checkpoint:
        store.remove()
    return result


def _like_input(data: Any, result: Result, workload: MarginalWorkload, domain: Domain) -> Any:
    """The release in the container the private table came in (`jaxdp.domain.like`)."""
    if result.answers is not None:
        if is_dataframe(data) or is_arrow_table(data):
            return columns_like(data, answers_table(workload, domain, result.answers))
        return result.answers
    if isinstance(data, Dataset):
        return result.synthetic
    table = result.data if isinstance(result.data, RawTable) else result.synthetic.to_table()
    return like(data, table)
