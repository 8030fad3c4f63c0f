"""Fit one of Google DPSynth's discrete mechanisms on an integer-coded table and sample from it
(bench/bench_dpsynth.py).

Runs in DPSynth's own environment (`bash ../shared/peers/install-dpsynth.sh VENV`: DPSynth and
mbi from their snapshots), never in jaxdp's, and imports nothing from jaxdp. The mechanism is
DPSynth's recommended in-memory entry point for a discrete table: `DiscreteConfig` (its 1-way
measurement and domain compression, `compress_columns=True`) around the inner mechanism's config
(AIM, AIM-GDP, SWIFT or MST) with the workload given and every other setting at its default,
calibrated by `calibrate(epsilon=, delta=)` (its PLD/RDP search). Writes the synthetic records
as an integer-coded CSV and a JSON result: fit seconds, the rho it calibrated, versions, and the
exception text if it failed.

    python bench/_dpsynth_runner.py --mechanism aim --data t.csv --domain d.json \
        --workload w.json --epsilon 1 --delta 1e-9 --seed 0 --out synth.csv --result r.json
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

# the snapshot ../shared/peers/install-dpsynth.sh installs (its tarball's name)
DPSYNTH_COMMIT = "cf8075f"
MBI_COMMIT = "361705d"


def versions() -> dict[str, str | None]:
    out = {"python": sys.version.split()[0], "dpsynth_commit": DPSYNTH_COMMIT, "mbi_commit": MBI_COMMIT}
    for dist in ("dpsynth", "mbi", "jax", "dp-accounting", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def inner_config(mechanism: str, workload: list[tuple[str, ...]]):
    from dpsynth.discrete_mechanisms import aim, aim_gdp, mst, swift

    if mechanism == "aim":
        return aim.AIMConfig(workload=workload)
    if mechanism == "aim-gdp":
        return aim_gdp.AIMGDPConfig(workload=workload)
    if mechanism == "swift":
        return swift.SWIFTConfig(workload=workload)
    if mechanism == "mst":
        return mst.MSTConfig()
    raise ValueError(f"unknown DPSynth mechanism {mechanism!r}")


def calibrate(config, epsilon: float, delta: float):
    """DPSynth's own `calibrate`, or where it fails as installed, its search redone with a
    bracket that starts above rho = 0: the registry's dp-accounting 0.6.0 (the install script's
    relaxed pin) evaluates the event at rho = 0 first, where DPSynth's Gaussian-DP events (AIM-GDP,
    SWIFT) divide by zero. The same accountants (PLD at DPSynth's discretisation, and RDP; the
    smaller rho), so the same calibration."""
    try:
        return config.calibrate(epsilon=epsilon, delta=delta), "dpsynth calibrate()"
    except ZeroDivisionError:
        pass
    import functools

    import dp_accounting
    from dp_accounting import mechanism_calibration

    def event(rho: float):
        return config.configure(zcdp_rho=rho, delta=delta).dp_event

    bracket = mechanism_calibration.ExplicitBracketInterval(1e-12, 10.0 * epsilon + 10.0)
    pld = functools.partial(
        dp_accounting.pld.PLDAccountant, value_discretization_interval=max(1e-4, 1e-4 / (epsilon + 1e-5))
    )
    rhos = [
        dp_accounting.calibrate_dp_mechanism(
            make_fresh_accountant=accountant,
            make_event_from_param=event,
            target_epsilon=epsilon,
            target_delta=delta,
            bracket_interval=bracket,
        )
        for accountant in (pld, dp_accounting.rdp.RdpAccountant)
    ]
    return config.configure(zcdp_rho=min(rhos), delta=delta), "runner's bracket from rho 1e-12 (PLD, RDP)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanism", required=True, choices=("aim", "aim-gdp", "swift", "mst"))
    parser.add_argument("--data", required=True)
    parser.add_argument("--domain", required=True)
    parser.add_argument("--workload", required=True, help="JSON list of attribute-name lists")
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    result: dict = {"versions": versions(), "ok": False}
    try:
        import mbi
        from dpsynth.discrete_mechanisms import discrete

        with open(args.domain) as fh:
            sizes = json.load(fh)
        with open(args.workload) as fh:
            workload = [tuple(c) for c in json.load(fh)]
        frame = pd.read_csv(args.data)
        domain = mbi.Domain(list(sizes), [int(s) for s in sizes.values()])
        data = mbi.Dataset({c: frame[c].to_numpy() for c in sizes}, domain)
        config = discrete.DiscreteConfig(
            mechanism=inner_config(args.mechanism, workload), compress_columns=True
        )
        start = time.perf_counter()
        calibrated, result["calibration"] = calibrate(config, args.epsilon, args.delta)
        run = calibrated(np.random.default_rng(args.seed), data)
        result["fit_s"] = time.perf_counter() - start
        released = run.synthetic_data
        if not np.all(released.weights == 1):  # records, not a weighted table: score them as such
            raise ValueError("DPSynth released weighted records")
        synthetic = pd.DataFrame(released.to_dict())[list(sizes)]
        synthetic.astype(np.int64).to_csv(args.out, index=False)
        result["settings"] = {
            "entry": "DiscreteConfig(compress_columns=True) around the inner config, its defaults",
            "inner": type(config.mechanism).__name__,
            "calibrated": repr(calibrated.dp_event)[:400],
        }
        result["ok"] = True
    except Exception as exc:  # recorded as a failed run, not raised: the bench goes on
        result["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
    with open(args.result, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
