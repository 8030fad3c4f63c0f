"""`python -m jaxdp` and the `jaxdp` command: see jaxdp.cli."""

import gc
import sys

from jaxdp.cli import main


def run() -> None:
    status = main()
    # Exit without the interpreter's final garbage collections: they walk every object JAX made
    # (0.8 s on the 2-core CPU at load 7, 3-4 s at load 15) and free nothing that outlives us.
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    run()
