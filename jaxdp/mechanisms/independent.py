"""Independent: measure every 1-way marginal once, sample each attribute independently.

The baseline every correlated mechanism must beat: it spends the whole budget on the 1-way
marginals and ignores all dependence between attributes.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxdp import _checks
from jaxdp import noise as noise_module
from jaxdp.accounting import MEASURE_PRIMITIVE, Plan, PlannedCharge
from jaxdp.domain import Dataset
from jaxdp.keys import Stream, require_key, stream_key
from jaxdp.mechanisms._common import (
    RoundInfo,
    as_relation,
    count_sigma,
    count_unit,
    make_plan,
    marginal_count_sensitivity,
    private_counts,
    require_categorical,
)
from jaxdp.queries import all_kway
from jaxdp.types import Array, Key, Neighboring, Sensitive, pytree_dataclass, static_field


class IndependentState(NamedTuple):
    """noisy_answers: (sum of sizes,) noisy 1-way answers (counts or fractions, per relation);
    rounds_done: int32."""

    noisy_answers: Array
    rounds_done: Array


@pytree_dataclass
class Independent:
    """The Independent baseline (one round).

    `counts` holds the true int32 counts of the d one-way marginals; `sigma` and `sensitivity`
    are in counts. `noise`: "discrete" (default, exact discrete Gaussian) or "float" (float32
    Gaussian, see `jaxdp.noise`).

    Privacy:
        One Gaussian measurement of the counts of all d one-way marginals, L2 sensitivity
        sqrt(d) (add/remove) or sqrt(2 d) (replace-one); key stream MEASURE of round 0. Under
        replace-one the noisy counts are divided by the public n (post-processing). Release
        samples from the noisy marginals (post-processing, stream RELEASE).
    """

    counts: Sensitive
    sizes: tuple[int, ...] = static_field()
    relation: Neighboring = static_field()
    n_records: int = static_field()
    sigma: float = static_field()
    sensitivity: float = static_field()
    plan: Plan = static_field()
    noise: str = static_field()
    rounds: int = static_field(default=1)

    @property
    def workload(self):
        return all_kway(self.sizes, 1)

    def init(self, key: Key) -> IndependentState:
        require_key(key)
        return IndependentState(
            noisy_answers=jnp.zeros(sum(self.sizes), jnp.float32),
            rounds_done=jnp.zeros((), jnp.int32),
        )

    def step(self, state: IndependentState, key: Key) -> tuple[IndependentState, RoundInfo]:
        require_key(key)
        noisy_counts, charge = noise_module.measure_counts(
            stream_key(key, Stream.MEASURE),
            self.counts,
            sigma=self.sigma,
            sensitivity=self.sensitivity,
            noise=self.noise,
        )
        new = IndependentState(
            noisy_answers=noisy_counts * count_unit(self.relation, self.n_records),
            rounds_done=state.rounds_done + 1,
        )
        return new, RoundInfo(charges=(charge,))

    def marginals(self, state: IndependentState) -> list[Array]:
        """Per-attribute probability vectors: noisy answers clipped at 0 and normalised."""
        return _marginals(state.noisy_answers, self.sizes)

    def default_rows(self, state: IndependentState) -> int:
        """n under replace-one (public); under add/remove the noisy total (post-processing).

        Reads the state on the host: call it outside jit (`jaxdp.synthesize` does, and passes
        the rows to the compiled release)."""
        if self.relation is Neighboring.REPLACE_ONE:
            return self.n_records
        blocks = np.split(np.asarray(state.noisy_answers), np.cumsum(self.sizes)[:-1])
        return max(1, round(float(np.mean([b.sum() for b in blocks]))))

    def release(self, state: IndependentState, key: Key, rows: int | None = None) -> Array:
        """Sample synthetic records, (rows, d) int32 codes; rows defaults to `default_rows`."""
        require_key(key)
        rows = self.default_rows(state) if rows is None else _checks.positive_int(rows, "rows")
        return _sample(state.noisy_answers, key, self.sizes, rows)


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
    columns = [
        jax.random.categorical(jax.random.fold_in(key, j), jnp.log(p), shape=(rows,))
        for j, p in enumerate(_marginals(noisy_answers, sizes))
    ]
    return jnp.stack(columns, axis=1).astype(jnp.int32)


def independent(
    data: Dataset,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    relation: Neighboring | str = Neighboring.REPLACE_ONE,
    conversion: str = "exact",
    mesh: Mesh | None = None,
    noise: str = "discrete",
) -> Independent:
    """Build the Independent baseline for a categorical dataset.

    Args:
        data: the private records.
        epsilon, delta: the (epsilon, delta)-DP budget, converted to rho by `conversion`.
        rho: alternatively, a zCDP budget.
        relation: neighbouring relation ("replace-one": n public, fractions; "add-remove": counts).
        conversion: "exact" or "simple" (see `jaxdp.accounting`).
        mesh: split the records over this mesh's devices to count them (one axis "records",
            `jaxdp.queries.records_mesh()`); the answers and noise are those of one device.
        noise: "discrete" (default): exact discrete Gaussian noise on the integer counts;
            "float": float32 Gaussian noise, faster but not meeting its delta exactly
            (`jaxdp.noise`).

    Raises:
        ValueError: bad budget arguments; DataError: numeric columns or empty data.
    """
    plan = make_plan(epsilon, delta, rho, conversion)
    relation = as_relation(relation)
    _checks.one_of(noise, noise_module.NOISES, "noise")
    require_categorical(data, "independent")
    counts = private_counts(data, all_kway(data.domain.sizes, 1), mesh)
    sensitivity = marginal_count_sensitivity(len(data.domain.sizes), relation)
    sigma = count_sigma(sensitivity, plan.rho_budget, noise)
    measure = PlannedCharge("measure 1-way marginals", MEASURE_PRIMITIVE[noise], sensitivity, sigma)
    plan = plan.with_charge(measure).check()
    return Independent(counts, data.domain.sizes, relation, len(data), sigma, sensitivity, plan, noise)
