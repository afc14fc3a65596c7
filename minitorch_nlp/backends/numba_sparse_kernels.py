"""Compiled kernels of the sparse attention patterns (``numba_backend.py`` calls them).

Grouped attention is the engine under every sparse pattern (``attention/grouped.py``): group g
of a (batch, head) pair is a few queries ``query_index[g]`` attending a few keys
``key_index[g]``. These kernels read the query, key and value rows in place through the index
arrays, so no gathered copy of k or v is ever made per group:

* the forward runs in parallel over (pair, group): the scores of each query of the group, the
  ``visible`` mask (the pattern's ``allowed`` and the key mask), the softmax and the query's
  log-sum-exp, and the weighted sum of value rows; it keeps the probabilities (O(n * keys per
  group), as the scores themselves);
* the backward first turns the probabilities into score gradients, in parallel over groups, then
  gathers dq, dk, dv in parallel over positions: each position visits the group slots where it
  is a query or a key (an inverse index built once by sorting), so every thread writes only its
  own rows and no scatter-add races.

The conventions (C-contiguous inputs shaped by the caller, outputs allocated by the caller, the
``parallel`` switch, float64 sums, ``fast_exp``) are those of ``numba_kernels``.
"""
from __future__ import annotations

import math

from numba import prange

from .numba_kernels import _kernel, _rows, fast_exp


@_rows
def _group_forward(q, k, v, query_index, key_index, visible, key_mask, bias, heads, scale, probs,
                   out, unit):
    groups = probs.shape[1]
    pair, g = unit // groups, unit % groups
    b, h = pair // heads, pair % heads
    qb, qh = min(b, query_index.shape[0] - 1), min(h, query_index.shape[1] - 1)
    kb, kh = min(b, key_index.shape[0] - 1), min(h, key_index.shape[1] - 1)
    minus_inf = q.dtype.type(-math.inf)
    width = v.shape[2]
    for i in range(probs.shape[2]):
        t = query_index[qb, qh, g, i]
        top = minus_inf
        for j in range(probs.shape[3]):
            u = key_index[kb, kh, g, j]
            s = minus_inf
            if visible[b, h, g, i, j] and key_mask[b, u]:
                acc = q.dtype.type(0)
                for e in range(q.shape[2]):
                    acc += q[pair, t, e] * k[pair, u, e]
                s = acc * scale + bias[b, h, g, i, j]
            probs[pair, g, i, j] = s
            top = max(top, s)
        for e in range(width):
            out[pair, g, i, e] = 0
        if top == minus_inf:          # no visible key: output 0, log-sum-exp -inf
            for j in range(probs.shape[3]):
                probs[pair, g, i, j] = 0
            out[pair, g, i, width] = minus_inf
            continue
        total = 0.0
        for j in range(probs.shape[3]):
            p = fast_exp(probs[pair, g, i, j] - top)
            probs[pair, g, i, j] = p
            total += p
        out[pair, g, i, width] = top + math.log(total)
        inv = q.dtype.type(1.0 / total)
        for j in range(probs.shape[3]):
            p = probs[pair, g, i, j] * inv
            probs[pair, g, i, j] = p
            if p != 0:
                u = key_index[kb, kh, g, j]
                for e in range(width):
                    out[pair, g, i, e] += p * v[pair, u, e]


@_kernel
def grouped_attention_forward(parallel, q, k, v, query_index, key_index, visible, key_mask, bias,
                              heads, scale, probs, out):
    """q, k, v (pairs, T, d); query_index (b|1, h|1, G, Q) and key_index (b|1, h|1, G, K) int64;
    visible and bias (B, H, G, Q, K) (broadcast views); key_mask (B, T). Writes probs
    (pairs, G, Q, K) and out (pairs, G, Q, d_v + 1), the log-sum-exp in the last column."""
    units = probs.shape[0] * probs.shape[1]
    if parallel:
        for unit in prange(units):
            _group_forward(q, k, v, query_index, key_index, visible, key_mask, bias, heads,
                           scale, probs, out, unit)
    else:
        for unit in range(units):
            _group_forward(q, k, v, query_index, key_index, visible, key_mask, bias, heads,
                           scale, probs, out, unit)


@_rows
def _group_score_gradients(grad, v, key_index, probs, heads, scale, dscores, unit):
    groups = probs.shape[1]
    pair, g = unit // groups, unit % groups
    b, h = pair // heads, pair % heads
    kb, kh = min(b, key_index.shape[0] - 1), min(h, key_index.shape[1] - 1)
    width = v.shape[2]
    for i in range(probs.shape[2]):
        dot = 0.0
        for j in range(probs.shape[3]):
            dp = v.dtype.type(0)
            if probs[pair, g, i, j] != 0:
                u = key_index[kb, kh, g, j]
                for e in range(width):
                    dp += grad[pair, g, i, e] * v[pair, u, e]
            dscores[pair, g, i, j] = dp
            dot += probs[pair, g, i, j] * dp
        shift = v.dtype.type(dot) - grad[pair, g, i, width]
        for j in range(probs.shape[3]):
            dscores[pair, g, i, j] = (dscores[pair, g, i, j] - shift) * probs[pair, g, i, j] * scale


@_kernel
def grouped_attention_score_gradients(parallel, grad, v, key_index, probs, heads, scale,
                                      dscores):
    """dscores = p (g.v_j - sum_j p g.v_j + g_lse) * scale per group slot; ``grad``
    (pairs, G, Q, d_v + 1) holds the log-sum-exp's gradient in its last column."""
    units = probs.shape[0] * probs.shape[1]
    if parallel:
        for unit in prange(units):
            _group_score_gradients(grad, v, key_index, probs, heads, scale, dscores, unit)
    else:
        for unit in range(units):
            _group_score_gradients(grad, v, key_index, probs, heads, scale, dscores, unit)


@_rows
def _position_gradients(grad, q, k, query_index, key_index, probs, dscores, query_slots,
                        query_starts, key_slots, key_starts, heads, dq, dk, dv, row):
    time = q.shape[1]
    pair, t = row // time, row % time
    b, h = pair // heads, pair % heads
    # the index rows by modulo (their leading axes are 1 or full), not min: this body is also
    # compiled for the GPU, where numba 0.66-0.68 cannot compile two-argument min (#10753)
    qb, qh = b % query_index.shape[0], h % query_index.shape[1]
    kb, kh = b % key_index.shape[0], h % key_index.shape[1]
    per_query, per_key = probs.shape[2], probs.shape[3]
    for e in range(q.shape[2]):
        dq[pair, t, e] = 0
        dk[pair, t, e] = 0
    for e in range(dv.shape[2]):
        dv[pair, t, e] = 0
    for s in range(query_starts[qb, qh, t], query_starts[qb, qh, t + 1]):
        slot = query_slots[qb, qh, s]
        g, i = slot // per_query, slot % per_query
        for j in range(per_key):
            ds = dscores[pair, g, i, j]
            if ds != 0:
                u = key_index[kb, kh, g, j]
                for e in range(q.shape[2]):
                    dq[pair, t, e] += ds * k[pair, u, e]
    for s in range(key_starts[kb, kh, t], key_starts[kb, kh, t + 1]):
        slot = key_slots[kb, kh, s]
        g, j = slot // per_key, slot % per_key
        for i in range(per_query):
            ds = dscores[pair, g, i, j]
            if ds != 0:
                u = query_index[qb, qh, g, i]
                for e in range(q.shape[2]):
                    dk[pair, t, e] += ds * q[pair, u, e]
            p = probs[pair, g, i, j]
            if p != 0:
                for e in range(dv.shape[2]):
                    dv[pair, t, e] += p * grad[pair, g, i, e]


@_kernel
def grouped_attention_position_gradients(parallel, grad, q, k, query_index, key_index, probs,
                                         dscores, query_slots, query_starts, key_slots,
                                         key_starts, heads, dq, dk, dv):
    """dq, dk, dv (pairs, T, d) gathered per position: ``query_slots[.., s]`` for s in
    ``query_starts[.., t] .. query_starts[.., t + 1]`` are the flat slots g * Q + i where t is a
    query (the same for keys, g * K + j)."""
    rows = q.shape[0] * q.shape[1]
    if parallel:
        for row in prange(rows):
            _position_gradients(grad, q, k, query_index, key_index, probs, dscores, query_slots,
                                query_starts, key_slots, key_starts, heads, dq, dk, dv, row)
    else:
        for row in range(rows):
            _position_gradients(grad, q, k, query_index, key_index, probs, dscores, query_slots,
                                query_starts, key_slots, key_starts, heads, dq, dk, dv, row)


@_rows
def _lsh_query(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
               allowed, bias, b, h, c, i):
    """Query i of chunk c of pair (b, h) against the chunk's keys: the body that the CUDA kernel
    (``cuda_sparse_kernels``) compiles as a device function, one GPU thread per query."""
    t = queries[b, h, c, i]
    for j in range(key_index.shape[3]):
        u = key_index[b, h, c, j]
        found = 0
        for rr in range(buckets.shape[2]):
            if (buckets[b, h, rr, t] == buckets[b, h, rr, u]
                    and chunk[b, h, rr, t] - 1 <= chunk[b, h, rr, u] <= chunk[b, h, rr, t]):
                found += 1
        allowed[b, h, c, i, j] = (buckets[b, h, r, t] == buckets[b, h, r, u]
                                  and has_previous[c, j] and not (causal and u > t))
        score = -math.log(found) if found > 1 else 0.0
        if u == t:
            score -= self_penalty
        bias[b, h, c, i, j] = score


@_rows
def _lsh_chunk(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
               allowed, bias, unit):
    chunks = queries.shape[2]
    pair, c = unit // chunks, unit % chunks
    b, h = pair // queries.shape[1], pair % queries.shape[1]
    for i in range(queries.shape[3]):
        _lsh_query(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
                   allowed, bias, b, h, c, i)


@_kernel
def lsh_chunk_masks(parallel, buckets, chunk, queries, key_index, has_previous, r, causal,
                    self_penalty, allowed, bias):
    """LSH round ``r``'s ``allowed`` and score bias (B, H, C, m, 2m) from every round's buckets
    and chunks (B, H, R, T), in parallel over (pair, chunk): the counts N_ij of rounds that
    share a bucket within neighbouring chunks are taken pair by pair, with no (..., R) array."""
    units = queries.shape[0] * queries.shape[1] * queries.shape[2]
    if parallel:
        for unit in prange(units):
            _lsh_chunk(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
                       allowed, bias, unit)
    else:
        for unit in range(units):
            _lsh_chunk(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
                       allowed, bias, unit)
