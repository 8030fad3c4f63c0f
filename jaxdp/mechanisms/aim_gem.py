"""AIM-GEM: AIM's selection rule and privacy filter with GEM's generator as the model.

A mix-and-match of two families through their shared parts (`_aim_selection`): candidates,
quality score, exponential-mechanism selection, Gaussian measurement, budget annealing
(Algorithm 4) and the filter that spends exactly the budget are AIM's (McKenna et al., VLDB
2022); the model is GEM's generator G_theta(z) over a fixed latent batch (Liu, Vietri & Wu 2021),
trained after every round on all measurements so far, instead of a Private-PGM graphical model.

Differences from AIM, all on the model side (post-processing):
- no junction-tree size filter: the generator has a fixed size whatever was measured, so every
  candidate of W+ is eligible in every round (C_t = W+);
- the fit is Adam on the inverse-variance weighted squared error of the generator's marginals to
  the measurements (a cell measured twice keeps the inverse-variance average of its noisy counts
  and the summed precision: the same least-squares objective), warm-started from the last
  round's parameters, `iters` steps per round and `final_iters` in the last;
- the model's counts are its fractions times a total: n under replace-one (public), the noisy
  record count from round 0's 1-way marginals under add/remove.

Like AIM it runs as a Python loop of `step` (`jittable = False`): the filter decides the number
of rounds and each round's (sigma, epsilon) on the host from released values. The generator's
fit and answers are compiled once per shape and reused across rounds.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from jaxdp import _checks
from jaxdp.accounting import Plan
from jaxdp.domain import Dataset
from jaxdp.families.generator import Generator
from jaxdp.keys import require_key
from jaxdp.mechanisms._aim_selection import AnnealedSelection, RoundRecord, selection_settings
from jaxdp.mechanisms._common import RoundInfo, as_relation, make_plan
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array, Key, Neighboring, Sensitive, pytree_dataclass, static_field


class AimGemState(NamedTuple):
    """params, latent: the generator and its fixed latent batch (public randomness);
    targets: (candidates.n_queries,) inverse-variance average of the noisy counts measured on
    each candidate cell (0 where unmeasured); precision: (candidates.n_queries,) sum of 1/sigma^2
    over those measurements (0: unmeasured); total: the counts' scale (n, or the noisy record
    count); sigma, epsilon, rho_spent, rounds_done, done, charges: the filter's (see
    `AnnealedSelection`); records: one RoundRecord per selection round."""

    params: Any
    latent: Array
    targets: np.ndarray
    precision: np.ndarray
    total: float
    sigma: float
    epsilon: float | None
    rho_spent: float
    rounds_done: int
    done: bool
    charges: tuple
    records: tuple


@jax.jit
def _fractions(family: Generator, params, latent: Array) -> Array:
    return family.answers(params, latent)


@functools.partial(jax.jit, static_argnames="steps")
def _fit(family: Generator, params, latent: Array, targets: Array, weights: Array, rate: Array, steps: int):
    """`steps` Adam steps (fresh moments, warm-started parameters) on
    sum_cells weights (G(z) answers - targets)^2, with targets in fractions."""
    optimizer = optax.adam(rate)

    def loss(p):
        return jnp.sum(weights * (family.answers(p, latent) - targets) ** 2)

    def body(_, carry):
        p, s = carry
        updates, s = optimizer.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, updates), s

    params, _ = jax.lax.fori_loop(0, steps, body, (params, optimizer.init(params)))
    return params


@functools.partial(jax.jit, static_argnames="rows")
def _sample(family: Generator, key: Key, params, latent: Array, rows: int) -> Array:
    return family.sample(key, params, latent, rows)


@pytree_dataclass
class AimGem(AnnealedSelection):
    """AIM's selection with a GEM generator (see the module docstring).

    Privacy:
        As AIM (`jaxdp.aim`): relation add/remove (counts, marginal L1 = L2 = 1) or replace-one
        (n public; counts move by L2 sqrt(2), L1 2). Measurements add noise to the int32 counts.
        Round 0: one Gaussian measurement of the d1 one-way marginals together (L2 sensitivity
        sqrt(d1) times a marginal's, scale sigma_0). Round t >= 1: exponential mechanism (exact;
        Gumbel-max under noise="float") on q_r with sensitivity
        Delta_t = L1 * max_{r in W+} w_r at epsilon_t, epsilon_t^2 / 8 zCDP (Cesar & Rogers
        2021), then a Gaussian measurement at sigma_t, L2^2 / (2 sigma_t^2) zCDP. The filter
        (Theorem 1) keeps the realised sum <= rho and spends it exactly. Keys: INIT for the
        generator's initial parameters and latent batch (public randomness); MEASURE of round 0;
        SELECT and MEASURE of every later round; UPDATE unused (the fit is deterministic);
        RELEASE for sampling records. Fitting, the total estimate and sampling are
        post-processing of released values.
    """

    answers: Sensitive  # true counts of every candidate marginal, concatenated
    family: Generator
    workload: MarginalWorkload = static_field()
    candidates: MarginalWorkload = static_field()
    weights: tuple[float, ...] = static_field()
    relation: Neighboring = static_field()
    n_records: int = static_field()
    plan: Plan = static_field()
    rounds: int = static_field()
    alpha: float = static_field()
    learning_rate: float = static_field()
    iters: int = static_field()
    final_iters: int = static_field()
    l1_sensitivity: float = static_field()
    l2_sensitivity: float = static_field()
    noise: str = static_field()

    jittable = False

    def init(self, key: Key) -> AimGemState:
        require_key(key)
        sigma0, epsilon0 = self._initial_parameters()
        n_queries = self.candidates.n_queries
        return AimGemState(
            params=self.family.init_params(jax.random.fold_in(key, 0)),
            latent=self.family.latent(jax.random.fold_in(key, 1)),
            targets=np.zeros(n_queries, np.float64),
            precision=np.zeros(n_queries, np.float64),
            total=float(self.n_records) if self.relation is Neighboring.REPLACE_ONE else 1.0,
            sigma=sigma0,
            epsilon=epsilon0,
            rho_spent=0.0,
            rounds_done=0,
            done=False,
            charges=(),
            records=(),
        )

    def model_counts(self, state: AimGemState, params=None) -> np.ndarray:
        """(candidates.n_queries,) counts of every candidate under the generator (its mixture's
        fractions times the state's total)."""
        params = state.params if params is None else params
        return state.total * np.asarray(_fractions(self.family, params, state.latent), np.float64)

    def _refit(self, state: AimGemState, targets, precision, total, steps: int):
        weights = precision / precision.sum()
        return _fit(
            self.family,
            state.params,
            state.latent,
            jnp.asarray(targets / total, jnp.float32),
            jnp.asarray(weights, jnp.float32),
            jnp.asarray(self.learning_rate, jnp.float32),
            steps=steps,
        )

    def step(self, state: AimGemState, key: Key) -> tuple[AimGemState, RoundInfo]:
        require_key(key)
        if state.done:
            return state, RoundInfo(charges=self._idle_round())
        if state.rounds_done == 0:
            return self._initialise(state, key)
        return self._adaptive_round(state, key)

    def _initialise(self, state: AimGemState, key: Key) -> tuple[AimGemState, RoundInfo]:
        ones = self._one_way()
        noisy, charge, charged, spent = self._measure_one_way(key, state.sigma)
        sigma = charged[2]
        targets, precision = state.targets.copy(), state.precision.copy()
        start = 0
        sums = []
        for i in ones:
            span = self._span(i)
            cells = span.stop - span.start
            targets[span] = noisy[start : start + cells]
            precision[span] = 1.0 / sigma**2
            sums.append(noisy[start : start + cells].sum())
            start += cells
        total = state.total
        if self.relation is Neighboring.ADD_REMOVE:  # n is private: the noisy 1-way totals' mean
            total = max(1.0, float(np.mean(sums)))
        params = self._refit(state, targets, precision, total, self.iters)
        new = state._replace(
            params=params,
            targets=targets,
            precision=precision,
            total=total,
            rho_spent=spent,
            rounds_done=1,
            charges=(charged,),
        )
        return self._anneal_or_finish(new, changed=True), RoundInfo(charges=(self._idle_round()[0], charge))

    def _adaptive_round(self, state: AimGemState, key: Key) -> tuple[AimGemState, RoundInfo]:
        t = state.rounds_done
        sigma, epsilon, rho_select, rho_measure, final = self._round_parameters(state)
        mask = np.ones(len(self.candidates), bool)  # no size filter: the generator's size is fixed
        model_counts = self.model_counts(state)
        choice, select_charge, delta_t, scale = self._select(key, model_counts, mask, sigma, rho_select)
        sigma_used = self._measure_sigma(rho_measure)
        noisy, measure_charge = self._measure_marginal(key, choice, sigma_used)
        span = self._span(choice)
        targets, precision = state.targets.copy(), state.precision.copy()
        added = 1.0 / sigma_used**2
        targets[span] = (targets[span] * precision[span] + noisy * added) / (precision[span] + added)
        precision[span] += added
        last = final or t + 1 >= self.rounds
        params = self._refit(state, targets, precision, state.total, self.final_iters if last else self.iters)
        before = model_counts[span]
        after = self.model_counts(state, params)[span]
        spent, charges = self._round_accounts(state, delta_t, scale, sigma_used)
        record = RoundRecord(
            selected=choice,
            sigma=sigma_used,
            epsilon=2.0 * delta_t / scale,
            score_sensitivity=delta_t,
            n_eligible=int(mask.sum()),
            selected_error=float(np.abs(before - noisy).sum()),
        )
        new = state._replace(
            params=params,
            targets=targets,
            precision=precision,
            sigma=sigma,
            epsilon=epsilon,
            rho_spent=spent,
            rounds_done=t + 1,
            done=last,
            charges=charges,
            records=(*state.records, record),
        )
        if not last:
            new = self._anneal_or_finish(new, changed=self._learned(after, before, sigma))
        return new, RoundInfo(charges=(select_charge, measure_charge))

    def default_rows(self, state: AimGemState) -> int:
        """n under replace-one (public); under add/remove the noisy record count."""
        return self.n_records if self.relation is Neighboring.REPLACE_ONE else max(1, round(state.total))

    def relaxed_answers(self, state: AimGemState) -> Array:
        """(workload.n_queries,) fractions of the generator's mixture itself, before sampling."""
        fractions = np.asarray(_fractions(self.family, state.params, state.latent))
        return jnp.asarray(
            np.concatenate([fractions[self._span(self._index[c])] for c in self.workload.cliques])
        )

    @property
    def _index(self) -> dict[tuple[int, ...], int]:
        return {c: i for i, c in enumerate(self.candidates.cliques)}

    def release(self, state: AimGemState, key: Key, rows: int | None = None) -> Array:
        """Synthetic records, (rows, d) int32 codes, sampled from the generator's mixture."""
        require_key(key)
        rows = self.default_rows(state) if rows is None else _checks.positive_int(rows, "rows")
        return _sample(self.family, key, state.params, state.latent, rows)


def aim_gem(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    relation: Neighboring | str = Neighboring.ADD_REMOVE,
    conversion: str = "exact",
    max_rounds: int | None = None,
    alpha: float = 0.9,
    batch: int = 1000,
    hidden: Sequence[int] = (256, 256),
    latent_dim: int = 128,
    learning_rate: float = 1e-3,
    iters: int = 100,
    final_iters: int = 500,
    noise: str = "discrete",
    mesh: Mesh | None = None,
) -> AimGem:
    """Build AIM-GEM: AIM's selection and filter, GEM's generator as the model.

    Args:
        data: the private records (categorical).
        workload: the marginals (and weights c_s) the synthetic data should preserve.
        epsilon, delta, rho, conversion: the budget (see `jaxdp.aim`).
        relation: "add-remove" (default, as AIM) or "replace-one".
        max_rounds: T (default 16 d), as in `jaxdp.aim`.
        alpha: share of each round's budget spent on measurement (the rest on selection).
        batch, hidden, latent_dim: the generator (see `jaxdp.gem`).
        learning_rate: Adam's step.
        iters: Adam steps per round (warm-started); final_iters in the filter's last round. On
            6-attribute ADULT (epsilon 1, all 3-way, seed 0) 100/500 gave mean L1 0.163 on the
            records, 200/1000 gave 0.192 (fitting the noisy measurements more closely
            overfits) and 50/300 at learning rate 3e-3 gave 0.185.
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).
        mesh: split the records over this mesh's devices to count them (one axis "records",
            `jaxdp.queries.records_mesh()`; one psum); the rest of the run and the release are
            those of one device with the same key.

    Raises:
        ValueError: bad arguments; DataError: numeric columns, empty data, or a workload over
        another domain.

    Privacy:
        See `AimGem`: rho-zCDP by the filter, for the stated relation.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    relation = as_relation(relation)
    settings = selection_settings(
        data,
        workload,
        name="aim-gem",
        relation=relation,
        max_rounds=max_rounds,
        alpha=alpha,
        noise=noise,
        mesh=mesh,
    )
    learning_rate = _checks.positive_finite(learning_rate, "learning_rate")
    family = Generator.of(settings.candidates, hidden=hidden, latent_dim=latent_dim, batch=batch)
    return AimGem(
        answers=settings.answers,
        family=family,
        workload=workload,
        candidates=settings.candidates,
        weights=settings.weights,
        relation=relation,
        n_records=len(data),
        plan=plan,
        rounds=settings.rounds,
        alpha=settings.alpha,
        learning_rate=float(learning_rate),
        iters=_checks.positive_int(iters, "iters"),
        final_iters=_checks.positive_int(final_iters, "final_iters"),
        l1_sensitivity=settings.l1_sensitivity,
        l2_sensitivity=settings.l2_sensitivity,
        noise=noise,
    )
