"""GEM (Liu, Vietri & Wu 2021): Generative networks with the Exponential Mechanism, and GEM-Pub.

A generator G_theta maps a fixed latent batch z (B rows) to B product distributions; each round
one marginal is selected and measured (the marginal trick, the default for marginal workloads:
all cells of a marginal together have L2 sensitivity sqrt(2) in counts (sqrt(2)/n in fractions),
since a record moves at most two of them, so one measurement answers up to thousands of queries
for sqrt(2) times the noise of a single cell; the paper's Appendix D.4 ablation shows it is far
more accurate),
then GEM-UPDATE runs Adam on the L1 loss over the measured queries whose error is at least
gamma = `gamma_fraction` x EMA(beta=0.5) of the measured max errors, for at most `max_steps`
steps. The output generator's weights are an EMA of the second half of the rounds.

GEM-Pub first trains the generator, without privacy, on a public dataset's answers (possibly over
a subset of the attributes), then runs GEM from it.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.generator import Generator
from jaxdp.mechanisms._relaxed import RelaxedAdaptive, build
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Neighboring


def gem(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int = 50,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    alpha: float = 0.5,
    batch: int = 1000,
    hidden: Sequence[int] = (256, 256),
    latent_dim: int = 128,
    learning_rate: float = 3e-4,
    max_steps: int = 100,
    loss: str = "l1",
    gamma_fraction: float = 0.5,
    top_errors: int = 100,
    rerank_every: int = 4,
    final_learning_rate: float = 1e-5,
    ema_beta: float | None = 0.9,
    marginals_per_round: int = 1,
    public: Dataset | None = None,
    pretrain_steps: int = 0,
    relation: Neighboring | str = Neighboring.REPLACE_ONE,
    conversion: str = "exact",
    shard_batch: bool = False,
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> RelaxedAdaptive:
    """Build GEM (defaults: the official example's settings on ADULT, except two measured choices).

    The official example uses learning_rate=1e-4 and re-ranks the top errors every step. On
    bundled ADULT (286 3-way marginals, epsilon 1, T = 50, one seed, 2-core CPU) that gives max
    error 0.0215 on 100,000 sampled rows in 53 s with `rerank_every=4`; the defaults here
    (learning_rate=3e-4, rerank_every=4) give 0.0147 in 46 s (`bench/bench_gem.py --official`).

    Args:
        data: the private records (categorical domain).
        workload: the marginals to answer.
        rounds: T.
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        alpha: share of each round's budget weight for selection.
        batch: B, the fixed latent batch (rows of the synthetic mixture).
        hidden: hidden layer widths of the generator MLP.
        latent_dim: dimension of z.
        learning_rate: Adam's step.
        max_steps: T_max, GEM-UPDATE steps per round.
        loss: "l1" (the paper) or "l2".
        gamma_fraction: gamma as a fraction of the EMA of measured max errors (0 disables early
            stopping).
        top_errors: the L1 loss of each step covers the this many largest measured errors >=
            gamma (the official implementation's rule; it also makes each step cheap).
        rerank_every: steps between re-rankings of the top errors (1: every step, as the
            paper; larger values skip the full forward pass on the steps between, trading a
            slightly stale selection for speed).
        final_learning_rate: the starting rate of each round's Adam anneals by a cosine over the
            rounds from `learning_rate` to this; within a round it anneals to 0 over `max_steps`.
        ema_beta: EMA factor of the output weights over the second half of the rounds; None
            outputs the last generator.
        marginals_per_round: marginals measured per round (1: the marginal trick).
        public: a public dataset over the private attributes (or a subset, in the same order):
            GEM-Pub's pretraining data.
        pretrain_steps: Adam steps on the public answers before the private rounds.
        relation: must be "replace-one".
        shard_batch: split the latent batch over every device (`batch` a multiple of the device
            count); the same computation up to float summation order. Off: the single-device
            program, unchanged.
        mesh: split the records over this mesh's devices to count them (`jaxdp.queries.records_mesh()`);
            the same answers as on one device (see `jaxdp.independent`).
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).

    Privacy:
        See `RelaxedAdaptive`: rho-zCDP in total, replace-one. Pretraining reads only `public`.
    """
    family = Generator.of(
        workload, hidden=hidden, latent_dim=latent_dim, batch=batch, shard_batch=shard_batch
    )
    if public is not None and pretrain_steps < 1:
        raise ValueError("GEM-Pub needs pretrain_steps >= 1 to use the public data")
    return build(
        "gem-pub" if public is not None else "gem",
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
        loss=loss,
        gamma_fraction=gamma_fraction,
        top_errors=top_errors if loss == "l1" else None,
        rerank_every=rerank_every,
        final_learning_rate=final_learning_rate,
        ema_beta=ema_beta,
        relation=relation,
        conversion=conversion,
        mesh=mesh,
        noise=noise,
        public=public,
        pretrain_steps=pretrain_steps,
    )


def gem_pub(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    public: Dataset,
    pretrain_steps: int = 1000,
    mesh: Mesh | None = None,
    **kwargs,
) -> RelaxedAdaptive:
    """GEM-Pub: pretrain on `public` (no privacy cost), then run GEM from the pretrained generator."""
    return gem(data, workload, public=public, pretrain_steps=pretrain_steps, mesh=mesh, **kwargs)
