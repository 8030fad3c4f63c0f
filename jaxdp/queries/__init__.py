"""Query workloads and the kernels that answer them."""

from jaxdp.queries.exact import marginal_counts, marginal_fractions
from jaxdp.queries.workload import MarginalWorkload, all_kway, from_names

__all__ = ["MarginalWorkload", "all_kway", "from_names", "marginal_counts", "marginal_fractions"]
