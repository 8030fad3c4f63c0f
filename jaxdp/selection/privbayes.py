"""PrivBayes's network learning (Zhang, Cormode, Procopiuc, Srivastava & Xiao, "PrivBayes:
Private Data Release via Bayesian Networks", TODS 2017: GreedyBayes for general domains, with
theta-usefulness and the score R), as a public part: `PrivBayesSelection`.

    round 0:       X_1 uniformly at random (public randomness); measure its 1-way marginal
    rounds 2..d:   V = the attributes placed so far; the candidates are (X, Pi) with X outside V
                   and Pi a maximal parent set in V: |dom X| |dom Pi| <= tau (theta-usefulness)
                   and no attribute of V can join Pi within that bound; pick one by the
                   exponential mechanism on R(X, Pi) = 1/2 ||Pr[X, Pi] - Pr[X] Pr[Pi]||_1;
                   measure the family's marginal Pr[X, Pi] (Gaussian)
    output:        the model fitted to the d measured families (Private-PGM)

Adapted to zCDP as every jaxdp mechanism is: a share `beta` of rho (the paper's 0.3) pays the
d - 1 selections equally (epsilon = sqrt(8 beta rho / (d - 1)) each, the paper's epsilon_1 /
(d - 1)), the rest the d measurements equally, with Gaussian noise where the paper adds Laplace
noise (scale b = 2d / epsilon_2 counts). theta-usefulness keeps its meaning, the average count
of a family's cell over the noise's scale: |dom X| |dom Pi| <= n / (theta sigma), the paper's
n epsilon_2 / (2 d theta) with the Gaussian's sigma for Laplace's b. Each family is measured in
the round that picks it, where the paper measures all once the network is learned: no score reads
a measurement, so the two are the same mechanism (the family is not refitted between rounds).

The score is computed exactly in integers: T(X, Pi) = sum over cells |n c(x, pi) - c(x) c(pi)|
= 2 n^2 R (counts c, n public). The sensitivity declared is the paper's: under replace-one a
changed record moves at most two cells of each of c(x, pi), c(x) and c(pi) by one, so T moves by
at most 2n + 2n + 2n + 4 = 6n + 4, its bound 3/n + 2/n^2 on R (its Lemma on R's sensitivity)
times 2 n^2. That bound is not reached. The largest move of T is exactly

    M(n) = 6n - 2 - 2 ceil(2 sqrt n)   when X has 3 values or more and Pi 3 cells or more,
           4n - 4 when one of them has 2, and 0 when one has 1,

and M(n) <= 6n - 6 always (n = 100: 558 against 604; n = 1000: 5870 against 6004). Proof. The
record moves from cell (x1, p1) to (x2, p2); write e = n c(x, pi) - c(x) c(pi) (T = sum |e|),
A = c(x1) >= 1, B = c(p1) >= 1, a2 = c(x2), b2 = c(p2), all on D, and m = ceil(2 sqrt n) =
min{a + b : ab >= n} (so m <= n + 1, and m(n) <= m(n - k) + k). Each cell's |e| moves by at
most e's change (triangle inequality). (i) x1 = x2: e changes by +c(x) on column p1 and -c(x)
on column p2 outside row x1, by -(n - A) and n - A at (x1, p1) and (x1, p2): 4(n - A) <= 4n - 4
in all; likewise p1 = p2. (ii) Else e changes by +c(pi) on row x1 and -c(pi) on row x2 outside
columns p1, p2, by +c(x) on column p1 and -c(x) on column p2 outside rows x1, x2, by A + B -
1 - n at (x1, p1), n - 1 - a2 - b2 at (x2, p2), b2 - A + 1 at (x1, p2), a2 - B + 1 at (x2, p1),
and nowhere else. Let T rise (swap D and D' otherwise). The rows and columns give at most
2(n - B - b2) + 2(n - A - a2); with the corners (x2, p2), (x1, p2), (x2, p1) that is
non-increasing in a2 and b2 (slopes -2 +- 1 +- 1), so at most 5n - 3 - A - B (a2 = b2 = 0). The
corner (x1, p1) adds g = |e - D| - |e|, e its e on D, D = n + 1 - A - B, and g <= n + 1 + A + B -
2m: if e <= 0, AB >= n, so A + B >= m, and g <= |D|; if 0 < e and D <= e, g = -D; if 0 < e < D,
g = D - 2e and m <= m(AB) + max(0, n - AB) <= A + B + e (e >= n - AB: the record is there). So
T rises by at most 6n - 2 - 2m, which is at least 4n - 4 (m <= n + 1). If X has 2 values, e's
columns sum to 0 (row x2 is -row x1) and c(x2) = n - A: in (ii) the changes sum to 2(n - B -
b2) + 2|D| + 2|A - 1 - b2|, non-increasing in B and b2, so at most 4n - 4 (B = 1, b2 = 0);
likewise if Pi has 2 cells (T is symmetric in X and Pi). Reached: A = floor(m / 2), B = m - A
(AB >= n), the record alone in its cell, A - 1 records at (x1, p3), B - 1 at (x3, p1), the
other n + 1 - A - B at (x3, p3), row x2 and column p2 empty: T rises from 4(AB - n) by exactly
6n - 2 - 2m. For 2 values: the record alone in row x1, the n - 1 others in column p1 (T = 0),
moved to (x1, p2). `tests/mechanisms/test_privbayes.py` checks M exactly over every small
table; `tests/privacy/test_privbayes_round.py` attacks neighbours that reach it.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.accounting import Plan, PlannedCharge, gumbel_scale
from jaxdp.queries import MarginalWorkload, downward_closure
from jaxdp.selection.host_rule import FixedPlanRule
from jaxdp.selection.records import Schedule, Selected, exponential_selected
from jaxdp.selection.scores import relative_to_best
from jaxdp.types import Key, Neighboring, Sensitive, pytree_dataclass, static_field

# The most candidate families a run counts (their true counts are all computed when it is built).
MAX_CANDIDATES = 100_000

Clique = tuple[int, ...]


@pytree_dataclass
class PrivBayesSelection(FixedPlanRule):
    """PrivBayes's greedy network learning (module docstring).

    Args:
        beta: the share of rho spent on learning the network (the paper's 0.3).
        theta: the usefulness a family's marginal must keep (the paper's 4): a family's cells
            at most n / (theta sigma), sigma the measurements' noise scale in counts.
        degree: the most parents an attribute may have (the paper's k); None: as many as
            theta-usefulness admits.

    Privacy:
        Relation: replace-one (n public: the score's sensitivity is the paper's, a function of
        n). Round 0: the first attribute is drawn uniformly (no data read), then one Gaussian
        measurement of its counts (L2 sensitivity sqrt(2)). Rounds 1..d-1: one exponential
        mechanism (exact, on integer scores; Gumbel-max under noise="float") over the allowed
        families on T with sensitivity 6n + 4, at epsilon = sqrt(8 beta rho / (d - 1))
        (epsilon^2 / 8 zCDP), then a Gaussian measurement of the picked family's counts (L2
        sensitivity sqrt(2)). The measurements share (1 - beta) rho equally. The plan is fixed
        before the run; which families are allowed depends on earlier picks only.
    """

    beta: float = static_field(default=0.3)
    theta: float = static_field(default=4.0)
    degree: int | None = static_field(default=None)
    n_records: int = static_field(default=0)
    bound: float = static_field(default=0.0)

    relations: ClassVar[tuple[Neighboring, ...]] = (Neighboring.REPLACE_ONE,)

    def bind(
        self,
        workload: MarginalWorkload,
        *,
        relation: Neighboring,
        n_records: int,
        rounds: int | None,
        noise: str,
        rho_budget: float,
    ) -> PrivBayesSelection:
        """This rule over the workload's attributes: its candidates are the families within the
        theta-usefulness bound (module docstring), the 1-way marginals and the workload's
        downward closure (the marginals the release is judged on).

        Raises:
            ValueError: bad settings, rounds other than one per attribute, fewer than 2
                attributes, add-remove, or more than MAX_CANDIDATES families within the bound.
        """
        if relation is not Neighboring.REPLACE_ONE:
            raise ValueError(
                "PrivBayes's score sensitivity (3/n + 2/n^2) needs n public: it runs under replace-one only"
            )
        d = len(workload.sizes)
        if rounds is not None and rounds != d:
            raise ValueError(
                f"PrivBayes runs one round per attribute ({d} here); do not give rounds, got {rounds}"
            )
        if d < 2:
            raise ValueError("PrivBayes learns a network over the attributes: the data needs at least 2")
        beta = _checks.fraction(self.beta, "beta", allow_one=False)
        if beta <= 0.0:
            raise ValueError(f"beta must be in (0, 1), got {self.beta!r}")
        theta = _checks.positive_finite(self.theta, "theta")
        degree = None if self.degree is None else _checks.positive_int(self.degree, "degree")
        rule = dataclasses.replace(self, beta=beta, theta=theta, degree=degree, n_records=int(n_records))
        # the sensitivities and noise first (the candidates follow, once sigma sets the bound)
        rule = rule._bound(workload, (), d, relation=relation, n_records=n_records, noise=noise)
        bound = n_records / (theta * rule._measure_sigma(rho_budget))
        families = _families(workload.sizes, bound, degree)
        one_ways = tuple((a,) for a in range(d))
        cliques = downward_closure(MarginalWorkload(workload.sizes, one_ways + workload.cliques)).cliques
        candidates = MarginalWorkload(workload.sizes, tuple(sorted(set(cliques) | set(families), key=_order)))
        return dataclasses.replace(
            rule, candidates=candidates, weights=(1.0,) * len(candidates.cliques), bound=float(bound)
        )

    # -- the budget -------------------------------------------------------------------------

    @property
    def d(self) -> int:
        return len(self.candidates.sizes)

    def _measure_sigma(self, rho_budget: float) -> float:
        return self.measure_sigma((1.0 - self.beta) * rho_budget / self.max_rounds)

    def _select_rho(self, rho_budget: float) -> float:
        return self.beta * rho_budget / (self.max_rounds - 1)

    @property
    def score_sensitivity(self) -> int:
        """T's sensitivity under replace-one, 6n + 4 (module docstring)."""
        return 6 * self.n_records + 4

    def start(self, rho_budget: float) -> Schedule:
        return Schedule(
            self._measure_sigma(rho_budget), math.sqrt(8.0 * self._select_rho(rho_budget)), (), False
        )

    def round_parameters(
        self, schedule: Schedule, rho_budget: float
    ) -> tuple[float, float, float, float, bool]:
        """(sigma, epsilon, rho_select, rho_measure, final) of every family's round."""
        rho_measure = (1.0 - self.beta) * rho_budget / self.max_rounds
        return (
            self.measure_sigma(rho_measure),
            schedule.epsilon,
            self._select_rho(rho_budget),
            rho_measure,
            False,
        )

    def planned(self, plan: Plan) -> Plan:
        """Every charge of the run, fixed before it (BudgetExceededError if over the budget)."""
        sensitivity, sigma = self.one_way_measurement(self._measure_sigma(plan.rho_budget), 1)
        scale = gumbel_scale(float(self.score_sensitivity), self._select_rho(plan.rho_budget))
        families = self.max_rounds - 1
        charges = (
            PlannedCharge("measure the first attribute", self.measure_primitive, sensitivity, sigma),
            PlannedCharge(
                "select a family", self.select_primitive, float(self.score_sensitivity), scale, times=families
            ),
            PlannedCharge(
                "measure a family",
                self.measure_primitive,
                self.l2_sensitivity,
                self._measure_sigma(plan.rho_budget),
                times=families,
            ),
        )
        for charge in charges:
            plan = plan.with_charge(charge)
        return plan.check()

    # -- the network ------------------------------------------------------------------------

    def opening(self, key: Key) -> list[int]:
        """The first attribute's 1-way marginal, the attribute drawn uniformly from `key`."""
        first = int(jax.random.randint(key, (), 0, self.d))
        return [self.candidates.cliques.index((first,))]

    def options(self, measured: Sequence[Clique]) -> dict[Clique, int]:
        """{family clique: its child X} for every (X, Pi) the next round may pick: X outside the
        placed attributes V (those of the `measured` cliques), Pi a maximal parent set in V
        (the parentless (X,) when no parent fits the bound). Computed once per V: a round asks
        for its mask and then its scores."""
        placed = tuple(sorted({a for clique in measured for a in clique}))
        return _options(tuple(self.candidates.sizes), placed, self.bound, self.degree)

    def allowed(self, measured: Sequence[Clique]) -> np.ndarray:
        index = {c: i for i, c in enumerate(self.candidates.cliques)}
        mask = np.zeros(len(self.candidates.cliques), bool)
        mask[[index[c] for c in self.options(measured)]] = True
        return mask

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
        measured: Sequence[Clique] = (),
        schedule: Schedule | None = None,
    ) -> Selected:
        """The exponential mechanism over the allowed families on T (module docstring), in grid
        steps of (6n + 4) / GRID_STEPS: floor(T GRID_STEPS / (6n + 4)) moves by at most
        GRID_STEPS between neighbours.

        Privacy:
            Reads the true counts; one exponential mechanism (`noise.select_grid`).
        """
        del model_counts, sigma, schedule  # the score reads the data alone
        children = self.options(measured)
        delta = self.score_sensitivity
        scale = gumbel_scale(float(delta), rho_select)
        steps = counts.map(
            lambda c: jnp.asarray(self._steps(np.asarray(c), np.asarray(mask, bool), children))
        )
        choice, charge = noise_module.select_grid(
            key, steps, scale=scale, sensitivity=float(delta), noise=self.noise, mask=jnp.asarray(mask)
        )
        return exponential_selected(choice, charge, self.select_primitive, float(delta), scale)

    def _steps(self, counts: np.ndarray, mask: np.ndarray, children: dict[Clique, int]) -> np.ndarray:
        """(n_candidates,) int32 grid scores relative to the best allowed family (host, int64)."""
        quality = np.zeros(len(self.candidates.cliques), np.int64)
        for i in np.flatnonzero(mask):
            clique = self.candidates.cliques[i]
            joint = np.asarray(counts[self.span(i)], np.int64).reshape(
                [self.candidates.sizes[a] for a in clique]
            )
            quality[i] = (
                dependence(joint, clique.index(children[clique]), self.n_records) * noise_module.GRID_STEPS
            ) // (self.score_sensitivity)
        return relative_to_best(quality, mask)


@functools.lru_cache(maxsize=64)
def _options(
    sizes: tuple[int, ...], placed: tuple[int, ...], bound: float, degree: int | None
) -> dict[Clique, int]:
    """`PrivBayesSelection.options` for the placed attributes `placed`."""
    out = {}
    for x in range(len(sizes)):
        if x in placed:
            continue
        # an attribute of one value is independent of everything: it takes no parents
        parents = _maximal_parent_sets(placed, sizes, bound / sizes[x], degree) if sizes[x] > 1 else []
        for pi in parents or [()]:
            out[tuple(sorted((x, *pi)))] = x
    return out


def dependence(joint: np.ndarray, axis: int, n: int) -> int:
    """T = sum |n c(x, pi) - c(x) c(pi)| of a family's counts `joint`, X on `axis` (exact)."""
    joint = np.asarray(joint, np.int64)
    child = joint.sum(axis=tuple(a for a in range(joint.ndim) if a != axis), keepdims=True)
    parents = joint.sum(axis=axis, keepdims=True)
    return int(np.abs(n * joint - child * parents).sum())


def _order(clique: Clique) -> tuple[int, Clique]:
    return len(clique), clique


def _families(sizes: Sequence[int], bound: float, degree: int | None) -> list[Clique]:
    """Every attribute set of 2 or more attributes (at most degree + 1) whose cells are within
    `bound`, attributes of one value left out (they carry nothing).

    Raises:
        ValueError: more than MAX_CANDIDATES of them (found while listing, so a loose bound
        over many small attributes stops early).
    """
    usable = [a for a, s in enumerate(sizes) if s > 1]
    most = len(usable) if degree is None else degree + 1
    out: list[Clique] = []

    def grow(clique: Clique, cells: int, start: int) -> None:
        if len(clique) >= 2:
            out.append(clique)
            if len(out) > MAX_CANDIDATES:
                raise ValueError(
                    f"PrivBayes: more than {MAX_CANDIDATES} families of at most {bound:.0f} cells would "
                    "be counted; give degree= to cap the parents"
                )
        if len(clique) == most:
            return
        for j in range(start, len(usable)):
            a = usable[j]
            if cells * sizes[a] <= bound:
                grow((*clique, a), cells * sizes[a], j + 1)

    grow((), 1, 0)
    return out


def _maximal_parent_sets(
    placed: Sequence[int], sizes: Sequence[int], bound: float, degree: int | None
) -> list[Clique]:
    """The non-empty sets of placed attributes (of more than one value, at most `degree`) whose
    cells are within `bound` and to which no other such attribute can be added within it."""
    usable = [a for a in placed if sizes[a] > 1]
    most = len(usable) if degree is None else degree
    within: list[Clique] = []
    for r in range(1, most + 1):
        of_size = [s for s in itertools.combinations(usable, r) if math.prod(sizes[a] for a in s) <= bound]
        if not of_size:  # every attribute has 2 values or more: no larger set fits either
            break
        within += of_size
    found = set(within)

    def maximal(subset: Clique) -> bool:
        if len(subset) == most:
            return True
        return not any(tuple(sorted((*subset, a))) in found for a in usable if a not in subset)

    return [s for s in within if maximal(s)]
