"""MST: 1-way marginals, a maximum spanning tree of 2-way marginals and Private-PGM (McKenna,
Miklau & Sheldon 2021, "Winning the NIST Contest: A scalable and general approach to
differentially private synthetic data", Algorithm 1), as a preset of `jaxdp.adaptive`.

    measure:   every 1-way marginal, Gaussian, rho / 3
    compress:  merge each attribute's values counted below 3 sigma (post-processing)
    select:    d - 1 pairs forming a spanning tree (Kruskal), each by the exponential mechanism on
               ||M_ab(D) - M_ab(p_1)||_1 against the model p_1 of the 1-way measurements, rho / 3
    measure:   the tree's d - 1 pairs, Gaussian, rho / 3
    output:    records from Private-PGM's model of every measurement

The rule is `jaxdp.selection.MSTSelection`, the family `jaxdp.families.GraphicalModel` and the
driver `jaxdp.mechanisms.host_loop.Annealed` (AIM's: MST is AIM's first round, a fixed budget
instead of annealing and a filter, scores without refits and a tree constraint on the picks).

Beyond the paper: exact discrete Gaussian noise and exact exponential mechanism (the paper's code
uses float Gaussian noise and, in later versions, permute-and-flip at the same epsilon), each
edge measured in the round that picks it (the same mechanism: `MSTSelection`), and records
released by rounding rather than drawn independently (`jaxdp.families.pgm_sampling.sample`).
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.compression import Compression
from jaxdp.families.graphical import GraphicalModel
from jaxdp.mechanisms.adaptive import adaptive
from jaxdp.mechanisms.host_loop import Annealed
from jaxdp.mechanisms.registry import MechanismSpec, register
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import MSTSelection
from jaxdp.types import Neighboring

# MST's own compression step (every attribute, values counted below 3 sigma), spread back by the
# merged values' noisy counts: on 6-attribute ADULT (epsilon 1, seeds 0-1) mean L1 0.2641 and
# 0.2643 against 0.2648 and 0.2662 spread uniformly as the paper does (a frozen dataclass: safe
# to share)
MST_COMPRESSION = Compression(threshold=3.0, spread="noisy", min_values=1)


def mst(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    relation: Neighboring | str = Neighboring.ADD_REMOVE,
    conversion: str = "exact",
    rounds: int | None = None,
    max_model_size: float = 80.0,
    iters: int = 1000,
    final_iters: int = 3000,
    tol: float | None = 1e-2,
    noise: str = "discrete",
    mesh: Mesh | None = None,
    compress: Compression | None = MST_COMPRESSION,
) -> Annealed:
    """Build MST on a categorical dataset.

    Args:
        data: the private records (at least 2 attributes).
        workload: the marginals the release is judged on (MST's selection does not read it: it
            picks among every pair of attributes; the model answers the workload).
        epsilon, delta: the (epsilon, delta)-DP budget, converted to rho by `conversion`.
        rho: alternatively, a zCDP budget.
        relation: "add-remove" (default, as in the paper) or "replace-one".
        conversion: "exact" or "simple" (see `jaxdp.accounting`).
        rounds: leave None: MST runs one round per attribute (the 1-way round and d - 1 edges);
            any other count is refused.
        max_model_size: the graphical model's size cap in megabytes (a tree's model is far
            below it unless an attribute is huge).
        iters, final_iters, tol: the graphical model's fits: of the 1-way measurements, and of
            every measurement at the end (`jaxdp.families.GraphicalModel`; post-processing).
        noise: "discrete" (default: exact discrete Gaussian noise and exponential mechanism) or
            "float" (float32 noise and Gumbel selection: faster, not meeting its delta exactly).
        compress: the domain compression after the 1-way round (default MST's own: every
            attribute, values counted below 3 sigma; spread back by their noisy counts, where the
            paper spreads uniformly: `MST_COMPRESSION`; post-processing, no privacy cost); None
            keeps the declared domain.
        mesh: split the records over this mesh's devices to count them (one axis "records",
            `jaxdp.queries.records_mesh()`); the release is that of one device with the same key.

    Raises:
        ValueError: bad arguments or fewer than 2 attributes.
        DataError: numeric columns, empty data, or a workload over another domain.
        ImportError: `mbi` is not installed (pip install "jaxdp-synth[pgm]").

    Privacy:
        See `jaxdp.selection.MSTSelection`: rho-zCDP by a plan fixed before the run, for the
        stated relation.
    """
    return adaptive(
        data,
        workload,
        select=MSTSelection(),
        family=GraphicalModel(max_model_size=max_model_size, iters=iters, final_iters=final_iters, tol=tol),
        rounds=rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        relation=relation,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        compress=compress,
        name="mst",
    )


# add-remove first: the paper's relation
register(
    "mst",
    MechanismSpec(
        mst,
        relations=(Neighboring.ADD_REMOVE, Neighboring.REPLACE_ONE),
        mesh=True,
        compression=MST_COMPRESSION,
        fixed_rounds=True,
    ),
)
