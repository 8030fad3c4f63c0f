"""The one fitting loop of the differentiable families: Adam, with a constraint after each step.

Used by the relaxed rows and the generator (RAP, RAP-softmax, GEM: `jaxdp.families.fitted`) and
by RAP++'s annealed projection; AIM-GEM's fixed-step refit is `fit(lambda p: (loss, True), ...)`.
All of it is post-processing: it reads only released measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxdp.types import Array

Loss = Callable[[Any], Array]


def fit(
    refresh: Callable[[Any], tuple[Loss, Array]],
    params: Any,
    *,
    max_steps: int,
    learning_rate: float | Array,
    constrain: Callable[[Any], Any] = lambda p: p,
    refresh_every: int = 1,
    anneal: bool = False,
    stop_below: float | None = None,
) -> tuple[Any, Array]:
    """Fresh Adam moments, then steps p <- constrain(p - rate * adam(grad loss(p))).

    Args:
        refresh: refresh(params) -> (loss, active), called with the current parameters at the
            start of every block of `refresh_every` steps: the loss those steps descend (a
            function of the parameters, e.g. over the errors ranked at the block's start) and
            whether to go on at all (False ends the fit before the block).
        params: the starting parameters (any pytree).
        max_steps: the most steps taken.
        learning_rate: Adam's step (a traced scalar is fine).
        constrain: the projection applied after every step (RAP's box; numeric columns' [0, 1]).
        refresh_every: steps per block.
        anneal: the rate anneals by a cosine to 0 over `max_steps` (GEM's schedule).
        stop_below: also stop once a step's gradient norm is at most this (RAP++'s gamma).

    Returns:
        (params, int32 steps taken).
    """
    import optax  # deferred: only fitting needs it, and `import jaxdp` stays light

    optimizer = optax.scale_by_adam()
    gamma = -jnp.inf if stop_below is None else stop_below

    def cond(carry):
        return (carry[2] < max_steps) & carry[3] & (carry[4] > gamma)

    def body(carry):
        p, s, i, _, norm = carry
        loss, active = refresh(p)
        active = jnp.asarray(active, bool)

        def step(_, inner):
            p, s, i, norm = inner
            grads = jax.grad(loss)(p)
            updates, s_new = optimizer.update(grads, s, p)
            rate = learning_rate
            if anneal:
                rate = rate * 0.5 * (1 + jnp.cos(jnp.pi * i.astype(jnp.float32) / max_steps))
            p_new = constrain(jax.tree_util.tree_map(lambda a, u: a - rate * u, p, updates))
            go = active & (i < max_steps)

            def keep(old, new):
                return jax.tree_util.tree_map(lambda a, b: jnp.where(go, b, a), old, new)

            norm = jnp.where(go, optax.tree.norm(grads), norm) if stop_below is not None else norm
            return keep(p, p_new), keep(s, s_new), i + go.astype(jnp.int32), norm

        p, s, i, norm = jax.lax.fori_loop(0, refresh_every, step, (p, s, i, norm))
        return p, s, i, active, norm

    init = (
        params,
        optimizer.init(params),
        jnp.zeros((), jnp.int32),
        jnp.ones((), bool),
        jnp.asarray(jnp.inf),
    )
    params, _, steps, _, _ = jax.lax.while_loop(cond, body, init)
    return params, steps
