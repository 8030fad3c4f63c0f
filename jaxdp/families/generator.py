"""The generator family (GEM): G_theta(z), a network whose output is a softmax per attribute.

For a fixed batch of latent vectors z (B, latent_dim), the B outputs are B product distributions
over the domain; their uniform mixture is the synthetic distribution, answered with the same
product-query kernel as relaxed rows. Its network (`_network`, the only module that imports
flax) is imported when a generator is first used.

With `shard_batch`, the latent batch and the generator's outputs are constrained to be split by
rows over this process's devices (a one-dimensional mesh, axis "batch"; with several processes
each runs the same generator on its own devices); jit partitions the forward and
backward passes, and the batch statistics and the mixture's answers (means over the batch)
become cross-device reductions. The computation is the same; only float summation order changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxdp.families.relaxed import block_softmax, sample_rows
from jaxdp.queries import RelaxedPlan, relaxed_marginals, relaxed_plan
from jaxdp.queries.workload import MarginalWorkload
from jaxdp.types import Array, Key, pytree_dataclass, static_field


@pytree_dataclass
class Generator:
    """G_theta with `hidden` residual ReLU layers, fed a fixed (batch, latent_dim) Gaussian batch."""

    plan: RelaxedPlan
    sizes: tuple[int, ...] = static_field()
    hidden: tuple[int, ...] = static_field()
    latent_dim: int = static_field()
    batch: int = static_field()
    shard_batch: bool = static_field(default=False)

    @classmethod
    def of(
        cls,
        workload: MarginalWorkload,
        *,
        hidden: Sequence[int],
        latent_dim: int,
        batch: int,
        shard_batch: bool = False,
    ) -> Generator:
        if shard_batch and batch % jax.local_device_count():
            raise ValueError(
                f"batch={batch} must be a multiple of the {jax.local_device_count()} devices to shard it"
            )
        return cls(
            relaxed_plan(workload),
            workload.sizes,
            tuple(int(h) for h in hidden),
            latent_dim,
            batch,
            shard_batch,
        )

    def _place(self, x, *spec):
        """Constrain `x` to PartitionSpec(*spec) over every device when sharding the batch
        (rows: ("batch", None); weights: () replicated); unchanged otherwise."""
        if not self.shard_batch:
            return x
        mesh = Mesh(np.asarray(jax.local_devices()), ("batch",))
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(*spec)))

    @property
    def _module(self):
        from jaxdp.families._network import Network  # flax loads when a generator is first used

        return Network(self.hidden, sum(self.sizes))

    def latent(self, key: Key) -> Array:
        """The fixed latent batch z ~ N(0, I), (batch, latent_dim) (public randomness)."""
        return self._place(jax.random.normal(key, (self.batch, self.latent_dim), jnp.float32), "batch", None)

    def init_params(self, key: Key):
        return self._module.init(key, jnp.zeros((2, self.latent_dim), jnp.float32))

    def constrain(self, params):
        return params

    def probabilities(self, params, latent: Array) -> Array:
        """(batch, width) the per-attribute softmax outputs G_theta(z)."""
        logits = self._module.apply(self._place(params), latent)
        return self._place(block_softmax(logits, self.sizes), "batch", None)

    def answers(self, params, latent: Array) -> Array:
        return relaxed_marginals(self.probabilities(params, latent), self.plan)

    def sample(self, key: Key, params, latent: Array, rows: int) -> Array:
        return sample_rows(key, self.probabilities(params, latent), self.sizes, rows)
