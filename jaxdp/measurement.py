"""The measurement: the private "measure" step of Adaptive Measurements, as a public part.

`GaussianCounts` adds Gaussian noise (exact discrete Gaussian by default) to the true int32
counts of the candidates a selection rule picked, whole marginals or single counting queries,
and divides the noisy counts by the public n afterwards (post-processing under replace-one). It
hands the family a `Measured`: where the answers sit in the workload and their noisy values.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from jaxdp import noise as noise_module
from jaxdp.accounting import MEASURE_PRIMITIVE, PlannedCharge
from jaxdp.families.histogram import MarginalPadding
from jaxdp.families.measured import Measured
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import MARGINALS
from jaxdp.types import Array, Charge, Key, Sensitive, pytree_dataclass, static_field


@pytree_dataclass
class GaussianCounts:
    """Gaussian noise on the counts of the chosen candidates; built by `calibrate`.

    Privacy:
        One Gaussian measurement (`noise.measure_counts`, stream MEASURE) of the k chosen
        candidates' counts together. L2 sensitivity in counts under replace-one: sqrt(2 k) for k
        marginals (a replaced record leaves one cell and enters another of each), sqrt(k) for k
        counting queries (each moves by at most 1). rho = sensitivity^2 / (2 sigma^2).
    """

    padding: MarginalPadding
    workload: MarginalWorkload = static_field()
    candidates: str = static_field()
    k: int = static_field()
    n_records: int = static_field()
    sigma: float = static_field()
    sensitivity: float = static_field()
    noise: str = static_field()

    @classmethod
    def calibrate(
        cls,
        workload: MarginalWorkload,
        candidates: str,
        k: int,
        n_records: int,
        sigma_for,
        noise: str,
        times: int,
    ) -> tuple[GaussianCounts, PlannedCharge]:
        """(the measurement, its planned charge); `sigma_for(sensitivity)` gives the noise scale
        in counts that spends the round's measurement budget."""
        sensitivity = math.sqrt(2.0 * k) if candidates == MARGINALS else math.sqrt(float(k))
        sigma = sigma_for(sensitivity)
        charge = PlannedCharge("measure", MEASURE_PRIMITIVE[noise], sensitivity, sigma, times=times)
        padding = MarginalPadding.of(workload)
        return cls(padding, workload, candidates, k, n_records, sigma, sensitivity, noise), charge

    def __call__(self, key: Key, counts: Sensitive, chosen: Array) -> tuple[Measured, Charge]:
        """Measure the (k,) chosen candidates (marginals or queries, as the selection picked).

        Privacy:
            Reads the true counts of the chosen candidates; see the class docstring.
        """
        if self.candidates == MARGINALS:
            index = self.padding.gather[chosen]
            marginal, cell = chosen, jnp.full(chosen.shape, -1, jnp.int32)
            true = counts.map(lambda c: jnp.concatenate([c, jnp.zeros(1, c.dtype)])[index])
        else:
            index = chosen[:, None]
            marginal = jnp.asarray(self.workload.marginal_of_query())[chosen]
            cell = chosen - jnp.asarray(self.workload.offsets, jnp.int32)[marginal]
            true = counts.map(lambda c: c[chosen][:, None])
        noisy, charge = noise_module.measure_counts(
            key, true, sigma=self.sigma, sensitivity=self.sensitivity, noise=self.noise
        )
        return Measured(marginal, cell, index, noisy * (1.0 / self.n_records)), charge
