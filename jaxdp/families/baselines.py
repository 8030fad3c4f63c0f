"""The baselines' families: what Independent and Gaussian make of one measurement of everything.

- `Product`: the product of the measured 1-way marginals (noisy counts clipped at 0 and
  normalised); records sample each attribute independently (Independent).
- `NoisyAnswers`: the noisy answers themselves, released as they are (Gaussian).

Both hold the noisy answers in the relation's units: fractions (counts / n) under replace-one,
counts under add-remove. Post-processing only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.families._sampling import mixture_rows
from jaxdp.families.base import ClassShape, Family, Measured, single_class
from jaxdp.queries import MarginalWorkload
from jaxdp.types import MARGINALS, Array, Key, Neighboring, pytree_dataclass, static_field


class NoisyModel(NamedTuple):
    """noisy_answers: (n_queries,) the measured answers (fractions or counts, per relation)."""

    noisy_answers: Array


@pytree_dataclass
class _Noisy(Family):
    """The noisy answers of a workload measured whole, in the relation's units."""

    n_queries: int = static_field(default=0)
    unit: float = static_field(default=1.0)

    candidates: ClassVar[tuple[str, ...]] = (MARGINALS,)
    relations: ClassVar[tuple[Neighboring, ...]] = (Neighboring.REPLACE_ONE, Neighboring.ADD_REMOVE)

    def bind(self, classes: tuple[ClassShape, ...], *, domain, public, n_records):
        workload = self._checked(single_class(classes, type(self).__name__).queries)
        if public is not None:
            raise ValueError(f"the {type(self).__name__} family uses no public data")
        unit = 1.0 if n_records is None else 1.0 / n_records
        return dataclasses.replace(self, n_queries=workload.n_queries, unit=unit)

    def _checked(self, workload: MarginalWorkload) -> MarginalWorkload:
        return workload

    def init(self, key: Key) -> NoisyModel:
        del key  # nothing random
        return NoisyModel(jnp.zeros(self.n_queries, jnp.float32))

    def answers(self, model: NoisyModel) -> Array:
        return model.noisy_answers

    def record(self, model: NoisyModel, measured: Measured, current: Array, r: Array) -> NoisyModel:
        """The measured answers (noisy counts times 1/n under replace-one) in their places."""
        del current, r
        values = measured.counts * self.unit
        return NoisyModel(model.noisy_answers.at[measured.index].set(values, mode="drop"))

    def update(self, model: NoisyModel, t: Array, key: Key, last: Array | bool):
        del t, key, last  # nothing to fit
        return model, jnp.zeros((), jnp.int32)


@pytree_dataclass
class NoisyAnswers(_Noisy):
    """Gaussian's family: the noisy answers, released as they are (counts under add-remove,
    fractions under replace-one)."""

    releases: ClassVar[str] = "answers"

    def output_answers(self, model: NoisyModel) -> Array:
        return model.noisy_answers

    def release(self, model: NoisyModel, key: Key, rows: int | None) -> Array:
        """(n_queries,) the noisy answers (`key` and `rows` unused: releasing is deterministic)."""
        del key, rows
        return model.noisy_answers


@pytree_dataclass
class Product(_Noisy):
    """Independent's family: each attribute drawn independently from its measured 1-way
    marginal, the noisy answers clipped at 0 and normalised (uniform where nothing is left).
    Its workload is the d 1-way marginals, in attribute order."""

    sizes: tuple[int, ...] = static_field(default=())

    def _checked(self, workload: MarginalWorkload) -> MarginalWorkload:
        if workload.cliques != tuple((a,) for a in range(len(workload.sizes))):
            raise ValueError("the Product family fits the 1-way marginals of every attribute, in order")
        return workload

    def bind(self, classes, *, domain, public, n_records):
        bound = super().bind(classes, domain=domain, public=public, n_records=n_records)
        return dataclasses.replace(bound, sizes=classes[0].queries.sizes)

    def marginals(self, model: NoisyModel) -> list[Array]:
        """Per-attribute probability vectors."""
        return _marginals(model.noisy_answers, self.sizes)

    def output_answers(self, model: NoisyModel) -> Array:
        """(sum of sizes,) the product distribution's 1-way answers (fractions)."""
        return jnp.concatenate(self.marginals(model))

    def default_rows(self, model: NoisyModel) -> int:
        """Under add-remove: the mean of the attributes' noisy totals (post-processing; host)."""
        blocks = np.split(np.asarray(model.noisy_answers), np.cumsum(self.sizes)[:-1])
        return max(1, round(float(np.mean([b.sum() for b in blocks]))))

    def release(self, model: NoisyModel, key: Key, rows: int) -> Array:
        """(rows, d) int32 records, each attribute drawn independently."""
        return _sample(model.noisy_answers, key, self.sizes, rows)


def _marginals(noisy_answers: Array, sizes: tuple[int, ...]) -> list[Array]:
    out = []
    start = 0
    for size in sizes:
        block = jnp.clip(noisy_answers[start : start + size], 0.0)
        total = block.sum()
        out.append(jnp.where(total > 0, block / jnp.where(total > 0, total, 1.0), 1.0 / size))
        start += size
    return out


@functools.partial(jax.jit, static_argnums=(2, 3))
def _sample(noisy_answers: Array, key: Key, sizes: tuple[int, ...], rows: int) -> Array:
    """Records of the product of the marginals: each attribute's counts rounded, and spread
    evenly over the attributes drawn before (so the pairs' counts are the product's, rounded)."""
    product = jnp.concatenate(_marginals(noisy_answers, sizes))[None]
    return mixture_rows(key, product, sizes, rows)[0]
