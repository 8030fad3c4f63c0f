"""MWEM (Hardt, Ligett & McSherry 2012) and its public-data variant PMW-Pub (Liu et al. 2021), as
presets of `jaxdp.adaptive`.

    for t = 1..T:  select a marginal with large max cell error (exponential mechanism)
                   measure its counts (Gaussian), / n
                   weights *= exp((measured - current) / 2) on its cells; replay all past ones
    output: the last distribution, or the average of the rounds' distributions

over the whole domain (MWEM) or over a public dataset's records (PMW-Pub).
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.histogram_update import MW
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import MaxError, QueryError


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
    conversion: str = "exact",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> Adaptive:
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
        mesh: split the records over this mesh's devices to count them (`jaxdp.queries.records_mesh()`);
            the same answers as on one device (see `jaxdp.independent`).
        noise: "discrete" (default): exact discrete Gaussian measurements and exact exponential
            mechanism; "float": float32 Gaussian noise and Gumbel-max selection, faster but not
            meeting its delta exactly (`jaxdp.noise`).

    Privacy:
        See `jaxdp.mechanisms.adaptive.Adaptive`: rho-zCDP in total, replace-one (n public).
    """
    return adaptive(
        data,
        workload,
        select=MaxError() if marginal_trick else QueryError(),
        family=MW(step_size=0.5, replay_passes=replay_passes, output=output),
        rounds=rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        alpha=alpha,
        public=public,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        name="mwem" if public is None else "pmw-pub",
    )


def pmw_pub(data: Dataset, workload: MarginalWorkload, *, public: Dataset, **kwargs) -> Adaptive:
    """PMW-Pub: MWEM over the support of a public dataset, starting at its distribution."""
    return mwem(data, workload, public=public, **kwargs)


register("mwem", MechanismSpec(mwem, rounds=25, cap_rounds=True, mesh=True))
register("pmw-pub", MechanismSpec(pmw_pub, rounds=25, cap_rounds=True, public=True, mesh=True))
