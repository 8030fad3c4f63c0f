"""AIM-GDP's selection: a Gaussian measurement of a few candidates' L1 errors, then the best noisy
score (Google DPSynth's `discrete_mechanisms/aim_gdp.py`, 2026), as a public part:
`NoisyErrorSelection`.

AIM's exponential mechanism scores every eligible candidate and releases only the pick. DPSynth's
AIM-GDP releases noisy errors instead, so that every private step of the run is a Gaussian
measurement:

    S_t:     the eligible candidates with no noisy error released yet, then those whose last
             released noisy error scores highest, up to `per_round` in all (public: it reads
             released errors, the model and sigma_t only)
    measure: e_r = ||M_r(D) - M_r(model)||_1 for r in S_t, one Gaussian draw (L2 sensitivity
             L1 sqrt(|S_t|), the selection's share of the round's budget)
    pick:    argmax_{r in S_t} w_r (e_r + noise - sqrt(2/pi) sigma_t n_r)   (post-processing)

The released errors are kept in the schedule and rank the next round's S_t. Round 0, the
measurement, the annealing, the size filter and the privacy filter are AIM's
(`jaxdp.selection.AIMSelection`).

Where this departs from DPSynth's: DPSynth spends half a round's budget up front on noisy errors
of every candidate against the 1-way model; here round 1's selection measures every eligible
candidate within its own share (no extra charge), and later rounds at most `per_round`. The
errors are exact integers (steps of 1 / K counts, `candidate_l1_steps`) with exact discrete Gaussian
noise. The run is accounted by AIM's filter, in zCDP or, as DPSynth accounts it, in Gaussian DP
(conversion "gdp"): the discrete Gaussian is not exactly 1/sigma-GDP, so there each draw is
bounded through a smoothing (`jaxdp.gdp`) and made at sqrt(sigma^2 + S^2) (`HostRule.drawn`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from jaxdp import noise, samplers
from jaxdp.selection.aim import AIMSelection
from jaxdp.selection.host_rule import HostRule
from jaxdp.selection.records import Schedule, Selected
from jaxdp.selection.scores import COUNT_STEPS, SQRT_2_OVER_PI, candidate_l1_steps
from jaxdp.types import Charge, Key, Sensitive, pytree_dataclass, static_field

# DPSynth's max_candidates_per_round
PER_ROUND = 16
# errors are clipped to 2^30 steps before the noise (1-Lipschitz: the sensitivity stays), so that
# error plus noise (|noise| <= 181 SIGMA_MAX < 2^23) fits in int32
ERROR_LIMIT = 2**30


@pytree_dataclass
class NoisyErrorSelection(AIMSelection):
    """AIM with DPSynth's Gaussian selection (module docstring).

    Args:
        alpha, resolution: as `AIMSelection` (the factory `jaxdp.aim_gdp` defaults alpha to
            DPSynth's 0.9).
        per_round: the most candidates a round's selection measures once every eligible one
            has a released error (DPSynth's max_candidates_per_round, 16).

    Privacy:
        As `AIMSelection`, but round t's selection is a Gaussian measurement: the exact L1 errors
        E_r (int32 steps of 1 / K counts) of the candidates in S_t, which a neighbour moves by at
        most K L1 each (L1: 1 under add/remove, 2 under replace-one; clipping at 2^30 steps is
        1-Lipschitz), so the vector moves by at most K L1 sqrt(|S_t|) in L2, measured with
        (discrete) Gaussian noise of scale K sigma_sel: L1^2 |S_t| / (2 sigma_sel^2) <= rho_select
        zCDP (under "gdp": the smoothed draw's mu^2 / 2 <= rho_select, `jaxdp.gdp.charge_mu`).
        S_t depends on released values only; the argmax and the kept errors are
        post-processing. The filter keeps the realised sum <= rho (or mu^2 / 2).
    """

    per_round: int = static_field(default=PER_ROUND)

    has_error_bounds: ClassVar[bool] = False
    gaussian_only: ClassVar[bool] = True

    def subset(self, stale: np.ndarray, mask: np.ndarray, sigma: float) -> np.ndarray:
        """S_t (sorted indices): the eligible candidates without a released error, then the best
        by their released errors' scores at this round's sigma, up to `per_round` in all."""
        eligible = np.asarray(mask, bool)
        fresh = eligible & np.isnan(stale)
        room = self.per_round - int(fresh.sum())
        known = np.flatnonzero(eligible & ~np.isnan(stale))
        if room > 0 and known.size:
            scores = self.scores(stale[known], known, sigma)
            best = known[np.argsort(-scores, kind="stable")[:room]]
            fresh[best] = True
        return np.flatnonzero(fresh)

    def scores(self, errors: np.ndarray, index: np.ndarray, sigma: float) -> np.ndarray:
        """w_r (e_r - sqrt(2/pi) sigma n_r) of the candidates `index` with noisy errors `errors`."""
        weights = np.asarray(self.weights, np.float64)[index]
        cells = np.asarray(self.candidates.cells, np.float64)[index]
        return weights * (errors - SQRT_2_OVER_PI * sigma * cells)

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
        """One Gaussian measurement of the errors of S_t and the best noisy score (Privacy above).

        Args:
            key: the round's SELECT stream key; counts: private (candidates.n_queries,) int32
                true counts; model_counts, mask, sigma, rho_select: as `AIMSelection`;
            schedule: the schedule before the round (its `kept`: the errors released so far).
        """
        del measured
        n = len(self.candidates)
        kept = None if schedule is None else schedule.kept
        stale = np.full(n, np.nan) if kept is None else np.asarray(kept, np.float64)
        chosen = self.subset(stale, mask, sigma)
        released, charge, entry = measure_errors(self, key, counts, model_counts, chosen, rho_select)
        stale[chosen] = released
        pick = int(chosen[int(np.argmax(self.scores(released, chosen, sigma)))])
        return Selected(pick, charge, entry, 0.0, kept=tuple(float(e) for e in stale))


def error_grid(rule: HostRule, rho_select: float, measured: int) -> tuple[int, float, float]:
    """(K, L2 sensitivity in steps, sigma in steps) of a Gaussian measurement of `measured`
    candidates' L1 errors costing at most `rho_select` (in mu^2 / 2 where the rule is smoothed:
    the smoothing is in the sampler's integer steps): K = 64 steps a count, halved until the
    exact sampler takes the scale.

    Raises:
        ValueError: the scale exceeds the exact sampler's range even in whole counts.
    """
    sensitivity = rule.l1_sensitivity * math.sqrt(measured)
    sigma = noise.count_sigma(sensitivity, rho_select, rule.noise)
    steps = COUNT_STEPS
    if rule.noise == "discrete":
        while steps > 1 and rule.drawn(steps * sigma) > samplers.SIGMA_MAX:
            steps //= 2
        if rule.drawn(steps * sigma) > samplers.SIGMA_MAX:
            raise ValueError(
                f"a selection measuring {measured} errors needs noise of {sigma:.0f} counts, above the "
                f"exact sampler's {samplers.SIGMA_MAX:.0f}: the budget is too small for this workload "
                "(raise epsilon, or use fewer rounds)"
            )
    return steps, steps * sensitivity, rule.drawn(steps * sigma)


def measure_errors(
    rule: HostRule,
    key: Key,
    counts: Sensitive,
    model_counts: np.ndarray,
    chosen: np.ndarray,
    rho_select: float,
) -> tuple[np.ndarray, Charge, tuple[int, float, float]]:
    """One Gaussian measurement of the exact L1 errors of the candidates `chosen` against the
    model's counts: (their noisy errors in counts, the Charge, the schedule's entry for it).

    Privacy:
        Reads the true counts; one Gaussian measurement (`noise.measure_counts`) of the int32
        errors E_r (steps of 1 / K counts, clipped at 2^30: 1-Lipschitz), each of which a
        neighbour moves by at most K L1, so L2 sensitivity K L1 sqrt(|chosen|), at cost at most
        `rho_select` (`error_grid`).
    """
    steps, sensitivity, scale = error_grid(rule, rho_select, chosen.size)
    # a public length (zeros beyond the subset: constants, so the L2 sensitivity stays)
    length = 1 << max(4, (chosen.size - 1).bit_length())

    def errors(c) -> jnp.ndarray:
        exact = candidate_l1_steps(np.asarray(c), model_counts, rule.candidates, steps)[chosen]
        padded = np.zeros(length, np.int32)
        padded[: chosen.size] = np.minimum(exact, ERROR_LIMIT)
        return jnp.asarray(padded)

    noisy, charge = noise.measure_counts(
        key, counts.map(errors), sigma=scale, sensitivity=sensitivity, noise=rule.noise
    )
    released = np.asarray(noisy, np.float64)[: chosen.size] / steps
    entry = (noise.PRIMITIVES.index(rule.measure_primitive), float(sensitivity), float(scale))
    return released, charge, entry
