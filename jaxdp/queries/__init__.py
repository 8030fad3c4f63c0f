"""Query workloads and the kernels that answer them.

Workloads (`workload`): k-way marginal workloads, their counting queries in a documented cell order
(row-major over each marginal's ascending attributes; marginals concatenated in workload order),
array forms (`ProductQueries`) and fixed-capacity measured subsets (`QuerySubset`).

Kernels (none jitted here; callers jit):
- `exact`: counts / fractions on integer-coded records (segment-sum per marginal);
- `sharded`: the same counts over records sharded across devices (one psum);
- `relaxed`: product-query answers on probability rows (pivot matmuls; gather path for subsets);
- `measured`: a fit's loss and error ranking over the measured marginals alone, for workloads too
  large to answer whole at every step;
- `histogram`: marginals of a dense histogram over an enumerable domain;
- `threshold`: mixed marginals and class-conditional linear thresholds (hard / tempered sigmoid).
"""

from jaxdp.queries.exact import (
    ExactPlan,
    counting_query_answers,
    counting_query_on_record,
    exact_plan,
    marginal_counts,
    marginal_fractions,
    record_answers,
)
from jaxdp.queries.histogram import DEFAULT_MAX_CELLS, check_enumerable, histogram_marginals
from jaxdp.queries.mixed import (
    MixedMarginalQueries,
    mixed_marginal_answers,
    mixed_marginal_grid,
    mixed_query_on_record,
    mixed_query_relaxed,
    random_mixed_marginals,
    relaxed_mixed_marginal_answers,
)
from jaxdp.queries.relaxed import (
    RelaxedPlan,
    categorical_columns,
    product_query,
    product_query_answers,
    relaxed_marginals,
    relaxed_plan,
    row_answers,
)
from jaxdp.queries.sharded import records_mesh, shard_records, sharded_marginal_counts, spans_processes
from jaxdp.queries.threshold import (
    LinearThresholdQueries,
    RandomLinearThresholds,
    linear_threshold_answers,
    linear_threshold_on_record,
    linear_threshold_relaxed,
    random_linear_thresholds,
    relaxed_linear_threshold_answers,
    soft_leq,
    tempered_sigmoid,
)
from jaxdp.queries.workload import (
    MarginalWorkload,
    ProductQueries,
    QuerySubset,
    aim_weights,
    all_kway,
    downward_closure,
    expand_marginal_mask,
    from_cliques,
    from_names,
    marginal_sensitivity,
    random_kway,
    workload_queries,
)

__all__ = [
    "DEFAULT_MAX_CELLS",
    "ExactPlan",
    "LinearThresholdQueries",
    "MarginalWorkload",
    "MixedMarginalQueries",
    "ProductQueries",
    "QuerySubset",
    "RandomLinearThresholds",
    "RelaxedPlan",
    "aim_weights",
    "all_kway",
    "categorical_columns",
    "check_enumerable",
    "counting_query_answers",
    "counting_query_on_record",
    "downward_closure",
    "exact_plan",
    "expand_marginal_mask",
    "from_cliques",
    "from_names",
    "histogram_marginals",
    "linear_threshold_answers",
    "linear_threshold_on_record",
    "linear_threshold_relaxed",
    "marginal_counts",
    "marginal_fractions",
    "marginal_sensitivity",
    "mixed_marginal_answers",
    "mixed_marginal_grid",
    "mixed_query_on_record",
    "mixed_query_relaxed",
    "product_query",
    "product_query_answers",
    "random_kway",
    "random_linear_thresholds",
    "random_mixed_marginals",
    "record_answers",
    "records_mesh",
    "relaxed_linear_threshold_answers",
    "relaxed_marginals",
    "relaxed_mixed_marginal_answers",
    "relaxed_plan",
    "row_answers",
    "shard_records",
    "sharded_marginal_counts",
    "soft_leq",
    "spans_processes",
    "tempered_sigmoid",
    "workload_queries",
]
