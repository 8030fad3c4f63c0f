"""FEM: Follow-the-perturbed-leader with the Exponential Mechanism (Vietri, Tian, Bun, Steinke &
Wu 2020, "New Oracle-Efficient Algorithms for Private Synthetic Data Release"), as a preset of
`jaxdp.adaptive`.

    for t = 0..T-1:  select: one signed query by the exponential mechanism on q(D) - q(Dhat_t)
                     measure: nothing
                     update: s records x = argmax_x sum_{j<=t} q_j(x) + <onehot(x), eta_i>,
                     eta_i ~ Exp(sigma) i.i.d. per one-hot column
    output: the multiset of all T s records (`release` samples rows from it)

The same zero-sum game as DualQuery (payoff q(D) - q(x) over the counting queries of a marginal
workload and their negations), with the roles of the players' algorithms swapped: the query
player best-responds privately (`jaxdp.selection.SignedError`) and the data player runs
follow-the-perturbed-leader (`jaxdp.families.PerturbedLeader`). Dhat_t is the uniform
distribution over the records of rounds < t (over the domain in round 0).
"""

from __future__ import annotations

from jaxdp.domain import Dataset
from jaxdp.families.games import PerturbedLeader
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import SignedError


def fem(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    samples: int = 20,
    perturbation: float = 1.0,
    oracle: str = "auto",
    time_limit: float | None = None,
    conversion: str = "exact",
    noise: str = "discrete",
) -> Adaptive:
    """Build FEM.

    Args:
        data: the private records (categorical attributes).
        workload: the marginals whose cells (and their negations) are the query set.
        rounds: T, one selected query and `samples` best-response records per round.
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        samples: s, perturbed-leader records per round (the output has T s records).
        perturbation: sigma, the mean of the Exp(sigma) perturbation of each one-hot column, in
            units of selected queries (a column perturbation of sigma weighs as much as sigma
            satisfied queries).
        oracle, time_limit: the best-response oracle (see `jaxdp.families.PerturbedLeader`).
        noise: "discrete" (default): the exact exponential mechanism on exact integer scores;
            "float": Gumbel-max, faster but not exact (`jaxdp.noise`).

    Raises:
        ValueError: bad sizes or options.

    Privacy:
        Relation replace-one (n public; answers are fractions). Each of the T rounds runs one
        exponential mechanism (stream SELECT) over the 2 n_queries candidates with score
        q(D) - q(Dhat_t) and its negation; Dhat_t is post-processing of earlier rounds' outputs,
        and q(D) moves by at most 1/n when one record is replaced, so the score sensitivity is
        1/n. At scale 2 / (n epsilon_0) a round is epsilon_0-bounded-range, hence
        epsilon_0^2 / 8-zCDP (Cesar & Rogers 2021), and the run costs rho = T epsilon_0^2 / 8
        with epsilon_0 = sqrt(8 rho / T) (the whole budget, evenly; one planned charge, T times).
        The perturbations (stream UPDATE), best responses and release (stream RELEASE) are
        post-processing: they touch no private value.
    """
    return adaptive(
        data,
        workload,
        select=SignedError(),
        family=PerturbedLeader(
            samples=samples, perturbation=perturbation, oracle=oracle, time_limit=time_limit
        ),
        measure=None,
        rounds=rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        conversion=conversion,
        noise=noise,
        name="fem",
    )


register("fem", MechanismSpec(fem, rounds=200))
