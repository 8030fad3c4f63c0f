"""The generator family (GEM): G_theta(z), a network whose output is a softmax per attribute.

For a fixed batch of latent vectors z (B, latent_dim), the B outputs are B product distributions
over the domain; their uniform mixture is the synthetic distribution, answered with the same
product-query kernel as relaxed rows. This is the only module that imports flax.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxdp.families.relaxed import block_softmax, sample_rows
from jaxdp.queries import RelaxedPlan, relaxed_marginals, relaxed_plan
from jaxdp.queries.workload import MarginalWorkload
from jaxdp.types import Array, Key, pytree_dataclass, static_field


class _BatchNorm(nn.Module):
    """Normalisation over the latent batch with learned scale and shift. The batch is fixed, so
    batch statistics are the statistics: no running averages or train/eval modes."""

    @nn.compact
    def __call__(self, h):
        scale = self.param("scale", nn.initializers.ones, (h.shape[-1],))
        shift = self.param("shift", nn.initializers.zeros, (h.shape[-1],))
        mean = h.mean(axis=0, keepdims=True)
        var = h.var(axis=0, keepdims=True)
        return (h - mean) * jax.lax.rsqrt(var + 1e-5) * scale[None, :] + shift[None, :]


class _Network(nn.Module):
    """Residual blocks h -> [relu(norm(dense(h))), h] (the input is carried along, so each
    layer sees every earlier one), then a dense layer to the one-hot width."""

    hidden: Sequence[int]
    width: int

    @nn.compact
    def __call__(self, z):
        h = z
        for size in self.hidden:
            h = jnp.concatenate([nn.relu(_BatchNorm()(nn.Dense(size)(h))), h], axis=-1)
        return nn.Dense(self.width)(h)


@pytree_dataclass
class Generator:
    """G_theta with `hidden` residual ReLU layers, fed a fixed (batch, latent_dim) Gaussian batch."""

    plan: RelaxedPlan
    sizes: tuple[int, ...] = static_field()
    hidden: tuple[int, ...] = static_field()
    latent_dim: int = static_field()
    batch: int = static_field()

    @classmethod
    def of(
        cls, workload: MarginalWorkload, *, hidden: Sequence[int], latent_dim: int, batch: int
    ) -> Generator:
        return cls(relaxed_plan(workload), workload.sizes, tuple(int(h) for h in hidden), latent_dim, batch)

    @property
    def _module(self) -> _Network:
        return _Network(self.hidden, sum(self.sizes))

    def latent(self, key: Key) -> Array:
        """The fixed latent batch z ~ N(0, I), (batch, latent_dim) (public randomness)."""
        return jax.random.normal(key, (self.batch, self.latent_dim), jnp.float32)

    def init_params(self, key: Key):
        return self._module.init(key, jnp.zeros((2, self.latent_dim), jnp.float32))

    def constrain(self, params):
        return params

    def probabilities(self, params, latent: Array) -> Array:
        """(batch, width) the per-attribute softmax outputs G_theta(z)."""
        return block_softmax(self._module.apply(params, latent), self.sizes)

    def answers(self, params, latent: Array) -> Array:
        return relaxed_marginals(self.probabilities(params, latent), self.plan)

    def sample(self, key: Key, params, latent: Array, rows: int) -> Array:
        return sample_rows(key, self.probabilities(params, latent), self.sizes, rows)
