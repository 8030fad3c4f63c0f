"""SWIFT's selection: one Gaussian measurement of every candidate's L1 error against the 1-way
model, a clique tree grown from the worst pairs, and a budget split over the marginals it
supports (Google DPSynth's `discrete_mechanisms/swift.py`, "Scalable Workload-Informed Factor
Tree", 2026), as a public part: `SwiftSelection`.

    round 0:   every 1-way marginal, Gaussian, ONE_WAY_SHARE of rho (DPSynth's 1-way step)
    select:    e_r = ||M_r(D) - M_r(p_1)||_1 for every candidate r (p_1: the 1-way model), one
               Gaussian draw, SELECT_SHARE of the rest
    tree:      for each penalty lambda in PENALTIES, grow a clique tree (nodes of at most
               `max_clique_size` cells) by adding pairs in decreasing order of e_r - lambda n_r
               (`clique_tree`); keep the tree whose supported pairs have the largest summed
               error (post-processing of the released errors)
    plan:      among the candidates the tree supports, the subset S and the split rho_r of the
               measurement budget R maximising sum_S w_r (e_r - sqrt(2/pi) sigma_r n_r), sigma_r
               = L2 / sqrt(2 rho_r): rho_r proportional to y_r = (w_r n_r)^(2/3), and S the best
               prefix of the candidates by w_r e_r / y_r, improved one candidate at a time
               (`measurement_plan`)
    measure:   each r in S, Gaussian at sigma_r, one round each (no selection: the plan is public)
    output:    records from Private-PGM's model of every measurement, fitted once at the end

Where this departs from DPSynth's: S is the best prefix by the ratio, then improved by single
additions, removals and swaps (DPSynth stops at the first prefix that scores lower); the noise is
exact (integer errors and counts, discrete Gaussian). The split is chosen from released values
and the charges sum to the budget, so the run composes in zCDP or, as DPSynth accounts it, in
Gaussian DP (conversion "gdp", each discrete Gaussian bounded through a smoothing: `jaxdp.gdp`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from jaxdp import _checks, noise
from jaxdp.accounting import Plan, PlannedCharge
from jaxdp.queries import MarginalWorkload, aim_weights, downward_closure
from jaxdp.selection.host_rule import FixedPlanRule
from jaxdp.selection.noisy_errors import measure_errors
from jaxdp.selection.records import Schedule, Selected
from jaxdp.selection.scores import SQRT_2_OVER_PI
from jaxdp.types import Key, Neighboring, Sensitive, pytree_dataclass, static_field

# DPSynth's defaults: the 1-way share of its DiscreteConfig, SWIFT's select_budget_frac, its
# max_clique_size (cells) and the penalties its tree search tries
ONE_WAY_SHARE = 0.1
SELECT_SHARE = 0.1
MAX_CLIQUE_SIZE = 1e7
PENALTIES = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)

Node = frozenset


def _cells(sizes: Sequence[int], attributes) -> int:
    return math.prod(sizes[a] for a in attributes)


def _components(nodes: list[Node], edges: set[frozenset]) -> list[int]:
    """Each node's component label (union-find over the tree's edges)."""
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for edge in edges:
        i, j = tuple(edge)
        parent[root(i)] = root(j)
    return [root(i) for i in range(len(nodes))]


def _best_support(
    pair: Node, nodes: list[Node], edges: set[frozenset], sizes, labels: list[int]
) -> tuple[tuple[int, int] | None, float]:
    """The cheapest two nodes, one holding each attribute of `pair`, that are adjacent or in
    different components (`labels`), and the cells of the larger node growing them would make
    (inf: none)."""
    a, b = sorted(pair)
    best, cost = None, math.inf
    for i in (k for k, node in enumerate(nodes) if a in node):
        for j in (k for k, node in enumerate(nodes) if b in node):
            if i == j or (labels[i] == labels[j] and frozenset((i, j)) not in edges):
                continue
            c = min(_cells(sizes, nodes[i] | pair), _cells(sizes, nodes[j] | pair))
            if c < cost:
                best, cost = (i, j), c
    return best, cost


def _relabel(
    nodes: list[Node], edges: set[frozenset], mapping: dict[int, Node]
) -> tuple[list[Node], set[frozenset]]:
    """The tree with the nodes in `mapping` replaced; nodes replaced by one node become one."""
    merged: dict[int, int] = {}
    for i, node in mapping.items():
        same = [j for j in mapping if mapping[j] == node]
        merged[i] = min(same)
    keep = [i for i in range(len(nodes)) if merged.get(i, i) == i]
    new_index = {i: k for k, i in enumerate(keep)}
    renamed = [mapping.get(i, nodes[i]) for i in keep]
    new_edges = set()
    for edge in edges:
        i, j = (new_index[merged.get(v, v)] for v in edge)
        if i != j:
            new_edges.add(frozenset((i, j)))
    return renamed, new_edges


def _support(pair: Node, nodes: list[Node], edges: set[frozenset], sizes, ends: tuple[int, int]):
    """The tree grown to hold `pair` between the nodes `ends`: along a tree edge, the pair is
    folded into the cheaper end (absorbing the other end if it then holds it); across two
    components, the pair becomes a node joining them (or replaces an end it contains)."""
    i, j = ends
    if frozenset(ends) in edges:
        grown_i, grown_j = nodes[i] | pair, nodes[j] | pair
        if _cells(sizes, grown_i) <= _cells(sizes, grown_j):
            mapping = {i: grown_i, **({j: grown_i} if grown_i >= nodes[j] else {})}
        else:
            mapping = {j: grown_j, **({i: grown_j} if grown_j >= nodes[i] else {})}
        return _relabel(nodes, edges, mapping)
    if nodes[i] | nodes[j] == pair:
        return _relabel(nodes, edges, {i: pair, j: pair})
    for inner, outer in ((i, j), (j, i)):
        if nodes[inner] <= pair:  # one node renamed: the indices stay
            nodes, edges = _relabel(nodes, edges, {inner: pair})
            return nodes, edges | {frozenset((inner, outer))}
    nodes = [*nodes, pair]
    new = len(nodes) - 1
    return nodes, edges | {frozenset((i, new)), frozenset((j, new))}


def clique_tree(
    sizes: Sequence[int], pair_errors: dict[tuple[int, int], float], max_cells: float, penalty: float
) -> list[Node]:
    """SWIFT's greedy tree: starting from one node per attribute, repeatedly take the first pair
    (in decreasing order of error - penalty x cells) that the tree does not hold yet and can hold
    within `max_cells` cells a node, and grow the tree to hold it (`_support`); pairs that would
    need a larger node are dropped. Its nodes are a junction tree's cliques (each step keeps
    the running intersection property). Public: it reads released errors only."""
    nodes: list[Node] = [Node((a,)) for a in range(len(sizes))]
    edges: set[frozenset] = set()
    order = sorted(pair_errors, key=lambda p: -(pair_errors[p] - penalty * _cells(sizes, p)))
    pending = [Node(p) for p in order]
    changed = True
    while changed:
        changed = False
        labels = _components(nodes, edges)
        for pair in list(pending):
            if any(pair <= node for node in nodes):
                pending.remove(pair)
                continue
            ends, cost = _best_support(pair, nodes, edges, sizes, labels)
            if ends is not None and cost <= max_cells:
                nodes, edges = _support(pair, nodes, edges, sizes, ends)
                pending.remove(pair)
                changed = True
                break
            if math.isfinite(cost):
                pending.remove(pair)
    return nodes


def best_tree(
    sizes: Sequence[int], pair_errors: dict[tuple[int, int], float], max_cells: float
) -> list[Node]:
    """The tree over PENALTIES whose supported pairs have the largest summed error."""

    def value(nodes: list[Node]) -> float:
        return sum(e for p, e in pair_errors.items() if any(Node(p) <= node for node in nodes))

    trees = [clique_tree(sizes, pair_errors, max_cells, penalty) for penalty in PENALTIES]
    return max(trees, key=value)  # the first of the best: the smallest penalty


def measurement_plan(
    errors: np.ndarray, weights: np.ndarray, cells: np.ndarray, l2: float, budget: float
) -> list[tuple[int, float]]:
    """[(candidate, rho)] maximising sum_S w (e - sqrt(2/pi) n L2 / sqrt(2 rho)) with the rhos
    summing to `budget`: for a fixed S the best split is rho proportional to y = (w c)^(2/3)
    (c = sqrt(2/pi) n L2 / sqrt 2), scoring sum_S w e - (sum_S y)^(3/2) / sqrt(budget). S: the
    best prefix of the candidates ordered by w e / y, then improved by the best single addition,
    removal or swap while one scores higher (never empty). Post-processing."""
    reward = weights * errors
    factor = (weights * SQRT_2_OVER_PI * cells * l2 / math.sqrt(2.0)) ** (2.0 / 3.0)

    def score(total_reward, total_factor):
        return total_reward - total_factor**1.5 / math.sqrt(budget)

    order = np.argsort(-(reward / factor), kind="stable")
    gains = score(np.cumsum(reward[order]), np.cumsum(factor[order]))
    chosen = np.zeros(len(errors), bool)
    chosen[order[: int(np.argmax(gains)) + 1]] = True
    while True:
        a, y = reward[chosen].sum(), factor[chosen].sum()
        now = score(a, y)
        sign = np.where(chosen, -1.0, 1.0)
        toggled = score(a + sign * reward, y + sign * factor)
        if chosen.sum() == 1:
            toggled[chosen] = -np.inf  # never empty
        inside, outside = np.flatnonzero(chosen), np.flatnonzero(~chosen)
        swapped = score(
            a - reward[inside, None] + reward[None, outside], y - factor[inside, None] + factor[None, outside]
        )
        if toggled.max() >= (swapped.max() if swapped.size else -np.inf):
            if toggled.max() <= now + 1e-12 * abs(now):
                break
            flip = [int(np.argmax(toggled))]
        else:
            if swapped.max() <= now + 1e-12 * abs(now):
                break
            i, j = np.unravel_index(int(np.argmax(swapped)), swapped.shape)
            flip = [int(inside[i]), int(outside[j])]
        chosen[flip] = ~chosen[flip]
    picked = order[chosen[order]]
    shares = factor[picked] / factor[picked].sum()
    return [(int(i), float(budget * s)) for i, s in zip(picked, shares, strict=True)]


@pytree_dataclass
class SwiftSelection(FixedPlanRule):
    """SWIFT's selection and measurement plan (module docstring).

    Args:
        max_clique_size: the most cells a node of the clique tree may have (DPSynth's 1e7).

    Privacy:
        Relation: add/remove (counts: a marginal's L2 and L1 sensitivity are 1) or replace-one
        (counts with n public: L2 sqrt(2), L1 2). Round 0: one Gaussian measurement of the d1
        1-way marginals together (L2 sensitivity sqrt(d1) times a marginal's), ONE_WAY_SHARE
        rho. Round 1: one Gaussian measurement of every candidate's exact L1 error against the
        1-way model (`jaxdp.selection.noisy_errors.measure_errors`: L2 sensitivity K L1
        sqrt(|W+|) in steps of 1/K count), SELECT_SHARE (1 - ONE_WAY_SHARE) rho. Then one
        Gaussian measurement per planned marginal at rho_r, the rho_r summing to the rest: the
        plan is post-processing of the released errors, so the charges are chosen adaptively
        with a total fixed in advance (zCDP composes them, and Gaussian DP under "gdp", in
        mu^2 / 2 of the smoothed draws: the filter's sum is the budget).
    """

    max_clique_size: float = static_field(default=MAX_CLIQUE_SIZE)

    noise_penalty: ClassVar[bool] = False
    gaussian_only: ClassVar[bool] = True

    def bind(
        self,
        workload: MarginalWorkload,
        *,
        relation: Neighboring,
        n_records: int,
        rounds: int | None,
        noise: str,
        rho_budget: float,
    ) -> SwiftSelection:
        """This rule over `workload`'s downward closure; its rounds follow from its plan (round
        0, then one measurement each, at most every candidate).

        Raises:
            ValueError: rounds given, or a max_clique_size below 1.
        """
        del rho_budget
        candidates = downward_closure(workload)
        most = len(candidates) + 1
        if rounds is not None and rounds != most:  # a rebinding (compression) passes the bound value
            raise ValueError(
                f"SWIFT's rounds follow from its measurement plan; do not give rounds, got {rounds}"
            )
        _checks.positive_finite(self.max_clique_size, "max_clique_size")
        return self._bound(
            candidates,
            aim_weights(workload, candidates),
            most,
            relation=relation,
            n_records=n_records,
            noise=noise,
        )

    def start(self, rho_budget: float) -> Schedule:
        """Round 0's sigma: the 1-way marginals together at ONE_WAY_SHARE of the budget."""
        sigma = self.l2_sensitivity * math.sqrt(len(self.one_way()) / (2.0 * ONE_WAY_SHARE * rho_budget))
        return Schedule(sigma, 0.0, (), False, smoothed=self.smoothed)

    def round_parameters(
        self, schedule: Schedule, rho_budget: float
    ) -> tuple[float, float, float, float, bool]:
        """Round 1 selects on SELECT_SHARE of what round 0 leaves; every round's measurement
        spends its planned rho (`Selected.measure_rho`), so the round's own share is 0."""
        rho_select = SELECT_SHARE * (1.0 - ONE_WAY_SHARE) * rho_budget if schedule.kept is None else 0.0
        return schedule.sigma, 0.0, rho_select, 0.0, False

    def reads_scores(self, schedule: Schedule) -> bool:
        """Only round 1's selection reads the model's answers; later rounds follow the plan."""
        return schedule.kept is None

    def planned(self, plan: Plan) -> Plan:
        """The budget alone: the measurements' split is decided from round 1's release."""
        return plan

    def realised_plan(self, schedule: Schedule, plan: Plan) -> Plan:
        """Round 0, the errors' measurement, then one measurement per planned marginal."""
        realised = Plan(plan.rho_budget, plan.epsilon, plan.delta, plan.conversion)
        for i, (code, sensitivity, scale) in enumerate(schedule.charges):
            label = (
                ("measure 1-way marginals", "measure every candidate's error")[i]
                if i < 2
                else f"measure (round {i - 1})"
            )
            realised = realised.with_charge(PlannedCharge(label, noise.PRIMITIVES[code], sensitivity, scale))
        return realised.check()

    def prefetch(self) -> None:
        """Nothing to compile ahead: this rule's selection is its own."""

    def __call__(
        self,
        key: Key,
        counts: Sensitive,
        model_counts: np.ndarray,
        mask: np.ndarray,
        sigma: float,
        rho_select: float,
        measured: Sequence[tuple[int, ...]] = (),
        schedule: Schedule | None = None,
    ) -> Selected:
        """Round 1: the errors' measurement and the plan (its first marginal picked); later
        rounds: the plan's next marginal, drawing nothing.

        Privacy:
            Round 1 reads the true counts: one Gaussian measurement (`measure_errors`). The
            tree, the plan and every later pick are post-processing of its release.
        """
        del mask, sigma, measured  # every candidate is scored; the tree bounds the model
        kept = None if schedule is None else schedule.kept
        if kept is None:
            everything = np.arange(len(self.candidates))
            errors, charge, entry = measure_errors(self, key, counts, model_counts, everything, rho_select)
            budget = rho_select * (1.0 - SELECT_SHARE) / SELECT_SHARE
            plan = self.plan(errors, budget)
            (first, rho), rest = plan[0], tuple(plan[1:])
            return Selected(first, charge, entry, 0.0, kept=rest, measure_rho=rho, last=not rest)
        (pick, rho), rest = kept[0], tuple(kept[1:])
        return Selected(
            int(pick), noise.idle(self.select_primitive), None, 0.0, kept=rest, measure_rho=rho, last=not rest
        )

    def plan(self, errors: np.ndarray, budget: float) -> list[tuple[int, float]]:
        """The tree from the released errors of the pairs, then `measurement_plan` over the
        candidates it supports."""
        sizes = self.candidates.sizes
        cliques = self.candidates.cliques
        pairs = {tuple(c): float(e) for c, e in zip(cliques, errors, strict=True) if len(c) == 2}
        nodes = best_tree(sizes, pairs, self.max_clique_size)
        supported = np.asarray([any(Node(c) <= node for node in nodes) for c in cliques])
        index = np.flatnonzero(supported)
        weights = np.asarray(self.weights, np.float64)[index]
        cells = np.asarray(self.candidates.cells, np.float64)[index]
        local = measurement_plan(errors[index], weights, cells, self.l2_sensitivity, budget)
        return [(int(index[i]), rho) for i, rho in local]
