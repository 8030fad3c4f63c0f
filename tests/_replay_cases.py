"""The replay test's cases (`tests/test_replay.py`), and their release digests from a fresh process.

    python -m tests._replay_cases NAME [NAME ...]

prints one JSON object, {name: digest}, for the named cases run in the order given, in a process
of its own (no persistent compile cache: the test process has one).

The table is past the dense threshold: two attributes of 60 values (and one of 3) over 20,000
records, so a fit of the 60 x 60 marginal's junction tree repays compiling the tree's own dense
program (`jaxdp.families._dense_junction.worth_compiling`) and the smaller fits take the flat
program: a run of AIM, MST or PrivBayes goes through both (the test counts them).
"""

from __future__ import annotations

import hashlib
import json
import sys

import jax
import numpy as np

import jaxdp
from jaxdp import api
from jaxdp.queries import MarginalWorkload

N_RECORDS = 20_000
SIZES = {"a": 60, "b": 60, "c": 3}
WORKLOAD = MarginalWorkload(tuple(SIZES.values()), ((0, 1), (1, 2)))
KEY_SEED = 11


def table() -> jaxdp.Dataset:
    """b follows a within 5 values; c is independent."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 60, N_RECORDS)
    b = (a + rng.integers(0, 5, N_RECORDS)) % 60
    c = rng.integers(0, 3, N_RECORDS)
    return jaxdp.Dataset.from_codes(jaxdp.Domain.from_sizes(SIZES), np.stack([a, b, c], 1))


# Each case's factory and keywords. PrivBayes at epsilon 20: its usefulness bound then admits the
# 60 x 60 family (at epsilon 1 it admits 295 cells). AIM-GEM fits no graphical model; it is here
# for its generator's fit and the shared driver.
CASES = {
    "aim": (jaxdp.aim, {"epsilon": 1.0, "max_rounds": 16}),
    "aim-gdp": (jaxdp.aim_gdp, {"epsilon": 1.0, "max_rounds": 16}),
    "mst": (jaxdp.mst, {"epsilon": 1.0}),
    "swift": (jaxdp.swift, {"epsilon": 1.0}),
    "privbayes": (jaxdp.privbayes, {"epsilon": 20.0}),
    "aim-gem": (jaxdp.aim_gem, {"epsilon": 1.0, "max_rounds": 16, "iters": 20, "final_iters": 60}),
}


def build(name: str, data: jaxdp.Dataset, **changes):
    factory, options = CASES[name]
    return factory(data, WORKLOAD, delta=1e-9, **{**options, **changes})


def released(name: str, mechanism) -> tuple[np.ndarray, list[dict]]:
    """The release (records) and ledger of one run, as `synthesize` makes them."""
    result = api.execute(name, mechanism, jax.random.key(KEY_SEED), mechanism.domain)
    return np.asarray(result.synthetic.codes), [entry.to_json() for entry in result.ledger]


def digest(records: np.ndarray, ledger: list[dict]) -> str:
    payload = np.ascontiguousarray(records, np.int32).tobytes() + json.dumps(ledger, sort_keys=True).encode()
    return hashlib.sha256(payload).hexdigest()


if __name__ == "__main__":
    data = table()
    print(json.dumps({name: digest(*released(name, build(name, data))) for name in sys.argv[1:]}))
