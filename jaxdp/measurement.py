"""The measurement: the private "measure" step of Adaptive Measurements, as a public part.

`GaussianCounts` adds Gaussian noise (exact discrete Gaussian by default) to the true int32
counts of the candidates a selection rule picked, whole marginals or single counting queries,
and hands the family a `Measured`: where the answers sit in the class's queries, the noisy
counts and the noise scale. Dividing by the public n under replace-one is the family's
post-processing.

`measure_on_host` is the same measurement for a mechanism driven from Python (AIM's filter),
whose picks and noise scales are decided on the host round by round.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from jaxdp import noise as noise_module
from jaxdp.accounting import MEASURE_PRIMITIVE, PlannedCharge
from jaxdp.families._sampling import padded_length
from jaxdp.families.base import Measured
from jaxdp.families.histogram import MarginalPadding
from jaxdp.queries import MarginalWorkload
from jaxdp.types import (
    MARGINALS,
    QUERIES,
    Array,
    Charge,
    Key,
    Neighboring,
    Sensitive,
    pytree_dataclass,
    static_field,
)


def count_sensitivity(candidates: str, k: int, relation: Neighboring) -> float:
    """L2 sensitivity, in counts, of the counts of k picks measured together: one record touches
    one cell of each marginal, so sqrt(k) under add-remove and sqrt(2 k) under replace-one (a
    cell loses the record, another gains it); a single counting query moves by at most 1 under
    either relation, so sqrt(k)."""
    per_pick = 2.0 if candidates == MARGINALS and relation is Neighboring.REPLACE_ONE else 1.0
    return math.sqrt(per_pick * k)


@pytree_dataclass
class GaussianCounts:
    """Gaussian noise on the counts of the chosen candidates; built unbound (`GaussianCounts()`)
    and bound by `jaxdp.adaptive` (`calibrate`).

    When a round picks every marginal of the workload (the baselines), the noise is drawn on the
    flat counts and then arranged by marginal: the same i.i.d. noise per cell, and no padding.

    Privacy:
        One Gaussian measurement (`noise.measure_counts`, stream MEASURE) of the k chosen
        candidates' counts together, L2 sensitivity `count_sensitivity` (sqrt(2 k) for k
        marginals under replace-one). rho = sensitivity^2 / (2 sigma^2).
    """

    padding: MarginalPadding | None = None
    workload: MarginalWorkload | None = static_field(default=None)
    candidates: str = static_field(default=MARGINALS)
    k: int = static_field(default=0)
    n_candidates: int = static_field(default=0)
    scale: noise_module.GaussianScale | None = None  # data: one program serves every budget
    sensitivity: float = static_field(default=0.0)
    noise: str = static_field(default="discrete")

    @property
    def sigma(self) -> float:
        """The noise scale in counts (host)."""
        return float(self.scale.sigma)

    def calibrate(
        self,
        workload: MarginalWorkload | None,
        *,
        candidates: str,
        k: int,
        n_candidates: int,
        relation: Neighboring,
        sigma_for,
        noise: str,
        times: int,
        label: str = "measure",
    ) -> tuple[GaussianCounts, tuple[PlannedCharge, ...]]:
        """(the measurement bound to a class, its planned charge); `sigma_for(sensitivity)` gives
        the noise scale in counts that spends the round's measurement budget.

        Args:
            workload: the class's marginals (None for single threshold queries).
            candidates: what the selection picks (marginals or queries).
            k, n_candidates: picks per round, and how many candidates the class has.
        """
        if candidates not in (MARGINALS, QUERIES):
            raise ValueError(f"GaussianCounts measures marginals or queries, not {candidates}")
        sensitivity = count_sensitivity(candidates, k, relation)
        sigma = sigma_for(sensitivity)
        charge = PlannedCharge(label, MEASURE_PRIMITIVE[noise], sensitivity, sigma, times=times)
        padding = MarginalPadding.of(workload) if candidates == MARGINALS else None
        bound = dataclasses.replace(
            self,
            padding=padding,
            workload=workload,
            candidates=candidates,
            k=k,
            n_candidates=n_candidates,
            scale=noise_module.gaussian_scale(sigma, noise),
            sensitivity=sensitivity,
            noise=noise,
        )
        return bound, (charge,)

    def __call__(self, key: Key, counts: Sensitive, chosen: Array) -> tuple[Measured, tuple[Charge, ...]]:
        """Measure the (k,) chosen candidates (marginals or queries, as the selection picked).

        Privacy:
            Reads the true counts of the chosen candidates; see the class docstring.
        """
        settings = dict(sigma=self.scale, sensitivity=self.sensitivity, noise=self.noise)
        if self.candidates == MARGINALS:
            index = self.padding.gather[chosen]
            marginal, cell = chosen, jnp.full(chosen.shape, -1, jnp.int32)
            if self.k == self.n_candidates:  # every marginal: noise on the flat counts
                flat, charge = noise_module.measure_counts(key, counts, **settings)
                noisy = jnp.concatenate([flat, jnp.zeros(1, flat.dtype)])[index]
            else:
                true = counts.map(lambda c: jnp.concatenate([c, jnp.zeros(1, c.dtype)])[index])
                noisy, charge = noise_module.measure_counts(key, true, **settings)
        else:
            index = chosen[:, None]
            if self.workload is None:  # single threshold queries: no marginal structure
                marginal, cell = jnp.full(chosen.shape, -1, jnp.int32), chosen
            else:
                marginal = jnp.asarray(self.workload.marginal_of_query())[chosen]
                cell = chosen - jnp.asarray(self.workload.offsets, jnp.int32)[marginal]
            true = counts.map(lambda c: c[chosen][:, None])
            noisy, charge = noise_module.measure_counts(key, true, **settings)
        sigma = jnp.asarray(self.scale.sigma, jnp.float32)
        return Measured(chosen, marginal, cell, index, noisy, sigma), (charge,)


# Host measurements shorter than this share one padded length (the exact sampler's compile costs
# seconds; sampling 2^15 entries costs tens of milliseconds).
SHARED_MEASUREMENT_LENGTH = 2**15


def measurement_length(n: int, largest: int) -> int:
    """The public padded length of an n-entry host measurement when the largest measurement a
    run can make has `largest` entries: one length, the power of two holding it (at most
    `SHARED_MEASUREMENT_LENGTH`), serves every measurement that fits; longer ones take powers of
    four above it."""
    length = min(padded_length(largest), SHARED_MEASUREMENT_LENGTH)
    while length < n:
        length *= 4
    return length


def _padded_answers(answers: Array, index: np.ndarray, length: int) -> np.ndarray:
    """(length,) answers[index] on the host, padded with integer zeros (a public constant).
    On the host, as the measurement's noise is added there (`types.array_module`)."""
    padded = np.zeros(length, answers.dtype)
    padded[: index.size] = np.asarray(answers)[index]
    return padded


def measure_on_host(
    key: Key,
    counts: Sensitive,
    index: np.ndarray,
    *,
    sigma: float,
    sensitivity: float,
    noise: str,
    largest: int,
) -> tuple[np.ndarray, Charge]:
    """Gaussian measurement of the true counts at `index` (host, float64), with its Charge.

    The int32 counts are gathered into a vector padded with integer zeros to a public length
    (`measurement_length` of `largest`, the longest measurement the run can make), noise is added
    to all of it and the padding dropped: the exact sampler compiles once per length, and most
    runs use one length. This is sound because the padding is a public constant (zeros whatever
    the data), so the padded vector has the same L2 sensitivity as the answers and each kept
    coordinate still receives its own i.i.d. noise of scale sigma; the dropped coordinates are
    discarded unseen (and would be safe to release anyway). The Charge is unchanged.

    Privacy:
        Reads the true counts; one Gaussian measurement (`noise.measure_counts`).
    """
    length = measurement_length(index.size, largest)
    true = counts.map(_padded_answers, index, length)
    noisy, charge = noise_module.measure_counts(key, true, sigma=sigma, sensitivity=sensitivity, noise=noise)
    return np.asarray(noisy, np.float64)[: index.size], charge
