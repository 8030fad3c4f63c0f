"""MST's selection (McKenna, Miklau & Sheldon 2021, "Winning the NIST Contest", Algorithm 1), as a
public part: `MSTSelection`.

    round 0:      measure every 1-way marginal (Gaussian, a third of rho)
    (compress):   merge each attribute's values counted below 3 sigma (post-processing)
    rounds 1..d-1 (a third of rho to select, a third to measure, d - 1 equal shares each):
                  among the pairs (a, b) that join two components of the tree so far, pick one by
                  the exponential mechanism on ||M_ab(D) - M_ab(p_1)||_1, p_1 the model fitted to
                  the 1-way measurements; measure M_ab(D) (Gaussian)
    output:       the model fitted to every measurement (the tree's cliques: exact inference)

The paper selects the whole tree first and measures its edges afterwards; here each edge is
measured in the round that picks it. The two are the same mechanism: every score is taken against
the 1-way model (the family is not refitted between rounds: `refits` is False), so no edge's
measurement reaches a later selection, and the budget of each primitive is the paper's.

Composed by `jaxdp.adaptive` with a family of marginals (Private-PGM's `GraphicalModel` for
`jaxdp.mst`) and driven from the host by `jaxdp.mechanisms.host_loop.Annealed`, as AIM's rule is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from jaxdp import noise
from jaxdp.accounting import Plan, PlannedCharge, gumbel_scale
from jaxdp.queries import MarginalWorkload, downward_closure
from jaxdp.selection.host_rule import FixedPlanRule
from jaxdp.selection.records import Schedule
from jaxdp.types import Neighboring, pytree_dataclass

# The paper's split of rho: 1-way measurements, edge selections, edge measurements.
THIRD = 1.0 / 3.0


@pytree_dataclass
class MSTSelection(FixedPlanRule):
    """MST's maximum-spanning-tree selection (module docstring).

    Bound by `jaxdp.adaptive` (`bind`) to the data's attributes: the candidates are every 1-way
    marginal, every pair and the workload's downward closure (the marginals the release is
    judged on, which the model answers but the rule never picks); d rounds, round 0 included.

    Privacy:
        Relation: add/remove (counts: a marginal's L2 and L1 sensitivity are 1, as in the paper)
        or replace-one (counts with n public: L2 sqrt(2), L1 2). Round 0: one Gaussian
        measurement of the d one-way marginals together, L2 sensitivity sqrt(d) times a
        marginal's, rho / 3. Rounds 1..d-1: one exponential mechanism (exact; Gumbel-max under
        noise="float") on the L1 error of a pair's counts, sensitivity the marginal's L1
        sensitivity, at epsilon = sqrt(8 (rho / 3) / (d - 1)) (epsilon^2 / 8 zCDP, Cesar &
        Rogers 2021), then a Gaussian measurement of the pair costing (rho / 3) / (d - 1). The
        plan is fixed before the run; which pairs may be picked depends on earlier picks only.
    """

    noise_penalty: ClassVar[bool] = False

    def bind(
        self,
        workload: MarginalWorkload,
        *,
        relation: Neighboring,
        n_records: int,
        rounds: int | None,
        noise: str,
        rho_budget: float,
    ) -> MSTSelection:
        """This rule over the workload's attributes (module docstring).

        Raises:
            ValueError: rounds given (MST's are fixed: one per attribute), or fewer than 2
                attributes (no tree to select).
        """
        del rho_budget  # the shares are fixed: `start`, `round_parameters`
        d = len(workload.sizes)
        if rounds is not None and rounds != d:
            raise ValueError(
                f"MST runs one round per attribute ({d} here: the 1-way round and {d - 1} edges); "
                f"do not give rounds, got {rounds}"
            )
        if d < 2:
            raise ValueError("MST selects a tree over the attributes: the data needs at least 2 attributes")
        every_pair = tuple(itertools.combinations(range(d), 2))
        candidates = downward_closure(MarginalWorkload(workload.sizes, workload.cliques + every_pair))
        return self._bound(
            candidates,
            np.ones(len(candidates)),
            d,
            relation=relation,
            n_records=n_records,
            noise=noise,
        )

    @property
    def edges(self) -> int:
        return self.max_rounds - 1

    def _one_way_sigma(self, rho_budget: float) -> float:
        return noise.count_sigma(
            math.sqrt(len(self.one_way())) * self.l2_sensitivity, THIRD * rho_budget, self.noise
        )

    def _epsilon(self, rho_budget: float) -> float:
        return math.sqrt(8.0 * THIRD * rho_budget / self.edges)

    def start(self, rho_budget: float) -> Schedule:
        """Round 0's sigma (every 1-way marginal together for a third of rho), and the edges'
        selection epsilon."""
        return Schedule(self._one_way_sigma(rho_budget), self._epsilon(rho_budget), (), False)

    def round_parameters(
        self, schedule: Schedule, rho_budget: float
    ) -> tuple[float, float, float, float, bool]:
        """(sigma, epsilon, rho_select, rho_measure, final) of every edge round: a third of rho
        over the d - 1 selections, a third over their measurements; no round is a filter's."""
        rho_round = THIRD * rho_budget / self.edges
        return self.measure_sigma(rho_round), schedule.epsilon, rho_round, rho_round, False

    def planned(self, plan: Plan) -> Plan:
        """Every charge of the run, fixed before it (BudgetExceededError if over the budget)."""
        sensitivity, sigma = self.one_way_measurement(
            self._one_way_sigma(plan.rho_budget), len(self.one_way())
        )
        edge_sigma = self.measure_sigma(THIRD * plan.rho_budget / self.edges)
        select_scale = gumbel_scale(self.l1_sensitivity, THIRD * plan.rho_budget / self.edges)
        charges = (
            PlannedCharge("measure 1-way marginals", self.measure_primitive, sensitivity, sigma),
            PlannedCharge(
                "select edge", self.select_primitive, self.l1_sensitivity, select_scale, times=self.edges
            ),
            PlannedCharge(
                "measure edge", self.measure_primitive, self.l2_sensitivity, edge_sigma, times=self.edges
            ),
        )
        for charge in charges:
            plan = plan.with_charge(charge)
        return plan.check()

    def allowed(self, measured: Sequence[tuple[int, ...]]) -> np.ndarray:
        """The pairs that join two components of the forest the measured pairs make (Kruskal's
        rule): a tree after d - 1 rounds."""
        component = list(range(len(self.candidates.sizes)))

        def root(a: int) -> int:
            while component[a] != a:
                component[a] = component[component[a]]
                a = component[a]
            return a

        for clique in measured:
            if len(clique) == 2:
                a, b = clique
                component[root(a)] = root(b)
        return np.array(
            [len(c) == 2 and root(c[0]) != root(c[1]) for c in self.candidates.cliques],
            bool,
        )
