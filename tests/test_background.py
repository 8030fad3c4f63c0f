"""Programs compiled on a thread of their own (`jaxdp._background.Compiler`)."""

import concurrent.futures

import jax
import numpy as np

from jaxdp._background import Compiler


def _lowering(log: list, scale: float):
    def lower():
        log.append(scale)
        return jax.jit(lambda x: x * scale).lower(np.float32(1.0))

    return lower


def test_each_signature_compiles_once_and_the_least_recently_asked_for_goes_first():
    compiler, lowered = Compiler("test-compiler", capacity=2), []
    assert compiler.program("a", _lowering(lowered, 2.0))(np.float32(3.0)) == 6.0
    compiler.program("b", _lowering(lowered, 3.0))
    compiler.program("a", _lowering(lowered, 2.0))  # kept; now asked for after "b"
    compiler.program("c", _lowering(lowered, 4.0))  # over capacity: "b" goes
    assert lowered == [2.0, 3.0, 4.0]
    assert compiler.program("b", _lowering(lowered, 3.0))(np.float32(1.0)) == 3.0
    assert lowered == [2.0, 3.0, 4.0, 3.0]  # "b" was dropped: lowered again; now "a" goes
    compiler.program("c", _lowering(lowered, 4.0))
    assert lowered == [2.0, 3.0, 4.0, 3.0]  # "c" is kept


def test_a_program_asked_for_ahead_is_compiled_once():
    compiler, lowered = Compiler("test-compiler"), []
    assert compiler.program("a", _lowering(lowered, 2.0), wait=False) is None
    assert compiler.program("a", _lowering(lowered, 2.0))(np.float32(5.0)) == 10.0
    assert lowered == [2.0]


def test_threads_asking_at_once_share_one_compile():
    compiler, lowered = Compiler("test-compiler", capacity=1), []
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: compiler.program("a", _lowering(lowered, 2.0)), range(32)))
    assert lowered == [2.0]
    assert all(r is results[0] for r in results)
