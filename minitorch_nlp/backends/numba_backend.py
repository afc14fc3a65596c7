"""The numba backend: NumPy arrays, with Numba-compiled kernels where they beat NumPy.

Select it with ``set_backend("numba")``, ``with backend("numba"):`` or
``MINITORCH_NLP_BACKEND=numba``. Arrays are plain ``numpy.ndarray`` and every operation that is
not listed below is NumPy's, so this backend is a drop-in replacement of the NumPy one; it is
tested to give the same values and gradients.

What Numba earns its place on (``numba_kernels.py``) is the memory-bound work that NumPy does in
several passes, each with its own temporary:

* softmax / log-softmax over the last axis, layer norm, GELU and bias+GELU, forward and backward:
  one parallel pass per row instead of five to ten whole-array passes;
* cross-entropy from logits: the forward keeps only two numbers per row (the shift and the log of
  the sum of exponentials) and the backward writes softmax - onehot in one pass;
* attention: the matmuls stay with BLAS; between them a kernel adds the score bias (read
  through a broadcast view, never copied), applies the causal and key masks (no n x n mask is
  built) and the softmax in place; the backward hands back the bias's gradient. Both run over
  blocks of (batch, head) pairs and query rows whose scores fit in the L2 cache, so a block is
  still there for the next step.
  Small problems keep the probabilities for the backward. Larger ones keep only each row's shift
  and 1 / sum, and recompute the scores in the backward (as FlashAttention does), so the saved
  state is O(n) instead of O(n^2); with a causal mask, keys that no query of a block can see are
  then never multiplied;
* banded attention over a narrow band: dot products over the band only, O(n * window) memory,
  the key/value gradients gathered per key so that rows are independent. A band of
  ``_WIDE_BAND`` keys or more runs the NumPy backend's blocked products instead (BLAS on blocks
  of queries and the keys their band reaches, ``BandBlocks``) with the softmax kernels above
  between them: there a dense product's speed beats visiting only the band;
* grouped attention, the engine under every sparse pattern: the NumPy backend's blocks of
  gathered rows and BLAS products, with the masked softmax, the score gradients and the
  additions of row gradients as kernels between them (``numba_sparse_kernels.py``); LSH's
  chunk masks and pair counts of eq 97-101 pair by pair, with no (..., rounds) temporaries;
* causal linear attention (the Performer's prefix sums, ``numba_linear_kernels.py``): running
  sums per (batch, head) pair, O(features x d_v) state instead of chunk products;
* few-row products (``numba_product_kernels.py``): a decoding step's handful of rows times a
  weight held row-major, each weight row read once, where OpenBLAS packs the whole weight on
  every call; on this backend ``nn.Linear`` therefore keeps every weight row-major
  (``widening_weights_column_major``), and products of more rows stay with BLAS;
* ``np.add.at``-style scatter-add of embedding gradients, int8 and xnor-popcount matmuls;
* the Adam / AdamW update (``optim.Adam``, ``optim.AdamW``) in one pass over each parameter.

Inputs of another layout are made contiguous first; shapes, dtypes or axes a kernel does not cover
(softmax over another axis, float16, integer inputs ...) fall back to the NumPy implementation, so
every call is still answered. Kernel inputs are passed read-only (``_read_only``), so that each
kernel compiles once per dtype; kernels compile on first use, so a run compiles only what it
calls. See ``numba_kernels`` for the threading layer and the compile cache.
"""
from __future__ import annotations

import functools
import math
import threading
from typing import NamedTuple

import numba
import numpy as np

from . import numba_kernels as kernels
from . import numba_linear_kernels as linear_kernels
from . import numba_product_kernels as product_kernels
from . import numba_sparse_kernels as sparse_kernels
from .numpy_backend import (NumpyBackend, _as_last_axis_row, _rows_of, empty_heads_apart,
                            empty_in_layout_of, sum_to_shape)
from .threads import in_threads, inside_a_task, task_threads

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_LAUNCH = threading.Lock()  # the workqueue threading layer must not be entered concurrently

# Scores of attention are computed this many elements at a time (1 MB in float32, the size of an
# L2 cache), kept probabilities included: a block stays in the cache between the matmul that
# writes it, the softmax kernel and the matmuls that read it. At (8, 4, 512, 64), fwd+bwd takes
# ~97 ms so, against ~115 ms with each step a pass over the whole (8, 4, 512, 512) array.
_ATTENTION_BLOCK = 1 << 18
_CAUSAL_ROWS = 128
# Attention probabilities of up to this many elements in all (64 MB in float32) are kept for the
# backward, which saves it recomputing q k^T; larger ones are recomputed block by block, so the
# saved state stays O(n). With a causal mask the blocks skip the hidden half of the scores, which
# pays more than keeping them once there is more than one block (_CAUSAL_KEEP_PROBS).
_KEEP_PROBS = 1 << 24
_CAUSAL_KEEP_PROBS = 1 << 20
_WORKSPACE_KEEP = 64 << 20  # workspace buffers up to this many bytes are kept for the next call
_GELU_CHUNK = 1 << 14  # elements per unit of parallel work for GELU without a bias
_ADAM_BLOCK = 1 << 14  # the least elements per unit of parallel work of the Adam update
# Below this much work (about one unit per element) kernels run on the calling thread only. A
# kernel start on the workqueue layer costs 70-85 us, and a (16, 128, 128) layer norm took 300 us
# on two threads against 207 on one. The benchmark GPT step on two threads, thresholds switched
# between interleaved rounds: 2^15 107.7 ms, 2^17 0.985x, 2^18 0.973x, 2^19 0.947x, 2^20 0.964x;
# MiniLM embeddings 1.001x at 2^19.
_PARALLEL_WORK = 1 << 19
# Bands of at least this many keys per query run as blocked dense products (``BandBlocks``)
# rather than the row kernels: measured at n = 16k, one thread, the row kernels win at 17 keys
# (44 against 73 ms) and lose at 129 (237 against 160 ms) and at 513 (905 against 453 ms).
_WIDE_BAND = 64
# Products of at most this many rows by a weight held row-major run the few-row kernel
# (``numba_product_kernels``): it took 0.2-0.5x of OpenBLAS's time at 4 and 8 rows, 0.8-1.2x at
# 16 and 1.4-5.8x at 32 (one thread, float32, T5 and BART shapes). Below ``_FEW_ROWS_LEAST``
# weight elements BLAS's call costs less than the kernel's dispatch.
_FEW_ROWS = 8
_FEW_ROWS_LEAST = 1 << 15
# The few-row kernel runs on Numba's threads only from this much work (rows x weight elements):
# below it, starting the workqueue threads costs more than the second thread saves (two
# threads, float32: 1 x 768 x 3072 took 139 us on one thread and 249 on two, 4 x 512 x 32128
# 4.4 ms and 3.0 ms, 8 x 3072 x 768 1.31 ms and 0.87 ms), and greedy decoding on two threads was
# slower than on one.
_FEW_ROWS_PARALLEL_WORK = 1 << 24
_workspaces = threading.local()


def _run(kernel, work, *args):
    """``kernel(parallel, *args)``, in parallel when ``work`` (about one unit per element) is
    worth starting the threads for and there is more than one free: not inside a task of
    ``in_threads``, whose other threads run the other tasks. (On one thread the workqueue layer
    still hands the loop to a worker and waits for it: 15-25% of attention's time.)"""
    if _in_parallel(work):
        with _LAUNCH:
            kernel(True, *args)
    else:
        kernel(False, *args)


def _in_parallel(work):
    """Whether ``_run`` runs a kernel of ``work`` on Numba's threads."""
    return work >= _PARALLEL_WORK and numba.get_num_threads() > 1 and not inside_a_task()


def _float_dtype(*arrays):
    """The common dtype when every array is float32, or every one float64; else None."""
    dtype = arrays[0].dtype
    if dtype not in _FLOATS or any(a.dtype != dtype for a in arrays[1:]):
        return None
    return dtype


def _flat_views(arrays):
    """1-D views of same-shaped ``arrays`` that walk them in one common memory order (all
    row-major, or all column-major as ``nn.column_major_`` stores weights), so that an
    element-wise kernel pairs the same elements; None when they share no contiguous order."""
    if all(a.flags.c_contiguous for a in arrays):
        return [a.reshape(-1) for a in arrays]
    if all(a.flags.f_contiguous for a in arrays):
        return [a.T.reshape(-1) for a in arrays]
    return None


def _workspace(slot, shape, dtype):
    """A scratch array of ``shape``, reused between calls of this thread (no page faults)."""
    size = int(np.prod(shape)) * dtype.itemsize
    cache = _workspaces.__dict__.setdefault("buffers", {})
    buffer = cache.get(slot)
    if buffer is None or buffer.nbytes < size:
        buffer = np.empty(size, dtype=np.uint8)
        if size <= _WORKSPACE_KEEP:
            cache[slot] = buffer
    return buffer[:size].view(dtype).reshape(shape)


def _as_rows(x):
    """``x`` as a C-contiguous (rows, last axis) array, read-only (``_read_only``): a kernel's
    input."""
    return _read_only(_rows_of(np.ascontiguousarray(x)))


class _AttentionState(NamedTuple):
    key_mask: np.ndarray  # (B, Tk) bool, all True when there is none
    bias: np.ndarray      # the score bias broadcast to (B, H, Tq, Tk) (zeros when there is none)
    bias_shape: tuple | None  # the bias's own shape, None when there is none
    peak: np.ndarray      # (B*H, Tq) row shift of the scaled, masked scores
    inv_total: np.ndarray  # (B*H, Tq) 1 / sum of exponentials
    probs: np.ndarray | None  # (B, H, Tq, Tk) when small enough to keep, else recomputed


class _LayerNormState(NamedTuple):
    mean: np.ndarray  # (rows,) of each row of the input
    rstd: np.ndarray  # (rows,) 1 / sqrt(var + eps)


class _CrossEntropyState(NamedTuple):
    logits: np.ndarray     # (N, C) C-contiguous
    target: np.ndarray     # (N,) int64 in [0, C), or -1 for an ignored row
    shift: np.ndarray      # (N,)
    log_total: np.ndarray  # (N,)


class NumbaBackend(NumpyBackend):
    """Arrays are ``numpy.ndarray``; the fused kernels are compiled with Numba."""

    name = "numba"
    xp = np
    # the few-row kernel reads a row-major (out, in) weight at memory speed, one row as fast as
    # BLAS's one-row product reads the column-major layout (``numba_product_kernels``)
    widening_weights_column_major = False

    @staticmethod
    def _task_threads(work, tasks):
        """As many threads for ``in_threads``'s tasks as Numba has (``threads.task_threads``)."""
        return task_threads(numba.get_num_threads(), work, tasks)

    # ---- matrix products -----------------------------------------------------------------------
    def matmul(self, a, b, out=None):
        """``a @ b``; a few rows (at most ``_FEW_ROWS``) times a weight held row-major (``b``
        column-major, the transpose of an ``(out, in)`` weight) run the few-row kernel, which
        reads the weight once; everything else is the NumPy backend's."""
        if out is None and _few_rows_apply(a, b):
            product = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
            work = b.size * a.shape[0]
            _run(product_kernels.few_rows_product, work if work >= _FEW_ROWS_PARALLEL_WORK else 0,
                 _read_only(np.ascontiguousarray(a)), _read_only(b.T), product)
            return product
        return super().matmul(a, b, out=out)

    # ---- softmax family ---------------------------------------------------------------------
    @staticmethod
    def _over_last_axis(axis, *arrays):
        """Whether the row kernels apply: same shapes and float dtype, ``axis`` the last one."""
        x = arrays[0]
        return (x.ndim >= 1 and x.size > 0 and axis in (-1, x.ndim - 1)
                and all(a.shape == x.shape for a in arrays) and _float_dtype(*arrays) is not None)

    def _softmax(self, x, axis, log):
        rows = _as_rows(x)
        out = np.empty_like(rows)
        _run(kernels.softmax_rows, rows.size, rows, out, log)
        return out.reshape(x.shape)

    def _softmax_backward(self, y, grad, log):
        out = np.empty(y.shape, dtype=y.dtype)
        _run(kernels.softmax_backward_rows, y.size, _as_rows(y), _as_rows(grad),
             out.reshape(-1, y.shape[-1]), log)
        return out

    def softmax(self, x, axis):
        if self._over_last_axis(axis, x):
            return self._softmax(x, axis, False)
        return super().softmax(x, axis)

    def softmax_backward(self, y, grad, axis):
        if self._over_last_axis(axis, y, grad):
            return self._softmax_backward(y, grad, False)
        return super().softmax_backward(y, grad, axis)

    def log_softmax(self, x, axis):
        if self._over_last_axis(axis, x):
            return self._softmax(x, axis, True)
        return super().log_softmax(x, axis)

    def log_softmax_backward(self, y, grad, axis):
        if self._over_last_axis(axis, y, grad):
            return self._softmax_backward(y, grad, True)
        return super().log_softmax_backward(y, grad, axis)

    # ---- layer norm -----------------------------------------------------------------------------
    @staticmethod
    def _layer_norm_params(x, weight, bias):
        """(dtype, weight, bias) as kernel arguments (ones / zeros for none), or None when the
        kernel does not apply."""
        if x.ndim == 0 or x.size == 0:
            return None
        params = [p for p in (weight, bias) if p is not None]
        dtype = _float_dtype(x, *params)
        if dtype is None or any(p.shape != x.shape[-1:] for p in params):
            return None
        width = x.shape[-1]
        weight = np.ones(width, dtype) if weight is None else np.ascontiguousarray(weight)
        bias = np.zeros(width, dtype) if bias is None else np.ascontiguousarray(bias)
        return dtype, _read_only(weight), _read_only(bias)

    def layer_norm(self, x, weight, bias, eps):
        params = self._layer_norm_params(x, weight, bias)
        if params is None:
            return super().layer_norm(x, weight, bias, eps)
        dtype, w, b = params
        rows = _as_rows(x)
        y = np.empty_like(rows)
        mean, rstd = np.empty((2, rows.shape[0]), dtype=dtype)
        _run(kernels.layer_norm_rows, rows.size, rows, w, b, dtype.type(eps), y, mean, rstd)
        return y.reshape(x.shape), _LayerNormState(mean, rstd)

    def layer_norm_backward(self, grad, x, state, weight):
        if not isinstance(state, _LayerNormState):  # the forward fell back to NumPy's
            return super().layer_norm_backward(grad, x, state, weight)
        dtype = x.dtype
        w = _read_only(np.ones(x.shape[-1], dtype) if weight is None
                       else np.ascontiguousarray(weight))
        g = _as_rows(grad.astype(dtype, copy=False))
        rows, cols = g.shape
        # four chunks of rows per thread on Numba's threads, one on the calling thread
        chunks = min(rows, 4 * numba.get_num_threads()) if _in_parallel(g.size) else 1
        dweight_parts, dbias_parts = np.empty((2, chunks, cols))
        dx = np.empty_like(g)
        _run(kernels.layer_norm_backward_rows, g.size, g, _as_rows(x), _read_only(state.mean),
             _read_only(state.rstd), w,
             dx, dweight_parts, dbias_parts)
        dweight = None if weight is None else dweight_parts.sum(axis=0).astype(dtype)
        return dx.reshape(grad.shape), dweight, dbias_parts.sum(axis=0).astype(dtype)

    # ---- GELU ----------------------------------------------------------------------------------
    def _gelu(self, x, bias, grad, approximate):
        flat = _read_only(np.ascontiguousarray(x).reshape(-1))
        out = np.empty_like(flat)
        if bias is None:
            bias = np.zeros(min(flat.size, _GELU_CHUNK), dtype=x.dtype)
        bias = _read_only(np.ascontiguousarray(bias).reshape(-1))
        backward = grad is not None
        grad = _read_only(np.ascontiguousarray(grad).reshape(-1)) if backward else flat
        if approximate == "tanh":
            _run(kernels.gelu_tanh_rows, flat.size, flat, bias, grad, out, backward)
        else:
            _run(kernels.gelu_erf_rows, flat.size, flat, bias, grad, out, backward,
                 kernels.gelu_constants(x.dtype))
        return out.reshape(x.shape)

    @staticmethod
    def _gelu_applies(x, grad=None, bias=None):
        arrays = [a for a in (x, grad, bias) if a is not None]
        if x.ndim == 0 or x.size == 0 or _float_dtype(*arrays) is None:
            return False
        if grad is not None and grad.shape != x.shape:
            return False
        if bias is None:
            return True
        row = _as_last_axis_row(bias, x)
        return row is not None and row.size == x.shape[-1]

    def gelu(self, x, approximate):
        if self._gelu_applies(x):
            return self._gelu(x, None, None, approximate)
        return super().gelu(x, approximate)

    def gelu_backward(self, x, grad, approximate):
        if self._gelu_applies(x, grad):
            return self._gelu(x, None, grad, approximate)
        return super().gelu_backward(x, grad, approximate)

    def bias_gelu(self, x, bias, approximate):
        if self._gelu_applies(x, bias=bias):
            return self._gelu(x, bias, None, approximate)
        return super().bias_gelu(x, bias, approximate)

    def bias_gelu_backward(self, x, bias, grad, approximate):
        if self._gelu_applies(x, grad, bias):
            return self._gelu(x, bias, grad, approximate)
        return super().bias_gelu_backward(x, bias, grad, approximate)

    # ---- Adam / AdamW update ------------------------------------------------------------------
    def adam_update(self, theta, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scratch, *, step, lr,
                    beta1, beta2, eps, weight_decay, decoupled):
        state = [a for a in (theta, grad, exp_avg, exp_avg_sq, max_exp_avg_sq) if a is not None]
        flat = _flat_views(state) if all(a.shape == theta.shape for a in state) else None
        if (theta.size == 0 or _float_dtype(*state) is None or flat is None
                or not all(a.flags.writeable for a in state if a is not grad)):
            return super().adam_update(theta, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scratch,
                                       step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                                       weight_decay=weight_decay, decoupled=decoupled)
        dtype = theta.dtype.type
        sqrt_bias_correction2 = math.sqrt(1 - beta2 ** step)
        amsgrad = max_exp_avg_sq is not None
        maximum = flat[4] if amsgrad else flat[3]
        block = max(_ADAM_BLOCK, -(-theta.size // numba.get_num_threads()))
        _run(kernels.adam_update, theta.size, *flat[:4], maximum, amsgrad,
             dtype(1 - lr * weight_decay if decoupled else 1.0),
             dtype(0.0 if decoupled else weight_decay), dtype(beta1), dtype(beta2),
             dtype(lr * sqrt_bias_correction2 / (1 - beta1 ** step)),
             dtype(eps * sqrt_bias_correction2), block)

    # ---- scatter-add of rows -----------------------------------------------------------------
    def scatter_add_rows(self, index, src, num_rows):
        """``out[index[k]] += src[k]`` for rows ``k``; duplicates add up, negative indices count
        from the end (as in ``np.add.at``)."""
        flat = np.asarray(index).reshape(-1)
        if (flat.size == 0 or num_rows == 0 or flat.dtype.kind not in "iu"
                or _float_dtype(src) is None):
            return super().scatter_add_rows(index, src, num_rows)
        rows = np.ascontiguousarray(src.reshape(flat.size, src.shape[-1]))
        if rows.shape[1] == 0:
            return super().scatter_add_rows(index, src, num_rows)
        flat = flat.astype(np.int64)
        low, high = int(flat.min()), int(flat.max())
        if low < -num_rows or high >= num_rows:
            bad = low if low < -num_rows else high
            raise IndexError(f"scatter_add_rows: index {bad} is out of range for {num_rows} rows")
        if low < 0:
            flat = np.where(flat < 0, flat + num_rows, flat)
        out = np.zeros((num_rows, rows.shape[1]), dtype=rows.dtype)
        _add_rows_into(out, flat, rows)
        return out

    # ---- cross-entropy --------------------------------------------------------------------------
    def cross_entropy(self, logits, target, ignore_index, label_smoothing):
        target = np.asarray(target)
        if (logits.ndim != 2 or logits.size == 0 or _float_dtype(logits) is None
                or target.shape != logits.shape[:1] or target.dtype.kind not in "iu"):
            return super().cross_entropy(logits, target, ignore_index, label_smoothing)
        x = np.ascontiguousarray(logits)
        dtype = x.dtype
        rows, classes = x.shape
        keep = target != ignore_index
        picked = target[keep].astype(np.int64)
        if picked.size and (picked.min() < -classes or picked.max() >= classes):
            bad = picked[(picked < -classes) | (picked >= classes)][0]
            raise IndexError(f"cross_entropy: target {bad} is out of range for {classes} classes "
                             f"(and is not ignore_index={ignore_index})")
        t = np.full(rows, -1, dtype=np.int64)
        t[keep] = np.where(picked < 0, picked + classes, picked)
        loss = np.empty(rows, dtype=dtype)
        shift = np.empty(rows, dtype=dtype)
        log_total = np.empty(rows, dtype=dtype)
        x, t = _read_only(x), _read_only(t)
        _run(kernels.cross_entropy_rows, x.size, x, t, dtype.type(1 - label_smoothing),
             dtype.type(label_smoothing), loss, shift, log_total)
        return loss, _CrossEntropyState(x, t, shift, log_total)

    def cross_entropy_backward(self, state, target, grad_rows, ignore_index, label_smoothing):
        if not isinstance(state, _CrossEntropyState):
            return super().cross_entropy_backward(state, target, grad_rows, ignore_index,
                                                  label_smoothing)
        x = state.logits
        dtype = x.dtype
        g = np.ascontiguousarray(np.broadcast_to(grad_rows, x.shape[:1]), dtype=dtype)
        out = np.empty_like(x)
        _run(kernels.cross_entropy_backward_rows, x.size, x, state.target, _read_only(state.shift),
             _read_only(state.log_total), _read_only(g), dtype.type(1 - label_smoothing),
             dtype.type(label_smoothing / x.shape[1]), out)
        return out

    # ---- attention ------------------------------------------------------------------------------
    # The dense kernels read q, k and v where they are: heads split off a projection by a
    # permute are strided (B, H, T, D) views that BLAS reads as they are. The output is laid out
    # heads apart and the gradients as their inputs (``empty_heads_apart``,
    # ``empty_in_layout_of``), so that merging the heads back moves no data. The scale is
    # applied to the scores in the softmax kernel.
    def _attention_inputs(self, q, k, v, key_mask):
        """(q, k, v as contiguous (B*H, T, D), the key mask as a (B, Tk) bool array), or None,
        for the banded kernels. The copies run in threads, by slices of the batch."""
        if not _attention_shapes_fit(q, k, v):
            return None
        batch, heads, tk = k.shape[0], k.shape[1], k.shape[2]
        mask = self._attention_key_mask(key_mask, batch, tk)
        if mask is None:
            return None
        threads = self._task_threads(q.size + k.size + v.size, batch)
        bounds = np.linspace(0, batch, threads + 1).astype(int)
        copies = []

        def as_pairs(x):
            if x.flags.c_contiguous:
                return x.reshape((batch * heads,) + x.shape[2:])
            out = np.empty(x.shape, dtype=x.dtype)
            for b0, b1 in zip(bounds[:-1], bounds[1:]):
                copies.append(functools.partial(np.copyto, out[b0:b1], x[b0:b1]))
            return out.reshape((batch * heads,) + x.shape[2:])

        q3, k3, v3 = as_pairs(q), as_pairs(k), as_pairs(v)
        in_threads(copies, threads)
        return q3, k3, v3, mask

    def _dense_attention_arguments(self, q, k, v, key_mask, bias):
        """(key mask, bias view) as the dense kernels read them, or None when they cannot take
        these inputs (the NumPy backend's code then runs)."""
        if not _attention_shapes_fit(q, k, v):
            return None
        mask = self._attention_key_mask(key_mask, k.shape[0], k.shape[2])
        bias_view = None if mask is None else self._attention_bias(bias, q, k)
        return None if bias_view is None else (mask, bias_view)

    @staticmethod
    def _attention_key_mask(key_mask, batch, tk):
        """The key mask as the kernels read it, a C-contiguous (batch, tk) bool array (all True
        when there is none), or None when they cannot take it."""
        if key_mask is None:
            return np.ones((batch, tk), dtype=bool)
        mask = np.asarray(key_mask)
        if mask.dtype != np.bool_ or mask.ndim > 2:
            return None
        try:
            return np.ascontiguousarray(np.broadcast_to(mask, (batch, tk)))
        except ValueError:
            return None

    @staticmethod
    def _attention_bias(bias, q, k):
        """The score bias as the kernels read it: a view broadcast to (B, H, Tq, Tk) (strides 0
        where it was broadcast: nothing is copied), zeros when there is none; None when the
        kernels cannot take it (another dtype than q's, a shape that does not broadcast)."""
        if bias is None:
            bias = np.zeros((), q.dtype)
        elif bias.dtype != q.dtype:
            return None
        try:
            return np.broadcast_to(bias, q.shape[:3] + k.shape[2:3])
        except ValueError:
            return None

    @staticmethod
    def _attention_blocks(batch, heads, tq, tk, causal, threads=1):
        """(b0, b1, h0, h1, i0, i1, keys) of each score block: batch entries b0:b1, heads
        h0:h1, queries i0:i1, and the first ``keys`` keys. A block holds whole (entry, head)
        pairs when their scores fit in ``_ATTENTION_BLOCK`` elements, else query rows of one
        pair; with a causal mask, blocks of at most ``_CAUSAL_ROWS`` queries, which use only the
        keys their last query can see. A block of several pairs takes whole batch entries (all
        their heads) or heads of one entry, so that its q, k, v, output and kept probabilities
        are slices of the (B, H, T, ...) arrays, the probabilities a contiguous one. The pairs
        are cut into a multiple of ``threads`` blocks of about equal size (as far as there are
        pairs), so that ``threads`` threads share them evenly."""
        pairs = batch * heads
        rows = min(tq, _CAUSAL_ROWS) if causal else tq
        rows = max(1, min(rows, _ATTENTION_BLOCK // tk))
        step = max(1, _ATTENTION_BLOCK // (rows * tk))
        cuts = -(-pairs // step)
        step = -(-pairs // min(pairs, -(-cuts // threads) * threads))
        if step >= heads:
            entries = step // heads
            ranges = [(b0, min(batch, b0 + entries), 0, heads)
                      for b0 in range(0, batch, entries)]
        else:
            ranges = [(b, b + 1, h0, min(heads, h0 + step))
                      for b in range(batch) for h0 in range(0, heads, step)]
        for i0 in range(0, tq, rows):
            i1 = min(tq, i0 + rows)
            keys = min(tk, max(1, i1 + tk - tq)) if causal else tk
            for b0, b1, h0, h1 in ranges:
                yield b0, b1, h0, h1, i0, i1, keys

    def attention(self, q, k, v, scale, causal, key_mask, bias=None):
        arguments = self._dense_attention_arguments(q, k, v, key_mask, bias)
        if arguments is None:
            return super().attention(q, k, v, scale, causal, key_mask, bias)
        out, peak, inv_total, kept = self._dense_attention(q, k, v, scale, causal, key_mask, bias,
                                                           *arguments, recording=True)
        mask, bias_view = arguments
        return out, _AttentionState(mask, bias_view, None if bias is None else bias.shape, peak,
                                    inv_total, kept)

    def attention_inference(self, q, k, v, scale, causal, key_mask, bias=None):
        """``attention``'s output alone, for a forward nothing will differentiate: no
        probabilities are kept, and a block skips the keys after the last unmasked key of each
        of its entries (the right padding of a batch): their probabilities are 0, so neither the
        products nor the softmax need them, and every output row, padding rows included, is the
        same up to rounding."""
        arguments = self._dense_attention_arguments(q, k, v, key_mask, bias)
        if arguments is None:
            return super().attention_inference(q, k, v, scale, causal, key_mask, bias)
        return self._dense_attention(q, k, v, scale, causal, key_mask, bias, *arguments,
                                     recording=False)[0]

    def _dense_attention(self, q, k, v, scale, causal, key_mask, bias, mask, bias_view,
                         recording):
        """(output, row shifts, 1 / sums of exponentials, kept probabilities or None) of the
        kernels, block by block; ``recording``: keep the probabilities when they fit in
        ``_KEEP_PROBS`` (``_CAUSAL_KEEP_PROBS``) elements, else skip padded keys."""
        dtype = q.dtype
        batch, heads, tq, tk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        out = empty_heads_apart(q.shape[:3] + v.shape[3:], dtype)
        peak = np.empty((batch * heads, tq), dtype=dtype)
        inv_total = np.empty((batch * heads, tq), dtype=dtype)
        kept, keys_in_use = None, None
        if recording:
            work = batch * heads * tq * tk
            if work <= (_CAUSAL_KEEP_PROBS if causal else _KEEP_PROBS):
                kept = np.empty((batch, heads, tq, tk), dtype=dtype)
        else:
            keys_in_use = _keys_in_use(mask)
            work = heads * tq * int(keys_in_use.sum())
        threads = self._task_threads(work, batch * heads)

        def block(b0, b1, h0, h1, i0, i1, keys):
            if keys_in_use is not None:
                keys = min(keys, int(keys_in_use[b0:b1].max()))
            scores = kept[b0:b1, h0:h1, i0:i1] if kept is not None else \
                _workspace(0, (b1 - b0, h1 - h0, i1 - i0, keys), dtype)
            self.matmul(q[b0:b1, h0:h1, i0:i1], k[b0:b1, h0:h1, :keys].swapaxes(2, 3),
                        out=scores)
            _run(kernels.attention_probs, scores.size, scores.reshape(-1, i1 - i0, keys), mask,
                 key_mask is not None, bias_view, bias is not None, causal, heads,
                 b0 * heads + h0, i0, tq, tk, peak, inv_total, dtype.type(scale))
            self.matmul(scores, v[b0:b1, h0:h1, :keys], out=out[b0:b1, h0:h1, i0:i1])

        # kept probabilities are written in blocks that use every key, so that each block is a
        # contiguous slice of ``kept``; the kernel applies the causal mask all the same
        blocks = self._attention_blocks(batch, heads, tq, tk, causal and kept is None, threads)
        in_threads([functools.partial(block, *b) for b in blocks], threads)
        return out, peak, inv_total, kept

    def attention_backward(self, grad, q, k, v, state, scale, causal, key_mask, bias_grad=False):
        if not isinstance(state, _AttentionState):
            return super().attention_backward(grad, q, k, v, state, scale, causal, key_mask,
                                              bias_grad)
        dtype = q.dtype
        grad = grad.astype(dtype, copy=False)
        batch, heads, tq, tk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        kept = state.probs is not None
        threads = self._task_threads(batch * heads * tq * tk, batch * heads)
        blocks = list(self._attention_blocks(batch, heads, tq, tk, causal and not kept, threads))
        whole_pairs = all(i0 == 0 and i1 == tq for *_, i0, i1, _ in blocks)
        if not whole_pairs:     # blocks of rows of one pair add to the same key gradients
            threads = 1
        dq, dk, dv = (empty_in_layout_of(x, dtype) for x in (q, k, v))
        if not whole_pairs:
            dk.fill(0)
            dv.fill(0)
        # the bias's gradient is the scores' gradient: every block's is written into one array
        # (directly, when the blocks are whole pairs), then summed over the broadcast axes
        dscores_all = None
        direct = whole_pairs and all(keys == tk for *_, keys in blocks)
        if bias_grad:
            dscores_all = (np.empty if direct else np.zeros)((batch, heads, tq, tk), dtype=dtype)
        scale = dtype.type(scale)

        def block(b0, b1, h0, h1, i0, i1, keys):
            pairs, rows = (slice(b0, b1), slice(h0, h1)), slice(i0, i1)
            q_blk, g_blk = q[pairs + (rows,)], grad[pairs + (rows,)]
            k_blk, v_blk = k[pairs + (slice(keys),)], v[pairs + (slice(keys),)]
            shape = (b1 - b0, h1 - h0, i1 - i0, keys)
            if kept:
                probs = state.probs[pairs + (rows,)]
            else:
                probs = _workspace(0, shape, dtype)
                self.matmul(q_blk, k_blk.swapaxes(2, 3), out=probs)
            dscores = dscores_all[pairs] if bias_grad and direct else _workspace(1, shape, dtype)
            self.matmul(g_blk, v_blk.swapaxes(2, 3), out=dscores)
            _run(kernels.attention_probs_backward, probs.size, probs.reshape(-1, i1 - i0, keys),
                 dscores.reshape(-1, i1 - i0, keys), state.key_mask, state.bias,
                 state.bias_shape is not None, causal, heads, b0 * heads + h0, i0, tq, tk,
                 state.peak, state.inv_total, not kept, scale)
            if bias_grad and not direct:
                dscores_all[pairs + (rows, slice(keys))] = dscores
            # dscores is the gradient of the scaled scores: the scale goes on the (T, d) products
            dq_blk = dq[pairs + (rows,)]
            self.matmul(dscores, k_blk, out=dq_blk)
            dq_blk *= scale
            if whole_pairs:
                self.matmul(probs.swapaxes(2, 3), g_blk, out=dv[pairs])
                dk_blk = dk[pairs]
                self.matmul(dscores.swapaxes(2, 3), q_blk, out=dk_blk)
                dk_blk *= scale
            else:
                dv[pairs + (slice(keys),)] += self.matmul(probs.swapaxes(2, 3), g_blk)
                dk[pairs + (slice(keys),)] += scale * self.matmul(dscores.swapaxes(2, 3), q_blk)

        in_threads([functools.partial(block, *b) for b in blocks], threads)
        dbias = None if not bias_grad else sum_to_shape(dscores_all, state.bias_shape)
        return dq, dk, dv, dbias

    # ---- banded attention -----------------------------------------------------------------------
    def banded_attention(self, q, k, v, scale, window, dilation, causal, key_mask):
        inputs = self._attention_inputs(q, k, v, key_mask)
        offsets = np.ascontiguousarray(self.band_offsets(window, dilation, causal), dtype=np.int64)
        if (inputs is None or q.shape[2] != k.shape[2] or offsets.size == 0
                or offsets.size >= _WIDE_BAND):
            return super().banded_attention(q, k, v, scale, window, dilation, causal, key_mask)
        q3, k3, v3, mask = inputs
        dtype = q3.dtype
        pairs, n = q3.shape[:2]
        probs = np.empty((pairs, n, offsets.size), dtype=dtype)
        out = np.empty((pairs, n, v3.shape[2]), dtype=dtype)
        _run(kernels.banded_attention_rows, probs.size * q3.shape[2], q3, k3, v3, offsets, mask,
             q.shape[1], dtype.type(scale), probs, out)
        return (out.reshape(q.shape[:3] + v.shape[3:]),
                probs.reshape(q.shape[:3] + (offsets.size,)))

    def banded_attention_backward(self, grad, q, k, v, state, scale, window, dilation, causal,
                                  key_mask):
        inputs = self._attention_inputs(q, k, v, None)
        offsets = np.ascontiguousarray(self.band_offsets(window, dilation, causal), dtype=np.int64)
        if (inputs is None or q.shape[2] != k.shape[2] or offsets.size == 0
                or offsets.size >= _WIDE_BAND or _float_dtype(q, state) is None):
            return super().banded_attention_backward(grad, q, k, v, state, scale, window,
                                                     dilation, causal, key_mask)
        q3, k3, v3, _ = inputs
        dtype = q3.dtype
        pairs, n = q3.shape[:2]
        probs = np.ascontiguousarray(state).reshape(pairs, n, offsets.size)
        g3 = np.ascontiguousarray(grad, dtype=dtype).reshape(pairs, n, v3.shape[2])
        dscores = np.empty_like(probs)
        dq = np.empty_like(q3)
        dk = np.empty_like(k3)
        dv = np.empty_like(v3)
        work = probs.size * q3.shape[2]
        _run(kernels.banded_attention_backward_queries, work, g3, k3, v3, offsets, probs,
             dtype.type(scale), dscores, dq)
        _run(kernels.banded_attention_backward_keys, work, g3, q3, offsets, probs, dscores, dk,
             dv)
        return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)

    # ---- low-precision matrix products ----------------------------------------------------------
    def matmul_int8(self, a, b):
        if (a.ndim != 2 or b.ndim != 2 or a.dtype != np.int8 or b.dtype != np.int8
                or a.shape[1] != b.shape[0]):
            return super().matmul_int8(a, b)
        out = np.empty((a.shape[0], b.shape[1]), dtype=np.int32)
        _run(kernels.matmul_int8, a.size * b.shape[1], np.ascontiguousarray(a),
             np.ascontiguousarray(b), out)
        return out

    def binary_matmul(self, a_bits, b_bits, k):
        if (a_bits.ndim != 2 or b_bits.ndim != 2 or a_bits.dtype != np.uint8
                or b_bits.dtype != np.uint8 or a_bits.shape[1] != b_bits.shape[1]):
            return super().binary_matmul(a_bits, b_bits, k)
        out = np.empty((a_bits.shape[0], b_bits.shape[0]), dtype=np.int32)
        _run(kernels.binary_matmul, out.size * a_bits.shape[1], self._as_words(a_bits),
             self._as_words(b_bits), np.int64(k), out)
        return out

    @staticmethod
    def _as_words(bits):
        """Packed bytes (rows, nbytes) as uint64 words (rows, ceil(nbytes / 8)), zero-padded."""
        rows, nbytes = bits.shape
        words = -(-nbytes // 8)
        if nbytes == 8 * words:
            padded = np.ascontiguousarray(bits)
        else:
            padded = np.zeros((rows, 8 * words), dtype=np.uint8)
            padded[:, :nbytes] = bits
        return padded.view(np.uint64)

    def merge_top_k(self, best_scores, best_ids, scores, offset):
        """Merge a block of scores (rows, n), ids ``offset`` .. ``offset + n - 1``, into each
        row's running best k (``best_scores`` (rows, k) descending, -inf where empty, and int64
        ``best_ids``), in place; equal scores keep the smaller id first. ``DenseIndex.search``
        calls it for every block instead of concatenating, partitioning and sorting."""
        if scores.dtype != best_scores.dtype or _float_dtype(scores) is None:
            scores = scores.astype(best_scores.dtype)
        _run(kernels.merge_top_k, scores.size, best_scores, best_ids,
             np.ascontiguousarray(scores), offset)

    # ---- grouped attention: the NumPy backend's blocks of products, these kernels between them --
    def _grouped_softmax(self, scores, first, allowed, real, bias, lse):
        dtype = _float_dtype(scores)
        if (dtype is None or not scores.flags.c_contiguous or lse.dtype != dtype
                or (bias is not None and bias.dtype not in _FLOATS)):
            return super()._grouped_softmax(scores, first, allowed, real, bias, lse)
        shape = allowed.shape
        real = np.broadcast_to(True, shape[:3] + shape[4:]) if real is None else real
        bias = np.broadcast_to(dtype.type(0), shape) if bias is None else bias
        _run(sparse_kernels.grouped_softmax, scores.size, scores, first, allowed, real, bias,
             lse)

    def _grouped_score_gradients(self, probs, dprobs, grad_lse, scale):
        dtype = _float_dtype(probs, dprobs, grad_lse)
        if dtype is None or not (probs.flags.c_contiguous and dprobs.flags.c_contiguous):
            return super()._grouped_score_gradients(probs, dprobs, grad_lse, scale)
        rows = probs.shape[0] * probs.shape[1]
        _run(sparse_kernels.grouped_score_gradients, probs.size,
             probs.reshape(rows, -1), dprobs.reshape(rows, -1), grad_lse.reshape(rows),
             dtype.type(scale))

    def _add_rows(self, out, rows, src):
        if _float_dtype(out, src) is None or not out.flags.c_contiguous or out.ndim != 2:
            return super()._add_rows(out, rows, src)
        _add_rows_into(out, rows.reshape(-1).astype(np.int64, copy=False),
                       np.ascontiguousarray(src).reshape(-1, out.shape[1]))

    def lsh_round_masks(self, buckets, chunk, queries, key_index, has_previous, r, causal,
                        self_penalty, dtype=np.float64):
        if (np.dtype(dtype) not in _FLOATS
                or not _lsh_shapes_fit(buckets, chunk, queries, key_index, has_previous)):
            return super().lsh_round_masks(buckets, chunk, queries, key_index, has_previous, r,
                                           causal, self_penalty, dtype)
        shape = queries.shape + (key_index.shape[3],)
        allowed, bias = np.empty(shape, dtype=bool), np.empty(shape, dtype=dtype)
        _run(sparse_kernels.lsh_chunk_masks, allowed.size * buckets.shape[2],
             *(_group_index(a) for a in (buckets, chunk, queries, key_index)),
             _read_only(np.ascontiguousarray(has_previous, dtype=bool)), int(r), bool(causal),
             float(self_penalty), allowed, bias)
        return allowed, bias

    # ---- causal linear attention (numba_linear_kernels) -----------------------------------------
    def causal_linear_attention(self, qf, kf, v, chunk):
        dtype = _float_dtype(qf, kf, v)
        if dtype is None:
            return super().causal_linear_attention(qf, kf, v, chunk)
        q3, k3, v3 = _pairs(qf, kf, v)
        out = np.empty(v3.shape, dtype=dtype)
        den = np.empty(q3.shape[:2], dtype=dtype)
        _run(linear_kernels.causal_linear_attention_forward, q3.size * v3.shape[2], q3, k3, v3,
             out, den)
        out = out.reshape(v.shape)
        return out, (out, den)

    def causal_linear_attention_backward(self, grad, qf, kf, v, state, chunk):
        dtype = _float_dtype(qf, kf, v)
        out, den = state
        if dtype is None or den.ndim != 2:       # a state the NumPy backend made
            return super().causal_linear_attention_backward(grad, qf, kf, v, state, chunk)
        q3, k3, v3, g3, o3 = _pairs(qf, kf, v, np.asarray(grad, dtype=dtype), out)
        dqf, dkf, dv = (np.empty(x.shape, dtype=dtype) for x in (q3, k3, v3))
        _run(linear_kernels.causal_linear_attention_backward, 2 * q3.size * v3.shape[2], g3, q3,
             k3, v3, o3, _read_only(den), dqf, dkf, dv)
        return dqf.reshape(qf.shape), dkf.reshape(kf.shape), dv.reshape(v.shape)


def _few_rows_apply(a, b):
    """Whether ``a @ b`` is the few-row kernel's: (rows <= ``_FEW_ROWS``, K) @ (K, N) with ``b``
    column-major, of at least ``_FEW_ROWS_LEAST`` elements, both float32 or both float64."""
    return (a.ndim == 2 and b.ndim == 2 and 0 < a.shape[0] <= _FEW_ROWS
            and b.size >= _FEW_ROWS_LEAST and b.flags.f_contiguous and not b.flags.c_contiguous
            and _float_dtype(a, b) is not None)


def _keys_in_use(key_mask):
    """Per batch entry of a (batch, tk) key mask, one past its last unmasked key (1 when none is:
    a row with no allowed key is 0 whatever keys it sees)."""
    last = key_mask.shape[1] - np.argmax(key_mask[:, ::-1], axis=1)
    return np.where(key_mask.any(axis=1), last, 1)


def _attention_shapes_fit(q, k, v):
    """Whether the attention kernels take q, k, v: (B, H, T, D) arrays of one float dtype, with
    one head per key/value head, keys as many as values, none empty."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or _float_dtype(q, k, v) is None:
        return False
    return (q.shape[:2] == k.shape[:2] == v.shape[:2] and k.shape[2] == v.shape[2]
            and q.shape[3] == k.shape[3] and q.size > 0 and k.size > 0 and v.size > 0)


def _lsh_shapes_fit(buckets, chunk, queries, key_index, has_previous):
    """Whether ``lsh_round_masks``'s arrays have the shapes the kernels index without
    broadcasting: buckets and chunk (B, H, R, T), queries (B, H, C, m), key_index (B, H, C, k),
    has_previous (C, k). (The NumPy backend's code takes anything that broadcasts.)"""
    return (buckets.shape[:2] == queries.shape[:2] and chunk.shape == buckets.shape
            and key_index.shape[:3] == queries.shape[:3]
            and has_previous.shape == (queries.shape[2], key_index.shape[3]))


def _add_rows_into(out, index, rows):
    """``out[index[k]] += rows[k]`` (int64 ``index``, contiguous (N, d) ``rows`` of ``out``'s
    dtype), threads owning blocks of whole cache lines of columns."""
    per_thread = -(-rows.shape[1] // numba.get_num_threads())
    block = max(16, -(-per_thread // 16) * 16)  # whole cache lines per thread
    _run(kernels.scatter_add_rows, rows.size, index, rows, out, block)


def _read_only(array):
    """A read-only view of ``array``. The kernels take every input read-only, so that each
    compiles once per dtype: a graph locks the arrays it saves, and Numba compiles read-only
    and writable arrays apart (the first ``demo --smoke`` compiled GELU three times, layer norm
    and cross-entropy twice, for that difference alone)."""
    view = array.view()
    view.flags.writeable = False
    return view


def _pairs(*arrays):
    """(batch, heads, time, d) arrays as read-only C-contiguous (batch * heads, time, d)."""
    return tuple(_read_only(np.ascontiguousarray(x).reshape((-1,) + x.shape[2:])) for x in arrays)


def _group_index(index):
    """Positions (b|1, h|1, G, slots) as the read-only C-contiguous int64 array the kernels
    index with."""
    return _read_only(np.ascontiguousarray(index, dtype=np.int64))


def _slots_by_position(index, time):
    """The inverse of ``index`` (b|1, h|1, G, S): for each (b, h) row, the flat slots g * S + s
    sorted by the position they hold, and where each position's run starts (b|1, h|1, time + 1),
    so that a kernel visits every slot of position t as slots[starts[t]:starts[t + 1]]."""
    flat = index.reshape(index.shape[0] * index.shape[1], -1)
    slots = np.argsort(flat, axis=-1, kind="stable")
    counts = np.bincount((np.arange(flat.shape[0])[:, None] * time + flat).reshape(-1),
                         minlength=flat.shape[0] * time).reshape(flat.shape[0], time)
    starts = np.zeros((flat.shape[0], time + 1), dtype=np.int64)
    np.cumsum(counts, axis=1, out=starts[:, 1:])
    return (_read_only(slots.reshape(index.shape[:2] + (-1,))),
            _read_only(starts.reshape(index.shape[:2] + (time + 1,))))
