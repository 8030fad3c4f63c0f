"""Fit one peer library's mechanism on an integer-coded table and sample from it (bench/peers.py).

Runs in the peers' own environment (/work/peers-venv: smartnoise-synth, dpmm), never in jaxdp's,
and imports nothing from jaxdp. Reads the integer-coded CSV (header = attribute names) and the
domain JSON {attribute: size}, hands each library the declared domain (so none infers it from
the private data), fits with the given epsilon/delta, samples --rows records, writes them as an
integer-coded CSV and writes a JSON result: fit and sample seconds, the library version, and the
exception text if it failed.

    python bench/_peer_runner.py --library dpmm --mechanism aim --data t.csv --domain d.json \
        --epsilon 1 --delta 1e-9 --seed 0 --rows 48842 --out synth.csv --result r.json

--mbi-shim (smartnoise only): SmartNoise's AIM and MST import the pre-2.0 Private-PGM API
(`from mbi import FactoredInference`), which no `mbi` on PyPI provides (1.0, 1.1 and 2.0 all
have the newer API) and SmartNoise does not declare as a dependency. With this flag the runner
aliases the module `mbi` to dpmm's vendored copy of that older API (`dpmm.models.base.mbi`),
so SmartNoise's own mechanism code can run; records made this way say so.

--no-compress (dpmm only): compress=False, turning off dpmm's default domain compression (it
merges the categories whose noisy 1-way count is under 3 sigma into one, a post-processing of
AIM's first measurements); to see how much of dpmm's accuracy it accounts for.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from importlib import metadata

import numpy as np
import pandas as pd


def versions() -> dict[str, str | None]:
    out = {"python": sys.version.split()[0]}
    for dist in ("smartnoise-synth", "dpmm", "mbi", "numpy", "pandas", "scipy", "torch", "opendp"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def smartnoise(
    mechanism: str, df: pd.DataFrame, sizes: dict, args
) -> tuple[pd.DataFrame, float, float, dict]:
    if args.mbi_shim:
        import dpmm.models.base.mbi as vendored

        sys.modules["mbi"] = vendored
    import snsynth
    from snsynth.transform import LabelTransformer, TableTransformer

    # The declared domain, not the private data's: a LabelTransformer per column fitted on a
    # public frame that lists every code 0..size-1 (codes map to themselves, sorted).
    longest = max(sizes.values())
    public = pd.DataFrame({c: np.arange(longest) % sizes[c] for c in df.columns})
    transformer = TableTransformer([LabelTransformer(nullable=False) for _ in df.columns])
    transformer.fit(public)
    np.random.seed(args.seed)  # noqa: NPY002 -- both mechanisms draw from NumPy's global generator
    if mechanism == "aim":
        # degree 3 with no cell cap: the workload is every 3-way marginal (SmartNoise builds its
        # workload itself: all `degree`-way marginals of at most max_cells cells)
        synth = snsynth.Synthesizer.create(
            "aim", epsilon=args.epsilon, delta=args.delta, degree=3, max_cells=10**9
        )
        settings = {"degree": 3, "max_cells": 10**9, "rounds": "default (16 x attributes)"}
    else:
        synth = snsynth.Synthesizer.create("mst", epsilon=args.epsilon, delta=args.delta)
        settings = {}
    start = time.perf_counter()
    synth.fit(df, transformer=transformer, preprocessor_eps=0.0)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    out = synth.sample(args.rows)
    sample_s = time.perf_counter() - start
    out = pd.DataFrame(out, columns=df.columns) if not isinstance(out, pd.DataFrame) else out
    out.columns = list(df.columns)
    settings["cardinality"] = list(transformer.cardinality)
    return out, fit_s, sample_s, settings


def dpmm_run(mechanism: str, df: pd.DataFrame, sizes: dict, args) -> tuple[pd.DataFrame, float, float, dict]:
    from dpmm.pipelines import AIMPipeline, MSTPipeline, PrivBayesPipeline

    if mechanism == "aim":
        # degree 3, every 3-way marginal of at most --max-cells cells; rounds default (16 x
        # attributes)
        gen_kwargs = {"degree": 3, "max_cells": args.max_cells}
        cls = AIMPipeline
    else:  # MST, PrivBayes: the library's defaults (PrivBayes: degree 2, one parent each)
        gen_kwargs = {}
        cls = MSTPipeline if mechanism == "mst" else PrivBayesPipeline
    # disable_processing: the table is already integer-coded; the binner would otherwise spend
    # proc_epsilon on private bins. The domain is passed explicitly (dpmm infers max+1 from the
    # data when it is not given).
    pipe = cls(
        epsilon=args.epsilon,
        delta=args.delta,
        disable_processing=True,
        compress=not args.no_compress,
        gen_kwargs=gen_kwargs,
        n_jobs=1,
    )
    start = time.perf_counter()
    pipe.fit(df, domain=dict(sizes), random_state=args.seed)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    out = pipe.generate(n_records=args.rows, random_state=args.seed + 10_000)
    sample_s = time.perf_counter() - start
    settings = dict(gen_kwargs, compress=bool(pipe.gen.generator.compress), n_jobs=1)
    return out[list(df.columns)], fit_s, sample_s, settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", choices=("smartnoise", "dpmm"), required=True)
    parser.add_argument("--mechanism", choices=("aim", "mst", "privbayes"), required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--domain", required=True)
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--max-cells", type=int, default=10**9, help="dpmm AIM: the workload's cell cap")
    parser.add_argument("--delta", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--mbi-shim", action="store_true")
    parser.add_argument(
        "--no-compress", action="store_true", help="dpmm: compress=False (no domain compression)"
    )
    args = parser.parse_args()
    with open(args.domain) as fh:
        sizes = json.load(fh)
    df = pd.read_csv(args.data).astype(np.int64)
    result = {"versions": versions(), "ok": False, "mbi_shim": args.mbi_shim}
    try:
        run = smartnoise if args.library == "smartnoise" else dpmm_run
        out, fit_s, sample_s, settings = run(args.mechanism, df, sizes, args)
        codes = out.to_numpy().astype(np.int64)
        if codes.shape != (args.rows, len(df.columns)):
            raise ValueError(f"sampled shape {codes.shape}, expected {(args.rows, len(df.columns))}")
        pd.DataFrame(codes, columns=df.columns).to_csv(args.out, index=False)
        result.update(ok=True, fit_s=fit_s, sample_s=sample_s, settings=settings)
    except BaseException as exc:  # record any failure, ImportError and SystemExit included
        result.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=6))
    with open(args.result, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
