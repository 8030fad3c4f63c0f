"""AIM: workload-adaptive selection with a fitted graphical model (McKenna et al., VLDB 2022), as
a preset of `jaxdp.adaptive`.

    round 0:    measure every 1-way marginal of W+ (the workload's downward closure), Gaussian
    round t:    C_t = the candidates whose junction tree stays under the size budget
                select r_t in C_t by the exponential mechanism on
                    q_r = w_r (||M_r(D) - M_r(p_hat)||_1 - sqrt(2/pi) sigma_t n_r)
                measure M_{r_t}(D) (Gaussian, sigma_t); refit p_hat to every measurement
                anneal: halve sigma and double epsilon if p_hat barely moved on r_t
                filter: when what is left cannot pay two more rounds, spend it in one and stop
    output:     records sampled from p_hat, with per-marginal error bounds (Section 5)

The rule is `jaxdp.selection.AIMSelection`, the family `jaxdp.families.GraphicalModel`
(Private-PGM's estimator, compiled once whatever the measured cliques); the driver and the error
bounds are `jaxdp.mechanisms.host_loop.Annealed`'s.

Beyond the paper, by default: round 0's 1-way counts measured with noise at most n / 150
(`resolution`; the run then calibrated for the fewer rounds that takes, `AIMSelection`: on
tables of about a thousand records the paper's T = 16 d measures them with noise near a tenth of
n at epsilon 1, and AIM fell behind Independent at epsilon 0.1), domain compression after round
0 (MST's, post-processing; it changes the cells n_r that the scores, the annealing test, the
model size and the error bounds count, so `compress=None, resolution=None` runs the paper's
algorithm), exact discrete Gaussian noise and
exponential mechanism, fits that stop early (`tol`), records released by rounding rather than
drawn independently (`jaxdp.families.pgm_sampling.sample`), and a measurement share alpha of 0.95 rather
than 0.9 where the workload has at most T marginals (`jaxdp.selection.default_alpha`; alpha=0.9
runs the paper's). Checked against the paper's Algorithms 2-4 and Section 5 (constants, round
0's charge, the annealing test, the final round, the size filter, the bounds): the same, with the
paper's 1/sigma loss weights read as its maximum likelihood estimate (1/sigma^2, as
Private-PGM).
"""

from __future__ import annotations

from jax.sharding import Mesh

from jaxdp.domain import Dataset, Domain
from jaxdp.families.compression import Compression
from jaxdp.families.graphical import GraphicalModel, Refit
from jaxdp.mechanisms.adaptive import adaptive
from jaxdp.mechanisms.host_loop import Annealed
from jaxdp.mechanisms.registry import MechanismSpec, register, rounds_cap
from jaxdp.queries import MarginalWorkload
from jaxdp.selection import AIMSelection
from jaxdp.selection.aim import ONE_WAY_RESOLUTION
from jaxdp.types import Neighboring

# AIM's default: MST's merge of the values counted below 3 sigma, in attributes of at least 20
# values (a frozen dataclass: safe to share)
DEFAULT_COMPRESSION = Compression()
# AIM's last fit is refit where it follows the noise (`jaxdp.families.Refit`; frozen: safe to share)
DEFAULT_REFIT = Refit()


def aim(
    data: Dataset,
    workload: MarginalWorkload,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    relation: Neighboring | str = Neighboring.ADD_REMOVE,
    conversion: str = "exact",
    max_model_size: float = 80.0,
    max_rounds: int | None = None,
    alpha: float | None = None,
    iters: int = 1000,
    final_iters: int = 3000,
    tol: float | None = 1e-2,
    refit: Refit | None = DEFAULT_REFIT,
    noise: str = "discrete",
    mesh: Mesh | None = None,
    compress: Compression | None = DEFAULT_COMPRESSION,
    resolution: float | None = ONE_WAY_RESOLUTION,
) -> Annealed:
    """Build AIM for a weighted marginal workload on a categorical dataset.

    Args:
        data: the private records.
        workload: the marginals (and weights c_s) the synthetic data should preserve.
        epsilon, delta: the (epsilon, delta)-DP budget, converted to rho by `conversion`.
        rho: alternatively, a zCDP budget.
        relation: "add-remove" (default, as in the paper: n private, counts) or "replace-one".
        conversion: "exact" or "simple" (see `jaxdp.accounting`).
        max_model_size: junction-tree size cap in megabytes (the paper's MAX-SIZE, 80 MB).
        max_rounds: T, the rounds the initial sigma and epsilon are calibrated for (default
            16 d, at least the workload's attributes and at least 2, or fewer by `resolution`);
            also the most rounds the run takes, round 0 (every 1-way marginal measured)
            included. The filter usually ends the run sooner, when the budget is spent.
        alpha: share of each round's budget spent on measurement (the rest on selection).
            None: `jaxdp.selection.default_alpha`'s rule (0.95 where the workload has at most
            T marginals, else the paper's 0.9).
        iters, final_iters, tol, refit: the graphical model's fits (see
            `jaxdp.families.GraphicalModel`; post-processing only: they change no privacy cost).
        noise: "discrete" (default: integer counts plus exact discrete Gaussian noise, exact
            exponential mechanism) or "float" (float32 noise and Gumbel selection: faster, but
            float noise does not meet the stated delta; see `jaxdp.noise`).
        compress: compress the domain after the noisy 1-way round (default
            `jaxdp.families.Compression()`: in attributes of at least 20 values, merge the
            values counted below 3 sigma, spread back by their noisy counts on release;
            post-processing, no privacy cost); None keeps the declared domain. On 6-attribute
            ADULT (epsilon 1, all 3-way marginals) it cut the mean L1 of the records by about a
            tenth (bench/HISTORY.md, "End to end against SmartNoise and dpmm", second run).
        mesh: split the records over this mesh's devices to count them (one axis "records",
            `jaxdp.queries.records_mesh()`; one psum); the rest of the run and the release are
            those of one device with the same key.
        resolution: with the default T only (a `max_rounds` given calibrates the run for it, as
            the paper does): where 16 d rounds would measure the 1-way counts with noise above
            n / resolution (n the table's size: public under replace-one, else estimated from
            round 0's counts) and some noisy count of an attribute of at least 20 values is below 3
            sigmas (a value the noise could merge or lose),
            round 0 measures them a second time, so that the two together
            have that noise, and the rounds after are calibrated for the fewer rounds T' that
            takes (at least 2 d, or d where the table is so small against the noise that even
            the whole budget would measure its 1-way counts with noise above n / 20:
            `jaxdp.selection.AIMSelection`). None: the paper's schedule for T. On three tables
            of 1,000-1,304 records (bench/HISTORY.md, "Small tables", 5-20 seeds) it cut AIM's
            mean L1 at epsilon 0.1 from 1.50-1.62 to 1.13-1.39 (0.78-0.83x Independent's on two,
            1.01x it on PUMS under the same relation, 0.96x under Independent's default) and at
            epsilon 1 by 8-20%; on the bench's tables of 48,842-50,000 records it changes
            nothing at epsilon 1.

    Raises:
        ValueError: bad arguments; DataError: numeric columns, empty data, or a workload over
        another domain. ImportError: `mbi` is not installed (pip install "jaxdp-synth[pgm]").

    Privacy:
        See `jaxdp.selection.AIMSelection`: rho-zCDP by the filter, for the stated relation.
    """
    return adaptive(
        data,
        workload,
        select=AIMSelection(alpha=alpha, resolution=resolution if max_rounds is None else None),
        family=GraphicalModel(
            max_model_size=max_model_size,
            iters=iters,
            final_iters=final_iters,
            tol=tol,
            refit=refit,
        ),
        rounds=max_rounds,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        relation=relation,
        conversion=conversion,
        noise=noise,
        mesh=mesh,
        compress=compress,
        name="aim",
    )


def _error_bounds(mechanism: Annealed, state, synthetic: Dataset, confidence: float, domain: Domain) -> dict:
    """AIM's per-marginal L1 error bounds of the released records (post-processing: publishable)."""
    if isinstance(confidence, bool) or not isinstance(confidence, float | int) or not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    bounds = mechanism.error_bounds(state, float(confidence), synthetic=synthetic.codes)
    marginals = []
    for clique, names, b, nb, s in zip(
        mechanism.workload.cliques,
        mechanism.workload.names(domain),
        bounds.bound,
        bounds.normalised,
        bounds.supported,
        strict=True,
    ):
        entry = {
            "marginal": list(names),
            "l1_bound": float(b),
            "l1_bound_normalised": float(nb),
            "supported": bool(s),
        }
        marginals.append({**entry, **_bounded_domain(state.compressed, clique, names)})
    return {
        "confidence": float(confidence),
        "units": "L1 distance between count vectors; normalised: divided by the released row count",
        "marginals": marginals,
    }


def _bounded_domain(compressed, clique, names) -> dict:
    """What a marginal's bound covers: "declared" cells, or "compressed" ones where an attribute of
    it had values merged after round 0 (`merged`: those codes, already public in the report's
    `compression`): the merged values count as one cell, and how the release spreads that cell's
    count over them is not bounded."""
    merged = (
        {} if compressed is None else {n: compressed.merged(a) for a, n in zip(clique, names, strict=True)}
    )
    merged = {n: values for n, values in merged.items() if values}
    return {"domain": "compressed", "merged": merged} if merged else {"domain": "declared"}


# add-remove first: the paper's relation
AIM_RELATIONS = (Neighboring.ADD_REMOVE, Neighboring.REPLACE_ONE)
register(
    "aim",
    MechanismSpec(
        rounds_cap(aim),
        error_bounds=_error_bounds,
        relations=AIM_RELATIONS,
        mesh=True,
        compression=DEFAULT_COMPRESSION,
    ),
)
