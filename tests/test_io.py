"""Checkpoints (minitorch_nlp.io): bit-exact round trips, atomic writes, no pickle, clear errors."""
import json
import math
import os
import pickle
import re
import struct
import zipfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_nlp as mt
from minitorch_nlp import nn, optim
from minitorch_nlp.io import checkpoint, load, save

ARRAY_DTYPES = ["float32", "float64", "int64", "bool", "int8", "uint8", "int32", "float16",
                ">f8", "<U3"]
TENSOR_DTYPES = ["float32", "float64", "int64", "bool"]


# ---- strategies and comparison -------------------------------------------------------------

@st.composite
def arrays(draw, dtypes=ARRAY_DTYPES):
    """Arrays of any listed dtype (nan, inf, -0.0 included), 0-d to 3-d, some non-contiguous."""
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    if layout == "strided" and shape:
        base = draw(hnp.arrays(dtype, shape[:-1] + (2 * shape[-1],)))
        return base[..., ::2]
    array = draw(hnp.arrays(dtype, shape))
    return array.T if layout == "transposed" else array


def tensors():
    def make(array, requires_grad):
        return mt.tensor(array, dtype=array.dtype,
                         requires_grad=requires_grad and array.dtype.kind == "f")
    return st.builds(make, arrays(TENSOR_DTYPES), st.booleans())


def numpy_scalars():
    dtypes = st.sampled_from(["float32", "float64", "int64", "bool", "int8", "<U3"])
    return dtypes.flatmap(lambda dtype: hnp.arrays(dtype, ())).map(lambda a: a[()])


leaves = st.one_of(
    arrays(), tensors(), numpy_scalars(),
    st.integers(), st.floats(), st.booleans(), st.none(), st.text(max_size=10))

trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4)),
    max_leaves=12)


def assert_same(saved, loaded, where="state"):
    """``loaded`` has the type, structure and exact bits of ``saved`` (Parameters load as
    Tensors)."""
    if isinstance(saved, mt.Tensor):
        assert type(loaded) is mt.Tensor, where
        assert loaded.requires_grad == saved.requires_grad, where
        assert_same(saved.numpy(), loaded.numpy(), where)
        return
    assert type(loaded) is type(saved), f"{where}: {type(saved)} came back as {type(loaded)}"
    if isinstance(saved, dict):
        assert list(loaded) == list(saved), where
        for key in saved:
            assert_same(saved[key], loaded[key], f"{where}[{key!r}]")
    elif isinstance(saved, (list, tuple)):
        assert len(loaded) == len(saved), where
        for i, (a, b) in enumerate(zip(saved, loaded)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(saved, (np.ndarray, np.generic)):
        assert loaded.dtype == saved.dtype and loaded.shape == saved.shape, where
        assert np.ascontiguousarray(loaded).tobytes() == np.ascontiguousarray(saved).tobytes(), \
            where
    elif isinstance(saved, float):
        assert struct.pack(">d", loaded) == struct.pack(">d", saved), where
    else:
        assert loaded == saved, where


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


# ---- round trips ---------------------------------------------------------------------------

@given(state=trees, compress=st.booleans())
def test_round_trip_is_bit_exact(shared_dir, state, compress):
    path = shared_dir / "state.npz"
    save(state, path, compress=compress)
    assert_same(state, load(path))


@pytest.mark.parametrize("dtype", ARRAY_DTYPES)
@pytest.mark.parametrize("make", [
    lambda a: a[0, 0, ...],           # 0-d
    lambda a: a[:0],                  # empty
    lambda a: a.T,                    # transposed (Fortran order)
    lambda a: a[::2, 1::2],           # strided view
    lambda a: np.asfortranarray(a),
], ids=["0d", "empty", "transposed", "strided", "fortran"])
def test_array_layouts_round_trip(tmp_path, dtype, make):
    base = np.arange(-12, 12).reshape(4, 6).astype(dtype)
    state = {"x": make(base)}
    save(state, tmp_path / "a.npz")
    assert_same(state, load(tmp_path / "a.npz"))


def test_special_floats_keep_their_bits(tmp_path):
    payload_nan = struct.unpack(">d", bytes.fromhex("fff8000000000123"))[0]
    values = [0.1, -0.0, math.inf, -math.inf, math.nan, payload_nan, 1e308, 5e-324]
    state = {"floats": values,
             "array": np.array([payload_nan, -0.0, np.inf], dtype=np.float64),
             "f32": np.frombuffer(bytes.fromhex("7fc00001ffc00000"), dtype=">f4").astype("<f4")}
    save(state, tmp_path / "f.npz")
    assert_same(state, load(tmp_path / "f.npz"))


def test_tensors_come_back_on_the_backend_with_requires_grad(tmp_path):
    weight = mt.tensor(np.ones((2, 3)), dtype=mt.float64, requires_grad=True)
    ids = mt.tensor(np.array([3, 1, 2]), dtype=mt.int64)
    save({"w": weight, "ids": ids, "plain": np.zeros(3, np.float32)}, tmp_path / "t.npz")
    state = load(tmp_path / "t.npz", backend="numpy")
    assert isinstance(state["w"], mt.Tensor) and state["w"].requires_grad
    assert state["w"].dtype == np.float64 and state["w"].shape == (2, 3)
    assert state["w"].backend.name == "numpy"
    assert not state["ids"].requires_grad and state["ids"].dtype == np.int64
    assert type(state["plain"]) is np.ndarray


def test_tensor_that_is_not_a_leaf_saves_its_data(tmp_path):
    x = mt.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * 2
    save({"y": y}, tmp_path / "y.npz")
    loaded = load(tmp_path / "y.npz")["y"]
    assert loaded.requires_grad and loaded.is_leaf
    np.testing.assert_array_equal(loaded.numpy(), y.numpy())


def test_int_dict_keys_stay_int(tmp_path):
    state = {"state": {0: {"step": 3}, 2: {"step": 1}}, "mixed": {"0": "str", 0: "int", -5: None}}
    save(state, tmp_path / "k.npz")
    loaded = load(tmp_path / "k.npz")
    assert loaded == state and list(loaded["mixed"]) == ["0", 0, -5]


def test_containers_keep_their_kind_and_order(tmp_path):
    state = {"b": (1, [2, (3,)]), "a": [], "c": (), "d": {}}
    save(state, tmp_path / "c.npz")
    loaded = load(tmp_path / "c.npz")
    assert loaded == state and list(loaded) == ["b", "a", "c", "d"]
    assert type(loaded["b"]) is tuple and type(loaded["b"][1][1]) is tuple


class _DeviceArray:
    """An array of a pretend device backend: only its backend's ``to_numpy`` can read it."""

    def __init__(self, host):
        self._host = host


class _DeviceBackend:
    name = "device"
    xp = type("device_xp", (), {"ndarray": _DeviceArray})

    def to_numpy(self, array):
        return array._host.copy()


def test_arrays_of_another_backend_are_saved_as_numpy(tmp_path, monkeypatch):
    device = _DeviceBackend()
    real_get_backend = checkpoint.get_backend
    monkeypatch.setattr(checkpoint, "available_backends", lambda: ["numpy", "device"])
    monkeypatch.setattr(checkpoint, "get_backend",
                        lambda name=None: device if name == "device" else real_get_backend(name))
    host = np.arange(6, dtype=np.int8).reshape(2, 3)
    save({"kv": [_DeviceArray(host)]}, tmp_path / "d.npz")
    assert_same({"kv": [host]}, load(tmp_path / "d.npz"))


# ---- the file itself -----------------------------------------------------------------------

def test_plain_numpy_reads_a_checkpoint(tmp_path):
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    save({"model": {"fc.weight": mt.tensor(weight, requires_grad=True)}, "step": 7},
         tmp_path / "ckpt.npz")
    with np.load(tmp_path / "ckpt.npz", allow_pickle=False) as archive:
        header = json.loads(archive["__header__"].tobytes().decode("utf-8"))
        node = header["tree"]["items"]["model"]["items"]["fc.weight"]
        np.testing.assert_array_equal(archive[node["key"]], weight)
    assert header["format"] == "minitorch_nlp.checkpoint" and header["version"] == 1
    assert node == {"type": "tensor", "key": node["key"], "dtype": "float32", "shape": [2, 3],
                    "requires_grad": True}
    assert header["tree"]["items"]["step"] == {"type": "int", "value": 7}


@pytest.mark.parametrize("name", ["model.ckpt", "model", "model.npz"])
@pytest.mark.parametrize("as_path", [str, lambda p: p], ids=["str", "Path"])
def test_path_is_used_exactly_as_given(tmp_path, name, as_path):
    target = tmp_path / name
    save({"x": np.ones(2)}, as_path(target))
    assert sorted(os.listdir(tmp_path)) == [name]
    np.testing.assert_array_equal(load(as_path(target))["x"], np.ones(2))


def test_compression_is_off_by_default_and_optional(tmp_path):
    state = {"x": np.zeros(1000)}
    save(state, tmp_path / "plain.npz")
    save(state, tmp_path / "small.npz", compress=True)
    with zipfile.ZipFile(tmp_path / "plain.npz") as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
    with zipfile.ZipFile(tmp_path / "small.npz") as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    assert os.path.getsize(tmp_path / "small.npz") < os.path.getsize(tmp_path / "plain.npz")
    assert_same(state, load(tmp_path / "small.npz"))


def test_saving_again_replaces_the_checkpoint(tmp_path):
    save({"step": 1}, tmp_path / "c.npz")
    save({"step": 2}, tmp_path / "c.npz")
    assert load(tmp_path / "c.npz") == {"step": 2}
    assert os.listdir(tmp_path) == ["c.npz"]


# ---- atomic writes -------------------------------------------------------------------------

def _fail_after_first_array(monkeypatch):
    real_write_array = np.lib.format.write_array
    calls = []

    def write_array(file, array, **kwargs):
        if calls:
            file.write(b"half an array")
            raise OSError("disk full")
        calls.append(array)
        real_write_array(file, array, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", write_array)


def test_failed_write_leaves_the_old_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    save({"w": np.arange(3)}, path)
    before = path.read_bytes()
    _fail_after_first_array(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        save({"w": np.arange(100), "v": np.ones(5)}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.npz"]
    monkeypatch.undo()
    assert_same({"w": np.arange(3)}, load(path))


def test_failed_first_write_creates_nothing(tmp_path, monkeypatch):
    _fail_after_first_array(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        save({"w": np.arange(100)}, tmp_path / "new.npz")
    assert os.listdir(tmp_path) == []


def test_failed_rename_removes_the_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    save({"step": 1}, path)
    before = path.read_bytes()

    def refuse(src, dst):
        raise PermissionError("rename refused")

    monkeypatch.setattr(checkpoint.os, "replace", refuse)
    with pytest.raises(PermissionError, match="rename refused"):
        save({"step": 2}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["c.npz"]


def test_interrupt_mid_write_also_cleans_up(tmp_path, monkeypatch):
    def interrupted(file, entries, compress):
        file.write(b"PK\x03\x04 partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "_write_npz", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save({"step": 1}, tmp_path / "c.npz")
    assert os.listdir(tmp_path) == []


# ---- never unpickle ------------------------------------------------------------------------

UNPICKLED = []


def _record_unpickling(tag):
    UNPICKLED.append(tag)
    return tag


class Payload:
    """Unpickling this calls ``_record_unpickling``: the tests check it never happens."""

    def __reduce__(self):
        return (_record_unpickling, ("payload ran",))


def _object_array():
    array = np.empty(1, dtype=object)
    array[0] = Payload()
    return array


def _header(tree, version=1):
    text = json.dumps({"format": "minitorch_nlp.checkpoint", "version": version, "tree": tree})
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


@pytest.fixture
def no_unpickling():
    UNPICKLED.clear()
    yield
    assert UNPICKLED == [], "load unpickled something"


def test_object_array_entry_is_refused_unread(tmp_path, no_unpickling):
    path = tmp_path / "evil.npz"
    tree = {"type": "dict", "items": {"w": {"type": "ndarray", "key": "arr_0",
                                            "dtype": "object", "shape": [1]}}}
    np.savez(path, __header__=_header(tree), arr_0=_object_array())
    with pytest.raises(ValueError, match=r"evil\.npz.*'arr_0'.*allow_pickle"):
        load(path)


def test_pickled_header_is_refused_unread(tmp_path, no_unpickling):
    path = tmp_path / "evil.npz"
    np.savez(path, __header__=_object_array())
    with pytest.raises(ValueError, match=r"evil\.npz.*'__header__'"):
        load(path)


@pytest.mark.parametrize("name", ["evil.pkl", "evil.npz"])
def test_pickle_file_is_refused_unread(tmp_path, no_unpickling, name):
    path = tmp_path / name
    path.write_bytes(pickle.dumps({"w": Payload()}))
    with pytest.raises(ValueError, match=re.escape(name) + ".*not a minitorch_nlp checkpoint"):
        load(path)


def test_a_pickle_is_refused_without_numpy_s_advice_to_trust_it(tmp_path, no_unpickling):
    path = tmp_path / "model.npz"
    path.write_bytes(pickle.dumps({"w": Payload()}))
    with pytest.raises(ValueError) as error:
        load(path)
    assert "it holds pickled data, which minitorch_nlp never loads" in str(error.value)
    assert "allow_pickle" not in str(error.value) and "trust" not in str(error.value)


def test_saving_into_a_missing_folder_names_the_folder(tmp_path):
    target = tmp_path / "no" / "such" / "c.npz"
    with pytest.raises(FileNotFoundError, match=re.escape(f"cannot write {target}: the folder "
                                                          f"{target.parent} does not exist")):
        save({"a": 1}, target)
    assert not (tmp_path / "no").exists()


def test_mt_save_and_load_are_the_checkpoint_functions(tmp_path):
    assert mt.save is save and mt.load is load
    model = mt.nn.Linear(3, 2)
    mt.save(model.state_dict(), tmp_path / "model.safetensors")
    state = mt.load(tmp_path / "model.safetensors")
    assert sorted(state) == ["bias", "weight"] and isinstance(state["weight"], mt.Tensor)
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(state[name].numpy(), tensor.numpy())
        assert state[name].dtype == tensor.dtype
    import safetensors.numpy   # the file is plain safetensors
    assert sorted(safetensors.numpy.load_file(tmp_path / "model.safetensors")) == ["bias", "weight"]


def test_a_safetensors_file_holds_only_a_flat_dict_of_arrays(tmp_path):
    with pytest.raises(TypeError, match=r"a \.safetensors file holds a flat dict of str -> Tensor"):
        save({"model": {"w": np.ones(2)}, "step": 3}, tmp_path / "x.safetensors")
    (tmp_path / "cut.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(ValueError, match="cut.safetensors' is not a readable safetensors file"):
        load(tmp_path / "cut.safetensors")
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "none.safetensors")


def test_saving_an_object_array_is_refused(tmp_path):
    with pytest.raises(TypeError, match=re.escape("state['model']['w']") + ".*dtype object"):
        save({"model": {"w": _object_array()}}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match=re.escape("state['a'][1]") + ".*object"):
        save({"a": [np.ones(2), np.array([(1, None)], dtype=[("x", "i4"), ("y", "O")])]},
             tmp_path / "c.npz")
    assert os.listdir(tmp_path) == []


# ---- error messages ------------------------------------------------------------------------

@pytest.mark.parametrize("leaf, type_name", [
    ({1, 2}, "builtins.set"), (object(), "builtins.object"), (b"raw", "builtins.bytes"),
    (len, "builtin_function_or_method"), (1 + 2j, "builtins.complex"),
    (np.ma.masked_array([1, 2], mask=[0, 1]), "masked array"),
])
def test_unsupported_leaf_names_path_and_type(tmp_path, leaf, type_name):
    with pytest.raises(TypeError, match=re.escape("state['model'][0]['w']") + ".*"
                       + re.escape(type_name)):
        save({"model": [{"w": leaf}]}, tmp_path / "c.npz")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("key", [("a", "b"), None, b"w", 1.5, True, np.int64(1)])
def test_dict_key_that_is_not_str_or_int_is_refused(tmp_path, key):
    with pytest.raises(TypeError, match=re.escape(f"state['optim']: dict key {key!r}")
                       + ".*must be str"):
        save({"optim": {key: 1.0}}, tmp_path / "c.npz")


def test_self_containing_state_is_refused(tmp_path):
    state = {"a": []}
    state["a"].append(state)
    with pytest.raises(ValueError, match=re.escape("state['a'][0] contains itself")):
        save(state, tmp_path / "c.npz")


def test_file_without_header_is_refused(tmp_path):
    np.savez(tmp_path / "plain.npz", w=np.ones(2))
    with pytest.raises(ValueError, match=r"plain\.npz.*no '__header__' entry"):
        load(tmp_path / "plain.npz")


def test_unknown_format_version_is_refused(tmp_path):
    np.savez(tmp_path / "future.npz", __header__=_header({"type": "none"}, version=99))
    with pytest.raises(ValueError, match=r"future\.npz.*version 99 is not supported"):
        load(tmp_path / "future.npz")


@pytest.mark.parametrize("header, message", [
    (np.frombuffer(b"{not json", dtype=np.uint8), "unreadable checkpoint header"),
    (np.frombuffer(b'{"format": "other", "version": 1}', dtype=np.uint8),
     "unreadable checkpoint header"),
    (np.arange(4, dtype=np.int64), "not 1-D uint8"),
])
def test_unreadable_header_is_refused(tmp_path, header, message):
    np.savez(tmp_path / "bad.npz", __header__=header)
    with pytest.raises(ValueError, match=r"bad\.npz.*" + message):
        load(tmp_path / "bad.npz")


@pytest.mark.parametrize("tree, message", [
    ({"type": "ndarray", "key": "arr_9", "dtype": "float64", "shape": [2]}, "missing entry"),
    ({"type": "ndarray", "key": "arr_0", "dtype": "float32", "shape": [2]},
     "'arr_0' is float64 .* header says float32"),
    ({"type": "set", "items": []}, "unknown node type 'set'"),
    ({"items": []}, "malformed checkpoint header"),
])
def test_header_that_does_not_match_the_file_is_refused(tmp_path, tree, message):
    np.savez(tmp_path / "bad.npz", __header__=_header(tree), arr_0=np.ones(2))
    with pytest.raises(ValueError, match=r"bad\.npz.*" + message):
        load(tmp_path / "bad.npz")


@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04broken zip"])
def test_garbage_file_is_refused(tmp_path, content):
    (tmp_path / "junk.npz").write_bytes(content)
    with pytest.raises(ValueError, match=r"junk\.npz.*not a minitorch_nlp checkpoint"):
        load(tmp_path / "junk.npz")


def test_single_npy_file_is_refused(tmp_path):
    np.save(tmp_path / "w.npy", np.ones(2))
    with pytest.raises(ValueError, match=r"w\.npy.*single \.npy array"):
        load(tmp_path / "w.npy")


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope.npz")


# ---- modules -------------------------------------------------------------------------------

def test_module_state_dict_round_trip(tmp_path):
    linear = nn.Linear
    mt.manual_seed(0)
    model = linear(4, 3)
    save({"model": model.state_dict()}, tmp_path / "m.npz")
    mt.manual_seed(1)
    fresh = linear(4, 3)
    x = mt.tensor(np.random.default_rng(0).normal(size=(5, 4)), dtype=mt.float32)
    assert not np.array_equal(fresh(x).numpy(), model(x).numpy())
    fresh.load_state_dict(load(tmp_path / "m.npz")["model"])
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())
    for name, param in fresh.state_dict().items():
        np.testing.assert_array_equal(param.numpy(), model.state_dict()[name].numpy())


def test_training_resumes_exactly_from_a_checkpoint(tmp_path):
    linear = nn.Linear
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.normal(size=(8, 4)), dtype=mt.float32)
    y = mt.tensor(rng.normal(size=(8, 2)), dtype=mt.float32)

    def train(model, opt, steps):
        for _ in range(steps):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()

    mt.manual_seed(0)
    model = linear(4, 2)
    opt = optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    train(model, opt, 3)
    save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 3},
         tmp_path / "resume.npz")
    train(model, opt, 2)

    mt.manual_seed(1)
    resumed = linear(4, 2)
    resumed_opt = optim.AdamW(resumed.parameters(), lr=0.5)
    state = load(tmp_path / "resume.npz")
    resumed.load_state_dict(state["model"])
    resumed_opt.load_state_dict(state["optim"])
    train(resumed, resumed_opt, 2)
    assert state["step"] == 3
    for name, param in resumed.state_dict().items():
        np.testing.assert_array_equal(param.numpy(), model.state_dict()[name].numpy())
