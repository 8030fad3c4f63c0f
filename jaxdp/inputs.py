"""A release's inputs: the declared schema, the table checked against it, the workload, and the
coding that takes a table schema's columns to a mechanism's records and its release back.

`prepare_inputs` is the way in (any container, any declaration form, to the coded `Dataset` and
the budget left for the mechanism); `finish` is the way back (the release decoded to the table's
columns, labels and units, with the preprocessing in its report and ledger).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jaxdp import binning, datasets, preprocess
from jaxdp.binning import DEFAULT_BINNING_SHARE
from jaxdp.checkpoint import digest
from jaxdp.domain import (
    DataError,
    Dataset,
    Domain,
    RawTable,
    TableSchema,
    domain_from_schema,
    is_table_schema,
    load_declaration,
    load_domain,
    table_from,
)
from jaxdp.keys import decode_key, require_key
from jaxdp.mechanisms.registry import default_conversion, mechanism_relation, mechanism_spec
from jaxdp.queries import MarginalWorkload, all_kway, from_names
from jaxdp.report import Result
from jaxdp.types import Key, Neighboring


def as_domain(schema: Domain | Mapping[str, Any] | str | os.PathLike) -> Domain:
    """A declared domain from a `Domain`, a JSON-style dict (schema or sizes form, see
    `jaxdp.domain`) or the path of a JSON file holding one."""
    if isinstance(schema, Domain):
        return schema
    if isinstance(schema, Mapping):
        return domain_from_schema(schema) if "columns" in schema else Domain.from_sizes(schema)
    if isinstance(schema, str | os.PathLike):
        return load_domain(schema)
    raise TypeError(
        f"schema must be a jaxdp.Domain, a dict or a JSON file path, got {type(schema).__name__}; "
        "the domain is always declared, never read from the data"
    )


def as_dataset(data: Any, schema: Domain | Mapping[str, Any] | str | os.PathLike | None) -> Dataset:
    """Validate a table against its declared schema.

    Args:
        data: a pandas DataFrame, a pyarrow Table or a dict of columns (labels where the schema
            declares them, codes otherwise, numeric columns in original units), a 2-D NumPy
            array with the schema's columns in order (numeric dtype: codes and values; object/str
            dtype: labels), or a `Dataset` (whose domain must equal the schema, if one is given).
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
    return Dataset.from_table(domain, table_from(data, TableSchema.from_domain(domain)))


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
        try:
            return all_kway(domain.sizes, k)
        except DataError as err:
            raise DataError(f"workload {spec!r}: {err}") from None
    try:
        marginals = json.loads(Path(spec).read_text(encoding="utf-8-sig"))
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
        declared = load_declaration(schema, "schema")
        return declared if isinstance(declared, TableSchema) else None
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
        conversion: the release's calibration (the one asked for, else the mechanism's registry
            `conversion`, or zCDP's where private bins spend part of the budget first).
    """

    data: Dataset
    budget: dict[str, Any]
    public: Dataset | None = None
    prepared: preprocess.Prepared | None = None
    conversion: str = "exact"


def prepare_inputs(
    name: str,
    data: Any,
    schema: Any,
    *,
    epsilon: float,
    delta: float,
    key: Key,
    relation: Neighboring | str | None = None,
    conversion: str | None = None,
    public: Any = None,
    noise: str = "discrete",
    binning_share: float = DEFAULT_BINNING_SHARE,
) -> Inputs:
    """Validate a table and code it for mechanism `name`.

    A table schema (the ``"columns"`` form, `jaxdp.domain.schema`) codes numeric columns to bins for
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
    spec = mechanism_spec(name)
    if table_schema is None:
        dataset = as_dataset(data, schema)
        public_data = None if public is None else as_dataset(public, dataset.domain)
        conversion = default_conversion(name, conversion, spent_first=False)
        return Inputs(dataset, {"epsilon": epsilon, "delta": delta}, public_data, conversion=conversion)
    binned = not spec.real_numeric and any(binning.is_private(c) for c in table_schema.numeric)
    conversion = default_conversion(name, conversion, spent_first=binned)
    table = data if isinstance(data, RawTable) else table_from(data, table_schema)
    prepared = preprocess.prepare(
        table,
        real=spec.real_numeric,
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
        public_table = public if isinstance(public, RawTable) else table_from(public, table_schema)
        public_data = prepared.coding.encode(public_table)
    return Inputs(prepared.dataset, prepared.budget, public_data, prepared, conversion=conversion)


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
    # the declared plan says whether the charges were fixed before the run (AIM's: none)
    fixed = bool(result.mechanism.plan.charges)
    report, ledger, plan = preprocess.merge(result.report, result.ledger, prepared, result.plan, fixed=fixed)
    data = result.data
    if result.synthetic is not None:
        data = prepared.coding.decode(result.synthetic, decode_key(require_key(key)))
    model = result.model.with_release(report=report, ledger=ledger, coding=prepared.coding)
    return dataclasses.replace(
        result, data=data, report=report, ledger=ledger, plan=plan, coding=prepared.coding, model=model
    )


def release_fingerprint(
    *,
    name: str,
    inputs: Inputs,
    workload: MarginalWorkload | None,
    epsilon: float,
    delta: float,
    relation: Neighboring | str,
    conversion: str,
    noise: str,
) -> dict[str, str]:
    """What a release is made of, one digest or short text per item (a checkpoint's fingerprint,
    to which `loop.run` adds the built mechanism, the key and the rounds): a checkpoint is resumed,
    and a key file reused, only by the same release. The row count and the error bounds'
    confidence are not in it: they change what is sampled from the same state, not the rounds.

    Privacy:
        Holds a digest of the coded data (and public data): as sensitive as the data against a
        guess, so checkpoints are written owner-only (`jaxdp.checkpoint`).
    """
    data = [inputs.data.codes, inputs.data.numeric]
    if inputs.public is not None:
        data += [inputs.public.codes, inputs.public.numeric]
    relation = Neighboring(relation).value
    return {
        "mechanism": name,
        "budget": f"epsilon={float(epsilon)!r} delta={float(delta)!r}",
        "relation_and_noise": f"{relation}, {conversion} conversion, {noise} noise",
        "data": digest(*data),
        "domain": digest(inputs.data.domain.to_json()),
        "workload": "the mechanism's own"
        if workload is None
        else digest([list(c) for c in workload.cliques]),
    }
