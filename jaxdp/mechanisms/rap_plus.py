"""RAP++ (Vietri et al. 2022): relaxed adaptive projection over mixed categorical/numeric data,
as a preset of `jaxdp.adaptive`.

    classes:  categorical marginals, mixed marginals (Definition 3), linear thresholds
              (Definition 4), each with its rounds, picks per round and budget weight
    for t = 1..T (the classes' rounds interleaved evenly):
              select K_c candidates of the round's class by report-noisy-top-K (Definition 9):
              marginals by their largest cell error, threshold queries by their error
              measure their counts (Gaussian), / n
              project: Algorithm 1 on every measurement so far (annealed tempered sigmoids)
    output:   records drawn from the mixed relaxed rows (numeric columns real, never binned)

Numeric columns are never binned: relaxed rows carry one real value per numeric column (in the
normalised [0, 1] of the declared public bounds) beside per-attribute softmax blocks
(`jaxdp.families.MixedRows`). The selections are `jaxdp.selection.MaxError` and `QueryError` with
the one-shot top-K primitive. With only categorical classes there is nothing to anneal and one
stage runs: RAP with softmax rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.domain import DataError, Dataset
from jaxdp.families.mixed import MixedRows
from jaxdp.keys import fold_in, require_key
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.query_classes import QueryClass
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import (
    LinearThresholdQueries,
    MarginalWorkload,
    MixedMarginalQueries,
    RandomLinearThresholds,
)
from jaxdp.selection import MaxError, QueryError
from jaxdp.types import Key

KINDS = ("categorical_marginals", "mixed_marginals", "linear_thresholds")


def categorical_marginals(
    workload: MarginalWorkload, *, rounds: int, per_round: int = 1, weight: float = 1.0
) -> QueryClass:
    """Marginals over the categorical attributes, selected whole (score: largest cell error)."""
    return QueryClass(workload, MaxError(k=per_round, top_k=True), rounds, weight, "categorical_marginals")


def mixed_marginals(
    queries: MixedMarginalQueries, *, rounds: int, per_round: int = 10, weight: float = 1.0
) -> QueryClass:
    """Mixed-marginal queries (Definition 3), selected one query at a time (score: |error|)."""
    _require(queries, MixedMarginalQueries, "mixed_marginals")
    return QueryClass(queries, QueryError(k=per_round, top_k=True), rounds, weight, "mixed_marginals")


def linear_thresholds(
    queries: LinearThresholdQueries | RandomLinearThresholds,
    *,
    rounds: int,
    per_round: int = 10,
    weight: float = 1.0,
) -> QueryClass:
    """Class-conditional linear threshold queries (Definition 4); a key-defined family is
    materialised (its candidates are selected by index)."""
    _require(queries, LinearThresholdQueries | RandomLinearThresholds, "linear_thresholds")
    return QueryClass(queries, QueryError(k=per_round, top_k=True), rounds, weight, "linear_thresholds")


def _require(queries, expected, kind: str) -> None:
    if not isinstance(queries, expected):
        raise TypeError(f"{kind} takes {expected}, got {type(queries).__name__}")


def rap_plus_plus(
    data: Dataset,
    classes: Sequence[QueryClass] | MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    n_rows: int = 500,
    sigma_start: float = 8.0,
    stages: int = 8,
    gamma: float = 1e-4,
    max_stage_steps: int = 25,
    learning_rate: float = 0.05,
    alpha: float = 0.5,
    rounds: int | None = None,
    marginals_per_round: int = 1,
    conversion: str = "exact",
    noise: str = "discrete",
) -> Adaptive:
    """Build RAP++ (Algorithm 2 with the projection of Algorithm 1).

    Args:
        data: the private records (categorical and numeric columns).
        classes: the query classes (see `categorical_marginals`, `mixed_marginals`,
            `linear_thresholds`; `default_classes` builds the paper's set), or a marginal
            workload alone (then RAP++ is RAP with softmax rows: `rounds` rounds of
            `marginals_per_round` marginals).
        epsilon, delta, rho, conversion: the budget (see `jaxdp.independent`).
        n_rows, sigma_start, stages, gamma, max_stage_steps, learning_rate: the relaxed rows and
            their annealed projection (see `jaxdp.families.MixedRows`).
        alpha: share of each round's budget weight for selection.
        rounds, marginals_per_round: only when `classes` is a workload.
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).

    Privacy:
        Relation replace-one (n public; answers are fractions). Class c gets rho_c = rho w_c /
        sum(w) spread over its T_c rounds; each round splits rho_c / T_c between selection
        (alpha^2 share) and measurement ((1 - alpha)^2 share) as in Adaptive Measurements.
        Selection: top-K_c without replacement (stream SELECT), K_c exponential mechanisms,
        K_c epsilon^2 / 8 zCDP, on a score of sensitivity 1/n: a marginal's largest cell error
        or a single query's |error| in fractions, computed exactly in int32 grid steps under
        noise="discrete" (`jaxdp.selection`). Measurement: one Gaussian (stream MEASURE) of the
        K_c picks' counts with L2 sensitivity sqrt(2 K_c) for marginals and sqrt(K_c) for single
        queries; the noisy counts are divided by n. The projection, its stopping rule and
        sampling read only noisy answers: post-processing.
    """
    if isinstance(classes, MarginalWorkload):
        classes = [
            categorical_marginals(
                classes, rounds=10 if rounds is None else rounds, per_round=marginals_per_round
            )
        ]
    elif rounds is not None:
        raise ValueError("rounds is set per query class; pass it to the class constructors")
    classes = list(classes)
    if not classes:
        raise ValueError("rap++ needs at least one query class")
    labelled = [
        dataclasses.replace(c, label=f"{c.label or 'class'}[{i}]") if isinstance(c, QueryClass) else c
        for i, c in enumerate(classes)
    ]
    family = MixedRows(
        n_rows=n_rows,
        sigma_start=sigma_start,
        stages=stages,
        gamma=gamma,
        max_stage_steps=max_stage_steps,
        learning_rate=learning_rate,
    )
    return adaptive(
        data,
        classes=labelled,
        family=family,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        alpha=alpha,
        conversion=conversion,
        noise=noise,
        name="rap++",
    )


# -- the paper's query classes --------------------------------------------------------------------


def default_classes(
    data_domain,
    key: Key,
    *,
    workload: MarginalWorkload | None = None,
    marginal_rounds: int | None = None,
    mixed_candidates: int = 2000,
    mixed_rounds: int = 20,
    linear_candidates: int = 2000,
    linear_rounds: int = 20,
    per_round: int = 10,
) -> list[QueryClass]:
    """Section 5.1's classes from a declared domain (public; nothing is read from the data).

    - categorical marginals: `workload`, or with a target every (feature, feature, target)
      marginal (class-conditional CM), else all 2-way marginals;
      rounds default to (categorical attributes - 1), as in the paper;
    - mixed marginals (if numeric columns): `mixed_candidates` random queries of one numeric
      prefix threshold x one value of the target (of any categorical attribute if no target);
    - linear thresholds (if numeric columns): `linear_candidates` random class-conditional
      queries on the target (on every categorical attribute if no target).

    Args:
        data_domain: the declared `Domain`.
        key: a public key for the random query sets (a constant is fine: queries are public).
    """
    from jaxdp.queries import all_kway, from_cliques, random_linear_thresholds

    key = require_key(key)
    sizes, n_numeric = data_domain.sizes, len(data_domain.numeric)
    cat_names = [a.name for a in data_domain.categorical]
    target = data_domain.target
    if not sizes:
        raise DataError("rap++ needs at least one categorical column")
    if workload is None:
        if target is not None and len(sizes) >= 3:
            y = cat_names.index(target)
            others = [a for a in range(len(sizes)) if a != y]
            cliques = [tuple(sorted((a, b, y))) for i, a in enumerate(others) for b in others[i + 1 :]]
            workload = from_cliques(sizes, cliques)
        else:
            workload = all_kway(sizes, min(2, len(sizes)))
    rounds = marginal_rounds if marginal_rounds is not None else max(1, min(len(sizes) - 1, len(workload)))
    out = [categorical_marginals(workload, rounds=rounds, per_round=1)]
    if n_numeric:
        labels = [cat_names.index(target)] if target is not None else list(range(len(sizes)))
        mixed = _target_prefix_queries(fold_in(key, 0), sizes, n_numeric, mixed_candidates, labels)
        out.append(mixed_marginals(mixed, rounds=mixed_rounds, per_round=per_round))
        linear = random_linear_thresholds(fold_in(key, 1), sizes, n_numeric, linear_candidates, labels)
        out.append(linear_thresholds(linear, rounds=linear_rounds, per_round=per_round))
    return out


def _target_prefix_queries(key, sizes, n_numeric, n_queries, labels) -> MixedMarginalQueries:
    """Random 2-way mixed marginals 1{x_label = y and x_j <= tau}: label uniform over `labels`,
    y uniform over its values, j uniform over the numeric columns, tau ~ U[0, 1]."""
    u = jax.random.uniform(key, (n_queries, 4))
    labels_arr = np.asarray(labels, np.int32)
    u = np.asarray(u)
    label = labels_arr[np.minimum((u[:, 0] * len(labels)).astype(int), len(labels) - 1)]
    size = np.asarray(sizes, np.int32)[label]
    value = np.minimum((u[:, 1] * size).astype(np.int32), size - 1)
    attr = np.minimum((u[:, 2] * n_numeric).astype(np.int32), n_numeric - 1)
    return MixedMarginalQueries(
        jnp.asarray(label[:, None], jnp.int32),
        jnp.asarray(value[:, None], jnp.int32),
        jnp.asarray(attr[:, None], jnp.int32),
        jnp.asarray(u[:, 3:4], jnp.float32),
        tuple(int(s) for s in sizes),
        int(n_numeric),
    )


def _registered(
    data: Dataset, workload: MarginalWorkload | None, *, rounds: int | None = None, **budget
) -> Adaptive:
    """RAP++ over Section 5.1's query classes: categorical marginals (`workload`, or every
    feature x feature x target marginal when None), mixed marginals and linear thresholds. The
    random threshold queries are public: drawn from a fixed query-set key, not the noise key."""
    classes = default_classes(data.domain, jax.random.key(0), workload=workload, marginal_rounds=rounds)
    return rap_plus_plus(data, classes, **budget)


register("rap++", MechanismSpec(_registered, own_workload=True, real_numeric=True))
