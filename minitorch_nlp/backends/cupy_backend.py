"""The CuPy backend: arrays live on an NVIDIA GPU, fused kernels are ``numba.cuda`` kernels.

``xp`` is ``cupy``, so every engine operation runs on the GPU through CuPy's NumPy-compatible
functions, and the fused kernels of the Backend protocol launch the kernels of ``cuda_kernels``
(grouped attention and LSH's round masks: ``cuda_sparse_kernels``; causal linear attention:
``cuda_linear_kernels``) on
CuPy arrays (numba reads them through ``__cuda_array_interface__``; nothing is copied).

Attention keeps only each query row's log-sum-exp for backward (O(n) memory, not the n x n
probabilities the NumPy backend keeps), so its ``state`` differs from NumPy's; states are private
to the backend that made them.

Creating the backend checks that CuPy is installed, that it sees a GPU and that numba.cuda can
compile for it, and raises ``RuntimeError`` saying what to install otherwise.
"""
from __future__ import annotations

import numpy as np

from .numba_backend import _FLOATS, _float_dtype, _lsh_shapes_fit
from .numpy_backend import NumpyBackend

INSTALL_HINT = "the cupy backend needs an NVIDIA GPU and CuPy: pip install 'minitorch-nlp[gpu]'"


def _import_gpu_stack():
    """(cupy, cupyx.scipy.special, cuda_kernels), or RuntimeError naming what is missing."""
    try:
        import cupy
        import cupyx.scipy.special

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("CuPy sees no CUDA device")
        from numba.core import config
        from numba import cuda

        if config.ENABLE_CUDASIM:
            raise RuntimeError("numba.cuda is running its CPU simulator (NUMBA_ENABLE_CUDASIM=1); "
                               "unset it to use the GPU")
        if not cuda.is_available():
            raise RuntimeError("numba.cuda finds no usable CUDA driver or device")
        from numba.cuda.cudadrv import nvvm

        if not nvvm.is_available():
            raise RuntimeError("numba.cuda cannot find NVVM, the CUDA toolkit's compiler "
                               "(install the CUDA toolkit and set CUDA_HOME)")
        from . import cuda_kernels
    except Exception as error:  # noqa: BLE001 - any failure here means the GPU stack is unusable
        raise RuntimeError(f"{INSTALL_HINT} ({type(error).__name__}: {error})") from error
    return cupy, cupyx.scipy.special, cuda_kernels


class CupyBackend:
    """Arrays are ``cupy.ndarray``; kernels are numba.cuda kernels launched on them."""

    name = "cupy"
    widening_weights_column_major = True  # as on the NumPy backend; cuBLAS reads either

    def __init__(self, modules=None):
        """``modules`` is (array module, module with ``erf``, kernels module), by default
        (cupy, cupyx.scipy.special, cuda_kernels) once the GPU is checked. The tests pass NumPy
        (with an ``asnumpy``) as the array module to run the kernels under the CUDA simulator."""
        self.xp, self._special, self._kernels = modules or _import_gpu_stack()
        # imported here, as cuda_kernels is, so that importing this module needs no numba.cuda
        from . import cuda_linear_kernels, cuda_sparse_kernels

        self._linear_kernels, self._sparse_kernels = cuda_linear_kernels, cuda_sparse_kernels

    def __repr__(self):
        return f"<backend {self.name}>"

    def asarray(self, obj, dtype=None):
        return self.xp.asarray(obj, dtype=dtype)

    def to_numpy(self, array):
        return self.xp.asnumpy(array)

    def erf(self, x):
        return self._special.erf(x)

    def matmul(self, a, b, out=None):
        return self.xp.matmul(a, b, out=out)

    # ---- softmax family ----------------------------------------------------------------------
    def softmax(self, x, axis):
        return self._kernels.softmax(x, axis)

    def softmax_backward(self, y, grad, axis):
        return self._kernels.softmax_backward(y, grad, axis)

    def log_softmax(self, x, axis):
        return self._kernels.log_softmax(x, axis)

    def log_softmax_backward(self, y, grad, axis):
        return self._kernels.log_softmax_backward(y, grad, axis)

    # ---- layer norm, GELU ----------------------------------------------------------------------
    def layer_norm(self, x, weight, bias, eps):
        y, xhat, rstd = self._kernels.layer_norm(x, weight, bias, eps)
        return y, (xhat, rstd)

    def layer_norm_backward(self, grad, x, state, weight):
        xhat, rstd = state
        return self._kernels.layer_norm_backward(grad, xhat, rstd, weight)

    def gelu(self, x, approximate):
        return self._kernels.gelu(x, approximate)

    def gelu_backward(self, x, grad, approximate):
        return self._kernels.gelu_backward(x, grad, approximate)

    def bias_gelu(self, x, bias, approximate):
        return self._kernels.bias_gelu(x, bias, approximate)

    def bias_gelu_backward(self, x, bias, grad, approximate):
        return self._kernels.bias_gelu_backward(x, bias, grad, approximate)

    # ---- scatter-add, cross-entropy --------------------------------------------------------------
    def scatter_add_rows(self, index, src, num_rows):
        return self._kernels.scatter_add_rows(index, src, num_rows)

    def cross_entropy(self, logits, target, ignore_index, label_smoothing):
        return self._kernels.cross_entropy(logits, target, ignore_index, label_smoothing)

    def cross_entropy_backward(self, log_probs, target, grad_rows, ignore_index, label_smoothing):
        return self._kernels.cross_entropy_backward(log_probs, target, grad_rows, ignore_index,
                                                    label_smoothing)

    # ---- the Adam / AdamW update: NumPy's whole-array expressions, run by CuPy (through xp) ------
    adam_update = NumpyBackend.adam_update

    # ---- attention: the state is (log-sum-exp per query row, the forward's key mask and bias) ---
    # The backward uses the mask the forward saw (a raw array), not the ``key_mask`` it is handed.
    def attention(self, q, k, v, scale, causal, key_mask, bias=None):
        out, lse = self._kernels.attention(q, k, v, scale, causal, key_mask, bias)
        return out, (lse, key_mask, bias)

    attention_inference = NumpyBackend.attention_inference

    def attention_backward(self, grad, q, k, v, state, scale, causal, key_mask, bias_grad=False):
        lse, forward_mask, bias = state
        return self._kernels.attention_backward(grad, q, k, v, lse, scale, causal, forward_mask,
                                                bias, bias_grad)

    def band_offsets(self, window, dilation, causal):
        return self.xp.asarray(NumpyBackend.band_offsets(window, dilation, causal))

    def banded_attention(self, q, k, v, scale, window, dilation, causal, key_mask):
        out, lse = self._kernels.banded_attention(q, k, v, scale, window, dilation, causal,
                                                  key_mask)
        return out, (lse, key_mask)

    def banded_attention_backward(self, grad, q, k, v, state, scale, window, dilation, causal,
                                  key_mask):
        lse, forward_mask = state
        return self._kernels.banded_attention_backward(grad, q, k, v, lse, scale, window,
                                                       dilation, causal, forward_mask)

    # ---- grouped attention: the kernels of ``cuda_sparse_kernels`` on float32 or float64 arrays
    # (state: the (B*H, G, Q, K) probabilities); other dtypes, and a state the NumPy code made,
    # take the NumPy backend's array-module code
    def grouped_attention(self, q, k, v, query_index, key_index, allowed, key_mask, bias, scale):
        if _float_dtype(q, k, v) is None:
            return NumpyBackend.grouped_attention(self, q, k, v, query_index, key_index, allowed,
                                                  key_mask, bias, scale)
        return self._sparse_kernels.grouped_attention(q, k, v, query_index, key_index, allowed,
                                                      key_mask, bias, scale)

    def grouped_attention_backward(self, grad, q, k, v, state, query_index, key_index, scale):
        dtype = _float_dtype(q, k, v)
        if dtype is None or state.ndim != 4 or state.dtype != dtype:
            return NumpyBackend.grouped_attention_backward(self, grad, q, k, v, state,
                                                           query_index, key_index, scale)
        return self._sparse_kernels.grouped_attention_backward(grad, q, k, v, state, query_index,
                                                               key_index, scale)

    # the NumPy code's steps, which it calls on this backend's arrays
    _group_key_mask = NumpyBackend._group_key_mask
    _grouped_softmax = NumpyBackend._grouped_softmax
    _grouped_score_gradients = NumpyBackend._grouped_score_gradients
    _add_rows = NumpyBackend._add_rows
    _in_parts = NumpyBackend._in_parts

    @staticmethod
    def _task_threads(work, tasks):
        """One: the device runs the blocks' work; host threads would only queue it."""
        return 1

    # ---- causal linear attention: the prefix-sum kernels of ``cuda_linear_kernels`` on float32
    # or float64 arrays (state: out and the (B*H, T) denominators); other dtypes, and a state the
    # NumPy code made, take the NumPy backend's chunked array-module code
    def causal_linear_attention(self, qf, kf, v, chunk):
        if _float_dtype(qf, kf, v) is None:
            return NumpyBackend.causal_linear_attention(self, qf, kf, v, chunk)
        out, den = self._linear_kernels.causal_linear_attention(qf, kf, v)
        return out, (out, den)

    def causal_linear_attention_backward(self, grad, qf, kf, v, state, chunk):
        out, den = state
        if _float_dtype(qf, kf, v) is None or den.ndim != 2:
            return NumpyBackend.causal_linear_attention_backward(self, grad, qf, kf, v, state,
                                                                 chunk)
        return self._linear_kernels.causal_linear_attention_backward(
            self.xp.asarray(grad, dtype=v.dtype), qf, kf, v, out, den)

    # ---- LSH attention's round masks: the kernel of ``cuda_sparse_kernels`` on index arrays of
    # the shapes ``LSHAttention`` makes; other shapes take the NumPy backend's code
    def lsh_round_masks(self, buckets, chunk, queries, key_index, has_previous, r, causal,
                        self_penalty, dtype=np.float64):
        if (np.dtype(dtype) not in _FLOATS
                or not _lsh_shapes_fit(buckets, chunk, queries, key_index, has_previous)):
            return NumpyBackend.lsh_round_masks(buckets, chunk, queries, key_index, has_previous,
                                                r, causal, self_penalty, dtype)
        return self._sparse_kernels.lsh_round_masks(buckets, chunk, queries, key_index,
                                                    has_previous, r, causal, self_penalty, dtype)

    # ---- low-precision products -------------------------------------------------------------
    def matmul_int8(self, a, b):
        return self._kernels.matmul_int8(a, b)

    def pack_signs(self, x):
        return self._kernels.pack_signs(x)

    def binary_matmul(self, a_bits, b_bits, k):
        return self._kernels.binary_matmul(a_bits, b_bits, k)
