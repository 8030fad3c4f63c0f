"""jaxdp: JAX kernels and mechanisms for differentially private synthetic data and query release.

The functional core: a mechanism is built by a factory that validates its input and fixes a
privacy plan on the host, then `run(mechanism, key)` executes its `step(state, key)` rounds under
jit and returns the final state with an audited ledger; `release` turns the state into output.
"""

import logging

from jaxdp import accounting, audit, datasets, families, keys, measurement, noise, queries, selection
from jaxdp._version import __version__
from jaxdp.accounting import BudgetExceededError, Plan
from jaxdp.api import MechanismSpec, Result, register, synthesize
from jaxdp.checkpoint import Checkpoint, CheckpointError
from jaxdp.domain import Categorical, DataError, Dataset, Domain, Numeric, load_domain, read_csv, write_csv
from jaxdp.evaluate import answer_errors, workload_errors
from jaxdp.keys import key_file, secure_root_key
from jaxdp.ledger import AuditError, LedgerEntry, rho_spent
from jaxdp.loop import ManyResult, RunResult, jit_step, release, run, run_many
from jaxdp.mechanisms import (
    Adaptive,
    Annealed,
    adaptive,
    aim,
    aim_gdp,
    aim_gem,
    dualquery,
    fem,
    gaussian,
    gem,
    gem_pub,
    independent,
    mst,
    mwem,
    pep,
    pep_pub,
    pmw_pub,
    privbayes,
    rap,
    rap_plus_plus,
    rap_softmax,
    swift,
)
from jaxdp.models import Model, ModelFileError, load_model, model
from jaxdp.quality import quality as quality_report
from jaxdp.synthesizer import Synthesizer
from jaxdp.types import Neighboring, Sensitive

# Silent unless the application configures logging (the command line does: progress on stderr).
logging.getLogger("jaxdp").addHandler(logging.NullHandler())

__all__ = [
    "Adaptive",
    "Annealed",
    "AuditError",
    "BudgetExceededError",
    "Categorical",
    "Checkpoint",
    "CheckpointError",
    "DataError",
    "Dataset",
    "Domain",
    "LedgerEntry",
    "ManyResult",
    "MechanismSpec",
    "Model",
    "ModelFileError",
    "Neighboring",
    "Numeric",
    "Plan",
    "Result",
    "RunResult",
    "Sensitive",
    "Synthesizer",
    "__version__",
    "accounting",
    "adaptive",
    "aim",
    "aim_gdp",
    "aim_gem",
    "answer_errors",
    "audit",
    "datasets",
    "dualquery",
    "families",
    "fem",
    "gaussian",
    "gem",
    "gem_pub",
    "independent",
    "jit_step",
    "key_file",
    "keys",
    "load_domain",
    "load_model",
    "measurement",
    "model",
    "mst",
    "mwem",
    "noise",
    "pep",
    "pep_pub",
    "pmw_pub",
    "privbayes",
    "quality_report",
    "queries",
    "rap",
    "rap_plus_plus",
    "rap_softmax",
    "read_csv",
    "register",
    "release",
    "rho_spent",
    "run",
    "run_many",
    "secure_root_key",
    "selection",
    "swift",
    "synthesize",
    "workload_errors",
    "write_csv",
]
