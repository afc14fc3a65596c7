"""The autograd engine: ``Tensor``, ``Function``, graph traversal, grad mode, creation and
random."""
import numpy as _np

from . import dtypes
from .creation import (arange, argsort, as_tensor, cat, chunk, concatenate, empty, eye, full,
                       full_like, gather, index_select, linspace, meshgrid, one_hot, ones,
                       ones_like, pad,
                       rand, rand_like, randint, randint_like, randn, randn_like, scatter,
                       scatter_add, scatter_reduce,
                       sort, split, stack, take_along_axis, tensor, topk, unbind, zeros,
                       zeros_like)
from .dtypes import (bool_, float16, float32, float64, get_default_dtype, int8, int32, int64,
                     set_default_dtype, uint8)
from .engine_api import backward, grad
from .function import Context, Function
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .ops_elementwise import bitwise as _bitwise_op
from .ops_elementwise import (abs, arccos, arccosh, arcsin, arcsinh, arctan, arctanh, ceil, clip,
                              copysign, cos, cosh, div, erf, exp, exp2, expm1, floor, floor_divide,
                              fmod, lerp, log, log1p, log2, log10, logaddexp, maximum, minimum,
                              negative, relu, remainder, round, rsqrt, sigmoid, sign, sin, sinh,
                              softplus, sqrt, tan, tanh, trunc, where, xlogy)
from .ops_fused import FusedFunction
from .ops_shape import IndexAdd as _IndexAdd
from .ops_linalg import einsum, matmul
from .random import Generator, default_generator, manual_seed
from .tensor import Tensor


def _method_as_function(name):
    def function(x, *args, **kwargs):
        return getattr(x if isinstance(x, Tensor) else tensor(x), name)(*args, **kwargs)

    function.__name__ = name
    function.__doc__ = f"``x.{name}(...)`` as a function (see ``Tensor.{name}``)."
    return function


sum = _method_as_function("sum")  # noqa: A001 - mirrors numpy.sum
mean = _method_as_function("mean")
var = _method_as_function("var")
std = _method_as_function("std")
prod = _method_as_function("prod")
max = _method_as_function("max")  # noqa: A001
min = _method_as_function("min")  # noqa: A001
logsumexp = _method_as_function("logsumexp")
argmax = _method_as_function("argmax")
argmin = _method_as_function("argmin")
cumsum = _method_as_function("cumsum")
reshape = _method_as_function("reshape")
transpose = _method_as_function("transpose")
permute = _method_as_function("permute")
swapaxes = _method_as_function("swapaxes")
squeeze = _method_as_function("squeeze")
unsqueeze = _method_as_function("unsqueeze")
expand_dims = _method_as_function("expand_dims")
broadcast_to = _method_as_function("broadcast_to")
flip = _method_as_function("flip")
roll = _method_as_function("roll")
tril = _method_as_function("tril")
triu = _method_as_function("triu")
masked_fill = _method_as_function("masked_fill")
gelu = _method_as_function("gelu")
softmax = _method_as_function("softmax")
log_softmax = _method_as_function("log_softmax")
cumprod = _method_as_function("cumprod")
cummax = _method_as_function("cummax")
cummin = _method_as_function("cummin")
logcumsumexp = _method_as_function("logcumsumexp")
norm = _method_as_function("norm")
unflatten = _method_as_function("unflatten")
tile = _method_as_function("tile")
repeat_interleave = _method_as_function("repeat_interleave")
diagonal = _method_as_function("diagonal")
masked_select = _method_as_function("masked_select")
nonzero = _method_as_function("nonzero")
isnan = _method_as_function("isnan")
isinf = _method_as_function("isinf")
isfinite = _method_as_function("isfinite")
isclose = _method_as_function("isclose")
allclose = _method_as_function("allclose")
asin, acos, atan, asinh, acosh, atanh = arcsin, arccos, arctan, arcsinh, arccosh, arctanh


def diag(x, k=0):
    """A 1-D tensor as the ``k``-th diagonal of a square matrix, or a matrix's ``k``-th diagonal
    as a 1-D tensor (NumPy's and PyTorch's ``diag``)."""
    x = x if isinstance(x, Tensor) else tensor(x)
    if x.ndim == 2:
        return x.diagonal(k)
    if x.ndim != 1:
        raise ValueError(f"diag: needs a 1-D or 2-D tensor, got shape {x.shape}")
    n = x.shape[0] + (k if k >= 0 else -k)
    rows = _np.arange(x.shape[0]) + (0 if k >= 0 else -k)
    xp = x.backend.xp
    return _IndexAdd.apply(x, index=(xp.asarray(rows), xp.asarray(rows + k)), shape=(n, n))


def _logical(name, doc):
    def function(a, b=None):
        owner = a if isinstance(a, Tensor) else tensor(a)
        xp = owner.backend.xp
        operands = [owner.data] + ([] if b is None else
                                   [b.data if isinstance(b, Tensor) else _np.asarray(b)])
        return Tensor._wrap(getattr(xp, name)(*operands), owner.backend)

    function.__name__ = name
    function.__doc__ = doc
    return function


def _bitwise(name, ufunc, doc):
    def function(a, b=None):
        return _bitwise_op(ufunc, a, b, op=name)

    function.__name__ = name
    function.__doc__ = doc + " Python ints wrap into the tensor's dtype (``bitwise``)."
    return function


logical_and = _logical("logical_and", "Elementwise a and b (any dtype; non-zero is true), bool.")
logical_or = _logical("logical_or", "Elementwise a or b, bool.")
logical_xor = _logical("logical_xor", "Elementwise a xor b, bool.")
logical_not = _logical("logical_not", "Elementwise not a, bool.")
bitwise_and = _bitwise("bitwise_and", "bitwise_and", "Bitwise a & b of integer or bool tensors.")
bitwise_or = _bitwise("bitwise_or", "bitwise_or", "Bitwise a | b of integer or bool tensors.")
bitwise_xor = _bitwise("bitwise_xor", "bitwise_xor", "Bitwise a ^ b of integer or bool tensors.")
bitwise_not = _bitwise("bitwise_not", "invert", "Bitwise ~a of integer or bool tensors.")
bitwise_left_shift = _bitwise("bitwise_left_shift", "left_shift",
                              "a << b of integer tensors (bits shifted out are lost).")
bitwise_right_shift = _bitwise("bitwise_right_shift", "right_shift",
                               "a >> b of integer tensors (arithmetic: the sign is kept).")

__all__ = [
    "Context",
    "Function",
    "FusedFunction",
    "Generator",
    "Tensor",
    "abs",
    "acos",
    "acosh",
    "allclose",
    "arange",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctanh",
    "argmax",
    "argmin",
    "argsort",
    "as_tensor",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "backward",
    "bitwise_and",
    "bitwise_left_shift",
    "bitwise_not",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "bool_",
    "broadcast_to",
    "cat",
    "ceil",
    "chunk",
    "clip",
    "concatenate",
    "copysign",
    "cos",
    "cosh",
    "cummax",
    "cummin",
    "cumprod",
    "cumsum",
    "default_generator",
    "diag",
    "div",
    "diagonal",
    "einsum",
    "empty",
    "enable_grad",
    "erf",
    "exp",
    "exp2",
    "expand_dims",
    "expm1",
    "eye",
    "flip",
    "float16",
    "float32",
    "float64",
    "floor",
    "floor_divide",
    "fmod",
    "full",
    "full_like",
    "gather",
    "gelu",
    "get_default_dtype",
    "grad",
    "index_select",
    "int32",
    "int64",
    "int8",
    "is_grad_enabled",
    "isclose",
    "isfinite",
    "isinf",
    "isnan",
    "lerp",
    "linspace",
    "log",
    "log10",
    "log1p",
    "log2",
    "log_softmax",
    "logaddexp",
    "logcumsumexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logsumexp",
    "manual_seed",
    "masked_fill",
    "masked_select",
    "matmul",
    "max",
    "maximum",
    "mean",
    "meshgrid",
    "min",
    "minimum",
    "negative",
    "no_grad",
    "nonzero",
    "norm",
    "one_hot",
    "ones",
    "ones_like",
    "pad",
    "permute",
    "prod",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "relu",
    "remainder",
    "repeat_interleave",
    "reshape",
    "roll",
    "round",
    "rsqrt",
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "set_default_dtype",
    "set_grad_enabled",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "softmax",
    "softplus",
    "sort",
    "split",
    "sqrt",
    "squeeze",
    "stack",
    "std",
    "sum",
    "swapaxes",
    "take_along_axis",
    "tan",
    "tanh",
    "tensor",
    "tile",
    "topk",
    "transpose",
    "tril",
    "triu",
    "trunc",
    "uint8",
    "unbind",
    "unflatten",
    "unsqueeze",
    "var",
    "where",
    "xlogy",
    "zeros",
    "zeros_like",
]
