"""PEP (Liu, Vietri & Wu 2021): Private Entropy Projection, and PEP-Pub, as presets of
`jaxdp.adaptive`.

    for t = 1..T:  select a marginal with large max cell error (exponential mechanism)
                   measure its counts (Gaussian), / n
                   project: the maximum-entropy distribution within gamma of every measurement,
                   by iterative projection onto the worst-fitted measured cell (Algorithm 4),
                   T_max steps at most
    output: the last distribution

over the whole domain (PEP) or over a public dataset's records (PEP-Pub).
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.histogram_update import PEP
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import MaxError, QueryError


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
    conversion: str = "exact",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> Adaptive:
    """Build PEP (or PEP-Pub when `public` is given). data, workload, rounds, epsilon, delta, rho,
    alpha, marginal_trick, public, conversion, mesh and noise are as for `jaxdp.mwem`.

    Args:
        max_steps: T_max, projection steps per round (paper: 25).
        tolerance: gamma, stop projecting once every measured error is at most this (paper: 0).

    Privacy:
        See `jaxdp.mechanisms.adaptive.Adaptive`: rho-zCDP in total, replace-one (n public).
    """
    return adaptive(
        data,
        workload,
        select=MaxError() if marginal_trick else QueryError(),
        family=PEP(max_steps=max_steps, tolerance=tolerance),
        rounds=rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        alpha=alpha,
        public=public,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        name="pep" if public is None else "pep-pub",
    )


def pep_pub(data: Dataset, workload: MarginalWorkload, *, public: Dataset, **kwargs) -> Adaptive:
    """PEP-Pub: PEP over the support of a public dataset, starting at its distribution."""
    return pep(data, workload, public=public, **kwargs)


register("pep", MechanismSpec(pep, rounds=25, cap_rounds=True, mesh=True))
register("pep-pub", MechanismSpec(pep_pub, rounds=25, cap_rounds=True, public=True, mesh=True))
