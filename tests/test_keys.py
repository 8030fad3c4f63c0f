"""Key rules: typed keys required, derivation pure and collision-free, secure root key."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import audit
from jaxdp.keys import Stream, fold_in, require_key, round_key, secure_root_key, split_keys, stream_key
from tests.conftest import programs_built


@pytest.mark.parametrize("bad", [0, 42, np.uint32(3), "key", None])
def test_integer_seeds_and_other_values_are_refused(bad):
    with pytest.raises(TypeError, match="typed JAX key"):
        require_key(bad)


def test_legacy_raw_keys_are_refused():
    raw = jax.random.key_data(jax.random.key(0))  # a uint32 array, not a typed key
    with pytest.raises(TypeError, match="typed JAX key"):
        require_key(raw)


def test_batched_keys_are_refused():
    with pytest.raises(TypeError, match="single key"):
        require_key(jax.random.split(jax.random.key(0), 2))


def test_derivation_is_pure_and_streams_do_not_collide():
    root = jax.random.key(7)
    keys = audit.derived_keys(root, rounds=5)
    data = [tuple(np.asarray(jax.random.key_data(k)).ravel()) for k in keys.values()]
    assert len(set(data)) == len(data)  # every (phase, round, stream) has its own key
    again = audit.derived_keys(jax.random.key(7), rounds=5)
    for name, k in keys.items():
        np.testing.assert_array_equal(jax.random.key_data(k), jax.random.key_data(again[name]))


def test_round_key_traced_equals_python_int():
    root = jax.random.key(3)
    traced = jax.jit(lambda k, t: jax.random.key_data(round_key(k, t)))(root, jnp.int32(4))
    np.testing.assert_array_equal(traced, jax.random.key_data(round_key(root, 4)))
    assert Stream.SELECT != Stream.MEASURE


def test_secure_root_key_is_typed_and_fresh():
    a, b = secure_root_key(), secure_root_key()
    require_key(a)
    assert not np.array_equal(jax.random.key_data(a), jax.random.key_data(b))
    # it works as any other root key
    require_key(stream_key(a, Stream.INIT))


def test_a_key_file_is_created_owner_only_read_back_and_never_overwritten(tmp_path):
    import os
    import stat

    from jaxdp.keys import key_file

    path = tmp_path / "run.key"
    first = key_file(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    content = path.read_bytes()
    again = key_file(path)
    assert path.read_bytes() == content
    np.testing.assert_array_equal(jax.random.key_data(first), jax.random.key_data(again))
    assert not np.array_equal(
        jax.random.key_data(first), jax.random.key_data(key_file(tmp_path / "other.key"))
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.key", "run.key"]  # no temporary file left
    path.write_text('{"jaxdp_root_key": "threefry2x32", "words": [1, 2, 3]}')
    with pytest.raises(ValueError, match=r"key file .*run\.key' does not hold a jaxdp root key") as refused:
        key_file(path)
    assert "1, 2, 3" not in str(refused.value)


def _words(key) -> np.ndarray:
    return np.asarray(jax.random.key_data(key))


@pytest.mark.parametrize("seed", range(40))
def test_keys_derived_on_the_host_are_jax_randoms_bit_for_bit(seed):
    """`keys.fold_in` and `keys.split_keys` hash keys with NumPy outside a trace (no program to
    compile): on random key words, counters across the 32-bit range (both ends included) and
    split sizes, the keys are jax.random's own."""
    rng = np.random.default_rng(seed)
    key = jax.random.wrap_key_data(rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32))
    for data in (
        0,
        1,
        2**32 - 1,
        int(rng.integers(0, 2**32)),
        np.uint32(rng.integers(0, 2**32)),
        Stream.MEASURE,
    ):
        np.testing.assert_array_equal(_words(fold_in(key, data)), _words(jax.random.fold_in(key, data)))
    num = int(rng.integers(1, 40))
    with jax.debug_key_reuse(False):  # the checker makes the split JAX's own
        host = split_keys(key, num)
    assert len(host) == num and all(k.shape == () for k in host)
    np.testing.assert_array_equal(np.stack([_words(k) for k in host]), _words(jax.random.split(key, num)))


def test_key_derivation_compiles_nothing_outside_a_trace():
    """The point of deriving on the host: a derived key costs no XLA program (a negative control:
    jax.random's own split, at a size not compiled before, does build one)."""
    key = jax.random.wrap_key_data(np.array([11, 12], np.uint32))
    with jax.debug_key_reuse(False):
        with programs_built() as derived:
            fold_in(key, 5), split_keys(key, 3), stream_key(key, Stream.SELECT)
        with programs_built() as control:  # a split size no other test asks for: a new program
            jax.random.split(key, 7919)
    assert derived == []
    assert control, "jax.random's eager derivation built nothing: the check cannot see a program"


def test_traced_derivation_falls_back_to_jax_random():
    key = jax.random.key(5)

    @jax.jit
    def derived(key, t):
        return jax.random.key_data(fold_in(key, t)), jax.random.key_data(jnp.stack(split_keys(key, 2)))

    @jax.jit
    def closed_over(t):  # a concrete key inside a trace: its data is traced there
        return jax.random.key_data(fold_in(key, t)), jax.random.key_data(fold_in(key, 9))

    with jax.debug_key_reuse(False):  # the reference splits the key the program split
        for words in closed_over(jnp.int32(9)):
            np.testing.assert_array_equal(words, _words(jax.random.fold_in(key, 9)))
        folded, split = derived(key, jnp.int32(9))
        np.testing.assert_array_equal(folded, _words(jax.random.fold_in(key, 9)))
        np.testing.assert_array_equal(split, _words(jax.random.split(key, 2)))


def test_a_split_under_the_key_reuse_checker_consumes_the_key():
    key = jax.random.key(6)
    with jax.debug_key_reuse(True):
        split_keys(key, 2)
        with pytest.raises(jax.errors.KeyReuseError):
            split_keys(key, 2)
