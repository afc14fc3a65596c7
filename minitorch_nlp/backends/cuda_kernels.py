"""GPU kernels for the CuPy backend, written with ``numba.cuda``.

Every kernel has a launcher (``softmax(x, axis)``, ``attention(q, k, v, ...)`` ...) that takes
device arrays, allocates its outputs with the inputs' array module, sizes the grid and returns
device arrays. On a GPU the arrays are CuPy arrays, which the kernels read through
``__cuda_array_interface__``. Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before
Python starts) the same launchers take NumPy arrays and run the kernels on the CPU: that is how CI
tests them against the NumPy backend without a GPU.

Two shapes of kernel:

* row kernels (softmax, log-softmax, layer norm, cross-entropy and the masked softmax of
  attention): one block of threads per row. The threads stride along the row, so that neighbours
  read neighbouring elements (one memory transaction serves a whole warp), and combine their
  partial maxima and sums in shared memory (``_block_max`` / ``_block_sum``);
* elementwise kernels (GELU, bias + GELU, scatter-add, the low-precision products): one thread per
  output element.

Row sums are accumulated in float64. The kernels follow the NumPy backend's semantics exactly:
softmax is shifted by the row maximum, a row whose entries are all ``-inf`` (or an attention query
whose keys are all masked) gives 0 and a zero gradient. Each kernel is compiled on first use for
the argument types it gets, and cached on disk by numba.

Full attention leaves its three matrix products to the array module (cuBLAS on a GPU), blocks of
(batch, head) pairs at a time, with the masked softmax kernel in between; it keeps only the
log-sum-exp of each query row for backward (O(n) saved state instead of the n x n probabilities)
and recomputes the scores there, as FlashAttention does. Banded attention is a kernel of its own,
one thread per query (or key) over the band, in O(n * window) work and memory; masks are applied
inside the kernels, never materialised.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from . import erf as erf_coefficients
from .numpy_backend import sum_to_shape

THREADS_PER_BLOCK = 128  # also the most threads a row kernel's block has
TILE = 16  # threads per block side of the 2-D (matrix product) kernels
# Full attention computes the scores of this many elements at a time (64 MB in float32): large
# enough for cuBLAS to fill the GPU (a block of pairs is one batched product), small enough that
# long sequences do not hold n x n scores for every (batch, head) pair at once.
ATTENTION_BLOCK = 1 << 24

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_TANH_C = 0.044715
# erf.py's float64 polynomials (the kernels compute in float64): the same erf as the NumPy and
# numba backends, rather than each GPU library's own
_ERF = erf_coefficients.FLOAT64
_ERF_SMALL, _ERF_TAIL = tuple(float(c) for c in _ERF.small), tuple(float(c) for c in _ERF.tail)
_ERF_SPLIT, _ERF_CENTRE, _ERF_END = float(_ERF.split), float(_ERF.centre), float(_ERF.end)


# ---- launching -----------------------------------------------------------------------------------
def _xp(array):
    """The array module of ``array``: NumPy under the simulator, CuPy on a GPU."""
    if isinstance(array, np.ndarray):
        return np
    import cupy

    return cupy


def _launch(kernel, grid, block, args):
    # The simulator copies every NumPy argument back after the launch, which a read-only view
    # (np.broadcast_to) refuses; kernels never write their inputs, so a copy is as good.
    args = [a.copy() if isinstance(a, np.ndarray) and not a.flags.writeable else a for a in args]
    kernel[grid, block](*args)


def _run(kernel, n, *args):
    """Launch ``kernel`` with one thread per work item, ``n`` items (nothing to do when 0)."""
    if n > 0:
        threads = min(THREADS_PER_BLOCK, n)
        _launch(kernel, (n + threads - 1) // threads, threads, args)


def _run_rows(kernel, rows, length, *args):
    """Launch a row kernel: one block per row, with the smallest power of two of threads (the
    reductions halve it) that covers ``length``, at most ``THREADS_PER_BLOCK``."""
    if rows > 0:
        threads = min(THREADS_PER_BLOCK, 1 << max(0, length - 1).bit_length())
        _launch(kernel, rows, threads, args)


def _run_2d(kernel, rows, cols, *args):
    """Launch ``kernel`` with one thread per element of a ``rows`` x ``cols`` output."""
    if rows > 0 and cols > 0:
        block = (min(TILE, rows), min(TILE, cols))
        grid = ((rows + block[0] - 1) // block[0], (cols + block[1] - 1) // block[1])
        _launch(kernel, grid, block, args)


def _as_rows(x, axis=-1):
    """``x`` with ``axis`` moved last, as a C-contiguous (rows, n) array, and a function that puts
    a (rows, n) result back into ``x``'s shape and axis order."""
    xp = _xp(x)
    moved = xp.moveaxis(x, axis, -1)
    rows = xp.ascontiguousarray(moved).reshape(math.prod(moved.shape[:-1]), moved.shape[-1])
    return rows, lambda result: xp.moveaxis(result.reshape(moved.shape), -1, axis)


# ---- device functions --------------------------------------------------------------------------
@cuda.jit(device=True)
def _block_sum(shared, value):
    """The sum of ``value`` over the threads of the block, returned to every thread. ``shared``
    is the block's (THREADS_PER_BLOCK,) float64 scratch array; blockDim.x is a power of two."""
    t = cuda.threadIdx.x
    shared[t] = value
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half:
            shared[t] += shared[t + half]
        cuda.syncthreads()
        half //= 2
    total = shared[0]
    cuda.syncthreads()  # every thread has read it before ``shared`` is used again
    return total


@cuda.jit(device=True)
def _block_max(shared, value):
    """The maximum of ``value`` over the threads of the block, as ``_block_sum``."""
    t = cuda.threadIdx.x
    shared[t] = value
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half and shared[t + half] > shared[t]:
            shared[t] = shared[t + half]
        cuda.syncthreads()
        half //= 2
    top = shared[0]
    cuda.syncthreads()
    return top


@cuda.jit(device=True)
def _row_shift(x, r, shared):
    """The maximum of row ``r`` (0 when it is not finite: a row of -inf shifts by 0)."""
    m = -math.inf
    for c in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        if x[r, c] > m:
            m = x[r, c]
    m = _block_max(shared, m)
    if math.isinf(m):
        return 0.0
    return m


@cuda.jit(device=True)
def _row_log_sum_exp(x, r, shared):
    """log(sum(exp(x[r]))), computed shifted by the row maximum; -inf rows give their shift."""
    shift = _row_shift(x, r, shared)
    part = 0.0
    for c in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        part += math.exp(x[r, c] - shift)
    total = _block_sum(shared, part)
    if total == 0.0:
        return shift
    return shift + math.log(total)


@cuda.jit(device=True)
def _polynomial(coefficients, u):
    result = coefficients[len(coefficients) - 1]
    for i in range(len(coefficients) - 2, -1, -1):
        result = result * u + coefficients[i]
    return result


@cuda.jit(device=True)
def _erf(z):
    """erf(z) in float64 by ``erf.py``'s two forms: z P(z^2) near 0, 1 - exp(-z^2) Q(|z| - c)
    beyond (|z| clamped where erf rounds to 1, which also sends +-inf to +-1; NaN stays NaN)."""
    az = abs(z)
    if az < _ERF_SPLIT:
        return z * _polynomial(_ERF_SMALL, z * z)
    u = _ERF_END if az > _ERF_END else az  # NaN compares False and stays NaN
    return math.copysign(1.0 - math.exp(-u * u) * _polynomial(_ERF_TAIL, u - _ERF_CENTRE), z)


@cuda.jit(device=True)
def _gelu(v, use_tanh):
    if use_tanh:
        inner = _SQRT_2_OVER_PI * (v + _GELU_TANH_C * v * v * v)
        return 0.5 * v * (1.0 + math.tanh(inner))
    return 0.5 * v * (1.0 + _erf(v * _SQRT_HALF))


@cuda.jit(device=True)
def _gelu_grad(v, use_tanh):
    if use_tanh:
        t = math.tanh(_SQRT_2_OVER_PI * (v + _GELU_TANH_C * v * v * v))
        du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_TANH_C * v * v)
        return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du
    # d/dx x Phi(x) = Phi(x) + x phi(x)
    return 0.5 * (1.0 + _erf(v * _SQRT_HALF)) + v * _INV_SQRT_2PI * math.exp(-0.5 * v * v)


@cuda.jit(device=True)
def _dot(a, b, bh, i, j):
    """a[bh, i] . b[bh, j] over the last axis."""
    s = 0.0
    for d in range(a.shape[2]):
        s += a[bh, i, d] * b[bh, j, d]
    return s


@cuda.jit(device=True)
def _key(i, o, q_len, k_len, dilation, mask, has_mask, b):
    """The key that query ``i`` sees at band offset ``o``, or -1 when it is outside the sequence
    or masked. Queries are the last ``q_len`` of ``k_len`` positions (as with a key/value cache)."""
    j = i + (k_len - q_len) + o * dilation
    if j < 0 or j >= k_len:
        return -1
    if has_mask and not mask[b, j]:
        return -1
    return j


# ---- softmax and log-softmax over the last axis of (rows, n): one block per row -----------------
@cuda.jit(cache=True)
def _softmax_kernel(x, y):
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    r = cuda.blockIdx.x
    shift = _row_shift(x, r, shared)
    part = 0.0
    for c in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        e = math.exp(x[r, c] - shift)
        y[r, c] = e
        part += e
    total = _block_sum(shared, part)
    if total == 0.0:  # a row that was all -inf gives zeros, not NaN
        total = 1.0
    for c in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        y[r, c] /= total


@cuda.jit(cache=True)
def _softmax_backward_kernel(y, g, out):
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    r = cuda.blockIdx.x
    part = 0.0
    for c in range(cuda.threadIdx.x, y.shape[1], cuda.blockDim.x):
        part += g[r, c] * y[r, c]
    dot = _block_sum(shared, part)
    for c in range(cuda.threadIdx.x, y.shape[1], cuda.blockDim.x):
        out[r, c] = (g[r, c] - dot) * y[r, c]


@cuda.jit(cache=True)
def _log_softmax_kernel(x, y):
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    r = cuda.blockIdx.x
    lse = _row_log_sum_exp(x, r, shared)
    for c in range(cuda.threadIdx.x, x.shape[1], cuda.blockDim.x):
        y[r, c] = x[r, c] - lse


@cuda.jit(cache=True)
def _log_softmax_backward_kernel(y, g, out):
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    r = cuda.blockIdx.x
    part = 0.0
    for c in range(cuda.threadIdx.x, y.shape[1], cuda.blockDim.x):
        part += g[r, c]
    total = _block_sum(shared, part)
    for c in range(cuda.threadIdx.x, y.shape[1], cuda.blockDim.x):
        out[r, c] = g[r, c] - math.exp(y[r, c]) * total


def _rowwise(kernel, axis, *arrays):
    """Run a row kernel over ``axis`` of equally shaped ``arrays``; returns the result's array."""
    rows, restore = _as_rows(arrays[0], axis)
    others = [_as_rows(a, axis)[0] for a in arrays[1:]]
    out = _xp(rows).empty_like(rows)
    _run_rows(kernel, rows.shape[0], rows.shape[1], rows, *others, out)
    return restore(out)


def softmax(x, axis):
    return _rowwise(_softmax_kernel, axis, x)


def softmax_backward(y, grad, axis):
    return _rowwise(_softmax_backward_kernel, axis, y, grad)


def log_softmax(x, axis):
    return _rowwise(_log_softmax_kernel, axis, x)


def log_softmax_backward(y, grad, axis):
    return _rowwise(_log_softmax_backward_kernel, axis, y, grad)


# ---- layer norm over the last axis: one block per row -------------------------------------------
@cuda.jit(cache=True)
def _layer_norm_kernel(x, weight, bias, eps, y, xhat, rstd):
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    r = cuda.blockIdx.x
    n = x.shape[1]
    part = 0.0
    for c in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        part += x[r, c]
    mean = _block_sum(shared, part) / n
    part = 0.0
    for c in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        d = x[r, c] - mean
        part += d * d
    inv = 1.0 / math.sqrt(_block_sum(shared, part) / n + eps)
    if cuda.threadIdx.x == 0:
        rstd[r] = inv
    for c in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        h = (x[r, c] - mean) * inv
        xhat[r, c] = h
        y[r, c] = h * weight[c] + bias[c]


@cuda.jit(cache=True)
def _layer_norm_backward_kernel(g, xhat, rstd, weight, dx):
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    r = cuda.blockIdx.x
    n = g.shape[1]
    part_d = 0.0
    part_d_xhat = 0.0
    for c in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        d = g[r, c] * weight[c]
        part_d += d
        part_d_xhat += d * xhat[r, c]
    mean_d = _block_sum(shared, part_d) / n
    mean_d_xhat = _block_sum(shared, part_d_xhat) / n
    for c in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        dx[r, c] = (g[r, c] * weight[c] - mean_d - xhat[r, c] * mean_d_xhat) * rstd[r]


@cuda.jit(cache=True)
def _layer_norm_params_kernel(g, xhat, dweight, dbias):
    c = cuda.grid(1)
    if c >= g.shape[1]:
        return
    sum_w = 0.0
    sum_b = 0.0
    for r in range(g.shape[0]):
        sum_w += g[r, c] * xhat[r, c]
        sum_b += g[r, c]
    dweight[c] = sum_w
    dbias[c] = sum_b


def layer_norm(x, weight, bias, eps):
    """(y, xhat, rstd) as NumPyBackend.layer_norm: rstd has shape x.shape[:-1] + (1,)."""
    xp = _xp(x)
    rows, restore = _as_rows(x)
    n = rows.shape[1]
    weight = xp.ones(n, dtype=x.dtype) if weight is None else xp.ascontiguousarray(weight)
    bias = xp.zeros(n, dtype=x.dtype) if bias is None else xp.ascontiguousarray(bias)
    y, xhat = xp.empty_like(rows), xp.empty_like(rows)
    rstd = xp.empty(rows.shape[0], dtype=x.dtype)
    _run_rows(_layer_norm_kernel, rows.shape[0], n, rows, weight, bias, float(eps), y, xhat,
              rstd)
    return restore(y), restore(xhat), rstd.reshape(x.shape[:-1] + (1,))


def layer_norm_backward(grad, xhat, rstd, weight):
    """(dx, dweight or None, dbias) as NumPyBackend.layer_norm_backward."""
    xp = _xp(grad)
    g, restore = _as_rows(grad)
    h = _as_rows(xhat)[0]
    n = g.shape[1]
    scale = xp.ones(n, dtype=grad.dtype) if weight is None else xp.ascontiguousarray(weight)
    dx = xp.empty_like(g)
    _run_rows(_layer_norm_backward_kernel, g.shape[0], n, g, h,
              xp.ascontiguousarray(rstd).reshape(-1), scale, dx)
    dweight, dbias = xp.empty(n, dtype=grad.dtype), xp.empty(n, dtype=grad.dtype)
    _run(_layer_norm_params_kernel, n, g, h, dweight, dbias)
    return restore(dx), (dweight if weight is not None else None), dbias


# ---- GELU ----------------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _gelu_kernel(x, out, use_tanh):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = _gelu(x[i], use_tanh)


@cuda.jit(cache=True)
def _gelu_backward_kernel(x, g, out, use_tanh):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = g[i] * _gelu_grad(x[i], use_tanh)


@cuda.jit(cache=True)
def _bias_gelu_kernel(x, bias, out, use_tanh):
    i = cuda.grid(1)
    n = bias.shape[0]
    if i < x.shape[0] * n:
        r, c = i // n, i % n
        out[r, c] = _gelu(x[r, c] + bias[c], use_tanh)


@cuda.jit(cache=True)
def _bias_gelu_backward_kernel(x, bias, g, out, use_tanh):
    i = cuda.grid(1)
    n = bias.shape[0]
    if i < x.shape[0] * n:
        r, c = i // n, i % n
        out[r, c] = g[r, c] * _gelu_grad(x[r, c] + bias[c], use_tanh)


def _flat(x):
    return _xp(x).ascontiguousarray(x).reshape(-1)


def gelu(x, approximate):
    """x Phi(x); ``approximate == "tanh"`` uses the tanh approximation, anything else erf."""
    flat = _flat(x)
    out = _xp(x).empty_like(flat)
    _run(_gelu_kernel, flat.shape[0], flat, out, approximate == "tanh")
    return out.reshape(x.shape)


def gelu_backward(x, grad, approximate):
    flat = _flat(x)
    out = _xp(x).empty_like(flat)
    _run(_gelu_backward_kernel, flat.shape[0], flat, _flat(grad), out, approximate == "tanh")
    return out.reshape(x.shape)


def _bias_along_last_axis(x, bias):
    return x.ndim >= 1 and bias.ndim == 1 and bias.shape[0] == x.shape[-1]


def bias_gelu(x, bias, approximate):
    """gelu(x + bias) in one pass when ``bias`` runs along the last axis (else via gelu)."""
    if not _bias_along_last_axis(x, bias):
        return gelu(x + bias, approximate)
    rows, restore = _as_rows(x)
    out = _xp(x).empty_like(rows)
    _run(_bias_gelu_kernel, rows.size, rows, _xp(x).ascontiguousarray(bias), out,
         approximate == "tanh")
    return restore(out)


def bias_gelu_backward(x, bias, grad, approximate):
    if not _bias_along_last_axis(x, bias):
        return gelu_backward(x + bias, grad, approximate)
    rows, restore = _as_rows(x)
    out = _xp(x).empty_like(rows)
    _run(_bias_gelu_backward_kernel, rows.size, rows, _xp(x).ascontiguousarray(bias),
         _as_rows(grad)[0], out, approximate == "tanh")
    return restore(out)


# ---- scatter-add of rows (embedding gradients) --------------------------------------------------
@cuda.jit(cache=True)
def _scatter_add_rows_kernel(index, src, out):
    i = cuda.grid(1)
    n = src.shape[1]
    if i < src.shape[0] * n:
        k, c = i // n, i % n
        row = index[k]
        if row < 0:
            row += out.shape[0]
        cuda.atomic.add(out, (row, c), src[k, c])


def scatter_add_rows(index, src, num_rows):
    """``out[index[k]] += src[k]`` for rows ``k``; duplicates add up (atomically)."""
    xp = _xp(src)
    flat = xp.ascontiguousarray(index).reshape(-1)
    rows = xp.ascontiguousarray(src).reshape(flat.shape[0], math.prod(src.shape[index.ndim:]))
    out = xp.zeros((num_rows, rows.shape[1]), dtype=src.dtype)
    _run(_scatter_add_rows_kernel, rows.size, flat, rows, out)
    return out


# ---- cross-entropy from logits (N, C) and targets (N,): one block per row ------------------------
@cuda.jit(cache=True)
def _cross_entropy_kernel(logits, target, ignore_index, smoothing, log_probs, loss):
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    r = cuda.blockIdx.x
    n = logits.shape[1]
    lse = _row_log_sum_exp(logits, r, shared)
    part = 0.0
    for c in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        log_probs[r, c] = logits[r, c] - lse
        part += log_probs[r, c]
    total = _block_sum(shared, part)
    if cuda.threadIdx.x == 0:
        t = target[r]
        if t == ignore_index:
            loss[r] = 0.0
        elif smoothing == 0.0:
            loss[r] = -(logits[r, t] - lse)
        else:
            loss[r] = -(1.0 - smoothing) * (logits[r, t] - lse) - smoothing * total / n


@cuda.jit(cache=True)
def _cross_entropy_backward_kernel(log_probs, target, grad_rows, ignore_index, smoothing, out):
    r = cuda.blockIdx.x
    n = log_probs.shape[1]
    t = target[r]
    g = 0.0
    if t != ignore_index:
        g = grad_rows[r]
    for c in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        d = math.exp(log_probs[r, c]) - smoothing / n
        if c == t:
            d -= 1.0 - smoothing
        out[r, c] = d * g


def cross_entropy(logits, target, ignore_index, label_smoothing):
    """(per-row loss (N,), log-probabilities (N, C)) as NumPyBackend.cross_entropy."""
    xp = _xp(logits)
    logits = xp.ascontiguousarray(logits)
    log_probs = xp.empty_like(logits)
    loss = xp.empty(logits.shape[0], dtype=logits.dtype)
    _run_rows(_cross_entropy_kernel, logits.shape[0], logits.shape[1], logits,
              xp.ascontiguousarray(target), int(ignore_index), float(label_smoothing), log_probs,
              loss)
    return loss, log_probs


def cross_entropy_backward(log_probs, target, grad_rows, ignore_index, label_smoothing):
    xp = _xp(log_probs)
    out = xp.empty_like(log_probs)
    _run_rows(_cross_entropy_backward_kernel, log_probs.shape[0], log_probs.shape[1],
              xp.ascontiguousarray(log_probs), xp.ascontiguousarray(target),
              xp.ascontiguousarray(grad_rows), int(ignore_index), float(label_smoothing), out)
    return out


# ---- full attention: the masked softmax between the matrix products, one block per query row ----
@cuda.jit(device=True)
def _query(row, q_len, k_len, causal, first_pair, heads):
    """(pair in the block, query, batch, end) of a row of a (pairs, q_len, k_len) score block:
    keys j < end are causally allowed (queries are the last q_len of k_len positions)."""
    h, i = row // q_len, row % q_len
    end = k_len
    if causal and i + k_len - q_len + 1 < k_len:
        end = i + k_len - q_len + 1
    return h, i, (first_pair + h) // heads, end


@cuda.jit(device=True)
def _add_bias(scores, bias, has_bias, h, i, b, end, first_pair, heads):
    """scores[h, i, :end] += the bias row of query i of pair first_pair + h (batch b), when
    ``has_bias``; ``bias`` is broadcast to (batch, heads, q_len, k_len)."""
    if has_bias:
        head = (first_pair + h) % heads
        for j in range(cuda.threadIdx.x, end, cuda.blockDim.x):
            scores[h, i, j] += bias[b, head, i, j]


@cuda.jit(cache=True)
def _attention_softmax_kernel(scores, mask, has_mask, bias, has_bias, causal, heads, first_pair,
                              lse):
    """In place: a block of scores (scale q) k^T of the pairs from ``first_pair`` becomes the
    masked softmax of the scores plus the bias; ``lse`` (all pairs, q_len) gets each row's
    log-sum-exp, inf for a query with no allowed key (whose probabilities are then 0)."""
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    q_len, k_len = scores.shape[1], scores.shape[2]
    h, i, b, end = _query(cuda.blockIdx.x, q_len, k_len, causal, first_pair, heads)
    _add_bias(scores, bias, has_bias, h, i, b, end, first_pair, heads)  # each thread its own j
    m = -math.inf
    for j in range(cuda.threadIdx.x, end, cuda.blockDim.x):
        if (not has_mask or mask[b, j]) and scores[h, i, j] > m:
            m = scores[h, i, j]
    m = _block_max(shared, m)
    part = 0.0
    for j in range(cuda.threadIdx.x, k_len, cuda.blockDim.x):
        e = 0.0
        if j < end and (not has_mask or mask[b, j]) and m != -math.inf:
            e = math.exp(scores[h, i, j] - m)
        scores[h, i, j] = e
        part += e
    total = _block_sum(shared, part)
    if total == 0.0:
        total = 1.0
    for j in range(cuda.threadIdx.x, k_len, cuda.blockDim.x):
        scores[h, i, j] /= total
    if cuda.threadIdx.x == 0:
        lse[first_pair + h, i] = math.inf if m == -math.inf else m + math.log(total)


@cuda.jit(cache=True)
def _attention_softmax_backward_kernel(scores, dprobs, mask, has_mask, bias, has_bias, causal,
                                       heads, first_pair, lse):
    """In place, on a block laid out as in ``_attention_softmax_kernel``: the recomputed scores
    (plus the bias) become the probabilities exp(s - lse) (0 where masked) and dprobs = g v^T
    becomes dscores = p (dprobs - sum(p dprobs)), the gradient of the scaled scores (and of the
    bias)."""
    shared = cuda.shared.array(THREADS_PER_BLOCK, np.float64)
    q_len, k_len = scores.shape[1], scores.shape[2]
    h, i, b, end = _query(cuda.blockIdx.x, q_len, k_len, causal, first_pair, heads)
    _add_bias(scores, bias, has_bias, h, i, b, end, first_pair, heads)
    row_lse = lse[first_pair + h, i]
    part = 0.0
    for j in range(cuda.threadIdx.x, k_len, cuda.blockDim.x):
        p = 0.0
        if j < end and (not has_mask or mask[b, j]):
            p = math.exp(scores[h, i, j] - row_lse)
        scores[h, i, j] = p
        part += p * dprobs[h, i, j]
    delta = _block_sum(shared, part)
    for j in range(cuda.threadIdx.x, k_len, cuda.blockDim.x):
        dprobs[h, i, j] = scores[h, i, j] * (dprobs[h, i, j] - delta)


# ---- banded attention on (B*H, T, D) arrays: one thread per query (or key) over the band ---------
@cuda.jit(cache=True)
def _attention_kernel(q, k, v, mask, has_mask, heads, scale, low, high, dilation, out, lse):
    idx = cuda.grid(1)
    q_len, k_len = q.shape[1], k.shape[1]
    if idx >= q.shape[0] * q_len:
        return
    bh, i = idx // q_len, idx % q_len
    b = bh // heads
    for d in range(v.shape[2]):
        out[bh, i, d] = 0.0
    m = -math.inf
    for o in range(low, high + 1):
        j = _key(i, o, q_len, k_len, dilation, mask, has_mask, b)
        if j >= 0:
            s = _dot(q, k, bh, i, j) * scale
            if s > m:
                m = s
    if m == -math.inf:  # every key masked: output 0; lse = inf makes every probability 0
        lse[bh, i] = math.inf
        return
    total = 0.0
    for o in range(low, high + 1):
        j = _key(i, o, q_len, k_len, dilation, mask, has_mask, b)
        if j >= 0:
            p = math.exp(_dot(q, k, bh, i, j) * scale - m)
            total += p
            for d in range(v.shape[2]):
                out[bh, i, d] += p * v[bh, j, d]
    for d in range(v.shape[2]):
        out[bh, i, d] /= total
    lse[bh, i] = m + math.log(total)


@cuda.jit(cache=True)
def _attention_backward_queries_kernel(q, k, v, g, mask, has_mask, heads, scale, low, high,
                                       dilation, lse, dq, delta):
    """dq for each query row, and delta_i = sum_j p_ij dp_ij (needed by the keys' kernel)."""
    idx = cuda.grid(1)
    q_len, k_len = q.shape[1], k.shape[1]
    if idx >= q.shape[0] * q_len:
        return
    bh, i = idx // q_len, idx % q_len
    b = bh // heads
    for d in range(q.shape[2]):
        dq[bh, i, d] = 0.0
    row_delta = 0.0
    for o in range(low, high + 1):
        j = _key(i, o, q_len, k_len, dilation, mask, has_mask, b)
        if j >= 0:
            p = math.exp(_dot(q, k, bh, i, j) * scale - lse[bh, i])
            row_delta += p * _dot(g, v, bh, i, j)
    delta[bh, i] = row_delta
    for o in range(low, high + 1):
        j = _key(i, o, q_len, k_len, dilation, mask, has_mask, b)
        if j >= 0:
            p = math.exp(_dot(q, k, bh, i, j) * scale - lse[bh, i])
            ds = p * (_dot(g, v, bh, i, j) - row_delta) * scale
            for d in range(q.shape[2]):
                dq[bh, i, d] += ds * k[bh, j, d]


@cuda.jit(cache=True)
def _attention_backward_keys_kernel(q, k, v, g, mask, has_mask, heads, scale, low, high,
                                    dilation, lse, delta, dk, dv):
    """dk and dv for each key row, summed over the queries that see it (no atomics)."""
    idx = cuda.grid(1)
    q_len, k_len = q.shape[1], k.shape[1]
    if idx >= k.shape[0] * k_len:
        return
    bh, j = idx // k_len, idx % k_len
    for d in range(k.shape[2]):
        dk[bh, j, d] = 0.0
    for d in range(v.shape[2]):
        dv[bh, j, d] = 0.0
    if has_mask and not mask[bh // heads, j]:
        return
    for o in range(low, high + 1):
        i = j - (k_len - q_len) - o * dilation  # the query that sees key j at offset o
        if i < 0 or i >= q_len:
            continue
        p = math.exp(_dot(q, k, bh, i, j) * scale - lse[bh, i])
        ds = p * (_dot(g, v, bh, i, j) - delta[bh, i]) * scale
        for d in range(k.shape[2]):
            dk[bh, j, d] += ds * q[bh, i, d]
        for d in range(v.shape[2]):
            dv[bh, j, d] += p * g[bh, i, d]


class _Heads:
    """q, k, v (B, H, T, D) flattened to contiguous (B*H, T, D), and the key mask (B, Tk)."""

    def __init__(self, q, k, v, key_mask):
        xp = self.xp = _xp(q)
        self.lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
        self.q, self.k, self.v = (self.flatten(a) for a in (q, k, v))
        self.heads = self.lead[-1]
        if key_mask is None:
            self.mask, self.has_mask = xp.ones((1, 1), dtype=np.bool_), False
        else:
            self.mask = self._broadcast(xp.asarray(key_mask, dtype=np.bool_),
                                        (self.lead[0], k.shape[-2]))
            self.has_mask = True

    def _broadcast(self, a, shape):
        """``a`` as a C-contiguous array of ``shape`` (a copy only where it had to broadcast)."""
        return self.xp.ascontiguousarray(self.xp.broadcast_to(a, shape))

    def flatten(self, a):
        a = self._broadcast(a, self.lead + a.shape[-2:])
        return a.reshape((-1,) + a.shape[-2:])

    def unflatten(self, a):
        return a.reshape(self.lead + a.shape[-2:])

    def band_args(self, scale, low, high, dilation):
        return (self.mask, self.has_mask, self.heads, float(scale), int(low), int(high),
                int(dilation))


def _band_limits(window, causal):
    """The band offsets o, low <= o <= high, that a query may use."""
    return -window, (0 if causal else window)


def _attend(q, k, v, key_mask, scale, low, high, dilation):
    h = _Heads(q, k, v, key_mask)
    out = h.xp.empty(h.q.shape[:2] + h.v.shape[2:], dtype=h.q.dtype)
    lse = h.xp.empty(h.q.shape[:2], dtype=np.float64)
    _run(_attention_kernel, h.q.shape[0] * h.q.shape[1], h.q, h.k, h.v,
         *h.band_args(scale, low, high, dilation), out, lse)
    return h.unflatten(out), lse


def _attend_backward(grad, q, k, v, lse, key_mask, scale, low, high, dilation):
    h = _Heads(q, k, v, key_mask)
    g = h.flatten(grad)
    args = h.band_args(scale, low, high, dilation)
    dq = h.xp.empty_like(h.q)
    delta = h.xp.empty(h.q.shape[:2], dtype=np.float64)
    _run(_attention_backward_queries_kernel, h.q.shape[0] * h.q.shape[1], h.q, h.k, h.v, g,
         *args, lse, dq, delta)
    dk, dv = h.xp.empty_like(h.k), h.xp.empty_like(h.v)
    _run(_attention_backward_keys_kernel, h.k.shape[0] * h.k.shape[1], h.q, h.k, h.v, g, *args,
         lse, delta, dk, dv)
    return h.unflatten(dq), h.unflatten(dk), h.unflatten(dv)


def _pair_blocks(h):
    """(first pair, end pair) of the score blocks of full attention: ``ATTENTION_BLOCK`` elements
    of (pairs, q_len, k_len) scores at a time, whole pairs."""
    pairs, per_pair = h.q.shape[0], h.q.shape[1] * h.k.shape[1]
    step = max(1, ATTENTION_BLOCK // max(1, per_pair))
    return [(p0, min(pairs, p0 + step)) for p0 in range(0, pairs, step)]


def _bias_view(h, bias):
    """The score bias broadcast to (B*H pairs' batch, heads, q_len, k_len) without a copy (strides
    0 where it was broadcast), and whether there is one (zeros stand in when not)."""
    shape = h.lead + (h.q.shape[1], h.k.shape[1])
    if bias is None:
        return h.xp.broadcast_to(h.xp.zeros((), dtype=h.q.dtype), shape), False
    return h.xp.broadcast_to(bias, shape), True


def attention(q, k, v, scale, causal, key_mask, bias=None):
    """(softmax(q k^T * scale + bias, masked) v, lse of each query row (B*H, Tq) float64).

    ``key_mask`` (B, Tk) is True for real keys; causal queries are the last Tq of Tk positions;
    ``bias`` (None or broadcastable to (B, H, Tq, Tk)) is added to the scaled scores. A query
    whose keys are all masked outputs 0. The products are the array module's (cuBLAS)."""
    h = _Heads(q, k, v, key_mask)
    xp, q_scaled = h.xp, h.q * scale
    bias, has_bias = _bias_view(h, bias)
    out = xp.empty(h.q.shape[:2] + h.v.shape[2:], dtype=h.q.dtype)
    lse = xp.empty(h.q.shape[:2], dtype=np.float64)
    for p0, p1 in _pair_blocks(h):
        scores = xp.matmul(q_scaled[p0:p1], h.k[p0:p1].transpose(0, 2, 1))
        _run_rows(_attention_softmax_kernel, scores.shape[0] * scores.shape[1], scores.shape[2],
                  scores, h.mask, h.has_mask, bias, has_bias, bool(causal), h.heads, p0, lse)
        out[p0:p1] = xp.matmul(scores, h.v[p0:p1])
    return h.unflatten(out), lse


def attention_backward(grad, q, k, v, lse, scale, causal, key_mask, bias=None, bias_grad=False):
    """(dq, dk, dv, dbias) of ``attention``, recomputing the scores block by block from ``lse``;
    dbias (the bias's gradient in its own shape) only when ``bias_grad``, else None."""
    h = _Heads(q, k, v, key_mask)
    xp, q_scaled, g = h.xp, h.q * scale, h.flatten(grad)
    bias_view, has_bias = _bias_view(h, bias)
    dq, dk, dv = xp.empty_like(h.q), xp.empty_like(h.k), xp.empty_like(h.v)
    dscores_all = xp.empty((h.q.shape[0], h.q.shape[1], h.k.shape[1]), dtype=h.q.dtype) \
        if bias_grad else None
    for p0, p1 in _pair_blocks(h):
        blk = slice(p0, p1)
        scores = xp.matmul(q_scaled[blk], h.k[blk].transpose(0, 2, 1))
        dscores = xp.matmul(g[blk], h.v[blk].transpose(0, 2, 1))
        _run_rows(_attention_softmax_backward_kernel, scores.shape[0] * scores.shape[1],
                  scores.shape[2], scores, dscores, h.mask, h.has_mask, bias_view, has_bias,
                  bool(causal), h.heads, p0, lse)
        if bias_grad:
            dscores_all[blk] = dscores
        dq[blk] = xp.matmul(dscores, h.k[blk]) * scale
        dk[blk] = xp.matmul(dscores.transpose(0, 2, 1), q_scaled[blk])
        dv[blk] = xp.matmul(scores.transpose(0, 2, 1), g[blk])
    dbias = sum_to_shape(h.unflatten(dscores_all), bias.shape) if bias_grad else None
    return h.unflatten(dq), h.unflatten(dk), h.unflatten(dv), dbias


def _check_self_attention(q, k, op):
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"{op}: banded attention is self-attention; queries have length "
                         f"{q.shape[-2]} and keys {k.shape[-2]}")


def banded_attention(q, k, v, scale, window, dilation, causal, key_mask):
    """Query i sees keys i + o * dilation, -window <= o <= window (o <= 0 when causal); returns
    (output, lse) like ``attention``. Work and memory grow as n * window, never n^2."""
    _check_self_attention(q, k, "banded_attention")
    return _attend(q, k, v, key_mask, scale, *_band_limits(window, causal), dilation)


def banded_attention_backward(grad, q, k, v, lse, scale, window, dilation, causal, key_mask):
    _check_self_attention(q, k, "banded_attention_backward")
    return _attend_backward(grad, q, k, v, lse, key_mask, scale, *_band_limits(window, causal),
                            dilation)


# ---- low-precision matrix products ---------------------------------------------------------------
@cuda.jit(cache=True)
def _matmul_int8_kernel(a, b, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        acc = np.int32(0)
        for t in range(a.shape[1]):
            acc += np.int32(a[i, t]) * np.int32(b[t, j])
        out[i, j] = acc


@cuda.jit(cache=True)
def _pack_signs_kernel(x, out):
    idx = cuda.grid(1)
    n_bytes = out.shape[1]
    if idx >= out.shape[0] * n_bytes:
        return
    r, byte = idx // n_bytes, idx % n_bytes
    value = 0
    for bit in range(8):
        c = byte * 8 + bit
        if c < x.shape[1] and x[r, c] >= 0:
            value |= 1 << (7 - bit)  # the first element is the high bit, as np.packbits
    out[r, byte] = value


@cuda.jit(cache=True)
def _binary_matmul_kernel(a_words, b_words, k, out):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        differing = 0
        for w in range(a_words.shape[1]):
            differing += cuda.popc(a_words[i, w] ^ b_words[j, w])
        out[i, j] = k - 2 * differing


def matmul_int8(a, b):
    """int8 (..., K) @ int8 (K, N) -> int32, accumulated in int32 (a batched ``b`` goes through
    the array module's integer matmul)."""
    xp = _xp(a)
    if b.ndim != 2 or a.ndim == 0:
        return xp.matmul(a.astype(np.int32), b.astype(np.int32))
    rows = xp.ascontiguousarray(a).reshape(-1, a.shape[-1])
    out = xp.empty((rows.shape[0], b.shape[1]), dtype=np.int32)
    _run_2d(_matmul_int8_kernel, out.shape[0], out.shape[1], rows, xp.ascontiguousarray(b), out)
    return out.reshape(a.shape[:-1] + (b.shape[1],))


def pack_signs(x):
    """Bit-pack the signs of ``x`` (..., K) along the last axis, as ``np.packbits(x >= 0, -1)``."""
    xp = _xp(x)
    rows = _as_rows(x)[0]
    out = xp.empty((rows.shape[0], (rows.shape[1] + 7) // 8), dtype=np.uint8)
    _run(_pack_signs_kernel, out.size, rows, out)
    return out.reshape(x.shape[:-1] + (out.shape[1],))


def _words(bits):
    """Packed bytes (R, K/8) as uint32 words (zero padding bits never differ)."""
    xp = _xp(bits)
    pad = -bits.shape[1] % 4
    if pad:
        bits = xp.concatenate([bits, xp.zeros((bits.shape[0], pad), dtype=np.uint8)], axis=1)
    return xp.ascontiguousarray(bits).view(np.uint32)


def binary_matmul(a_bits, b_bits, k):
    """{-1,+1} (M, K) @ {-1,+1} (K, N) from packed signs (M, K/8) and (N, K/8):
    a.b = K - 2 popcount(a xor b), on 32-bit words."""
    xp = _xp(a_bits)
    out = xp.empty((a_bits.shape[0], b_bits.shape[0]), dtype=np.int32)
    _run_2d(_binary_matmul_kernel, out.shape[0], out.shape[1], _words(a_bits), _words(b_bits),
            int(k), out)
    return out
