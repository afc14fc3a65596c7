"""Reference maths for the Sparse Transformer (Child et al., 2019), the survey's section IX-A,
eq 92-95, in ``autograd.numpy``: the references of ``tests/test_sec9_sparse_transformer.py``.

Written from the paper's set definitions, one query at a time: each index set A_i is a Python
set built by looping over j, and attention is the textbook softmax over the members of the set
(shifted by their largest score) (no grouping, no log-sum-exp merging, no padding), so it shares
nothing with the library's grouped computation.
"""
from __future__ import annotations

import autograd.numpy as anp
from autograd.tracer import getval


def strided_sets(time, stride):
    """A^(1)_i = {t, ..., i} with t = max(0, i - l); A^(2)_i = {j <= i : (i - j) mod l = 0}."""
    first = [set(range(max(0, i - stride), i + 1)) for i in range(time)]
    second = [{j for j in range(i + 1) if (i - j) % stride == 0} for i in range(time)]
    return first, second


def fixed_sets(time, stride, summary):
    """A^(1)_i = {j <= i : floor(j / l) = floor(i / l)}; A^(2)_i = {j <= i : j mod l in
    {l - c, ..., l - 1}} (Child et al., section 4.2, with c summary positions)."""
    first = [{j for j in range(i + 1) if j // stride == i // stride} for i in range(time)]
    second = [{j for j in range(i + 1) if j % stride >= stride - summary} for i in range(time)]
    return first, second


def eq92_attend(q, k, v, sets, key_mask_row=None):
    """attend(X, S)_i = sum_{j in S_i} exp(q_i . k_j / sqrt(d)) v_j / sum_{j in S_i}
    exp(q_i . k_j / sqrt(d)) for one head, ``q`` (n_q, d), ``k``, ``v`` (n, d): the queries are
    the last n_q of the n positions (all of them, or the newest while decoding with a cache), so
    query i sits at position n - n_q + i and attends S_{n - n_q + i}. Padded keys
    (``key_mask_row`` False) leave the set; a query with an empty set outputs zeros. Each
    exponent is taken relative to the set's largest score (the same ratios, no overflow)."""
    d = q.shape[-1]
    offset = k.shape[0] - q.shape[0]
    rows = []
    for i in range(q.shape[0]):
        members = [j for j in sorted(sets[offset + i])
                   if key_mask_row is None or key_mask_row[j]]
        if not members:
            rows.append(0.0 * q[i])
            continue
        scores = [anp.sum(q[i] * k[j]) / anp.sqrt(d) for j in members]
        top = max(getval(score) for score in scores)
        weights = [anp.exp(score - top) for score in scores]
        total = sum(weights)
        rows.append(sum(w * v[j] for w, j in zip(weights, members)) / total)
    return anp.stack(rows)


def eq93_alternating(q, k, v, factors, block, key_mask_row=None):
    """Residual block r attends A^(r mod p) (eq 93, the blocks counted from 0 and the factors
    from 1: block r uses factor r mod 2 + 1)."""
    return eq92_attend(q, k, v, factors[block % len(factors)], key_mask_row)


def eq94_merged(q, k, v, factors, key_mask_row=None):
    """attend(X, union_m A^(m)) (eq 94)."""
    union = [set().union(*(factor[i] for factor in factors)) for i in range(k.shape[0])]
    return eq92_attend(q, k, v, union, key_mask_row)


def eq95_heads(q, k, v, factors, key_mask_row=None):
    """Head h attends A^(h mod p + 1) (eq 95); ``q``, ``k``, ``v`` are (heads, n, d)."""
    return anp.stack([eq92_attend(q[h], k[h], v[h], factors[h % len(factors)], key_mask_row)
                      for h in range(q.shape[0])])
