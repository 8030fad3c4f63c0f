"""Key rules: typed keys required, derivation pure and collision-free, secure root key."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import audit
from jaxdp.keys import Stream, require_key, round_key, secure_root_key, stream_key


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
