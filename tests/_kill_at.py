"""Run `python -m jaxdp` and SIGKILL the process at a chosen point (tests/test_resume.py).

    python tests/_kill_at.py after-save N -- synth ...   killed once the Nth checkpoint is written
    python tests/_kill_at.py mid-save N -- synth ...     killed halfway through writing the Nth
    python tests/_kill_at.py mid-output N -- synth ...   killed halfway through the Nth output file

The kill is a real SIGKILL of this process (no handler, no cleanup runs), placed where the tests
need it deterministically, rather than timed from outside.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from jaxdp import checkpoint, cli

# Bytes written before a mid-write kill: inside the first member of a checkpoint's zip, and inside
# an output file's first line.
WRITTEN_BEFORE_KILL = 40


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _DyingWriter:
    """A file that is killed, mid-write, once WRITTEN_BEFORE_KILL bytes went to disk."""

    def __init__(self, fh):
        self._fh, self._written = fh, 0

    def write(self, data):
        room = WRITTEN_BEFORE_KILL - self._written
        if len(data) >= room:
            self._fh.write(data[:room])
            self._fh.flush()
            os.fsync(self._fh.fileno())
            _die()
        self._written += len(data)
        return self._fh.write(data)

    def __getattr__(self, name):
        return getattr(self._fh, name)


def _dying_open(real, target: int):
    calls = 0

    @contextlib.contextmanager
    def opener(path, mode="w"):
        nonlocal calls
        calls += 1
        with real(path, mode) as fh:
            yield _DyingWriter(fh) if calls == target else fh

    return opener


def main(argv: list[str]) -> int:
    point, n, separator, *command = argv
    assert separator == "--", "usage: _kill_at.py POINT N -- ARGS"
    n = int(n)
    if point == "after-save":
        save, saves = checkpoint.Checkpoint.save, 0

        def save_then_die(self, *args):
            nonlocal saves
            save(self, *args)
            saves += 1
            if saves == n:
                _die()

        checkpoint.Checkpoint.save = save_then_die
    elif point == "mid-save":
        checkpoint.atomic_open = _dying_open(checkpoint.atomic_open, n)
    elif point == "mid-output":
        cli.atomic_open = _dying_open(cli.atomic_open, n)
    else:
        raise SystemExit(f"unknown kill point {point!r}")
    return cli.main(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
