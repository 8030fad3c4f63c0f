"""JAX's persistent compilation cache for the command line.

A CLI process spends most of its seconds compiling (PEP on ADULT-reduced: ~8 s of XLA for ~1 s of
work). The command line therefore keeps compiled programs on disk, under the user's cache
directory, and a later run with the same shapes loads them instead of compiling.

What a cached program holds: its code, its shapes (the record count, the domain's sizes, the
workload's layout) and the constants it was lowered with. It holds no private value: private
records, true answers and keys enter every program as jit arguments, never as constants (DESIGN.md
section 3), which `tests/test_compile_cache.py` proves for the programs the CLI compiles (their
jaxprs' constants, and the cache's files after a run, scanned for a planted table's bytes). Shapes
are not values but are not nothing: a program's record dimension is the table's size, which is
private under the add-remove relation. The directory is created private to the user (mode 0700);
turn the cache off with `--no-compile-cache` or `JAXDP_NO_COMPILE_CACHE=1` where that matters.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jax

OPT_OUT_ENV = "JAXDP_NO_COMPILE_CACHE"
DIRECTORY_ENV = "JAXDP_CACHE_DIR"

# Cache every program, not only those that took over a second (JAX's default): a CLI run compiles
# a dozen programs of 0.1-1 s besides its main loop, and together they are seconds.
MIN_COMPILE_SECONDS = 0.0


def cache_directory() -> Path:
    """Where compiled programs go: `$JAXDP_CACHE_DIR`, else `jaxdp/xla` under the user's cache
    directory (`$XDG_CACHE_HOME` or `~/.cache` on Linux, `~/Library/Caches` on macOS,
    `%LOCALAPPDATA%` on Windows)."""
    if os.environ.get(DIRECTORY_ENV):
        return Path(os.environ[DIRECTORY_ENV]).expanduser()
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Caches"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else home / ".cache"  # the XDG spec ignores relative paths
    return base / "jaxdp" / "xla"


def opted_out() -> bool:
    return os.environ.get(OPT_OUT_ENV, "").strip().lower() not in ("", "0", "false", "no")


def enable() -> Path | None:
    """Turn the persistent cache on for this process, before anything compiles.

    Returns:
        The cache directory, or None when the user opted out or the directory cannot be created
        (a cache is an optimisation: a read-only home must not stop a run). A cache directory the
        user gave JAX itself (`JAX_COMPILATION_CACHE_DIR`) is kept.
    """
    if opted_out():
        return None
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    directory = cache_directory()
    try:
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return directory
