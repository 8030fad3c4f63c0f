"""GEM (Liu, Vietri & Wu 2021): Generative networks with the Exponential Mechanism, and GEM-Pub,
as presets of `jaxdp.adaptive`.

    for t = 1..T:  select a marginal with large max cell error (exponential mechanism)
                   measure its counts (Gaussian), / n
                   GEM-UPDATE: Adam on the L1 error of G_theta(z) over the measured queries whose
                   error is at least gamma, until none is (or T_max steps)
    output: records drawn from G_theta(z), theta an EMA of the second half of the rounds

A generator G_theta maps a fixed latent batch z (B rows) to B product distributions. One marginal
is measured a round (the marginal trick: all cells of a marginal together have L2 sensitivity
sqrt(2) in counts, since a record moves at most two of them, so one measurement answers up to
thousands of queries for sqrt(2) times the noise of a single cell; the paper's Appendix D.4
ablation shows it is far more accurate). gamma = `gamma_fraction` x EMA(beta=0.5) of the
measured max errors. GEM-Pub first trains the generator, without privacy, on a public dataset's
answers (possibly over a subset of the attributes), then runs GEM from it.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.fitted import GEM
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import MaxError


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
    gamma_fraction: float = 0.5,
    top_errors: int = 100,
    rerank_every: int = 4,
    final_learning_rate: float = 1e-5,
    ema_beta: float | None = 0.9,
    marginals_per_round: int = 1,
    public: Dataset | None = None,
    pretrain_steps: int = 0,
    conversion: str = "exact",
    shard_batch: bool = False,
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> Adaptive:
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
        shard_batch: split the latent batch over this process's devices (`batch` a multiple of
            their count); the same computation up to float summation order. Off: the single-device
            program, unchanged.
        mesh: split the records over this mesh's devices to count them (`jaxdp.queries.records_mesh()`);
            the same answers as on one device (see `jaxdp.independent`).
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).

    Privacy:
        See `jaxdp.mechanisms.adaptive.Adaptive`: rho-zCDP in total, replace-one (n public).
        Pretraining reads only `public`.
    """
    if public is not None and pretrain_steps < 1:
        raise ValueError("GEM-Pub needs pretrain_steps >= 1 to use the public data")
    family = GEM(
        learning_rate=learning_rate,
        max_steps=max_steps,
        batch=batch,
        hidden=hidden,
        latent_dim=latent_dim,
        shard_batch=shard_batch,
        gamma_fraction=gamma_fraction,
        top_errors=top_errors,
        rerank_every=rerank_every,
        final_learning_rate=final_learning_rate,
        ema_beta=ema_beta,
        pretrain_steps=pretrain_steps,
    )
    return adaptive(
        data,
        workload,
        select=MaxError(k=marginals_per_round),
        family=family,
        rounds=rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        alpha=alpha,
        public=public,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        name="gem-pub" if public is not None else "gem",
    )


def gem_pub(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    public: Dataset,
    pretrain_steps: int = 1000,
    mesh: Mesh | None = None,
    **kwargs,
) -> Adaptive:
    """GEM-Pub: pretrain on `public` (no privacy cost), then run GEM from the pretrained generator."""
    return gem(data, workload, public=public, pretrain_steps=pretrain_steps, mesh=mesh, **kwargs)


register("gem", MechanismSpec(gem, rounds=50, cap_rounds=True, mesh=True))
register("gem-pub", MechanismSpec(gem_pub, rounds=50, cap_rounds=True, public=True, mesh=True))
