"""All key derivation.

The key of every random draw is a pure function of the root key, the round and a named purpose:

    init:     stream_key(root, Stream.INIT)
    round t:  round_key(root, t) = fold_in(stream_key(root, Stream.ROUNDS), t)
              then stream_key(round_key, Stream.SELECT | MEASURE | UPDATE)
    release:  stream_key(root, Stream.RELEASE)
    preprocessing (private binning, before round 0): stream_key(root, Stream.PREPROCESS), the
              root of its own init/round/release keys
    decoding a release (post-processing): stream_key(stream_key(root, Stream.RELEASE), Stream.DECODE)
    a checkpoint's key fingerprint (no draw):  stream_key(root, Stream.CHECKPOINT)

so adding a draw to one purpose never shifts the others, and an audit can replay every key from
the root. The root key is as secret as the data: whoever holds it can regenerate the noise.

`fold_in` and `split_keys` derive the keys `jax.random.fold_in` and `split` give, bit for bit,
by hashing on the host outside a trace (`jaxdp._threefry`: no program compiled per call).
"""

from __future__ import annotations

import enum
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._io import atomic_open
from jaxdp._threefry import fold_in, split_keys  # noqa: F401 (split_keys: re-exported with the rules)
from jaxdp.types import Key


class Stream(enum.IntEnum):
    """Purpose tags folded into keys. Values are arbitrary but fixed forever (replay needs them)."""

    INIT = 0x1A17
    ROUNDS = 0x20D5
    SELECT = 0x5E1E
    MEASURE = 0x3EA5
    UPDATE = 0x0FDA
    RELEASE = 0x7E1E
    PREPROCESS = 0x9B1A
    DECODE = 0xDEC0
    CHECKPOINT = 0xC4EC
    MEASURE_AGAIN = 0x3EA2  # a round's second measurement (AIM's round-0 top-up)


def is_typed_key(key: object) -> bool:
    """True for a new-style typed PRNG key array (`jax.random.key`)."""
    dtype = getattr(key, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def require_key(key: object, name: str = "key") -> Key:
    """Return `key` if it is a single typed PRNG key, else raise TypeError naming the argument."""
    if not is_typed_key(key):
        hint = (
            " Integer seeds are not accepted: use jax.random.key(seed) for a reproducible run or "
            "jaxdp.keys.secure_root_key() for a release."
        )
        raise TypeError(f"{name} must be a typed JAX key, got {type(key).__name__}.{hint}")
    if getattr(key, "shape", ()) != ():
        raise TypeError(f"{name} must be a single key (shape ()), got shape {key.shape}")
    return key  # type: ignore[return-value]


def require_keys(keys: object, name: str = "keys") -> Key:
    """Return `keys` as a (seeds,) array of typed keys (one root key per seed): a key array such
    as `jax.random.split(root, 8)`, or a sequence of single typed keys."""
    if isinstance(keys, list | tuple):
        keys = jnp.stack([require_key(k, f"{name}[{i}]") for i, k in enumerate(keys)]) if keys else keys
    if not is_typed_key(keys):
        example = "jax.random.split(jax.random.key(0), 8)"
        raise TypeError(f"{name} must be typed JAX keys, e.g. {example}, got {type(keys).__name__}")
    if keys.ndim != 1 or keys.shape[0] < 1:
        raise TypeError(f"{name} must be a one-dimensional array of keys (seeds,), got shape {keys.shape}")
    return keys  # type: ignore[return-value]


def stream_key(key: Key, stream: Stream) -> Key:
    """The key for one purpose, derived from `key` by folding in the stream tag."""
    return fold_in(key, int(stream))


def round_key(root: Key, t) -> Key:
    """The key of round `t` (int or traced int32), derived from the root key."""
    return fold_in(stream_key(root, Stream.ROUNDS), t)


def preprocess_key(root: Key) -> Key:
    """The root of a preprocessing mechanism's keys (private binning): its rounds' keys never
    equal the main mechanism's, which derive from `root` itself."""
    return stream_key(root, Stream.PREPROCESS)


def decode_key(root: Key) -> Key:
    """The key that decodes a release into original units (values drawn within their bins): a
    sub-stream of RELEASE, distinct from the small indices mechanisms fold into the release key."""
    return stream_key(stream_key(root, Stream.RELEASE), Stream.DECODE)


def secure_root_key() -> Key:
    """A root key filled from the operating system's secure entropy (`os.urandom`).

    `jax.random.key(int)` keeps only 32 bits of an integer seed, too few for a release whose noise
    must be unguessable; this fills the key's whole state instead. Note that jax.random itself is a
    reproducible counter-based generator, not a vetted cryptographic RNG (see docs/privacy.md).
    """
    impl_shape = jax.random.key_data(jax.random.key(0)).shape
    words = np.frombuffer(os.urandom(4 * int(np.prod(impl_shape))), dtype=np.uint32)
    return jax.random.wrap_key_data(words.reshape(impl_shape))


def key_file(path: str | os.PathLike) -> Key:
    """The root key kept in file `path`, created there from `secure_root_key()` if absent.

    A run that must resume after a kill needs its root key again, and a release's key must not
    be a guessable seed: the file keeps a secure key between the two. It holds the key itself,
    so it is as secret as the data: it is created owner-only (mode 0600, never overwritten but
    to record the release it made: `record_release`).

    Raises:
        ValueError: the file exists but does not hold a jaxdp root key, or cannot be created.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_key_file(path)[0]
    except OSError as err:
        raise ValueError(f"cannot create key file {path!r}: {err.strerror or err}") from None
    key = secure_root_key()
    with os.fdopen(fd, "w") as fh:  # one short write: a key file is whole or unreadable, never wrong
        json.dump({"jaxdp_root_key": str(jax.random.key_impl(key)), "words": _words(key)}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    return key


def refuse_another_release(path: str | os.PathLike, release: str) -> None:
    """Raise ValueError if the key in file `path` already made a release other than `release` (a
    digest of what the release is made of: `jaxdp.inputs.release_fingerprint` and the built
    mechanism). Two releases from one root key draw the same noise, which cancels in their
    difference; the same release made again draws it again and reveals nothing new."""
    made = _read_key_file(os.fspath(path))[1].get("release")
    if made is not None and made != release:
        raise ValueError(
            f"key file {os.fspath(path)!r} already made another release (other settings or data): a root "
            "key must never make two releases, whose noise would cancel in their difference; give a new "
            "--key-file"
        )


def record_release(path: str | os.PathLike, release: str) -> None:
    """Record in key file `path` the release its key made (see `refuse_another_release`),
    rewriting the file atomically and owner-only."""
    path = os.fspath(path)
    _, record = _read_key_file(path)
    with atomic_open(path) as fh:
        json.dump({**record, "release": release}, fh)


def _words(key: Key) -> list[int]:
    return [int(w) for w in np.asarray(jax.random.key_data(key)).reshape(-1)]


def _read_key_file(path: str) -> tuple[Key, dict]:
    try:
        with open(path) as fh:
            record = json.load(fh)
        impl = record["jaxdp_root_key"]
        template = jax.random.key_data(jax.random.key(0, impl=impl))
        words = record["words"]
        if len(words) != template.size or not all(type(w) is int and 0 <= w < 2**32 for w in words):
            raise ValueError("bad words")
        key = jax.random.wrap_key_data(np.asarray(words, np.uint32).reshape(template.shape), impl=impl)
        if not isinstance(record.get("release", ""), str):
            raise ValueError("bad release")
        return key, record
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"key file {path!r} does not hold a jaxdp root key ({type(err).__name__})") from None
