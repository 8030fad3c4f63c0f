"""The audit catches draws the plan did not pay for, and a plan that was not kept."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import pytest

from jaxdp import accounting as acc
from jaxdp import audit, noise
from jaxdp.types import Charge, Sensitive


class RoundInfo(NamedTuple):
    """The least a round's Info holds (jaxdp.contract.Info): its charges."""

    charges: tuple[Charge, ...]


def _info(*charges):
    # Stack as lax.scan would: one leading round axis per field.
    return RoundInfo(tuple(jax.tree_util.tree_map(lambda x: x[None], c) for c in charges))


def _plan(sigma):
    return acc.Plan.from_rho(1.0).with_charge(acc.PlannedCharge("m", "gaussian", 1.0, sigma))


def test_matching_ledger_passes_and_takes_the_plans_exact_rho():
    sigma = acc.gaussian_sigma(1.0, 0.5)
    _, charge = noise.gaussian(jax.random.key(0), Sensitive(jnp.zeros(3)), sigma=sigma, sensitivity=1.0)
    ledger = audit.ledger_from_info(_info(charge))
    audit.check_ledger(ledger, _plan(sigma))
    assert ledger[0].label == "m" and ledger[0].rho == acc.gaussian_rho(1.0, sigma)


def test_a_smaller_noise_scale_than_planned_is_caught():
    sigma = acc.gaussian_sigma(1.0, 0.5)
    _, charge = noise.gaussian(jax.random.key(0), Sensitive(jnp.zeros(3)), sigma=sigma / 2, sensitivity=1.0)
    with pytest.raises(audit.AuditError, match="not in the plan"):
        audit.check_ledger(audit.ledger_from_info(_info(charge)), _plan(sigma))


def test_an_extra_draw_is_caught_and_a_missing_one_too():
    sigma = acc.gaussian_sigma(1.0, 0.5)
    k1, k2 = jax.random.split(jax.random.key(1))
    _, c1 = noise.gaussian(k1, Sensitive(jnp.zeros(3)), sigma=sigma, sensitivity=1.0)
    _, c2 = noise.gaussian(k2, Sensitive(jnp.zeros(3)), sigma=sigma, sensitivity=1.0)
    with pytest.raises(audit.AuditError, match="not in the plan"):
        audit.check_ledger(audit.ledger_from_info(_info(c1, c2)), _plan(sigma))
    with pytest.raises(audit.AuditError, match="not spent"):
        audit.check_ledger([], _plan(sigma))
    audit.check_ledger([], _plan(sigma), complete=False)


def test_noise_scales_must_be_fixed_before_tracing():
    with pytest.raises(TypeError, match="fixed before tracing"):
        jax.jit(
            lambda s: noise.gaussian(jax.random.key(0), Sensitive(jnp.zeros(2)), sigma=s, sensitivity=1.0)
        )(1.0)


def test_noise_refuses_unwrapped_values():
    with pytest.raises(TypeError, match="Sensitive"):
        noise.gaussian(jax.random.key(0), jnp.zeros(2), sigma=1.0, sensitivity=1.0)


def test_sensitive_values_cannot_leak_by_conversion():
    value = Sensitive(jnp.arange(3.0))
    assert "hidden" in repr(value) and "1." not in repr(value)
    with pytest.raises(TypeError):
        bool(value)
    with pytest.raises(TypeError):
        import numpy as np

        np.asarray(value)
