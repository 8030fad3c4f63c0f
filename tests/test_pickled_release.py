"""What a user is handed holds no private value: every public return value pickles without the
table, and every release's saved model is written without it (DESIGN.md section 12).

A user keeps a release by pickling it, or by saving its model. These tests plant a private table
whose values cannot appear by chance, run every registry mechanism on it through `synthesize`,
`run`, `run_many` and a fitted `Synthesizer`, pickle what each returns and save the release's
model (checking that it samples the release again after a load), and scan the bytes for the
table: its records, the true counts and fractions of the workload and of every candidate
marginal the mechanism holds (the 1-way counts concatenated, each alone being too short a
needle), and the values of every `Sensitive` leaf of the mechanism as built (`tests/_needles.py`:
windows of each array in every encoding a copy would take). A `Sensitive` value itself refuses
to be pickled, and under
add-remove the kept mechanism has no record count (n is private there).

Negative controls: the scan finds each kind of needle in a pickle of the arrays it was made from
(so an empty scan is not vacuous), and the mechanism as built, which holds the table, cannot be
pickled at all.
"""

from __future__ import annotations

import pickle

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import api, loop
from jaxdp.contract import public_mechanism
from jaxdp.domain import Dataset, Domain
from jaxdp.types import Sensitive, Withheld
from tests._needles import found_in, marginal, needles
from tests.conftest import small_rounds

SIZES = {"a": 5, "b": 7, "c": 6, "d": 4, "e": 9}
DOMAIN = Domain.from_sizes(SIZES)
QUICK = ("aim", "pep", "gaussian")  # the quick tier's: a host loop, a compiled scan, noisy answers


def _planted() -> Dataset:
    rng = np.random.default_rng(20261201)
    codes = np.stack([rng.integers(0, s, 600) for s in SIZES.values()], axis=1).astype(np.int32)
    return Dataset.from_codes(DOMAIN, codes)


def _public() -> Dataset:
    rng = np.random.default_rng(7)
    return Dataset.from_codes(DOMAIN, np.stack([rng.integers(0, s, 200) for s in SIZES.values()], axis=1))


def _options(name: str) -> dict:
    spec = api.MECHANISMS[name]
    options = {} if spec.one_round or spec.fixed_rounds else {"rounds": small_rounds(name, len(SIZES), 2)}
    return {**options, "public": _public()} if spec.public else options


def _private_needles(data: Dataset, mechanism) -> dict[str, set[bytes]]:
    """Needles of the records, of the true counts and fractions of every marginal the mechanism
    holds (workload and candidates), and of the values of its `Sensitive` leaves."""
    cliques = set(mechanism.workload.cliques) | set(_candidate_cliques(mechanism))
    private = {"records": needles(data.codes), "answers": set(), "sensitive": set()}
    ones = [marginal(data.codes, (a,), DOMAIN.sizes) for a in range(len(SIZES))]
    for counts in [*(marginal(data.codes, c, DOMAIN.sizes) for c in sorted(cliques)), np.concatenate(ones)]:
        # the 1-way counts concatenated too: each alone is too short to be a needle
        private["answers"] |= needles(counts) | needles(counts.astype(np.float32) / np.float32(len(data)))
    for leaf in jax.tree_util.tree_leaves(mechanism, is_leaf=lambda x: isinstance(x, Sensitive)):
        if isinstance(leaf, Sensitive):
            for array in jax.tree_util.tree_leaves(leaf):
                private["sensitive"] |= needles(np.asarray(array))
    assert private["records"] and private["answers"] and private["sensitive"], "a vacuous scan"
    return private


def _candidate_cliques(mechanism) -> list[tuple[int, ...]]:
    """The candidate marginals a host-rule mechanism holds the true counts of (none otherwise)."""
    candidates = getattr(mechanism, "candidates", None)
    return list(candidates.cliques) if candidates is not None else []


def _returned(name: str, data: Dataset) -> dict[str, object]:
    """What a user is handed by each entry point, for one mechanism on the planted table."""
    options = _options(name)
    workload = jaxdp.queries.all_kway(DOMAIN.sizes, 2)
    result = jaxdp.synthesize(
        data, DOMAIN, mechanism=name, epsilon=1.0, key=jax.random.key(3), workload=workload, **options
    )
    public = options.pop("public", None)
    rounds = options.pop("rounds", None)
    mechanism = api.build(name, data, workload, epsilon=1.0, delta=1e-9, public=public, rounds=rounds)
    keys = jax.random.split(jax.random.key(4), 2)
    synthesizer = jaxdp.Synthesizer(name, epsilon=1.0, schema=DOMAIN, workload=workload, **_options(name))
    if result.answers is None:
        synthesizer.fit(data, key=jax.random.key(6))
    return {
        "mechanism": mechanism,
        "synthesize": result,
        "run": loop.run(mechanism, jax.random.key(5)),
        "run_many": loop.run_many(mechanism, keys),
        "synthesizer": synthesizer,
    }


def _check(name: str, tmp_path) -> None:
    data = _planted()
    returned = _returned(name, data)
    private = _private_needles(data, returned["mechanism"])
    pickles = {what: pickle.dumps(value) for what, value in returned.items() if what != "mechanism"}
    result = returned["synthesize"]
    pickles["saved model"] = result.model.save(tmp_path / "model.jaxdp").read_bytes()
    if result.answers is None:  # the model samples the release again, after a save and a load
        again = jaxdp.load_model(tmp_path / "model.jaxdp").sample(jax.random.key(3))
        np.testing.assert_array_equal(again.codes, result.synthetic.codes)
        np.testing.assert_array_equal(again.numeric, result.synthetic.numeric)
    for kind, found in private.items():
        assert found_in(pickles, found) == [], f"{name}: a pickled return value holds private {kind}"
    kept = returned["synthesize"].mechanism
    assert not any(
        isinstance(x, Sensitive) and not isinstance(x, Withheld)
        for x in jax.tree_util.tree_leaves(kept, is_leaf=lambda x: isinstance(x, Sensitive))
    )
    if kept.relation is jaxdp.Neighboring.ADD_REMOVE and hasattr(kept, "n_records"):
        assert kept.n_records is None  # n is private under add-remove
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(returned["mechanism"])  # the mechanism as built holds the table


@pytest.mark.parametrize("name", QUICK)
def test_pickled_releases_and_saved_models_hold_no_private_value(name, tmp_path):
    _check(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in api.MECHANISMS if n not in QUICK])
def test_every_mechanisms_pickled_releases_and_saved_model_hold_no_private_value(name, tmp_path):
    _check(name, tmp_path)


def test_a_pickled_table_is_caught():
    """Negative control: each kind of needle is found in a pickle of the arrays it came from."""
    data = _planted()
    mechanism = api.build("aim", data, jaxdp.queries.all_kway(DOMAIN.sizes, 2), epsilon=1.0, delta=1e-9)
    private = _private_needles(data, mechanism)
    values = jax.tree_util.tree_leaves(mechanism, is_leaf=lambda x: isinstance(x, Sensitive))
    sensitive = [
        np.asarray(a) for v in values if isinstance(v, Sensitive) for a in jax.tree_util.tree_leaves(v)
    ]
    counts = marginal(data.codes, (0, 1), DOMAIN.sizes)
    haystacks = {
        "records": pickle.dumps(data),
        "answers": pickle.dumps((counts, counts.astype(np.float32) / np.float32(len(data)))),
        "sensitive": pickle.dumps(sensitive),
        "jax array": pickle.dumps(jax.numpy.asarray(data.codes)),
    }
    assert found_in(haystacks, private["records"]) == ["records", "jax array"]
    for kind in ("answers", "sensitive"):  # AIM's Sensitive leaf is its candidates' counts
        assert kind in found_in(haystacks, private[kind])


def test_sensitive_values_refuse_to_leave():
    """No pickle, no repr of values, no array; a copy in memory is allowed; the kept mechanism
    refuses to spend privacy, naming what was withheld."""
    secret = Sensitive(jax.numpy.arange(40, 80, dtype=jax.numpy.int32))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps({"nested": [secret]})
    assert "41" not in repr(secret) and "41" not in str(secret) and "(40,)" in repr(secret)
    with pytest.raises(TypeError, match="cannot be converted"):
        np.asarray(secret)
    data = _planted()
    mechanism = api.build("mst", data, jaxdp.queries.all_kway(DOMAIN.sizes, 2), epsilon=1.0, delta=1e-9)
    kept = public_mechanism(mechanism)
    assert kept.plan == mechanism.plan and kept.workload == mechanism.workload
    assert pickle.loads(pickle.dumps(kept)).plan == mechanism.plan
    with pytest.raises(TypeError, match="withheld"):
        loop.run(kept, jax.random.key(0))
