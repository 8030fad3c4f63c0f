"""Differentiable families as parts of `jaxdp.adaptive`: relaxed rows (RAP, RAP-softmax) and a
generator network (GEM), fitted by Adam (`jaxdp.families.fit`) to every measurement so far.

- `RAP`: n' relaxed rows, the squared error over the measured queries (clipped rows; or
  per-attribute softmax rows, RAP-softmax);
- `GEM`: a generator G_theta(z) on a fixed latent batch, the mean absolute error over the
  `top_errors` largest measured errors of at least gamma = `gamma_fraction` x EMA(0.5) of the
  measured max errors, re-ranked every `rerank_every` steps; a cosine schedule of the rate over
  the rounds and within each; an EMA of the second half of the rounds' weights as output; and,
  with public data, pretraining on the public answers (GEM-Pub).

Past `jaxdp.queries.measured.DENSE_MAX_QUERIES` counting queries (14-attribute ADULT's 3-way
marginals hold 20.9M) RAP's loss and GEM's ranking read the measured marginals alone
(`measured_only`), not every cell of the workload at every step.

Post-processing only: fits read released measurements (`Measured`) and public data, never the
private data.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.domain import Dataset, Domain
from jaxdp.families.base import ClassShape, Family, Measured, single_class
from jaxdp.families.fit import fit
from jaxdp.families.generator import Generator
from jaxdp.families.relaxed import RelaxedRows
from jaxdp.keys import fold_in
from jaxdp.queries import (
    MarginalWorkload,
    ProductQueries,
    marginal_fractions,
    product_query_answers,
    relaxed_marginals,
    workload_queries,
)
from jaxdp.queries import measured as measured_path
from jaxdp.types import Array, Key, pytree_dataclass, static_field


class FittedModel(NamedTuple):
    """params: the family's parameters; ema_params: their EMA over the second half of the
    rounds (GEM); latent: the fixed latent input; noisy_answers, measured: (n_queries,) the
    measurements so far (clipped to [0, 1]) and their mask; error_ema: EMA of the largest
    measured error (GEM's gamma is a fraction of it)."""

    params: Any
    ema_params: Any
    latent: Array
    noisy_answers: Array
    measured: Array
    error_ema: Array


@pytree_dataclass
class _Fitted(Family):
    """A differentiable representation fitted to the measurements (fractions) by `fit` each round."""

    representation: RelaxedRows | Generator | None = None
    public_answers: Array | None = None
    public_mask: Array | None = None
    rounds: int = static_field(default=0)
    unit: float = static_field(default=1.0)
    learning_rate: float = static_field(default=1e-2)
    max_steps: int = static_field(default=200)
    # the workload when it is too large to answer whole at every step (`measured_path.by_marginal`):
    # fits then read the measured marginals only; None: the dense kernel
    measured_only: MarginalWorkload | None = static_field(default=None)

    # overridden by GEM
    final_learning_rate = None
    ema_beta = None
    gamma_fraction = 0.0
    pretrain_steps = 0
    rerank_every = 1

    def _representation(self, workload: MarginalWorkload) -> RelaxedRows | Generator:
        raise NotImplementedError

    def _checked(self, workload: MarginalWorkload):
        """This part with its own settings validated (and workload-derived fields filled)."""
        return self

    def bind(
        self,
        classes: tuple[ClassShape, ...],
        *,
        domain: Domain,
        public: Dataset | None,
        n_records: int | None,
    ):
        """This family over the workload, pretrained on `public`'s answers when given (the
        measurements land in the flat answers whatever the picks are)."""
        shape = single_class(classes, type(self).__name__)
        workload: MarginalWorkload = shape.queries
        _checks.positive_finite(self.learning_rate, "learning_rate")
        _checks.positive_int(self.max_steps, "max_steps")
        public_answers, public_mask = (
            (None, None) if public is None else _public_targets(public, domain, workload)
        )
        checked = self._checked(workload)
        return dataclasses.replace(
            checked,
            representation=checked._representation(workload),
            public_answers=public_answers,
            public_mask=public_mask,
            rounds=shape.rounds,
            unit=1.0 / n_records,
            measured_only=workload if measured_path.by_marginal(workload) else None,
        )

    def init(self, key: Key) -> FittedModel:
        """Random parameters and latent batch (public randomness), pretrained on the public
        answers first when there are some (no private data is touched)."""
        params = self.representation.init_params(fold_in(key, 0))
        latent = self.representation.latent(fold_in(key, 1))
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
        n_queries = self.representation.plan.n_queries
        return FittedModel(
            params=params,
            ema_params=params,
            latent=latent,
            noisy_answers=jnp.zeros(n_queries, jnp.float32),
            measured=jnp.zeros(n_queries, bool),
            error_ema=jnp.zeros((), jnp.float32),
        )

    def answers(self, model: FittedModel) -> Array:
        """(n_queries,) the workload's answers of the current parameters."""
        return self.representation.answers(model.params, model.latent)

    def record(self, model: FittedModel, measured: Measured, current: Array, r: Array) -> FittedModel:
        """The round's measurements (counts / n, clipped to [0, 1]) in the flat answers, and the
        EMA of the largest measured error against the answers before this round (GEM's gamma)."""
        noisy_answers = model.noisy_answers.at[measured.index].set(
            jnp.clip(measured.counts * self.unit, 0.0, 1.0), mode="drop"
        )
        measured_mask = model.measured.at[measured.index].set(True, mode="drop")
        max_error = jnp.max(jnp.where(measured_mask, jnp.abs(noisy_answers - current), 0.0))
        error_ema = jnp.where(r == 0, max_error, 0.5 * model.error_ema + 0.5 * max_error)
        return model._replace(noisy_answers=noisy_answers, measured=measured_mask, error_ema=error_ema)

    def update(self, model: FittedModel, t: Array, key: Key, last: Array | bool):
        """Fit to every measurement so far; (model, Adam steps)."""
        del key, last  # deterministic; the schedule is the same in the last round
        params, steps = self._fit(
            model.params,
            model.latent,
            model.noisy_answers,
            model.measured,
            self.gamma_fraction * model.error_ema,
            self._round_learning_rate(t),
            self.max_steps,
        )
        ema_params = self._ema(model.ema_params, params, t)
        return model._replace(params=params, ema_params=ema_params), steps

    def _round_learning_rate(self, t: Array) -> Array:
        """GEM anneals the starting rate over the rounds (cosine down to `final_learning_rate`)."""
        if self.final_learning_rate is None:
            return jnp.asarray(self.learning_rate, jnp.float32)
        lo, hi = self.final_learning_rate, self.learning_rate
        return lo + 0.5 * (hi - lo) * (1 + jnp.cos(jnp.pi * t.astype(jnp.float32) / self.rounds))

    def _objective(self, probs: Array, targets: Array, mask: Array, gamma: Array, marginals: Array | None):
        """(loss as a function of the probabilities, whether to go on); `marginals`: which
        marginals hold a masked cell, where fits read the measured marginals only (else None)."""
        raise NotImplementedError

    def _fit(self, params, latent, targets, mask, gamma, learning_rate, max_steps):
        representation = self.representation
        marginals = None
        if self.measured_only is not None:
            marginals = measured_path.active_marginals(mask, self.measured_only)

        def refresh(p):
            probs = representation.probabilities(p, latent)
            objective, active = self._objective(probs, targets, mask, gamma, marginals)
            return (lambda q: objective(representation.probabilities(q, latent))), active

        return fit(
            refresh,
            params,
            max_steps=max_steps,
            learning_rate=learning_rate,
            constrain=representation.constrain,
            refresh_every=self.rerank_every,
            anneal=self.final_learning_rate is not None,
        )

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

    def output_params(self, model: FittedModel):
        """The released parameters: the EMA of the second half of the rounds, or the last."""
        return model.params if self.ema_beta is None else model.ema_params

    def output_answers(self, model: FittedModel) -> Array:
        """(n_queries,) answers of the output distribution itself (before sampling records)."""
        return self.representation.answers(self.output_params(model), model.latent)

    def release(self, model: FittedModel, key: Key, rows: int) -> Array:
        """(rows, n_attributes) int32 records drawn from the output distribution."""
        return self.representation.sample(key, self.output_params(model), model.latent, rows)


@pytree_dataclass
class RAP(_Fitted):
    """RAP's relaxed rows: `n_rows` rows fitted by Adam to the squared error over the measured
    queries for `max_steps` steps a round; kept in [0, 1] by clipping (RAP's projection), or
    per-attribute softmax rows (`softmax`, RAP-softmax).

    Args:
        n_rows: n', the relaxed rows (default 1000).
        softmax: False (RAP: rows of one-hot blocks relaxed to [0, 1], clipped after each step)
            or True (RAP-softmax: each attribute block a softmax of free logits).
        learning_rate: Adam's step (default 1e-2).
        max_steps: Adam steps each round, on every measurement so far (default 200).

    `jaxdp.rap` and `jaxdp.rap_softmax` set these from their own arguments (the same defaults,
    except learning_rate 0.1 for RAP-softmax).
    """

    n_rows: int = static_field(default=1000)
    softmax: bool = static_field(default=False)

    @property
    def polished(self) -> bool:
        """Softmax rows are product distributions, polished toward on release; clipped rows need
        not sum to one per attribute, so their answers are no distribution to move records to."""
        return self.softmax

    def _representation(self, workload):
        return RelaxedRows.of(
            workload, _checks.positive_int(self.n_rows, "n_rows"), "softmax" if self.softmax else "clip"
        )

    def _objective(self, probs, targets, mask, gamma, marginals):
        """Sum of squared errors over the masked queries (every step needs all their answers:
        the whole workload's, or the measured marginals' alone)."""
        del probs, gamma
        plan, workload = self.representation.plan, self.measured_only

        def squared(pr):
            if workload is not None:
                return measured_path.squared_error(workload, pr, targets, mask, marginals)
            return jnp.sum(jnp.where(mask, relaxed_marginals(pr, plan) - targets, 0.0) ** 2)

        return squared, jnp.ones((), bool)


@pytree_dataclass
class GEM(_Fitted):
    """GEM's generator and update (module docstring); defaults: the official ADULT example's
    settings except learning_rate 3e-4 and rerank_every 4 (see `jaxdp.gem`).

    Args:
        batch: B, the fixed latent batch: the rows of the synthetic mixture (default 1000).
        hidden: the generator MLP's hidden widths (default (256, 256)); each hidden layer is
            Dense, batch normalisation and ReLU, with its input carried along beside its output.
        latent_dim: the dimension of z (default 128).
        learning_rate: Adam's starting step (default 3e-4); final_learning_rate: the round's
            starting step anneals by a cosine over the rounds down to it (default 1e-5; None
            keeps it), and within a round to 0 over `max_steps`.
        max_steps: T_max, Adam steps a round at most (default 100).
        gamma_fraction: a round stops early once every measured error is below this fraction of
            the EMA of the measured max errors (default 0.5; 0 never stops early).
        top_errors: each step's L1 loss covers the this many largest measured errors (default
            100); rerank_every: steps between re-rankings of them (default 4).
        ema_beta: the output is the EMA (this factor) of the generator's weights over the second
            half of the rounds (default 0.9; None: the last generator).
        pretrain_steps: Adam steps on the public answers first (GEM-Pub; default 0).
        shard_batch: split the latent batch over every device (default False).
    """

    queries: ProductQueries | None = None
    learning_rate: float = static_field(default=3e-4)
    max_steps: int = static_field(default=100)
    batch: int = static_field(default=1000)
    hidden: tuple[int, ...] = static_field(default=(256, 256))
    latent_dim: int = static_field(default=128)
    shard_batch: bool = static_field(default=False)
    gamma_fraction: float = static_field(default=0.5)
    top_errors: int = static_field(default=100)
    rerank_every: int = static_field(default=4)
    final_learning_rate: float | None = static_field(default=1e-5)
    ema_beta: float | None = static_field(default=0.9)
    pretrain_steps: int = static_field(default=0)

    polished: ClassVar[bool] = True

    def _checked(self, workload):
        return dataclasses.replace(
            self,
            queries=workload_queries(workload),
            top_errors=min(_checks.positive_int(self.top_errors, "top_errors"), workload.n_queries),
            rerank_every=_checks.positive_int(self.rerank_every, "rerank_every"),
            hidden=tuple(int(h) for h in self.hidden),
        )

    def _representation(self, workload):
        return Generator.of(
            workload,
            hidden=self.hidden,
            latent_dim=self.latent_dim,
            batch=self.batch,
            shard_batch=self.shard_batch,
        )

    def _objective(self, probs, targets, mask, gamma, marginals):
        """Mean absolute error over the `top_errors` largest masked errors >= gamma at `probs`
        (GEM's update, as in its official code). It touches only those queries, so it and its
        gradient go through the cheap gather kernel; the answers of the workload (or of the
        measured marginals alone) only rank the errors."""
        if self.measured_only is not None:
            top_error, top = measured_path.largest_errors(
                self.measured_only, probs, targets, mask, marginals, gamma, self.top_errors
            )
        else:
            error = jnp.where(mask, relaxed_marginals(probs, self.representation.plan) - targets, 0.0)
            active = mask & (jnp.abs(error) >= gamma)
            top_error, top = jax.lax.top_k(jnp.where(active, jnp.abs(error), -1.0), self.top_errors)
        chosen = top_error >= 0
        queries, top_targets = self.queries.take(top), targets[top]

        def absolute(pr):
            err = product_query_answers(pr, queries) - top_targets
            return jnp.sum(jnp.abs(err) * chosen) / jnp.maximum(jnp.sum(chosen), 1)

        return absolute, jnp.any(chosen)


_fractions = jax.jit(marginal_fractions, static_argnums=1)


def _public_targets(public: Dataset, domain: Domain, workload: MarginalWorkload) -> tuple[Array, Array]:
    """The public data's answers to every workload marginal it covers, and which those are.

    The public table may hold a subset of the private attributes (the incomplete-domain case):
    marginals over attributes it lacks are masked out of pretraining.
    """
    private_names = [a.name for a in domain.categorical]
    public_names = [a.name for a in public.domain.categorical]
    for name in public_names:
        if name not in private_names:
            raise ValueError(f"public column {name!r} is not an attribute of the private domain")
        if public.domain[name].size != domain[name].size:
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
    sub_answers = np.asarray(_fractions(jnp.asarray(public.codes), sub))
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
