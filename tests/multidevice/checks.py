"""Checks that need 8 devices; `tests/test_sharding.py` runs this file in a separate pytest process
with XLA_FLAGS=--xla_force_host_platform_device_count=8 (8 simulated CPU devices)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import noise
from jaxdp.queries import (
    all_kway,
    exact_plan,
    marginal_counts,
    records_mesh,
    shard_records,
    sharded_marginal_counts,
)
from jaxdp.queries.workload import MarginalWorkload
from jaxdp.types import Sensitive
from tests.mechanisms.conftest import tiny_dataset

SIZES = (3, 4, 2, 5)


@pytest.fixture(scope="module", autouse=True)
def eight_devices():
    assert jax.device_count() == 8, "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"


def _codes(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, s, n) for s in SIZES], axis=1).astype(np.int32)


def _workload():
    two, three = all_kway(SIZES, 2), all_kway(SIZES, 3)
    return MarginalWorkload(SIZES, two.cliques + three.cliques + two.cliques[:2])  # with repeats


_counts = jax.jit(marginal_counts, static_argnames=("dtype", "row_chunk"))
_sharded = jax.jit(sharded_marginal_counts, static_argnames=("dtype", "mesh", "n_records", "row_chunk"))


@pytest.mark.parametrize(("n", "row_chunk"), [(1001, None), (3001, 128)])
def test_sharded_counts_equal_the_single_device_counts(n, row_chunk):
    codes, plan = _codes(n), exact_plan(_workload())
    expected = np.asarray(_counts(codes, plan, dtype=jnp.int32))
    sharded, real = shard_records(codes)  # 1001 and 3001 rows: zero rows padded to a multiple of 8
    assert real == n and sharded.shape[0] % 8 == 0 and sharded.shape[0] > n
    assert len(sharded.sharding.device_set) == 8
    assert {s.data.shape[0] for s in sharded.addressable_shards} == {sharded.shape[0] // 8}
    counts = _sharded(sharded, plan, dtype=jnp.int32, n_records=n, row_chunk=row_chunk)
    np.testing.assert_array_equal(np.asarray(counts), expected)
    one = shard_records(codes, records_mesh(jax.devices()[:1]))[0]
    mesh = records_mesh(jax.devices()[:1])
    counts_one = _sharded(one, plan, dtype=jnp.int32, mesh=mesh, n_records=n, row_chunk=row_chunk)
    np.testing.assert_array_equal(np.asarray(counts_one), expected)


def test_host_codes_are_sharded_for_the_caller():
    codes, workload = _codes(203), _workload()
    expected = np.asarray(_counts(codes, exact_plan(workload), dtype=jnp.int32))
    np.testing.assert_array_equal(np.asarray(sharded_marginal_counts(codes, workload, jnp.int32)), expected)


def test_noise_is_added_once_to_the_summed_counts():
    n, sigma = 1001, 3.0
    codes, plan = _codes(n), exact_plan(_workload())
    sharded, _ = shard_records(codes)

    @jax.jit
    def release(codes):
        counts = sharded_marginal_counts(codes, plan, n_records=n)
        return noise.gaussian(jax.random.key(7), Sensitive(counts), sigma=sigma, sensitivity=1.0)[0]

    exact = Sensitive(_counts(codes, plan))
    single, _ = noise.gaussian(jax.random.key(7), exact, sigma=sigma, sensitivity=1.0)
    noisy = np.asarray(release(sharded))
    np.testing.assert_allclose(noisy, np.asarray(single), atol=1e-4)
    # Noise drawn per device and summed would have std sigma * sqrt(8); the residual has std sigma
    # (2,338 draws: the sample std is within 10% of sigma except with probability < 1e-6).
    residual = noisy - np.asarray(_counts(codes, plan))
    assert abs(residual.std() / sigma - 1) < 0.1


def test_gem_with_the_batch_sharded_matches_one_device():
    data = tiny_dataset()
    workload = all_kway(data.domain.sizes, 2)
    options = dict(rounds=2, batch=64, hidden=(16,), latent_dim=8, max_steps=10, epsilon=1.0, delta=1e-6)
    key = jax.random.key(0)
    results = {}
    for shard in (False, True):
        mech = jaxdp.gem(data, workload, shard_batch=shard, **options)
        run = jaxdp.run(mech, key)
        results[shard] = (mech, run)
    (one, one_run), (eight, eight_run) = results[False], results[True]
    assert len(eight_run.state.latent.sharding.device_set) == 8
    assert len(one_run.state.latent.sharding.device_set) == 1
    assert [e.to_json() for e in one_run.ledger] == [e.to_json() for e in eight_run.ledger]
    np.testing.assert_array_equal(np.asarray(one_run.info.selected), np.asarray(eight_run.info.selected))
    np.testing.assert_allclose(
        np.asarray(eight.relaxed_answers(eight_run.state)),
        np.asarray(one.relaxed_answers(one_run.state)),
        atol=1e-4,
    )
    np.testing.assert_allclose(
        np.asarray(eight_run.state.noisy_answers), np.asarray(one_run.state.noisy_answers), atol=1e-5
    )


def test_gem_refuses_a_batch_the_devices_do_not_divide():
    data = tiny_dataset()
    with pytest.raises(ValueError, match="multiple of the 8 devices"):
        jaxdp.gem(data, all_kway(data.domain.sizes, 2), batch=60, shard_batch=True, epsilon=1.0, delta=1e-6)
