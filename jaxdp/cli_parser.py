"""The command line's arguments: `synth`, `evaluate` and the verbs after a release (`sample`,
`report`, `schema`), their flags, defaults and help (`build_parser`); a bad argument is one line
(`CLIError`), never a usage dump.
"""

from __future__ import annotations

import argparse

from jaxdp import _compile_cache, cli_model, datasets
from jaxdp._version import __version__
from jaxdp.accounting import CALIBRATIONS
from jaxdp.api import DEFAULT_DELTA, MECHANISMS
from jaxdp.binning import DEFAULT_BINNING_SHARE
from jaxdp.checkpoint import DEFAULT_EVERY
from jaxdp.noise import NOISES
from jaxdp.types import Neighboring

DEFAULT_ROUNDS = {name: spec.rounds for name, spec in MECHANISMS.items() if spec.rounds is not None}


class CLIError(Exception):
    """A user error, reported as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise CLIError(message)


def build_parser() -> argparse.ArgumentParser:
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
        help="all-Kway (e.g. all-3way), a shipped workload "
        f"({', '.join(datasets.WORKLOADS)}) or a JSON file; default all-3way (rap++: every "
        "feature x feature x target marginal when the schema names a target)",
    )
    synth.add_argument(
        "--rounds",
        type=int,
        help=f"rounds T of adaptive mechanisms (default {DEFAULT_ROUNDS}, at most the marginals)",
    )
    synth.add_argument("--public", help="public CSV over the same domain (pmw-pub, pep-pub)")
    _add_key_args(
        synth,
        "Anyone who knows the seed can regenerate the noise: do not use one for a real release",
        "a resumable release without a guessable seed. As secret as the data",
    )
    synth.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="checkpoint the rounds in DIR (created owner-only) and resume from the checkpoint there: "
        "the same command after a kill releases exactly what the uninterrupted run would, spending "
        "nothing twice. Needs --key-file or --seed; DIR is removed after the outputs are written",
    )
    synth.add_argument(
        "--checkpoint-every",
        type=int,
        metavar="N",
        help=f"rounds between checkpoints (default {DEFAULT_EVERY})",
    )
    synth.add_argument(
        "--keep-checkpoint", action="store_true", help="keep the checkpoint after the outputs are written"
    )
    synth.add_argument(
        "--rows",
        type=int,
        help="synthetic rows (default: the record count under replace-one; a noisy estimate of it "
        "under add-remove)",
    )
    synth.add_argument(
        "--relation",
        choices=[r.value for r in Neighboring],
        help="neighbouring relation (default: the mechanism's own, add-remove for aim, aim-gem and mst, "
        "replace-one for the others; the report names it)",
    )
    synth.add_argument(
        "--conversion",
        default=None,
        choices=CALIBRATIONS,
        help="exact or simple: zCDP to (eps, delta); pld: a fixed plan calibrated by its privacy loss "
        "distribution; gdp: aim-gdp and swift accounted by Gaussian DP (default: the mechanism's own, "
        "gdp for aim-gdp and swift, else exact)",
    )
    synth.add_argument(
        "--noise",
        default="discrete",
        choices=NOISES,
        help="discrete (default): exact integer noise and exact selection, which meet the stated "
        "(epsilon, delta); float: float32 noise for speed experiments, whose delta is NOT met "
        "(docs/privacy.md)",
    )
    synth.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="confidence of AIM's per-marginal error bounds in the report (default 0.95)",
    )
    synth.add_argument(
        "--compress",
        help="aim, aim-gem and mst: compress the domain after the noisy 1-way round, merging the "
        "values counted below THRESHOLD sigmas (in attributes of at least 20 values for aim and "
        "aim-gem, in every attribute for mst; default 3 for aim and mst, off for aim-gem), or "
        "'off'; post-processing, no privacy cost (the report's compression lists what was merged)",
    )
    _add_cache_arg(synth)
    synth.add_argument(
        "--binning-share",
        type=float,
        default=DEFAULT_BINNING_SHARE,
        help="share of the budget spent on private quantile bins, for the numeric columns a "
        f'--schema declares with "binning": "quantiles" (default {DEFAULT_BINNING_SHARE:g})',
    )
    synth.add_argument("--out", required=True, help="output CSV")
    synth.add_argument("--report", help="privacy report JSON (safe to publish with the output)")
    synth.add_argument(
        "--errors",
        help="error report JSON against the real data; NOT private: for the data holder only",
    )
    synth.add_argument(
        "--model",
        help="save the release's model to FILE (owner-only; safe to publish: no private value in it) "
        "to sample again later (`sample --model FILE`) without spending privacy",
    )
    synth.add_argument(
        "--marginals",
        help="the model's measured marginals (noisy counts, their noise's standard deviation) and its "
        "workload answers (with their error bounds where the mechanism has them) as CSV",
    )

    ev = sub.add_parser("evaluate", help="errors of a synthetic table against the real one")
    cli_model.add_judged_tables(ev, "--domain")
    ev.add_argument("--domain", help="domain or schema JSON")
    ev.add_argument("--workload", default="all-3way", help="all-Kway, a shipped workload or a JSON file")
    _add_cache_arg(ev)
    cli_model.add_commands(sub, _add_key_args, _add_cache_arg)
    return parser


def _add_key_args(p: argparse.ArgumentParser, seed_note: str, key_file_note: str = "") -> None:
    p.add_argument(
        "--seed",
        type=int,
        help=f"make the run reproducible bit for bit; without it the key comes from OS entropy. {seed_note}",
    )
    p.add_argument(
        "--key-file",
        help="read the root key from FILE, or create FILE (owner-only) with a fresh secure key if it "
        f"does not exist{': ' + key_file_note if key_file_note else ''}",
    )


def _add_cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="compile every program afresh and write none to disk (also: JAXDP_NO_COMPILE_CACHE=1). "
        f"By default compiled programs are kept in {_compile_cache.cache_directory()} "
        "(JAXDP_CACHE_DIR moves it); they hold no data values, but their shapes show the table's size",
    )


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=datasets.NAMES, help="a bundled dataset")
    p.add_argument("--data", help="integer-coded or raw CSV, or a .parquet file (with --domain or --schema)")
    p.add_argument("--domain", help="domain JSON {attr: size} (or schema form)")
    p.add_argument(
        "--schema",
        help="schema JSON: labelled categories, numeric bounds (with bins, edges, integer), "
        "nullable columns; the output has the input's columns, labels and units",
    )
