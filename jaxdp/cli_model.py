"""The command line's verbs after a release: `sample` from a saved model, `report` on a synthetic
table against the real one, and `schema`, a draft schema read from a table.

    python -m jaxdp sample --model model.jaxdp --rows 1000 --where sex=Female --seed 1 --out s.csv
    python -m jaxdp report --real real.csv --schema schema.json --synth s.csv --html report.html
    python -m jaxdp schema --data raw.csv --out schema.json

`sample` is post-processing of the model: it spends no privacy and needs no data. `report` and
`schema` read the real data: what they write is not private.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from pathlib import Path

import jax

from jaxdp import datasets, keys
from jaxdp._io import atomic_open
from jaxdp.domain import (
    DataError,
    Dataset,
    RawTable,
    TableSchema,
    load_declaration,
    read_columns,
    read_csv,
    read_table,
    write_columns,
    write_rows,
)
from jaxdp.models import load_model
from jaxdp.quality import WARNING, quality
from jaxdp.quality_html import page

SCHEMA_WARNING = (
    "WARNING: this schema was read from the data. Its bounds and categories are NOT private: they "
    "reveal the smallest and largest values and every category present. Review every column and "
    "replace what you can with public knowledge (published ranges, code books) before a release."
)


class CommandError(Exception):
    """A user error of these verbs, reported as one line (the command line's `CLIError`)."""


def add_commands(sub, add_key_args, add_cache_arg) -> None:
    """The verbs' parsers, on the command line's subparsers."""
    sample = sub.add_parser("sample", help="sample records from a saved model (no privacy spent)")
    sample.add_argument("--model", required=True, help="a model file `synth --model` wrote")
    sample.add_argument("--rows", type=int, help="records (default: the first release's count)")
    sample.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="COLUMN=VALUE",
        help="a condition every record meets: a label or code (several: a,b), a numeric range "
        "lower:upper (closed), a whole number, or nothing for the empty cell; repeat for several "
        "columns (all must hold)",
    )
    add_key_args(
        sample,
        "sampling is post-processing: its key need not be secret, but the same key gives the same records",
    )
    sample.add_argument("--out", required=True, help="output CSV")
    add_cache_arg(sample)

    report = sub.add_parser("report", help="judge a synthetic table against the real one (NOT private)")
    add_judged_tables(report, "--schema or --domain")
    report.add_argument("--schema", help="schema JSON (the columns form)")
    report.add_argument("--domain", help="domain JSON (sizes form)")
    report.add_argument(
        "--target", help="the column the utility test predicts (default: the schema's target)"
    )
    report.add_argument(
        "--workload", type=int, default=2, help="K of the all-K-way marginals scored (default 2)"
    )
    report.add_argument("--html", help="the report page (self-contained HTML, plots embedded)")
    report.add_argument("--json", help="the report's numbers as JSON")
    add_cache_arg(report)

    schema = sub.add_parser(
        "schema", help="draft a schema from a table (its bounds and categories are NOT private)"
    )
    schema.add_argument("--data", required=True, help="raw CSV with a header row")
    schema.add_argument("--target", help="a categorical column to name as the schema's target")
    schema.add_argument("--out", help="schema JSON (default: standard output)")
    add_cache_arg(schema)


def add_judged_tables(p: argparse.ArgumentParser, declared_by: str) -> None:
    """The real and synthetic tables a judging verb (`evaluate`, `report`) reads, and the model
    whose bins it may score on."""
    p.add_argument("--real", help=f"real CSV (with {declared_by}), or use --dataset")
    p.add_argument("--dataset", choices=datasets.NAMES, help="bundled real dataset")
    p.add_argument("--synth", required=True, help="synthetic CSV")
    p.add_argument("--model", help="the release's model: score numeric columns on the bins it was made with")


def sample(args: argparse.Namespace, key) -> None:
    model = load_model(args.model)
    if args.rows is not None and args.rows < 1:
        raise CommandError(f"--rows must be >= 1, got {args.rows}")
    where = _where(args.where)
    table = model.sample(key, rows=args.rows, where=where or None)
    _write(args.out, _csv(table))
    condition = f" where {', '.join(args.where)}" if where else ""
    print(
        f"jaxdp: wrote {len(table)} records to {args.out}{condition}, sampled from the {model.name} model "
        f"{args.model} (post-processing: no privacy spent; the model's budget is its report's)",
        file=sys.stderr,
    )


def _where(given: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--where takes COLUMN=VALUE, got {item!r}")
        if name in out:
            raise CommandError(f"--where names {name!r} twice: give several values as {name}=a,b")
        out[name] = value
    return out


def report(args: argparse.Namespace) -> None:
    real, synthetic, schema = _tables(args)
    model = load_model(args.model) if args.model else None
    coding = model.coding if model is not None else None
    if coding is not None and coding.schema != schema:
        raise CommandError("--model was made with another schema than --schema")
    numbers = quality(real, synthetic, schema, coding=coding, target=args.target, workload=args.workload)
    if args.html:
        _write(args.html, page(numbers))
    if args.json:
        _write(args.json, json.dumps(numbers, indent=2) + "\n")
    summary = {"warning": WARNING, **numbers["scores"], "workload_mean_l1": numbers["workload"]["mean_l1"]}
    print(json.dumps(summary))


def _tables(args: argparse.Namespace) -> tuple[RawTable | Dataset, RawTable | Dataset, TableSchema | None]:
    if args.dataset is not None:
        if args.real or args.schema or args.domain:
            raise CommandError("--dataset cannot be combined with --real, --schema or --domain")
        real = datasets.load(args.dataset)
        return real, read_csv(args.synth, real.domain), None
    if args.real is None or (args.schema is None) == (args.domain is None):
        raise CommandError("report needs --real FILE with one of --schema or --domain (or --dataset NAME)")
    declared = load_declaration(args.schema or args.domain, "schema" if args.schema else "domain")
    if isinstance(declared, TableSchema):
        return read_table(args.real, declared), read_table(args.synth, declared), declared
    return read_csv(args.real, declared), read_csv(args.synth, declared), None


def schema(args: argparse.Namespace) -> None:
    columns = read_columns(args.data)
    if not next(iter(columns.values()), []):
        raise DataError(f"CSV {args.data!r} has no records to read a schema from")
    drafted = {"columns": {name: _drafted_column(name, cells) for name, cells in columns.items()}}
    if args.target is not None:
        if drafted["columns"].get(args.target, {}).get("type") != "categorical":
            raise CommandError(f"--target {args.target!r} must be a categorical column of the table")
        drafted["target"] = args.target
    TableSchema.from_json(drafted)  # the draft is a schema jaxdp reads
    text = json.dumps(drafted, indent=2) + "\n"
    print(f"jaxdp: {SCHEMA_WARNING}", file=sys.stderr)
    if args.out:
        _write(args.out, text)
        print(f"jaxdp: wrote a draft schema of {len(columns)} columns to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def _drafted_column(name: str, cells: list[str]) -> dict:
    present = [c for c in cells if c != ""]
    nullable = len(present) < len(cells)
    numbers = _numbers(present)
    if numbers is not None and present:
        lower, upper = min(numbers), max(numbers)
        integer = all(float(x).is_integer() for x in numbers)
        spec: dict = {
            "type": "numeric",
            "lower": _plain(lower),
            "upper": _plain(upper if upper > lower else lower + 1),
        }
        if integer:
            spec["integer"] = True
    else:
        spec = {"type": "categorical", "categories": sorted(set(present))}
        if not present:
            raise DataError(f"column {name!r} holds no value to read a category from")
    if nullable:
        spec["nullable"] = True
    return spec


def _numbers(cells: list[str]) -> list[float] | None:
    try:
        numbers = [float(c) for c in cells]
    except ValueError:
        return None
    return numbers if all(math.isfinite(x) for x in numbers) else None


def _plain(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _csv(table: RawTable | Dataset) -> str:
    buffer = io.StringIO()
    if isinstance(table, RawTable):
        write_columns(buffer, table.columns())
    else:
        write_rows(buffer, table)
    return buffer.getvalue()


def _write(path: str, text: str) -> None:
    if not Path(path).resolve().parent.is_dir():
        raise CommandError(f"cannot write {path!r}: its directory does not exist")
    with atomic_open(path) as fh:
        fh.write(text)


def key_of(args: argparse.Namespace):
    """The root key `--seed` or `--key-file` names, else a fresh secure one."""
    if args.seed is not None and args.key_file is not None:
        raise CommandError("give --seed or --key-file, not both")
    if args.seed is not None:
        if not 0 <= args.seed < 2**32:
            raise CommandError("--seed must be in [0, 2^32): jax.random.key keeps 32 bits of it")
        return jax.random.key(args.seed)
    return keys.key_file(args.key_file) if args.key_file is not None else keys.secure_root_key()
