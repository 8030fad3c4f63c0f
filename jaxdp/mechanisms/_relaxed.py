"""The Adaptive Measurements loop over differentiable families (relaxed rows, generators),
shared by RAP, RAP-softmax, GEM and GEM-Pub.

Each round: select `marginals_per_round` marginals with large error under the current relaxed
answers (exponential mechanism, or top-k without replacement for several), measure their counts
with one Gaussian mechanism (exact discrete Gaussian noise by default), then fit the family to
every measurement so far with Adam (an L2 loss, or GEM's L1 loss over the measured queries whose
error is at least the stopping threshold gamma, until every measured error is below gamma or
`max_steps` steps were taken). All buffers have
fixed shapes: the whole inner loop is one compiled `lax.while_loop` inside the round's scan.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxdp import _checks, noise, selection
from jaxdp.accounting import (
    MEASURE_PRIMITIVE,
    SELECT_PRIMITIVE,
    TOP_K_PRIMITIVE,
    Plan,
    PlannedCharge,
    gumbel_scale,
)
from jaxdp.domain import Dataset
from jaxdp.families.generator import Generator
from jaxdp.families.histogram import MarginalPadding
from jaxdp.families.relaxed import RelaxedRows
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import (
    as_relation,
    count_sigma,
    count_unit,
    fractions,
    make_plan,
    private_counts,
    require_categorical,
    round_shares,
)
from jaxdp.noise import NOISES
from jaxdp.queries import (
    MarginalWorkload,
    ProductQueries,
    product_query_answers,
    relaxed_marginals,
    workload_queries,
)
from jaxdp.types import Array, Charge, Key, Neighboring, Sensitive, pytree_dataclass, static_field

LOSSES = ("l1", "l2")


class RelaxedState(NamedTuple):
    """params: the family's parameters; ema_params: EMA of the parameters over the second half
    of the rounds; latent: the family's fixed latent input; noisy_answers, measured:
    (n_queries,) measurements so far (clipped to [0, 1]) and their mask; eligible:
    (n_marginals,) not yet measured; error_ema: EMA of the max measured error (GEM's gamma is a
    fraction of it); rounds_done; rho_spent."""

    params: Any
    ema_params: Any
    latent: Array
    noisy_answers: Array
    measured: Array
    eligible: Array
    error_ema: Array
    rounds_done: Array
    rho_spent: Array


class RelaxedInfo(NamedTuple):
    """charges: (selection, measurement); selected: (marginals_per_round,) marginals measured;
    inner_steps: optimiser steps taken this round."""

    charges: tuple[Charge, Charge]
    selected: Array
    inner_steps: Array


@pytree_dataclass
class RelaxedAdaptive:
    """RAP / RAP-softmax / GEM / GEM-Pub; build with their factories.

    `answers` holds the workload's true int32 counts; scores and fits use fractions (counts / n,
    n public). `sigma` and `measure_sensitivity` are in counts; `noise` picks the primitives
    ("discrete": exact, the default; "float": float32 noise, see `jaxdp.noise`).

    Privacy:
        Relation replace-one (n public; fractions). Each of `rounds` rounds runs one selection of
        k = marginals_per_round marginals (score: max cell error in fractions, sensitivity 1/n;
        one exponential mechanism for k = 1, k of them without replacement otherwise; stream
        SELECT) and one Gaussian measurement of the k marginals' counts together (L2 sensitivity
        sqrt(2 k) counts; stream MEASURE), divided by n afterwards (post-processing). With
        epsilon_0 = sqrt(2 rho / (T (alpha^2 + (1 - alpha)^2))), selection gets a share alpha^2
        and measurement (1 - alpha)^2 of each round's rho / T. Fitting, the stopping threshold
        (computed from noisy answers only) and sampling are post-processing.
    """

    answers: Sensitive
    family: RelaxedRows | Generator
    padding: MarginalPadding
    queries: ProductQueries | None
    public_answers: Array | None
    public_mask: Array | None
    workload: MarginalWorkload = static_field()
    n_records: int = static_field()
    rounds: int = static_field()
    marginals_per_round: int = static_field()
    select_scale: float = static_field()
    select_sensitivity: float = static_field()
    sigma: float = static_field()
    measure_sensitivity: float = static_field()
    learning_rate: float = static_field()
    final_learning_rate: float | None = static_field()
    max_steps: int = static_field()
    loss: str = static_field()
    top_errors: int | None = static_field()
    rerank_every: int = static_field()
    gamma_fraction: float = static_field()
    ema_beta: float | None = static_field()
    pretrain_steps: int = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    relation: Neighboring = static_field(default=Neighboring.REPLACE_ONE)

    def init(self, key: Key) -> RelaxedState:
        """Random parameters and latent batch (public randomness), pretrained on the public
        answers first when the mechanism has them (GEM-Pub: no private data is touched)."""
        require_key(key)
        params = self.family.init_params(jax.random.fold_in(key, 0))
        latent = self.family.latent(jax.random.fold_in(key, 1))
        if self.public_answers is not None:
            params, _ = self._fit(
                params,
                latent,
                self.public_answers,
                self.public_mask,
                jnp.zeros((), jnp.float32),
                self.learning_rate,
                self.pretrain_steps,
            )
        n_queries = self.workload.n_queries
        return RelaxedState(
            params=params,
            ema_params=params,
            latent=latent,
            noisy_answers=jnp.zeros(n_queries, jnp.float32),
            measured=jnp.zeros(n_queries, bool),
            eligible=jnp.ones(len(self.workload), bool),
            error_ema=jnp.zeros((), jnp.float32),
            rounds_done=jnp.zeros((), jnp.int32),
            rho_spent=jnp.zeros((), jnp.float32),
        )

    def step(self, state: RelaxedState, key: Key) -> tuple[RelaxedState, RelaxedInfo]:
        require_key(key)
        t = state.rounds_done
        current = self.family.answers(state.params, state.latent)
        chosen, select_charge = self._select(stream_key(key, Stream.SELECT), current, state.eligible)
        index = self.padding.gather[chosen]  # padding points one past the end: dropped below
        true = self.answers.map(lambda a: jnp.concatenate([a, jnp.zeros(1, a.dtype)])[index])
        noisy_counts, measure_charge = noise.measure_counts(
            stream_key(key, Stream.MEASURE),
            true,
            sigma=self.sigma,
            sensitivity=self.measure_sensitivity,
            noise=self.noise,
        )
        noisy = noisy_counts * count_unit(self.relation, self.n_records)  # fractions: post-processing
        noisy_answers = state.noisy_answers.at[index].set(jnp.clip(noisy, 0.0, 1.0), mode="drop")
        measured = state.measured.at[index].set(True, mode="drop")
        max_error = jnp.max(jnp.where(measured, jnp.abs(noisy_answers - current), 0.0))
        error_ema = jnp.where(t == 0, max_error, 0.5 * state.error_ema + 0.5 * max_error)
        params, steps = self._fit(
            state.params,
            state.latent,
            noisy_answers,
            measured,
            self.gamma_fraction * error_ema,
            self._round_learning_rate(t),
            self.max_steps,
        )
        new = RelaxedState(
            params=params,
            ema_params=self._ema(state.ema_params, params, t),
            latent=state.latent,
            noisy_answers=noisy_answers,
            measured=measured,
            eligible=state.eligible.at[chosen].set(False),
            error_ema=error_ema,
            rounds_done=t + 1,
            rho_spent=state.rho_spent + self.plan.rho_planned / self.rounds,
        )
        return new, RelaxedInfo((select_charge, measure_charge), chosen, steps)

    def _select(self, key: Key, current: Array, eligible: Array) -> tuple[Array, Charge]:
        """The round's marginals, by their largest cell error in fractions (the marginal trick).

        Privacy:
            Reads the true counts; one exponential mechanism (k = 1) or k without replacement.
        """
        # fractions exactly as `marginal_fractions` forms them (counts / n)
        scores = self.answers.map(
            lambda c: selection.max_cell_errors(c / self.n_records, current, self.workload)
        )
        if self.marginals_per_round == 1:
            chosen, charge = noise.select(
                key,
                scores,
                scale=self.select_scale,
                sensitivity=self.select_sensitivity,
                noise=self.noise,
                mask=eligible,
            )
            return chosen[None], charge
        return noise.select_top_k(
            key,
            scores,
            k=self.marginals_per_round,
            scale=self.select_scale,
            sensitivity=self.select_sensitivity,
            noise=self.noise,
            mask=eligible,
        )

    def _round_learning_rate(self, t: Array) -> Array:
        """GEM anneals the starting rate over the rounds (cosine down to `final_learning_rate`)."""
        if self.final_learning_rate is None:
            return jnp.asarray(self.learning_rate, jnp.float32)
        lo, hi = self.final_learning_rate, self.learning_rate
        return lo + 0.5 * (hi - lo) * (1 + jnp.cos(jnp.pi * t.astype(jnp.float32) / self.rounds))

    def _objective(self, probs: Array, targets: Array, mask: Array, gamma: Array):
        """(loss as a function of the probabilities, whether some masked error is >= gamma).

        "l2": sum of squared errors over the masked queries (every step needs all answers).
        "l1": mean absolute error over the `top_errors` largest masked errors >= gamma at
        `probs` (GEM's update, as in its official code). That loss touches only those queries,
        so it and its gradient go through the cheap gather kernel; the full answers are needed
        only to rank the errors.
        """
        if self.loss == "l2":

            def squared(pr):
                return jnp.sum(jnp.where(mask, relaxed_marginals(pr, self.family.plan) - targets, 0.0) ** 2)

            return squared, jnp.ones((), bool)
        error = jnp.where(mask, relaxed_marginals(probs, self.family.plan) - targets, 0.0)
        active = mask & (jnp.abs(error) >= gamma)
        top_error, top = jax.lax.top_k(jnp.where(active, jnp.abs(error), -1.0), self.top_errors)
        chosen = top_error >= 0
        queries, top_targets = self.queries.take(top), targets[top]

        def absolute(pr):
            err = product_query_answers(pr, queries) - top_targets
            return jnp.sum(jnp.abs(err) * chosen) / jnp.maximum(jnp.sum(chosen), 1)

        return absolute, jnp.any(active)

    def _fit(self, params, latent, targets, mask, gamma, learning_rate, max_steps):
        """A fresh Adam on the loss over the `mask`ed queries until no error is >= gamma or
        `max_steps` steps; (params, steps). The L1 loss's top errors are re-ranked every
        `rerank_every` steps (1: every step, as the paper). Under GEM's schedule the rate also
        anneals to 0 by a cosine over `max_steps`."""
        import optax  # deferred: only fitting needs it, and `import jaxdp` stays light

        optimizer = optax.scale_by_adam()
        family = self.family

        def cond(carry):
            return (carry[2] < max_steps) & carry[3]

        def body(carry):
            p, s, i, _ = carry
            objective, active = self._objective(family.probabilities(p, latent), targets, mask, gamma)

            def gradient_step(_, inner):
                p, s, i = inner
                probs, pullback = jax.vjp(lambda q: family.probabilities(q, latent), p)
                (grads,) = pullback(jax.grad(objective)(probs))
                updates, s_new = optimizer.update(grads, s, p)
                rate = learning_rate
                if self.final_learning_rate is not None:  # GEM's schedule: anneal within the round
                    rate = rate * 0.5 * (1 + jnp.cos(jnp.pi * i.astype(jnp.float32) / max_steps))
                p_new = family.constrain(jax.tree_util.tree_map(lambda a, u: a - rate * u, p, updates))
                go = active & (i < max_steps)

                def keep(old, new):
                    return jax.tree_util.tree_map(lambda a, b: jnp.where(go, b, a), old, new)

                return keep(p, p_new), keep(s, s_new), i + go.astype(jnp.int32)

            p, s, i = jax.lax.fori_loop(0, self.rerank_every, gradient_step, (p, s, i))
            return p, s, i, active

        init = (params, optimizer.init(params), jnp.zeros((), jnp.int32), jnp.ones((), bool))
        params, _, steps, _ = jax.lax.while_loop(cond, body, init)
        return params, steps

    def _ema(self, ema, params, t):
        if self.ema_beta is None:
            return params
        start = self.rounds // 2
        blended = jax.tree_util.tree_map(
            lambda e, p: self.ema_beta * e + (1 - self.ema_beta) * p, ema, params
        )
        return jax.tree_util.tree_map(
            lambda p, b, e: jnp.where(t == start, p, jnp.where(t > start, b, e)), params, blended, ema
        )

    def output_params(self, state: RelaxedState):
        """The released parameters: the EMA of the second half of the rounds, or the last."""
        return state.params if self.ema_beta is None else state.ema_params

    def relaxed_answers(self, state: RelaxedState) -> Array:
        """(n_queries,) answers of the output distribution itself (before sampling records)."""
        return self.family.answers(self.output_params(state), state.latent)

    def release(self, state: RelaxedState, key: Key, rows: int | None = None) -> Array:
        """Sample (rows, n_attributes) int32 records from the output distribution (rows default n)."""
        require_key(key)
        rows = self.n_records if rows is None else _checks.positive_int(rows, "rows")
        return self.family.sample(key, self.output_params(state), state.latent, rows)


def build(
    name: str,
    data: Dataset,
    workload: MarginalWorkload,
    family: RelaxedRows | Generator,
    *,
    epsilon: float | None,
    delta: float | None,
    rho: float | None,
    rounds: int,
    alpha: float,
    marginals_per_round: int,
    learning_rate: float,
    max_steps: int,
    loss: str,
    gamma_fraction: float,
    ema_beta: float | None,
    top_errors: int | None = None,
    rerank_every: int = 1,
    final_learning_rate: float | None = None,
    relation: Neighboring | str,
    conversion: str,
    public: Dataset | None = None,
    pretrain_steps: int = 0,
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> RelaxedAdaptive:
    """Validate, calibrate and build a RelaxedAdaptive (see the rap/gem factories)."""
    plan = make_plan(epsilon, delta, rho, conversion)
    _checks.one_of(noise, NOISES, "noise")
    if as_relation(relation) is not Neighboring.REPLACE_ONE:
        raise ValueError(f"{name} measures normalised answers: relation must be 'replace-one' (n public)")
    require_categorical(data, name)
    if workload.sizes != data.domain.sizes:
        raise ValueError("workload was built for a different domain than the data's")
    rounds = _checks.positive_int(rounds, "rounds")
    k = _checks.positive_int(marginals_per_round, "marginals_per_round")
    alpha = _checks.fraction(alpha, "alpha", allow_one=False)
    _checks.positive_finite(learning_rate, "learning_rate")
    _checks.positive_int(max_steps, "max_steps")
    _checks.one_of(loss, LOSSES, "loss")
    if loss == "l1":
        top_errors = min(_checks.positive_int(top_errors, "top_errors"), workload.n_queries)
    if rounds * k > len(workload):
        raise ValueError(
            f"rounds x marginals_per_round = {rounds * k} exceeds the {len(workload)} marginals of the "
            "workload (each is measured at most once)"
        )
    public_answers, public_mask = (None, None) if public is None else _public_targets(public, data, workload)
    n = len(data)
    answers = private_counts(data, workload, mesh)
    rho_select, rho_measure = round_shares(plan.rho_budget, rounds, alpha)
    select_sensitivity = selection.score_sensitivity(Neighboring.REPLACE_ONE, n)
    # Counts of k marginals: a replaced record leaves one cell and enters another of each.
    measure_sensitivity = math.sqrt(2.0 * k)
    select_scale = gumbel_scale(select_sensitivity, rho_select, count=k)
    sigma = count_sigma(measure_sensitivity, rho_measure, noise)
    primitive = (SELECT_PRIMITIVE if k == 1 else TOP_K_PRIMITIVE)[noise]
    plan = (
        plan.with_charge(
            PlannedCharge("select", primitive, select_sensitivity, select_scale, count=k, times=rounds)
        )
        .with_charge(
            PlannedCharge("measure", MEASURE_PRIMITIVE[noise], measure_sensitivity, sigma, times=rounds)
        )
        .check()
    )
    return RelaxedAdaptive(
        answers=answers,
        family=family,
        padding=MarginalPadding.of(workload),
        queries=workload_queries(workload) if top_errors is not None else None,
        public_answers=public_answers,
        public_mask=public_mask,
        workload=workload,
        n_records=n,
        rounds=rounds,
        marginals_per_round=k,
        select_scale=select_scale,
        select_sensitivity=select_sensitivity,
        sigma=sigma,
        measure_sensitivity=measure_sensitivity,
        learning_rate=float(learning_rate),
        final_learning_rate=final_learning_rate,
        max_steps=int(max_steps),
        loss=loss,
        top_errors=top_errors,
        rerank_every=_checks.positive_int(rerank_every, "rerank_every"),
        gamma_fraction=float(gamma_fraction),
        ema_beta=ema_beta,
        pretrain_steps=int(pretrain_steps),
        plan=plan,
        noise=noise,
    )


def _public_targets(public: Dataset, data: Dataset, workload: MarginalWorkload) -> tuple[Array, Array]:
    """The public data's answers to every workload marginal it covers, and which those are.

    The public table may hold a subset of the private attributes (the incomplete-domain case):
    marginals over attributes it lacks are masked out of pretraining.
    """
    private_names = [a.name for a in data.domain.categorical]
    public_names = [a.name for a in public.domain.categorical]
    for name in public_names:
        if name not in private_names:
            raise ValueError(f"public column {name!r} is not an attribute of the private domain")
        if public.domain[name].size != data.domain[name].size:
            raise ValueError(f"public column {name!r} has a different size than in the private domain")
    if sorted(public_names, key=private_names.index) != public_names:
        raise ValueError("public columns must appear in the same order as in the private domain")
    to_public = {private_names.index(n): j for j, n in enumerate(public_names)}
    covered = [all(a in to_public for a in c) for c in workload.cliques]
    if not any(covered):
        raise ValueError("the public data covers none of the workload's marginals")
    sub = MarginalWorkload(
        public.domain.sizes,
        tuple(tuple(to_public[a] for a in c) for c, ok in zip(workload.cliques, covered, strict=True) if ok),
    )
    sub_answers = np.asarray(fractions(jnp.asarray(public.codes), sub))
    answers = np.zeros(workload.n_queries, np.float32)
    mask = np.zeros(workload.n_queries, bool)
    taken = 0
    for i, ok in enumerate(covered):
        if ok:
            start, cells = workload.offsets[i], workload.cells[i]
            answers[start : start + cells] = sub_answers[sub.offsets[taken] : sub.offsets[taken] + cells]
            mask[start : start + cells] = True
            taken += 1
    return jnp.asarray(answers), jnp.asarray(mask)
