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

    python bench/bench_checkpoint.py [--only aim gem] [--repeats 3] [--out F.jsonl]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=["aim", "gem"], choices=["aim", "gem"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    recorder, saves, key = Recorder(args.out), _TimedSaves(), jax.random.key(0)
    for name in args.only:
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
