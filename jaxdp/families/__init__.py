"""Synthetic-data representations and their update solvers (post-processing only: no module
here imports `jaxdp.noise` or `jaxdp.accounting`).

The families `jaxdp.adaptive` composes (a family of your own subclasses `Family`):

- `PEP`, `MW`: an explicit distribution over the domain or a public dataset's records
  (PEP's entropy projection; MWEM's multiplicative weights);
- `RAP`, `GEM`: relaxed rows (clipped or softmax) and a generator network, fitted by Adam;
- `MixedRows`: RAP++'s relaxed rows with real numeric columns, fitted by an annealed projection
  to several query classes at once;
- `BestResponses`, `PerturbedLeader`: multisets of an oracle's best responses (DualQuery, FEM);
- `Product`, `NoisyAnswers`: the baselines' product of noisy 1-way marginals and raw noisy
  answers (Independent, Gaussian);
- `GraphicalModel`: Private-PGM's estimator (AIM), fitted on the host;
- `GeneratorModel`: GEM's generator fitted to counts by inverse-variance least squares (AIM-GEM).

`Compression` is no family but a setting of the builder's (`jaxdp.adaptive(..., compress=...)`,
with AIM's rule): the domain compressed after the noisy 1-way round, which every family then fits.
`Refit` is a setting of `GraphicalModel`'s: its last fit redone where it follows the noise.
"""

from jaxdp.families.base import ClassShape, Family, Measured
from jaxdp.families.baselines import NoisyAnswers, Product
from jaxdp.families.compression import CompressedDomain, Compression
from jaxdp.families.fitted import GEM, RAP
from jaxdp.families.games import BestResponses, PerturbedLeader
from jaxdp.families.generator_model import GeneratorModel
from jaxdp.families.graphical import GraphicalModel, Refit
from jaxdp.families.histogram_update import MW, PEP
from jaxdp.families.mixed import MixedRows

__all__ = [
    "GEM",
    "MW",
    "PEP",
    "RAP",
    "BestResponses",
    "ClassShape",
    "CompressedDomain",
    "Compression",
    "Family",
    "GeneratorModel",
    "GraphicalModel",
    "Measured",
    "MixedRows",
    "NoisyAnswers",
    "PerturbedLeader",
    "Product",
    "Refit",
]
