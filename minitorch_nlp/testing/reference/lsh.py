"""Reference maths for the Reformer's LSH attention (Kitaev et al., 2020), the survey's section
IX-B, eq 96-103, in ``autograd.numpy``: the reference of ``tests/test_sec9_reformer.py``.

Eq 100 read directly: for each query the set P_i is built position by position (hash by loops,
the sorted order by Python's ``sorted`` on (bucket, position) pairs, the chunk windows of eq 99,
the union over rounds of eq 98), then one textbook softmax over P_i; no per-round attention, no
log-sum-exp merging, no duplicate counts.
"""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np


def lsh_buckets(x, rotation):
    """h(x) = argmax([x R; -x R]) for each row of ``x`` (n, d), ``rotation`` (d, b / 2)."""
    buckets = []
    for row in np.asarray(x):
        rotated = [float(np.dot(row, rotation[:, c])) for c in range(rotation.shape[1])]
        both = rotated + [-value for value in rotated]
        buckets.append(max(range(len(both)), key=lambda c: (both[c], -c)))
    return buckets


def lsh_sets(x, rotations, chunk_length, causal=False, key_mask_row=None, num_buckets=2):
    """P_i = union_r {j : h^(r)(x_i) = h^(r)(x_j), floor(s_i / m) - 1 <= floor(s_j / m) <=
    floor(s_i / m)} (eq 98-99), j <= i when causal, real keys only; i itself only when P_i has
    nothing else."""
    n = len(x)
    sets = [set() for _ in range(n)]
    for rotation in rotations:
        buckets = lsh_buckets(x, rotation) if num_buckets > 1 else [0] * n
        order = sorted(range(n), key=lambda i: (buckets[i], i))
        place = {position: s for s, position in enumerate(order)}
        for i in range(n):
            for j in range(n):
                same = buckets[i] == buckets[j]
                near = place[i] // chunk_length - 1 <= place[j] // chunk_length \
                    <= place[i] // chunk_length
                if same and near and (not causal or j <= i) and (
                        key_mask_row is None or key_mask_row[j]):
                    sets[i].add(j)
    return [members - {i} if members - {i} else members for i, members in enumerate(sets)]


def eq100_lsh_attention(q, v, sets):
    """o_i = sum_{j in P_i} exp(q_i . k_j / sqrt(d) - z(i, P_i)) v_j with shared-QK keys
    k_j = q_j / |q_j| (eq 96-97, 100; the paper scales the scores as Vaswani et al.). A query
    with an empty set outputs zeros."""
    d = q.shape[-1]
    keys = [q[j] / anp.sqrt(anp.sum(q[j] * q[j])) for j in range(q.shape[0])]
    rows = []
    for i in range(q.shape[0]):
        members = sorted(sets[i])
        if not members:                       # every key padding: the output is zero
            rows.append(0.0 * v[i])
            continue
        weights = [anp.exp(anp.sum(q[i] * keys[j]) / anp.sqrt(d)) for j in members]
        rows.append(sum(w * v[j] for w, j in zip(weights, members)) / sum(weights))
    return anp.stack(rows)
