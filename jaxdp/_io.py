"""Atomic file output: a result file appears whole or not at all.

A file is written to a hidden temporary file beside its target (owner-only, `tempfile.mkstemp`),
flushed and fsynced, then renamed over the target, and the directory fsynced, so that neither an
error (a full disk) nor a crash leaves a partial target: the old file or none stays, whole. A
process killed mid-write can leave its hidden `.NAME.*.tmp` behind, never a partial NAME.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

TEMPORARY_SUFFIX = ".tmp"


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside `path` for writing ("w" text, "wb" bytes); on success make
    it durable and rename it over `path`. On any error the temporary file is removed."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
    try:
        with os.fdopen(fd, mode, **({"newline": ""} if mode == "w" else {})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (where the platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
