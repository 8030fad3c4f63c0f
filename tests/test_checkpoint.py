"""Checkpoints (jaxdp.checkpoint, issue #27): what a file holds and how it reads back, resuming
through `loop.run` and `synthesize`, refusals of another run's checkpoint, and injected write
faults. Killed processes are in tests/test_resume.py."""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
import zipfile
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import _io, _serial, checkpoint, cli, loop
from jaxdp.checkpoint import Checkpoint, CheckpointError
from jaxdp.domain import Dataset, Domain
from jaxdp.queries import all_kway
from tests.conftest import StoppedAfterSaves, stop_after_saves


class Node(NamedTuple):
    a: object
    b: object


@pytest.fixture
def data() -> Dataset:
    rng = np.random.default_rng(5)
    a, e = rng.integers(0, 3, 400), rng.integers(0, 2, 400)
    codes = [
        a,
        (a + rng.integers(0, 2, 400)) % 4,
        rng.integers(0, 2, 400),
        (2 * a) % 5,
        e,
        (e + a) % 3,
        a % 2,
    ]
    return Dataset.from_codes(
        Domain.from_sizes({"a": 3, "b": 4, "c": 2, "d": 5, "e": 2, "f": 3, "g": 2}), np.stack(codes, axis=1)
    )


def _same(x, y) -> None:
    """Equal trees with equal types, dtypes, shapes and bytes."""
    assert jax.tree.structure(x) == jax.tree.structure(y)
    for u, v in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True):
        assert type(u) is type(v) or (isinstance(u, jax.Array) and isinstance(v, jax.Array)), (u, v)
        if isinstance(u, float) and np.isnan(u):
            assert np.isnan(v)
            continue
        assert np.asarray(u).dtype == np.asarray(v).dtype and np.shape(u) == np.shape(v)
        assert np.asarray(u).tobytes() == np.asarray(v).tobytes()


# -- the file ---------------------------------------------------------------------------------------


def test_a_state_reads_back_with_its_exact_types(tmp_path, monkeypatch):
    from jaxdp.selection.records import Schedule

    monkeypatch.setattr(_serial, "TRUSTED_MODULES", (*_serial.TRUSTED_MODULES, "tests"))

    state = Node(
        a=(
            None,
            True,
            3,
            -0.1,
            float("inf"),
            float("nan"),
            "text",
            np.float64(0.5),
            np.int32(7),
            np.bool_(True),
            Schedule(1.5, None, ((1, 2.0, 3.0),), False),
        ),
        b={
            "numpy": np.arange(6, dtype=np.int16).reshape(2, 3),
            "empty": np.zeros((0, 4), np.float32),
            "scalar array": np.array(2.5),
            "bf16": jnp.arange(4, dtype=jnp.bfloat16),
            "jax": jnp.ones((3,), jnp.uint32),
            "list": [np.float32(1.0), 2],
            "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        },
    )
    info = {"charges": jnp.arange(4.0)}
    with Checkpoint(tmp_path / "c") as store:
        store.save(4, state, info)
        saved = store.load()
    assert saved.rounds_done == 4
    _same(saved.state, state)
    _same(saved.info, info)
    assert saved.state.a[-1].rho_spent == state.a[-1].rho_spent  # the NamedTuple's own class


def test_a_state_holding_a_key_or_an_unknown_type_is_never_written(tmp_path):
    with Checkpoint(tmp_path / "c") as store:
        with pytest.raises(TypeError, match="PRNG key"):
            store.save(1, Node(jax.random.key(0), None), ())
        with pytest.raises(TypeError, match=r"cannot write a builtins\.set"):
            store.save(1, Node({1, 2}, None), ())
        assert not store.path.exists()


def test_a_namedtuple_from_outside_the_trusted_packages_is_not_imported(tmp_path):
    with Checkpoint(tmp_path / "c") as store:
        store.save(1, Node(1, 2), ())  # this test module's type, written as any other
        with pytest.raises(
            CheckpointError, match=r"cannot read: untrusted type 'tests\.test_checkpoint:Node'"
        ):
            store.load()


def test_files_are_owner_only_and_the_directory_is_locked_while_a_run_holds_it(tmp_path):
    first = Checkpoint(tmp_path / "run")
    with first:
        first.save(1, (np.zeros(2),), ())
        assert stat.S_IMODE(os.stat(tmp_path / "run").st_mode) == 0o700
        assert stat.S_IMODE(os.stat(first.path).st_mode) == 0o600
        with pytest.raises(CheckpointError, match="in use by another run"), Checkpoint(tmp_path / "run"):
            pass
    with Checkpoint(tmp_path / "run"):  # released with the first
        pass
    first.remove()
    assert not (tmp_path / "run").exists()


def test_refuses_another_runs_checkpoint_naming_what_differs(tmp_path):
    with Checkpoint(tmp_path / "c", fingerprint={"data": "1", "budget": "e=1"}) as store:
        store.save(2, (np.zeros(2),), ())
    for fingerprint, differ in [
        ({"data": "2", "budget": "e=1"}, "what differs from this run: data\\."),
        ({"data": "2", "budget": "e=2"}, "what differs from this run: data, budget\\."),
        ({"data": "1", "budget": "e=1", "key": "k"}, "what differs from this run: key\\."),
    ]:
        with (
            pytest.raises(CheckpointError, match=differ),
            Checkpoint(tmp_path / "c", fingerprint=fingerprint) as c,
        ):
            c.load()
    with Checkpoint(tmp_path / "c", fingerprint={"data": "1", "budget": "e=1"}) as same:
        assert same.load().rounds_done == 2


def test_refuses_another_versions_a_truncated_and_a_changed_checkpoint(tmp_path, monkeypatch):
    with Checkpoint(tmp_path / "c") as store:
        store.save(2, (np.arange(1000.0),), ())
        whole, members = store.path.read_bytes(), _last_data_bytes(store.path)
        monkeypatch.setattr(checkpoint, "__version__", "0.0.1-other")
        with pytest.raises(CheckpointError, match=r"written by jaxdp .* this is jaxdp 0.0.1-other"):
            store.load()
        monkeypatch.undo()
        store.path.write_bytes(whole[: len(whole) // 2])
        with pytest.raises(CheckpointError, match="is truncated, or not a checkpoint"):
            store.load()
        for at in members:  # the last byte of the manifest, of the array and of the checksum
            flipped = bytearray(whole)
            flipped[at] ^= 0x10
            store.path.write_bytes(bytes(flipped))
            with pytest.raises(CheckpointError, match="is corrupt: its bytes changed"):
                store.load()
        store.path.write_bytes(whole)
        assert store.load().rounds_done == 2


def _last_data_bytes(path) -> list[int]:
    """The offset of each zip member's last byte of data (after its local header)."""
    whole = path.read_bytes()
    offsets = []
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            name_length, extra_length = struct.unpack(
                "<HH", whole[member.header_offset + 26 : member.header_offset + 30]
            )
            offsets.append(member.header_offset + 30 + name_length + extra_length + member.compress_size - 1)
    return offsets


# -- resuming a run -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name,rounds", [("mwem", 7), ("pep", 5), ("rap-softmax", 4), ("aim", 10)])
def test_loop_run_resumes_to_the_uninterrupted_runs_state_info_and_ledger(
    data, tmp_path, monkeypatch, name, rounds
):
    mechanism = jaxdp.api.build(name, data, all_kway(data.domain.sizes, 2), epsilon=2.0, rounds=rounds)
    key = jax.random.key(4)
    whole = loop.run(mechanism, key, checkpoint=Checkpoint(tmp_path / "whole", every=2))
    with monkeypatch.context() as patched:
        stop_after_saves(patched, 2)
        with pytest.raises(StoppedAfterSaves):
            loop.run(mechanism, key, checkpoint=Checkpoint(tmp_path / "killed", every=2))
    resumed = loop.run(mechanism, key, checkpoint=Checkpoint(tmp_path / "killed", every=2))
    assert resumed.resumed_from == 4 and whole.resumed_from is None
    _same((resumed.state, resumed.info), (whole.state, whole.info))
    assert resumed.ledger == whole.ledger
    plain = loop.run(mechanism, key)  # without checkpoints: the same rounds in fewer blocks
    assert [e.to_json() for e in plain.ledger] == [e.to_json() for e in whole.ledger]


def test_a_run_with_other_rounds_or_interval_is_refused(data, tmp_path):
    mechanism = jaxdp.api.build("mwem", data, all_kway(data.domain.sizes, 2), epsilon=2.0, rounds=6)
    key = jax.random.key(4)
    loop.run(mechanism, key, checkpoint=Checkpoint(tmp_path / "c", every=2))
    with pytest.raises(CheckpointError, match="what differs from this run: checkpoint every\\."):
        loop.run(mechanism, key, checkpoint=Checkpoint(tmp_path / "c", every=3))
    with pytest.raises(CheckpointError, match="what differs from this run: rounds\\."):
        loop.run(mechanism, key, 4, checkpoint=Checkpoint(tmp_path / "c", every=2))


def test_synthesize_resumes_reports_it_and_removes_the_checkpoint(data, tmp_path, monkeypatch):
    def release(**kwargs):
        return jaxdp.synthesize(
            data,
            None,
            mechanism="pep",
            epsilon=2.0,
            key=jax.random.key(9),
            workload="all-2way",
            rounds=6,
            **kwargs,
        )

    whole = release(checkpoint=tmp_path / "whole", checkpoint_every=2)
    assert not (tmp_path / "whole").exists()
    assert whole.report["checkpoint"] == {"every": 2, "resumed_from_round": None}
    with monkeypatch.context() as patched:
        stop_after_saves(patched, 1)
        with pytest.raises(StoppedAfterSaves):
            release(checkpoint=tmp_path / "run", checkpoint_every=2)
    kept = release(checkpoint=tmp_path / "run", checkpoint_every=2, keep_checkpoint=True)
    assert kept.report["checkpoint"] == {"every": 2, "resumed_from_round": 2}
    np.testing.assert_array_equal(kept.data.codes, whole.data.codes)
    assert kept.ledger == whole.ledger
    assert (tmp_path / "run" / checkpoint.FILE).exists()
    again = release(checkpoint=tmp_path / "run", checkpoint_every=2)  # from the final checkpoint
    assert again.report["checkpoint"]["resumed_from_round"] == 6
    np.testing.assert_array_equal(again.data.codes, whole.data.codes)
    assert not (tmp_path / "run").exists()


# -- the command line: refusals, key files ----------------------------------------------------------


@pytest.fixture
def table(tmp_path, data):
    from jaxdp.domain import write_csv

    write_csv(tmp_path / "data.csv", data)
    (tmp_path / "domain.json").write_text(
        json.dumps(dict(zip(data.domain.names, data.domain.sizes, strict=True)))
    )
    return tmp_path


def _synth(table, out: str, *extra: str) -> list[str]:
    args = [
        "synth",
        "--mechanism",
        "mwem",
        "--data",
        str(table / "data.csv"),
        "--domain",
        str(table / "domain.json"),
    ]
    args += [
        "--epsilon",
        "2",
        "--rounds",
        "4",
        "--checkpoint",
        str(table / "ckpt"),
        "--checkpoint-every",
        "2",
    ]
    return [*args, "--out", str(table / out), "--keep-checkpoint", *extra]


def test_the_cli_refuses_each_change_with_its_own_message_and_releases_nothing(table, capsys, monkeypatch):
    assert cli.main(_synth(table, "first.csv", "--seed", "1")) == 0
    capsys.readouterr()
    whole = (table / "ckpt" / checkpoint.FILE).read_bytes()
    changed = table / "changed.csv"
    lines = (table / "data.csv").read_text().splitlines()
    lines[5] = "2,3,1,4,1,2,1" if lines[5] != "2,3,1,4,1,2,1" else "0,0,0,0,0,0,0"  # one record
    changed.write_text("\n".join(lines) + "\n")
    cases = [
        (["--epsilon", "3"], "what differs from this run: budget, mechanism settings, mechanism inputs."),
        (["--mechanism", "pep"], "what differs from this run: mechanism, mechanism settings"),
        (["--data", str(changed)], "what differs from this run: data, mechanism inputs."),
        (["--workload", "all-2way"], "what differs from this run: workload, mechanism settings"),
        (["--seed", "2"], "what differs from this run: key."),
        (["--checkpoint-every", "1"], "what differs from this run: checkpoint every."),
    ]
    for i, (change, message) in enumerate(cases):
        args = _synth(table, f"refused{i}.csv", "--seed", "1")
        for flag, value in zip(change[::2], change[1::2], strict=True):
            if flag in args:
                args[args.index(flag) + 1] = value
            else:
                args += [flag, value]
        assert cli.main(args) == 2, change
        err = capsys.readouterr().err.splitlines()
        assert err[-1].startswith("jaxdp: error:") and message in err[-1], (change, err)
        assert not any("round" in line for line in err[:-1]), err  # refused before any round ran
        assert not (table / f"refused{i}.csv").exists()
    monkeypatch.setattr(checkpoint, "__version__", "9.9.9")
    assert cli.main(_synth(table, "version.csv", "--seed", "1")) == 2
    assert "this is jaxdp 9.9.9" in capsys.readouterr().err
    monkeypatch.undo()
    flipped = bytearray(whole)
    flipped[200] ^= 0x10  # in the manifest
    for damaged, message in [(whole[:-100], "truncated"), (bytes(flipped), "corrupt")]:
        (table / "ckpt" / checkpoint.FILE).write_bytes(damaged)
        assert cli.main(_synth(table, "damaged.csv", "--seed", "1")) == 2
        assert message in capsys.readouterr().err
        assert not (table / "damaged.csv").exists()


def test_a_checkpointed_cli_run_needs_a_key_it_can_have_again(table, capsys):
    assert cli.main(_synth(table, "x.csv")) == 2
    assert "--checkpoint needs the run's root key again" in capsys.readouterr().err
    assert cli.main(_synth(table, "x.csv", "--seed", "1", "--key-file", str(table / "k"))) == 2
    assert "--seed or --key-file, not both" in capsys.readouterr().err
    assert cli.main(_synth(table, "a.csv", "--key-file", str(table / "k"))) == 0
    assert stat.S_IMODE(os.stat(table / "k").st_mode) == 0o600
    assert cli.main(_synth(table, "b.csv", "--key-file", str(table / "k"))) == 0
    assert "resuming from checkpoint" in capsys.readouterr().err
    assert (table / "a.csv").read_bytes() == (table / "b.csv").read_bytes()
    assert cli.main(_synth(table, "c.csv", "--key-file", str(table / "other"))) == 2
    assert "what differs from this run: key." in capsys.readouterr().err
    # The key made a release: another one (here another budget, checkpoint or none) is refused.
    for extra in (["--checkpoint", str(table / "fresh")], []):
        args = _synth(table, "d.csv", "--key-file", str(table / "k"), "--epsilon", "3", *extra)
        if not extra:
            args = [a for a in args if a not in ("--keep-checkpoint",)]
            i = args.index("--checkpoint")
            del args[i : i + 4]  # --checkpoint DIR --checkpoint-every N
        assert cli.main(args) == 2
        assert "already made another release" in capsys.readouterr().err
        assert not (table / "d.csv").exists()


# -- injected write faults ------------------------------------------------------------------------------


class _FullDisk:
    """`os.fdopen` for `jaxdp._io`, whose files write in 4 KiB pieces and raise ENOSPC at piece
    `fail_at` (a disk that fills up partway through a file); `pieces` counts what was written."""

    def __init__(self, fail_at: int | None):
        self.fail_at, self.pieces, self._fdopen = fail_at, 0, os.fdopen

    def __call__(self, fd, mode, **kwargs):
        return _Pieces(self._fdopen(fd, mode, **kwargs), self)


class _Pieces:
    def __init__(self, fh, disk: _FullDisk):
        self._fh, self._disk = fh, disk

    def write(self, data):
        for start in range(0, max(len(data), 1), 4096):
            self._disk.pieces += 1
            if self._disk.pieces == self._disk.fail_at:
                raise OSError(errno.ENOSPC, "No space left on device")
            self._fh.write(data[start : start + 4096])
        return len(data)

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._fh.__exit__(*exc)


def _leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(_io.TEMPORARY_SUFFIX))


def test_a_full_disk_at_any_write_of_a_checkpoint_leaves_the_old_one_whole(tmp_path, monkeypatch):
    old_state, new_state = (np.arange(5000.0),), (np.arange(5000.0) + 1,)
    with Checkpoint(tmp_path / "c") as store:
        store.save(2, old_state, ())
        counter = _FullDisk(None)
        monkeypatch.setattr(_io.os, "fdopen", counter)
        store.save(4, new_state, ())
        pieces = counter.pieces
        assert pieces > 5
        store.save(2, old_state, ())
        for fail_at in range(1, pieces + 1):
            monkeypatch.setattr(_io.os, "fdopen", _FullDisk(fail_at))
            with pytest.raises(OSError, match="No space left"):
                store.save(4, new_state, ())
            saved = store.load()
            assert saved.rounds_done == 2
            _same(saved.state, old_state)
            assert _leftovers(tmp_path / "c") == []
        monkeypatch.undo()
        for step in ("fsync", "replace"):
            with monkeypatch.context() as patched:
                patched.setattr(_io.os, step, _raises_enospc)
                with pytest.raises(OSError):
                    store.save(4, new_state, ())
            assert store.load().rounds_done == 2 and _leftovers(tmp_path / "c") == []


def _raises_enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_writing_outputs_leaves_each_old_file_whole_or_none(table, capsys, monkeypatch):
    args = _synth(table, "out.csv", "--seed", "1", "--report", str(table / "report.json"))
    assert cli.main(args) == 0  # writes the checkpoints, then the outputs
    counter = _FullDisk(None)
    monkeypatch.setattr(_io.os, "fdopen", counter)
    assert cli.main(args) == 0  # resumes from the last checkpoint: writes only the outputs
    new = {name: (table / name).read_bytes() for name in ("out.csv", "report.json")}
    pieces = counter.pieces
    assert pieces >= 2  # a piece of each file at least
    for fail_at in range(1, pieces + 1):
        monkeypatch.undo()
        for name in new:  # an old version of each output, unlike the new one
            (table / name).write_bytes(b"old " + name.encode())
        monkeypatch.setattr(_io.os, "fdopen", _FullDisk(fail_at))
        assert cli.main(args) == 2
        assert "No space left" in capsys.readouterr().err
        found = {name: (table / name).read_bytes() for name in new}
        # each file whole, old or new; the CSV is written first, so a failure leaves the report old
        assert all(found[name] in (b"old " + name.encode(), new[name]) for name in new), found
        assert found["report.json"] == b"old report.json"
        assert _leftovers(table) == [] and _leftovers(table / "ckpt") == []
    monkeypatch.undo()
    (table / "out.csv").unlink()
    (table / "report.json").unlink()
    monkeypatch.setattr(_io.os, "fdopen", _FullDisk(pieces))  # the report's last piece
    assert cli.main(args) == 2
    assert not (table / "report.json").exists() and (table / "out.csv").read_bytes() == new["out.csv"]
