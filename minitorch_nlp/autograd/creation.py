"""Making tensors (``tensor``, ``zeros``, ``rand`` ...) and the functions that take several
tensors or return several (``concatenate``, ``stack``, ``split``, ``sort``, ``topk`` ...)."""
from __future__ import annotations

import math

import numpy as np

from . import dtypes
from . import ops_shape as sh
from .random import rng
from .tensor import Tensor, _backend_of, _index_data


def tensor(data, dtype=None, requires_grad=False, backend=None):
    """A new tensor holding a copy of ``data`` (nested lists, scalars, arrays or a tensor)."""
    if isinstance(data, Tensor):
        data = data.numpy()
    if isinstance(data, np.ndarray):
        data = data.copy()
    return Tensor(data, dtype=dtype, requires_grad=requires_grad, backend=backend)


def as_tensor(data, dtype=None, backend=None):
    """``data`` itself if it already is a tensor of that dtype, else a tensor sharing its memory
    where the backend allows."""
    if isinstance(data, Tensor) and (dtype is None or data.dtype == dtypes.resolve(dtype)):
        return data
    return Tensor(data, dtype=dtype, backend=backend)


def _shape(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(n) for n in shape)


def _make(array_fn, shape, dtype, requires_grad, backend, default=None):
    be = _backend_of(backend)
    dtype = dtypes.resolve(dtype) or default or dtypes.get_default_dtype()
    return Tensor._wrap(array_fn(be.xp, shape, dtype), be).requires_grad_(requires_grad)


def zeros(*shape, dtype=None, requires_grad=False, backend=None):
    return _make(lambda xp, s, d: xp.zeros(s, dtype=d), _shape(shape), dtype, requires_grad,
                 backend)


def ones(*shape, dtype=None, requires_grad=False, backend=None):
    return _make(lambda xp, s, d: xp.ones(s, dtype=d), _shape(shape), dtype, requires_grad, backend)


def full(shape, fill_value, dtype=None, requires_grad=False, backend=None):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    default = dtypes.infer(fill_value)
    return _make(lambda xp, s, d: xp.full(s, fill_value, dtype=d), shape, dtype, requires_grad,
                 backend, default=default)


def empty(*shape, dtype=None, backend=None):
    return _make(lambda xp, s, d: xp.empty(s, dtype=d), _shape(shape), dtype, False, backend)


def arange(start, stop=None, step=1, dtype=None, backend=None):
    """Like ``numpy.arange``; integer arguments give int64, any float gives the default float."""
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        dtype = dtypes.int64 if all(isinstance(v, (int, np.integer)) for v in (start, stop, step)) \
            else dtypes.get_default_dtype()
    be = _backend_of(backend)
    return Tensor._wrap(be.xp.arange(start, stop, step, dtype=dtypes.resolve(dtype)), be)


def linspace(start, stop, num, dtype=None, backend=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (both included). An integer dtype
    truncates each value toward zero, as PyTorch does (NumPy rounds toward -inf)."""
    be = _backend_of(backend)
    dtype = dtypes.resolve(dtype) or dtypes.get_default_dtype()
    if dtype.kind == "b":
        raise TypeError("linspace: dtype bool is not a number type; give a float or integer dtype")
    if num < 0:
        raise ValueError(f"linspace: num must be >= 0, got {num}")
    values = be.xp.linspace(start, stop, num, dtype=np.float64)
    if dtype.kind != "f":
        values = be.xp.trunc(values)
    return Tensor._wrap(values.astype(dtype), be)


def eye(n, m=None, k=0, dtype=None, backend=None):
    be = _backend_of(backend)
    dtype = dtypes.resolve(dtype) or dtypes.get_default_dtype()
    return Tensor._wrap(be.xp.eye(n, m, k, dtype=dtype), be)


def _like(x, fn, dtype, **kw):
    return fn(x.shape, dtype=dtype or x.dtype, backend=x.backend, **kw)


def zeros_like(x, dtype=None, requires_grad=False):
    return _like(x, zeros, dtype, requires_grad=requires_grad)


def ones_like(x, dtype=None, requires_grad=False):
    return _like(x, ones, dtype, requires_grad=requires_grad)


def full_like(x, fill_value, dtype=None, requires_grad=False):
    return full(x.shape, fill_value, dtype=dtype or x.dtype, requires_grad=requires_grad,
                backend=x.backend)


def _random(draw, shape, dtype, requires_grad, backend, generator):
    be = _backend_of(backend)
    dtype = dtypes.resolve(dtype) or dtypes.get_default_dtype()
    array = draw(rng(generator), shape, dtype)
    return Tensor._wrap(be.asarray(array), be).requires_grad_(requires_grad)


def rand(*shape, dtype=None, requires_grad=False, generator=None, backend=None):
    """Uniform on [0, 1)."""
    return _random(lambda r, s, d: r.random(s, dtype=np.float64).astype(d), _shape(shape),
                   dtype, requires_grad, backend, generator)


def randn(*shape, dtype=None, requires_grad=False, generator=None, backend=None):
    """Standard normal."""
    return _random(lambda r, s, d: r.standard_normal(s, dtype=np.float64).astype(d),
                   _shape(shape), dtype, requires_grad, backend, generator)


def randint(low, high=None, size=(), dtype=None, generator=None, backend=None):
    """Integers in [low, high) (or [0, low) when ``high`` is omitted), int64 by default."""
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"randint: empty range [{low}, {high})")
    size = (size,) if isinstance(size, int) else tuple(size)
    be = _backend_of(backend)
    array = rng(generator).integers(low, high, size=size, dtype=np.int64)
    return Tensor._wrap(be.asarray(array, dtype=dtypes.resolve(dtype) or dtypes.int64), be)


def rand_like(x, dtype=None, generator=None):
    return rand(x.shape, dtype=dtype or x.dtype, generator=generator, backend=x.backend)


def randn_like(x, dtype=None, generator=None):
    return randn(x.shape, dtype=dtype or x.dtype, generator=generator, backend=x.backend)


def randint_like(x, low, high=None, generator=None):
    return randint(low, high, size=x.shape, dtype=x.dtype, generator=generator, backend=x.backend)


# ---- several tensors in, or several out --------------------------------------------------------
def _tensors(xs, op):
    xs = [x if isinstance(x, Tensor) else tensor(x) for x in xs]
    if not xs:
        raise ValueError(f"{op}: needs at least one tensor")
    return xs


def concatenate(tensors, axis=0, dim=None):
    axis = dim if dim is not None else axis
    xs = _tensors(tensors, "concatenate")
    (axis,) = sh.normalize_axis(axis, xs[0].ndim, "concatenate")
    first = xs[0].shape
    outside = first[:axis] + first[axis + 1:]
    for i, x in enumerate(xs):
        if len(x.shape) != len(first) or x.shape[:axis] + x.shape[axis + 1:] != outside:
            raise ValueError(f"concatenate: tensor {i} has shape {x.shape}, which does not match "
                             f"{xs[0].shape} outside axis {axis}")
    return sh.Concatenate.apply(*xs, axis=axis)


cat = concatenate


def stack(tensors, axis=0, dim=None):
    axis = dim if dim is not None else axis
    xs = _tensors(tensors, "stack")
    for i, x in enumerate(xs):
        if x.shape != xs[0].shape:
            raise ValueError(f"stack: tensor {i} has shape {x.shape}, tensor 0 has {xs[0].shape}")
    if not -xs[0].ndim - 1 <= axis <= xs[0].ndim:
        raise ValueError(f"stack: axis {axis} is out of range for {xs[0].ndim + 1} dimensions")
    return sh.Stack.apply(*xs, axis=axis % (xs[0].ndim + 1))


def split(x, split_size_or_sections, axis=0):
    """PyTorch's split: an int gives pieces of that size (the last may be smaller); a list gives
    the size of each piece."""
    (axis,) = sh.normalize_axis(axis, x.ndim, "split")
    n = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise ValueError("split: the piece size must be positive, got "
                             f"{split_size_or_sections}")
        sizes = [split_size_or_sections] * (n // split_size_or_sections)
        if n % split_size_or_sections:
            sizes.append(n % split_size_or_sections)
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} add up to {sum(sizes)}, but axis {axis} has "
                             f"{n}")
    if any(isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0
           for size in sizes):
        raise ValueError(f"split: piece sizes must be ints >= 0, got {sizes}")
    return sh.Split.apply(x, sizes=[int(size) for size in sizes], axis=axis)


def unbind(x, axis=0):
    """The slices of ``x`` along ``axis``, that axis removed (``stack``'s inverse): stepping
    through time one slice at a time without each slice's backward filling a zero array of the
    whole of ``x``."""
    (axis,) = sh.normalize_axis(axis, x.ndim, "unbind")
    return sh.Unbind.apply(x, axis=axis)


def chunk(x, chunks, axis=0):
    """``chunks`` pieces of equal size along ``axis`` (the last may be smaller)."""
    if chunks <= 0:
        raise ValueError(f"chunk: the number of chunks must be positive, got {chunks}")
    (axis,) = sh.normalize_axis(axis, x.ndim, "chunk")
    size = -(-x.shape[axis] // chunks)
    return split(x, max(size, 1), axis)


_PAD_SOURCES = {  # entry i of the padded axis (i < 0 before, i >= n after) copies entry ...
    "replicate": lambda i, n: np.clip(i, 0, n - 1),          # ... the nearest edge
    "reflect": lambda i, n: (n - 1) - np.abs((n - 1) - np.abs(i)),  # ... mirrored, edge once
    "circular": lambda i, n: i % n,                          # ... wrapped around
}


def pad(x, pad_width, value=0.0, mode="constant"):
    """Padding with ``pad_width`` as in NumPy: one (before, after) pair per axis, or one pair
    for every axis. ``mode`` is "constant" (``value``), "replicate" (the edge entry, any width),
    "reflect" (mirrored without repeating the edge, widths < the axis' size) or "circular"
    (wrapped, widths <= the axis' size), as PyTorch's ``F.pad``. A negative width crops that
    many entries from that side; cropping one side and padding the other pads the whole axis
    (mirrors and wraps are taken about its edges) and then crops, as PyTorch does. Copied
    entries send their gradient back to the entry they copy (summed)."""
    if mode != "constant" and mode not in _PAD_SOURCES:
        raise ValueError(f"pad: mode must be 'constant', 'replicate', 'reflect' or 'circular', "
                         f"got {mode!r}")
    if isinstance(pad_width, int):
        pad_width = [(pad_width, pad_width)] * x.ndim
    pad_width = [tuple(p) for p in pad_width]
    if len(pad_width) == 1 and x.ndim > 1:
        pad_width = pad_width * x.ndim
    if len(pad_width) != x.ndim or any(len(p) != 2 for p in pad_width):
        raise ValueError(f"pad: pad_width {pad_width} must give one (before, after) pair for each "
                         f"of the {x.ndim} axes")
    for axis, ((before, after), n) in enumerate(zip(pad_width, x.shape)):
        if min(before, 0) + min(after, 0) < -n or before + after < -n:
            raise ValueError(f"pad: pad_width {(before, after)} crops more than the {n} entries "
                             f"of axis {axis} (shape {x.shape})")
    if mode == "constant":
        crop = tuple(slice(-min(before, 0), n + min(after, 0))
                     for (before, after), n in zip(pad_width, x.shape))
        if any(min(p) < 0 for p in pad_width):
            x = x[crop]
        grow = tuple((max(before, 0), max(after, 0)) for before, after in pad_width)
        if not any(before or after for before, after in grow):
            return x
        return sh.Pad.apply(x, pad_width=grow, value=value)
    for axis, ((before, after), n) in enumerate(zip(pad_width, x.shape)):
        if not before and not after:
            continue
        limit = {"replicate": math.inf, "reflect": n - 1, "circular": n}[mode]
        if max(before, after) > limit or n == 0:
            raise ValueError(f"pad: mode {mode!r} needs widths <= {limit} on axis {axis} of size "
                             f"{n}, got {(before, after)}")
        sources = _PAD_SOURCES[mode](np.arange(-before, n + after), n)
        x = x.index_select(axis, Tensor._wrap(x.backend.asarray(sources), x.backend))
    return x


def _along_axis_index(x, index, axis):
    """The advanced index that selects ``index`` along ``axis`` and everything else in place."""
    xp = x.backend.xp
    idx = _index_data(index, x)
    if idx.ndim != x.ndim:
        raise ValueError(f"take_along_axis: the index has {idx.ndim} dimensions, the tensor "
                         f"{x.ndim} (shape {x.shape})")
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"take_along_axis: index out of range for axis {axis} of size {n}")
    grids = []
    for a in range(x.ndim):
        if a == axis:
            grids.append(idx % n if n else idx)
        else:
            shape = [1] * x.ndim
            shape[a] = idx.shape[a] if idx.shape[a] != 1 else x.shape[a]
            grids.append(xp.arange(shape[a]).reshape(shape))
    return tuple(xp.broadcast_arrays(*grids))


def take_along_axis(x, index, axis):
    """``numpy.take_along_axis`` / PyTorch's ``gather``; gradients scatter-add back."""
    (axis,) = sh.normalize_axis(axis, x.ndim, "take_along_axis")
    return x[_along_axis_index(x, index, axis)]


gather = take_along_axis


def _scatter_operands(x, axis, index, src, op):
    """``src`` as a tensor of the index's shape (a number fills it) and the positions in ``x``
    that ``index`` sends its entries to along ``axis``."""
    (axis,) = sh.normalize_axis(axis, x.ndim, op)
    index_shape = _index_data(index, x).shape
    if not isinstance(src, Tensor):
        src = full(index_shape, src, dtype=x.dtype, backend=x.backend) if np.ndim(src) == 0 \
            else tensor(src, dtype=x.dtype)
    if len(index_shape) != src.ndim or any(i > n for i, n in zip(index_shape, src.shape)):
        raise ValueError(f"{op}: src of shape {src.shape} must be at least as large as the "
                         f"index, {index_shape}, along every axis")
    if index_shape != src.shape:  # PyTorch's rule: only the index's extent of src is read
        src = src[tuple(slice(0, n) for n in index_shape)]
    return src, _along_axis_index(x, index, axis)


def scatter_add(x, axis, index, src):
    """A copy of ``x`` with ``src`` added at ``index`` along ``axis`` (repeated indices add up)."""
    src, positions = _scatter_operands(x, axis, index, src, "scatter_add")
    return x + sh.IndexAdd.apply(src, index=positions, shape=x.shape)


def scatter(x, axis, index, src):
    """A copy of ``x`` with ``src`` written at ``index`` along ``axis`` (PyTorch's ``scatter``;
    where an index repeats, the last write wins). ``src`` may be a number."""
    src, positions = _scatter_operands(x, axis, index, src, "scatter")
    return sh.IndexPut.apply(x, src, index=positions)


SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def scatter_reduce(x, axis, index, src, reduce, include_self=True):
    """``x`` with the ``src`` entries sent to each position by ``index`` (along ``axis``) reduced
    into it by ``reduce``: "sum", "prod", "mean", "amax" or "amin" (PyTorch's
    ``scatter_reduce``); positions no index reaches keep ``x``. With ``include_self=False`` the
    value of ``x`` at a reached position is left out of its reduction. The gradient of "amax" /
    "amin" is shared equally between tied winners, as PyTorch's."""
    if reduce not in SCATTER_REDUCTIONS:
        raise ValueError(f"scatter_reduce: reduce must be one of {SCATTER_REDUCTIONS}, got "
                         f"{reduce!r}")
    src, positions = _scatter_operands(x, axis, index, src, "scatter_reduce")
    xp = x.backend.xp
    hits = sh.index_add_into_zeros(x.backend, x.shape, positions, xp.ones(src.shape, x.dtype))
    reached = hits > 0
    left_out = Tensor._wrap(reached, x.backend)  # where x's own value drops out of the reduction
    if reduce in ("sum", "mean"):
        base = x if include_self else x.masked_fill(left_out, 0.0)
        total = base + sh.IndexAdd.apply(src, index=positions, shape=x.shape)
        if reduce == "sum":
            return total
        count = hits + (1 if include_self else xp.where(reached, 0, 1))
        return total / Tensor._wrap(count.astype(x.dtype), x.backend)
    if reduce == "prod":
        base = x if include_self else x.masked_fill(left_out, 1.0)
        return base * _scattered_product(x, src, positions)
    return _scattered_extreme(x, src, positions, reached, include_self, reduce == "amax")


def _scattered_product(x, src, positions):
    """Ones of x's shape times, at each position, every src entry sent there: the k-th entries
    sent to each position are multiplied in at step k (a product, never a division, so zeros in
    src get exact gradients)."""
    xp = x.backend.xp
    flat = np.ravel_multi_index(tuple(np.asarray(x.backend.to_numpy(p)) for p in positions),
                                x.shape).reshape(-1)
    rank = np.zeros(flat.shape, dtype=np.int64)
    seen = {}
    for i, f in enumerate(flat.tolist()):
        rank[i] = seen.get(f, 0)
        seen[f] = rank[i] + 1
    flat_src = src.reshape(-1)
    product = ones(x.shape, dtype=x.dtype, backend=x.backend)
    for k in range(int(rank.max()) + 1 if rank.size else 0):
        chosen = np.nonzero(rank == k)[0]
        at = np.unravel_index(flat[chosen], x.shape)
        step = sh.IndexPut.apply(ones(x.shape, dtype=x.dtype, backend=x.backend),
                                 flat_src[xp.asarray(chosen)],
                                 index=tuple(xp.asarray(a) for a in at))
        product = product * step
    return product


def _scattered_extreme(x, src, positions, reached, include_self, largest):
    """amax / amin: the winner's value, written as a weighted sum of the tied winners (weights
    1 / ties, constants) so that the gradient is shared equally between them. Positions no index
    reaches keep x (weight 1)."""
    xp = x.backend.xp
    pick = xp.maximum if largest else xp.minimum
    fill = -xp.inf if largest else xp.inf
    best = x.data.copy() if include_self else xp.where(reached, fill, x.data)
    pick.at(best, positions, src.data)
    x_wins = (x.data == best) if include_self else xp.zeros(x.shape, dtype=bool)
    src_wins = src.data == best[positions]
    ties = sh.index_add_into_zeros(x.backend, x.shape, positions, src_wins.astype(x.dtype)) + \
        x_wins.astype(x.dtype)
    share = xp.where(ties == 0, 0, 1 / xp.where(ties == 0, 1, ties)).astype(x.dtype)
    x_weight = xp.where(reached, x_wins * share, 1.0).astype(x.dtype)
    src_weight = (src_wins * share[positions]).astype(x.dtype)
    return x * Tensor._wrap(x_weight, x.backend) + sh.IndexAdd.apply(
        src * Tensor._wrap(src_weight, x.backend), index=positions, shape=x.shape)


def index_select(x, axis, index):
    return x.index_select(axis, index)


def one_hot(index, num_classes, dtype=None):
    """One-hot vectors (int64 unless ``dtype``); ``index`` values must lie in [0, num_classes)."""
    data = index.data if isinstance(index, Tensor) else np.asarray(index)
    be = index.backend if isinstance(index, Tensor) else _backend_of(None)
    if data.dtype.kind not in "iu":
        raise TypeError(f"one_hot: the index must be an integer tensor, got {data.dtype}")
    if data.size and (int(data.min()) < 0 or int(data.max()) >= num_classes):
        raise ValueError(f"one_hot: index values must lie in [0, {num_classes}); got min "
                         f"{int(data.min())}, max {int(data.max())}")
    dtype = dtypes.resolve(dtype) or dtypes.int64
    return Tensor._wrap(be.xp.eye(num_classes, dtype=dtype)[data], be)


def sort(x, axis=-1, descending=False, dim=None):
    """(values, indices) sorted along ``axis``; the values carry the gradient."""
    axis = dim if dim is not None else axis
    (axis,) = sh.normalize_axis(axis, x.ndim, "sort")
    xp = x.backend.xp
    order = xp.argsort(-x.data if descending else x.data, axis=axis, kind="stable")
    indices = Tensor._wrap(order.astype(np.int64), x.backend)
    return take_along_axis(x, indices, axis), indices


def argsort(x, axis=-1, descending=False):
    return sort(x, axis, descending)[1]


def topk(x, k, axis=-1, largest=True, sorted=True, dim=None):  # noqa: A002 - PyTorch's name
    """(values, indices) of the ``k`` largest (or smallest) entries along ``axis``."""
    axis = dim if dim is not None else axis
    (axis,) = sh.normalize_axis(axis, x.ndim, "topk")
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for axis {axis} of size {n}")
    xp = x.backend.xp
    keyed = -x.data if largest else x.data
    part = xp.argpartition(keyed, k - 1, axis=axis) if 0 < k < n else xp.argsort(keyed, axis=axis)
    part = xp.take(part, xp.arange(k), axis=axis)
    if sorted:
        order = xp.argsort(xp.take_along_axis(keyed, part, axis=axis), axis=axis, kind="stable")
        part = xp.take_along_axis(part, order, axis=axis)
    indices = Tensor._wrap(part.astype(np.int64), x.backend)
    return take_along_axis(x, indices, axis), indices


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids from 1-D tensors: ``indexing="ij"`` (PyTorch's default) gives shape
    (len(t0), len(t1), ...), ``"xy"`` swaps the first two (NumPy's default). A 0-d tensor counts
    as one entry (as PyTorch). Differentiable (each grid is a broadcast of its tensor)."""
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    xs = _tensors(tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
                  else tensors, "meshgrid")
    xs = [x.reshape(1) if x.ndim == 0 else x for x in xs]
    for i, x in enumerate(xs):
        if x.ndim != 1:
            raise ValueError(f"meshgrid: tensor {i} has shape {x.shape}; give 0-d or 1-D "
                             "tensors")
    shape = [x.shape[0] for x in xs]
    order = list(range(len(xs)))
    if indexing == "xy" and len(xs) > 1:
        shape[0], shape[1] = shape[1], shape[0]
        order[0], order[1] = 1, 0
    grids = []
    for i, x in enumerate(xs):
        view = [1] * len(xs)
        view[order.index(i)] = x.shape[0]
        grids.append(x.reshape(*view).broadcast_to(*shape))
    return tuple(grids)
