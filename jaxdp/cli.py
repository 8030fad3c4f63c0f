"""Command line: `python -m jaxdp synth ...` and `python -m jaxdp evaluate ...`.

Every failure is one line on stderr and a non-zero exit; no output file is written unless the
whole run succeeded (outputs are written atomically at the end).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from jaxdp import __version__, datasets, loop
from jaxdp._io import atomic_open
from jaxdp.accounting import CONVERSIONS, BudgetExceededError, epsilon_from_rho
from jaxdp.audit import rho_spent
from jaxdp.domain import DataError, Dataset, Domain, read_csv, write_rows
from jaxdp.evaluate import answer_errors, best_mixture_error, fractions, workload_errors
from jaxdp.keys import secure_root_key
from jaxdp.mechanisms import (
    aim,
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
    rap_softmax,
)
from jaxdp.mechanisms.rap_plus import default_classes, rap_plus_plus
from jaxdp.queries import MarginalWorkload, all_kway, from_names
from jaxdp.types import Neighboring

DEFAULT_DELTA = 1e-9
ONE_ROUND = ("independent", "gaussian")
PUBLIC = ("pmw-pub", "pep-pub", "gem-pub")
ADAPTIVE = {
    "mwem": mwem,
    "pep": pep,
    "pmw-pub": pmw_pub,
    "pep-pub": pep_pub,
    "rap": rap,
    "rap-softmax": rap_softmax,
    "gem": gem,
    "gem-pub": gem_pub,
    "dualquery": dualquery,
    "fem": fem,
    "aim": aim,
}
# Rounds when --rounds is not given: the papers' settings on ADULT (reduced); factories without
# an entry have their own default (rap 10, gem 50).
DEFAULT_ROUNDS = {"mwem": 25, "pep": 25, "pmw-pub": 25, "pep-pub": 25, "dualquery": 100, "fem": 200}
RELAXED = ("rap", "rap-softmax", "gem", "gem-pub")
MIXED = ("rap++",)  # mixed-type release: numeric columns synthesised without bins
MECHANISMS = (*ONE_ROUND, *ADAPTIVE, *MIXED)


class CLIError(Exception):
    """A user error, reported as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise CLIError(message)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m jaxdp", description="Differentially private synthetic data.")
    parser.add_argument("--version", action="version", version=f"jaxdp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    synth = sub.add_parser("synth", help="run a mechanism and write its release")
    synth.add_argument("--mechanism", required=True, help=f"one of: {', '.join(MECHANISMS)}")
    synth.add_argument("--epsilon", type=float, required=True, help="privacy epsilon (> 0)")
    synth.add_argument(
        "--delta",
        type=float,
        default=DEFAULT_DELTA,
        help=f"privacy delta in (0, 1); default {DEFAULT_DELTA:g}, a fixed value that does not "
        "depend on the (private) record count",
    )
    _add_data_args(synth)
    synth.add_argument(
        "--workload",
        help="all-Kway (e.g. all-3way) or a JSON file; default all-3way (rap++: every "
        "feature x feature x target marginal when the schema names a target)",
    )
    synth.add_argument(
        "--rounds",
        type=int,
        help=f"rounds T of adaptive mechanisms (default {DEFAULT_ROUNDS}, at most the marginals)",
    )
    synth.add_argument("--public", help="public CSV over the same domain (pmw-pub, pep-pub)")
    synth.add_argument(
        "--seed",
        type=int,
        help="make the run reproducible bit for bit; without it the key comes from OS entropy. "
        "Anyone who knows the seed can regenerate the noise: do not use one for a real release",
    )
    synth.add_argument(
        "--rows",
        type=int,
        help="synthetic rows (default: the record count under replace-one; a noisy estimate of it "
        "under add-remove)",
    )
    synth.add_argument(
        "--relation",
        default=Neighboring.REPLACE_ONE.value,
        choices=[r.value for r in Neighboring],
        help="neighbouring relation (default replace-one: the record count is public)",
    )
    synth.add_argument("--conversion", default="exact", choices=CONVERSIONS, help="zCDP to (eps, delta)")
    synth.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="confidence of AIM's per-marginal error bounds in the report (default 0.95)",
    )
    synth.add_argument("--out", required=True, help="output CSV")
    synth.add_argument("--report", help="privacy report JSON (safe to publish with the output)")
    synth.add_argument(
        "--errors",
        help="error report JSON against the real data; NOT private: for the data holder only",
    )

    ev = sub.add_parser("evaluate", help="errors of a synthetic table against the real one")
    ev.add_argument("--real", help="real CSV (with --domain), or use --dataset")
    ev.add_argument("--dataset", choices=datasets.NAMES, help="bundled real dataset")
    ev.add_argument("--synth", required=True, help="synthetic CSV")
    ev.add_argument("--domain", help="domain or schema JSON")
    ev.add_argument("--workload", default="all-3way", help="all-Kway or a JSON file")
    return parser


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=datasets.NAMES, help="a bundled dataset")
    p.add_argument("--data", help="integer-coded or raw CSV (with --domain or --schema)")
    p.add_argument("--domain", help="domain JSON {attr: size} (or schema form)")
    p.add_argument("--schema", help="schema JSON with labelled categories and numeric bounds")


def _load_input(dataset: str | None, data: str | None, domain: str | None, schema: str | None) -> Dataset:
    if dataset is not None:
        if data or domain or schema:
            raise CLIError("--dataset cannot be combined with --data/--domain/--schema")
        return datasets.load(dataset)
    if data is None:
        raise CLIError("give --dataset NAME or --data FILE with --domain or --schema")
    if (domain is None) == (schema is None):
        raise CLIError("--data needs exactly one of --domain or --schema")
    return read_csv(data, Domain.load(domain or schema))


def _workload(spec: str, domain: Domain) -> MarginalWorkload:
    if spec.startswith("all-") and spec.endswith("way"):
        try:
            k = int(spec[4:-3])
        except ValueError:
            raise CLIError(f"--workload {spec!r}: expected all-Kway, e.g. all-3way") from None
        return all_kway(domain.sizes, k)
    try:
        marginals = json.loads(Path(spec).read_text())
    except (OSError, ValueError) as err:
        raise CLIError(f"--workload: cannot read {spec!r}: {type(err).__name__}") from None
    if not isinstance(marginals, list) or not all(isinstance(m, list) for m in marginals):
        raise CLIError("--workload file must hold a JSON list of lists of attribute names")
    return from_names(domain, marginals)


def _check_writable(*paths: str | None) -> None:
    for p in paths:
        if p is not None and not Path(p).resolve().parent.is_dir():
            raise CLIError(f"cannot write {p!r}: its directory does not exist")


def _synth(args: argparse.Namespace) -> None:
    if args.mechanism not in MECHANISMS:
        raise CLIError(f"unknown mechanism {args.mechanism!r}; choose one of: {', '.join(MECHANISMS)}")
    if args.rounds is not None and args.mechanism in ONE_ROUND and args.rounds != 1:
        raise CLIError(f"mechanism {args.mechanism!r} runs exactly one round; drop --rounds")
    if args.rows is not None and args.rows < 1:
        raise CLIError(f"--rows must be >= 1, got {args.rows}")
    if args.seed is not None and not 0 <= args.seed < 2**32:
        raise CLIError("--seed must be in [0, 2^32): jax.random.key keeps 32 bits of it")
    _check_writable(args.out, args.report, args.errors)
    started = time.perf_counter()
    data = _load_input(args.dataset, args.data, args.domain, args.schema)
    if args.workload is None and args.mechanism in MIXED and data.domain.target is not None:
        workload = None  # rap++ picks the paper's class-conditional marginals
    else:
        args.workload = args.workload or "all-3way"
        workload = _workload(args.workload, data.domain)
    budget = dict(epsilon=args.epsilon, delta=args.delta, relation=args.relation, conversion=args.conversion)
    if (args.public is not None) != (args.mechanism in PUBLIC):
        raise CLIError("--public is required by pmw-pub, pep-pub and gem-pub, and used by no other mechanism")
    public = read_csv(args.public, data.domain) if args.public is not None else None
    if args.mechanism == "independent":
        mech = independent(data, **budget)
    elif args.mechanism == "gaussian":
        mech = gaussian(data, workload, **budget)
    elif args.mechanism == "rap++":
        # The random threshold queries are public: a fixed query-set key, not the noise key.
        classes = default_classes(
            data.domain, jax.random.key(0), workload=workload, marginal_rounds=args.rounds
        )
        mech = rap_plus_plus(data, classes, **budget)
        workload = classes[0].queries
        args.workload = args.workload or "feature x feature x target"
    else:
        options = {} if args.rounds is None else {"rounds": args.rounds}
        if args.mechanism == "aim":  # AIM picks its rounds; --rounds caps them (its T)
            options = {} if args.rounds is None else {"max_rounds": args.rounds}
        if args.rounds is None and args.mechanism in DEFAULT_ROUNDS:
            rounds = DEFAULT_ROUNDS[args.mechanism]
            # histogram mechanisms measure each marginal at most once
            options["rounds"] = (
                rounds if args.mechanism in ("dualquery", "fem") else min(rounds, len(workload))
            )
        if public is not None:
            options["public"] = public
        mech = ADAPTIVE[args.mechanism](data, workload, **options, **budget)

    if args.seed is not None:
        print("jaxdp: --seed given: the run is reproducible, and so is its noise", file=sys.stderr)
        key = jax.random.key(args.seed)
    else:
        key = secure_root_key()
    result = loop.run(mech, key, progress=_progress if mech.rounds > 1 else None)

    outputs: dict[str, str] = {}
    if args.mechanism == "gaussian":
        noisy = np.asarray(loop.release(mech, result.state, key), np.float64)
        outputs[args.out] = _answers_csv(workload, data.domain, noisy)
        rows = int(noisy.shape[0])
        print(
            f"jaxdp: gaussian releases noisy answers to the workload, not records: {args.out} "
            f"holds {rows} answers ({'counts' if mech.relation is Neighboring.ADD_REMOVE else 'fractions'})",
            file=sys.stderr,
        )
        estimated = noisy if mech.relation is Neighboring.REPLACE_ONE else noisy / len(data)
        errors = answer_errors(fractions(data, workload), estimated, workload)
    else:
        released = loop.release(mech, result.state, key, rows=args.rows)
        if args.mechanism in MIXED:  # (codes, numeric in [0, 1]): decoded to original units below
            codes, numeric = (np.asarray(x) for x in released)
        else:
            codes = np.asarray(released)
            numeric = np.zeros((codes.shape[0], 0), np.float32)
        synthetic = Dataset(data.domain, codes, numeric)
        outputs[args.out] = _dataset_csv(synthetic)
        rows = int(codes.shape[0])
        errors = workload_errors(data, synthetic, workload)
        if args.mechanism in RELAXED:  # the fitted distribution's own answers differ from the records'
            relaxed = np.asarray(mech.relaxed_answers(result.state), np.float64)
            errors["relaxed"] = answer_errors(fractions(data, workload), relaxed, workload)

    spent = rho_spent(result.ledger)
    plan = mech.plan
    report = {
        "mechanism": args.mechanism,
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "rho_budget": plan.rho_budget,
        "rho_spent": spent,
        "epsilon_spent": epsilon_from_rho(spent, plan.delta, plan.conversion),
        "conversion": plan.conversion,
        "relation": mech.relation.value,
        "ledger": [e.to_json() for e in result.ledger],
        "seconds": time.perf_counter() - started,
        "rows": rows,
        "output": "noisy answers" if args.mechanism == "gaussian" else "synthetic records",
        "jaxdp_version": __version__,
    }
    if hasattr(mech, "error_bounds"):
        report["error_bounds"] = _error_bounds(mech, result.state, codes, data.domain, args.confidence)
    if args.report:
        outputs[args.report] = json.dumps(report, indent=2) + "\n"
    if args.errors:
        errors = {
            "warning": "computed from the real data: not differentially private, do not publish",
            "workload": args.workload,
            "marginals": len(workload),
            "queries": workload.n_queries,
            **errors,
        }
        if public is not None:
            errors["best_mixture_error"] = best_mixture_error(data, public, workload)
        outputs[args.errors] = json.dumps(errors, indent=2) + "\n"
    for path, text in outputs.items():
        with atomic_open(path) as fh:
            fh.write(text)
    print(
        f"jaxdp: wrote {rows} {report['output']} to {args.out}; rho spent {spent:.6g} of "
        f"{plan.rho_budget:.6g}",
        file=sys.stderr,
    )


def _error_bounds(mech, state, codes: np.ndarray, domain: Domain, confidence: float) -> dict:
    """AIM's per-marginal L1 error bounds of the released records (post-processing: publishable)."""
    if not 0.0 < confidence < 1.0:
        raise CLIError(f"--confidence must be in (0, 1), got {confidence}")
    bounds = mech.error_bounds(state, confidence, synthetic=codes)
    return {
        "confidence": confidence,
        "units": "L1 distance between count vectors; normalised: divided by the released row count",
        "marginals": [
            {
                "marginal": list(names),
                "l1_bound": float(b),
                "l1_bound_normalised": float(nb),
                "supported": bool(s),
            }
            for names, b, nb, s in zip(
                mech.workload.names(domain), bounds.bound, bounds.normalised, bounds.supported, strict=True
            )
        ],
    }


def _progress(done: int, total: int) -> None:
    print(f"jaxdp: round {done}/{total}", file=sys.stderr, flush=True)


def _dataset_csv(data: Dataset) -> str:
    buffer = io.StringIO()
    write_rows(buffer, data)
    return buffer.getvalue()


def _answers_csv(workload: MarginalWorkload, domain: Domain, answers: np.ndarray) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["marginal", "cell", "answer"])
    names = ["|".join(n) for n in workload.names(domain)]
    for i, (start, cells) in enumerate(zip(workload.offsets, workload.cells, strict=True)):
        for c in range(cells):
            writer.writerow([names[i], c, f"{answers[start + c]:.9g}"])
    return buffer.getvalue()


def _evaluate(args: argparse.Namespace) -> None:
    if args.dataset is not None:
        if args.real is not None:
            raise CLIError("give --real or --dataset, not both")
        real = datasets.load(args.dataset)
        domain = real.domain if args.domain is None else Domain.load(args.domain)
    else:
        if args.real is None or args.domain is None:
            raise CLIError("evaluate needs --real FILE with --domain FILE (or --dataset NAME)")
        domain = Domain.load(args.domain)
        real = read_csv(args.real, domain)
    synthetic = read_csv(args.synth, domain)
    workload = _workload(args.workload, domain)
    print(json.dumps(workload_errors(real, synthetic, workload)))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 bad input or arguments)."""
    try:
        args = _build_parser().parse_args(argv)
        if args.command == "synth":
            _synth(args)
        else:
            _evaluate(args)
    except (CLIError, DataError, BudgetExceededError, ValueError, TypeError, OSError) as err:
        if os.environ.get("JAXDP_DEBUG"):
            raise
        print(f"jaxdp: error: {err}", file=sys.stderr)
        return 2
    return 0
