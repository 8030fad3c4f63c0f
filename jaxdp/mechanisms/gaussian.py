"""Gaussian: answer the whole workload once with calibrated Gaussian noise.

It releases noisy answers, not records: the baseline for query release, and the yardstick of how
much a synthetic-data mechanism loses (or gains, by consistency) against plain noise.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax.sharding import Mesh

from jaxdp import noise
from jaxdp.accounting import Plan, PlannedCharge, gaussian_sigma
from jaxdp.domain import Dataset
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import (
    RoundInfo,
    answers_view,
    as_relation,
    count_marginals,
    make_plan,
    marginal_l2_sensitivity,
    private_codes,
    require_categorical,
)
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array, Key, Neighboring, Sensitive, pytree_dataclass, static_field


class GaussianState(NamedTuple):
    """noisy_answers: (workload.n_queries,) counts or fractions; rounds_done; rho_spent."""

    noisy_answers: Array
    rounds_done: Array
    rho_spent: Array


@pytree_dataclass
class Gaussian:
    """The Gaussian mechanism on a marginal workload (one round; releases answers, not data).

    Privacy:
        One Gaussian measurement of all m marginals of the workload, L2 sensitivity sqrt(m) on
        counts (add/remove) or sqrt(2 m)/n on fractions (replace-one); stream MEASURE of round 0.
    """

    data: Sensitive
    workload: MarginalWorkload = static_field()
    relation: Neighboring = static_field()
    n_records: int = static_field()
    sigma: float = static_field()
    sensitivity: float = static_field()
    plan: Plan = static_field()
    rounds: int = static_field(default=1)
    mesh: Mesh | None = static_field(default=None)

    def init(self, key: Key) -> GaussianState:
        require_key(key)
        return GaussianState(
            noisy_answers=jnp.zeros(self.workload.n_queries, jnp.float32),
            rounds_done=jnp.zeros((), jnp.int32),
            rho_spent=jnp.zeros((), jnp.float32),
        )

    def step(self, state: GaussianState, key: Key) -> tuple[GaussianState, RoundInfo]:
        require_key(key)
        answers = self.data.map(
            lambda codes: answers_view(
                count_marginals(codes, self.workload, self.n_records, self.mesh),
                self.relation,
                self.n_records,
            )
        )
        noisy, charge = noise.gaussian(
            stream_key(key, Stream.MEASURE), answers, sigma=self.sigma, sensitivity=self.sensitivity
        )
        new = GaussianState(noisy, state.rounds_done + 1, state.rho_spent + self.plan.rho_planned)
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
) -> Gaussian:
    """Build the Gaussian mechanism for `workload` on a categorical dataset.

    Args:
        data: the private records.
        workload: the marginals to answer (over `data.domain.sizes`).
        epsilon, delta, rho, relation, conversion, mesh: as for `jaxdp.independent`.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    relation = as_relation(relation)
    require_categorical(data, "gaussian")
    if workload.sizes != data.domain.sizes:
        raise ValueError("workload was built for a different domain than the data's")
    codes = private_codes(data, mesh)
    sensitivity = marginal_l2_sensitivity(len(workload), relation, len(data))
    sigma = gaussian_sigma(sensitivity, plan.rho_budget)
    plan = plan.with_charge(PlannedCharge("measure the workload", "gaussian", sensitivity, sigma)).check()
    return Gaussian(codes, workload, relation, len(data), sigma, sensitivity, plan, mesh=mesh)
