"""`python -m jaxdp`: see jaxdp.cli."""

import sys

from jaxdp.cli import main

sys.exit(main())
