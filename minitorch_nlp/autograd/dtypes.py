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
    """The dtype of floating tensors made from Python numbers and of
    ``rand``/``randn``/``zeros``."""
    global _default_float
    dtype = np.dtype(dtype)
    if dtype not in (float32, float64):
        raise ValueError(f"set_default_dtype: {dtype} is not float32 or float64")
    _default_float = dtype


def resolve(dtype):
    """Turn a user's dtype (None, a dtype, a type, or a name such as "float32") into a NumPy
    dtype."""
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


# ---- promotion ------------------------------------------------------------------------------
_CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}


def _is_number(value) -> bool:
    return isinstance(value, (bool, int, float, np.generic))


def result_type(*operands) -> np.dtype:
    """The dtype of an elementwise operation on ``operands`` (arrays and Python numbers).

    The rule (PyTorch's, written down once):

    * arrays (tensors) of one category (bool < integer < float) combine as NumPy does
      (float32 with float64 gives float64, int32 with int64 gives int64);
    * across categories the higher category wins and keeps its own dtype: an int64 tensor with a
      float32 tensor gives float32, a bool tensor with an int32 tensor gives int32;
    * a Python number never widens a tensor of its own or a higher category (float32 + 0.5 stays
      float32, int32 + 2 stays int32); a float number with an integer or bool tensor gives the
      default float dtype (float32 unless ``set_default_dtype``), an int number with a bool
      tensor gives int64.

    Unlike PyTorch, a 0-d tensor is an array like any other (float32 + a 0-d float64 tensor
    gives float64).
    """
    arrays = [np.dtype(x.dtype) for x in operands if not _is_number(x)]
    numbers = [x for x in operands if _is_number(x)]
    top = max((_CATEGORY[d.kind] for d in arrays), default=-1)
    dtype = np.result_type(*[d for d in arrays if _CATEGORY[d.kind] == top]) if arrays else None
    for number in numbers:
        kind = np.asarray(number).dtype.kind
        if _CATEGORY[kind] > top:
            top = _CATEGORY[kind]
            dtype = _default_float if kind == "f" else (int64 if kind in "iu" else bool_)
    return dtype


def floating(dtype) -> np.dtype:
    """The dtype of a function that only makes sense on real numbers (exp, log, division ...):
    the input's dtype if it is floating, else the default float dtype."""
    dtype = np.dtype(dtype)
    return dtype if dtype.kind == "f" else _default_float


def quiet(xp, **kinds):
    """``xp.errstate(**kinds)`` where the array library has it (NumPy), else a context that
    does nothing (CuPy's kernels raise no floating-point warnings)."""
    import contextlib

    errstate = getattr(xp, "errstate", None)
    return errstate(**kinds) if errstate is not None else contextlib.nullcontext()
