"""Command line: `python -m jaxdp synth ...`, `evaluate ...`, and the verbs after a release,
`sample`, `report` and `schema` (`jaxdp.cli_model`).

Every failure is one line on stderr and a non-zero exit; no output file is written unless the
whole run succeeded (outputs are written atomically at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxdp import _compile_cache, api, cli_model, datasets, keys
from jaxdp._io import atomic_open
from jaxdp.accounting import BudgetExceededError
from jaxdp.api import MECHANISMS
from jaxdp.checkpoint import DEFAULT_EVERY, Checkpoint, digest, mechanism_fingerprint
from jaxdp.cli_model import CommandError
from jaxdp.cli_parser import CLIError, build_parser
from jaxdp.domain import (
    DataError,
    Dataset,
    Domain,
    RawTable,
    TableSchema,
    load_declaration,
    load_domain,
    read_csv,
    read_table,
    write_columns,
    write_rows,
)
from jaxdp.evaluate import best_mixture_error, workload_errors
from jaxdp.families.compression import Compression
from jaxdp.models import load_model
from jaxdp.quality import coded
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Neighboring


def _declaration(data: str | None, domain: str | None, schema: str | None) -> str:
    if data is None:
        raise CLIError("give --dataset NAME or --data FILE with --domain or --schema")
    if (domain is None) == (schema is None):
        raise CLIError("--data needs exactly one of --domain or --schema")
    return domain or schema


def _load_input(dataset: str | None, data: str | None, domain: str | None, schema: str | None):
    """A bundled `Dataset`, a raw table (`RawTable`) read with a table schema, or a coded CSV read
    with a domain."""
    if dataset is not None:
        if data or domain or schema:
            raise CLIError("--dataset cannot be combined with --data/--domain/--schema")
        return datasets.load(dataset)
    declared = load_declaration(_declaration(data, domain, schema), "schema" if schema else "domain")
    if isinstance(declared, TableSchema):
        return read_table(data, declared)
    return read_csv(data, declared)


def _load_public(path: str, data) -> Dataset | RawTable:
    """The public table, read like the private one."""
    if isinstance(data, RawTable):
        return read_table(path, data.schema)
    return read_csv(path, data.domain)


def _workload(spec: str, domain: Domain) -> MarginalWorkload:
    try:
        return api.workload_from_spec(spec, domain)
    except ValueError as err:
        if isinstance(err, DataError):  # an attribute the domain lacks: already names it
            raise
        raise CLIError(f"--{err}") from None


def _check_writable(*paths: str | None) -> None:
    for p in paths:
        if p is not None and not Path(p).resolve().parent.is_dir():
            raise CLIError(f"cannot write {p!r}: its directory does not exist")


def _compression(
    value: str | None, mechanism: str, base: Compression | None
) -> dict[str, Compression | None]:
    """The factory's `compress` keyword from --compress ({} when not given: its default): the
    mechanism's own compression (`MechanismSpec.compression`) with the threshold given."""
    if value is None:
        return {}
    if base is None:
        users = ", ".join(n for n, s in MECHANISMS.items() if s.compression is not None)
        raise CLIError(f"--compress applies to {users}, not {mechanism!r}")
    if value == "off":
        return {"compress": None}
    try:
        return {"compress": dataclasses.replace(base, threshold=float(value)).checked()}
    except ValueError:
        raise CLIError(f"--compress must be 'off' or a threshold in sigmas > 0, got {value!r}") from None


def _check_checkpoint_args(args: argparse.Namespace) -> None:
    if args.seed is not None and args.key_file is not None:
        raise CLIError("give --seed or --key-file, not both")
    if args.checkpoint is None:
        if args.keep_checkpoint or args.checkpoint_every is not None:
            raise CLIError("--checkpoint-every and --keep-checkpoint need --checkpoint DIR")
        return
    if args.checkpoint_every is None:
        args.checkpoint_every = DEFAULT_EVERY
    if args.checkpoint_every < 1:
        raise CLIError(f"--checkpoint-every must be >= 1, got {args.checkpoint_every}")
    if args.seed is None and args.key_file is None:
        raise CLIError(
            "--checkpoint needs the run's root key again to resume: give --key-file FILE (created with a "
            "fresh secure key if absent; keep it as secret as the data) or --seed"
        )


def _synth(args: argparse.Namespace) -> None:
    if args.mechanism not in MECHANISMS:
        raise CLIError(f"unknown mechanism {args.mechanism!r}; choose one of: {', '.join(MECHANISMS)}")
    spec = MECHANISMS[args.mechanism]
    if args.rounds is not None and spec.one_round and args.rounds != 1:
        raise CLIError(f"mechanism {args.mechanism!r} runs exactly one round; drop --rounds")
    if args.rows is not None and args.rows < 1:
        raise CLIError(f"--rows must be >= 1, got {args.rows}")
    if not 0.0 < args.confidence < 1.0:
        raise CLIError(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.seed is not None and not 0 <= args.seed < 2**32:
        raise CLIError("--seed must be in [0, 2^32): jax.random.key keeps 32 bits of it")
    _check_checkpoint_args(args)
    compress = _compression(args.compress, args.mechanism, spec.compression)
    _check_writable(args.out, args.report, args.errors, args.model, args.marginals)
    started = time.perf_counter()
    if (args.public is not None) != spec.public:
        public_users = ", ".join(n for n, s in MECHANISMS.items() if s.public)
        raise CLIError(f"--public is required by {public_users}, and used by no other mechanism")
    relation = api.mechanism_relation(args.mechanism, args.relation)
    raw = _load_input(args.dataset, args.data, args.domain, args.schema)
    public = _load_public(args.public, raw) if args.public is not None else None
    key = cli_model.key_of(args)
    inputs = api.prepare_inputs(
        args.mechanism,
        raw,
        None,
        epsilon=args.epsilon,
        delta=args.delta,
        key=key,
        relation=relation,
        conversion=args.conversion,
        public=public,
        noise=args.noise,
        binning_share=args.binning_share,
    )
    data = inputs.data
    if args.workload is None and spec.own_workload and data.domain.target is not None:
        workload = None  # rap++ builds the paper's class-conditional marginals on the target
    else:
        args.workload = args.workload or api.DEFAULT_WORKLOAD
        workload = _workload(args.workload, data.domain)
    mech = api.build(
        args.mechanism,
        data,
        workload,
        **inputs.budget,
        relation=relation,
        conversion=inputs.conversion,
        rounds=args.rounds,
        public=inputs.public,
        noise=args.noise,
        **compress,
    )
    if args.seed is not None:  # once budget and workload are checked: a refused run prints one line
        print("jaxdp: --seed given: the run is reproducible, and so is its noise", file=sys.stderr)
    if args.noise == "float":
        print("jaxdp: --noise float: float32 noise does not meet the stated delta", file=sys.stderr)
    checkpoint = release = None
    if args.checkpoint is not None or args.key_file is not None:  # digests of the whole table: only when used
        fingerprint = api.release_fingerprint(
            name=args.mechanism,
            inputs=inputs,
            workload=workload,
            epsilon=args.epsilon,
            delta=args.delta,
            relation=relation,
            conversion=inputs.conversion,
            noise=args.noise,
        )
        if args.key_file is not None:
            release = digest(fingerprint, mechanism_fingerprint(mech))
            keys.refuse_another_release(args.key_file, release)
        if args.checkpoint is not None:
            checkpoint = Checkpoint(args.checkpoint, every=args.checkpoint_every, fingerprint=fingerprint)
    result = api.execute(
        args.mechanism,
        mech,
        key,
        data.domain,
        rows=args.rows,
        progress=True,
        started=started,
        confidence=args.confidence,
        checkpoint=checkpoint,
    )
    result = api.finish(result, inputs, key)
    if workload is None:
        workload = api.measured_workload(mech, workload)
        args.workload = "feature x feature x target"

    outputs: dict[str, str | bytes] = {}
    if result.answers is not None:
        outputs[args.out] = _answers_csv(workload, data.domain, result.answers)
        print(
            f"jaxdp: {args.mechanism} releases noisy answers to the workload, not records: {args.out} "
            f"holds {result.report['rows']} answers "
            f"({'counts' if mech.relation is Neighboring.ADD_REMOVE else 'fractions'})",
            file=sys.stderr,
        )
    elif isinstance(result.data, RawTable):  # a table schema's release, decoded
        outputs[args.out] = _csv_text(write_columns, result.data.columns())
    else:
        outputs[args.out] = _csv_text(write_rows, result.synthetic)
    report = {**result.report, "seconds": time.perf_counter() - started}
    if args.report:
        outputs[args.report] = json.dumps(report, indent=2) + "\n"
    if args.errors:
        errors = {
            "warning": "computed from the real data: not differentially private, do not publish",
            "workload": args.workload,
            "marginals": len(workload),
            "queries": workload.n_queries,
            **api.release_errors(data, result, workload),
        }
        if inputs.public is not None:
            errors["best_mixture_error"] = best_mixture_error(data, inputs.public, workload)
        outputs[args.errors] = json.dumps(errors, indent=2) + "\n"
    if args.marginals:
        outputs[args.marginals] = _csv_text(write_columns, result.model.marginals())
    if args.model:
        outputs[args.model] = result.model.to_bytes()
    if release is not None:  # before any output: the key file's key is spent on this release
        keys.record_release(args.key_file, release)
    for path, content in outputs.items():
        with atomic_open(path, "wb" if isinstance(content, bytes) else "w") as fh:
            fh.write(content)
    if checkpoint is not None and not args.keep_checkpoint:
        checkpoint.remove()
    spent = f"rho spent {report['rho_spent']:.6g} of {report['rho_budget']:.6g}"
    if report.get("accountant") == "gdp":  # the budget is Gaussian-DP's mu^2 / 2; rho_spent, zCDP's view
        spent = f"epsilon spent {report['epsilon_spent']:.6g} of {report['epsilon']:.6g} by Gaussian DP"
    print(
        f"jaxdp: wrote {report['rows']} {report['output']} to {args.out}; {spent} ({report['relation']})",
        file=sys.stderr,
    )


def _csv_text(write, table) -> str:
    buffer = io.StringIO()
    write(buffer, table)
    return buffer.getvalue()


def _answers_csv(workload: MarginalWorkload, domain: Domain, answers: np.ndarray) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    table = api.answers_table(workload, domain, answers)
    writer.writerow(list(table))
    writer.writerows((m, c, f"{a:.9g}") for m, c, a in zip(*table.values(), strict=True))
    return buffer.getvalue()


def _evaluate(args: argparse.Namespace) -> None:
    """The workload's errors; a table schema's every column scored, numeric ones on the release's
    bins (`--model`) or the schema's declared ones (the output says which)."""
    scored = {}
    if args.dataset is not None:
        if args.real is not None:
            raise CLIError("give --real or --dataset, not both")
        real = datasets.load(args.dataset)
        domain = real.domain if args.domain is None else load_domain(args.domain)
        synthetic = read_csv(args.synth, domain)
    else:
        if args.real is None or args.domain is None:
            raise CLIError("evaluate needs --real FILE with --domain FILE (or --dataset NAME)")
        declared = load_declaration(args.domain, "domain")
        if isinstance(declared, TableSchema):
            model = load_model(args.model) if args.model else None
            real, synthetic, how = coded(
                read_table(args.real, declared),
                read_table(args.synth, declared),
                declared,
                model.coding if model is not None else None,
            )
            scored = {"numeric_columns": how}
        else:
            real, synthetic = read_csv(args.real, declared), read_csv(args.synth, declared)
    workload = _workload(args.workload, real.domain)
    print(json.dumps({**workload_errors(real, synthetic, workload), **scored}))


class _StderrHandler(logging.Handler):
    """Writes records to whatever `sys.stderr` is when they are emitted."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"jaxdp: {self.format(record)}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _log_to_stderr():
    """The library is silent by default; the command line shows its INFO lines (progress)."""
    logger = logging.getLogger("jaxdp")
    handler, level = _StderrHandler(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 bad input or arguments)."""
    try:
        args = build_parser().parse_args(argv)
        if not args.no_compile_cache:
            _compile_cache.enable()  # before anything compiles
        with _log_to_stderr():
            if args.command == "synth":
                _synth(args)
            elif args.command == "evaluate":
                _evaluate(args)
            elif args.command == "sample":
                cli_model.sample(args, cli_model.key_of(args))
            elif args.command == "report":
                cli_model.report(args)
            else:
                cli_model.schema(args)
    except (CLIError, CommandError, DataError, BudgetExceededError, ValueError, TypeError, OSError) as err:
        if os.environ.get("JAXDP_DEBUG"):
            raise
        print(f"jaxdp: error: {err}", file=sys.stderr)
        return 2
    return 0
