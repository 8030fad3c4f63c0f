"""Mechanisms: each a frozen pytree with init/step/release, built by a validating factory."""

from jaxdp.mechanisms._histogram import AdaptiveHistogram
from jaxdp.mechanisms.gaussian import Gaussian, GaussianState, gaussian
from jaxdp.mechanisms.independent import Independent, IndependentState, independent
from jaxdp.mechanisms.mwem import mwem, pmw_pub
from jaxdp.mechanisms.pep import pep, pep_pub

__all__ = [
    "AdaptiveHistogram",
    "Gaussian",
    "GaussianState",
    "Independent",
    "IndependentState",
    "gaussian",
    "independent",
    "mwem",
    "pep",
    "pep_pub",
    "pmw_pub",
]
