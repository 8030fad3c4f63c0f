"""One process of `tests/test_multihost.py`: AIM, GEM and MWEM on the tiny table, written to
OUT/<mechanism>-<process>.json.

    python -m tests.multihost.worker OUT                      # one process, every record
    python -m tests.multihost.worker OUT --process I --of 2 --coordinator localhost:PORT

With --of 2, `jax.distributed.initialize` joins the processes (CPU collectives over gloo); each
process holds only its own rows (the first 202 or the last 201 of 403) and counts them over
`records_mesh()`, which spans every process's devices.
"""

import argparse
import json
from pathlib import Path

import jax

RECORDS = 403  # an odd count: the processes hold 202 and 201 rows, padded to one block
SPLIT = 202

MECHANISMS = {
    "aim": dict(max_rounds=6, iters=20, final_iters=20),
    "gem": dict(rounds=2, batch=64, hidden=(16,), latent_dim=8, max_steps=10),
    "mwem": dict(rounds=3),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--process", type=int, default=0)
    parser.add_argument("--of", type=int, default=1)
    parser.add_argument("--coordinator")
    args = parser.parse_args()
    mesh = None
    rows = slice(None)
    if args.of > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator, num_processes=args.of, process_id=args.process)
        from jaxdp.queries import records_mesh

        mesh = records_mesh()
        rows = slice(0, SPLIT) if args.process == 0 else slice(SPLIT, None)

    import jaxdp
    from jaxdp.domain import Dataset
    from tests.mechanisms.conftest import tiny_dataset

    whole = tiny_dataset(n=RECORDS)
    data = Dataset.from_codes(whole.domain, whole.codes[rows])
    for name, options in MECHANISMS.items():
        result = jaxdp.synthesize(
            data,
            None,
            mechanism=name,
            epsilon=1.0,
            delta=1e-6,
            key=jax.random.key(3),
            workload="all-2way",
            mesh=mesh,
            **options,
        )
        report = {k: v for k, v in result.report.items() if k != "seconds"}
        record = {
            "local_rows": len(data),
            "devices": jax.device_count(),
            "synthetic": result.synthetic.codes.tolist(),
            "ledger": [entry.to_json() for entry in result.ledger],
            "report": json.loads(json.dumps(report, default=str)),
        }
        (args.out / f"{name}-{args.process}.json").write_text(json.dumps(record))
    (args.out / f"binning-{args.process}.txt").write_text(_private_binning_refusal(data, mesh))


def _private_binning_refusal(data, mesh) -> str:
    """The error a release with private quantile bins gets (over several processes each would
    bin its own rows), or "none"."""
    import jaxdp

    schema = {
        "columns": {
            name: {"type": "numeric", "lower": 0, "upper": size - 1, "integer": True, "binning": "quantiles"}
            for name, size in zip(data.domain.names, data.domain.sizes, strict=True)
        }
    }
    table = {name: data.codes[:, i] for i, name in enumerate(data.domain.names)}
    try:
        jaxdp.synthesize(
            table, schema, mechanism="mwem", epsilon=1.0, key=jax.random.key(0), mesh=mesh, rounds=2
        )
    except ValueError as error:
        return str(error)
    return "none"


if __name__ == "__main__":
    main()
