"""Programs compiled ahead of their first call, on a thread of their own: XLA compiles on
another core while this one runs the program before (a fit's next layout, a release's next
column, a mechanism's release while its rounds run), so a run rarely waits for a compile."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Hashable
from typing import Any


class Compiler:
    """Compiled programs by signature, each compiled once while it is kept, in submission order.
    Safe to call from several threads.

    It offers no way to ask whether a program is compiled already: a choice of program made on
    that would depend on what ran before in the process, and two programs of one computation
    may round differently (DESIGN.md's determinism rule).

    Args:
        name: the compiling thread's name (it shows in profiles and thread dumps).
        capacity: programs kept at most (the least recently asked for go first); None keeps all.
    """

    def __init__(self, name: str, capacity: int | None = None):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._programs: dict[Hashable, concurrent.futures.Future] = {}
        self._capacity = capacity
        self._lock = threading.Lock()

    def program(self, signature: Hashable, lower: Callable[[], Any], *, wait: bool = True) -> Any:
        """The compiled program of `signature`, from `lower()` (a `jax.stages.Lowered`) the first
        time it is asked for; with `wait=False`, start compiling it and return None."""
        with self._lock:
            future = self._programs.pop(signature, None)
            if future is None:
                future = self._pool.submit(lambda: lower().compile())
            self._programs[signature] = future  # now the most recently asked for
            if self._capacity is not None and len(self._programs) > self._capacity:
                del self._programs[next(iter(self._programs))]
        return future.result() if wait else None
