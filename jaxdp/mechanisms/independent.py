"""Independent: measure every 1-way marginal once, sample each attribute independently, as a
preset of `jaxdp.adaptive`.

    one round:  select every 1-way marginal (no privacy cost: nothing is looked at)
                measure their counts together (Gaussian)
                family: the product of the noisy marginals, clipped at 0 and normalised
    output:     records with each attribute drawn independently

The baseline every correlated mechanism must beat: it spends the whole budget on the 1-way
marginals and ignores all dependence between attributes.
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset
from jaxdp.families.baselines import Product
from jaxdp.mechanisms._common import require_categorical
from jaxdp.mechanisms.adaptive import Adaptive, adaptive
from jaxdp.mechanisms.registry import BOTH_RELATIONS, MechanismSpec, register
from jaxdp.queries import MarginalWorkload, all_kway
from jaxdp.selection import Everything
from jaxdp.types import Neighboring


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
) -> Adaptive:
    """Build the Independent baseline for a categorical dataset.

    Args:
        data: the private records.
        epsilon, delta: the (epsilon, delta)-DP budget, converted to rho by `conversion`.
        rho: alternatively, a zCDP budget.
        relation: neighbouring relation ("replace-one": n public, fractions; "add-remove": counts,
            and the released row count is the noisy total).
        conversion: "exact" or "simple" (see `jaxdp.accounting`).
        mesh: split the records over this mesh's devices to count them (one axis "records",
            `jaxdp.queries.records_mesh()`); the answers and noise are those of one device.
        noise: "discrete" (default): exact discrete Gaussian noise on the integer counts;
            "float": float32 Gaussian noise, faster but not meeting its delta exactly
            (`jaxdp.noise`).

    Raises:
        ValueError: bad budget arguments; DataError: numeric columns or empty data.

    Privacy:
        One Gaussian measurement of the counts of all d one-way marginals, L2 sensitivity
        sqrt(d) (add/remove) or sqrt(2 d) (replace-one); key stream MEASURE of round 0. Under
        replace-one the noisy counts are divided by the public n (post-processing). Release
        samples from the noisy marginals (post-processing, stream RELEASE).
    """
    require_categorical(data, "independent")  # before the 1-way workload is built over its attributes
    return adaptive(
        data,
        all_kway(data.domain.sizes, 1),
        select=Everything(),
        family=Product(),
        rounds=1,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        relation=relation,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        name="independent",
        label="1-way marginals",
    )


def _registered(data: Dataset, workload: MarginalWorkload, *, mesh: Mesh | None = None, **budget) -> Adaptive:
    return independent(data, mesh=mesh, **budget)  # measures the 1-way marginals whatever the workload


register(
    "independent",
    MechanismSpec(_registered, one_round=True, relations=BOTH_RELATIONS, mesh=True, relaxed=False),
)
