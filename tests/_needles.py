"""Needles for finding a planted private table in bytes (compiled programs, cache entries,
pickles): windows of its values in every encoding a copy of it would take.

A needle is a window of 32 consecutive values of a private array (row-major and column-major; the
whole array if it is shorter, down to 8 values), as raw little-endian int32, int64, uint8 and
float32 (how NumPy arrays, pickled arrays and XLA's float literals are stored), float64 and
protobuf varints (how serialized HLO stores integer literals). Windows with fewer than 4 distinct
values are not used. A 32-value window of a planted table's records carries over 64 bits of their
randomness, so a chance match in a few megabytes has probability below 1e-12; the shortest needles
(8 counts of about 67 +- 8, each value at most 5% likely) carry about 35 bits, a chance match
below 1e-4 per megabyte scanned: a false alarm is a failure to look into, never a missed leak.
"""

from __future__ import annotations

import numpy as np

WINDOW = 32


def _varints(values: np.ndarray) -> bytes:
    out = bytearray()
    for value in values.tolist():
        value %= 1 << 64  # protobuf writes a negative int32/int64 as its 64-bit two's complement
        while True:
            low, value = value & 0x7F, value >> 7
            out.append(low | (0x80 if value else 0))
            if not value:
                break
    return bytes(out)


def needles(array: np.ndarray) -> set[bytes]:
    """The needles of one private array (module docstring)."""
    array = np.asarray(array)
    flats = [array.ravel()] + ([array.T.ravel()] if array.ndim == 2 else [])
    found: set[bytes] = set()
    for flat in flats:
        width = min(WINDOW, flat.size)
        if width < 8:
            continue
        for start in (0, (flat.size - width) // 2, flat.size - width):
            window = flat[start : start + width]
            if np.unique(window).size < 4:
                continue
            found |= {window.astype("<f4").tobytes(), window.astype("<f8").tobytes()}
            if np.issubdtype(window.dtype, np.integer):
                found |= {window.astype("<i4").tobytes(), window.astype("<i8").tobytes(), _varints(window)}
                if window.min() >= 0 and window.max() < 256:
                    found.add(window.astype(np.uint8).tobytes())
    return found


def found_in(haystacks: dict[str, bytes] | list[bytes], private: set[bytes]) -> list[str]:
    """The names (or positions) of the haystacks holding any of the needles."""
    items = haystacks.items() if isinstance(haystacks, dict) else enumerate(haystacks)
    return [str(name) for name, data in items if any(n in data for n in private)]


def marginal(codes: np.ndarray, clique: tuple[int, ...], sizes: tuple[int, ...]) -> np.ndarray:
    """The true counts of one marginal of coded records, row-major."""
    shape = tuple(sizes[a] for a in clique)
    return np.bincount(np.ravel_multi_index(codes[:, clique].T, shape), minlength=int(np.prod(shape)))
