"""Threefry-2x32 key derivation on the host, bit for bit `jax.random.fold_in` and `split`.

Why: called outside a trace, every `jax.random.fold_in` or `split` compiles its own XLA program
per shape, 0.06-0.15 s each on a 2-core CPU, and a short command line spends about 0.4 s of its
life there (the 1,000-record AIM run of `bench/bench_latency.py`'s `aim-pums` case), while the
hash of one key takes NumPy microseconds. The draws themselves stay in JAX: only the derivation
of keys from keys moves, and it gives the keys `jax.random` gives (tests/test_keys.py checks the
two against each other on random keys and data).

The hash is Salmon et al.'s Threefry-2x32 with 20 rounds, as JAX computes it
(`jax._src.random.threefry2x32`): `fold_in(key, d)` hashes the counter pair (0, d), and
`split(key, n)` under `jax_threefry_partitionable` (JAX's default) hashes (0, i) for i < n.
Where the key is traced (or not threefry, or split the other way) they call `jax.random`.
`jaxdp.keys` exports both with the rest of the key rules.
"""

from __future__ import annotations

import jax
import numpy as np

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)
IMPL = "threefry2x32"


def host_words(key: object) -> np.ndarray | None:
    """The (2,) uint32 words of `key` where its derivation can run here: a concrete single
    threefry key, with JAX splitting keys the partitionable way; else None."""
    if isinstance(key, jax.core.Tracer) or getattr(key, "shape", None) != ():
        return None
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):  # type: ignore[attr-defined]
        return None
    if str(jax.random.key_impl(key)) != IMPL or not jax.config.jax_threefry_partitionable:
        return None
    words = jax.random.key_data(key)
    if isinstance(words, jax.core.Tracer):  # a concrete key closed over by a function being traced
        return None
    return np.asarray(words, np.uint32)


def counter(data: object) -> int | None:
    """`data` as a fold-in counter where it is a concrete integer in [0, 2^32); else None
    (JAX then converts or refuses it its own way)."""
    if isinstance(data, jax.core.Tracer | bool | np.bool_):
        return None
    try:
        value = data if isinstance(data, int | np.integer) else data.item()  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return None
    if not isinstance(value, int | np.integer) or not 0 <= value < 2**32:
        return None
    return int(value)


def hash_pairs(words, x0, x1):
    """Threefry-2x32 (20 rounds) of the counter pairs (x0[i], x1[i]) under the key `words`: NumPy
    uint32 arrays here, JAX arrays in the samplers' programs (`samplers.integers._draw`), where
    the straight-line code compiles faster than JAX's rolled loop."""
    keys = (words[0], words[1], words[0] ^ words[1] ^ _PARITY)
    x0, x1 = x0 + keys[0], x1 + keys[1]
    for block in range(5):
        for rotation in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = ((x1 << np.uint32(rotation)) | (x1 >> np.uint32(32 - rotation))) ^ x0
        x0 = x0 + keys[(block + 1) % 3]
        x1 = x1 + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


def _wrap(words: np.ndarray) -> jax.Array:
    return jax.random.wrap_key_data(words, impl=IMPL)


def fold_in(key: jax.Array, data) -> jax.Array:
    """`jax.random.fold_in(key, data)`, derived on the host where key and data are concrete."""
    value = counter(data)
    words = None if value is None else host_words(key)
    if words is None:
        return jax.random.fold_in(key, data)
    x0, x1 = hash_pairs(words, np.zeros(1, np.uint32), np.array([value], np.uint32))
    return _wrap(np.array([x0[0], x1[0]], np.uint32))


def split_keys(key: jax.Array, num: int = 2) -> tuple[jax.Array, ...]:
    """The keys of `jax.random.split(key, num)` as a tuple of single keys (indexing a key array
    would compile a program of its own), derived on the host where the key is concrete. Under
    `jax.debug_key_reuse` the split is JAX's, so that the checker sees the key consumed."""
    words = host_words(key)
    if words is None or jax.config.jax_debug_key_reuse:
        return tuple(jax.random.split(key, num))
    x0, x1 = hash_pairs(words, np.zeros(num, np.uint32), np.arange(num, dtype=np.uint32))
    return tuple(_wrap(np.array([a, b], np.uint32)) for a, b in zip(x0, x1, strict=True))
