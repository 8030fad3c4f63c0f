"""Mixed relaxed rows (RAP++): per-attribute softmax blocks plus one real column per numeric.

Parameters are `(logits (n_rows, sum of categorical sizes), numeric (n_rows, n_numeric))`. The
categorical part is RAP-softmax's: each block is a softmax, so a row is a product distribution
over the categorical attributes. The numeric part holds values in the normalised [0, 1] of the
declared bounds, clipped back into it after every optimiser step (the projection onto the relaxed
domain). Records are released by picking a row uniformly, sampling each categorical attribute
from its block and copying the row's numeric values: no bins anywhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.families.relaxed import block_softmax, sample_blocks
from jaxdp.types import Array, Key, pytree_dataclass, static_field

MixedParams = tuple[Array, Array]


@pytree_dataclass
class MixedRows:
    """n_rows relaxed mixed-type rows over categorical `sizes` and `n_numeric` numeric columns."""

    sizes: tuple[int, ...] = static_field()
    n_numeric: int = static_field()
    n_rows: int = static_field()

    def init_params(self, key: Key) -> MixedParams:
        """Standard-normal logits and uniform numeric values: a random start over the domain."""
        logit_key, numeric_key = jax.random.split(key)
        logits = jax.random.normal(logit_key, (self.n_rows, sum(self.sizes)), jnp.float32)
        numeric = jax.random.uniform(numeric_key, (self.n_rows, self.n_numeric), jnp.float32)
        return logits, numeric

    def probabilities(self, params: MixedParams) -> Array:
        """(n_rows, sum of sizes) per-attribute probabilities."""
        logits, _ = params
        if not self.sizes:
            return logits
        return block_softmax(logits, self.sizes)

    def constrain(self, params: MixedParams) -> MixedParams:
        """Project the numeric columns back onto [0, 1] (the logits are unconstrained)."""
        logits, numeric = params
        return logits, jnp.clip(numeric, 0.0, 1.0)

    def sample(self, key: Key, params: MixedParams, rows: int) -> tuple[Array, Array]:
        """(codes (rows, n_categorical) int32, numeric (rows, n_numeric) float32 in [0, 1])."""
        row_key, attr_key = jax.random.split(key)
        picked = jax.random.randint(row_key, (rows,), 0, self.n_rows)
        probs = self.probabilities(params)[picked]
        codes = sample_blocks(attr_key, probs, self.sizes) if self.sizes else jnp.zeros((rows, 0), jnp.int32)
        return codes, params[1][picked]
