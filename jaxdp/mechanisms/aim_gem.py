"""AIM-GEM: AIM's selection, budget annealing and filter with GEM's generator as the model, as a
preset of `jaxdp.adaptive`.

A mix-and-match of two papers: candidates, quality score, exponential-mechanism selection,
Gaussian measurement, budget annealing (Algorithm 4) and the filter that spends exactly the budget
are AIM's (McKenna et al., VLDB 2022, `jaxdp.selection.AIMSelection`); the family is GEM's
generator G_theta(z) over a fixed latent batch (Liu, Vietri & Wu 2021), trained after every round
on all measurements so far (`jaxdp.families.GeneratorModel`), instead of a Private-PGM graphical
model. The generator has a fixed size, so every candidate of W+ is eligible in every round.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.compression import Compression
from jaxdp.families.generator_model import GeneratorModel
from jaxdp.mechanisms.adaptive import adaptive
from jaxdp.mechanisms.aim import AIM_RELATIONS, DEFAULT_COMPRESSION
from jaxdp.mechanisms.host_loop import Annealed
from jaxdp.mechanisms.registry import MechanismSpec, register, rounds_cap
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import AIMSelection
from jaxdp.selection.aim import ONE_WAY_RESOLUTION, PAPER_ALPHA
from jaxdp.types import Neighboring


def aim_gem(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    relation: Neighboring | str = Neighboring.ADD_REMOVE,
    conversion: str = "exact",
    max_rounds: int | None = None,
    alpha: float = PAPER_ALPHA,
    batch: int = 1000,
    hidden: Sequence[int] = (256, 256),
    latent_dim: int = 128,
    learning_rate: float = 1e-3,
    iters: int = 100,
    final_iters: int = 500,
    noise: str = "discrete",
    mesh: Mesh | None = None,
    compress: Compression | None = None,
    resolution: float | None = ONE_WAY_RESOLUTION,
) -> Annealed:
    """Build AIM-GEM: AIM's selection and filter, GEM's generator as the model.

    Args:
        data: the private records (categorical).
        workload: the marginals (and weights c_s) the synthetic data should preserve.
        epsilon, delta, rho, conversion: the budget (see `jaxdp.aim`).
        relation: "add-remove" (default, as AIM) or "replace-one".
        max_rounds: T (default 16 d), as in `jaxdp.aim`.
        alpha: share of each round's budget spent on measurement (the rest on selection).
        batch, hidden, latent_dim: the generator (see `jaxdp.gem`).
        learning_rate: Adam's step.
        iters: Adam steps per round (warm-started); final_iters in the filter's last round. On
            6-attribute ADULT (epsilon 1, all 3-way, seed 0) 100/500 gave mean L1 0.163 on the
            records, 200/1000 gave 0.192 (fitting the noisy measurements more closely
            overfits) and 50/300 at learning rate 3e-3 gave 0.185.
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).
        mesh: split the records over this mesh's devices to count them (see `jaxdp.aim`).
        compress: compress the domain after the noisy 1-way round (see `jaxdp.aim`).
        resolution: round 0's 1-way counts measured with noise at most n / resolution, the run
            calibrated for the fewer rounds that takes (see `jaxdp.aim`; with the default T
            only: a `max_rounds` given calibrates the run for it).

    Raises:
        ValueError: bad arguments; DataError: numeric columns, empty data, or a workload over
            another domain.

    Privacy:
        See `jaxdp.selection.AIMSelection`: rho-zCDP by the filter, for the stated relation,
        with Delta_t = L1 * max_{r in W+} w_r (every candidate is eligible).
    """
    family = GeneratorModel(
        batch=batch,
        hidden=tuple(hidden),
        latent_dim=latent_dim,
        learning_rate=learning_rate,
        iters=iters,
        final_iters=final_iters,
    )
    return adaptive(
        data,
        workload,
        select=AIMSelection(alpha=alpha, resolution=resolution if max_rounds is None else None),
        family=family,
        rounds=max_rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        relation=relation,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        compress=compress,
        name="aim-gem",
    )


register(
    "aim-gem",
    MechanismSpec(rounds_cap(aim_gem), relations=AIM_RELATIONS, mesh=True, compression=DEFAULT_COMPRESSION),
)
