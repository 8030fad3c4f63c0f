"""Mechanisms: each a frozen pytree with init/step/release, built by a validating factory."""

from jaxdp.mechanisms.gaussian import Gaussian, GaussianState, gaussian
from jaxdp.mechanisms.independent import Independent, IndependentState, independent

__all__ = [
    "Gaussian",
    "GaussianState",
    "Independent",
    "IndependentState",
    "gaussian",
    "independent",
]
