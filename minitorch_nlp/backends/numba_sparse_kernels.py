"""Compiled kernels of the sparse attention patterns (``numba_backend.py`` calls them).

Grouped attention is the engine under every sparse pattern (``attention/grouped.py``): group g
of a (batch, head) pair is a few queries ``query_index[g]`` attending a few keys
``key_index[g]``. Its algorithm is the NumPy backend's (``NumpyBackend.grouped_attention``):
blocks of groups whose rows are gathered into contiguous arrays, so that every product of
queries, keys, values and their gradients is a batched BLAS product. These kernels are the
elementwise steps between the products, which NumPy would do in several passes with
temporaries:

* ``grouped_softmax``: in place on a block's scaled scores, the pattern's ``allowed``, the key
  mask gathered at the group's keys and the constant bias (all read through broadcast views,
  never copied to the scores' shape), the softmax and each query's log-sum-exp (-inf, with
  probabilities 0, for a query that sees no key); in parallel over query rows;
* ``grouped_score_gradients``: in place, the probabilities' gradient turned into the scores',
  p (dp - sum p dp + g_lse) * scale; in parallel over rows.

The row gradients are added back into q, k and v by ``numba_kernels.scatter_add_rows``.
``lsh_chunk_masks`` builds LSH's round masks and pair counts. The conventions (C-contiguous
inputs shaped by the caller, outputs allocated by the caller, the ``parallel`` switch, float64
sums, the exponentials of ``_exponentiate``) are those of ``numba_kernels``.
"""
from __future__ import annotations

import math

from numba import prange

from .numba_kernels import _exponentiate, _kernel, _rows


@_rows
def _group_softmax_row(scores, first, allowed, real, bias, lse, row):
    per_query, per_key = scores.shape[1], scores.shape[2]
    n, i = row // per_query, row % per_query
    heads, groups = allowed.shape[1], allowed.shape[2]
    unit = first + n
    b, h, g = unit // (heads * groups), unit // groups % heads, unit % groups
    line, added = scores[n, i], bias[b, h, g, i]
    seen, keys_real = allowed[b, h, g, i], real[b, h, g]
    minus_inf = scores.dtype.type(-math.inf)
    top = minus_inf
    for j in range(per_key):
        s = minus_inf
        if seen[j] and keys_real[j]:
            s = scores.dtype.type(line[j] + added[j])   # a float64 bias too
        line[j] = s
        top = max(top, s)
    if top == minus_inf:              # no visible key: probabilities 0, log-sum-exp -inf
        for j in range(per_key):
            line[j] = 0
        lse[n, i] = minus_inf
        return
    total = _exponentiate(line, top)
    lse[n, i] = top + math.log(total)
    inv = scores.dtype.type(1.0 / total)
    for j in range(per_key):
        line[j] *= inv


@_kernel
def grouped_softmax(parallel, scores, first, allowed, real, bias, lse):
    """In place, the scaled scores (U, Q, K) of units ``first`` .. ``first`` + U (unit =
    (batch * heads + head) * groups + group) -> probabilities, in parallel over query rows:
    ``bias`` added, keys hidden where ``allowed`` (B, H, G, Q, K) or ``real`` (B, H, G, K)
    (broadcast views) is False; the log-sum-exps into ``lse`` (U, Q)."""
    rows = scores.shape[0] * scores.shape[1]
    if parallel:
        for row in prange(rows):
            _group_softmax_row(scores, first, allowed, real, bias, lse, row)
    else:
        for row in range(rows):
            _group_softmax_row(scores, first, allowed, real, bias, lse, row)


@_rows
def _group_score_gradients_row(probs, dprobs, grad_lse, scale, row):
    p, dp = probs[row], dprobs[row]
    dot = 0.0
    for j in range(p.shape[0]):
        dot += p[j] * dp[j]
    shift = dprobs.dtype.type(dot - grad_lse[row])
    for j in range(p.shape[0]):
        dp[j] = (dp[j] - shift) * p[j] * scale


@_kernel
def grouped_score_gradients(parallel, probs, dprobs, grad_lse, scale):
    """In place, dprobs (rows, K) -> p * (dp - sum p dp + g_lse) * scale, the gradient of the
    scaled scores, ``grad_lse`` (rows,) the log-sum-exps' gradient; in parallel over rows."""
    if parallel:
        for row in prange(probs.shape[0]):
            _group_score_gradients_row(probs, dprobs, grad_lse, scale, row)
    else:
        for row in range(probs.shape[0]):
            _group_score_gradients_row(probs, dprobs, grad_lse, scale, row)


# The CUDA backend's position-gradient kernel (``cuda_sparse_kernels``) compiles this loop body as
# a device function; the CPU backends add the rows of each block of groups instead
# (``NumpyBackend._add_rows``).
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


@_rows
def _lsh_query(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
               allowed, bias, b, h, c, i):
    """Query i of chunk c of pair (b, h) against the chunk's keys: the body that the CUDA kernel
    (``cuda_sparse_kernels``) compiles as a device function, one GPU thread per query."""
    keys = key_index[b, h, c]
    round_buckets = buckets[b, h, r]
    t = queries[b, h, c, i]
    seen, counts = allowed[b, h, c, i], bias[b, h, c, i]
    own = round_buckets[t]
    for j in range(keys.shape[0]):
        u = keys[j]
        seen[j] = round_buckets[u] == own and has_previous[c, j] and not (causal and u > t)
        counts[j] = 0
    if buckets.shape[2] > 1:      # N_ij: with one round it is at most 1, and -log 1 = 0
        for rr in range(buckets.shape[2]):
            bucket_t, chunk_t = buckets[b, h, rr, t], chunk[b, h, rr, t]
            other_buckets, other_chunks = buckets[b, h, rr], chunk[b, h, rr]
            for j in range(keys.shape[0]):
                u = keys[j]
                if (other_buckets[u] == bucket_t
                        and chunk_t - 1 <= other_chunks[u] <= chunk_t):
                    counts[j] += 1
        for j in range(keys.shape[0]):
            counts[j] = -math.log(counts[j]) if counts[j] > 1 else 0.0
    for j in range(keys.shape[0]):
        if keys[j] == t:
            counts[j] -= self_penalty


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
    share a bucket within neighbouring chunks are taken round by round into the bias, with no
    (..., R) array (and not at all with one round, where -log N_ij is 0)."""
    units = queries.shape[0] * queries.shape[1] * queries.shape[2]
    if parallel:
        for unit in prange(units):
            _lsh_chunk(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
                       allowed, bias, unit)
    else:
        for unit in range(units):
            _lsh_chunk(buckets, chunk, queries, key_index, has_previous, r, causal, self_penalty,
                       allowed, bias, unit)
