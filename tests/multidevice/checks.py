"""Checks that need 8 devices; `tests/test_sharding.py` runs this file in a separate pytest process
with XLA_FLAGS=--xla_force_host_platform_device_count=8 (8 simulated CPU devices)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import api, noise
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
from tests.conftest import StoppedAfterSaves, stop_after_saves
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
    assert len(eight_run.state.model.latent.sharding.device_set) == 8
    assert len(one_run.state.model.latent.sharding.device_set) == 1
    assert [e.to_json() for e in one_run.ledger] == [e.to_json() for e in eight_run.ledger]
    np.testing.assert_array_equal(np.asarray(one_run.info.selected), np.asarray(eight_run.info.selected))
    np.testing.assert_allclose(
        np.asarray(eight.relaxed_answers(eight_run.state)),
        np.asarray(one.relaxed_answers(one_run.state)),
        atol=1e-4,
    )
    np.testing.assert_allclose(
        np.asarray(eight_run.state.model.noisy_answers),
        np.asarray(one_run.state.model.noisy_answers),
        atol=1e-5,
    )


def test_gem_refuses_a_batch_the_devices_do_not_divide():
    data = tiny_dataset()
    with pytest.raises(ValueError, match="multiple of the 8 devices"):
        jaxdp.gem(
            data,
            all_kway(data.domain.sizes, 2),
            rounds=2,
            batch=60,
            shard_batch=True,
            epsilon=1.0,
            delta=1e-6,
        )


def _mechanism(name, data, mesh=None):
    """`name` on `data` with its records counted over `mesh` (None: one device); GEM also splits
    its generator's batch over the mesh's devices."""
    budget = dict(epsilon=1.0, delta=1e-6, mesh=mesh)
    two_way = all_kway(data.domain.sizes, 2)
    if name == "gaussian":
        return jaxdp.gaussian(data, two_way, **budget)
    if name == "mwem":
        return jaxdp.mwem(data, two_way, rounds=3, **budget)
    small = dict(rounds=2, batch=64, hidden=(16,), latent_dim=8, max_steps=10)
    return jaxdp.gem(data, two_way, shard_batch=mesh is not None, **small, **budget)


def _private_leaf(mech):
    """The true counts of a built mechanism (its one query class's)."""
    return mech.classes[0].counts._value


@pytest.mark.parametrize("name", ["gaussian", "mwem", "gem"])  # independent counts as gaussian does
def test_mechanism_on_records_sharded_over_the_mesh_matches_one_device(name):
    data = tiny_dataset(n=403)  # not a multiple of 8: the sharded codes carry 5 padding rows
    key = jax.random.key(3)
    one, eight = _mechanism(name, data), _mechanism(name, data, records_mesh())
    assert len(_private_leaf(eight).sharding.device_set) == 8
    assert len(_private_leaf(one).sharding.device_set) == 1
    one_run, eight_run = jaxdp.run(one, key), jaxdp.run(eight, key)
    assert [e.to_json() for e in one_run.ledger] == [e.to_json() for e in eight_run.ledger]
    # noise drawn on each device and summed would differ from the single-device draw by about
    # sqrt(8) sigma per answer; equal states mean the noise was added once, to the summed counts
    if name == "gem":  # its Adam steps sum over the split batch in another order: compare outputs
        pairs = [
            (eight_run.state.model.noisy_answers, one_run.state.model.noisy_answers, 1e-5),
            (eight.relaxed_answers(eight_run.state), one.relaxed_answers(one_run.state), 1e-4),
        ]
    else:
        leaves = zip(jax.tree.leaves(eight_run.state), jax.tree.leaves(one_run.state), strict=True)
        pairs = [(a, b, 1e-5) for a, b in leaves]
        released = [jaxdp.release(m, r.state, key) for m, r in ((eight, eight_run), (one, one_run))]
        np.testing.assert_array_equal(*map(np.asarray, released))
    for a, b, atol in pairs:
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol)


def test_synthesize_forwards_the_mesh():
    data = tiny_dataset(n=403)
    args = dict(
        mechanism="mwem", epsilon=1.0, delta=1e-6, key=jax.random.key(5), workload="all-2way", rounds=3
    )
    one = jaxdp.synthesize(data, None, **args)
    built, build = [], api.build
    api.build = lambda *a, **kw: built.append(build(*a, **kw)) or built[-1]
    try:
        eight = jaxdp.synthesize(data, None, mesh=records_mesh(), **args)
    finally:
        api.build = build
    # the built mechanism's counts live on the mesh's 8 devices (the Result keeps them withheld)
    assert len(built[0].classes[0].counts._value.sharding.device_set) == 8
    np.testing.assert_array_equal(eight.synthetic.codes, one.synthetic.codes)
    assert eight.report["ledger"] == one.report["ledger"]


def _aim_family(name, data, mesh=None):
    workload = all_kway(data.domain.sizes, 2)
    budget = dict(epsilon=1.0, delta=1e-6, max_rounds=6, mesh=mesh)
    if name == "aim":
        return jaxdp.aim(data, workload, iters=20, final_iters=20, **budget)
    small = dict(batch=64, hidden=(16,), latent_dim=8, iters=20, final_iters=20)
    return jaxdp.aim_gem(data, workload, **small, **budget)


@pytest.mark.parametrize("name", ["aim", "aim-gem"])
def test_aim_counts_over_the_mesh_and_releases_what_one_device_releases(name, monkeypatch):
    """AIM and AIM-GEM count their candidates over records split on 8 devices (one psum: the
    counts come back replicated on all 8), then run the single-device computation: the same
    ledger, measurements and release as on one device with the same key (noise drawn per device
    and summed would not match)."""
    from jaxdp.mechanisms import host_loop

    devices_counted_on = []
    count = host_loop.private_counts

    def spy(data, workload, mesh=None):
        counts = count(data, workload, mesh)
        devices_counted_on.append(len(counts._value.sharding.device_set))
        return counts

    monkeypatch.setattr(host_loop, "private_counts", spy)
    data = tiny_dataset(n=403)  # not a multiple of 8: the sharded codes carry 5 padding rows
    one, eight = _aim_family(name, data), _aim_family(name, data, records_mesh())
    assert devices_counted_on == [1, 8]
    np.testing.assert_array_equal(np.asarray(eight.counts._value), np.asarray(one.counts._value))
    key = jax.random.key(3)
    one_run, eight_run = jaxdp.run(one, key), jaxdp.run(eight, key)
    assert [e.to_json() for e in one_run.ledger] == [e.to_json() for e in eight_run.ledger]
    assert one_run.state.rounds_done == eight_run.state.rounds_done >= 3
    for a, b in zip(one_run.state.measurements, eight_run.state.measurements, strict=True):
        assert a.clique == b.clique and a.sigma == b.sigma
        np.testing.assert_array_equal(a.noisy, b.noisy)
    released = [jaxdp.release(m, r.state, key) for m, r in ((one, one_run), (eight, eight_run))]
    np.testing.assert_array_equal(*map(np.asarray, released))


@pytest.mark.parametrize("name", ["mwem", "gem", "aim", "aim-gem"])
def test_a_run_over_the_mesh_resumes_from_its_checkpoint_to_the_same_bytes(name, tmp_path, monkeypatch):
    """A checkpointed run with its records (and GEM's batch) split over 8 devices, stopped after
    its first checkpoint and resumed, ends in the uninterrupted run's state, Info and release."""
    data = tiny_dataset(n=403)
    mesh = records_mesh()
    mechanism = _aim_family(name, data, mesh) if name.startswith("aim") else _mechanism(name, data, mesh)
    key = jax.random.key(3)
    whole = jaxdp.run(mechanism, key, checkpoint=jaxdp.Checkpoint(tmp_path / "whole", every=1))
    with monkeypatch.context() as patched:
        stop_after_saves(patched, 1)
        with pytest.raises(StoppedAfterSaves):
            jaxdp.run(mechanism, key, checkpoint=jaxdp.Checkpoint(tmp_path / "run", every=1))
    resumed = jaxdp.run(mechanism, key, checkpoint=jaxdp.Checkpoint(tmp_path / "run", every=1))
    assert resumed.resumed_from == 1
    for a, b in zip(
        jax.tree.leaves((resumed.state, resumed.info)),
        jax.tree.leaves((whole.state, whole.info)),
        strict=True,
    ):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    released = [jaxdp.release(mechanism, r.state, key) for r in (resumed, whole)]
    for a, b in zip(jax.tree.leaves(released[0]), jax.tree.leaves(released[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
