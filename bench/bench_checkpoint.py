"""What checkpoints cost (issue #27): a run's seconds with a checkpoint every round, every 10
rounds (the default) and none, as JSON lines.

- AIM on 6-attribute ADULT (all 3-way marginals, epsilon 1, delta 1e-9; data from ../shared, as
  `bench_aim.py`): a Python loop whose state (the fitted model and every measurement so far)
  is written after its rounds;
- GEM on bundled ADULT (all 286 3-way marginals, epsilon 1, 50 rounds): a compiled scan, which
  a checkpoint splits into blocks of rounds (one host round trip each).

Each configuration runs once to compile (not counted: a resumed or repeated run compiles the same
programs), then the configurations take turns, `--repeats` runs each from the same key (so that
a change in the machine's load falls on all of them). A record gives the median run, its overhead
against the median run without checkpoints (noisy on a shared machine: the runs' spread is in
`runs_s`), the seconds spent writing checkpoints as a fraction of that run (`save_fraction`: the
direct cost, measured inside the run), the checkpoints written and their size. The rounds, and
so the releases, are the same in every configuration.

`--only formats` compares the file format with orbax-checkpoint (installed with flax), side by
side in one process on GEM's state after its rounds: seconds to write (until the file is complete:
orbax's save returns earlier and finishes on a thread) and to read back, and bytes on disk.

    python bench/bench_checkpoint.py [--only aim gem formats] [--repeats 3] [--out F.jsonl]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import jax
from _common import Recorder, load_average
from bench_aim import load_adult

import jaxdp
from jaxdp import checkpoint, datasets, loop
from jaxdp.queries import all_kway

INTERVALS = (None, 10, 1)


class _TimedSaves:
    """Times every `Checkpoint.save` while installed: from the moment its state is computed (a
    jitted block's result arrives asynchronously) to the file's rename."""

    def __init__(self):
        self.seconds, self.count, self.bytes, self._save = 0.0, 0, 0, checkpoint.Checkpoint.save
        timed = self

        def save(store, rounds_done, state, info):
            jax.block_until_ready((state, info))  # the rounds' computation is not the save's
            started = time.perf_counter()
            timed._save(store, rounds_done, state, info)
            timed.seconds += time.perf_counter() - started
            timed.count += 1
            timed.bytes = store.path.stat().st_size

        checkpoint.Checkpoint.save = save

    def reset(self) -> None:
        self.seconds, self.count, self.bytes = 0.0, 0, 0


def _mechanism(name: str):
    if name == "aim":
        data = load_adult(6)
        if data is None:
            return None, None
        return data, jaxdp.aim(data, all_kway(data.domain.sizes, 3), epsilon=1.0, delta=1e-9)
    data = datasets.load("adult")
    return data, jaxdp.gem(data, all_kway(data.domain.sizes, 3), epsilon=1.0, delta=1e-9, rounds=50)


def _run(mechanism, key, every: int | None) -> float:
    with tempfile.TemporaryDirectory() as directory:
        store = None if every is None else checkpoint.Checkpoint(directory + "/ckpt", every=every)
        started = time.perf_counter()
        result = loop.run(mechanism, key, checkpoint=store, check_keys=False)
        jax.block_until_ready(result.state)
        return time.perf_counter() - started


def _formats(recorder: Recorder, key, repeats: int) -> None:
    import orbax.checkpoint as ocp

    _, mechanism = _mechanism("gem")
    state = jax.block_until_ready(loop.run(mechanism, key, check_keys=False).state)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(state))
    with tempfile.TemporaryDirectory() as directory:
        ours = checkpoint.Checkpoint(f"{directory}/ours")
        orbax = ocp.StandardCheckpointer()
        template = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
        timings: dict[str, list[float]] = {
            "ours_save": [],
            "ours_load": [],
            "orbax_save": [],
            "orbax_load": [],
        }
        with ours:
            for i in range(repeats + 1):  # the first of each is a warm-up
                started = time.perf_counter()
                ours.save(mechanism.rounds, state, ())
                timings["ours_save"].append(time.perf_counter() - started)
                started = time.perf_counter()
                ours.load()
                timings["ours_load"].append(time.perf_counter() - started)
                path = f"{directory}/orbax{i}"
                started = time.perf_counter()
                orbax.save(path, state)
                orbax.wait_until_finished()
                timings["orbax_save"].append(time.perf_counter() - started)
                started = time.perf_counter()
                orbax.restore(path, template)
                timings["orbax_load"].append(time.perf_counter() - started)
        on_disk = {
            "ours": ours.path.stat().st_size,
            "orbax": sum(f.stat().st_size for f in Path(f"{directory}/orbax0").rglob("*") if f.is_file()),
        }
    recorder.emit(
        "checkpoint_format",
        {"state": "gem adult after 50 rounds", "state_bytes": nbytes, "leaves": len(jax.tree.leaves(state))},
        **{f"{k}_s": statistics.median(v[1:]) for k, v in timings.items()},
        bytes_on_disk=on_disk,
        orbax_version=ocp.__version__,
        load_avg=load_average(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=["aim", "gem"], choices=["aim", "gem", "formats"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    recorder, saves, key = Recorder(args.out), _TimedSaves(), jax.random.key(0)
    if "formats" in args.only:
        _formats(recorder, key, args.repeats)
    for name in (n for n in args.only if n != "formats"):
        data, mechanism = _mechanism(name)
        if mechanism is None:
            continue
        for every in INTERVALS:
            _run(mechanism, key, every)  # compiles this configuration's programs
        runs: dict = {every: [] for every in INTERVALS}
        save_s: dict = {every: [] for every in INTERVALS}
        for _ in range(args.repeats):
            for every in INTERVALS:
                saves.reset()
                runs[every].append(_run(mechanism, key, every))
                save_s[every].append(saves.seconds)
        baseline = statistics.median(runs[None])
        for every in INTERVALS:
            saves.reset()
            _run(mechanism, key, every)  # counts the checkpoints and their size
            median = statistics.median(runs[every])
            overhead = None if every is None else median / baseline - 1
            recorder.emit(
                f"checkpoint_{name}",
                {"records": len(data), "attributes": len(data.domain), "rounds": mechanism.rounds},
                every=every,
                run_s=median,
                runs_s=runs[every],
                overhead=overhead,
                save_s=statistics.median(save_s[every]),
                save_fraction=statistics.median(save_s[every]) / baseline,
                saves=saves.count,
                checkpoint_bytes=saves.bytes if every is not None else None,
                target="save_fraction <= 0.05 at the default interval (10)",
                target_met=None if every != 10 else statistics.median(save_s[every]) / baseline <= 0.05,
                load_avg=load_average(),
            )


if __name__ == "__main__":
    main()
