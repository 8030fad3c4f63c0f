"""Mechanisms: the Adaptive Measurements builder and its presets.

`adaptive` composes a selection rule, a measurement and a family into a mechanism (an `Adaptive`,
or for AIM's filter rule an `Annealed`); every shipped mechanism is a preset of it: MWEM, PEP,
PMW-Pub, PEP-Pub, RAP, RAP-softmax, GEM, GEM-Pub, DualQuery, FEM, RAP++, Independent, Gaussian,
AIM, AIM-GDP, AIM-GEM, MST, PrivBayes and SWIFT.
"""

from jaxdp.mechanisms.adaptive import Adaptive, AdaptiveInfo, AdaptiveState, adaptive
from jaxdp.mechanisms.aim import aim
from jaxdp.mechanisms.aim_gdp import aim_gdp
from jaxdp.mechanisms.aim_gem import aim_gem
from jaxdp.mechanisms.dualquery import dualquery
from jaxdp.mechanisms.error_bounds import ErrorBounds
from jaxdp.mechanisms.fem import fem
from jaxdp.mechanisms.gaussian import gaussian
from jaxdp.mechanisms.gem import gem, gem_pub
from jaxdp.mechanisms.host_loop import Annealed, AnnealedState
from jaxdp.mechanisms.independent import independent
from jaxdp.mechanisms.mst import mst
from jaxdp.mechanisms.mwem import mwem, pmw_pub
from jaxdp.mechanisms.pep import pep, pep_pub
from jaxdp.mechanisms.privbayes import privbayes
from jaxdp.mechanisms.query_classes import QueryClass
from jaxdp.mechanisms.rap import rap, rap_softmax
from jaxdp.mechanisms.rap_plus import rap_plus_plus
from jaxdp.mechanisms.swift import swift

__all__ = [
    "Adaptive",
    "AdaptiveInfo",
    "AdaptiveState",
    "Annealed",
    "AnnealedState",
    "ErrorBounds",
    "QueryClass",
    "adaptive",
    "aim",
    "aim_gdp",
    "aim_gem",
    "dualquery",
    "fem",
    "gaussian",
    "gem",
    "gem_pub",
    "independent",
    "mst",
    "mwem",
    "pep",
    "pep_pub",
    "pmw_pub",
    "privbayes",
    "rap",
    "rap_plus_plus",
    "rap_softmax",
    "swift",
]
