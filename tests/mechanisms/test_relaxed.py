"""RAP, RAP-softmax, GEM and GEM-Pub: fitting, compile-once, sampling, public pretraining."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import audit, evaluate, loop
from jaxdp.domain import Dataset
from jaxdp.families.relaxed import block_softmax
from jaxdp.keys import Stream, stream_key
from jaxdp.mechanisms.gem import gem, gem_pub
from jaxdp.mechanisms.rap import rap, rap_softmax
from jaxdp.queries import all_kway, marginal_counts, measured

from .conftest import tiny_dataset

SMALL_GEM = {"batch": 200, "hidden": (64, 64), "latent_dim": 16, "learning_rate": 1e-2}


def _two_way(data):
    return all_kway(data.domain.sizes, 2)


def test_block_softmax_rows_are_product_distributions():
    logits = jax.random.normal(jax.random.key(0), (5, 9))
    probs = np.asarray(block_softmax(logits, (2, 3, 4)))
    for s, e in ((0, 2), (2, 5), (5, 9)):
        np.testing.assert_allclose(probs[:, s:e].sum(axis=1), 1.0, rtol=1e-6)


def test_gem_loss_decreases_with_exact_answers():
    data = tiny_dataset(n=2000)
    workload = _two_way(data)
    mech = gem(data, workload, rho=1e6, rounds=3, max_steps=50, gamma_fraction=0.0, **SMALL_GEM)
    model = mech.init(stream_key(jax.random.key(0), Stream.INIT)).model
    target = jnp.asarray(evaluate.fractions(data, workload), jnp.float32)
    mask = jnp.ones(workload.n_queries, bool)

    def loss(params):
        return float(jnp.mean(jnp.abs(mech.family.representation.answers(params, model.latent) - target)))

    before = loss(model.params)
    params, steps = jax.jit(lambda p: mech.family._fit(p, model.latent, target, mask, 0.0, 1e-2, 50))(
        model.params
    )
    assert int(steps) == 50 and loss(params) < 0.5 * before


@pytest.mark.parametrize("name", ["rap", "rap-softmax", "gem"])
def test_fits_over_the_measured_marginals_alone_match_the_dense_fit(name, monkeypatch):
    """Past `measured.DENSE_MAX_QUERIES` a fit reads only the marginals with a measured cell; from
    the same start, measurements and rate, 20 Adam steps land where the dense kernel's do. Each
    step's loss and gradient agree to float32 rounding (tests/queries/test_measured.py); Adam
    divides by the gradients' root mean square, so a 1e-4 band on the probabilities covers
    20 steps of it. GEM ranks every measured error (top_errors = all), so no near-tie can pick
    another query on one path."""
    data = tiny_dataset(n=2000)
    workload = all_kway(data.domain.sizes, 3)
    factory = {
        "rap": lambda **kw: rap(data, workload, n_rows=100, marginals_per_round=1, **kw),
        "rap-softmax": lambda **kw: rap_softmax(data, workload, n_rows=100, marginals_per_round=1, **kw),
        "gem": lambda **kw: gem(data, workload, top_errors=workload.n_queries, **SMALL_GEM, **kw),
    }[name]
    dense = factory(rho=1.0, rounds=3)
    monkeypatch.setattr(measured, "DENSE_MAX_QUERIES", 0)
    sparse = factory(rho=1.0, rounds=3)
    assert dense.family.measured_only is None and sparse.family.measured_only == workload
    model = dense.init(stream_key(jax.random.key(0), Stream.INIT)).model
    picked = np.zeros(len(workload), bool)
    picked[[0, 2, 3]] = True
    mask = jnp.asarray(jaxdp.queries.expand_marginal_mask(workload, jnp.asarray(picked)))
    target = jnp.where(mask, jnp.asarray(evaluate.fractions(data, workload), jnp.float32), 0.0)
    fitted = []
    for mech in (dense, sparse):
        params, steps = jax.jit(
            lambda p, mech=mech: mech.family._fit(p, model.latent, target, mask, 0.0, 1e-2, 20)
        )(model.params)
        assert int(steps) == 20
        fitted.append(np.asarray(mech.family.representation.probabilities(params, model.latent)))
    start = np.asarray(dense.family.representation.probabilities(model.params, model.latent))
    assert np.abs(fitted[0] - start).max() > 1e-2  # the fit moved
    np.testing.assert_allclose(fitted[1], fitted[0], atol=1e-4)


def test_gem_reproduces_two_way_marginals_with_a_large_budget():
    data = tiny_dataset(n=3000)
    workload = _two_way(data)
    mech = gem(
        data,
        workload,
        rho=1e6,
        rounds=len(workload),
        max_steps=300,
        gamma_fraction=0.0,
        rerank_every=1,
        ema_beta=None,
        **SMALL_GEM,
    )
    state = loop.run(mech, jax.random.key(1)).state
    relaxed = np.asarray(mech.relaxed_answers(state), np.float64)
    assert evaluate.answer_errors(evaluate.fractions(data, workload), relaxed, workload)["max_abs"] < 0.03


@pytest.mark.parametrize("measured_only", [False, True])
@pytest.mark.parametrize("softmax", [False, True])
def test_rap_fits_and_keeps_rows_in_the_box(softmax, measured_only, monkeypatch):
    """On either path: every cell answered at every step, or the measured marginals alone."""
    if measured_only:
        monkeypatch.setattr(measured, "DENSE_MAX_QUERIES", 0)
    data = tiny_dataset(n=3000)
    workload = _two_way(data)
    factory = rap_softmax if softmax else rap
    mech = factory(data, workload, rho=1e6, rounds=3, marginals_per_round=2, n_rows=200, max_steps=300)
    assert (mech.family.measured_only is not None) == measured_only
    state = loop.run(mech, jax.random.key(2)).state
    probs = np.asarray(mech.family.representation.probabilities(state.model.params, state.model.latent))
    assert probs.min() >= 0 and probs.max() <= 1
    relaxed = np.asarray(mech.relaxed_answers(state), np.float64)
    assert evaluate.answer_errors(evaluate.fractions(data, workload), relaxed, workload)["max_abs"] < 0.05


def test_inner_update_compiles_once_across_rounds(monkeypatch):
    data = tiny_dataset()
    mech = gem(data, _two_way(data), epsilon=0.9, delta=1e-6, rounds=4, max_steps=5, **SMALL_GEM)
    traces = []
    original = type(mech.family)._fit

    def counting(self, *args):
        traces.append(1)
        return original(self, *args)

    monkeypatch.setattr(type(mech.family), "_fit", counting)
    loop.run(mech, jax.random.key(3))
    assert len(traces) == 1  # traced once inside the scanned step, reused by every round


@pytest.mark.parametrize("name", ["gem", "rap-softmax"])
def test_records_follow_the_fitted_distribution_on_unmeasured_marginals(name):
    """Sampling must reproduce the mixture the mechanism fitted, also where nothing was measured.

    With N sampled records a cell's sampled fraction has standard error sqrt(p (1 - p) / N); a
    5-sigma band per cell over the 30 cells checked fails falsely with probability < 1e-5.
    """
    data = tiny_dataset(n=3000)
    workload = all_kway(data.domain.sizes, 2)
    if name == "gem":
        mech = gem(data, workload, rho=1e4, rounds=2, max_steps=50, **SMALL_GEM)
    else:
        mech = rap_softmax(data, workload, rho=1e4, rounds=2, marginals_per_round=1, n_rows=100)
    result = loop.run(mech, jax.random.key(4))
    unmeasured = np.asarray(result.state.eligible)
    assert unmeasured.sum() == len(workload) - 2
    relaxed = np.asarray(mech.relaxed_answers(result.state), np.float64)
    n_samples = 200_000
    codes = np.asarray(loop.release(mech, result.state, jax.random.key(5), rows=n_samples))
    sampled = evaluate.fractions(Dataset.from_codes(data.domain, codes), workload)
    band = 5 * np.sqrt(relaxed * (1 - relaxed) / n_samples) + 1e-4
    for i in np.flatnonzero(unmeasured):
        cells = slice(workload.offsets[i], workload.offsets[i] + workload.cells[i])
        assert (np.abs(sampled[cells] - relaxed[cells]) <= band[cells]).all(), workload.cliques[i]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", ["gem", "rap-softmax"])
def test_the_polish_brings_mixture_records_closer_to_their_distribution(name, seed, monkeypatch):
    """A mixture's records against its answers times the rows (summed L1 over the workload's
    cells): the polish lowers the distance (to 0.06-0.10 of the drawn records' for GEM, 0.22-0.32
    for RAP-softmax, seen over seeds 0-3; a pass can only lower it, each visit taking the value
    that lowers it most). Negative control: with no pass, the records are the sampler's and the
    bound fails. The release is a host loop, so `jaxdp.execute` calls it as it is and gets the
    records `loop.release` gets; the same key replays them, as many as asked."""
    from jaxdp import api, contract
    from jaxdp.families import polish

    data = tiny_dataset(n=3000)
    workload = _two_way(data)
    if name == "gem":
        mech = gem(data, workload, rho=1.0, rounds=3, max_steps=30, **SMALL_GEM)
    else:
        mech = rap_softmax(data, workload, rho=1.0, rounds=3, marginals_per_round=1, n_rows=100)
    assert not contract.compiled_release(mech) and contract.jittable(mech)
    result = api.execute(name, mech, jax.random.key(seed), data.domain)

    def released():  # a key is consumed once (the suite checks reuse): a fresh one per release
        return np.asarray(mech.release(result.state, stream_key(jax.random.key(seed), Stream.RELEASE)))

    codes = released()
    assert codes.shape == (3000, 4)
    np.testing.assert_array_equal(codes, result.synthetic.codes)
    np.testing.assert_array_equal(codes, released())
    target = 3000 * np.asarray(mech.relaxed_answers(result.state), np.float64)
    monkeypatch.setattr(polish, "PASSES", 0)
    drawn = released()
    polished, unpolished = (
        float(np.abs(np.asarray(marginal_counts(records, workload)) - target).sum())
        for records in (codes, drawn)
    )
    assert polished < 0.5 * unpolished, (polished, unpolished)


def test_clipped_rows_are_released_as_drawn():
    """RAP's clipped rows need not sum to one per attribute: their answers are no distribution
    to polish toward, so the release is the family's draw, compiled as one program."""
    from jaxdp import contract

    data = tiny_dataset(n=1000)
    mech = rap(data, _two_way(data), rho=1.0, rounds=2, marginals_per_round=1, n_rows=50, max_steps=5)
    assert contract.compiled_release(mech)
    state = loop.run(mech, jax.random.key(0)).state
    np.testing.assert_array_equal(
        np.asarray(mech.release(state, jax.random.key(1))),
        np.asarray(mech.family.release(state.model, jax.random.key(1), 1000)),
    )


def test_gem_pub_with_public_equal_to_private_beats_gem_from_scratch():
    """Pretraining on public data equal to the private data starts the private rounds near the
    truth (max error 0.002 against 0.16 from scratch on this case), and after two rounds at
    epsilon 0.05 GEM-Pub is still ahead (0.13 against 0.19). The two noisy rounds move the fit
    far from its start, so the start is checked on its own."""
    data = tiny_dataset(n=3000, seed=2)
    workload = _two_way(data)
    true = evaluate.fractions(data, workload)
    budget = {"epsilon": 0.05, "delta": 1e-6, "rounds": 2, "max_steps": 5, "ema_beta": None}
    key = jax.random.key(6)
    start, end = {}, {}
    for name, mech in (
        ("scratch", gem(data, workload, **budget, **SMALL_GEM)),
        ("pub", gem_pub(data, workload, public=data, pretrain_steps=300, **budget, **SMALL_GEM)),
    ):
        model = mech.init(stream_key(key, Stream.INIT)).model
        start[name] = evaluate.answer_errors(
            true, np.asarray(mech.family.answers(model), np.float64), workload
        )
        state = loop.run(mech, key).state
        end[name] = evaluate.answer_errors(
            true, np.asarray(mech.relaxed_answers(state), np.float64), workload
        )
    assert start["pub"]["max_abs"] < 0.1 * start["scratch"]["max_abs"]
    assert end["pub"]["max_abs"] < end["scratch"]["max_abs"]


def test_gem_pub_with_a_subset_of_attributes():
    data = tiny_dataset(n=1000)
    sub_domain = jaxdp.Domain(tuple(a for a in data.domain.attributes if a.name in ("a", "b", "d")))
    public = Dataset.from_codes(sub_domain, data.codes[:300][:, [0, 1, 3]])
    mech = gem_pub(data, _two_way(data), public=public, epsilon=1.0, delta=1e-6, rounds=2, **SMALL_GEM)
    mask = np.asarray(mech.family.public_mask)
    covered = [c for c in mech.workload.cliques if 2 not in c]  # attribute c is not public
    assert mask.sum() == sum(mech.workload.cells[mech.workload.cliques.index(c)] for c in covered)
    # pretraining fits the covered marginals: the pretrained start is much closer to the public
    # answers there than a generator from scratch, and the private run then spends its plan
    key = jax.random.key(7)
    scratch = gem(data, _two_way(data), epsilon=1.0, delta=1e-6, rounds=2, **SMALL_GEM)
    target = np.asarray(mech.family.public_answers)[mask]

    def start_error(m):
        return np.abs(
            np.asarray(m.family.answers(m.init(stream_key(key, Stream.INIT)).model))[mask] - target
        ).max()

    assert start_error(mech) < 0.5 * start_error(scratch)
    result = loop.run(mech, key)
    assert len(result.ledger) == 4 and audit.rho_spent(result.ledger) == pytest.approx(mech.plan.rho_planned)


def test_refusals():
    data = tiny_dataset()
    workload = _two_way(data)
    with pytest.raises(ValueError, match="exceeds the 6 marginals"):
        rap(data, workload, epsilon=1.0, delta=1e-6, rounds=3, marginals_per_round=3)
    with pytest.raises(TypeError, match="relation"):  # replace-one only: n public, fractions
        gem(data, workload, epsilon=1.0, delta=1e-6, rounds=2, relation="add-remove")
    with pytest.raises(TypeError, match="loss"):  # GEM's loss is its L1 loss; RAP's is L2
        gem(data, workload, epsilon=1.0, delta=1e-6, rounds=2, loss="l2")
    with pytest.raises(ValueError, match="pretrain_steps"):
        gem(data, workload, epsilon=1.0, delta=1e-6, rounds=2, public=data)


DISCRETE = {"discrete_gaussian", "discrete_exponential", "discrete_top_k"}
FLOAT = {"gaussian", "exponential", "gumbel_top_k"}


def _small(name, data, **kw):
    """RAP selects 2 marginals a round (top-k), GEM one (a single selection)."""
    if name == "rap":
        return rap(data, _two_way(data), rounds=2, marginals_per_round=2, n_rows=50, max_steps=5, **kw)
    return gem(data, _two_way(data), rounds=2, max_steps=5, **SMALL_GEM, **kw)


@pytest.mark.parametrize("name", ["rap", "gem"])
def test_exact_noise_by_default_measures_integer_counts(name):
    """Default noise: every ledger entry is an exact primitive and the measured answers are noisy
    integer counts divided by n (clipping to [0, 1] keeps them on that grid); noise="float"
    charges the float primitives and its answers leave the grid (the check has power)."""
    data = tiny_dataset()
    n = len(data)
    off_grid = {}
    for noise, primitives in (("discrete", DISCRETE), ("float", FLOAT)):
        mech = _small(name, data, epsilon=1.0, delta=1e-6, noise=noise)
        assert mech.noise == noise
        result = loop.run(mech, jax.random.key(8))
        assert {e.primitive for e in result.ledger} <= primitives
        assert {c.primitive for c in mech.plan.charges} <= primitives
        measured = np.asarray(result.state.model.measured)
        counts = np.asarray(result.state.model.noisy_answers, np.float64)[measured] * n
        off_grid[noise] = np.abs(counts - np.round(counts)).max()
    assert off_grid["discrete"] < 1e-3
    assert off_grid["float"] > 0.1


def test_measurement_sensitivity_and_sigma_are_in_counts():
    """A measurement of k marginals' counts has L2 sensitivity sqrt(2 k) under replace-one (not
    the fractions' sqrt(2 k) / n); sigma is calibrated in the same units, so rho is unchanged."""
    data = tiny_dataset()
    mech = rap(data, _two_way(data), rho=0.5, rounds=2, marginals_per_round=2, n_rows=50)
    measurement = mech.classes[0].measurement
    assert measurement.sensitivity == pytest.approx(2.0)
    measure = next(c for c in mech.plan.charges if c.label == "measure")
    assert measure.primitive == "discrete_gaussian"
    assert (measure.sensitivity, measure.scale) == (measurement.sensitivity, measurement.sigma)
    assert mech.plan.rho_planned == pytest.approx(0.5, rel=1e-6)


@pytest.mark.parametrize("factory", [rap, rap_softmax, gem, gem_pub])
def test_bad_noise_is_refused(factory):
    data = tiny_dataset()
    extra = {"public": data} if factory is gem_pub else {}
    with pytest.raises(ValueError, match="noise"):
        factory(data, _two_way(data), epsilon=1.0, delta=1e-6, rounds=2, noise="exact", **extra)
