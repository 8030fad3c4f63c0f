"""Reading a coded CSV: jaxdp's readers against pandas' C reader, as JSON lines.

A sample of `--rows` records drawn with replacement from bundled ADULT (13 integer-coded columns,
seed 0) is written once as a plain CSV; each reader then reads and validates it in a fresh
process (`--repeats` times, alternating readers), recording the seconds spent reading (imports
excluded) and the process's peak resident memory above what it held after its imports, beside
the size of the coded int32 array the table becomes (issue #25's target: 10^7 rows in <= 10 s
with a peak <= 3x that array):

- `jaxdp`: `jaxdp.read_csv(path, domain)`: NumPy's compiled reader (`np.loadtxt`) for a file of
  numbers, then the encoder's checks;
- `jaxdp text reader`: the text reader every file went through before (`read_columns` then
  `Dataset.from_columns`), still the path for labels, empty cells and malformed files;
- `pandas C engine`: `pandas.read_csv(path, dtype=int32)`, parsing only (no checks): an anchor.

    python bench/bench_reader.py --rows 1000000 10000000 --out bench/results/reader.jsonl
    python bench/bench_reader.py --rows 10000000 --readers jaxdp "pandas C engine"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
from _common import Recorder, load_average

import jaxdp

KERNEL = "read_csv"
READERS = ("jaxdp", "jaxdp text reader", "pandas C engine")

# Run in a child process: imports first, then the resident memory, then the timed read.
CHILD = """
import json, resource, sys, time
import numpy as np
reader, path = sys.argv[1], sys.argv[2]
import jaxdp
from jaxdp.domain import Dataset, read_columns
import pandas
domain = jaxdp.datasets.domain("adult").without_labels()  # the files hold codes

def resident_kb():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))

before = resident_kb()
start = time.perf_counter()
if reader == "jaxdp":
    out = jaxdp.read_csv(path, domain).codes
elif reader == "jaxdp text reader":
    out = Dataset.from_columns(domain, read_columns(path)).codes
else:
    out = pandas.read_csv(path, dtype=np.int32).to_numpy()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_kb": peak, "after_imports_kb": before, "shape": list(out.shape)}))
"""


def write_sample(rows: int, directory: str) -> str:
    """A CSV of `rows` ADULT records drawn with replacement (seed 0), header included."""
    data = jaxdp.datasets.load("adult")
    picks = np.random.default_rng(0).integers(0, len(data), rows)
    path = os.path.join(directory, f"adult-{rows}.csv")
    with open(path, "w") as fh:
        fh.write(",".join(data.domain.names) + "\n")
        np.savetxt(fh, data.codes[picks], fmt="%d", delimiter=",")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--readers", nargs="+", default=list(READERS), choices=READERS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rec = Recorder(args.out)
    with tempfile.TemporaryDirectory() as directory:
        for rows in args.rows:
            path = write_sample(rows, directory)
            runs: dict[str, list[dict]] = {r: [] for r in args.readers}
            loads = [load_average()]
            for _ in range(args.repeats):
                for reader in args.readers:
                    child = [sys.executable, "-c", CHILD, reader, path]
                    done = subprocess.run(child, capture_output=True, text=True, check=True)
                    runs[reader].append(json.loads(done.stdout.strip().splitlines()[-1]))
                    loads.append(load_average())
            coded_mb = rows * 13 * 4 / 2**20
            for reader, got in runs.items():
                peaks = [(g["peak_kb"] - g["after_imports_kb"]) / 1024 for g in got]
                rec.emit(
                    KERNEL,
                    {"rows": rows, "columns": 13, "file_mb": os.path.getsize(path) / 2**20},
                    reader=reader,
                    seconds=statistics.median(g["seconds"] for g in got),
                    repeats=[g["seconds"] for g in got],
                    peak_above_imports_mb=statistics.median(peaks),
                    coded_int32_mb=coded_mb,
                    peak_over_coded=statistics.median(peaks) / coded_mb,
                    peak_process_mb=statistics.median(g["peak_kb"] / 1024 for g in got),
                    load_average=[min(loads), max(loads)],
                )


if __name__ == "__main__":
    main()
