"""The release sampler's Weyl steps (`families._sampling`): each column its own, so that columns
drawn along nearly the same order are not coupled."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.families import _sampling
from jaxdp.families._sampling import mixture_rows

# SHA-256's initial hash words are the first 32 bits of the fractional parts of the square roots
# of the first eight primes (FIPS 180-4, 5.3.3): an independent record of the steps after PHI
# (the word of sqrt 5, 0x3c6ef372, is skipped: sqrt 5 is PHI's field)
SHA256_H = (0x6A09E667, 0xBB67AE85, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)


def test_weyl_steps_are_phi_then_square_roots_of_primes():
    steps = _sampling._weyl_steps(8)
    assert steps[0] == _sampling._PHI
    assert tuple(int(s) for s in steps[1:]) == SHA256_H
    assert len(set(_sampling._WEYL_STEPS.tolist())) == len(_sampling._WEYL_STEPS)


def _coupling(seed: int) -> float:
    """|joint - product of its own 1-way marginals|, largest cell, of the last two columns of a
    product distribution's records. Three leading columns of 85 x 9 x 100 values (ADULT's age,
    workclass and fnlwgt) make the sort nearly unique, so the two binary columns are drawn along
    nearly the same record order."""
    sizes = (85, 9, 100, 2, 2)
    rng = np.random.default_rng(0)
    blocks = [rng.dirichlet(np.ones(s)) for s in sizes[:3]] + [np.array([0.33, 0.67]), np.array([0.76, 0.24])]
    probs = jnp.asarray(np.concatenate(blocks)[None], jnp.float32)
    codes, _ = mixture_rows(jax.random.key(seed), probs, sizes, 48842)
    codes = np.asarray(codes)
    joint = np.zeros((2, 2))
    np.add.at(joint, (codes[:, 3], codes[:, 4]), 1)
    joint /= len(codes)
    return float(np.abs(joint - np.outer(joint.sum(1), joint.sum(0))).max())


def test_columns_of_a_product_are_released_independent(monkeypatch):
    """A product distribution's records keep its columns independent: the two binary columns'
    joint is within 0.005 of the product of their own marginals (seen 0.0006-0.0011 over seeds
    0-3; independent draws would be about 0.002 off). Negative control: one Weyl step for every
    column (the sampler before) couples them, 0.026-0.061 off."""
    for seed in range(3):
        assert _coupling(seed) < 0.005, seed
    monkeypatch.setattr(_sampling, "_WEYL_STEPS", np.full(256, _sampling._PHI, np.uint32))
    assert max(_coupling(seed) for seed in range(3)) > 0.02
