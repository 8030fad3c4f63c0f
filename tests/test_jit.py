"""Programs compiled for a short run (jaxdp/_jit.py): the same results alone and inlined into a
caller's trace, and XLA's defaults where this XLA does not know the options."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import _jit


def _scaled_sum(x, scale):
    return jnp.sum(x * scale), jnp.cumsum(x.astype(jnp.int32))


def test_a_program_runs_alone_and_inlined_with_the_same_results():
    program = _jit.fast_compiled(_scaled_sum, static_argnums=1)
    x = jnp.arange(12.0).reshape(3, 4)
    alone = program(x, 3)
    inlined = jax.jit(lambda x: program(x, 3))(x)  # compiler options are refused inside a trace
    under_grad = jax.grad(lambda x: program(x, 3)[0])(x)
    for a, b in zip(alone, inlined, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(under_grad, np.full((3, 4), 3.0))
    np.testing.assert_array_equal(program.lower(x, 3).compile()(x)[1], alone[1])
    assert program.__name__ == "_scaled_sum"


def test_options_this_xla_does_not_know_fall_back_to_its_defaults(monkeypatch):
    monkeypatch.setattr(_jit, "FAST_COMPILE_OPTIONS", {"xla_no_such_option_in_any_version": False})
    _jit.compiler_options.cache_clear()
    try:
        assert _jit.compiler_options() == {}
        program = _jit.fast_compiled(_scaled_sum, static_argnums=1)
        np.testing.assert_array_equal(program(jnp.ones(3), 2)[0], 6.0)
    finally:
        _jit.compiler_options.cache_clear()


def test_a_failure_other_than_an_unknown_option_is_not_swallowed(monkeypatch):
    def failing_jit(*args, **kwargs):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: out of memory")

    monkeypatch.setattr(_jit.jax, "jit", failing_jit)
    _jit.compiler_options.cache_clear()
    try:
        with pytest.raises(jax.errors.JaxRuntimeError, match="out of memory"):
            _jit.compiler_options()
    finally:
        monkeypatch.undo()
        _jit.compiler_options.cache_clear()
