"""The autograd engine: ``Tensor``, ``Function``, graph traversal, grad mode, creation and random."""
from . import dtypes
from .creation import (arange, argsort, as_tensor, cat, chunk, concatenate, empty, eye, full,
                       full_like, gather, index_select, linspace, one_hot, ones, ones_like, pad,
                       rand, rand_like, randint, randint_like, randn, randn_like, scatter_add,
                       sort, split, stack, take_along_axis, tensor, topk, unbind, zeros,
                       zeros_like)
from .dtypes import (bool_, float16, float32, float64, get_default_dtype, int8, int32, int64,
                     set_default_dtype, uint8)
from .engine_api import backward, grad
from .function import Context, Function
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .ops_elementwise import (abs, clip, cos, erf, exp, log, log1p, maximum, minimum, negative,
                              relu, rsqrt, sigmoid, sin, softplus, sqrt, tanh, where)
from .ops_fused import FusedFunction
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

__all__ = [
    "Context",
    "Function",
    "FusedFunction",
    "Generator",
    "Tensor",
    "abs",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "as_tensor",
    "backward",
    "bool_",
    "broadcast_to",
    "cat",
    "chunk",
    "clip",
    "concatenate",
    "cos",
    "cumsum",
    "default_generator",
    "einsum",
    "empty",
    "enable_grad",
    "erf",
    "exp",
    "expand_dims",
    "eye",
    "flip",
    "float16",
    "float32",
    "float64",
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
    "linspace",
    "log",
    "log1p",
    "log_softmax",
    "logsumexp",
    "manual_seed",
    "masked_fill",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "negative",
    "no_grad",
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
    "reshape",
    "roll",
    "rsqrt",
    "scatter_add",
    "set_default_dtype",
    "set_grad_enabled",
    "sigmoid",
    "sin",
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
    "tanh",
    "tensor",
    "topk",
    "transpose",
    "tril",
    "triu",
    "uint8",
    "unbind",
    "unsqueeze",
    "var",
    "where",
    "zeros",
    "zeros_like",
]
