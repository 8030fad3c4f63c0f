"""DualQuery (Gaboardi, Arias, Hsu, Roth & Wu 2014, "Dual Query: Practical Private Query Release
for High Dimensional Data"), as a preset of `jaxdp.adaptive`.

    for t = 0..T-1:  select: s signed queries sampled i.i.d. from the query player's
                     multiplicative weights Q_t(q) ~ exp(eta t (q(D) - q(xbar_t)))
                     (uniform in round 0)
                     measure: nothing
                     update: the data player's best response x_t = argmax_x sum_i q_i(x)
    output: the multiset {x_0, ..., x_{T-1}} (`release` samples rows from it)

A zero-sum game between a query player and a data player with payoff A(x, q) = q(D) - q(x) to the
query player, over the counting queries of a marginal workload and their negations (not-q = 1 - q,
so the query set is closed under negation); xbar_t is the uniform distribution over the records
found so far. The selection is `jaxdp.selection.SignedErrorSamples`, the family
`jaxdp.families.BestResponses`.
"""

from __future__ import annotations

from jaxdp.domain import Dataset
from jaxdp.families.games import BestResponses
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import SignedErrorSamples


def dualquery(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    rounds: int,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    samples: int = 50,
    learning_rate: float | None = None,
    blocks: int = 32,
    oracle: str = "auto",
    time_limit: float | None = None,
    conversion: str = "exact",
    noise: str = "discrete",
) -> Adaptive:
    """Build DualQuery.

    Args:
        data: the private records (categorical attributes).
        workload: the marginals whose cells (and their negations) are the query set.
        rounds: T >= 2, one best-response record per round (the output has T records).
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        samples: s, queries sampled from the query player's distribution per round.
        learning_rate, blocks: eta, and the charging blocks of the rounds (see
            `jaxdp.selection.SignedErrorSamples`; None: the largest eta the budget pays for).
        oracle, time_limit: the best-response oracle (see `jaxdp.families.BestResponses`).
        noise: "discrete" (default): exact exponential mechanisms; "float": Gumbel-max, faster
            but not exact (`jaxdp.noise`).

    Raises:
        ValueError: rounds < 2 (or above 2^15 with noise="discrete", the range of the exact
            integer scores), bad sizes or options.
        BudgetExceededError: a given learning rate that the budget cannot pay for.

    Privacy:
        See `jaxdp.selection.SignedErrorSamples`: at most rho-zCDP in total under replace-one;
        the best responses, tie-breaking (stream UPDATE) and release (stream RELEASE) are
        post-processing.
    """
    return adaptive(
        data,
        workload,
        select=SignedErrorSamples(k=samples, learning_rate=learning_rate, blocks=blocks),
        family=BestResponses(oracle=oracle, time_limit=time_limit),
        measure=None,
        rounds=rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        conversion=conversion,
        noise=noise,
        name="dualquery",
    )


register("dualquery", MechanismSpec(dualquery, rounds=100))
