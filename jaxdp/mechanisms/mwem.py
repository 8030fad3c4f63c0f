"""MWEM (Hardt, Ligett & McSherry 2012) and its public-data variant PMW-Pub (Liu et al. 2021).

A distribution over the whole domain (MWEM) or over a public dataset's records (PMW-Pub) is
updated by multiplicative weights, weights *= exp((measured - current) / 2) on the measured cells
(the original step in normalised units), optionally replaying all past measurements every round.
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.mechanisms._histogram import AdaptiveHistogram, build
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Neighboring


def mwem(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    alpha: float = 0.5,
    marginal_trick: bool = True,
    replay_passes: int = 1,
    output: str = "last",
    public: Dataset | None = None,
    relation: Neighboring | str = Neighboring.REPLACE_ONE,
    conversion: str = "exact",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> AdaptiveHistogram:
    """Build MWEM (or PMW-Pub when `public` is given).

    Args:
        data: the private records (categorical domain, enumerable when `public` is None).
        workload: the marginals to answer.
        rounds: T, one selection and one measurement each.
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        alpha: share of each round's budget weight for selection (paper's alpha).
        marginal_trick: measure whole marginals (default) or single counting queries.
        replay_passes: sweeps of the update over all past measurements after each new one
            ("MWEM with past queries"; 0 for the original update of the newest only).
        output: "last" (default) or "average" of the per-round distributions (the one MWEM's
            guarantee is proved for). On ADULT-reduced (35 3-way marginals, eps 1, T 25, seeds
            0-1) the last iterate had max error 0.035 against 0.114 for the average: the early,
            nearly uniform iterates weigh the average down.
        public: a public dataset over the same domain: PMW-Pub's support and starting point.
        relation: must be "replace-one".
        mesh: split the records over this mesh's devices to count them (`jaxdp.queries.records_mesh()`);
            the same answers as on one device (see `jaxdp.independent`).
        noise: "discrete" (default): exact discrete Gaussian measurements and exact exponential
            mechanism; "float": float32 Gaussian noise and Gumbel-max selection, faster but not
            meeting its delta exactly (`jaxdp.noise`).

    Privacy:
        See `AdaptiveHistogram`: rho-zCDP in total, replace-one.
    """
    return build(
        "mwem",
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
        replay_passes=replay_passes,
        output=output,
    )


def pmw_pub(
    data: Dataset, workload: MarginalWorkload, *, public: Dataset, mesh: Mesh | None = None, **kwargs
) -> AdaptiveHistogram:
    """PMW-Pub: MWEM over the support of a public dataset, starting at its distribution."""
    return mwem(data, workload, public=public, mesh=mesh, **kwargs)
