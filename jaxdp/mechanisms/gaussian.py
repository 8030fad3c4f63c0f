"""Gaussian: answer the whole workload once with calibrated Gaussian noise, as a preset of
`jaxdp.adaptive`.

    one round:  select every marginal of the workload (no privacy cost)
                measure their counts together (Gaussian)
    output:     the noisy answers themselves (counts under add-remove, fractions under
                replace-one)

It releases noisy answers, not records: the baseline for query release, and the yardstick of how
much a synthetic-data mechanism loses (or gains, by consistency) against plain noise.
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.baselines import NoisyAnswers
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.registry import BOTH_RELATIONS, MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import Everything
from jaxdp.types import Neighboring


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
) -> Adaptive:
    """Build the Gaussian mechanism for `workload` on a categorical dataset.

    Args:
        data: the private records.
        workload: the marginals to answer (over `data.domain.sizes`).
        epsilon, delta, rho, relation, conversion, mesh, noise: as for `jaxdp.independent`.

    Privacy:
        One Gaussian measurement of the counts of all m marginals of the workload, L2
        sensitivity sqrt(m) (add/remove) or sqrt(2 m) (replace-one); stream MEASURE of round 0.
        Under replace-one the noisy counts are divided by the public n (post-processing).
    """
    return adaptive(
        data,
        workload,
        select=Everything(),
        family=NoisyAnswers(),
        rounds=1,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        relation=relation,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        name="gaussian",
        label="the workload",
    )


register(
    "gaussian", MechanismSpec(gaussian, one_round=True, relations=BOTH_RELATIONS, mesh=True, relaxed=False)
)
