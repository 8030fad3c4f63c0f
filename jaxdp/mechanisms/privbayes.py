"""PrivBayes: a Bayesian network learned with the exponential mechanism, then noisy conditionals
(Zhang, Cormode, Procopiuc, Srivastava & Xiao, "PrivBayes: Private Data Release via Bayesian
Networks", TODS 2017), as a preset of `jaxdp.adaptive`.

    network:   X_1 at random; then d - 1 times, pick (X, Pi), X not yet placed and Pi a maximal
               parent set of placed attributes within the theta-usefulness bound, by the
               exponential mechanism on R(X, Pi) (beta of rho in all)
    measure:   every family's marginal Pr[X_i, Pi_i] (and X_1's), Gaussian ((1 - beta) of rho)
    output:    records from Private-PGM's model of the noisy families (the paper samples each
               X_i from its noisy conditional in network order; the model is that network's
               maximum-likelihood fit when the families agree, and reconciles them when noise
               makes them disagree)

The rule is `jaxdp.selection.PrivBayesSelection`, the family `jaxdp.families.GraphicalModel` and
the driver `jaxdp.mechanisms.host_loop.Annealed` (AIM's and MST's).

Beyond the paper: zCDP with Gaussian measurements (the paper's Laplace noise, 2d / epsilon_2 in
counts, becomes a Gaussian of (1 - beta) rho / d each; theta-usefulness is kept with the
Gaussian's scale), exact discrete Gaussian noise and exact exponential mechanism on integer scores
(`PrivBayesSelection`), each family measured in the round that picks it (the same mechanism: no
score reads a measurement), and records released by rounding (`jaxdp.families.pgm_sampling.sample`).
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.graphical import GraphicalModel
from jaxdp.mechanisms.adaptive import adaptive
from jaxdp.mechanisms.host_loop import Annealed
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import PrivBayesSelection
from jaxdp.types import Neighboring


def privbayes(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    conversion: str = "exact",
    rounds: int | None = None,
    beta: float = 0.3,
    theta: float = 4.0,
    degree: int | None = None,
    max_model_size: float = 80.0,
    iters: int = 1000,
    final_iters: int = 3000,
    tol: float | None = 1e-2,
    noise: str = "discrete",
    mesh: Mesh | None = None,
) -> Annealed:
    """Build PrivBayes on a categorical dataset (replace-one: n public, as in the paper).

    Args:
        data: the private records (at least 2 attributes).
        workload: the marginals the release is judged on (the network is learned from the data,
            not the workload; the model answers it).
        epsilon, delta: the (epsilon, delta)-DP budget, converted to rho by `conversion`.
        rho: alternatively, a zCDP budget.
        conversion: "exact" or "simple" (see `jaxdp.accounting`).
        rounds: leave None: PrivBayes runs one round per attribute; any other count is refused.
        beta: the share of the budget spent on learning the network (the paper's 0.3).
        theta: the usefulness each measured family keeps (the paper's 4): its cells at most
            n / (theta sigma), sigma the measurements' noise scale in counts.
        degree: the most parents an attribute may have (the paper's k); None: as many as
            theta-usefulness admits.
        max_model_size: the graphical model's size cap in megabytes.
        iters, final_iters, tol: the graphical model's fits (`jaxdp.families.GraphicalModel`;
            post-processing).
        noise: "discrete" (default: exact discrete Gaussian noise and exponential mechanism) or
            "float" (float32 noise and Gumbel selection: faster, not meeting its delta exactly).
        mesh: split the records over this mesh's devices to count them (one axis "records",
            `jaxdp.queries.records_mesh()`); the release is that of one device with the same key.

    Raises:
        ValueError: bad arguments, fewer than 2 attributes, or a bound admitting more families
            than `jaxdp.selection.privbayes.MAX_CANDIDATES` (give degree).
        DataError: numeric columns, empty data, or a workload over another domain.
        ImportError: `mbi` is not installed (pip install "jaxdp-synth[pgm]").

    Privacy:
        See `jaxdp.selection.PrivBayesSelection`: rho-zCDP by a plan fixed before the run,
        replace-one.
    """
    return adaptive(
        data,
        workload,
        select=PrivBayesSelection(beta=beta, theta=theta, degree=degree),
        family=GraphicalModel(max_model_size=max_model_size, iters=iters, final_iters=final_iters, tol=tol),
        rounds=rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        relation=Neighboring.REPLACE_ONE,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        name="privbayes",
    )


register("privbayes", MechanismSpec(privbayes, mesh=True, fixed_rounds=True))
