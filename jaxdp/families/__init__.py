"""Synthetic-data representations and their update solvers (post-processing only: no module
here imports `jaxdp.noise` or `jaxdp.accounting`)."""
