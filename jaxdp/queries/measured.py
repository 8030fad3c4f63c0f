"""Relaxed answers of the measured marginals only, for fits on workloads too large to answer whole.

A fit's loss reads only measured marginals: RAP measures at most rounds x K of them, GEM one a
round, AIM-GEM what AIM selected. On 14-attribute ADULT the 364 3-way marginals hold 20.9M cells,
and the pivot kernel (`relaxed.relaxed_marginals`) answers every cell at every Adam step: 1000
rows x 20.9M cells, 0.78 s a value and gradient on a 2-core CPU, so one RAP fit of 10 x 200 steps
ran for most of an hour. Here each marginal sits behind a `lax.cond` on whether any of its cells
is measured, so a step costs what the measured marginals hold (rows x their cells): 0.10 s with
50 marginals measured (`bench/bench_measured.py`). One compiled program serves every round,
whatever was measured; it compiles in ~29 s there against the dense kernel's 2.3 s.

- `squared_error`: sum_cells weights * (answers - targets)^2 over the active marginals, with a
  hand-written backward pass (one cond a marginal again), so that autodiff does not carry every
  branch's intermediates out of its cond;
- `largest_errors`: the k largest masked |answers - targets| >= a floor (GEM's ranking), from each
  active marginal's own top k.

A marginal's answers are the mean over rows of the outer product of its attributes' blocks (one
multiply-add per row and cell, as in the pivot kernel), in the workload's row-major cell order.
Rows are not chunked: a marginal holds its head (its cells over its largest block) x rows floats
while it is answered (10,000 x 1,000 for ADULT's 100 x 100 x 99), twice in the backward pass.
The answers equal `relaxed_marginals`' up to float summation order. `by_marginal` says when to use
this path: past `DENSE_MAX_QUERIES` counting queries, where the dense kernel's every-cell pass costs
more than the conds.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.queries.relaxed import _HIGHEST, _khatri_rao, _nn, _nt, block_offsets
from jaxdp.queries.workload import MarginalWorkload
from jaxdp.types import Array

# Workloads with more counting queries than this are fitted per measured marginal. Every bench
# table but 14-attribute ADULT (ADULT-6: 55,765 queries; the bundled ADULT-reduced: 14,955) stays
# on the dense kernel, which is faster per cell and compiles in a fraction of the time.
DENSE_MAX_QUERIES = 1 << 20


def by_marginal(workload: MarginalWorkload) -> bool:
    """Whether fits over `workload` should read the measured marginals only."""
    return workload.n_queries > DENSE_MAX_QUERIES


def active_marginals(mask: Array, workload: MarginalWorkload) -> Array:
    """(n_marginals,) bool: whether any cell of each marginal is in `mask` ((n_queries,) bool)."""
    counts = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(mask.astype(jnp.int32))])
    starts = np.asarray(workload.offsets)
    return counts[starts + np.asarray(workload.cells)] > counts[starts]


def _blocks(pt: Array, workload: MarginalWorkload, i: int) -> list[Array]:
    """Marginal i's attributes' blocks of the transposed probabilities, (size_a, rows) each."""
    offsets = block_offsets(workload.sizes)
    return [pt[offsets[a] : offsets[a] + workload.sizes[a]] for a in workload.cliques[i]]


def _span(workload: MarginalWorkload, i: int) -> slice:
    start = workload.offsets[i]
    return slice(start, start + workload.cells[i])


def _layout(blocks: list[Array]) -> tuple[int, list[Array]]:
    """The largest block is the matmul's output side; the others form the row-wise outer product
    that is materialised, which is then as small as it can be."""
    last = max(range(len(blocks)), key=lambda a: blocks[a].shape[0])
    return last, [b for a, b in enumerate(blocks) if a != last]


def _outer_sums(blocks: list[Array]) -> tuple[Array, Array | None]:
    """(cells,) the sums over rows of the outer product of `blocks` ((size_a, rows) each: rows
    last, XLA:CPU's fast matmul layout), raveled row-major in the blocks' order: one marginal's
    relaxed answers times the rows; and the materialised head (None for one block)."""
    if len(blocks) == 1:
        return jnp.sum(blocks[0], axis=1), None
    last, head_blocks = _layout(blocks)
    head = functools.reduce(_khatri_rao, head_blocks)
    shape = [b.shape[0] for b in head_blocks] + [blocks[last].shape[0]]
    return jnp.moveaxis(_nt(head, blocks[last]).reshape(shape), -1, last).reshape(-1), head


def _outer_sums_grads(blocks: list[Array], head: Array | None, d_sums: Array) -> list[Array]:
    """The gradient of <d_sums, _outer_sums(blocks)> with respect to each block: two matmuls with
    the forward pass's head, then each head block's share of the head's gradient.

    The pivot kernel's `_trilinear` has the same algebra for three blocks, but under `jax.vjp`
    it recomputes the head and reduces by multiply-and-sum: 1.4-1.5x slower a step on 14-attribute
    ADULT (50 and 364 marginals measured, one run, 2-core CPU).
    """
    rows = blocks[0].shape[1]
    if len(blocks) == 1:
        return [jnp.broadcast_to(d_sums[:, None], (d_sums.shape[0], rows))]
    last, head_blocks = _layout(blocks)
    shape = [b.shape[0] for b in blocks]
    d = jnp.moveaxis(d_sums.reshape(shape), last, -1).reshape(head.shape[0], shape[last])
    d_last = jax.lax.dot_general(d, head, (((0,), (0,)), ((), ())), precision=_HIGHEST)
    d_head = _nn(d, blocks[last]).reshape([b.shape[0] for b in head_blocks] + [rows])
    letters = "abcdefghijklmnopqrstuvwxyz"[: len(head_blocks)]
    d_heads = []
    for m in range(len(head_blocks)):
        others = [f"{letters[o]}z" for o in range(len(head_blocks)) if o != m]
        spec = ",".join([f"{letters}z", *others]) + f"->{letters[m]}z"
        d_heads.append(
            jnp.einsum(spec, d_head, *[b for o, b in enumerate(head_blocks) if o != m], precision=_HIGHEST)
        )
    d_heads.insert(last, d_last)
    return d_heads


def _marginal_loss(blocks: list[Array], targets: Array, weights: Array) -> Array:
    """Weights may be a bool mask (RAP's): it is cast here and in the backward pass, inside the
    marginal's branch, so no float copy of the whole workload's mask is made at every step."""
    sums, _ = _outer_sums(blocks)
    return jnp.sum(weights.astype(sums.dtype) * (sums / blocks[0].shape[1] - targets) ** 2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def squared_error(workload: MarginalWorkload, probs: Array, targets: Array, weights: Array, active: Array):
    """sum over the active marginals' cells of weights * (relaxed answers - targets)^2.

    Args:
        workload: the marginals (static).
        probs: (rows, sum(sizes)) the relaxed rows (per-attribute probability blocks).
        targets, weights: (n_queries,) in the workload's flat order (weights float, or a bool mask).
        active: (n_marginals,) bool; an inactive marginal adds nothing (`active_marginals` of the
            cells with nonzero weight gives the same sum as the dense kernel).

    Differentiable in `probs` only (reverse mode).
    """
    pt = probs.T
    total = jnp.zeros((), probs.dtype)
    for i in range(len(workload)):
        span = _span(workload, i)

        def term(i=i, span=span):
            return _marginal_loss(_blocks(pt, workload, i), targets[span], weights[span])

        total = total + jax.lax.cond(active[i], term, lambda: jnp.zeros((), probs.dtype))
    return total


def _squared_error_fwd(workload, probs, targets, weights, active):
    return squared_error(workload, probs, targets, weights, active), (probs, targets, weights, active)


def _squared_error_bwd(workload, residuals, g):
    """One cond a marginal again: each active marginal's gradient on its own blocks (its forward
    pass recomputed inside the branch) added into its attributes' gradients, which pass through
    the cond untouched when it is inactive."""
    probs, targets, weights, active = residuals
    pt = probs.T
    grads = [jnp.zeros((size, pt.shape[1]), pt.dtype) for size in workload.sizes]
    for i in range(len(workload)):
        span, clique = _span(workload, i), workload.cliques[i]
        blocks = _blocks(pt, workload, i)

        def term(acc, blocks=blocks, span=span):
            sums, head = _outer_sums(blocks)
            rows = pt.shape[1]
            d_sums = (2.0 * g / rows) * weights[span].astype(sums.dtype) * (sums / rows - targets[span])
            return [a + d for a, d in zip(acc, _outer_sums_grads(blocks, head, d_sums), strict=True)]

        updated = jax.lax.cond(active[i], term, lambda acc: acc, [grads[a] for a in clique])
        for a, grad in zip(clique, updated, strict=True):
            grads[a] = grad
    return jnp.concatenate(grads).T, None, None, None


squared_error.defvjp(_squared_error_fwd, _squared_error_bwd)


def largest_errors(
    workload: MarginalWorkload, probs: Array, targets: Array, mask: Array, active: Array, floor: Array, k: int
) -> tuple[Array, Array]:
    """The `k` largest |relaxed answers - targets| over masked cells where it is at least `floor`,
    and their flat query indices: `lax.top_k` of those errors with -1 elsewhere, as GEM ranks
    them, from each active marginal's own top min(k, cells) (entries of -1 are no error, as
    there).

    Args:
        workload, probs, targets: as in `squared_error`.
        mask: (n_queries,) bool, the measured cells; active: `active_marginals(mask, workload)`.
        floor: the least error that counts (GEM's gamma).
        k: how many (static; at most n_queries).
    """
    pt = probs.T
    values, indices = [], []
    for i in range(len(workload)):
        span, take = _span(workload, i), min(k, workload.cells[i])

        def top(i=i, span=span, take=take):
            error = jnp.abs(_outer_sums(_blocks(pt, workload, i))[0] / pt.shape[1] - targets[span])
            value, index = jax.lax.top_k(jnp.where(mask[span] & (error >= floor), error, -1.0), take)
            return value, index + span.start

        def none(take=take, span=span):
            return jnp.full(take, -1.0, probs.dtype), jnp.full(take, span.start, jnp.int32)

        value, index = jax.lax.cond(active[i], top, none)
        values.append(value)
        indices.append(index)
    value, pick = jax.lax.top_k(jnp.concatenate(values), k)
    return value, jnp.concatenate(indices)[pick]
