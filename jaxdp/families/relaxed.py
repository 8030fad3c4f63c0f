"""The relaxed-rows family (RAP, RAP-softmax): n' rows of per-attribute probability blocks.

Parameters are an (n_rows, width) matrix over the one-hot layout of a categorical domain. RAP
keeps the rows in the box [0, 1] (its projection clips after every step); RAP-softmax maps each
attribute block through a softmax, so every row is a product distribution. Answers are the
product-query answers averaged over rows (`jaxdp.queries.relaxed_marginals`). Records are drawn
by picking a row uniformly and sampling each attribute from that row's block (normalised first
for RAP, whose blocks need not sum to one): the randomized rounding of RAP.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.families._sampling import mixture_rows
from jaxdp.queries import RelaxedPlan, relaxed_marginals, relaxed_plan
from jaxdp.queries.workload import MarginalWorkload
from jaxdp.types import Array, Key, pytree_dataclass, static_field

PARAMETRIZATIONS = ("clip", "softmax")


def block_softmax(logits: Array, sizes: tuple[int, ...]) -> Array:
    """Softmax over each attribute's block of columns, (n_rows, width) -> (n_rows, width)."""
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return jnp.concatenate(
        [jax.nn.softmax(logits[:, s : s + k], axis=1) for s, k in zip(starts, sizes, strict=True)], axis=1
    )


def sample_rows(key: Key, probs: Array, sizes: tuple[int, ...], rows: int) -> Array:
    """(rows, n_attributes) int32 records of the uniform mixture of the product distributions in
    the rows of `probs` (`_sampling.mixture_rows`: each row gets its share of the records and
    each attribute's counts are rounded, not drawn independently).

    Blocks are normalised first (RAP's clipped rows need not sum to one; an all-zero block is
    read as uniform), so the records follow the same mixture of product distributions whose
    answers the mechanism fitted.
    """
    return mixture_rows(key, probs, sizes, rows)[0]


@pytree_dataclass
class RelaxedRows:
    """n_rows relaxed records over a categorical domain (RAP: "clip"; RAP-softmax: "softmax")."""

    plan: RelaxedPlan
    sizes: tuple[int, ...] = static_field()
    n_rows: int = static_field()
    parametrization: str = static_field()

    @classmethod
    def of(cls, workload: MarginalWorkload, n_rows: int, parametrization: str) -> RelaxedRows:
        if parametrization not in PARAMETRIZATIONS:
            raise ValueError(f"parametrization must be one of {PARAMETRIZATIONS}, got {parametrization!r}")
        return cls(relaxed_plan(workload), workload.sizes, n_rows, parametrization)

    def init_params(self, key: Key) -> Array:
        """Uniform random rows in [0, 1] (RAP) or standard-normal logits (RAP-softmax)."""
        shape = (self.n_rows, sum(self.sizes))
        if self.parametrization == "clip":
            return jax.random.uniform(key, shape, jnp.float32)
        return jax.random.normal(key, shape, jnp.float32)

    def latent(self, key: Key) -> Array:
        """Relaxed rows have no latent input (an empty array keeps the state shape uniform)."""
        del key
        return jnp.zeros((0,), jnp.float32)

    def probabilities(self, params: Array, latent: Array) -> Array:
        del latent
        if self.parametrization == "clip":
            return params
        return block_softmax(params, self.sizes)

    def constrain(self, params: Array) -> Array:
        """RAP's projection onto the box after each optimiser step; identity for softmax."""
        return jnp.clip(params, 0.0, 1.0) if self.parametrization == "clip" else params

    def answers(self, params: Array, latent: Array) -> Array:
        """(n_queries,) relaxed answers of the workload (mean over rows)."""
        return relaxed_marginals(self.probabilities(params, latent), self.plan)

    def sample(self, key: Key, params: Array, latent: Array, rows: int) -> Array:
        return sample_rows(key, self.probabilities(params, latent), self.sizes, rows)
