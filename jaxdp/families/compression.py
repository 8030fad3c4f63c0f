"""Private domain compression: merge the values a noisy 1-way count says are rare.

MST's compression step (McKenna, Miklau & Sheldon 2021, Section 4.2), which dpmm also applies to
AIM: once every 1-way marginal has been measured with Gaussian noise of scale sigma, the values of
an attribute whose noisy count is below `threshold` x sigma are merged into one code. The run then
measures and fits marginals over the compressed domain, where a marginal has fewer cells: each
measurement spreads its noise over fewer cells (the merged values' noise adds up into one cell
instead of one draw per value), the model-size filter admits larger cliques, and AIM's quality
score charges them less for their size. On release a merged code is spread back over the values
it stands for, uniformly (MST's choice), in proportion to their noisy 1-way counts, or to those
counts shrunk towards their mean by how much of their spread is noise.

Post-processing only: the merge is a function of released noisy counts (and is itself
publishable), so it changes no privacy cost. Measuring the compressed domain's marginals reads
the same records with the same sensitivity (a coarser histogram of them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._jit import fast_compiled
from jaxdp.families._sampling import padded_length, systematic, weyl_step
from jaxdp.keys import fold_in
from jaxdp.queries import MarginalWorkload
from jaxdp.types import Array, Key

SPREADS = ("uniform", "noisy", "shrunk")


@dataclasses.dataclass(frozen=True)
class Compression:
    """How a run compresses its domain after the noisy 1-way round (module docstring).

    Args:
        threshold: values whose noisy 1-way count is below threshold x sigma are merged (MST's
            and dpmm's 3).
        spread: how a released merged code becomes a value: "noisy" (default), in proportion to
            their noisy 1-way counts clipped at 0 (uniform where all are 0), or "uniform" over
            the merged values (MST's). On 6-attribute ADULT (AIM, epsilon 1, all 3-way
            marginals, seeds 0-2) "noisy" gave mean L1 0.1454, 0.1433, 0.1411 and "uniform"
            0.1477, 0.1498, 0.1461 (`bench/bench_aim.py --compress 3 3:noisy`). "shrunk": the
            noisy counts shrunk towards the merged values' mean by the share of their spread
            that is not noise (`shrunk_counts`; uniform where they are all noise, "noisy" where
            the noise is negligible). AIM at epsilon 1, 5 seeds, against "noisy": mean L1 -7% on
            the 1,304-record pile table and -2.6% on PUMS, but +0.9% on adult9 and +1.2% on
            6-attribute ADULT (3 seeds), so not the default (bench/HISTORY.md, "Small tables").
        min_values: attributes with fewer values are never compressed. A merge pays where an
            attribute has many values (every marginal with it has that many times the cells,
            and its rare values' cells carry little but noise); on a small attribute the merged
            values are a large share of it, and their joint structure is lost. On the bundled
            ADULT-reduced (attributes of at most 16 values) merging below 3 sigma raised AIM's
            mean L1 by 3% over 5 seeds (0.0620 against 0.0602); on 6-attribute ADULT, where only
            age (85 values) merges, it lowered it by 11%.
    """

    threshold: float = 3.0
    spread: str = "noisy"
    min_values: int = 20

    def checked(self) -> Compression:
        """These settings, validated.

        Raises:
            ValueError: a threshold that is not finite and > 0, or an unknown spread.
        """
        threshold = _checks.positive_finite(self.threshold, "threshold")
        spread = _checks.one_of(self.spread, SPREADS, "spread")
        return Compression(threshold, spread, _checks.positive_int(self.min_values, "min_values"))

    def of(self, noisy: Sequence[np.ndarray | int], sigma: float) -> CompressedDomain:
        """The compression of the domain whose attributes have these noisy 1-way counts.

        Args:
            noisy: per attribute of the domain, in order, its (size,) array of noisy counts,
                measured with Gaussian noise of scale `sigma` (counts), or, for an attribute no
                1-way marginal measured (outside the workload), its size: it is kept whole.
            sigma: the noise scale of every count.
        """
        kept, weights = [], []
        for counts in noisy:
            if np.ndim(counts) == 0:
                kept.append(np.ones(int(counts), bool))
                weights.append(np.zeros(int(counts)))
                continue
            counts = np.asarray(counts, np.float64)
            keep = counts >= self.threshold * sigma
            if counts.size < self.min_values or keep.sum() >= counts.size - 1:
                # a small attribute keeps every value; merging one value (or none) changes nothing
                keep = np.ones(counts.size, bool)
            spread = np.where(keep, 0.0, self._weights(counts, keep, sigma))
            if not keep.all() and not spread.any():  # no merged value has a positive count
                spread = (~keep).astype(np.float64)
            kept.append(keep)
            weights.append(spread / spread.sum() if spread.any() else spread)
        return CompressedDomain(tuple(kept), tuple(weights))

    def _weights(self, counts: np.ndarray, keep: np.ndarray, sigma: float) -> np.ndarray:
        """(size,) unnormalised shares of the merged code for the values not kept (`spread`)."""
        if self.spread == "uniform":
            return np.ones_like(counts)
        weights = np.maximum(counts, 0.0)
        if self.spread == "shrunk" and not keep.all():  # `of` merges two values or none
            weights[~keep] = np.maximum(shrunk_counts(counts[~keep], sigma), 0.0)
        return weights


def shrunk_counts(noisy: np.ndarray, sigma: float) -> np.ndarray:
    """Noisy counts (Gaussian noise of scale `sigma`, at least two) shrunk towards their mean by
    the share of their spread that is not noise: James and Stein's positive-part estimator, the
    signal variance estimated as their sample variance less sigma^2. Where the counts are all
    noise the shrink is complete (their mean: the uniform spread); where their spread dwarfs the
    noise it is none (the counts as measured)."""
    mean = float(np.mean(noisy))
    signal = max(float(np.var(noisy, ddof=1)) - sigma**2, 0.0)
    return mean + signal / (signal + sigma**2) * (noisy - mean)


class CompressedDomain(NamedTuple):
    """The compression a run decided (public: a function of released noisy counts).

    kept: per attribute, (size,) bool the values kept as codes of their own (in order); the
        others share one code after them.
    spread: per attribute, (size,) float64 the share of its merged code each value receives on
        release (0 for kept values; summing to 1 over the merged ones).
    """

    kept: tuple[np.ndarray, ...]
    spread: tuple[np.ndarray, ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        """The compressed domain's sizes: the kept values, plus one merged code if any."""
        return tuple(int(k.sum()) + int(not k.all()) for k in self.kept)

    @property
    def changed(self) -> bool:
        return any(not k.all() for k in self.kept)

    def codes(self, attribute: int) -> np.ndarray:
        """(size,) int32 each original value's compressed code."""
        keep = self.kept[attribute]
        return np.where(keep, np.cumsum(keep) - 1, int(keep.sum())).astype(np.int32)

    def merged(self, attribute: int) -> list[int]:
        """The original values that share the attribute's merged code (none if nothing merged)."""
        return np.flatnonzero(~self.kept[attribute]).tolist()

    def workload(self, workload: MarginalWorkload) -> MarginalWorkload:
        """The same marginals over the compressed domain."""
        return MarginalWorkload(self.sizes, workload.cliques, workload.weights)

    def cell_map(self, workload: MarginalWorkload) -> np.ndarray:
        """(workload.n_queries,) int32 each original cell's position in the compressed
        workload's flat answers: summing counts by it gives the compressed marginals' counts."""
        compressed = self.workload(workload)
        out = []
        for i, clique in enumerate(workload.cliques):
            index = np.zeros(workload.marginal_shape(i), np.int64)
            for axis, a in enumerate(clique):
                shape = [1] * len(clique)
                shape[axis] = workload.sizes[a]
                index = index * compressed.sizes[a] + self.codes(a).reshape(shape)
            out.append(compressed.offsets[i] + index.reshape(-1))
        return np.concatenate(out).astype(np.int32)

    def one_way(self, attribute: int, noisy: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
        """The attribute's noisy 1-way counts over its compressed values and each cell's noise
        scale: a kept value's count (sigma), the merged code's the sum of its values' counts
        (sigma sqrt(k) for k merged values)."""
        noisy = np.asarray(noisy, np.float64)
        codes, size = self.codes(attribute), self.sizes[attribute]
        counts = np.bincount(codes, weights=noisy, minlength=size)
        scales = sigma * np.sqrt(np.bincount(codes, minlength=size).astype(np.float64))
        return counts, scales

    def answers(self, compressed: np.ndarray, workload: MarginalWorkload) -> np.ndarray:
        """(workload.n_queries,) answers over the original domain of the distribution whose
        compressed answers are `compressed` (over `self.workload(workload)`), each merged code
        spread over its values by `spread`."""
        compressed = np.asarray(compressed, np.float64)
        share = [np.where(k, 1.0, s) for k, s in zip(self.kept, self.spread, strict=True)]
        out = compressed[self.cell_map(workload)]
        for i, clique in enumerate(workload.cliques):
            cells = slice(workload.offsets[i], workload.offsets[i] + workload.cells[i])
            factor = np.ones(workload.marginal_shape(i))
            for axis, a in enumerate(clique):
                shape = [1] * len(clique)
                shape[axis] = workload.sizes[a]
                factor = factor * share[a].reshape(shape)
            out[cells] = out[cells] * factor.reshape(-1)
        return out

    def records(self, key: Key, codes: Array) -> Array:
        """(rows, d) int32 records over the original domain from records over the compressed
        one: each attribute's merged code becomes one of its values, by systematic sampling from
        `spread` (`systematic`: the values' counts are their shares of the merged count, rounded,
        and spread evenly over the records' other attributes), from `key` (a RELEASE stream
        key)."""
        columns = []
        codes = np.asarray(codes, np.int32)  # on the host: eager JAX slices would each compile
        strata = codes.T  # spread evenly over the other attributes too
        # every merged attribute padded to the widest one's shapes (powers of two), so that one
        # program spreads them all: the padding is never picked nor decoded, the draws the same
        compressed = [keep for keep in self.kept if not keep.all()]
        width = max((padded_length(int((~keep).sum())) for keep in compressed), default=1)
        kept_width = max((padded_length(int(keep.sum()) + 1) for keep in compressed), default=1)
        for a, keep in enumerate(self.kept):
            column = codes[:, a]
            if keep.all():
                columns.append(column)
                continue
            merged = np.flatnonzero(~keep)
            # one row of shares and a spare row
            table = np.zeros((2, width), np.float32)
            table[0, : merged.size] = self.spread[a][merged]
            values = np.zeros(width, np.int32)
            values[: merged.size] = merged
            # kept codes decode to their values (the merged code's entry is unused)
            decode = np.zeros(kept_width, np.int32)
            decode[: int(keep.sum())] = np.flatnonzero(keep)
            columns.append(
                np.asarray(
                    _spread_column(
                        fold_in(key, a),
                        table,
                        column,
                        int(keep.sum()),
                        values,
                        decode,
                        merged.size,
                        strata,
                        weyl_step(a),
                    )
                )
            )
        return jax.device_put(np.stack(columns, axis=1))


@fast_compiled  # as `systematic`, which it runs: compiled and run once per merged attribute
def _spread_column(
    key: Key, table, column: Array, merged_code, values, decode, size, strata: Array, step: Array
) -> Array:
    """One attribute's codes over its declared values: the merged code (`merged_code`) becomes
    the value `systematic` picks among `values` (the first `size`, by `table`'s first row); a kept
    code decodes through `decode`. One compiled program per padded shape, where its operations
    run one by one would compile each. `step`: the attribute's Weyl step (`weyl_step`)."""
    group = jnp.where(column == merged_code, 0, 1).astype(jnp.int32)
    pick = systematic(key, jnp.asarray(table), group, jnp.asarray(size, jnp.int32), strata, step)
    return jnp.where(group == 0, jnp.asarray(values)[pick], jnp.asarray(decode)[column])
