"""The compiled few-row matrix product (``numba_backend.py`` calls it for ``a @ b`` with few rows).

A decoding step multiplies a handful of rows (the batch, or beams x batch) by every weight of the
model. OpenBLAS takes such a product as a general GEMM and packs the weight into its blocked
layout on every call. When the weight is held as PyTorch's row-major ``(out, in)`` (``b`` is its
transpose, column-major), each output column is the dot products of one contiguous weight row
with the few rows of ``a``: this kernel reads each weight row once, at memory speed, while the
rows of ``a`` stay in the L1 cache. Measured at one thread, float32, 4 rows, against NumPy's
product: (4, 512) @ (512, 2048) 0.33x of its time, (4, 2048) @ (2048, 512) 0.41x, the T5 output
layer (4, 512) @ (512, 32128) 0.21x, (8, 768) @ (768, 3072) 0.17-0.49x; at 16 rows 0.8-1.2x
and at 32 rows 1.4-5.8x, where BLAS's blocking wins (``numba_backend._FEW_ROWS``).

The other layout (a row-major ``(in, out)`` ``b``) gains nothing from a kernel: summing weight
rows into tiles of output columns measured 0.76-1.07x of NumPy's time, so it stays with BLAS.

Output columns are independent and run in parallel. Each dot product is summed in the inputs'
dtype, as BLAS's are. Conventions (C-contiguous inputs, caller-allocated outputs, the
``parallel`` switch) are those of ``numba_kernels``.
"""
from __future__ import annotations

from numba import prange

from .numba_kernels import _kernel, _rows


@_rows
def _column(a, bt, out, n):
    for r in range(a.shape[0]):
        total = a.dtype.type(0)
        for k in range(a.shape[1]):
            total += a[r, k] * bt[n, k]
        out[r, n] = total


@_kernel
def few_rows_product(parallel, a, bt, out):
    """out (R, N) = a (R, K) @ bt.T, with ``bt`` (N, K): all C-contiguous."""
    if parallel:
        for n in prange(bt.shape[0]):
            _column(a, bt, out, n)
    else:
        for n in range(bt.shape[0]):
            _column(a, bt, out, n)
