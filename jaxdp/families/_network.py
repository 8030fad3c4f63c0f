"""The generator's network (flax). Kept apart from `generator` so that flax, about half a second
of import, loads only when a generator is first built, not with `import jaxdp`."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


class BatchNorm(nn.Module):
    """Normalisation over the latent batch with learned scale and shift. The batch is fixed, so
    batch statistics are the statistics: no running averages or train/eval modes."""

    @nn.compact
    def __call__(self, h):
        scale = self.param("scale", nn.initializers.ones, (h.shape[-1],))
        shift = self.param("shift", nn.initializers.zeros, (h.shape[-1],))
        mean = h.mean(axis=0, keepdims=True)
        var = h.var(axis=0, keepdims=True)
        return (h - mean) * jax.lax.rsqrt(var + 1e-5) * scale[None, :] + shift[None, :]


class Network(nn.Module):
    """Residual blocks h -> [relu(norm(dense(h))), h] (the input is carried along, so each
    layer sees every earlier one), then a dense layer to the one-hot width."""

    hidden: Sequence[int]
    width: int

    @nn.compact
    def __call__(self, z):
        h = z
        for size in self.hidden:
            h = jnp.concatenate([nn.relu(BatchNorm()(nn.Dense(size)(h))), h], axis=-1)
        return nn.Dense(self.width)(h)
