"""RAP (Aydore et al. 2021) and RAP-softmax (Liu, Vietri & Wu 2021).

Relaxed Adaptive Projection: n' relaxed rows fitted by Adam to every measurement so far with an
L2 loss. RAP keeps the rows in [0, 1] by clipping (its projection); RAP-softmax parametrises each
attribute block by a softmax, so the rows are product distributions (the Adaptive Measurements
paper's variant). Records are drawn by randomized rounding of the rows.
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.relaxed import RelaxedRows
from jaxdp.mechanisms._relaxed import RelaxedAdaptive, build
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Neighboring


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
    relation: Neighboring | str = Neighboring.REPLACE_ONE,
    conversion: str = "exact",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> RelaxedAdaptive:
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
        relation: must be "replace-one".
        mesh: split the records over this mesh's devices to count them (`jaxdp.queries.records_mesh()`);
            the same answers as on one device (see `jaxdp.independent`).
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).

    Privacy:
        See `RelaxedAdaptive`: rho-zCDP in total, replace-one.
    """
    family = RelaxedRows.of(workload, n_rows, "softmax" if softmax else "clip")
    return build(
        "rap-softmax" if softmax else "rap",
        data,
        workload,
        family,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        rounds=rounds,
        alpha=alpha,
        marginals_per_round=marginals_per_round,
        learning_rate=learning_rate,
        max_steps=max_steps,
        loss="l2",
        gamma_fraction=0.0,
        ema_beta=None,
        relation=relation,
        conversion=conversion,
        mesh=mesh,
        noise=noise,
    )


def rap_softmax(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    learning_rate: float = 0.1,
    mesh: Mesh | None = None,
    **kwargs,
) -> RelaxedAdaptive:
    """RAP-softmax: RAP with softmax-parametrised rows (learning rate 0.1 as in the paper)."""
    return rap(data, workload, softmax=True, learning_rate=learning_rate, mesh=mesh, **kwargs)
