"""Reference maths for the Reformer's attention as HuggingFace computes it (``models/reformer.py``:
``ReformerLSHAttention`` and ``ChunkedLocalAttention``), in ``autograd.numpy``, for one sequence
and one head at a time: the reference of ``tests/test_sec9_reformer_model.py``.

Written from HuggingFace's description rather than from our grouped attention: the key lists
are built position by position with Python lists (the rounds' sorted orders laid one after
another, each chunk's neighbours found by modular arithmetic, duplicates kept), then one
textbook softmax per query and round with masks applied by multiplication, and the rounds
weighted by their partition functions. A query's own position counts only when it has no other
key; a round where it has no other key gets no weight unless every round is like that.
"""
from __future__ import annotations

import math

import autograd.numpy as anp

from .lsh import lsh_buckets

__all__ = ["chunked_attention", "eq100_hf_lsh_attention", "factored_buckets", "local_attention",
           "local_key_lists", "lsh_key_lists"]

NORM_EPSILON = 1e-6


def factored_buckets(x, rotation, factors):
    """Each row's bucket under a factorised hash: the columns of ``rotation`` (d, sum(factors) /
    2) cut in pieces of b / 2, a bucket in [0, b) from each piece, read as a mixed-radix number
    (the first factor the lowest digit)."""
    buckets, radix, start = [0] * len(x), 1, 0
    for factor in factors:
        digits = lsh_buckets(x, rotation[:, start:start + factor // 2])
        buckets = [b + radix * digit for b, digit in zip(buckets, digits)]
        radix, start = radix * factor, start + factor // 2
    return buckets


def lsh_key_lists(x, rotation, chunk_length, chunks_before=1, chunks_after=0,
                  key_mask_row=None, factors=(2,)):
    """For each round r and position i, the key positions (repeats kept) that i's chunk sees:
    the rounds' orders sorted by (bucket, position) laid end to end, cut in chunks of
    ``chunk_length``, each chunk with ``chunks_before`` chunks back and ``chunks_after`` ahead,
    counted round the ends. ``x`` (n, d) values, ``rotation`` (d, rounds, sum(factors) / 2);
    padded positions (``key_mask_row`` False) hash to the extra bucket prod(factors). A sequence no
    longer than a chunk: every position, once, in one round. ``factors``: the bucket counts of
    a factorised hash (one entry: a plain hash)."""
    n = len(x)
    if n <= chunk_length:
        return [[list(range(n)) for _ in range(n)]]
    laid = []
    for r in range(rotation.shape[1]):
        buckets = factored_buckets(x, rotation[:, r, :], factors)
        if key_mask_row is not None:
            buckets = [b if key_mask_row[i] else math.prod(factors)
                       for i, b in enumerate(buckets)]
        laid += sorted(range(n), key=lambda i: (buckets[i], i))
    count = len(laid) // chunk_length
    lists = [[None] * n for _ in range(rotation.shape[1])]
    for place, i in enumerate(laid):
        chunk = place // chunk_length
        seen = []
        for shift in range(-chunks_before, chunks_after + 1):
            other = (chunk + shift) % count
            seen += laid[other * chunk_length:(other + 1) * chunk_length]
        lists[place // n][i] = seen
    return lists


def local_key_lists(n, chunk_length, chunks_before=1, chunks_after=0):
    """Position i's keys in local attention: the positions of its chunk and of the chunks
    ``chunks_before`` back and ``chunks_after`` ahead, round the ends (every position when n fits
    one chunk). One round."""
    if n <= chunk_length:
        return [[list(range(n)) for _ in range(n)]]
    count = n // chunk_length
    return [[[j for shift in range(-chunks_before, chunks_after + 1)
              for j in range(((i // chunk_length + shift) % count) * chunk_length,
                             ((i // chunk_length + shift) % count + 1) * chunk_length)]
             for i in range(n)]]


def chunked_attention(q, k, v, key_lists, causal=False, key_mask_row=None, self_only_last=False):
    """o_i = sum_r Z_ir o_ir / sum_r Z_ir with o_ir = sum_j w_ij v_j / Z_ir, w_ij = allowed_ij
    exp(q_i . k_j / sqrt(d)) over round r's key list of i, Z_ir = sum_j w_ij. ``allowed``: a real
    key, not later than i when causal, and, with ``self_only_last``, not i itself unless i has no
    other allowed key in any round (a round with only i is then left out when another round has
    more). Padded queries output zeros (HuggingFace's rows there are not compared)."""
    d = q.shape[-1]
    rows = []
    for i in range(q.shape[0]):
        if key_mask_row is not None and not key_mask_row[i]:
            rows.append(0.0 * v[i])
            continue

        def allowed(j, i=i):
            return (key_mask_row is None or key_mask_row[j]) and (not causal or j <= i)
        others = [any(allowed(j) and j != i for j in lists[i]) for lists in key_lists]
        partitions, outputs = [], []
        for lists, has_others in zip(key_lists, others):
            if self_only_last and not has_others and any(others):
                continue
            weights = [float(allowed(j) and not (self_only_last and has_others and j == i))
                       * anp.exp(anp.sum(q[i] * k[j]) / anp.sqrt(d)) for j in lists[i]]
            total = sum(weights)
            partitions.append(total)
            outputs.append(sum(w * v[j] for w, j in zip(weights, lists[i])) / total)
        rows.append(sum(z * o for z, o in zip(partitions, outputs)) / sum(partitions))
    return anp.stack(rows)


def eq100_hf_lsh_attention(q, v, key_lists, causal=False, key_mask_row=None):
    """HuggingFace's shared-QK LSH attention: keys k_j = q_j / sqrt(mean(q_j^2) + 1e-6) (unit
    root-mean-square), ``chunked_attention`` over ``lsh_key_lists`` with the self rule, rounds
    combined by their partition functions (eq 100, 102; no log N_ij of eq 101)."""
    keys = anp.stack([q[j] / anp.sqrt(anp.mean(q[j] * q[j]) + NORM_EPSILON)
                      for j in range(q.shape[0])])
    return chunked_attention(q, keys, v, key_lists, causal, key_mask_row, self_only_last=True)


def local_attention(q, k, v, chunk_length, chunks_before=1, chunks_after=0, causal=False,
                    key_mask_row=None):
    """HuggingFace's Reformer local attention: ``chunked_attention`` over ``local_key_lists``."""
    return chunked_attention(q, k, v, local_key_lists(q.shape[0], chunk_length, chunks_before,
                                                      chunks_after), causal, key_mask_row)

