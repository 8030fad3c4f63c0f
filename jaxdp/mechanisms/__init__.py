"""Mechanisms: each a frozen pytree with init/step/release, built by a validating factory."""

from jaxdp.mechanisms._histogram import AdaptiveHistogram
from jaxdp.mechanisms._relaxed import RelaxedAdaptive
from jaxdp.mechanisms.aim import AIM, AimModel, GraphicalModel, aim
from jaxdp.mechanisms.aim_gem import GeneratorModel, aim_gem
from jaxdp.mechanisms.dualquery import dualquery
from jaxdp.mechanisms.fem import fem
from jaxdp.mechanisms.gaussian import Gaussian, GaussianState, gaussian
from jaxdp.mechanisms.gem import gem, gem_pub
from jaxdp.mechanisms.independent import Independent, IndependentState, independent
from jaxdp.mechanisms.mwem import mwem, pmw_pub
from jaxdp.mechanisms.pep import pep, pep_pub
from jaxdp.mechanisms.rap import rap, rap_softmax
from jaxdp.mechanisms.rap_plus import RapPlusPlus, rap_plus_plus

__all__ = [
    "AIM",
    "AdaptiveHistogram",
    "AimModel",
    "Gaussian",
    "GaussianState",
    "GeneratorModel",
    "GraphicalModel",
    "Independent",
    "IndependentState",
    "RapPlusPlus",
    "RelaxedAdaptive",
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
