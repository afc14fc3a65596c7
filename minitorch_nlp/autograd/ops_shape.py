"""Shape, indexing and reduction primitives.

Indexing follows NumPy (basic slicing, integer and boolean arrays). Its backward scatters the
gradient back with ``index_add``, which uses the backend's ``scatter_add_rows`` kernel for the
embedding-style case (one integer array on the first axis) and ``bincount`` over flat positions
otherwise, never the slow ``np.add.at``.
"""
from __future__ import annotations

import math

from ..backends.numpy_backend import sum_to_shape
from . import dtypes, function
from .function import Function


def _xp(ctx):
    return ctx.backend.xp


def normalize_axis(axis, ndim, op):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints, checked against
    ``ndim``."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"{op}: axis {a} is out of range for a tensor with {ndim} dimensions")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def _keepdims_shape(shape, axes):
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _reduced_shape(shape, axes, keepdims):
    return _keepdims_shape(shape, axes) if keepdims else tuple(
        n for i, n in enumerate(shape) if i not in axes)


# ---- reshaping -----------------------------------------------------------------------------------
class Reshape(Function):
    is_view = True

    @staticmethod
    def forward(ctx, x, *, shape):
        ctx.input_shape = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.input_shape)


class Transpose(Function):
    is_view = True

    @staticmethod
    def forward(ctx, x, *, axes):
        ctx.axes = axes
        return x.transpose(axes)

    @staticmethod
    def backward(ctx, grad):
        inverse = [0] * len(ctx.axes)
        for i, a in enumerate(ctx.axes):
            inverse[a] = i
        return grad.permute(*inverse)


class BroadcastTo(Function):
    is_view = True

    @staticmethod
    def forward(ctx, x, *, shape):
        ctx.input_shape = x.shape
        return _xp(ctx).broadcast_to(x, shape)

    @staticmethod
    def backward(ctx, grad):
        return sum_to(grad, ctx.input_shape)


class SumTo(Function):
    """Sum a broadcast result back to ``shape`` (the inverse of broadcasting)."""

    @staticmethod
    def forward(ctx, x, *, shape):
        ctx.input_shape = x.shape
        return sum_to_shape(x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.broadcast_to(ctx.input_shape)


def sum_to(x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return SumTo.apply(x, shape=shape)


class Concatenate(Function):
    @staticmethod
    def forward(ctx, *xs, axis):
        ctx.axis = axis
        ctx.sizes = [x.shape[axis] for x in xs]
        return _xp(ctx).concatenate(xs, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        grads, start = [], 0
        prefix = (slice(None),) * (ctx.axis % grad.ndim)
        for need, size in zip(ctx.needs_input_grad, ctx.sizes):
            grads.append(grad[prefix + (slice(start, start + size),)] if need else None)
            start += size
        return tuple(grads)


class Split(Function):
    """Pieces of ``sizes`` along ``axis`` (views). One node for all of them: the backward
    concatenates the pieces' gradients once, instead of each piece scattering into a zero array
    of the whole input."""

    is_view = True
    multi_output = True

    @staticmethod
    def forward(ctx, x, *, sizes, axis):
        ctx.axis, ctx.dtype = axis, x.dtype
        ctx.shapes = [x.shape[:axis] + (size,) + x.shape[axis + 1:] for size in sizes]
        bounds = [sum(sizes[:i + 1]) for i in range(len(sizes) - 1)]
        return tuple(_xp(ctx).split(x, bounds, axis=axis))

    @staticmethod
    def backward(ctx, grads):
        xp = _xp(ctx)
        pieces = [g if g is not None else function.Tensor._wrap(
            xp.zeros(shape, dtype=ctx.dtype), ctx.backend) for g, shape in zip(grads, ctx.shapes)]
        return Concatenate.apply(*pieces, axis=ctx.axis)


class Unbind(Function):
    """The slices ``x[i]`` along ``axis`` (views, the axis removed): the inverse of ``stack``, with
    one backward that stacks the slices' gradients."""

    is_view = True
    multi_output = True

    @staticmethod
    def forward(ctx, x, *, axis):
        ctx.axis, ctx.dtype = axis, x.dtype
        ctx.shape = x.shape[:axis] + x.shape[axis + 1:]
        prefix = (slice(None),) * axis
        return tuple(x[prefix + (i,)] for i in range(x.shape[axis]))

    @staticmethod
    def backward(ctx, grads):
        xp = _xp(ctx)
        slices = [g if g is not None else function.Tensor._wrap(
            xp.zeros(ctx.shape, dtype=ctx.dtype), ctx.backend) for g in grads]
        return Stack.apply(*slices, axis=ctx.axis)


class Stack(Function):
    @staticmethod
    def forward(ctx, *xs, axis):
        ctx.axis = axis
        return _xp(ctx).stack(xs, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        prefix = (slice(None),) * (ctx.axis % grad.ndim)
        return tuple(grad[prefix + (i,)] if need else None
                     for i, need in enumerate(ctx.needs_input_grad))


class Pad(Function):
    @staticmethod
    def forward(ctx, x, *, pad_width, value):
        ctx.inner = tuple(slice(before, before + n) for (before, _), n in zip(pad_width, x.shape))
        return _xp(ctx).pad(x, pad_width, mode="constant", constant_values=value)

    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.inner]


class Flip(Function):
    @staticmethod
    def forward(ctx, x, *, axis):
        ctx.axis = axis
        return _xp(ctx).flip(x, axis)

    @staticmethod
    def backward(ctx, grad):
        return grad.flip(ctx.axis)


class Roll(Function):
    @staticmethod
    def forward(ctx, x, *, shift, axis):
        ctx.shift, ctx.axis = shift, axis
        return _xp(ctx).roll(x, shift, axis)

    @staticmethod
    def backward(ctx, grad):
        shift = tuple(-s for s in ctx.shift) if isinstance(ctx.shift, tuple) else -ctx.shift
        return grad.roll(shift, ctx.axis)


class Triangle(Function):
    """``tril`` / ``triu`` of the last two axes (``upper`` picks which, ``k`` the diagonal)."""

    @staticmethod
    def forward(ctx, x, *, k, upper):
        ctx.k, ctx.upper = k, upper
        xp = _xp(ctx)
        return xp.triu(x, k) if upper else xp.tril(x, k)

    @staticmethod
    def backward(ctx, grad):
        return grad.triu(ctx.k) if ctx.upper else grad.tril(ctx.k)


class Cumsum(Function):
    @staticmethod
    def forward(ctx, x, *, axis):
        ctx.axis = axis
        return _xp(ctx).cumsum(x, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        return grad.flip(ctx.axis).cumsum(ctx.axis).flip(ctx.axis)


# ---- indexing ------------------------------------------------------------------------------------
def _is_int_array(i):
    return hasattr(i, "dtype") and i.dtype.kind in "iu"


def _rows_index(index):
    """The integer array if ``index`` selects whole rows by one integer array on axis 0, else
    None."""
    if _is_int_array(index):
        return index
    if isinstance(index, tuple) and index and _is_int_array(index[0]) and all(
            isinstance(i, slice) and i == slice(None) for i in index[1:]):
        return index[0]
    return None


def index_add_into_zeros(backend, shape, index, src):
    """A zero array of ``shape`` with ``src`` added at ``index`` (repeated positions add up)."""
    xp = backend.xp
    parts = index if isinstance(index, tuple) else (index,)
    if not any(_is_int_array(p) for p in parts):
        out = xp.zeros(shape, dtype=src.dtype)
        out[index] = src  # slices and boolean masks never select a position twice
        return out
    rows = _rows_index(index)
    if rows is not None and shape:
        if rows.size == 0:
            return xp.zeros(shape, dtype=src.dtype)
        if rows.min() < 0:  # the kernel takes row numbers literally: -1 must become shape[0] - 1
            rows = rows % shape[0]
        flat = backend.scatter_add_rows(rows, src.reshape(rows.shape + (-1,)), shape[0])
        return flat.reshape(shape)
    size = 1
    for n in shape:
        size *= n
    flat_positions = xp.broadcast_to(_flat_positions(xp, shape, parts), src.shape)
    summed = backend.scatter_add_rows(flat_positions, src.reshape(-1, 1), size)
    return summed.reshape(shape)


def _flat_positions(xp, shape, parts):
    """The flat offset of every element an index selects. An index made only of integers (one per
    axis) is turned into offsets arithmetically, in memory proportional to the selection; any
    other mix indexes an array of offsets the size of the input."""
    if len(parts) == len(shape) and all(_is_int_array(p) or isinstance(p, int) for p in parts):
        offsets, stride = 0, 1
        for part, n in zip(reversed(parts), reversed(shape)):
            offsets = offsets + (xp.asarray(part) % n) * stride
            stride *= n
        return offsets
    size = 1
    for n in shape:
        size *= n
    return xp.arange(size).reshape(shape)[parts if len(parts) > 1 else parts[0]]


class GetItem(Function):
    @staticmethod
    def forward(ctx, x, *, index):
        ctx.index, ctx.input_shape = index, x.shape
        try:
            return x[index]
        except IndexError as error:
            raise IndexError(f"indexing a tensor of shape {x.shape}: {error}") from None

    @staticmethod
    def backward(ctx, grad):
        return IndexAdd.apply(grad, index=ctx.index, shape=ctx.input_shape)


class IndexAdd(Function):
    """Zeros of ``shape`` with the input added at ``index``: the backward of ``GetItem``."""

    @staticmethod
    def forward(ctx, src, *, index, shape):
        ctx.index = index
        return index_add_into_zeros(ctx.backend, shape, index, src)

    @staticmethod
    def backward(ctx, grad):
        return GetItem.apply(grad, index=ctx.index)


class IndexPut(Function):
    """A copy of ``x`` with ``x[index] = value`` (the out-of-place form of ``__setitem__``)."""

    @staticmethod
    def forward(ctx, x, value, *, index):
        ctx.index = index
        out = x.copy()
        out[index] = value
        return out

    @staticmethod
    def backward(ctx, grad):
        grad_x = IndexPut.apply(grad, 0.0, index=ctx.index) if ctx.needs_input_grad[0] else None
        grad_value = grad[ctx.index] if ctx.needs_input_grad[1] else None
        return grad_x, grad_value


# ---- reductions ----------------------------------------------------------------------------------
class Sum(Function):
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.input_shape, ctx.axes, ctx.keepdims = x.shape, axes, keepdims
        return x.sum(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.keepdims:
            grad = grad.reshape(_keepdims_shape(ctx.input_shape, ctx.axes))
        return grad.broadcast_to(ctx.input_shape)


class Mean(Function):
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.input_shape, ctx.axes, ctx.keepdims = x.shape, axes, keepdims
        count = 1
        for a in axes:
            count *= x.shape[a]
        ctx.count = count
        x = x.astype(dtypes.floating(x.dtype), copy=False)
        if count == 0:  # NumPy's value (nan) without its "mean of empty slice" warning
            return _xp(ctx).full(_reduced_shape(x.shape, axes, keepdims), _xp(ctx).nan, x.dtype)
        return x.mean(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.keepdims:
            grad = grad.reshape(_keepdims_shape(ctx.input_shape, ctx.axes))
        # over an empty axis the input has no elements, so its gradient is empty too
        return (grad * (1.0 / max(ctx.count, 1))).broadcast_to(ctx.input_shape)


class MaxMin(Function):
    """``max`` / ``min`` over axes; the gradient is shared equally between tied extremes."""

    @staticmethod
    def forward(ctx, x, *, axes, keepdims, largest):
        ctx.input_shape, ctx.axes, ctx.keepdims = x.shape, axes, keepdims
        if x.size == 0:
            raise ValueError(f"{'max' if largest else 'min'}: the tensor of shape {x.shape} is "
                             "empty")
        out = x.max(axis=axes, keepdims=True) if largest else x.min(axis=axes, keepdims=True)
        winners = x == out
        ctx.share = winners / winners.sum(axis=axes, keepdims=True)
        return out if keepdims else out.reshape([n for i, n in enumerate(x.shape) if i not in axes])

    @staticmethod
    def backward(ctx, grad):
        if not ctx.keepdims:
            grad = grad.reshape(_keepdims_shape(ctx.input_shape, ctx.axes))
        return grad * ctx.share.astype(grad.dtype, copy=False)


class Prod(Function):
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.save_inputs(0)
        ctx.axes, ctx.keepdims = axes, keepdims
        ctx.has_zero = bool((x == 0).any())
        return _xp(ctx).prod(x, axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        keep = _keepdims_shape(x.shape, ctx.axes)
        if not ctx.keepdims:
            grad = grad.reshape(keep)
        if not ctx.has_zero:
            return grad * x.prod(axis=ctx.axes, keepdims=True) / x
        # with zeros present, divide nothing: product of all the other entries, one at a time
        moved = x.permute(*[i for i in range(x.ndim) if i not in ctx.axes], *ctx.axes)
        flat = moved.reshape(moved.shape[:x.ndim - len(ctx.axes)] + (-1,))
        n = flat.shape[-1]
        xp = _xp(ctx)
        others = [flat[..., xp.asarray([j for j in range(n) if j != i], dtype=xp.int64)].prod(
            axis=-1) for i in range(n)]
        others = _stack(others, axis=-1).reshape(moved.shape)
        inverse = [0] * x.ndim
        for i, a in enumerate([i for i in range(x.ndim) if i not in ctx.axes] + list(ctx.axes)):
            inverse[a] = i
        return grad * others.permute(*inverse)


def _stack(tensors, axis):
    return Stack.apply(*tensors, axis=axis)


class Norm2(Function):
    """sqrt(sum x^2) over ``axes``. Its gradient x / norm is 0 where the norm is 0 (PyTorch's
    choice of subgradient), where the composite sqrt(sum(x * x)) would give 0 * inf = nan."""

    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        x = x.astype(dtypes.floating(x.dtype), copy=False)
        ctx.save_inputs(0)
        ctx.save_output()
        ctx.axes, ctx.keepdims = axes, keepdims
        return _xp(ctx).sqrt((x * x).sum(axis=axes, keepdims=keepdims))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        keep = _keepdims_shape(x.shape, ctx.axes)
        norm = ctx.output.reshape(keep)
        safe = function.Tensor.masked_fill(norm, norm == 0, 1.0)
        return grad.reshape(keep) * x / safe


class Logsumexp(Function):
    @staticmethod
    def forward(ctx, x, *, axes, keepdims):
        ctx.save_inputs(0)
        ctx.save_output()
        ctx.axes, ctx.keepdims = axes, keepdims
        xp = _xp(ctx)
        if x.size == 0:  # log of an empty sum: -inf (nothing to shift by a maximum)
            with dtypes.quiet(xp, divide="ignore"):
                return xp.log(xp.exp(x).sum(axis=axes, keepdims=keepdims))
        m = x.max(axis=axes, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0).astype(x.dtype, copy=False)
        with dtypes.quiet(xp, divide="ignore"):  # an all -inf slice: log 0 = -inf
            out = xp.log(xp.exp(x - m).sum(axis=axes, keepdims=True)) + m
        return out if keepdims else out.reshape([n for i, n in enumerate(x.shape) if i not in axes])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        keep = _keepdims_shape(x.shape, ctx.axes)
        # d lse / dx = softmax(x) = exp(x - lse); a slice that is all -inf (lse = -inf, a fully
        # masked row) gets gradient 0, as its softmax is 0
        out = ctx.output.reshape(keep)
        return grad.reshape(keep) * (x - out.masked_fill(out == -math.inf, 0.0)).exp()
