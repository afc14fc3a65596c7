"""The NumPy backend: the default, and the reference every other backend is tested against.

Read it to learn what each kernel computes: a kernel's maths is a few lines of vectorised NumPy
in the order of the formula in its docstring (softmax: shift by the row maximum, exponentiate,
divide by the sum; layer norm: centre, scale by 1 / sqrt(var + eps), apply the weight and bias).
Where a kernel reuses a buffer (``out=``, ``+=``) it saves a pass over memory: a fresh
multi-megabyte temporary costs page faults on every call.

How the work is run fast lives apart, in ``numpy_tuning.py``: the threads that share a kernel's
parts (``self._in_parts``, ``self._in_row_blocks``, ``self._in_batch_parts``: read ``run(part)``
as "for each part"), the cache-sized blocks attention is computed in (``BandBlocks``,
``group_blocks``), and the BLAS thread count of small products (``self.matmul``). None of it
changes a value: a student can read each call of those helpers as one pass over the whole array.

Import-time settings live in ``threads.py`` (OpenBLAS's spin time) and ``memory.py`` (malloc
keeps freed memory for the next arrays).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from . import numpy_tuning as tuning
from .erf import erf as _erf
from .numpy_tuning import BandBlocks
from .threads import blas_threads, task_threads

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_TANH_C = 0.044715


def sum_to_shape(x, shape):
    """``x`` summed over the axes along which ``shape`` was broadcast to ``x.shape`` (the inverse
    of broadcasting): the gradient of an input that was broadcast. ``x`` itself when the shapes
    agree. Works on any array with NumPy's methods (CuPy's too)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    out = x.sum(axis=axes, keepdims=True) if axes else x
    return out.reshape(shape)


def _rows_of(x):
    """``x`` as (rows, last axis): a view where the layout allows (a 0-d array is one row of
    one)."""
    if x.ndim == 0:
        return x.reshape(1, 1)
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def _as_last_axis_row(bias, x):
    """``bias`` as a 1-D row added to every row of ``x`` (it varies along the last axis at most
    and does not add axes to ``x``), or None when it broadcasts otherwise."""
    if bias.ndim > x.ndim or any(n != 1 for n in bias.shape[:-1]):
        return None
    return bias.reshape(-1)


def _has_batch(shape, ndim=4):
    """Whether an array of ``shape``, broadcast against (batch, ...) arrays of ``ndim`` axes (4
    for attention's q, k, v and score bias, 2 for its key mask), has a batch axis of its own: as
    many axes, and more than one entry along the first."""
    return len(shape) >= ndim and shape[0] != 1


def _entries(x, b0, b1, ndim=4):
    """Entries ``b0:b1`` along the batch axis of ``x`` (None, or an array as in ``_has_batch``);
    ``x`` itself where it has no batch axis of its own."""
    return x[b0:b1] if x is not None and _has_batch(x.shape, ndim) else x


# Heads split off a projection by a reshape and a permute are a (B, T, H, D) layout seen as
# (B, H, T, D). Attention writes its output and its gradients in such layouts, so that merging
# the heads back into (B, T, H * D), a permute and a reshape, or their backward, moves no data.
def empty_heads_apart(shape, dtype):
    """An uninitialised array of ``shape``; a (B, H, T, D) one laid out as (B, T, H, D)."""
    if len(shape) != 4:
        return np.empty(shape, dtype=dtype)
    batch, heads, time, width = shape
    return np.empty((batch, time, heads, width), dtype=dtype).transpose(0, 2, 1, 3)


def empty_in_layout_of(x, dtype):
    """An uninitialised array of ``x``'s shape whose axes lie in memory in the order of ``x``'s
    (the largest stride outermost; axes that ``x`` broadcasts first), as ``np.empty_like``'s
    order 'K' but with broadcast axes outermost; row-major ``x`` gives a plain array."""
    order = sorted(range(x.ndim), key=lambda axis: -abs(x.strides[axis]) if x.strides[axis]
                   else -math.inf)
    if order == sorted(order):
        return np.empty(x.shape, dtype=dtype)
    return np.empty([x.shape[axis] for axis in order], dtype=dtype).transpose(np.argsort(order))


def _sum_keepdims(x, axis):
    """``x.sum(axis=axis, keepdims=True)`` (over the last axis by ``tuning.sum_last_axis``)."""
    if x.ndim and axis in (-1, x.ndim - 1):
        return tuning.sum_last_axis(x)
    return x.sum(axis=axis, keepdims=True)


def _max_for_shift(x, axis):
    """Row maxima used to shift logits before ``exp``; rows that are all ``-inf`` shift by 0."""
    m = x.max(axis=axis, keepdims=True)
    if not np.isfinite(m).all():
        m = np.where(np.isfinite(m), m, 0.0).astype(x.dtype, copy=False)
    return m


class NumpyBackend:
    """Arrays are ``numpy.ndarray``; kernels are vectorised NumPy."""

    name = "numpy"
    xp = np
    # ``nn.Linear`` stores a widening weight column-major on this backend: OpenBLAS's one-row
    # product (a decoding step) reads it faster so (``nn.column_major_``)
    widening_weights_column_major = True

    def __repr__(self):
        return f"<backend {self.name}>"

    # one instance per backend: copies of a tensor or a model must stay on the same backend
    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        from . import get_backend

        return get_backend, (self.name,)

    def asarray(self, obj, dtype=None):
        return np.asarray(obj, dtype=dtype)

    def to_numpy(self, array):
        return np.asarray(array)

    def erf(self, x):
        return _erf(x)

    # ---- matrix products ----------------------------------------------------------------------
    def matmul(self, a, b, out=None):
        """``a @ b`` (``np.matmul``), on the BLAS threads that suit its size (``tuning.matmul``)."""
        return tuning.matmul(a, b, out=out)

    # ---- softmax family (last-axis or any axis) -------------------------------------------
    def softmax(self, x, axis):
        return self._normalised_exp(np.subtract(x, _max_for_shift(x, axis)), axis)

    def _softmax_in_place(self, x, axis=-1):
        """``softmax(x, axis)`` written over ``x``."""
        x -= _max_for_shift(x, axis)
        return self._normalised_exp(x, axis)

    @staticmethod
    def _normalised_exp(y, axis):
        """exp(y) / sum(exp(y)) along ``axis``, over ``y`` (logits shifted by their maxima)."""
        np.exp(y, out=y)
        total = _sum_keepdims(y, axis)
        total[total == 0] = 1  # a row that was all -inf gives zeros, not NaN
        y /= total
        return y

    def softmax_backward(self, y, grad, axis):
        dot = np.einsum("...i,...i->...", grad, y)[..., None] if axis in (-1, y.ndim - 1) else (
            (grad * y).sum(axis=axis, keepdims=True))
        out = np.subtract(grad, dot)
        out *= y
        return out

    def log_softmax(self, x, axis):
        shifted = np.subtract(x, _max_for_shift(x, axis))
        total = _sum_keepdims(np.exp(shifted), axis)
        total[total == 0] = 1  # all -inf row: log-probabilities stay -inf, no NaN
        shifted -= np.log(total)
        return shifted

    def log_softmax_backward(self, y, grad, axis):
        out = np.exp(y)
        out *= _sum_keepdims(grad, axis)
        np.subtract(grad, out, out=out)
        return out

    # ---- layer norm over the last axis -------------------------------------------------------
    def layer_norm(self, x, weight, bias, eps):
        xhat = np.subtract(x, _sum_keepdims(x, -1) / x.shape[-1])
        var = np.einsum("...i,...i->...", xhat, xhat)[..., None] / x.shape[-1]
        rstd = 1.0 / np.sqrt(var + eps)
        xhat *= rstd.astype(x.dtype, copy=False)
        if weight is None:
            y = xhat.copy()
        else:
            y = xhat * weight
        if bias is not None:
            y += bias
        return y, (xhat, rstd.astype(x.dtype, copy=False))

    def layer_norm_backward(self, grad, x, state, weight):
        """From the state (xhat, rstd) that ``layer_norm`` returned with y: the forward computes
        xhat on the way to y, so keeping it costs no pass (x itself is not read)."""
        xhat, rstd = state
        g2 = grad.reshape(-1, grad.shape[-1])
        x2 = xhat.reshape(-1, xhat.shape[-1])
        dweight = np.einsum("ni,ni->i", g2, x2) if weight is not None else None
        dbias = g2.sum(axis=0)
        dxhat = grad * weight if weight is not None else grad.copy()
        n = grad.shape[-1]
        mean_dxhat = _sum_keepdims(dxhat, -1) / n
        mean_dxhat_xhat = np.einsum("...i,...i->...", dxhat, xhat)[..., None] / n
        dxhat -= mean_dxhat
        dxhat -= xhat * mean_dxhat_xhat
        dxhat *= rstd
        return dxhat, dweight, dbias

    # ---- GELU ---------------------------------------------------------------------------------
    # Each GELU makes six to fifteen passes over its input, over blocks of rows shared among the
    # threads (``_in_row_blocks``).
    def gelu(self, x, approximate):
        return self._in_row_blocks(lambda out, x: self._gelu_block(x, approximate, out), x)

    def gelu_backward(self, x, grad, approximate):
        return self._in_row_blocks(
            lambda out, x, grad: self._gelu_backward_block(x, grad, approximate, out), x, grad)

    def bias_gelu(self, x, bias, approximate):
        """gelu(x + bias): the activation of a Transformer's feed-forward layer in one pass (a
        bias along the last axis is added block by block; any other broadcast first)."""
        row = _as_last_axis_row(bias, x)
        if row is None:
            return self.gelu(x + bias, approximate)
        return self._in_row_blocks(lambda out, x: self._gelu_block(x + row, approximate, out), x)

    def bias_gelu_backward(self, x, bias, grad, approximate):
        """d/dx gelu(x + bias) * grad (the bias gradient is its sum over rows)."""
        row = _as_last_axis_row(bias, x)
        if row is None:
            return self.gelu_backward(x + bias, grad, approximate)
        return self._in_row_blocks(
            lambda out, x, grad: self._gelu_backward_block(x + row, grad, approximate, out),
            x, grad)

    def _gelu_block(self, x, approximate, out):
        if approximate == "tanh":
            # 0.5 x (1 + tanh u) = x / (1 + exp(-2u)): six passes instead of ten
            with np.errstate(over="ignore"):
                denominator = self._exp_minus_2u(x, x * x)
            denominator += 1
            np.divide(x, denominator, out=out)
            return
        inner = self.erf(x * (1.0 / math.sqrt(2.0)))
        inner += 1
        inner *= x
        np.multiply(inner, 0.5, out=out)

    @staticmethod
    def _exp_minus_2u(x, x2):
        """exp(-2u) of the tanh GELU, u = sqrt(2/pi) (x + c x^3), given x2 = x * x. It overflows
        to inf for x below about -10 in float32 (-21 in float64), where the GELU and its
        derivative, below 1e-37 (1e-296), come out as 0: callers silence NumPy's overflow
        warning."""
        out = np.multiply(x2, -2 * _SQRT_2_OVER_PI * _GELU_TANH_C)
        out -= 2 * _SQRT_2_OVER_PI
        out *= x
        return np.exp(out, out=out)

    def _gelu_backward_block(self, x, grad, approximate, out):
        if approximate == "tanh":
            # with s = sigmoid(2u) = 0.5 (1 + tanh u): d/dx x s = s (1 + 2x u'(x) (1 - s)),
            # 2x u'(x) = x (2k + 6kc x^2), k = sqrt(2/pi)
            with np.errstate(over="ignore"):
                x2 = x * x
                s = self._exp_minus_2u(x, x2)
            s += 1
            np.reciprocal(s, out=s)
            slope = x2
            slope *= 6 * _SQRT_2_OVER_PI * _GELU_TANH_C
            slope += 2 * _SQRT_2_OVER_PI
            slope *= x
            slope *= np.subtract(1, s)
            slope += 1
            slope *= s
            np.multiply(slope, grad, out=out)
            return
        # d/dx = Phi(x) + x phi(x)
        cdf = self.erf(x * (1.0 / math.sqrt(2.0)))
        cdf += 1
        cdf *= 0.5
        pdf = x * x
        pdf *= -0.5
        np.exp(pdf, out=pdf)
        pdf *= _INV_SQRT_2PI
        pdf *= x
        cdf += pdf
        np.multiply(cdf, grad, out=out)

    def _in_row_blocks(self, fill, *arrays):
        """A new array shaped as the first of the same-shaped ``arrays`` (in its floating dtype),
        written block by block: ``fill(out, *blocks)`` with ``blocks`` the same consecutive rows
        (last axis kept) of each array (``tuning.row_blocks``), and ``out`` those rows of the
        result; the blocks shared among the threads (``_in_parts``)."""
        out = np.empty(arrays[0].shape, dtype=np.result_type(arrays[0], 1.0))
        flat = _rows_of(out)
        rows = [_rows_of(a) for a in arrays]
        self._in_parts(tuning.row_blocks(*flat.shape), out.size, lambda part: [
            fill(flat[block], *(r[block] for r in rows)) for block in part])
        return out

    # ---- Adam / AdamW update, in place --------------------------------------------------------
    def adam_update(self, theta, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scratch, *, step, lr,
                    beta1, beta2, eps, weight_decay, decoupled):
        """One Adam step (``step`` counts from 1) on ``theta``, ``exp_avg`` (m), ``exp_avg_sq``
        (v) and, for AMSGrad, ``max_exp_avg_sq`` (else None), all in place; ``decoupled`` weight
        decay is AdamW's (theta shrinks first), otherwise it is an L2 term added to the gradient.
        ``scratch``: two arrays shaped like theta whose contents may be overwritten. Computed as
        theta -= (lr sqrt(1 - beta2^t) / (1 - beta1^t)) m / (sqrt(v) + eps sqrt(1 - beta2^t)),
        the textbook update with one pass fewer."""
        xp = self.xp
        decayed, spare = scratch
        if weight_decay != 0:
            if decoupled:
                theta *= 1 - lr * weight_decay
            else:
                grad = xp.add(xp.multiply(theta, weight_decay, out=decayed), grad, out=decayed)
        exp_avg *= beta1
        exp_avg += xp.multiply(grad, 1 - beta1, out=spare)
        exp_avg_sq *= beta2
        squared = xp.multiply(grad, grad, out=spare)
        squared *= 1 - beta2
        exp_avg_sq += squared
        if max_exp_avg_sq is not None:
            exp_avg_sq = xp.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
        sqrt_bias_correction2 = math.sqrt(1 - beta2 ** step)
        denom = xp.sqrt(exp_avg_sq, out=spare)
        denom += eps * sqrt_bias_correction2
        update = xp.divide(exp_avg, denom, out=spare)
        update *= lr * sqrt_bias_correction2 / (1 - beta1 ** step)
        theta -= update

    # ---- scatter-add of rows (embedding / gather gradients) -----------------------------------
    def scatter_add_rows(self, index, src, num_rows):
        """``out[index[k]] += src[k]`` for rows ``k``; duplicates add up (replaces
        ``np.add.at``)."""
        flat = index.reshape(-1)
        rows = src.reshape(flat.size, math.prod(src.shape[index.ndim:]))
        out = np.zeros((num_rows, rows.shape[1]), dtype=src.dtype)
        if flat.size == 0:
            return out
        order = np.argsort(flat, kind="stable")
        sorted_index = flat[order]
        starts = np.flatnonzero(np.concatenate(([True], sorted_index[1:] != sorted_index[:-1])))
        out[sorted_index[starts]] = np.add.reduceat(rows[order], starts, axis=0)
        return out

    # ---- cross-entropy from logits (class axis last, rows flattened) ----------------------------
    def cross_entropy(self, logits, target, ignore_index, label_smoothing):
        """Per-row loss of ``logits`` (N, C) against ``target`` (N,), and the state for backward.

        loss_i = (1 - eps) * -log p_i[t_i] + eps * mean_c(-log p_i[c]); ignored rows give 0.
        """
        log_probs = self.log_softmax(logits, -1)
        keep = target != ignore_index
        safe_target = np.where(keep, target, 0)
        nll = -np.take_along_axis(log_probs, safe_target[:, None], axis=1)[:, 0]
        loss = nll if label_smoothing == 0 else (
            (1 - label_smoothing) * nll - label_smoothing * log_probs.mean(axis=1))
        loss = np.where(keep, loss, 0).astype(logits.dtype, copy=False)
        return loss, log_probs

    def cross_entropy_backward(self, log_probs, target, grad_rows, ignore_index, label_smoothing):
        """d loss_i / d logits_i = softmax_i - (1 - eps) onehot(t_i) - eps / C, times grad_i."""
        keep = target != ignore_index
        out = np.exp(log_probs)
        if label_smoothing:
            out -= label_smoothing / log_probs.shape[1]
        rows = np.flatnonzero(keep)
        out[rows, target[rows]] -= 1 - label_smoothing
        out *= np.where(keep, grad_rows, 0).astype(out.dtype, copy=False)[:, None]
        return out

    # ---- attention (q, k, v of shape (B, H, T, D)) ----------------------------------------------
    @staticmethod
    def _allowed(tq, tk, causal, key_mask):
        """Which scores may be used, broadcastable to (B, H, Tq, Tk); None when all may.

        Causal queries are the last ``tq`` positions of ``tk`` (as with a key/value cache)."""
        allowed = None
        if causal:
            allowed = np.tri(tq, tk, k=tk - tq, dtype=bool)
        if key_mask is not None:
            keys = key_mask[:, None, None, :]
            allowed = keys if allowed is None else allowed & keys
        return allowed

    def attention(self, q, k, v, scale, causal, key_mask, bias=None):
        """softmax(q k^T * scale + bias, masked) v; returns (output, state for backward).

        ``key_mask`` (B, Tk) is True for real keys; ``bias`` (None, or broadcastable to (B, H,
        Tq, Tk)) is added to the scaled scores, -inf entries hiding a key. A query whose keys
        are all masked outputs 0. The batch entries are shared among the threads
        (``_in_batch_parts``)."""
        leading = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        probs = np.empty(leading + (q.shape[-2], k.shape[-2]), dtype=np.result_type(q, k))
        out = empty_heads_apart(leading + (q.shape[-2], v.shape[-1]), np.result_type(probs, v))

        def run(b0, b1):
            scores = probs[b0:b1]
            # the scale goes on q: Tq d multiplications rather than Tq Tk on the scores
            self.matmul(_entries(q, b0, b1) * q.dtype.type(scale),
                        _entries(k, b0, b1).swapaxes(-1, -2), out=scores)
            if bias is not None:
                scores += _entries(bias, b0, b1)
            allowed = self._allowed(q.shape[-2], k.shape[-2], causal,
                                    _entries(key_mask, b0, b1, ndim=2))
            if allowed is not None:
                np.copyto(scores, -np.inf, where=~allowed)
            self._softmax_in_place(scores)
            self.matmul(scores, _entries(v, b0, b1), out=out[b0:b1])

        self._in_batch_parts(leading[0], probs.size, run)
        return out, (probs, None if bias is None else bias.shape)

    def attention_inference(self, q, k, v, scale, causal, key_mask, bias=None):
        """The output of ``attention`` alone, for a forward nothing will differentiate."""
        return self.attention(q, k, v, scale, causal, key_mask, bias)[0]

    def attention_backward(self, grad, q, k, v, state, scale, causal, key_mask, bias_grad=False):
        """(dq, dk, dv, dbias): dbias, the gradient of the forward's bias in its shape (the
        scores' gradient summed over the axes it was broadcast along), only when ``bias_grad``
        (the forward had a bias), else None. dq, dk and dv have the broadcast batch and head
        axes of the forward's probabilities. Shared among the threads as the forward."""
        probs, bias_shape = state
        leading = probs.shape[:-2]
        dtype = np.result_type(probs, grad, q, k, v)
        dq, dk, dv = (empty_in_layout_of(np.broadcast_to(x, leading + x.shape[-2:]), dtype)
                      for x in (q, k, v))
        batched = bias_grad and _has_batch(bias_shape)

        def run(b0, b1):
            part_probs, part_grad = probs[b0:b1], _entries(grad, b0, b1)
            self.matmul(part_probs.swapaxes(-1, -2), part_grad, out=dv[b0:b1])
            dscores = self.softmax_backward(
                part_probs, self.matmul(part_grad, _entries(v, b0, b1).swapaxes(-1, -2)), -1)
            # the scale goes on the (T, d) products rather than on the (T, T) scores
            self.matmul(dscores, _entries(k, b0, b1), out=dq[b0:b1])
            dq[b0:b1] *= scale
            self.matmul(dscores.swapaxes(-1, -2), _entries(q, b0, b1), out=dk[b0:b1])
            dk[b0:b1] *= scale
            if bias_grad:
                part_shape = (b1 - b0,) + bias_shape[1:] if batched else bias_shape
                return sum_to_shape(dscores, part_shape)
            return None

        parts = self._in_batch_parts(leading[0], probs.size, run)
        dbias = None
        if bias_grad:   # each part's share: its entries of a batched bias, else a partial sum
            dbias = np.concatenate(parts) if batched else functools.reduce(np.add, parts)
        return dq, dk, dv, dbias

    def _in_batch_parts(self, batch, work, run):
        """``run(b0, b1)`` on consecutive ranges of the ``batch`` entries, one range per thread
        (``_in_parts``: attention's per-head products are a stack of small products, each on
        one BLAS thread, so only side by side do they use more cores); the results in order."""
        if batch == 0:
            return [run(0, 0)]
        return self._in_parts(list(range(batch)), work, lambda part: run(part[0], part[-1] + 1))

    # ---- banded (sliding-window, optionally dilated) self-attention ---------------------------
    @staticmethod
    def band_offsets(window, dilation, causal):
        """Key offsets j - i that query i may use: multiples of ``dilation`` within ``window``
        steps."""
        return np.arange(-window, 1 if causal else window + 1) * dilation

    def banded_attention(self, q, k, v, scale, window, dilation, causal, key_mask):
        """Self-attention where query i sees keys i + o*dilation, |o| <= window (o <= 0 if causal).

        Computed block by block (``BandBlocks``): a block of consecutive queries and the keys its
        band can reach are one dense product through BLAS, the band and the key mask are -inf
        scores, and the softmax is the backend's; the blocks go a cache-sized chunk at a time,
        the chunks shared among the threads (``_in_parts``).
        Memory grows as n * (block + band width), never n^2. Returns the output and the blocks'
        probabilities (the backward's state)."""
        blocks = BandBlocks(q.shape[2], window, dilation, causal)
        queries = blocks.queries(q * q.dtype.type(scale))
        keys, values = blocks.key_windows(k), blocks.key_windows(v)
        hidden, touched = blocks.hidden_keys(key_mask)
        probs = np.empty(queries.shape[:-1] + (blocks.width,), np.result_type(q, k))
        out = np.empty(queries.shape[:-1] + values.shape[-1:], np.result_type(probs, v))

        def run(chunks):
            for chunk in chunks:
                scores = self.matmul(queries[..., chunk, :, :],
                                     keys[..., chunk, :, :].swapaxes(-1, -2))
                blocks.mask(scores, hidden, touched, chunk)
                probs[..., chunk, :, :] = self.softmax(scores, -1)
                self.matmul(probs[..., chunk, :, :], values[..., chunk, :, :],
                            out=out[..., chunk, :, :])

        self._in_parts(blocks.chunks(math.prod(queries.shape[:-3])), probs.size, run)
        return blocks.unfold_queries(out), probs

    def banded_attention_backward(self, grad, q, k, v, state, scale, window, dilation, causal,
                                  key_mask):
        probs = state
        blocks = BandBlocks(q.shape[2], window, dilation, causal)
        grad = blocks.queries(grad)
        queries = blocks.queries(q)
        keys, values = blocks.key_windows(k), blocks.key_windows(v)
        dq = np.empty(grad.shape[:-1] + queries.shape[-1:], probs.dtype)

        def run(chunks):
            dk = blocks.key_rows_like(probs, k.shape[-1])
            dv = blocks.key_rows_like(probs, v.shape[-1])
            for chunk in chunks:
                chunk_probs, chunk_grad = probs[..., chunk, :, :], grad[..., chunk, :, :]
                dscores = self.softmax_backward(chunk_probs, self.matmul(
                    chunk_grad, values[..., chunk, :, :].swapaxes(-1, -2)), -1)
                dscores *= scale
                self.matmul(dscores, keys[..., chunk, :, :], out=dq[..., chunk, :, :])
                blocks.add_key_windows(dk, self.matmul(dscores.swapaxes(-1, -2),
                                                       queries[..., chunk, :, :]), chunk.start)
                blocks.add_key_windows(dv, self.matmul(chunk_probs.swapaxes(-1, -2), chunk_grad),
                                       chunk.start)
            return dk, dv

        # each part adds into key gradients of its own (windows overlap), summed in part order
        parts = self._in_parts(blocks.chunks(math.prod(queries.shape[:-3])), probs.size, run)
        dk, dv = parts[0]
        for part_dk, part_dv in parts[1:]:
            dk += part_dk
            dv += part_dv
        return blocks.unfold_queries(dq), blocks.unfold_keys(dk), blocks.unfold_keys(dv)

    # ---- low-precision matrix products ----------------------------------------------------------
    def matmul_int8(self, a, b):
        """int8 (M, K) @ int8 (K, N) -> int32, accumulated exactly in int32."""
        return np.matmul(a.astype(np.int32), b.astype(np.int32))

    def pack_signs(self, x):
        """Bit-pack the signs of ``x`` (..., K) along the last axis: bit 1 for +1 (x >= 0),
        bit 0 for -1."""
        return np.packbits(x >= 0, axis=-1)

    def binary_matmul(self, a_bits, b_bits, k):
        """{-1,+1} (M, K) @ {-1,+1} (K, N) from packed signs a_bits (M, K/8) and b_bits (N, K/8):
        a.b = K - 2 popcount(a xor b) (padding bits are 0 in both, so they never count)."""
        differing = np.bitwise_count(a_bits[:, None, :] ^ b_bits[None, :, :]).sum(
            axis=-1, dtype=np.int32)
        return (k - 2 * differing).astype(np.int32)

    # ---- grouped attention (the sparse patterns' groups of queries and keys) --------------------
    def grouped_attention(self, q, k, v, query_index, key_index, allowed, key_mask, bias, scale):
        """Each group's queries ``query_index`` (b|1, h|1, G, Q) attend its keys ``key_index``
        (b|1, h|1, G, K) of q, k, v (B, H, T, d), where ``allowed`` (broadcastable to
        (B, H, G, Q, K)) and ``key_mask`` (B, T; None = all real) let them; ``bias`` (a constant
        broadcastable to the scores, or None) is added to the scaled scores.

        The (batch, head, group) units are taken a block at a time (``tuning.group_blocks``): their
        query and key rows gathered into contiguous arrays, the scores of the block one batched
        product written into the kept probabilities, the masked softmax in place
        (``_grouped_softmax``), the output one more product. Returns (B, H, G, Q, d_v + 1): the
        output with each query's log-sum-exp of its scores as the last column (-inf, output 0,
        where a query sees no key), and the probabilities (B, H, G, Q, K) as the state for the
        backward."""
        xp = self.xp
        batch, heads, time, _ = q.shape
        groups, per_query, per_key = query_index.shape[2], query_index.shape[3], key_index.shape[3]
        shape = (batch, heads, groups, per_query, per_key)
        queries, keys, values = (x.reshape(-1, x.shape[-1]) for x in (q, k, v))
        query_rows, key_rows = (xp.asarray(group_rows(batch, heads, time, index))
                                for index in (query_index, key_index))
        allowed = xp.broadcast_to(xp.asarray(allowed, dtype=bool), shape)
        real = None if key_mask is None else self._group_key_mask(key_mask, key_index, shape)
        if bias is not None:       # read in its own dtype: a float64 bias is never copied
            bias = xp.broadcast_to(xp.asarray(bias), shape)
        probs = xp.empty((batch * heads * groups, per_query, per_key), dtype=q.dtype)
        out = xp.empty(probs.shape[:2] + (v.shape[-1] + 1,), dtype=q.dtype)

        def run(blocks):
            for u0, u1 in blocks:
                scores = probs[u0:u1]
                # take copies whole rows: 31 against 56 us for queries[rows] (8 x 256 x 64)
                scaled = queries.take(query_rows[u0:u1], axis=0)
                scaled *= q.dtype.type(scale)       # (scale q) k^T: K / d fewer multiplications
                self.matmul(scaled, keys.take(key_rows[u0:u1], axis=0).swapaxes(-1, -2),
                            out=scores)
                self._grouped_softmax(scores, u0, allowed, real, bias, out[u0:u1, :, -1])
                self.matmul(scores, values.take(key_rows[u0:u1], axis=0), out=out[u0:u1, :, :-1])

        self._in_parts(tuning.group_blocks(probs.shape[0], per_query, per_key), probs.size, run)
        return out.reshape(shape[:4] + (out.shape[-1],)), probs.reshape(shape)

    def grouped_attention_backward(self, grad, q, k, v, state, query_index, key_index, scale):
        """dq, dk, dv of ``grouped_attention`` from the gradient (B, H, G, Q, d_v + 1) of its
        output and log-sum-exp column, block by block as the forward: d lse / d score =
        probability, so dscores = p * (g.v - sum p g.v + g_lse) * scale
        (``_grouped_score_gradients``); each block's row gradients are added into the positions
        they came from (``_add_rows``)."""
        xp = self.xp
        batch, heads, time, _ = q.shape
        probs = state.reshape((-1,) + state.shape[3:])
        grad = xp.ascontiguousarray(xp.asarray(grad, dtype=probs.dtype)).reshape(
            probs.shape[:2] + grad.shape[-1:])
        queries, keys, values = (x.reshape(-1, x.shape[-1]) for x in (q, k, v))
        query_rows, key_rows = (xp.asarray(group_rows(batch, heads, time, index))
                                for index in (query_index, key_index))

        def run(blocks):
            dq, dk, dv = (xp.zeros(x.shape, dtype=probs.dtype) for x in (queries, keys, values))
            for u0, u1 in blocks:
                block_probs, grad_out = probs[u0:u1], grad[u0:u1, :, :-1]
                block_queries, block_keys = query_rows[u0:u1], key_rows[u0:u1]
                dscores = self.matmul(grad_out, values.take(block_keys, axis=0).swapaxes(-1, -2))
                self._grouped_score_gradients(block_probs, dscores, grad[u0:u1, :, -1], scale)
                self._add_rows(dq, block_queries,
                               self.matmul(dscores, keys.take(block_keys, axis=0)))
                self._add_rows(dk, block_keys,
                               self.matmul(dscores.swapaxes(-1, -2),
                                           queries.take(block_queries, axis=0)))
                self._add_rows(dv, block_keys,
                               self.matmul(block_probs.swapaxes(-1, -2), grad_out))
            return dq, dk, dv

        # each part adds into gradients of its own (blocks share key rows), summed in part order
        parts = self._in_parts(tuning.group_blocks(*probs.shape), probs.size, run)
        dq, dk, dv = parts[0]
        for part in parts[1:]:
            for total, more in zip((dq, dk, dv), part):
                total += more
        return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)

    def _in_parts(self, blocks, work, run):
        """``run(part)`` for consecutive parts of ``blocks`` (``work`` elements in all), one part
        per thread of ``_task_threads`` (``tuning.in_parts``); the results in part order."""
        threads = self._task_threads(work, len(blocks)) if len(blocks) > 1 else 1
        return tuning.in_parts(blocks, threads, run)

    @staticmethod
    def _task_threads(work, tasks):
        """How many threads ``_in_parts`` shares ``tasks`` blocks of ``work`` elements in all
        among: as many as BLAS has (``threads.task_threads``)."""
        return task_threads(blas_threads(), work, tasks)

    def _group_key_mask(self, key_mask, key_index, shape):
        """``key_mask`` (B, T) gathered at each group's keys: (B, H, G, K) bool (a broadcast
        view over the heads when the key index is shared by them)."""
        xp = self.xp
        keys = np.broadcast_to(key_index, (shape[0],) + key_index.shape[1:])
        batch = np.arange(shape[0]).reshape((-1,) + (1,) * (keys.ndim - 1))
        real = xp.asarray(key_mask, dtype=bool)[xp.asarray(batch), xp.asarray(keys)]
        return xp.broadcast_to(real, shape[:3] + shape[4:])

    def _grouped_softmax(self, scores, first, allowed, real, bias, lse):
        """In place, the scaled scores (U, Q, K) of units ``first`` .. ``first`` + U (unit =
        (batch * heads + head) * groups + group) -> their probabilities: ``bias`` (B, H, G, Q, K)
        added (None: no bias), keys hidden where ``allowed`` (B, H, G, Q, K) or ``real``
        (B, H, G, K; None: every key real) is False, softmax over the keys; each query's
        log-sum-exp written into ``lse`` (U, Q) (-inf and probabilities 0 where it sees no
        key)."""
        xp = self.xp
        batch, heads, groups = allowed.shape[:3]
        units = np.arange(first, first + scores.shape[0])
        b, h, g = (xp.asarray(a) for a in (units // (heads * groups), units // groups % heads,
                                           units % groups))
        visible = allowed[b, h, g]
        if real is not None:
            visible = visible & real[b, h, g][:, None, :]
        if bias is not None:
            scores += bias[b, h, g].astype(scores.dtype, copy=False)
        scores[~visible] = -xp.inf
        shift = _max_for_shift(scores, -1)
        scores -= shift
        xp.exp(scores, out=scores)
        total = scores.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore"):
            lse[...] = (xp.log(total) + shift)[..., 0]
        scores /= xp.where(total == 0, 1, total)

    def _grouped_score_gradients(self, probs, dprobs, grad_lse, scale):
        """In place, the gradient ``dprobs`` (U, Q, K) of the probabilities ``probs`` -> that
        of the scaled scores, p * (dp - sum p dp + g_lse) * scale, with ``grad_lse`` (U, Q) the
        log-sum-exps' gradient."""
        dprobs -= (probs * dprobs).sum(axis=-1, keepdims=True) - grad_lse[..., None]
        dprobs *= probs
        dprobs *= scale

    def _add_rows(self, out, rows, src):
        """``out[rows[k]] += src[k]`` for the rows ``k`` of ``src`` (..., d), repeated rows
        adding up: one vectorised pass per repetition (a block of groups repeats a position a
        few times: overlapping windows, shared global and random blocks)."""
        xp = self.xp
        flat, src = rows.reshape(-1), src.reshape(-1, src.shape[-1])
        order = xp.argsort(flat, kind="stable")
        ordered = flat[order]
        new = xp.concatenate([xp.ones(1, dtype=bool), ordered[1:] != ordered[:-1]])
        repetition = xp.arange(flat.size) - xp.flatnonzero(new)[xp.cumsum(new) - 1]
        for r in range(int(repetition.max()) + 1 if flat.size else 0):
            picked = order[repetition == r]
            out[flat[picked]] += src[picked]

    # ---- LSH attention's chunk masks (NumPy index arrays on every backend) -----------------------
    @staticmethod
    def lsh_round_masks(buckets, chunk, queries, key_index, has_previous, r, causal,
                        self_penalty, dtype=np.float64):
        """Round ``r``'s pattern over its chunks (Kitaev et al., 2020, eq 97-101): ``buckets`` and
        ``chunk`` (B, H, R, T) are each position's bucket and chunk in every round; ``queries``
        (B, H, C, m) and ``key_index`` (B, H, C, 2m) the positions of each chunk and of it with
        the previous one; ``has_previous`` (C, 2m) False on the first chunk's missing previous.

        Returns ``allowed`` (B, H, C, m, 2m): same bucket in round r (and not a later key when
        ``causal``), and the score bias in ``dtype`` (that of the scores it is added to, so that
        the softmax reads no wider numbers than it computes): -``self_penalty`` on a query's own
        position, and -log N_ij, N_ij the rounds in which the pair shares a bucket within
        neighbouring chunks."""
        batch, heads = queries.shape[:2]

        def at(values, index):     # values (B, H, R, time) at positions index -> (..., R)
            flat = index.reshape(batch, heads, 1, -1)
            picked = np.take_along_axis(values, np.broadcast_to(
                flat, (batch, heads, values.shape[2], flat.shape[-1])), axis=-1)
            return np.moveaxis(picked, 2, -1).reshape(index.shape + (values.shape[2],))

        query_buckets, key_buckets = at(buckets, queries), at(buckets, key_index)
        query_chunks, key_chunks = at(chunk, queries), at(chunk, key_index)
        shared = query_buckets[..., :, None, :] == key_buckets[..., None, :, :]
        near = ((key_chunks[..., None, :, :] <= query_chunks[..., :, None, :])
                & (key_chunks[..., None, :, :] >= query_chunks[..., :, None, :] - 1))
        found = (shared & near).sum(axis=-1)                          # N_ij over the rounds
        allowed = shared[..., r] & has_previous[None, None, :, None, :]
        if causal:
            allowed &= key_index[..., None, :] <= queries[..., :, None]
        itself = key_index[..., None, :] == queries[..., :, None]
        return allowed, (-self_penalty * itself - np.log(np.maximum(found, 1))).astype(dtype)

    # ---- causal linear attention (the Performer's prefix sums) ----------------------------------
    def causal_linear_attention(self, qf, kf, v, chunk):
        """out_i = qf_i S_i / (qf_i . z_i) with S_i = sum_{j<=i} kf_j v_j^T, z_i = sum_{j<=i} kf_j,
        on (B, H, T, m) features and (B, H, T, d_v) values, ``chunk`` positions at a time: the
        masked (chunk x chunk) product inside a chunk, the running sums of the earlier ones.
        Returns out and the state (out, denominators) for the backward."""
        xp = self.xp
        batch, heads, time, width = qf.shape
        state = xp.zeros((batch, heads, width, v.shape[-1]), dtype=v.dtype)
        normaliser = xp.zeros((batch, heads, width, 1), dtype=v.dtype)
        out = xp.empty(qf.shape[:3] + v.shape[3:], dtype=v.dtype)
        den = xp.empty(qf.shape[:3] + (1,), dtype=v.dtype)
        for start in range(0, time, chunk):
            window = slice(start, start + chunk)
            qc, kc, vc = qf[:, :, window], kf[:, :, window], v[:, :, window]
            local = xp.tril(self.matmul(qc, kc.swapaxes(-1, -2)))
            den[:, :, window] = local.sum(axis=-1, keepdims=True) + self.matmul(qc, normaliser)
            out[:, :, window] = ((self.matmul(local, vc) + self.matmul(qc, state))
                                 / den[:, :, window])
            state += self.matmul(kc.swapaxes(-1, -2), vc)
            normaliser += kc.sum(axis=2)[..., None]
        return out, (out, den)

    def causal_linear_attention_backward(self, grad, qf, kf, v, state, chunk):
        """dqf, dkf, dv of ``causal_linear_attention``. With a_i = g_i / den_i and
        b_i = -(g_i . out_i) / den_i, and M_ij = a_i . v_j + b_i for j <= i:
        dqf_i = sum_{j<=i} M_ij kf_j, dkf_j = sum_{i>=j} M_ij qf_i,
        dv_j = sum_{i>=j} (qf_i . kf_j) a_i, the earlier (later) chunks' share through running
        sums."""
        xp = self.xp
        out, den = state
        time, width = qf.shape[2], qf.shape[3]
        a = grad / den
        b = -(a * out).sum(axis=-1, keepdims=True)
        dqf, dkf, dv = xp.empty_like(qf), xp.empty_like(kf), xp.empty_like(v)
        chunks = [slice(start, start + chunk) for start in range(0, time, chunk)]
        running = xp.zeros(qf.shape[:2] + (width, v.shape[-1]), dtype=v.dtype)  # S, then R
        totals = xp.zeros(qf.shape[:2] + (1, width), dtype=v.dtype)             # z, then r
        for window in chunks:
            qc, kc, vc, ac, bc = (x[:, :, window] for x in (qf, kf, v, a, b))
            mixed = xp.tril(self.matmul(ac, vc.swapaxes(-1, -2)) + bc)
            dqf[:, :, window] = (self.matmul(mixed, kc)
                                 + self.matmul(ac, running.swapaxes(-1, -2)) + bc * totals)
            running += self.matmul(kc.swapaxes(-1, -2), vc)
            totals += kc.sum(axis=2, keepdims=True)
        running[...], totals[...] = 0, 0
        for window in reversed(chunks):
            qc, kc, vc, ac, bc = (x[:, :, window] for x in (qf, kf, v, a, b))
            mixed = xp.tril(self.matmul(ac, vc.swapaxes(-1, -2)) + bc)
            dkf[:, :, window] = (self.matmul(mixed.swapaxes(-1, -2), qc)
                                 + self.matmul(vc, running.swapaxes(-1, -2)) + totals)
            local = xp.tril(self.matmul(qc, kc.swapaxes(-1, -2)))
            dv[:, :, window] = (self.matmul(local.swapaxes(-1, -2), ac)
                                + self.matmul(kc, running))
            running += self.matmul(qc.swapaxes(-1, -2), ac)
            totals += (bc * qc).sum(axis=2, keepdims=True)
        return dqf, dkf, dv


def group_rows(batch, heads, time, index):
    """Positions ``index`` (b|1, h|1, G, S) as the rows of a (batch * heads * time, d) view,
    one line per (batch, head, group) unit: (batch * heads * G, S) NumPy ints."""
    return pair_rows(batch, heads, time, index).reshape(-1, index.shape[-1])


def pair_rows(batch, heads, time, index):
    """Positions ``index`` (b|1, h|1, ...) as row numbers of a (batch * heads * time, d) view of
    a (batch, heads, time, d) array: (batch, heads, ...) NumPy ints."""
    index = np.broadcast_to(index, (batch, heads) + index.shape[2:])
    base = (np.arange(batch)[:, None] * heads + np.arange(heads)[None, :]) * time
    return base.reshape((batch, heads) + (1,) * (index.ndim - 2)) + index
