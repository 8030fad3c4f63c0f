"""Mechanisms: each a frozen pytree with init/step/release, built by a validating factory.

`adaptive` composes a selection rule, the measurement and a family into a mechanism; MWEM, PEP,
PMW-Pub, PEP-Pub, RAP, RAP-softmax, GEM and GEM-Pub are its presets. AIM's driver takes a model
(`AimModel`): Private-PGM's `GraphicalModel` or GEM's `GeneratorModel`.
"""

from jaxdp.mechanisms.adaptive import Adaptive, AdaptiveInfo, AdaptiveState, adaptive
from jaxdp.mechanisms.aim import AIM, AimModel, GraphicalModel, aim
from jaxdp.mechanisms.aim_gem import GeneratorModel, aim_gem
from jaxdp.mechanisms.dualquery import dualquery
from jaxdp.mechanisms.fem import fem
from jaxdp.mechanisms.gaussian import gaussian
from jaxdp.mechanisms.gem import gem, gem_pub
from jaxdp.mechanisms.independent import independent
from jaxdp.mechanisms.mwem import mwem, pmw_pub
from jaxdp.mechanisms.pep import pep, pep_pub
from jaxdp.mechanisms.rap import rap, rap_softmax
from jaxdp.mechanisms.rap_plus import rap_plus_plus

__all__ = [
    "AIM",
    "Adaptive",
    "AdaptiveInfo",
    "AdaptiveState",
    "AimModel",
    "GeneratorModel",
    "GraphicalModel",
    "adaptive",
    "aim",
    "aim_gem",
    "dualquery",
    "fem",
    "gaussian",
    "gem",
    "gem_pub",
    "independent",
    "mwem",
    "pep",
    "pep_pub",
    "pmw_pub",
    "rap",
    "rap_plus_plus",
    "rap_softmax",
]
