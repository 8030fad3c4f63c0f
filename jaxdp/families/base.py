"""What the builder (`jaxdp.adaptive`) and a family say to each other: the family's base class,
what it is told about each query class, and what a measurement hands it.

A family is a synthetic-data representation and its update from the released measurements
(Adaptive Measurements' "update" step). Everything it does is post-processing: it reads released
values (`Measured`) and public data, never the private records. A family subclasses `Family`
(decorated with `jaxdp.types.pytree_dataclass`) and defines `bind`, `init`, `answers`, `record`,
`update`, `output_answers` and `release`; the rest has defaults here.

Units. Measurements arrive as noisy counts (`Measured.counts`, with the noise scale `sigma` in
counts). Under replace-one the record count n is public and `bind` receives it: a family that
fits fractions divides by it. Under add-remove n is private (`bind` receives None): a family then
works in counts, or estimates the total from the noisy counts (post-processing). `answers`
reports in the relation's units, fractions under replace-one and counts under add-remove, which
is what the selection rules score.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

from jaxdp.domain import Dataset, Domain
from jaxdp.types import MARGINALS, QUERIES, Array, Key, Neighboring


class ClassShape(NamedTuple):
    """What a family is told about one query class of the mechanism it is bound into.

    queries: the class's queries: a `MarginalWorkload`, or threshold queries
        (`MixedMarginalQueries`, `LinearThresholdQueries`; RAP++'s classes).
    rounds: the rounds that select from this class (at most, under a privacy filter).
    per_round: candidates picked in each of them; None when it varies (a filter rule measures
        every 1-way marginal in its first round, one marginal a round after).
    candidates: what a pick is (`MARGINALS`, `QUERIES` or `SIGNED_QUERIES`).
    capacity: the most picks the run records in all (rounds x per_round for a fixed schedule).
    """

    queries: Any
    rounds: int
    per_round: int | None
    candidates: str
    capacity: int


class Measured(NamedTuple):
    """One round's picks and their released measurements (post-processing only: noise was added).

    chosen: (k,) int32 the candidates the selection picked (marginals, queries, or signed queries:
        q < n_queries is query q, else the negation of query q - n_queries).
    marginal: (k,) int32 the workload marginal of each pick (-1 where the class has no marginals).
    cell: (k,) int32 the measured cell of a single-query pick, -1 for a whole marginal.
    index: (k, width) int32 positions of the measured values in the class's flat answers (a
        marginal shorter than `width` is padded with n_queries, one past the end).
    counts: (k, width) noisy counts, padding included; None when the mechanism measures nothing
        (DualQuery, FEM: the picks themselves are what the family learns from).
    sigma: () the noise scale of `counts`, in counts, or (k, width) one per cell (a compressed
        domain's merged cell sums several draws); None when nothing was measured.
    query_class: which query class of the mechanism the picks come from (a Python int).
    """

    chosen: Array
    marginal: Array | None = None
    cell: Array | None = None
    index: Array | None = None
    counts: Array | None = None
    sigma: Array | None = None
    query_class: int = 0


class Family:
    """The base of every family (see the module docstring for the units).

    Class attributes, with their defaults:
        jittable: the family's methods trace under `jax.jit` (False: they run on the host, as
            Private-PGM's estimator does, and the mechanism runs as a Python loop).
        needs_measurements: `record` reads `Measured.counts` (False: the picks alone, as the
            game-based families of DualQuery and FEM).
        candidates: the kinds of pick `record` understands.
        relations: the neighbouring relations it can fit under (replace-one only for a family
            that needs the public n to form fractions).
        several_classes: it can be bound to more than one query class (RAP++'s mixed rows).
        numeric: it fits numeric columns as real values (RAP++'s mixed rows); the others need
            categorical data (a table schema's numeric columns binned).
        releases: "records" (synthetic records) or "answers" (the noisy answers themselves).
        short_rounds: its rounds are closed-form updates whose run, on a small model, is short
            next to their compile (PEP's and MWEM's histograms), so `jaxdp.run` compiles them
            for a short run where the model is small (`jaxdp.loop.SHORT_RUN_WORK`).
        polished: its records are drawn from a mixture of product rows whose workload answers
            are `output_answers`; a marginal of the records then adds up the rounding of every
            row, so `jaxdp.adaptive`'s release moves them toward those answers
            (`jaxdp.families.polish`; categorical records of one query class only). False for
            the others: histograms and multisets (their records round one table's counts),
            Independent's product, RAP++'s mixed rows (numeric columns) and the families
            `Annealed` drives, which polishes whatever the family.
    """

    jittable: ClassVar[bool] = True
    needs_measurements: ClassVar[bool] = True
    candidates: ClassVar[tuple[str, ...]] = (MARGINALS, QUERIES)
    relations: ClassVar[tuple[Neighboring, ...]] = (Neighboring.REPLACE_ONE,)
    several_classes: ClassVar[bool] = False
    numeric: ClassVar[bool] = False
    releases: ClassVar[str] = "records"
    short_rounds: ClassVar[bool] = False
    polished: ClassVar[bool] = False

    def bind(
        self,
        classes: tuple[ClassShape, ...],
        *,
        domain: Domain,
        public: Dataset | None,
        n_records: int | None,
    ) -> Family:
        """This family fitted to the mechanism's query classes (validated on the host).

        Args:
            classes: one `ClassShape` per query class.
            domain: the private data's declared domain.
            public: a public dataset over the same domain, if the mechanism was given one.
            n_records: the record count under replace-one (public); None under add-remove.
        """
        raise NotImplementedError

    def init(self, key: Key) -> Any:
        """The starting model (public randomness only)."""
        raise NotImplementedError

    def answers(self, model: Any) -> Array | tuple[Array, ...]:
        """The current model's answers to the queries (fractions under replace-one, counts under
        add-remove): (n_queries,) for one class, or a tuple with one per class."""
        raise NotImplementedError

    def candidate_answers(self, model: Any, eligible: Any) -> Array:
        """`answers` of the marginals a filter rule may pick next (`eligible`, (n_marginals,)
        bool); a family for which the others are costly (Private-PGM's) may leave them at 0.
        Host code, called outside jit."""
        del eligible
        return self.answers(model)

    def record(self, model: Any, measured: Measured, current: Array, r: Array) -> Any:
        """The model with this round's measurements recorded (cheap; no fitting).

        Args:
            model: the family's state.
            measured: the round's picks and measurements (of class `measured.query_class`).
            current: that class's answers before this round (what the selection scored).
            r: this class's round index (the round index when there is one class).
        """
        raise NotImplementedError

    def update(self, model: Any, t: Array, key: Key, last: Array | bool) -> tuple[Any, Array]:
        """(the model refitted to every measurement so far, its optimiser steps this round).

        Args:
            t: the round index; key: the round's UPDATE stream key (public randomness, e.g. for
                tie-breaking or perturbations); last: whether this is the run's last round.
        """
        raise NotImplementedError

    def output_answers(self, model: Any) -> Array:
        """(n_queries,) the answers of the released distribution (of the first query class)."""
        raise NotImplementedError

    def release(self, model: Any, key: Key, rows: int) -> Any:
        """`rows` synthetic records ((rows, n_attributes) int32 codes; RAP++'s families also return
        the numeric columns), or for a family that releases answers, the noisy answers."""
        raise NotImplementedError

    def conditioned(self, model: Any, weights: dict[int, Any]) -> tuple[Any, float] | None:
        """(the model whose release is this model's conditional given evidence, the evidence's
        probability under the model), or None where the family has no exact conditional (a
        saved model then samples it by rejection, `jaxdp.models`).

        Args:
            weights: attribute -> (size,) each value's weight in [0, 1] (0 rules it out).
        """
        del model, weights
        return None

    def default_rows(self, model: Any) -> int | None:
        """Records to release when the caller names none under add-remove: an estimate of the
        record count from the released measurements (host code; None: the family has none)."""
        return None

    def eligible(self, model: Any, budget_used: float) -> Any:
        """(n_candidates,) bool the marginals a privacy-filter rule may pick next, after a
        fraction `budget_used` of the budget is spent (AIM's model-size filter); None: all."""
        return None


def single_class(classes: tuple[ClassShape, ...], name: str) -> ClassShape:
    """The one query class of a family that fits one.

    Raises:
        ValueError: several classes.
    """
    if len(classes) != 1:
        raise ValueError(f"the {name} family fits one query class, got {len(classes)}")
    return classes[0]
