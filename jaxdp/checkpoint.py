"""Checkpoints of a run between rounds, so that a killed run resumes to the same bytes.

A run's state is a pytree and round t's key is `round_key(root, t)`, so a run resumed from round t
draws exactly the noise the uninterrupted run would have drawn there: resuming spends nothing
twice and releases what the uninterrupted run releases (docs/privacy.md, "Checkpoints").

    checkpoint = Checkpoint("run.ckpt", every=10, fingerprint={"data": ..., "budget": ...})
    jaxdp.loop.run(mechanism, key, checkpoint=checkpoint)

A directory holds one checkpoint, `checkpoint.npz`, replaced atomically (`jaxdp._io`): NumPy's
zip of arrays, with no pickles (nothing in it runs code when it is read), holding
- the state after the last completed round, and the rounds' Info so far (the ledger is rebuilt
  from it): what a run releases or could release, never keys, raw noise or true answers (the
  mechanism contract keeps those out of State and Info);
- the rounds done, the jaxdp version and the run's fingerprint: one digest per thing that must
  match on resume (the settings, the budget, a digest of the data, the key's fingerprint, never
  the key itself), so that a refusal names what differs;
- a SHA-256 checksum over all of it.

Privacy: a checkpoint is a function of released noisy measurements, but its data digest and the
state's synthetic representation make it as sensitive as the release before it is published, and
the digest as sensitive as the data (a guessed table can be checked against it). Files are
written owner-only in a directory created owner-only; `synthesize` and the command line remove
them after the release unless asked to keep them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxdp._io import TEMPORARY_SUFFIX, atomic_open
from jaxdp._serial import UnreadableFile, decode, digest, encode, read_path, write_zip
from jaxdp._version import __version__
from jaxdp.keys import Stream, stream_key
from jaxdp.types import Key

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; one run per directory is then the user's to keep
    fcntl = None

FILE = "checkpoint.npz"
LOCK = "checkpoint.lock"
FORMAT = 1
DEFAULT_EVERY = 10


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: another run's, another version's, corrupt, or in use."""


@dataclasses.dataclass(frozen=True)
class Saved:
    """A checkpoint read back: the state after `rounds_done` rounds and their Info, stacked on a
    leading (rounds_done,) axis."""

    rounds_done: int
    state: Any
    info: Any


def key_fingerprint(key: Key) -> str:
    """A digest of a key drawn from the root key's own CHECKPOINT stream: equal for equal root
    keys, and no function of the root key that any draw of the run uses."""
    return digest(np.asarray(jax.random.key_data(stream_key(key, Stream.CHECKPOINT))))[:32]


def mechanism_fingerprint(mechanism) -> dict[str, str]:
    """The built mechanism's settings (its static fields, which hold its plan) and inputs (its
    leaves: true answers or coded records, any public data, and its noise scales), one digest
    each."""
    leaves, treedef = jax.tree_util.tree_flatten(mechanism)
    return {
        "mechanism_settings": digest(type(mechanism).__qualname__, str(treedef)),
        "mechanism_inputs": digest(*leaves),
    }


class Checkpoint:
    """A directory holding one run's checkpoint (module docstring).

    Args:
        directory: created owner-only if absent.
        every: write a checkpoint every this many rounds (a jitted run compiles its rounds in
            blocks of this size), and after the last.
        fingerprint: what must match on resume, by name (a digest or short text per entry);
            `jaxdp.loop.run` adds the mechanism's settings and inputs, the key's fingerprint, the
            rounds, `every` and the JAX version and backend.

    Raises:
        ValueError: `every` is not a positive integer.
    """

    def __init__(self, directory: str | os.PathLike, *, every: int = DEFAULT_EVERY, fingerprint=None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint_every must be an integer >= 1, got {every!r}")
        self.directory = Path(directory)
        self.every = every
        self.fingerprint: dict[str, str] = dict(fingerprint or {})
        self._lock: int | None = None

    @property
    def path(self) -> Path:
        return self.directory / FILE

    def with_parts(self, parts: Mapping[str, str]) -> Checkpoint:
        """This checkpoint with more fingerprint entries (same directory and interval)."""
        return Checkpoint(self.directory, every=self.every, fingerprint={**self.fingerprint, **parts})

    def for_run(self, mechanism, key: Key, rounds: int) -> Checkpoint:
        """The fingerprint `loop.run` checks: the caller's, with the mechanism's, the key's, the
        rounds, the interval (another interval compiles other blocks of rounds) and the JAX
        version and backend (others may compile the rounds to other floats)."""
        return self.with_parts(
            {
                **mechanism_fingerprint(mechanism),
                "key": key_fingerprint(key),
                "rounds": str(rounds),
                "checkpoint_every": str(self.every),
                "jax": f"jax {jax.__version__} on {jax.default_backend()}",
            }
        )

    # -- the directory's lock ---------------------------------------------------------------------

    def __enter__(self) -> Checkpoint:
        """Create the directory (owner-only) and hold its lock: two runs never share a checkpoint.
        The lock is the operating system's (flock), so a killed run never leaves it held."""
        shown = str(self.directory)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = self._locked()
        except OSError as err:
            raise CheckpointError(f"cannot use the checkpoint directory {shown!r}: {err}") from None
        if fd is None:
            raise CheckpointError(f"checkpoint directory {shown!r} is in use by another run")
        self._lock = fd
        for stale in self.directory.glob(f".{FILE}.*{TEMPORARY_SUFFIX}"):  # left by a killed write
            with contextlib.suppress(OSError):
                stale.unlink()
        return self

    def _locked(self) -> int | None:
        """A descriptor of the lock file, locked; None if another run holds it."""
        path = self.directory / LOCK
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            if fcntl is None:
                return fd
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            try:  # the file locked is still the directory's (not one a finished run removed)
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def __exit__(self, *exc) -> None:
        if self._lock is not None:
            os.close(self._lock)  # releases the flock
            self._lock = None

    # -- reading and writing ----------------------------------------------------------------------

    def save(self, rounds_done: int, state: Any, info: Any) -> None:
        """Write the state after `rounds_done` rounds and their stacked Info, replacing the
        previous checkpoint atomically (the old one stays whole until the new one is)."""
        arrays: list[np.ndarray] = []
        manifest = {
            "format": FORMAT,
            "jaxdp_version": __version__,
            "fingerprint": self.fingerprint,
            "rounds_done": int(rounds_done),
            "state": encode(state, arrays),
            "info": encode(info, arrays),
        }
        with atomic_open(self.path, "wb") as fh:
            write_zip(fh, manifest, arrays)

    def load(self) -> Saved | None:
        """The checkpoint in the directory, None if there is none.

        Raises:
            CheckpointError: it cannot be read, is corrupt or truncated, is from another format or
                jaxdp version, or is from a run whose fingerprint differs (each difference named).
        """
        if not self.path.exists():
            return None
        shown = str(self.path)
        manifest, arrays = self._read(shown)
        if manifest.get("format") != FORMAT or manifest.get("jaxdp_version") != __version__:
            raise CheckpointError(
                f"checkpoint {shown!r} was written by jaxdp {manifest.get('jaxdp_version')} "
                f"(format {manifest.get('format')}); this is jaxdp {__version__} (format {FORMAT}): "
                "resume with the version that wrote it, or delete it to start afresh"
            )
        differ = _differences(manifest["fingerprint"], self.fingerprint)
        if differ:
            raise CheckpointError(
                f"checkpoint {shown!r} is from another run; what differs from this run: {', '.join(differ)}. "
                "Resume with the command (and key or seed) that wrote it, or delete it to start afresh "
                "(a key that made a release must not make another: start afresh with a new key)"
            )
        try:
            state, info = decode(manifest["state"], arrays), decode(manifest["info"], arrays)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, ImportError) as err:
            raise CheckpointError(
                f"checkpoint {shown!r} holds a state this version cannot read: {err}"
            ) from None
        rounds_done = manifest["rounds_done"]
        if any(np.shape(leaf)[:1] != (rounds_done,) for leaf in jax.tree.leaves(info)):
            raise CheckpointError(f"checkpoint {shown!r} holds Info of another length than its rounds")
        return Saved(rounds_done, state, info)

    def _read(self, shown: str) -> tuple[dict, list[np.ndarray]]:
        """The manifest and arrays of the file, checked for integrity and shape."""
        try:
            manifest, arrays = read_path(self.path, "checkpoint")
        except UnreadableFile as err:
            fix = "" if str(err).startswith("cannot read") else "; delete it to start afresh"
            raise CheckpointError(f"{err}{fix}") from None
        valid = (
            isinstance(manifest.get("fingerprint"), dict)
            and all(isinstance(v, str) for v in manifest["fingerprint"].values())
            and type(manifest.get("rounds_done")) is int
            and {"state", "info"} <= manifest.keys()
        )
        if not valid:
            raise CheckpointError(
                f"checkpoint {shown!r} is not a checkpoint jaxdp wrote; delete it to start afresh"
            )
        return manifest, arrays

    def remove(self) -> None:
        """Delete the checkpoint, its lock and the directory (if then empty), holding the lock
        meanwhile, so that no other run's checkpoint or lock is deleted."""
        with contextlib.ExitStack() as held:
            if self._lock is None:
                held.enter_context(self)
            for name in (FILE, LOCK):
                (self.directory / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.directory.rmdir()


def _differences(saved: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    names = list(dict.fromkeys([*current, *saved]))
    return [name.replace("_", " ") for name in names if saved.get(name) != current.get(name)]
