"""Gaussian: answer the whole workload once with calibrated Gaussian noise.

It releases noisy answers, not records: the baseline for query release, and the yardstick of how
much a synthetic-data mechanism loses (or gains, by consistency) against plain noise.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax.sharding import Mesh

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.accounting import MEASURE_PRIMITIVE, Plan, PlannedCharge
from jaxdp.domain import Dataset
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import (
    RoundInfo,
    as_relation,
    count_sigma,
    count_unit,
    make_plan,
    marginal_count_sensitivity,
    private_counts,
    require_categorical,
)
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array, Key, Neighboring, Sensitive, pytree_dataclass, static_field


class GaussianState(NamedTuple):
    """noisy_answers: (workload.n_queries,) counts or fractions; rounds_done."""

    noisy_answers: Array
    rounds_done: Array


@pytree_dataclass
class Gaussian:
    """The Gaussian mechanism on a marginal workload (one round; releases answers, not data).

    `counts` holds the workload's true int32 counts; `sigma` and `sensitivity` are in counts.
    `noise`: "discrete" (default, exact discrete Gaussian) or "float" (float32 Gaussian, see
    `jaxdp.noise`).

    Privacy:
        One Gaussian measurement of the counts of all m marginals of the workload, L2
        sensitivity sqrt(m) (add/remove) or sqrt(2 m) (replace-one); stream MEASURE of round 0.
        Under replace-one the noisy counts are divided by the public n (post-processing).
    """

    counts: Sensitive
    workload: MarginalWorkload = static_field()
    relation: Neighboring = static_field()
    n_records: int = static_field()
    sigma: float = static_field()
    sensitivity: float = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    rounds: int = static_field(default=1)

    def init(self, key: Key) -> GaussianState:
        require_key(key)
        return GaussianState(
            noisy_answers=jnp.zeros(self.workload.n_queries, jnp.float32),
            rounds_done=jnp.zeros((), jnp.int32),
        )

    def step(self, state: GaussianState, key: Key) -> tuple[GaussianState, RoundInfo]:
        require_key(key)
        noisy_counts, charge = noise_module.measure_counts(
            stream_key(key, Stream.MEASURE),
            self.counts,
            sigma=self.sigma,
            sensitivity=self.sensitivity,
            noise=self.noise,
        )
        noisy = noisy_counts * count_unit(self.relation, self.n_records)
        new = GaussianState(noisy, state.rounds_done + 1)
        return new, RoundInfo(charges=(charge,))

    def release(self, state: GaussianState, key: Key) -> Array:
        """The noisy answers, (workload.n_queries,): counts under add/remove, fractions under
        replace-one.

        The key is accepted for the common shape and unused: releasing is deterministic.
        """
        require_key(key)
        return state.noisy_answers


def gaussian(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    relation: Neighboring | str = Neighboring.REPLACE_ONE,
    conversion: str = "exact",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> Gaussian:
    """Build the Gaussian mechanism for `workload` on a categorical dataset.

    Args:
        data: the private records.
        workload: the marginals to answer (over `data.domain.sizes`).
        epsilon, delta, rho, relation, conversion, mesh, noise: as for `jaxdp.independent`.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    relation = as_relation(relation)
    _checks.one_of(noise, noise_module.NOISES, "noise")
    require_categorical(data, "gaussian")
    if workload.sizes != data.domain.sizes:
        raise ValueError("workload was built for a different domain than the data's")
    counts = private_counts(data, workload, mesh)
    sensitivity = marginal_count_sensitivity(len(workload), relation)
    sigma = count_sigma(sensitivity, plan.rho_budget, noise)
    measure = PlannedCharge("measure the workload", MEASURE_PRIMITIVE[noise], sensitivity, sigma)
    plan = plan.with_charge(measure).check()
    return Gaussian(counts, workload, relation, len(data), sigma, sensitivity, plan, noise)
