"""Shared by the privacy tests: negative controls that break the noise at `jaxdp.noise`."""

from __future__ import annotations

import pytest

from jaxdp import noise

# control -> (factor on the noise scale, factor on the declared sensitivity)
CONTROLS = {"half the noise": (0.5, 1.0), "no noise": (0.0, 1.0), "halved sensitivity": (0.5, 0.5)}
SCALE_ARGUMENT = {"gaussian": "sigma", "laplace": "scale", "exponential": "scale", "gumbel_top_k": "scale"}


@pytest.fixture
def broken_noise(monkeypatch):
    """`broken_noise(control)` patches every primitive of `jaxdp.noise` to draw with the scale
    (and declared sensitivity) the control says; tracing after it sees the broken primitives.
    A halved declared sensitivity with the scale calibrated for it recomputes to the honest rho
    (the ledger cannot see the bug) and has the law of half the noise."""

    def apply(control: str) -> None:
        scale_factor, sensitivity_factor = CONTROLS[control]
        for name, argument in SCALE_ARGUMENT.items():
            original = getattr(noise, name)

            def broken(*args, _original=original, _argument=argument, **kwargs):
                scaled = scale_factor * kwargs[_argument]
                kwargs[_argument] = scaled if scaled > 0 else 1e-9  # 1e-9: no noise in float32
                kwargs["sensitivity"] = sensitivity_factor * kwargs["sensitivity"]
                return _original(*args, **kwargs)

            monkeypatch.setattr(noise, name, broken)

    return apply
