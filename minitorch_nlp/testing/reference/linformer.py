"""Reference maths for Linformer (Wang et al., 2020), the survey's section IX-E, eq 111, in
``autograd.numpy``: the reference of ``tests/test_sec9_linformer.py``.

One head at a time, the projected keys and values written as explicit sums over positions.
"""
from __future__ import annotations

import autograd.numpy as anp
from autograd.tracer import getval


def eq111_linformer_head(q, k, v, e, f, key_mask_row=None):
    """head = softmax(Q (E K)^T / sqrt(d)) (F V) for one head: ``q`` (n_q, d), ``k``, ``v``
    (n, d), ``e``, ``f`` (r, n') with n' >= n (the first n columns are used). Row r of E K is
    sum_j E[r, j] k_j over the real keys j (``key_mask_row``; padding contributes nothing)."""
    d = q.shape[-1]
    real = [j for j in range(k.shape[0]) if key_mask_row is None or key_mask_row[j]]
    projected_k = anp.stack([sum((e[r, j] * k[j] for j in real), 0.0 * k[0])
                             for r in range(e.shape[0])])
    projected_v = anp.stack([sum((f[r, j] * v[j] for j in real), 0.0 * v[0])
                             for r in range(f.shape[0])])
    rows = []
    for i in range(q.shape[0]):
        scores = anp.dot(projected_k, q[i]) / anp.sqrt(d)
        weights = anp.exp(scores - anp.max(getval(scores)))   # the same ratios, no overflow
        rows.append(anp.dot(weights / anp.sum(weights), projected_v))
    return anp.stack(rows)
