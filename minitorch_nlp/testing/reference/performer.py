"""Reference maths for the Performer's FAVOR+ (Choromanski et al., 2021), the survey's section
IX-E, in ``autograd.numpy``: the references of ``tests/test_sec9_performer.py``.

The random-feature map and the estimated attention written as the paper states them, query by
query and key by key, with no stabilising shifts, no chunked prefix sums and no reassociation
of the products: out_i = sum_j K(q_i, k_j) v_j / sum_j K(q_i, k_j) with K the feature product.
"""
from __future__ import annotations

import autograd.numpy as anp


def positive_features(x, features):
    """phi(x) = exp(-|x|^2 / 2) / sqrt(m) (exp(w_1 . x), ..., exp(w_m . x)) for one vector x."""
    m = features.shape[0]
    return anp.exp(-anp.sum(x * x) / 2) / anp.sqrt(m) * anp.stack(
        [anp.exp(anp.sum(w * x)) for w in features])


def favor_attention(q, k, v, features, causal=False, key_mask_row=None):
    """FAVOR+ attention of one head, ``q`` (n_q, d), ``k``, ``v`` (n, d), ``features`` (m, d):
    K(q_i, k_j) = phi(q_i / d^(1/4)) . phi(k_j / d^(1/4)) over the keys j <= i when causal and
    the real keys (``key_mask_row``)."""
    d = q.shape[-1]
    scale = d ** -0.25
    key_features = [positive_features(k[j] * scale, features) for j in range(k.shape[0])]
    rows = []
    for i in range(q.shape[0]):
        query_features = positive_features(q[i] * scale, features)
        keys = [j for j in range(k.shape[0])
                if (not causal or j <= i) and (key_mask_row is None or key_mask_row[j])]
        kernel = [anp.sum(query_features * key_features[j]) for j in keys]
        rows.append(sum(c * v[j] for c, j in zip(kernel, keys)) / sum(kernel))
    return anp.stack(rows)
