"""RAP (Aydore et al. 2021) and RAP-softmax (Liu, Vietri & Wu 2021), as presets of
`jaxdp.adaptive`.

    for t = 1..T:  select K marginals with large max cell error (report-noisy-top-K)
                   measure their counts (Gaussian), / n
                   project: Adam on sum of squared errors over every measured query,
                   rows clipped to [0, 1] after each step (RAP) or per-attribute softmax rows
    output: records drawn by randomized rounding of the n' relaxed rows
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.fitted import RAP
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import MaxError


def rap(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int = 10,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    marginals_per_round: int = 5,
    n_rows: int = 1000,
    learning_rate: float = 1e-2,
    max_steps: int = 200,
    alpha: float = 0.5,
    softmax: bool = False,
    conversion: str = "exact",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> Adaptive:
    """Build RAP (or RAP-softmax with `softmax=True`; see `rap_softmax` for its defaults).

    Args:
        data: the private records (categorical domain).
        workload: the marginals to answer.
        rounds: T.
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        marginals_per_round: K, marginals selected (top-K without replacement) and measured per round.
        n_rows: n', the relaxed rows.
        learning_rate: Adam's step. The paper uses 1e-3 for RAP, without stating the steps per
            round; with `max_steps` = 200 that step cannot carry the uniform initial rows (0.5 on
            average) down to the small cells, so unmeasured marginals stay near their initial
            product: on ADULT (all 3-way, eps 1, seed 0) relaxed max error 0.227 at 1e-3 against
            0.028 at the default 1e-2. RAP-softmax uses 0.1 as in the paper.
        max_steps: Adam steps of the projection per round.
        alpha: share of each round's budget weight for selection.
        softmax: parametrise the rows by per-attribute softmax (RAP-softmax).
        mesh: split the records over this mesh's devices to count them (`jaxdp.queries.records_mesh()`);
            the same answers as on one device (see `jaxdp.independent`).
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).

    Privacy:
        See `jaxdp.mechanisms.adaptive.Adaptive`: rho-zCDP in total, replace-one (n public).
    """
    return adaptive(
        data,
        workload,
        select=MaxError(k=marginals_per_round),
        family=RAP(n_rows=n_rows, learning_rate=learning_rate, max_steps=max_steps, softmax=softmax),
        rounds=rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        alpha=alpha,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        name="rap-softmax" if softmax else "rap",
    )


def rap_softmax(
    data: Dataset, workload: MarginalWorkload, *, learning_rate: float = 0.1, **kwargs
) -> Adaptive:
    """RAP-softmax: RAP with softmax-parametrised rows (learning rate 0.1 as in the paper)."""
    return rap(data, workload, softmax=True, learning_rate=learning_rate, **kwargs)


register("rap", MechanismSpec(rap, rounds=10, cap_rounds=True, per_round=5, mesh=True))
register("rap-softmax", MechanismSpec(rap_softmax, rounds=10, cap_rounds=True, per_round=5, mesh=True))
