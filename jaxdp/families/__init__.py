"""Synthetic-data representations and their update solvers (post-processing only: no module
here imports `jaxdp.noise` or `jaxdp.accounting`).

The families `jaxdp.adaptive` composes: `PEP` and `MW` (an explicit distribution over the domain
or a public dataset's records), `RAP` (relaxed rows) and `GEM` (a generator network).
"""

from jaxdp.families.fitted import GEM, RAP
from jaxdp.families.histogram_update import MW, PEP

__all__ = ["GEM", "MW", "PEP", "RAP"]
