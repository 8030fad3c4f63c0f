"""Programs compiled for a short run (jaxdp/_jit.py): their options reach XLA, they give the same
results alone and inlined into a caller's trace, and XLA's defaults stand wherever the options
cannot or should not apply."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import _jit


def _scaled_sum(x, scale):
    return jnp.sum(x * scale), jnp.cumsum(x.astype(jnp.int32))


_ASKED_ONCE = _jit.compiler_options  # a test may replace the module's name for it


@pytest.fixture
def fresh_options():
    """compiler_options() asked anew in the test (and again after it)."""
    _ASKED_ONCE.cache_clear()
    yield
    _ASKED_ONCE.cache_clear()


def test_a_program_runs_alone_and_inlined_with_the_same_results():
    program = _jit.fast_compiled(_scaled_sum, static_argnums=1)
    x = jnp.arange(12.0).reshape(3, 4)
    alone = program(x, 3)
    # JAX refuses compiler options inside a trace: with a traced argument, with concrete ones
    # only, under grad and under eval_shape, the program is inlined instead.
    inlined = jax.jit(lambda x: program(x, 3))(x)
    concrete_inside = jax.jit(lambda y: program(x, 3)[0] + y)(1.0)
    under_grad = jax.grad(lambda x: program(x, 3)[0])(x)
    shapes = jax.eval_shape(lambda x: program(x, 3), x)
    for a, b in zip(alone, inlined, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(concrete_inside, alone[0] + 1.0)
    np.testing.assert_array_equal(under_grad, np.full((3, 4), 3.0))
    assert [s.shape for s in shapes] == [(), (12,)]
    np.testing.assert_array_equal(program.lower(x, 3).compile()(x)[1], alone[1])
    assert program.__name__ == "_scaled_sum"


def test_the_options_reach_the_compile(monkeypatch, fresh_options):
    # An option no XLA knows, past the probe: the program's own compile must refuse it.
    monkeypatch.setattr(_jit, "compiler_options", lambda: {"xla_no_such_option_in_any_version": False})
    program = _jit.fast_compiled(_scaled_sum, static_argnums=1)
    with pytest.raises(jax.errors.JaxRuntimeError, match="xla_no_such_option_in_any_version"):
        program(jnp.ones(3), 2)


def test_options_this_xla_does_not_know_fall_back_to_its_defaults(monkeypatch, fresh_options):
    monkeypatch.setattr(_jit, "FAST_COMPILE_OPTIONS", {"xla_no_such_option_in_any_version": False})
    assert _jit.compiler_options() == {}
    program = _jit.fast_compiled(_scaled_sum, static_argnums=1)
    np.testing.assert_array_equal(program(jnp.ones(3), 2)[0], 6.0)


def test_a_failing_probe_falls_back_to_xla_defaults_and_says_so(monkeypatch, fresh_options, caplog):
    def failing(options):
        raise jax.errors.JaxRuntimeError("INTERNAL: the backend said no")

    monkeypatch.setattr(_jit, "_probe", failing)
    with caplog.at_level("INFO", logger="jaxdp"):
        assert _jit.compiler_options() == {}
    assert "the backend said no" in caplog.text


def test_the_users_own_choice_in_xla_flags_stands(monkeypatch, fresh_options):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert _jit.compiler_options() == {}
    monkeypatch.setenv("XLA_FLAGS", "")
    _jit.compiler_options.cache_clear()
    assert _jit.compiler_options() in ({}, _jit.FAST_COMPILE_OPTIONS)  # {} on an XLA without it
