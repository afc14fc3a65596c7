"""The dtypes tensors use (NumPy dtype objects) and how Python data maps onto them."""
from __future__ import annotations

import numpy as np

float32 = np.dtype("float32")
float64 = np.dtype("float64")
float16 = np.dtype("float16")
int64 = np.dtype("int64")
int32 = np.dtype("int32")
int8 = np.dtype("int8")
uint8 = np.dtype("uint8")
bool_ = np.dtype("bool")

_default_float = float32

_SUPPORTED = {float16, float32, float64, int8, int32, int64, uint8, bool_}


def get_default_dtype() -> np.dtype:
    return _default_float


def set_default_dtype(dtype) -> None:
    """The dtype of floating tensors made from Python numbers and of ``rand``/``randn``/``zeros``."""
    global _default_float
    dtype = np.dtype(dtype)
    if dtype not in (float32, float64):
        raise ValueError(f"set_default_dtype: {dtype} is not float32 or float64")
    _default_float = dtype


def resolve(dtype):
    """Turn a user's dtype (None, a dtype, a type, or a name such as "float32") into a NumPy dtype."""
    if dtype is None:
        return None
    try:
        resolved = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"unknown dtype {dtype!r}") from error
    if resolved not in _SUPPORTED:
        raise TypeError(f"dtype {resolved} is not supported; use one of "
                        f"{sorted(str(d) for d in _SUPPORTED)}")
    return resolved


def infer(data) -> np.dtype:
    """The dtype a tensor made from ``data`` gets when none is given.

    NumPy arrays keep theirs (other integer widths become int64); Python floats become the default
    float dtype, Python ints int64, bools bool — the same rules as PyTorch's ``torch.tensor``.
    """
    if hasattr(data, "dtype"):
        kind = np.dtype(data.dtype)
        if kind in _SUPPORTED:
            return kind
        if kind.kind in "iu":
            return int64
        if kind.kind == "f":
            return float64 if kind.itemsize > 8 else _default_float
        raise TypeError(f"cannot make a tensor from an array of dtype {kind}")
    array = np.asarray(data)
    if array.dtype.kind == "f":
        return _default_float
    if array.dtype.kind in "iu":
        return int64
    if array.dtype.kind == "b":
        return bool_
    raise TypeError(f"cannot make a tensor from {type(data).__name__} (dtype {array.dtype})")


def is_floating(dtype) -> bool:
    return np.dtype(dtype).kind == "f"
