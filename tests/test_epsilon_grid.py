"""An epsilon grid in one compiled program: mechanisms built at several budgets hold their noise
scales as data, so `run_many` runs them as lanes of one program, each lane drawing at its own
scale and audited against its own plan."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import loop, noise
from jaxdp.accounting import BudgetExceededError
from jaxdp.ledger import check_ledger
from jaxdp.queries import all_kway
from jaxdp.types import Sensitive

from .mechanisms.conftest import FACTORIES, tiny_dataset

GRID = (0.3, 1.0, 3.0)


def _grid(name, grid=GRID):
    data = tiny_dataset()
    return [FACTORIES[name](data, epsilon=epsilon, delta=1e-6) for epsilon in grid]


@pytest.mark.parametrize(
    ("name", "batching"),
    [
        ("gaussian", "map"),
        ("gaussian", "vmap"),
        ("pep", "map"),
        ("rap-softmax", "vmap"),
        ("dualquery", "map"),
    ],
)
def test_an_epsilon_grid_in_one_program_spends_exactly_each_lanes_budget(name, batching):
    mechanisms = _grid(name)
    keys = jax.random.split(jax.random.key(7), len(GRID))
    many = jaxdp.run_many(mechanisms, keys, batching=batching)
    looped = jaxdp.run_many(mechanisms, keys)  # three separate runs, one per budget
    for i, mechanism in enumerate(mechanisms):
        # run_many audited the lane against its own plan; its charges are those of its own run
        check_ledger(many.ledgers[i], mechanism.plan)
        assert many.ledgers[i] == looped.ledgers[i]
        assert jaxdp.rho_spent(many.ledgers[i]) == pytest.approx(mechanism.plan.rho_planned, rel=1e-12)
        assert mechanism.plan.rho_planned <= mechanism.plan.rho_budget
    assert len({round(jaxdp.rho_spent(ledger), 12) for ledger in many.ledgers}) == len(GRID)
    # negative control: a lane's ledger is not another budget's
    with pytest.raises(BudgetExceededError, match="not in the plan"):
        check_ledger(many.ledgers[0], mechanisms[1].plan)
    assert jaxdp.audit.replay_many(mechanisms, keys, many) == [True] * len(GRID)


@pytest.mark.parametrize("batching", ["map", "vmap"])
def test_each_lane_draws_at_its_own_scale(batching):
    # The Gaussian baseline selects nothing: its state is its noisy answers, integers plus exact
    # noise divided by n, so a lane and its budget's own run differ by float rounding at most
    # (a few float32 ulps of answers <= 1), while budgets 10x apart differ by the noise itself.
    mechanisms = _grid("gaussian", (0.1, 1.0, 10.0))
    key = jax.random.key(11)
    keys = jnp.stack([key] * 3)  # one key: the lanes differ only by their scales
    many = jaxdp.run_many(mechanisms, keys, batching=batching)
    states = [loop.run(m, key).state for m in mechanisms]
    for i, state in enumerate(states):
        chex.assert_trees_all_close(many.seed(i).state, state, rtol=1e-5, atol=1e-6)
    answers = [np.asarray(jax.tree_util.tree_leaves(state)[0]) for state in states]
    spread = [np.std(a - answers[-1]) for a in answers]
    assert spread[0] > 5 * spread[1] > 0  # negative control: the scales are not interchangeable


def test_lanes_that_differ_in_more_than_their_budget_are_refused_by_name():
    data = tiny_dataset()
    keys = jax.random.split(jax.random.key(0), 2)
    workload = all_kway(data.domain.sizes, 2)
    two = [jaxdp.pep(data, workload, rounds=rounds, epsilon=1.0, delta=1e-6) for rounds in (3, 4)]
    with pytest.raises(
        ValueError, match=r"mechanism 1 differs from mechanism 0 in mechanism\.[\w.]+ \(3 against 4\)"
    ):
        jaxdp.run_many(two, keys, batching="map")
    # DualQuery's charging blocks are settings (one compiled branch per block)
    data_blocks = [
        jaxdp.dualquery(data, workload, rounds=4, samples=5, blocks=b, epsilon=1.0, delta=1e-6)
        for b in (2, 3)
    ]
    with pytest.raises(ValueError, match=r"selection\.blocks \(2 against 3\)"):
        jaxdp.run_many(data_blocks, keys, batching="map")
    with pytest.raises(ValueError, match="3 mechanisms for 2 keys"):
        jaxdp.run_many(_grid("pep"), keys)


def test_a_scale_carried_as_data_draws_what_its_float_draws():
    counts = Sensitive(jnp.arange(40, dtype=jnp.int32))
    for sigma in (0.5, 3.0, 250.0):
        scale = noise.gaussian_scale(sigma, "discrete")
        by_float, charge = noise.discrete_gaussian(jax.random.key(5), counts, sigma=sigma, sensitivity=1.0)
        traced = jax.jit(lambda s, k: noise.discrete_gaussian(k, counts, sigma=s, sensitivity=1.0))(
            scale, jax.random.key(5)
        )
        np.testing.assert_array_equal(traced[0], by_float)
        chex.assert_trees_all_equal(traced[1], charge)
    steps = Sensitive(jnp.asarray([0, 40, 64, 100, 5], jnp.int32))
    settings = dict(sensitivity=0.01, noise="discrete")
    select = jax.jit(lambda s, k: noise.select_grid(k, steps, scale=s, **settings))
    for scale in (0.01, 0.2, 3.0):
        data = noise.selection_scale(scale, 0.01, "discrete", exact_scores=True)
        for seed in range(8):
            by_float = noise.select_grid(jax.random.key(seed), steps, scale=scale, **settings)
            chex.assert_trees_all_equal(select(data, jax.random.key(seed)), by_float)


def test_a_scale_built_for_other_scores_or_noise_is_refused():
    steps = Sensitive(jnp.asarray([0, 40, 64], jnp.int32))
    quantised = noise.selection_scale(0.2, 0.01, "discrete", exact_scores=False)
    with pytest.raises(ValueError, match="grid steps"):
        noise.select_grid(jax.random.key(0), steps, scale=quantised, sensitivity=0.01, noise="discrete")
    exact = noise.selection_scale(0.2, 0.01, "discrete", exact_scores=True)
    with pytest.raises(ValueError, match=r"sensitivity 0\.01"):
        noise.select_grid(jax.random.key(0), steps, scale=exact, sensitivity=0.02, noise="discrete")
    for_float = noise.gaussian_scale(2.0, "float")
    with pytest.raises(ValueError, match="float noise"):
        noise.discrete_gaussian(
            jax.random.key(0), Sensitive(jnp.zeros(3, jnp.int32)), sigma=for_float, sensitivity=1.0
        )
