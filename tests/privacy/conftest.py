"""Shared by the privacy tests: negative controls that break the noise at `jaxdp.noise`."""

from __future__ import annotations

import pytest

from jaxdp import noise, samplers

# control -> (factor on the noise scale, factor on the declared sensitivity)
CONTROLS = {"half the noise": (0.5, 1.0), "no noise": (0.0, 1.0), "halved sensitivity": (0.5, 0.5)}
SCALE_ARGUMENT = {
    "gaussian": "sigma",
    "laplace": "scale",
    "exponential": "scale",
    "gumbel_top_k": "scale",
    "discrete_gaussian": "sigma",
    "discrete_laplace": "scale",
    "discrete_exponential": "scale",
    "discrete_top_k": "scale",
    "grid_exponential": "scale",
    "grid_top_k": "scale",
}


def _no_noise_scale(primitive: str, sensitivity: float) -> float:
    """The scale "no noise" draws at: 1e-9 (no noise in float32) for the float primitives; for
    the exact samplers the smallest they accept, which leaves none in practice: a discrete
    Gaussian at sigma 1/64 (P(Y != 0) < e^-2048), a discrete Laplace at 1/64 (< e^-63), and a
    selection at 2^-20 sensitivity (each grid step below the best costs a factor e^-15887)."""
    if primitive == "discrete_gaussian":
        return samplers.SIGMA_MIN
    if primitive == "discrete_laplace":
        return 2.0**-6
    if primitive in ("discrete_exponential", "discrete_top_k", "grid_exponential", "grid_top_k"):
        return sensitivity * 2.0**-20
    return 1e-9


GRID_PRIMITIVES = ("grid_exponential", "grid_top_k")


def _steps_in_declared_units(args: tuple, sensitivity_factor: float) -> tuple:
    """A grid primitive's scores are integer steps of (declared sensitivity / GRID_STEPS), so
    halving the declared sensitivity and the scale together leaves its law unchanged; the bug it
    stands for shows in the caller's steps instead: measured in half-size units, each score is
    twice as many steps and moves by 2 GRID_STEPS between neighbours. (key, steps, ...)"""
    key, steps, *rest = args
    factor = round(1.0 / sensitivity_factor)
    return (key, steps.map(lambda s: s * factor), *rest)


def _broken_scale_objects(monkeypatch, scale_factor: float, sensitivity_factor: float) -> None:
    """Mechanisms hold their scales as data (`noise.GaussianScale`, `noise.SelectionScale`),
    built on the host by `noise.gaussian_scale` / `noise.selection_scale` when the mechanism is
    built: those are broken where they are made, with the factors the primitives' floats get."""
    honest_gaussian, honest_selection = noise.gaussian_scale, noise.selection_scale

    def gaussian_scale(sigma, noise_option):
        scaled = scale_factor * sigma
        if scaled <= 0:
            scaled = _no_noise_scale("discrete_gaussian" if noise_option == "discrete" else "gaussian", 1.0)
        return honest_gaussian(scaled, noise_option)

    def selection_scale(scale, sensitivity, noise_option, *, exact_scores):
        if exact_scores and noise_option == "discrete" and sensitivity_factor != 1.0:
            # for grid scores the bug shows in the caller's steps (`_steps_in_declared_units`)
            return honest_selection(scale, sensitivity, noise_option, exact_scores=True)
        sensitivity = sensitivity_factor * sensitivity
        scaled = scale_factor * scale
        if scaled <= 0:
            scaled = _no_noise_scale(
                "grid_exponential" if noise_option == "discrete" else "exponential", sensitivity
            )
        return honest_selection(scaled, sensitivity, noise_option, exact_scores=exact_scores)

    monkeypatch.setattr(noise, "gaussian_scale", gaussian_scale)
    monkeypatch.setattr(noise, "selection_scale", selection_scale)


@pytest.fixture
def broken_noise(monkeypatch):
    """`broken_noise(control)` patches every primitive of `jaxdp.noise` to draw with the scale
    (and declared sensitivity) the control says, and the scale objects mechanisms are built with
    to hold that scale; tracing (and building) after it sees the broken primitives. A halved
    declared sensitivity with the scale calibrated for it recomputes to the honest rho (the
    ledger cannot see the bug) and has the law of half the noise."""

    def apply(control: str) -> None:
        scale_factor, sensitivity_factor = CONTROLS[control]
        _broken_scale_objects(monkeypatch, scale_factor, sensitivity_factor)
        for name, argument in SCALE_ARGUMENT.items():
            original = getattr(noise, name)

            def broken(*args, _name=name, _original=original, _argument=argument, **kwargs):
                if _name in GRID_PRIMITIVES and sensitivity_factor != 1.0:
                    return _original(*_steps_in_declared_units(args, sensitivity_factor), **kwargs)
                kwargs["sensitivity"] = sensitivity_factor * kwargs["sensitivity"]
                if isinstance(kwargs[_argument], noise.GaussianScale | noise.SelectionScale):
                    return _original(*args, **kwargs)  # broken where it was built
                scaled = scale_factor * kwargs[_argument]
                kwargs[_argument] = scaled if scaled > 0 else _no_noise_scale(_name, kwargs["sensitivity"])
                return _original(*args, **kwargs)

            monkeypatch.setattr(noise, name, broken)

    return apply
