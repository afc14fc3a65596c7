"""The NumPy backend: the default, and the reference every other backend is tested against.

Its kernels are written as plain vectorised NumPy, reusing buffers where that saves a pass over
memory (a fresh multi-megabyte temporary costs page faults on every call).
"""
from __future__ import annotations

import math

import numpy as np

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_TANH_C = 0.044715

_erf_ufunc = None


def _compiled_erf():
    """``math.erf`` as a NumPy ufunc, compiled by Numba once and cached on disk (NumPy has no erf)."""
    global _erf_ufunc
    if _erf_ufunc is None:
        import numba

        @numba.vectorize(["float32(float32)", "float64(float64)"], cache=True)
        def erf(x):
            return math.erf(x)

        _erf_ufunc = erf
    return _erf_ufunc


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

    def __repr__(self):
        return f"<backend {self.name}>"

    def asarray(self, obj, dtype=None):
        return np.asarray(obj, dtype=dtype)

    def to_numpy(self, array):
        return np.asarray(array)

    def erf(self, x):
        return _compiled_erf()(x)

    # ---- softmax family (last-axis or any axis) -------------------------------------------
    def softmax(self, x, axis):
        y = np.subtract(x, _max_for_shift(x, axis))
        np.exp(y, out=y)
        total = y.sum(axis=axis, keepdims=True)
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
        total = np.exp(shifted).sum(axis=axis, keepdims=True)
        total[total == 0] = 1  # all -inf row: log-probabilities stay -inf, no NaN
        shifted -= np.log(total)
        return shifted

    def log_softmax_backward(self, y, grad, axis):
        out = np.exp(y)
        out *= grad.sum(axis=axis, keepdims=True)
        np.subtract(grad, out, out=out)
        return out

    # ---- layer norm over the last axis -------------------------------------------------------
    def layer_norm(self, x, weight, bias, eps):
        mean = x.mean(axis=-1, keepdims=True)
        xhat = np.subtract(x, mean)
        var = np.einsum("...i,...i->...", xhat, xhat)[..., None] / x.shape[-1]
        rstd = 1.0 / np.sqrt(var + eps)
        xhat *= rstd.astype(x.dtype, copy=False)
        if weight is None:
            y = xhat.copy()
        else:
            y = xhat * weight
        if bias is not None:
            y += bias
        return y, xhat, rstd.astype(x.dtype, copy=False)

    def layer_norm_backward(self, grad, xhat, rstd, weight):
        g2 = grad.reshape(-1, grad.shape[-1])
        x2 = xhat.reshape(-1, xhat.shape[-1])
        dweight = np.einsum("ni,ni->i", g2, x2) if weight is not None else None
        dbias = g2.sum(axis=0)
        dxhat = grad * weight if weight is not None else grad.copy()
        n = grad.shape[-1]
        mean_dxhat = dxhat.mean(axis=-1, keepdims=True)
        mean_dxhat_xhat = np.einsum("...i,...i->...", dxhat, xhat)[..., None] / n
        dxhat -= mean_dxhat
        dxhat -= xhat * mean_dxhat_xhat
        dxhat *= rstd
        return dxhat, dweight, dbias

    # ---- GELU ---------------------------------------------------------------------------------
    def gelu(self, x, approximate):
        if approximate == "tanh":
            inner = x * x
            inner *= _GELU_TANH_C
            inner += 1
            inner *= x
            inner *= _SQRT_2_OVER_PI
            np.tanh(inner, out=inner)
        else:
            inner = self.erf(x * (1.0 / math.sqrt(2.0)))
        inner += 1
        inner *= x
        inner *= 0.5
        return inner

    def gelu_backward(self, x, grad, approximate):
        if approximate == "tanh":
            x2 = x * x
            t = x2 * _GELU_TANH_C
            t += 1
            t *= x
            t *= _SQRT_2_OVER_PI
            np.tanh(t, out=t)
            # d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3c x^2)
            du = x2
            du *= 3 * _GELU_TANH_C
            du += 1
            du *= _SQRT_2_OVER_PI * 0.5
            du *= x
            one_minus_t2 = 1 - t * t
            du *= one_minus_t2
            t += 1
            t *= 0.5
            t += du
            t *= grad
            return t
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
        cdf *= grad
        return cdf

    # ---- scatter-add of rows (embedding / gather gradients) -----------------------------------
    def scatter_add_rows(self, index, src, num_rows):
        """``out[index[k]] += src[k]`` for rows ``k``; duplicates add up (replaces ``np.add.at``)."""
        flat = index.reshape(-1)
        rows = src.reshape(flat.size, -1)
        out = np.zeros((num_rows, rows.shape[1]), dtype=src.dtype)
        if flat.size == 0:
            return out
        order = np.argsort(flat, kind="stable")
        sorted_index = flat[order]
        starts = np.flatnonzero(np.concatenate(([True], sorted_index[1:] != sorted_index[:-1])))
        out[sorted_index[starts]] = np.add.reduceat(rows[order], starts, axis=0)
        return out
