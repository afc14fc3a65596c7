"""GPU kernels of causal linear attention (the Performer's causal FAVOR+), written with
``numba.cuda``; ``cupy_backend.py`` calls the launchers. Under the CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``) the launchers take NumPy arrays, as those of ``cuda_kernels`` do.

The maths is that of ``numba_linear_kernels`` (read its docstring): running sums
S_i = sum_{j<=i} phi(k_j) v_j^T and z_i = sum_{j<=i} phi(k_j),
out_i = phi(q_i) S_i / (phi(q_i) . z_i).
One block of threads per (batch, head) pair walks the positions in order. Appending a 1 to every
value row makes z the last column of the augmented state [S | z], so that

* forward: thread e keeps column e of [S | z] (its numerator, or the denominator for the last
  column) and needs nothing from the other threads until the end, where the block divides the
  numerators by the denominators;
* backward: with a_i = g_i / den_i and b_i = -(g_i . out_i) / den_i, the query gradients are
  [S_i | z_i] (a_i, b_i) and the key gradients R_j (v_j, 1) with
  R_j = sum_{i>=j} phi(q_i) (a_i, b_i)^T:
  thread f keeps row f of either; the value gradients R_j[:, :d_v]^T phi(k_j) are column
  sums, so thread e keeps column e of R.

Each thread's share of the state lives in a float64 scratch array in global memory (its size,
the number of features m, is known only at run time), laid out so that neighbouring threads touch
neighbouring elements. Sums are float64; a zero denominator gives NaN, as on the numba backend.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from .cuda_kernels import THREADS_PER_BLOCK, _Heads, _launch


@cuda.jit(cache=True)
def _causal_linear_forward_kernel(qf, kf, v, state, out, den):
    """qf, kf (pairs, T, m), v (pairs, T, d_v) -> out (pairs, T, d_v), den (pairs, T);
    ``state`` (pairs, m, d_v + 1) float64 scratch."""
    p, t, threads = cuda.blockIdx.x, cuda.threadIdx.x, cuda.blockDim.x
    time, width, values = qf.shape[1], qf.shape[2], v.shape[2]
    for e in range(t, values + 1, threads):
        for f in range(width):
            state[p, f, e] = 0.0
        for i in range(time):
            value = v[p, i, e] if e < values else 1.0
            total = 0.0
            for f in range(width):
                state[p, f, e] += kf[p, i, f] * value
                total += qf[p, i, f] * state[p, f, e]
            if e < values:
                out[p, i, e] = total
            else:
                den[p, i] = total
    cuda.syncthreads()              # every numerator and denominator of the pair is written
    for item in range(t, time * values, threads):
        i, e = item // values, item % values
        out[p, i, e] = out[p, i, e] / den[p, i] if den[p, i] != 0 else math.nan


@cuda.jit(device=True)
def _query_weight(grad, out, den, p, i, c):
    """(a_i, b_i)[c]: g_i[c] / den_i for a value column c < d_v, -(g_i . out_i) / den_i for
    c = d_v."""
    inv = 1.0 / den[p, i] if den[p, i] != 0 else math.nan
    values = grad.shape[2]
    if c < values:
        return grad[p, i, c] * inv
    b = 0.0
    for e in range(values):
        b -= grad[p, i, e] * out[p, i, e]
    return b * inv


@cuda.jit(cache=True)
def _causal_linear_backward_kernel(grad, qf, kf, v, out, den, rows, columns, dqf, dkf, dv):
    """dqf, dkf (pairs, T, m) and dv (pairs, T, d_v) of the forward; ``rows``
    (pairs, d_v + 1, m) and ``columns`` (pairs, m, d_v) float64 scratch."""
    p, t, threads = cuda.blockIdx.x, cuda.threadIdx.x, cuda.blockDim.x
    time, width, values = qf.shape[1], qf.shape[2], v.shape[2]
    for f in range(t, width, threads):
        for c in range(values + 1):
            rows[p, c, f] = 0.0
        for i in range(time):                       # dqf_i[f] = [S_i | z_i][f] . (a_i, b_i)
            acc = 0.0
            for c in range(values + 1):
                rows[p, c, f] += kf[p, i, f] * (v[p, i, c] if c < values else 1.0)
                acc += rows[p, c, f] * _query_weight(grad, out, den, p, i, c)
            dqf[p, i, f] = acc
        for c in range(values + 1):
            rows[p, c, f] = 0.0
        for j in range(time - 1, -1, -1):           # dkf_j[f] = R_j[f] . (v_j, 1)
            acc = 0.0
            for c in range(values + 1):
                rows[p, c, f] += qf[p, j, f] * _query_weight(grad, out, den, p, j, c)
                acc += rows[p, c, f] * (v[p, j, c] if c < values else 1.0)
            dkf[p, j, f] = acc
    for e in range(t, values, threads):
        for f in range(width):
            columns[p, f, e] = 0.0
        for j in range(time - 1, -1, -1):           # dv_j[e] = sum_f R_j[f, e] kf_j[f]
            a = _query_weight(grad, out, den, p, j, e)
            acc = 0.0
            for f in range(width):
                columns[p, f, e] += qf[p, j, f] * a
                acc += columns[p, f, e] * kf[p, j, f]
            dv[p, j, e] = acc


def _threads(*widths):
    """Threads per block: enough for the widest loop, at most ``THREADS_PER_BLOCK``."""
    return max(1, min(THREADS_PER_BLOCK, max(widths)))


def causal_linear_attention(qf, kf, v):
    """out_i = qf_i S_i / (qf_i . z_i) on (B, H, T, m) features and (B, H, T, d_v) values of one
    float dtype: (out, den), den (B*H, T) the denominators the backward needs."""
    h = _Heads(qf, kf, v, None)
    pairs, time, width = h.q.shape
    values = h.v.shape[2]
    out = h.xp.empty(h.v.shape, dtype=h.v.dtype)
    den = h.xp.empty((pairs, time), dtype=h.v.dtype)
    if pairs and time:
        state = h.xp.empty((pairs, width, values + 1), dtype=np.float64)
        _launch(_causal_linear_forward_kernel, pairs, _threads(values + 1),
                (h.q, h.k, h.v, state, out, den))
    return h.unflatten(out), den


def causal_linear_attention_backward(grad, qf, kf, v, out, den):
    """dqf, dkf, dv of ``causal_linear_attention`` from the gradient of its output, its output and
    its denominators."""
    h = _Heads(qf, kf, v, None)
    pairs, time, width = h.q.shape
    values = h.v.shape[2]
    g, o = h.flatten(grad), h.flatten(out)
    dqf, dkf, dv = h.xp.empty_like(h.q), h.xp.empty_like(h.k), h.xp.empty_like(h.v)
    if pairs and time:
        rows = h.xp.empty((pairs, values + 1, width), dtype=np.float64)
        columns = h.xp.empty((pairs, width, values), dtype=np.float64)
        _launch(_causal_linear_backward_kernel, pairs, _threads(width, values),
                (g, h.q, h.k, h.v, o, h.xp.ascontiguousarray(den), rows, columns, dqf, dkf, dv))
    return h.unflatten(dqf), h.unflatten(dkf), h.unflatten(dv)
