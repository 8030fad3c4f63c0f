"""Statistical privacy tests: noise samplers, empirical DP on neighbours, accounting oracles."""
