"""GPU kernels of grouped attention (the engine under every sparse pattern,
``attention/grouped.py``), written with ``numba.cuda``; ``cupy_backend.py`` calls the launchers.
Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the launchers take NumPy arrays, as those
of ``cuda_kernels`` do.

The kernels read the rows in place through the index arrays (the CPU backends gather blocks of
groups for BLAS products instead, ``NumpyBackend.grouped_attention``), one GPU thread per unit:

* forward: one thread per (pair, group, query): the query's scores against its group's keys
  (read in place through the index arrays), the visible mask, the softmax and log-sum-exp, the
  weighted sum of value rows; the probabilities are kept for the backward;
* backward: one thread per (pair, group, query) turns probabilities into score gradients, then
  one thread per (pair, position) gathers dq, dk, dv from the group slots where the position is a
  query or a key (the inverse index ``numba_backend._slots_by_position`` builds by sorting), so
  every thread writes only its own rows and no atomics are needed;
* LSH's round masks (``lsh_round_masks``): one thread per (pair, chunk, query) runs the numba
  backend's loop body for one query, compiled as a device function.

The grouped kernels' index arrays are NumPy arrays (as for the NumPy backend's code) and are
copied to the device; dot products are summed in float64. The LSH masks' inputs and outputs are
arrays of the array module of ``queries`` (NumPy arrays are copied to the device and back).
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from . import numba_sparse_kernels
from .cuda_kernels import _Heads, _run, _xp
from .numba_backend import _slots_by_position


@cuda.jit(device=True)
def _unit(n, groups, per_query):
    """(pair, group, query) of thread ``n`` of a (pairs, G, Q) grid."""
    return n // (groups * per_query), (n // per_query) % groups, n % per_query


@cuda.jit(device=True)
def _index_row(index, b, h):
    """The (batch, head) row of ``index`` (b|1, h|1, G, S) that pair (b, h) uses. (Not
    ``min(b, index.shape[0] - 1)``: numba 0.66-0.68's CUDA target cannot compile two-argument
    ``min`` and ``max``, numba issue #10753.)"""
    return b % index.shape[0], h % index.shape[1]


@cuda.jit(cache=True)
def _grouped_forward_kernel(q, k, v, query_index, key_index, visible, key_mask, bias, heads,
                            scale, probs, out):
    pairs, groups, per_query, per_key = probs.shape
    n = cuda.grid(1)
    if n >= pairs * groups * per_query:
        return
    pair, g, i = _unit(n, groups, per_query)
    b, h = pair // heads, pair % heads
    qb, qh = _index_row(query_index, b, h)
    kb, kh = _index_row(key_index, b, h)
    width = v.shape[2]
    t = query_index[qb, qh, g, i]
    top = -math.inf
    for j in range(per_key):
        u = key_index[kb, kh, g, j]
        s = -math.inf
        if visible[b, h, g, i, j] and key_mask[b, u]:
            acc = 0.0
            for e in range(q.shape[2]):
                acc += q[pair, t, e] * k[pair, u, e]
            s = acc * scale + bias[b, h, g, i, j]
        probs[pair, g, i, j] = s
        if s > top:
            top = s
    for e in range(width):
        out[pair, g, i, e] = 0.0
    if top == -math.inf:              # no visible key: output 0, log-sum-exp -inf
        for j in range(per_key):
            probs[pair, g, i, j] = 0.0
        out[pair, g, i, width] = -math.inf
        return
    total = 0.0
    for j in range(per_key):
        p = math.exp(probs[pair, g, i, j] - top)
        probs[pair, g, i, j] = p
        total += p
    out[pair, g, i, width] = top + math.log(total)
    for j in range(per_key):
        p = probs[pair, g, i, j] / total
        probs[pair, g, i, j] = p
        if p != 0:
            u = key_index[kb, kh, g, j]
            for e in range(width):
                out[pair, g, i, e] += p * v[pair, u, e]


@cuda.jit(cache=True)
def _grouped_score_gradients_kernel(grad, v, key_index, probs, heads, scale, dscores):
    """dscores = p (g.v_j - sum_j p g.v_j + g_lse) * scale; ``grad`` (pairs, G, Q, d_v + 1)
    holds the log-sum-exp's gradient in its last column."""
    pairs, groups, per_query, per_key = probs.shape
    n = cuda.grid(1)
    if n >= pairs * groups * per_query:
        return
    pair, g, i = _unit(n, groups, per_query)
    kb, kh = _index_row(key_index, pair // heads, pair % heads)
    width = v.shape[2]
    dot = 0.0
    for j in range(per_key):
        dp = 0.0
        if probs[pair, g, i, j] != 0:
            u = key_index[kb, kh, g, j]
            for e in range(width):
                dp += grad[pair, g, i, e] * v[pair, u, e]
        dscores[pair, g, i, j] = dp
        dot += probs[pair, g, i, j] * dp
    shift = dot - grad[pair, g, i, width]
    for j in range(per_key):
        dscores[pair, g, i, j] = (dscores[pair, g, i, j] - shift) * probs[pair, g, i, j] * scale


# The numba backend's loop body for one (pair, position) row is plain Python with nothing
# CPU-only in it, so the GPU compiles the same function as a device function.
_position_gradients = cuda.jit(device=True)(numba_sparse_kernels._position_gradients)


@cuda.jit(cache=True)
def _grouped_position_gradients_kernel(grad, q, k, query_index, key_index, probs, dscores,
                                       query_slots, query_starts, key_slots, key_starts, heads,
                                       dq, dk, dv):
    """dq, dk, dv (pairs, T, d) of position t: ``query_slots[.., s]`` for s in
    ``query_starts[.., t] .. query_starts[.., t + 1]`` are the flat slots g * Q + i where t is a
    query (the same for keys, g * K + j)."""
    row = cuda.grid(1)
    if row < q.shape[0] * q.shape[1]:
        _position_gradients(grad, q, k, query_index, key_index, probs, dscores, query_slots,
                            query_starts, key_slots, key_starts, heads, dq, dk, dv, row)


def _host_index(index):
    """Positions (b|1, h|1, G, slots) as a C-contiguous int64 NumPy array."""
    return np.ascontiguousarray(index, dtype=np.int64)


def grouped_attention(q, k, v, query_index, key_index, allowed, key_mask, bias, scale):
    """The NumPy backend's ``grouped_attention`` on q, k, v (B, H, T, d) of one float dtype:
    (out with the log-sum-exp as last column (B, H, G, Q, d_v + 1), probabilities
    (B*H, G, Q, K) for the backward)."""
    h = _Heads(q, k, v, None)
    xp, dtype = h.xp, h.q.dtype
    batch, heads, time = q.shape[:3]
    query_index, key_index = _host_index(query_index), _host_index(key_index)
    groups, per_query, per_key = query_index.shape[2], query_index.shape[3], key_index.shape[3]
    shape = (batch, heads, groups, per_query, per_key)
    visible = h._broadcast(xp.asarray(allowed, dtype=np.bool_), shape)
    bias = h._broadcast(xp.asarray(0.0 if bias is None else bias, dtype=dtype), shape)
    mask = h._broadcast(xp.asarray(True if key_mask is None else key_mask, dtype=np.bool_),
                        (batch, time))
    probs = xp.empty((batch * heads, groups, per_query, per_key), dtype=dtype)
    out = xp.empty((batch * heads, groups, per_query, h.v.shape[2] + 1), dtype=dtype)
    _run(_grouped_forward_kernel, batch * heads * groups * per_query, h.q, h.k, h.v,
         xp.asarray(query_index), xp.asarray(key_index), visible, mask, bias, heads, float(scale),
         probs, out)
    return out.reshape(shape[:4] + (out.shape[3],)), probs


def grouped_attention_backward(grad, q, k, v, probs, query_index, key_index, scale):
    """dq, dk, dv of ``grouped_attention`` from the gradient (B, H, G, Q, d_v + 1) of its output
    and log-sum-exp column and its probabilities."""
    h = _Heads(q, k, v, None)
    xp = h.xp
    heads, time = q.shape[1], q.shape[2]
    query_index, key_index = _host_index(query_index), _host_index(key_index)
    device_query_index, device_key_index = xp.asarray(query_index), xp.asarray(key_index)
    grad = xp.ascontiguousarray(xp.asarray(grad, dtype=probs.dtype)).reshape(
        probs.shape[:3] + (grad.shape[-1],))
    dscores = xp.empty_like(probs)
    units = probs.shape[0] * probs.shape[1] * probs.shape[2]
    _run(_grouped_score_gradients_kernel, units, grad, h.v, device_key_index, probs, heads,
         float(scale), dscores)
    slots = [xp.asarray(a) for index in (query_index, key_index)
             for a in _slots_by_position(index, time)]
    dq, dk, dv = xp.empty_like(h.q), xp.empty_like(h.k), xp.empty_like(h.v)
    _run(_grouped_position_gradients_kernel, h.q.shape[0] * time, grad, h.q, h.k,
         device_query_index, device_key_index, probs, dscores, *slots, heads, dq, dk, dv)
    return h.unflatten(dq), h.unflatten(dk), h.unflatten(dv)


# As for the position gradients: the numba backend's body for one query, compiled for the GPU.
_lsh_query = cuda.jit(device=True)(numba_sparse_kernels._lsh_query)


@cuda.jit(cache=True)
def _lsh_masks_kernel(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
                      allowed, bias):
    heads, chunks, per_chunk = queries.shape[1], queries.shape[2], queries.shape[3]
    n = cuda.grid(1)
    if n < queries.shape[0] * heads * chunks * per_chunk:
        pair, c, i = _unit(n, chunks, per_chunk)
        _lsh_query(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
                   allowed, bias, pair // heads, pair % heads, c, i)


def lsh_round_masks(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
                    dtype=np.float64):
    """The NumPy backend's ``lsh_round_masks`` (read its docstring) on arrays of one array module:
    ``buckets`` and ``chunk`` (B, H, R, T), ``queries`` (B, H, C, m), ``key_index``
    (B, H, C, 2m), ``has_previous`` (C, 2m). Returns ``allowed`` (bool) and the score bias
    (``dtype``, float32 or float64), (B, H, C, m, 2m) each, in that array module."""
    xp = _xp(queries)
    buckets, chunk, queries, key_index = (xp.ascontiguousarray(a, dtype=np.int64)
                                          for a in (buckets, chunk, queries, key_index))
    shape = queries.shape + key_index.shape[3:]
    allowed, bias = xp.empty(shape, dtype=np.bool_), xp.empty(shape, dtype=dtype)
    _run(_lsh_masks_kernel, queries.size, buckets, chunk, queries, key_index,
         xp.ascontiguousarray(has_previous, dtype=np.bool_), int(r), bool(causal),
         float(self_penalty), allowed, bias)
    return allowed, bias
