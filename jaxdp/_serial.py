"""Trees as JSON and arrays, in a checksummed zip that runs no code when it is read: the one
file format of checkpoints (`jaxdp.checkpoint`) and saved models (`jaxdp.models`).

A tree is made of None, bools, strings, Python and NumPy scalars, NumPy and JAX arrays, tuples,
lists, dicts, frozensets, enums, NamedTuples and dataclasses, and `Withheld` placeholders. Types
are kept exactly (a NumPy float64 and a Python float round differently against float32 arrays; a
JAX array comes back as one). A type is named `module:qualname` and read back by import from the
trusted packages only (jaxdp's own, and optax's and flax's NamedTuples for an optimiser's state),
defined in the module named; a dataclass is rebuilt field by field without calling its
`__init__`, so a file can make only objects those packages define, with the fields it wrote.

The container is NumPy's zip of arrays with `allow_pickle=False`: a JSON manifest, the arrays as
raw bytes, and a SHA-256 checksum over both, so that a cut-off, changed or foreign file is told
apart from a good one (`read_zip` raises `ValueError`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib
import json
import os
import zipfile
from collections.abc import Mapping
from typing import IO, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.types import Withheld

TRUSTED_MODULES = ("jaxdp", "optax", "flax")
_DATACLASS_MODULES = ("jaxdp",)

# Classes that files written by earlier versions name by their old place (module:qualname), with
# where each is defined now: read under their new name, never written under the old one.
MOVED = {
    "jaxdp.mechanisms.annealed:Annealed": "jaxdp.mechanisms.host_loop:Annealed",
    "jaxdp.mechanisms.annealed:AnnealedState": "jaxdp.mechanisms.host_loop:AnnealedState",
    "jaxdp.mechanisms.annealed:AnnealedInfo": "jaxdp.mechanisms.host_loop:AnnealedInfo",
    "jaxdp.selection.annealed:AIMSelection": "jaxdp.selection.aim:AIMSelection",
    "jaxdp.selection.annealed:RoundRecord": "jaxdp.selection.records:RoundRecord",
    "jaxdp.selection.annealed:Schedule": "jaxdp.selection.records:Schedule",
    "jaxdp.selection.annealed:Selected": "jaxdp.selection.records:Selected",
    "jaxdp.queries.threshold:MixedMarginalQueries": "jaxdp.queries.mixed:MixedMarginalQueries",
    "jaxdp.samplers:GaussianLattice": "jaxdp.samplers.lattices:GaussianLattice",
    "jaxdp.samplers:GaussianParams": "jaxdp.samplers.laws:GaussianParams",
    "jaxdp.samplers:DyadicRate": "jaxdp.samplers.draws:DyadicRate",
    "jaxdp.mechanisms.adaptive:SelectionClass": "jaxdp.mechanisms.query_classes:SelectionClass",
    "jaxdp.mechanisms.adaptive:QueryClass": "jaxdp.mechanisms.query_classes:QueryClass",
}


def digest(*parts: Any) -> str:
    """A SHA-256 hex digest of arrays (dtype, shape and bytes), strings, bytes and JSON values."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray | jax.Array):
            array = np.asarray(part)
            h.update(f"array {array.dtype.str} {array.shape}|".encode())
            h.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))  # C order, no copy
        elif isinstance(part, bytes):
            h.update(b"bytes %d|" % len(part) + part)
        else:
            text = part if isinstance(part, str) else json.dumps(part, sort_keys=True, default=repr)
            h.update(b"text %d|" % len(text.encode()) + text.encode())
    return h.hexdigest()


# -- trees ------------------------------------------------------------------------------------------


def encode(node: Any, arrays: list[np.ndarray]) -> Any:
    """The JSON form of a tree; its arrays are appended to `arrays` (as raw bytes).

    Raises:
        TypeError: a node of another type, or a PRNG key (keys are never written).
    """
    if node is None or isinstance(node, bool | str):
        return node
    if isinstance(node, enum.Enum):
        return {"enum": _name(type(node)), "value": encode(node.value, arrays)}
    if isinstance(node, int | float) and not isinstance(node, np.generic):
        return {"int": node} if isinstance(node, int) else {"float": node}
    if isinstance(node, np.ndarray | np.generic | jax.Array):
        dtype = getattr(node, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            raise TypeError("the tree holds a PRNG key: keys are never written to a file")
        array = np.asarray(node)
        kind = "jax" if isinstance(node, jax.Array) else "scalar" if isinstance(node, np.generic) else "numpy"
        arrays.append(np.ascontiguousarray(array.reshape(-1)).view(np.uint8))
        return {kind: len(arrays) - 1, "dtype": array.dtype.name, "shape": list(array.shape)}
    if isinstance(node, Withheld):
        return {"withheld": None}
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return {"namedtuple": _name(type(node)), "fields": [encode(x, arrays) for x in node]}
    if isinstance(node, tuple | list):
        return {type(node).__name__: [encode(x, arrays) for x in node]}
    if isinstance(node, frozenset):
        return {"frozenset": [encode(x, arrays) for x in sorted(node, key=repr)]}
    if isinstance(node, dict):
        return {"dict": [[encode(k, arrays), encode(v, arrays)] for k, v in node.items()]}
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        fields = {f.name: encode(getattr(node, f.name), arrays) for f in dataclasses.fields(node)}
        return {"dataclass": _name(type(node)), "fields": fields}
    raise TypeError(f"cannot write a {type(node).__module__}.{type(node).__qualname__}")


def decode(node: Any, arrays: list[np.ndarray]) -> Any:
    """The tree `encode` wrote (ValueError, KeyError, TypeError or ImportError where it cannot)."""
    if node is None or isinstance(node, bool | str):
        return node
    (kind, value), *rest = node.items()
    extra = dict(rest)
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind in ("jax", "numpy", "scalar"):
        array = arrays[value].view(jnp.dtype(extra["dtype"])).reshape(extra["shape"])
        if kind == "scalar":
            return array[()]
        return jnp.asarray(array) if kind == "jax" else array.copy()
    if kind == "withheld":
        return Withheld()
    if kind == "enum":
        return _trusted(value, TRUSTED_MODULES, enum.Enum)(decode(extra["value"], arrays))
    if kind == "namedtuple":
        cls = _trusted(value, TRUSTED_MODULES, tuple)
        if not hasattr(cls, "_fields"):
            raise ValueError(f"{value!r} is not a NamedTuple")
        return cls(*(decode(x, arrays) for x in extra["fields"]))
    if kind in ("tuple", "list"):
        items = [decode(x, arrays) for x in value]
        return tuple(items) if kind == "tuple" else items
    if kind == "frozenset":
        return frozenset(decode(x, arrays) for x in value)
    if kind == "dict":
        return {decode(k, arrays): decode(v, arrays) for k, v in value}
    if kind == "dataclass":
        cls = _trusted(value, _DATACLASS_MODULES, object)
        if not dataclasses.is_dataclass(cls):
            raise ValueError(f"{value!r} is not a dataclass")
        obj = cls.__new__(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        if set(extra["fields"]) != names:
            raise ValueError(f"{value!r} has other fields in this version")
        for name, field in extra["fields"].items():
            object.__setattr__(obj, name, decode(field, arrays))
        return obj
    raise ValueError(f"unknown node {kind!r}")


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _trusted(name: str, modules: tuple[str, ...], base: type) -> type:
    """The class `module:qualname` (or, for a class an earlier version defined elsewhere, its
    place now: `MOVED`), imported only from `modules`, and a subclass of `base`."""
    module, _, qualname = MOVED.get(name, name).partition(":")
    if module.split(".")[0] not in modules:
        raise ValueError(f"untrusted type {name!r}")
    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    # the class itself must be defined there: an attribute path through a module the trusted
    # one imported (jax's, the standard library's) names a class from elsewhere
    if not (
        isinstance(cls, type)
        and issubclass(cls, base)
        and cls.__module__ == module
        and cls.__qualname__ == qualname
    ):
        raise ValueError(f"{name!r} is not a {base.__name__} of the trusted packages")
    return cls


# -- the container ----------------------------------------------------------------------------------


def write_zip(fh: IO[bytes], manifest: Mapping[str, Any], arrays: list[np.ndarray]) -> None:
    """A manifest (JSON) and arrays (raw bytes) with their checksum, as NumPy's zip."""
    members = {"manifest": np.frombuffer(json.dumps(manifest).encode(), np.uint8)}
    members.update({f"array{i}": a for i, a in enumerate(arrays)})
    members["checksum"] = np.frombuffer(_checksum(members).encode(), np.uint8)
    np.savez(fh, **members)


def read_zip(fh: IO[bytes]) -> tuple[dict, list[np.ndarray]]:
    """(manifest, arrays) of a file `write_zip` wrote, after its checksum is verified.

    Raises:
        ValueError (or EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError): not such a
        file, cut off, or changed since it was written.
    """
    with np.load(fh, allow_pickle=False) as npz:
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("not a zip of arrays")
        members = {name: npz[name] for name in npz.files}
    if members.pop("checksum").tobytes().decode() != _checksum(members):
        raise ValueError("checksum")
    manifest = json.loads(members.pop("manifest").tobytes().decode())
    if not isinstance(manifest, dict):
        raise ValueError("no manifest")
    return manifest, [members.pop(f"array{i}") for i in range(len(members))]


class UnreadableFile(ValueError):
    """A file `read_path` cannot read, with a one-line reason that names it."""


def read_path(path: str | os.PathLike, what: str) -> tuple[dict, list[np.ndarray]]:
    """(manifest, arrays) of the file at `path` (`what` names it in messages: "model").

    Raises:
        UnreadableFile: it cannot be opened, is cut off or not such a file (a cut-off zip loses
            its directory, at the end), or its bytes changed since it was written (they fail
            their CRC or the checksum).
    """
    shown = str(path)
    try:
        with open(path, "rb") as fh:
            return read_zip(fh)
    except OSError as err:
        raise UnreadableFile(f"cannot read {what} {shown!r}: {err.strerror or err}") from None
    except (EOFError, KeyError, ValueError, TypeError, zipfile.BadZipFile, UnicodeDecodeError):
        if zipfile.is_zipfile(path):
            raise UnreadableFile(
                f"{what} {shown!r} is corrupt: its bytes changed since it was written"
            ) from None
        raise UnreadableFile(f"{what} {shown!r} is truncated, or not a {what}") from None


def _checksum(members: Mapping[str, np.ndarray]) -> str:
    return digest(*members, *members.values())
