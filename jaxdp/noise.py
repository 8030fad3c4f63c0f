"""The only place private values meet randomness.

Every function here takes a `Sensitive` value, a required typed key and a noise scale that was
fixed on the host (a Python float, never a traced value), releases a noisy or selected output,
and returns a `Charge` describing the invocation, which the mechanism puts in its round's Info so
the ledger records it. Costs are computed by `jaxdp.accounting.charge_rho` from what is recorded
here.

All draws are float32 (TPU-safe). Known limitations (docs/privacy.md): floating-point noise is
open to Mironov-style attacks on the low-order bits; jax.random is not a CSPRNG.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxdp.keys import require_key
from jaxdp.types import Array, Charge, Key, Sensitive

PRIMITIVES = ("gaussian", "laplace", "exponential", "gumbel_top_k")


def _static_positive(value: object, name: str) -> float:
    if isinstance(value, jax.core.Tracer) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a Python number fixed before tracing, got {type(value)}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


def _charge(primitive: str, sensitivity: float, scale: float, count: int = 1) -> Charge:
    return Charge(
        primitive=jnp.asarray(PRIMITIVES.index(primitive), jnp.int32),
        sensitivity=jnp.asarray(sensitivity, jnp.float32),
        scale=jnp.asarray(scale, jnp.float32),
        count=jnp.asarray(count, jnp.int32),
    )


def _reveal(value: Sensitive, name: str) -> Array:
    if not isinstance(value, Sensitive):
        raise TypeError(f"{name} must be wrapped in Sensitive (it is computed from private data)")
    return value._value


def gaussian(key: Key, value: Sensitive, *, sigma: float, sensitivity: float) -> tuple[Array, Charge]:
    """Release `value + N(0, sigma^2 I)`.

    Args:
        key: typed key (use a MEASURE stream key).
        value: the private answers, any float array shape.
        sigma: noise standard deviation, fixed by the plan.
        sensitivity: L2 sensitivity of `value` under the mechanism's neighbouring relation.

    Returns:
        (noisy answers with the shape of value, Charge).

    Privacy:
        rho = sensitivity^2 / (2 sigma^2) zCDP.
    """
    key = require_key(key)
    sigma = _static_positive(sigma, "sigma")
    sensitivity = _static_positive(sensitivity, "sensitivity")
    x = _reveal(value, "value")
    noisy = x + sigma * jax.random.normal(key, jnp.shape(x), jnp.float32)
    return noisy, _charge("gaussian", sensitivity, sigma)


def laplace(key: Key, value: Sensitive, *, scale: float, sensitivity: float) -> tuple[Array, Charge]:
    """Release `value + Laplace(0, scale)` i.i.d. per entry.

    Privacy:
        (sensitivity / scale)-DP for L1 sensitivity `sensitivity`, i.e. rho = epsilon^2 / 2.
    """
    key = require_key(key)
    scale = _static_positive(scale, "scale")
    sensitivity = _static_positive(sensitivity, "sensitivity")
    x = _reveal(value, "value")
    noisy = x + scale * jax.random.laplace(key, jnp.shape(x), jnp.float32)
    return noisy, _charge("laplace", sensitivity, scale)


def _noisy_logits(key: Key, scores: Array, scale: float, mask: Array | None) -> Array:
    # mode="high" draws the uniform with more random bits, so the Gumbel tail is not truncated
    # at the float32 resolution of the uniform (see docs/privacy.md).
    gumbel = jax.random.gumbel(key, jnp.shape(scores), jnp.float32, mode="high")
    logits = scores / scale + gumbel
    if mask is not None:
        logits = jnp.where(mask, logits, -jnp.inf)
    return logits


def exponential(
    key: Key, scores: Sensitive, *, scale: float, sensitivity: float, mask: Array | None = None
) -> tuple[Array, Charge]:
    """Exponential mechanism by Gumbel-max: sample i with probability ~ exp(score_i / scale).

    Args:
        key: typed key (use a SELECT stream key).
        scores: (n_candidates,) private quality scores (higher is better).
        scale: Gumbel scale 2 * sensitivity / epsilon, fixed by the plan
            (`accounting.gumbel_scale`).
        sensitivity: sensitivity of each score under the neighbouring relation.
        mask: optional (n_candidates,) bool of eligible candidates (public, e.g. "not measured
            yet"). At least one must be True: with none, index 0 is returned. Callers guarantee
            it (factories refuse more rounds than candidates).

    Returns:
        (int32 index of the selected candidate, Charge).

    Privacy:
        epsilon = 2 sensitivity / scale exponential mechanism, epsilon^2 / 8 zCDP
        (bounded range, Cesar & Rogers 2021).
    """
    key = require_key(key)
    scale = _static_positive(scale, "scale")
    sensitivity = _static_positive(sensitivity, "sensitivity")
    logits = _noisy_logits(key, _reveal(scores, "scores"), scale, mask)
    return jnp.argmax(logits).astype(jnp.int32), _charge("exponential", sensitivity, scale)


def gumbel_top_k(
    key: Key,
    scores: Sensitive,
    *,
    k: int,
    scale: float,
    sensitivity: float,
    mask: Array | None = None,
) -> tuple[Array, Charge]:
    """One-shot report-noisy-top-k with Gumbel noise: the k largest of score/scale + Gumbel.

    Equivalent in distribution to k exponential mechanisms run in sequence without replacement
    (Durfee & Rogers 2019). `mask`, if given, must leave at least k candidates eligible; with
    fewer, masked candidates fill the remaining places (callers guarantee it, as factories
    refuse plans that select more than there are).

    Returns:
        ((k,) int32 indices, best first; Charge with count k).

    Privacy:
        k * epsilon^2 / 8 zCDP with epsilon = 2 sensitivity / scale (Cesar & Rogers 2021).
    """
    key = require_key(key)
    scale = _static_positive(scale, "scale")
    sensitivity = _static_positive(sensitivity, "sensitivity")
    x = _reveal(scores, "scores")
    if not isinstance(k, int) or not 1 <= k <= x.shape[-1]:
        raise ValueError(f"k must be an integer in [1, {x.shape[-1]}] (the candidates), got {k!r}")
    logits = _noisy_logits(key, x, scale, mask)
    _, indices = jax.lax.top_k(logits, k)
    return indices.astype(jnp.int32), _charge("gumbel_top_k", sensitivity, scale, k)
