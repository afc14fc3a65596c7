"""Compiled kernels of causal linear attention (the Performer's causal FAVOR+; ``numba_backend.py``
calls them).

With feature maps phi(q_i), phi(k_j) (m features) the causal output is

    out_i = phi(q_i) S_i / (phi(q_i) . z_i),
    S_i = sum_{j<=i} phi(k_j) v_j^T,  z_i = sum_{j<=i} phi(k_j)

The kernels keep S and z as running sums, one (batch, head) pair per thread, so the state is
O(m d_v) per pair and nothing grows with n. The backward runs forward in time for the query
gradients (S_i a_i + z_i b_i, with a_i = g_i / den_i and b_i = -(g_i . out_i) / den_i), then
backward in time with the reverse running sums R_j = sum_{i>=j} phi(q_i) a_i^T and
r_j = sum_{i>=j} b_i phi(q_i) for the key and value gradients (R_j v_j + r_j and R_j^T phi(k_j)).
Conventions (caller-shaped C-contiguous inputs, caller-allocated outputs, the ``parallel`` switch,
float64 sums) are those of ``numba_kernels``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .numba_kernels import _kernel, _rows


@_rows
def _causal_linear_pair(qf, kf, v, out, den, p):
    width, values = qf.shape[2], v.shape[2]
    state = np.zeros((width, values))
    normaliser = np.zeros(width)
    numerator = np.empty(values)
    for i in range(qf.shape[1]):
        for f in range(width):
            normaliser[f] += kf[p, i, f]
            for e in range(values):
                state[f, e] += kf[p, i, f] * v[p, i, e]
        total = 0.0
        for f in range(width):
            total += qf[p, i, f] * normaliser[f]
        den[p, i] = total
        numerator[:] = 0
        for f in range(width):              # rows of the state, so the inner loop is contiguous
            for e in range(values):
                numerator[e] += qf[p, i, f] * state[f, e]
        for e in range(values):
            out[p, i, e] = numerator[e] / total if total != 0 else math.nan


@_kernel
def causal_linear_attention_forward(parallel, qf, kf, v, out, den):
    """qf, kf (pairs, T, m), v (pairs, T, d_v) -> out (pairs, T, d_v) and den (pairs, T), the
    denominators phi(q_i) . z_i that the backward needs."""
    if parallel:
        for p in prange(qf.shape[0]):
            _causal_linear_pair(qf, kf, v, out, den, p)
    else:
        for p in range(qf.shape[0]):
            _causal_linear_pair(qf, kf, v, out, den, p)


@_rows
def _output_gradients(grad, out, den, p, i, a):
    """a = g_i / den_i, written into ``a``; returns b = -(g_i . out_i) / den_i."""
    inv = 1.0 / den[p, i] if den[p, i] != 0 else math.nan
    b = 0.0
    for e in range(a.shape[0]):
        a[e] = grad[p, i, e] * inv
        b -= a[e] * out[p, i, e]
    return b


@_rows
def _causal_linear_backward_pair(grad, qf, kf, v, out, den, dqf, dkf, dv, p):
    time, width, values = qf.shape[1], qf.shape[2], v.shape[2]
    a = np.empty(values)
    column = np.empty(values)
    running = np.zeros((width, values))
    totals = np.zeros(width)
    for i in range(time):                       # dqf_i = S_i a_i + z_i b_i
        for f in range(width):
            totals[f] += kf[p, i, f]
            for e in range(values):
                running[f, e] += kf[p, i, f] * v[p, i, e]
        b = _output_gradients(grad, out, den, p, i, a)
        for f in range(width):
            acc = b * totals[f]
            for e in range(values):
                acc += running[f, e] * a[e]
            dqf[p, i, f] = acc
    running[:] = 0
    totals[:] = 0
    for j in range(time - 1, -1, -1):           # R_j, r_j over the queries i >= j
        b = _output_gradients(grad, out, den, p, j, a)
        for f in range(width):
            totals[f] += b * qf[p, j, f]
            for e in range(values):
                running[f, e] += qf[p, j, f] * a[e]
        for f in range(width):
            acc = totals[f]
            for e in range(values):
                acc += running[f, e] * v[p, j, e]
            dkf[p, j, f] = acc
        column[:] = 0
        for f in range(width):
            for e in range(values):
                column[e] += running[f, e] * kf[p, j, f]
        for e in range(values):
            dv[p, j, e] = column[e]


@_kernel
def causal_linear_attention_backward(parallel, grad, qf, kf, v, out, den, dqf, dkf, dv):
    """The gradients of ``causal_linear_attention_forward`` with respect to qf, kf and v."""
    if parallel:
        for p in prange(qf.shape[0]):
            _causal_linear_backward_pair(grad, qf, kf, v, out, den, dqf, dkf, dv, p)
    else:
        for p in range(qf.shape[0]):
            _causal_linear_backward_pair(grad, qf, kf, v, out, den, dqf, dkf, dv, p)
