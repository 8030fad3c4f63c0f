"""Programs compiled ahead of their first call, on a thread of their own: XLA compiles on
another core while this one runs the program before (a fit's next layout, a release's next
column, a mechanism's release while its rounds run), so a run rarely waits for a compile."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Hashable
from typing import Any


class Compiler:
    """Compiled programs by signature, each compiled once, in submission order.

    Args:
        name: the compiling thread's name (it shows in profiles and thread dumps).
    """

    def __init__(self, name: str):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._programs: dict[Hashable, concurrent.futures.Future] = {}

    def program(self, signature: Hashable, lower: Callable[[], Any], *, wait: bool = True) -> Any:
        """The compiled program of `signature`, from `lower()` (a `jax.stages.Lowered`) the first
        time it is asked for; with `wait=False`, start compiling it and return None."""
        if signature not in self._programs:
            self._programs[signature] = self._pool.submit(lambda: lower().compile())
        return self._programs[signature].result() if wait else None
