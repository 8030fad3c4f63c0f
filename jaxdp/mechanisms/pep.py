"""PEP (Liu, Vietri & Wu 2021): Private Entropy Projection, and PEP-Pub.

Each round's update is the maximum-entropy distribution consistent with every measurement so
far, found by iterative exponential-weights projection (the paper's Algorithm 4) for at most
`max_steps` steps (T_max) or until every measured error is at most `tolerance` (gamma). With the
marginal trick a measured marginal is one block of constraints and is projected onto at once.
The output is the last iterate, a proper distribution.
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.mechanisms._histogram import AdaptiveHistogram, build
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Neighboring


def pep(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    alpha: float = 0.5,
    max_steps: int = 25,
    tolerance: float = 0.0,
    marginal_trick: bool = True,
    public: Dataset | None = None,
    relation: Neighboring | str = Neighboring.REPLACE_ONE,
    conversion: str = "exact",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> AdaptiveHistogram:
    """Build PEP (or PEP-Pub when `public` is given).

    Args:
        data, workload, rounds, epsilon, delta, rho, alpha, marginal_trick, public, relation,
            conversion: as for `jaxdp.mwem`.
        max_steps: T_max, projection steps per round (paper: 25).
        tolerance: gamma, stop projecting once every measured error is at most this (paper: 0).
        mesh: split the records over this mesh's devices to count them (`jaxdp.queries.records_mesh()`);
            the same answers as on one device (see `jaxdp.independent`).
        noise: "discrete" (default): exact discrete Gaussian measurements and exact exponential
            mechanism; "float": float32 Gaussian noise and Gumbel-max selection, faster but not
            meeting its delta exactly (`jaxdp.noise`).

    Privacy:
        See `AdaptiveHistogram`: rho-zCDP in total, replace-one.
    """
    return build(
        "pep",
        data,
        workload,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        rounds=rounds,
        alpha=alpha,
        marginal_trick=marginal_trick,
        public=public,
        relation=relation,
        conversion=conversion,
        mesh=mesh,
        noise=noise,
        max_steps=max_steps,
        tolerance=tolerance,
    )


def pep_pub(
    data: Dataset, workload: MarginalWorkload, *, public: Dataset, mesh: Mesh | None = None, **kwargs
) -> AdaptiveHistogram:
    """PEP-Pub: PEP over the support of a public dataset, starting at its distribution."""
    return pep(data, workload, public=public, mesh=mesh, **kwargs)
