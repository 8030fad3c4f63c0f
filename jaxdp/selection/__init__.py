"""Selection rules: the private "select" step of Adaptive Measurements, as public parts.

A rule scores a query class's candidates by the error of the current synthetic answers against
the true ones and picks some of them with the exponential mechanism (exact, on integer scores, by
default; Gumbel-max under noise="float"). `jaxdp.adaptive` calibrates it from its share of the
budget and composes it with a measurement and a family.

- `MaxError`: marginals by their largest cell error (the marginal trick; MWEM, PEP, RAP, GEM,
  RAP++'s categorical marginals); `k` picks a round, `top_k` for the one-shot top-k primitive.
- `L1Error`: marginals by the sum of their cell errors (AIM's score without its weights and
  noise penalty).
- `QueryError`: single counting queries by their error (MWEM and PEP without the marginal trick;
  RAP++'s threshold queries).
- `SignedError`: counting queries and their negations by their signed error (FEM).
- `SignedErrorSamples`: i.i.d. samples from the query player's multiplicative weights (DualQuery).
- `Everything`: every candidate, without looking at the data (the Independent and Gaussian
  baselines).
- `AIMSelection`: AIM's weighted L1 score with budget annealing and a privacy filter (AIM,
  AIM-GEM); it drives its mechanism from the host, round by round.
- `NoisyErrorSelection`: AIM's rule with DPSynth's AIM-GDP selection, a Gaussian measurement of
  a few candidates' L1 errors and the best noisy score (AIM-GDP).
- `SwiftSelection`: SWIFT's one Gaussian measurement of every candidate's error, a clique tree
  grown from the worst pairs and a budget split over the marginals it supports (SWIFT).
- `MSTSelection`: MST's maximum spanning tree of pairs, picked by their L1 error against the
  1-way model on a fixed budget (MST); driven from the host like AIM's (both are `HostRule`s).
- `PrivBayesSelection`: PrivBayes's greedy Bayesian network, each attribute's parents picked by
  their dependence (the score R) within theta-usefulness, on a fixed budget (PrivBayes; a
  `HostRule` too).

See `jaxdp.selection.rules` for writing a rule of your own.
"""

from jaxdp.selection.aim import AIMSelection, default_alpha
from jaxdp.selection.games import SignedError, SignedErrorSamples
from jaxdp.selection.host_rule import HostRule
from jaxdp.selection.mst import MSTSelection
from jaxdp.selection.noisy_errors import NoisyErrorSelection
from jaxdp.selection.privbayes import PrivBayesSelection
from jaxdp.selection.records import RoundRecord
from jaxdp.selection.rules import (
    GRID_MAX_RECORDS,
    GRID_STEPS_PER_COUNT,
    Everything,
    L1Error,
    MaxError,
    QueryError,
    Rule,
    SelectionBudget,
    answers_in_steps,
    cell_error_steps,
    check_grid_records,
    l1_answers_in_steps,
    l1_error_steps,
    l1_errors,
    max_cell_error_steps,
    max_cell_errors,
    score_sensitivity,
    steps_per_count,
)
from jaxdp.selection.swift import SwiftSelection

__all__ = [
    "GRID_MAX_RECORDS",
    "GRID_STEPS_PER_COUNT",
    "AIMSelection",
    "Everything",
    "HostRule",
    "L1Error",
    "MSTSelection",
    "MaxError",
    "NoisyErrorSelection",
    "PrivBayesSelection",
    "QueryError",
    "RoundRecord",
    "Rule",
    "SelectionBudget",
    "SignedError",
    "SignedErrorSamples",
    "SwiftSelection",
    "answers_in_steps",
    "cell_error_steps",
    "check_grid_records",
    "default_alpha",
    "l1_answers_in_steps",
    "l1_error_steps",
    "l1_errors",
    "max_cell_error_steps",
    "max_cell_errors",
    "score_sensitivity",
    "steps_per_count",
]
