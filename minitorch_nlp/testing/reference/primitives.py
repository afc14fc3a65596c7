"""The engine's primitives as ``autograd.numpy`` expressions: the references of
``tests/test_primitives.py``.

Each function takes float64 arrays (and the same static keyword arguments as the engine call it
checks) and returns an array, or a tuple of arrays for operations with several outputs. Where the
library uses a trick (a shifted exponent, a fused kernel, a scatter), the reference uses the
plain textbook formula or a loop instead, so that the two cannot share a mistake. Integer and
boolean arguments (indices, masks) are constants: autograd never differentiates them.
"""
from __future__ import annotations

import math

import autograd.numpy as anp
import numpy as np
from autograd.scipy.special import erf as _erf
from autograd.tracer import getval


# ---- arithmetic ----------------------------------------------------------------------------------
def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b


def div(a, b):
    return a / b


def power(a, b):
    """a^b = exp(b log a), for a positive base. (autograd's own ``**`` rule gets the mixed second
    derivative wrong where b == 0: it switches the x**(b-1) factor off there.)"""
    return anp.exp(b * anp.log(a))


def power_const(x, p):
    """x^p for a constant exponent p != 0 (any sign of x when p is an integer)."""
    return x ** p


def maximum(a, b):
    return 0.5 * (a + b + anp.abs(a - b))


def minimum(a, b):
    return 0.5 * (a + b - anp.abs(a - b))


def matmul(a, b):
    return anp.matmul(a, b)


# ---- elementwise ---------------------------------------------------------------------------------
def neg(x):
    return -x


def abs(x):  # noqa: A001 - the primitive's name
    return anp.sqrt(x * x)


def exp(x):
    return anp.exp(x)


def log(x):
    return anp.log(x)


def log1p(x):
    return anp.log(1.0 + x)


def sqrt(x):
    return x ** 0.5


def rsqrt(x):
    return 1.0 / anp.sqrt(x)


def sin(x):
    return anp.sin(x)


def cos(x):
    return anp.cos(x)


def tanh(x):
    return (anp.exp(x) - anp.exp(-x)) / (anp.exp(x) + anp.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + anp.exp(-x))


def relu(x):
    return x * (x > 0)


def softplus(x):
    return anp.logaddexp(0.0, x)


def erf(x):
    return _erf(x)


def gelu(x, approximate="none"):
    """x Phi(x) (Hendrycks & Gimpel 2016), or its tanh approximation."""
    if approximate == "tanh":
        return 0.5 * x * (1.0 + anp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))


def clip(x, low=None, high=None):
    if low is not None:
        x = anp.where(x < low, low, x)
    if high is not None:
        x = anp.where(x > high, high, x)
    return x


def where(a, b, condition):
    return condition * a + (1.0 - condition) * b


def masked_fill(x, mask, value):
    return anp.where(mask, value, x)


# ---- reductions ----------------------------------------------------------------------------------
def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,))))


def _reduced_axes_last(x, axis):
    """``x`` with the reduced axes moved to the end and flattened into one: (kept..., reduced)."""
    axes = _axes(axis, x.ndim)
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = anp.transpose(x, kept + list(axes))
    return anp.reshape(moved, tuple(x.shape[i] for i in kept) + (-1,)), axes


def _restore(result, x_shape, axes, keepdims):
    if keepdims:
        return anp.reshape(result, tuple(1 if i in axes else n for i, n in enumerate(x_shape)))
    return result


def sum(x, axis=None, keepdims=False):  # noqa: A001
    return anp.sum(x, axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    return anp.mean(x, axis=axis, keepdims=keepdims)


def var(x, axis=None, keepdims=False, ddof=0):
    flat, axes = _reduced_axes_last(x, axis)
    n = flat.shape[-1]
    centred = flat - anp.sum(flat, axis=-1, keepdims=True) / n
    return _restore(anp.sum(centred ** 2, axis=-1) / (n - ddof), x.shape, axes, keepdims)


def std(x, axis=None, keepdims=False, ddof=0):
    return anp.sqrt(var(x, axis=axis, keepdims=keepdims, ddof=ddof))


def prod(x, axis=None, keepdims=False):
    """A running product, one factor at a time: exact with zeros (no division by x)."""
    flat, axes = _reduced_axes_last(x, axis)
    result = flat[..., 0]
    for j in range(1, flat.shape[-1]):
        result = result * flat[..., j]
    return _restore(result, x.shape, axes, keepdims)


def max(x, axis=None, keepdims=False):  # noqa: A001
    return anp.max(x, axis=axis, keepdims=keepdims)


def min(x, axis=None, keepdims=False):  # noqa: A001
    return anp.min(x, axis=axis, keepdims=keepdims)


def logsumexp(x, axis=None, keepdims=False):
    return anp.log(anp.sum(anp.exp(x), axis=axis, keepdims=keepdims))


def cumsum(x, axis=None):
    if axis is None:
        return anp.cumsum(anp.ravel(x))
    return anp.cumsum(x, axis=axis)


def softmax(x, axis=-1):
    e = anp.exp(x)
    return e / anp.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    return x - anp.log(anp.sum(anp.exp(x), axis=axis, keepdims=True))


def layer_norm(x, weight, bias, eps=1e-5):
    """Ba et al. (2016) over the last axis, with the biased variance."""
    mu = anp.mean(x, axis=-1, keepdims=True)
    sigma2 = anp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / anp.sqrt(sigma2 + eps) * weight + bias


# ---- shape ---------------------------------------------------------------------------------------
def reshape(x, shape):
    return anp.reshape(x, shape)


def transpose(x, axes=None):
    return anp.transpose(x, axes)


def swapaxes(x, axis1, axis2):
    return anp.swapaxes(x, axis1, axis2)


def squeeze(x, axis=None):
    return anp.squeeze(x, axis)


def unsqueeze(x, axis):
    return anp.expand_dims(x, axis)


def broadcast_to(x, shape):
    return x + anp.zeros(shape)


def concatenate(*xs, axis=0):
    return anp.concatenate(xs, axis=axis)


def stack(*xs, axis=0):
    return anp.stack(xs, axis=axis)


def unbind(x, axis=0):
    """The slices x[..., i, ...] along ``axis``, one per index."""
    return tuple(x[(slice(None),) * (axis % x.ndim) + (i,)] for i in range(x.shape[axis]))


def split(x, sizes, axis=0):
    """Pieces of the given sizes along ``axis``."""
    pieces, start = [], 0
    for size in sizes:
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, start + size)
        pieces.append(x[tuple(index)])
        start += size
    return tuple(pieces)


def pad(x, pad_width, value=0.0):
    return anp.pad(x, pad_width, mode="constant", constant_values=value)


def flip(x, axis=None):
    axes = _axes(axis, x.ndim)
    return x[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))]


def roll(x, shift, axis=None):
    """Rolls as slices glued back together, one axis at a time."""
    if axis is None:
        return anp.reshape(roll(anp.ravel(x), shift, 0), x.shape)
    shifts = shift if isinstance(shift, tuple) else (shift,)
    axes = axis if isinstance(axis, tuple) else (axis,)
    for s, a in zip(shifts, axes):
        n = x.shape[a]
        s %= n
        if s:
            head = [slice(None)] * x.ndim
            tail = [slice(None)] * x.ndim
            head[a], tail[a] = slice(n - s, None), slice(0, n - s)
            x = anp.concatenate([x[tuple(head)], x[tuple(tail)]], axis=a)
    return x


def _triangle_mask(shape, k, upper):
    rows = np.arange(shape[-2])[:, None]
    cols = np.arange(shape[-1])[None, :]
    return (cols - rows >= k) if upper else (cols - rows <= k)


def tril(x, k=0):
    return x * _triangle_mask(x.shape, k, upper=False)


def triu(x, k=0):
    return x * _triangle_mask(x.shape, k, upper=True)


# ---- indexing ------------------------------------------------------------------------------------
def getitem(x, index):
    return x[index]


def _one_hot(index, n):
    return (np.asarray(index)[..., None] % n == np.arange(n)).astype(np.float64)


def take_along_axis(x, index, axis):
    """``out[..., i, ...] = x[..., index[..., i, ...], ...]`` as a sum against one-hot rows."""
    xm = anp.moveaxis(x, axis, -1)                         # (..., n)
    onehot = _one_hot(np.moveaxis(index, axis, -1), x.shape[axis])  # (..., k, n)
    picked = anp.sum(xm[..., None, :] * onehot, axis=-1)   # (..., k)
    return anp.moveaxis(picked, -1, axis)


def scatter_add(x, src, index, axis):
    """``out = x``, then ``out[..., index[..., i, ...], ...] += src[..., i, ...]`` as one-hot
    sums."""
    srcm = anp.moveaxis(src, axis, -1)                      # (..., k)
    onehot = _one_hot(np.moveaxis(index, axis, -1), x.shape[axis])  # (..., k, n)
    added = anp.sum(srcm[..., :, None] * onehot, axis=-2)  # (..., n)
    return x + anp.moveaxis(added, -1, axis)


def index_select(x, index, axis):
    """Rows picked one at a time and stacked."""
    rows = []
    for i in np.asarray(index).reshape(-1):
        at = [slice(None)] * x.ndim
        at[axis] = int(i)
        rows.append(x[tuple(at)])
    return anp.stack(rows, axis=axis)


def sort(x, axis=-1, descending=False):
    order = np.argsort(-getval(x) if descending else getval(x), axis=axis, kind="stable")
    return take_along_axis(x, order, axis)


def topk(x, k, axis=-1, largest=True):
    values = sort(x, axis=axis, descending=largest)
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, k)
    return values[tuple(index)]


# ---- einsum, written without einsum --------------------------------------------------------------
def einsum_matmul(a, b):        # "ij,jk->ik"
    return anp.dot(a, b)


def einsum_batched(a, b):       # "...ij,...jk->...ik"
    return anp.matmul(a, b)


def einsum_trace(x):            # "ii->"
    return anp.trace(x)


def einsum_diagonal(x):         # "ii->i"
    return anp.diag(x)


def einsum_outer(a, b):         # "i,j->ij"
    return anp.outer(a, b)


def einsum_row_sums(x):         # "ij->i"
    return anp.sum(x, axis=1)


def einsum_frobenius(a, b):     # "ij,ij->"
    return anp.sum(a * b)


def einsum_bilinear(x, w, y):   # "bi,ij,bj->b"
    return anp.sum(anp.dot(x, w) * y, axis=1)


def einsum_heads(q, k):         # "bhqd,bhkd->bhqk"
    return anp.matmul(q, anp.swapaxes(k, -1, -2))


# ---- more elementwise functions (issue 11) -------------------------------------------------------
def expm1(x):
    return anp.exp(x) - 1.0


def exp2(x):
    return anp.exp(x * math.log(2.0))


def log2(x):
    return anp.log(x) / math.log(2.0)


def log10(x):
    return anp.log(x) / math.log(10.0)


def tan(x):
    return anp.sin(x) / anp.cos(x)


def arcsin(x):
    return anp.arcsin(x)


def arccos(x):
    return anp.arccos(x)


def arctan(x):
    return anp.arctan(x)


def sinh(x):
    return 0.5 * (anp.exp(x) - anp.exp(-x))


def cosh(x):
    return 0.5 * (anp.exp(x) + anp.exp(-x))


def arcsinh(x):
    return anp.log(x + anp.sqrt(x * x + 1.0))


def arccosh(x):
    return anp.log(x + anp.sqrt(x * x - 1.0))


def arctanh(x):
    return 0.5 * anp.log((1.0 + x) / (1.0 - x))


def xlogy(x, y):
    return x * anp.log(y)


def logaddexp(a, b):
    return anp.log(anp.exp(a) + anp.exp(b))


def lerp(start, end, weight):
    return start + weight * (end - start)


def remainder(a, b):
    """a - b floor(a / b); the floor is a constant (autograd gives it no gradient)."""
    return a - b * np.floor(getval(a) / getval(b))


def fmod(a, b):
    return a - b * np.trunc(getval(a) / getval(b))


def rounded(x, how):
    """floor / ceil / round / trunc / sign: constant pieces, so 0 * x carries the zero gradient."""
    return getattr(np, how)(getval(x)) + 0.0 * x


# ---- more reductions and shapes (issue 11) -------------------------------------------------
def norm(x, p=2, axis=None, keepdims=False):
    axes = _axes(axis, x.ndim)
    if p == 2 or p == "fro":
        out = anp.sqrt(anp.sum(x * x, axis=axes, keepdims=True))
    elif p == math.inf:
        out = anp.max(anp.abs(x), axis=axes, keepdims=True)
    elif p == 1:
        out = anp.sum(anp.abs(x), axis=axes, keepdims=True)
    else:
        out = anp.sum(anp.abs(x) ** p, axis=axes, keepdims=True) ** (1.0 / p)
    return out if keepdims else anp.reshape(out, [n for i, n in enumerate(x.shape)
                                                  if i not in axes])


def _along(x, axis, step):
    """``step(previous, current)`` along ``axis``, one slice at a time, the results stacked."""
    axis %= x.ndim
    slices = [x[(slice(None),) * axis + (i,)] for i in range(x.shape[axis])]
    out = [slices[0]]
    for s in slices[1:]:
        out.append(step(out[-1], s))
    return anp.stack(out, axis=axis)


def cumprod(x, axis):
    return _along(x, axis, lambda previous, current: previous * current)


def cummax(x, axis):
    return _along(x, axis, lambda previous, current: 0.5 * (previous + current +
                                                            anp.abs(previous - current)))


def cummin(x, axis):
    return _along(x, axis, lambda previous, current: 0.5 * (previous + current -
                                                            anp.abs(previous - current)))


def logcumsumexp(x, axis):
    return anp.log(anp.cumsum(anp.exp(x), axis=axis))


def tile(x, reps):
    """Copies concatenated along one axis at a time (leading axes of size 1 added first)."""
    reps = (1,) * (x.ndim - len(reps)) + tuple(reps)
    x = anp.reshape(x, (1,) * (len(reps) - x.ndim) + x.shape)
    for axis, r in enumerate(reps):
        x = anp.concatenate([x] * r, axis=axis) if r else x[(slice(None),) * axis + (slice(0, 0),)]
    return x


def repeat_interleave(x, repeats, axis):
    pieces = []
    counts = [repeats] * x.shape[axis] if isinstance(repeats, int) else list(repeats)
    for i, count in enumerate(counts):
        pieces += [x[(slice(None),) * axis + (slice(i, i + 1),)]] * count
    if not pieces:
        return x[(slice(None),) * axis + (slice(0, 0),)]
    return anp.concatenate(pieces, axis=axis)


def diagonal(x, offset=0, axis1=0, axis2=1):
    """Entries (i, i + offset) of the (axis1, axis2) planes picked one at a time, stacked last."""
    planes = anp.moveaxis(x, (axis1, axis2), (-2, -1))
    rows, cols = planes.shape[-2:]
    picked = [planes[..., i, i + offset] for i in range(rows) if 0 <= i + offset < cols]
    if not picked:
        return anp.zeros(planes.shape[:-2] + (0,))
    return anp.stack(picked, axis=-1)


def diag(x, k=0):
    """A vector placed on diagonal k of a zero matrix, as a sum of one-hot outer products."""
    n = x.shape[0] + (k if k >= 0 else -k)
    out = 0.0 * anp.zeros((n, n))
    for i in range(x.shape[0]):
        row, col = (i, i + k) if k >= 0 else (i - k, i)
        basis = np.zeros((n, n))
        basis[row, col] = 1.0
        out = out + x[i] * basis
    return out


def masked_select(x, mask):
    shape = np.broadcast_shapes(x.shape, mask.shape)
    return (x * np.ones(shape))[np.broadcast_to(mask, shape)]


def unfold(x, axis, size, step):
    windows = []
    for start in range(0, x.shape[axis] - size + 1, step):
        window = x[(slice(None),) * axis + (slice(start, start + size),)]
        windows.append(anp.moveaxis(window, axis, -1))
    return anp.stack(windows, axis=axis)


def pad_mode(x, pad_width, mode):
    """Replicate / reflect / circular padding built from slices and concatenation."""
    for axis, (before, after) in enumerate(pad_width):
        def take(start, stop, step=1, x=x, axis=axis):
            return x[(slice(None),) * axis + (slice(start, stop, step),)]
        n = x.shape[axis]
        if mode == "replicate":
            left, right = [take(0, 1)] * before, [take(n - 1, n)] * after
        elif mode == "reflect":
            left = [take(i, i + 1) for i in range(before, 0, -1)]
            right = [take(n - 2 - i, n - 1 - i) for i in range(after)]
        else:
            left = [take(n - before, n)] if before else []
            right = [take(0, after)] if after else []
        x = anp.concatenate(left + [x] + right, axis=axis)
    return x


# ---- activations and losses of functional.py (issue 11) ------------------------------------
def silu(x):
    return x / (1.0 + anp.exp(-x))


def mish(x):
    return x * anp.tanh(anp.log(1.0 + anp.exp(x)))


def logsigmoid(x):
    return -anp.log(1.0 + anp.exp(-x))


def leaky_relu(x, negative_slope=0.01):
    return anp.where(x > 0, x, negative_slope * x)


def elu(x, alpha=1.0):
    return anp.where(x > 0, x, alpha * (anp.exp(x) - 1.0))


def selu(x):
    return 1.0507009873554804934193349852946 * elu(x, 1.6732632423543772848170429916717)


def hardtanh(x, low=-1.0, high=1.0):
    return anp.where(x < low, low, anp.where(x > high, high, x))


def relu6(x):
    return hardtanh(x, 0.0, 6.0)


def hardsigmoid(x):
    return relu6(x + 3.0) / 6.0


def hardswish(x):
    return x * hardsigmoid(x)


def softsign(x):
    return x / (1.0 + anp.abs(x))


def softplus_beta(x, beta, threshold):
    smooth = anp.log(1.0 + anp.exp(beta * x)) / beta
    return smooth if threshold is None else anp.where(beta * x > threshold, x, smooth)


def _halves(x, axis):
    n = x.shape[axis] // 2
    return (x[(slice(None),) * (axis % x.ndim) + (slice(0, n),)],
            x[(slice(None),) * (axis % x.ndim) + (slice(n, None),)])


def glu(x, axis=-1):
    a, b = _halves(x, axis)
    return a / (1.0 + anp.exp(-b))


def swiglu(x, axis=-1):
    a, b = _halves(x, axis)
    return silu(a) * b


def geglu(x, axis=-1):
    a, b = _halves(x, axis)
    return gelu(a) * b


def normalize(x, p=2.0, axis=1, eps=1e-12):
    n = norm(x, p, axis, keepdims=True)
    return x / anp.maximum(n, eps)


def binary_cross_entropy(p, t):
    return anp.mean(-(t * anp.log(p) + (1.0 - t) * anp.log(1.0 - p)))


def scatter_reduce(x, src, index, axis, reduce, include_self):
    """Each position's contributions gathered in a dict, reduced one position at a time."""
    contributions = {}
    for pos in np.ndindex(*index.shape):
        target = list(pos)
        target[axis] = int(index[pos]) % x.shape[axis]
        contributions.setdefault(tuple(target), []).append(src[pos])
    cells = []
    for pos in np.ndindex(*x.shape):
        values = contributions.get(pos)
        if values is None:
            cells.append(x[pos])
            continue
        values = ([x[pos]] if include_self else []) + values
        result = values[0]
        for v in values[1:]:
            if reduce in ("sum", "mean"):
                result = result + v
            elif reduce == "prod":
                result = result * v
            elif reduce == "amax":
                result = 0.5 * (result + v + anp.abs(result - v))
            else:
                result = 0.5 * (result + v - anp.abs(result - v))
        cells.append(result / len(values) if reduce == "mean" else result)
    return anp.reshape(anp.array(cells), x.shape)


def scatter(x, src, index, axis):
    """Writes one at a time (each position written at most once in the tests)."""
    return scatter_reduce(x, src, index, axis, "sum", include_self=False)
