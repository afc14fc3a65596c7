"""Checkpoints: ``save(state, path)`` / ``load(path)`` in one ``.npz`` file that is never unpickled.

``state`` is a tree: dicts with ``str`` (or ``int``) keys, lists and tuples, whose leaves are
Tensors, NumPy arrays (or arrays of another backend, e.g. CuPy, which are copied to the host),
NumPy scalars and JSON scalars (``int``, ``float`` including nan and inf, ``bool``, ``None``,
``str``). A model's ``state_dict()``, an optimizer's ``state_dict()`` (whose state is keyed by
int parameter indices), the step number and the config all fit in one checkpoint::

    save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 1200}, "ckpt.npz")
    state = load("ckpt.npz")
    model.load_state_dict(state["model"])

Format (version 1)
------------------
The file is an ordinary ``.npz`` archive (a zip of ``.npy`` files, stored uncompressed unless
``compress=True``) that plain NumPy reads with ``np.load(path, allow_pickle=False)``:

- every array leaf is one entry under a generated key, ``arr_0``, ``arr_1`` ... in the order a
  depth-first walk of the tree meets them;
- the entry ``__header__`` is a 1-D ``uint8`` array holding a UTF-8 JSON document (ASCII only, no
  NaN or Infinity, so any JSON parser reads it)::

      {"format": "minitorch_nlp.checkpoint", "version": 1, "tree": NODE}

  where each NODE is one of

  ====================================================================  ==========================
  ``{"type": "dict", "items": {"key": NODE, ...}}``                     dict, in insertion order
  ``{"type": "dict", "entries": [[0, NODE], ["key", NODE], ...]}``      dict with some int keys
  ``{"type": "list", "items": [NODE, ...]}`` (or ``"tuple"``)           list / tuple
  ``{"type": "tensor", "key": "arr_0", "dtype": "float32",              Tensor (data only: its
  "shape": [2, 3], "requires_grad": true}``                             ``.grad`` and graph are
                                                                        not saved)
  ``{"type": "ndarray", "key": "arr_1", "dtype": "int64",               ``numpy.ndarray``
  "shape": [5]}``
  ``{"type": "numpy_scalar", "key": "arr_2", "dtype": "float32",        NumPy scalar, stored as a
  "shape": []}``                                                        0-d array
  ``{"type": "int", "value": 3}`` (also ``"bool"``, ``"str"``)          Python scalar
  ``{"type": "none"}``                                                  ``None``
  ``{"type": "float", "value": 0.5}``                                   finite ``float``
  ``{"type": "float", "value": "nan", "bits": "7ff8000000000000"}``     nan / inf / -inf, with
                                                                        the IEEE-754 bit pattern
  ====================================================================  ==========================

So, with NumPy alone::

    import json, numpy as np
    with np.load("ckpt.npz", allow_pickle=False) as archive:
        header = json.loads(archive["__header__"].tobytes().decode("utf-8"))
        weight = archive[header["tree"]["items"]["model"]["items"]["fc.weight"]["key"]]

Round trips are bit-exact for every array dtype (float32/64, ints, bool, ...), 0-d, empty and
non-contiguous arrays included. Dict subclasses come back as ``dict``, tuple subclasses (named
tuples) as ``tuple``, Tensor subclasses (``nn.Parameter``) as ``Tensor``; a tensor or array that
appears twice in ``state`` is stored twice.

A path ending in ``.safetensors`` is written and read as a safetensors file instead (the format
HuggingFace shares weights in): it holds a flat dict of str -> Tensor or array, such as a
``state_dict()``, and ``load`` gives back a dict of Tensors.

Safety: ``load`` passes ``allow_pickle=False`` to NumPy, so a file holding pickled data (an object
array, a pickled header, a whole pickle) is refused with a ``ValueError`` before anything in it
runs, and ``save`` refuses object arrays. ``save`` writes to a temporary file next to ``path`` and
renames it over ``path`` only once it is complete, so a crash or an error mid-write leaves any
previous checkpoint at ``path`` intact; the temporary files a killed write leaves behind are
removed by the next write to the same ``path``.
"""
from __future__ import annotations

import json
import math
import os
import struct
import zipfile

import numpy as np

from ..autograd import Tensor
from ..backends import available_backends, get_backend
from .files import atomic_write, safetensors_numpy

FORMAT_NAME = "minitorch_nlp.checkpoint"
FORMAT_VERSION = 1
HEADER_KEY = "__header__"
SAFETENSORS_SUFFIX = ".safetensors"

_ARRAY_NODES = ("tensor", "ndarray", "numpy_scalar")


def save(state, path, *, compress=False):
    """Write ``state`` (a tree of dicts / lists / tuples with Tensor, array and scalar leaves) to
    ``path`` as a ``.npz`` checkpoint; see the module docstring for the format.

    ``path`` (``str`` or ``os.PathLike``) is used exactly as given: no ``.npz`` is appended.
    ``compress=True`` deflates the entries (smaller, slower). The write is atomic: a temporary file
    in the same directory is renamed over ``path`` once complete, and removed if anything fails.

    Raises ``TypeError`` naming the key path (``state['model']['w']``) for a leaf of an unsupported
    type, an object-dtype array or a dict key that is neither ``str`` nor ``int``; ``ValueError``
    for a container that contains itself. Nothing is written in those cases.
    """
    path = _as_str_path(path)
    if path.endswith(SAFETENSORS_SUFFIX):
        return _save_safetensors(state, path)
    arrays = {}
    tree = _encode(state, "state", arrays, set())
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "tree": tree}
    header_bytes = json.dumps(header, ensure_ascii=True, allow_nan=False).encode("utf-8")
    entries = {HEADER_KEY: np.frombuffer(header_bytes, dtype=np.uint8), **arrays}
    atomic_write(path, lambda file: _write_npz(file, entries, compress))


def load(path, *, backend=None):
    """Read a checkpoint written by ``save`` and rebuild the same tree.

    Tensor leaves come back as Tensors on ``backend`` (a name or Backend; default: the current
    backend) with their dtype and ``requires_grad``; array leaves as ``numpy.ndarray``; tuples as
    tuples. Never unpickles anything.

    Raises ``ValueError`` naming the file when it is not a checkpoint (no ``__header__``, not an
    ``.npz``, pickled content, an unknown format version, a header that does not match the arrays).
    """
    path = _as_str_path(path)
    target = get_backend(backend)
    if path.endswith(SAFETENSORS_SUFFIX):
        return _load_safetensors(path, target)
    _refuse_what_is_not_an_archive(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except ValueError as exc:   # NumPy's advice to allow pickles is not ours to give
        what = ("it holds pickled data, which minitorch_nlp never loads" if "pickle" in str(exc)
                else "it is not a NumPy .npz file")
        raise ValueError(f"{path!r} is not a minitorch_nlp checkpoint: {what}") from None
    except (EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path!r} is not a minitorch_nlp checkpoint (.npz): {exc}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{path!r} is a single .npy array, not a minitorch_nlp checkpoint (.npz)")
    with archive:
        header = _read_header(archive, path)
        try:
            return _decode(header["tree"], _Reader(archive, path, target))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path!r}: malformed checkpoint header ({exc!r})") from None


def _refuse_what_is_not_an_archive(path):
    """Say what the file is, from its first bytes, when it is not a zip (``.npz``) archive:
    NumPy would take any unknown content for a pickle and say so."""
    try:
        with open(path, "rb") as file:
            start = file.read(6)
    except IsADirectoryError:
        raise ValueError(f"{path!r} is a folder, not a checkpoint file") from None
    if start.startswith(b"PK"):
        return
    what = ("it is a single .npy array" if start.startswith(b"\x93NUMPY") else
            "it holds pickled data, which minitorch_nlp never loads" if start[:1] == b"\x80"
            else "it is empty" if not start else "it is not a NumPy .npz file (a text file?)")
    raise ValueError(f"{path!r} is not a minitorch_nlp checkpoint: {what}")


# ---- save side -----------------------------------------------------------------------------

def _encode(obj, where, arrays, open_containers):
    """The header node for ``obj`` at key path ``where``; array leaves are added to ``arrays``."""
    if isinstance(obj, Tensor):
        node = _array_node("tensor", obj.numpy(), where, arrays)
        node["requires_grad"] = bool(obj.requires_grad)
        return node
    if isinstance(obj, np.ndarray):
        if isinstance(obj, np.ma.MaskedArray):
            raise TypeError(f"{where}: cannot save a masked array; save its .data and .mask")
        return _array_node("ndarray", np.asarray(obj), where, arrays)
    if isinstance(obj, (dict, list, tuple)):
        if id(obj) in open_containers:
            raise ValueError(f"{where} contains itself; a checkpoint must be a tree")
        open_containers.add(id(obj))
        try:
            return _encode_container(obj, where, arrays, open_containers)
        finally:
            open_containers.discard(id(obj))
    if obj is None:
        return {"type": "none"}
    if isinstance(obj, bool):
        return {"type": "bool", "value": obj}
    if isinstance(obj, np.generic):  # before int / float: np.float64 subclasses float
        return _array_node("numpy_scalar", np.asarray(obj), where, arrays)
    if isinstance(obj, int):
        return {"type": "int", "value": int(obj)}
    if isinstance(obj, float):
        return _float_node(float(obj))
    if isinstance(obj, str):
        return {"type": "str", "value": str(obj)}
    host = _backend_array_to_numpy(obj)
    if host is not None:
        return _array_node("ndarray", host, where, arrays)
    raise TypeError(
        f"{where}: cannot save a value of type {type(obj).__module__}.{type(obj).__qualname__}; "
        "a checkpoint holds dicts (str keys), lists, tuples, Tensors, arrays and "
        "int / float / bool / None / str")


def _encode_container(obj, where, arrays, open_containers):
    if isinstance(obj, dict):
        entries = []
        for key, value in obj.items():
            if not isinstance(key, str) and (not isinstance(key, int) or isinstance(key, bool)):
                raise TypeError(
                    f"{where}: dict key {key!r} is a {type(key).__name__}; checkpoint dict keys "
                    "must be str (or int, as in an optimizer's state)")
            key = key if isinstance(key, str) else int(key)
            entries.append([key, _encode(value, f"{where}[{key!r}]", arrays, open_containers)])
        if all(isinstance(key, str) for key, _ in entries):
            return {"type": "dict", "items": dict(entries)}
        return {"type": "dict", "entries": entries}
    kind = "tuple" if isinstance(obj, tuple) else "list"
    return {"type": kind,
            "items": [_encode(value, f"{where}[{i}]", arrays, open_containers)
                      for i, value in enumerate(obj)]}


def _array_node(kind, array, where, arrays):
    if array.dtype.hasobject:
        raise TypeError(
            f"{where}: cannot save an array of dtype {array.dtype}: object arrays need pickle, "
            "which checkpoints never use; convert it to a numeric, bool or str dtype")
    key = f"arr_{len(arrays)}"
    arrays[key] = array
    return {"type": kind, "key": key, "dtype": str(array.dtype), "shape": list(array.shape)}


def _float_node(value):
    if math.isfinite(value):
        return {"type": "float", "value": value}
    # JSON has no nan / inf; the bit pattern keeps a NaN's sign and payload too
    return {"type": "float", "value": repr(value), "bits": struct.pack(">d", value).hex()}


def _backend_array_to_numpy(obj):
    """``obj`` copied to a ``numpy.ndarray`` if it is an array of a non-NumPy backend, else None."""
    for name in available_backends():
        try:
            candidate = get_backend(name)
        except (RuntimeError, ImportError):  # a backend that cannot start here holds no arrays
            continue
        array_type = getattr(candidate.xp, "ndarray", None)
        if candidate.xp is not np and array_type is not None and isinstance(obj, array_type):
            return np.asarray(candidate.to_numpy(obj))
    return None


def _write_npz(file, entries, compress):
    """What ``np.savez`` writes, to an open file (so no ``.npz`` is appended) and never pickling."""
    compression = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(file, mode="w", compression=compression, allowZip64=True) as archive:
        for key, array in entries.items():
            with archive.open(key + ".npy", mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


def _as_str_path(path):
    path = os.fspath(path)
    return os.fsdecode(path) if isinstance(path, bytes) else path


# ---- safetensors: a flat dict of arrays, the format HuggingFace shares weights in ----------------
def _save_safetensors(state, path):
    """``state``, a dict of str -> Tensor or array (a ``state_dict()``), as a safetensors file."""
    if not isinstance(state, dict) or not all(
            isinstance(key, str) and isinstance(value, (Tensor, np.ndarray))
            for key, value in state.items()):
        raise TypeError(f"save: a {SAFETENSORS_SUFFIX} file holds a flat dict of str -> Tensor "
                        f"or array (a state_dict()); save other states to {path!r} as .npz")
    arrays = {key: np.ascontiguousarray(value.numpy() if isinstance(value, Tensor) else value)
              for key, value in state.items()}
    payload = safetensors_numpy().save(arrays)
    atomic_write(path, lambda file: file.write(payload))


def _load_safetensors(path, backend):
    """The tensors of a safetensors file, as a dict of str -> Tensor on ``backend``."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load: {path} does not exist")
    try:
        arrays = safetensors_numpy().load_file(path)
    except Exception as exc:  # noqa: BLE001 (SafetensorError derives from Exception only)
        raise ValueError(f"{path!r} is not a readable safetensors file ({exc})") from None
    return {key: _to_tensor(array, False, backend) for key, array in arrays.items()}


# ---- load side -----------------------------------------------------------------------------

def _read_header(archive, path):
    if HEADER_KEY not in archive.files:
        raise ValueError(
            f"{path!r} has no {HEADER_KEY!r} entry, so it is not a minitorch_nlp checkpoint "
            "(a plain np.savez file?); NumPy's np.load reads that")
    raw = _read_entry(archive, HEADER_KEY, path)
    try:
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"it is a {raw.dtype} array of shape {raw.shape}, not 1-D uint8")
        header = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise ValueError(f"the format is not {FORMAT_NAME!r}")
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path!r}: unreadable checkpoint header: {exc}") from None
    if header.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{path!r}: checkpoint format version {header.get('version')!r} is not supported "
            f"(this minitorch_nlp reads version {FORMAT_VERSION}); was it written by a newer one?")
    return header


def _read_entry(archive, key, path):
    try:
        _check_entry_bytes(archive, key, path)
        return archive[key]
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:  # pickled or corrupt entry
        raise ValueError(f"{path!r}: cannot read entry {key!r}: {exc}") from None


def _check_entry_bytes(archive, key, path):
    """The shape and dtype in the entry's own ``.npy`` header fit the bytes the archive holds
    for it: NumPy allocates what that header says before it reads, so a damaged header claiming
    1e10 values would allocate tens of gigabytes."""
    member = f"{key}.npy"
    if member not in archive.zip.NameToInfo:
        raise ValueError("it is not a .npy array")
    with archive.zip.open(member) as file:
        version = np.lib.format.read_magic(file)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read_header(file)
        data_offset = file.tell()
    if dtype.hasobject:
        return   # refused when read: NumPy will not unpickle it
    needed = math.prod(shape) * dtype.itemsize
    held = archive.zip.getinfo(member).file_size - data_offset
    if needed > held:
        raise ValueError(f"its header claims {dtype} {shape} ({needed} bytes) but it holds "
                         f"{held} bytes; the file is damaged")


class _Reader:
    """What decoding needs: the open archive, the file name for errors, the target backend."""

    def __init__(self, archive, path, backend):
        self.archive, self.path, self.backend = archive, path, backend

    def array(self, node):
        key = node["key"]
        if f"{key}.npy" not in self.archive.zip.NameToInfo:
            raise ValueError(f"{self.path!r}: the header refers to a missing entry {key!r}")
        self._check_stored_size(key, node)
        array = _read_entry(self.archive, key, self.path)
        if str(array.dtype) != node["dtype"] or list(array.shape) != node["shape"]:
            raise ValueError(
                f"{self.path!r}: entry {key!r} is {array.dtype} {array.shape} but the header "
                f"says {node['dtype']} {tuple(node['shape'])}")
        return array

    def _check_stored_size(self, key, node):
        """The bytes the header's shape and dtype need are there in the archive, checked before
        NumPy allocates the array its own header describes (which a damaged file can make
        enormous)."""
        try:
            needed = math.prod(node["shape"]) * np.dtype(node["dtype"]).itemsize
        except (TypeError, ValueError):
            raise ValueError(f"{self.path!r}: entry {key!r} has the unreadable shape or dtype "
                             f"{node.get('shape')!r} {node.get('dtype')!r}") from None
        held = self.archive.zip.getinfo(f"{key}.npy").file_size
        if needed > held:
            raise ValueError(f"{self.path!r}: entry {key!r} should hold {needed} bytes "
                             f"({node['dtype']} {tuple(node['shape'])}) but holds {held}; the "
                             "file is damaged")


def _decode(node, reader):
    kind = node["type"]
    if kind == "dict":
        entries = node["entries"] if "entries" in node else node["items"].items()
        return {key: _decode(value, reader) for key, value in entries}
    if kind in ("list", "tuple"):
        items = [_decode(value, reader) for value in node["items"]]
        return tuple(items) if kind == "tuple" else items
    if kind in _ARRAY_NODES:
        array = reader.array(node)
        if kind == "tensor":
            return _to_tensor(array, bool(node["requires_grad"]), reader.backend)
        return array[()] if kind == "numpy_scalar" else array
    if kind == "float":
        if "bits" in node:
            return struct.unpack(">d", bytes.fromhex(node["bits"]))[0]
        return float(node["value"])
    if kind in ("int", "bool", "str"):
        return node["value"]
    if kind == "none":
        return None
    raise ValueError(f"{reader.path!r}: unknown node type {kind!r} in the checkpoint header")


def _to_tensor(array, requires_grad, backend):
    return Tensor(array, dtype=array.dtype, requires_grad=requires_grad, backend=backend)
