"""Reference maths for ETC's global-local attention (Ainslie et al., 2020), the survey's section
VIII-D, in ``autograd.numpy``: the reference of ``tests/test_sec8_extended_transformer.py``.

Dense with a mask: the global and long tokens are one sequence of n_g + n_l positions, every
query's key set is built pair by pair from the paper's four pieces (a global query sees every
key; a long query sees every global key and the long keys within the radius), each pair's
relative label from its definition, then one textbook softmax per query over its set of
q_i . (k_j + a_label) / sqrt(d_k). No grouping, no log-sum-exp merging, no gathers.
"""
from __future__ import annotations

import autograd.numpy as anp


def etc_label(i, j, n_global, segment_row, max_distance):
    """The relative position label of query i and key j (joint positions): the distance j - i
    clipped to [-k, k], shifted to 0 .. 2k, between two tokens of the same input; 2k + 1 when one
    is global, the other long and the long token belongs to that global token's segment; 2k + 2
    for another global-long pair."""
    if (i < n_global) == (j < n_global):
        return min(max(j - i, -max_distance), max_distance) + max_distance
    global_token, long_token = (i, j - n_global) if i < n_global else (j, i - n_global)
    return 2 * max_distance + (1 if segment_row[long_token] == global_token else 2)


def etc_may_attend(i, j, n_global, radius):
    """g2g, g2l, l2g: always; l2l: |i - j| <= radius."""
    return i < n_global or j < n_global or abs(i - j) <= radius


def etc_attention(global_x, long_x, params, relative_keys, num_heads, radius, max_distance,
                  segments, key_mask=None):
    """ETC's attention over the joint sequence [global_x; long_x] (batch, n_g + n_l, d_model),
    with one set of projections ``params`` (q, k, v, o -> (weight (out, in), bias)), the
    relative vectors ``relative_keys`` (heads, labels, d_k), ``segments`` (batch,
    n_l) the global token of each long token (-1 none) and ``key_mask`` (batch, n_g + n_l),
    False on padding. Returns the outputs of the joint sequence (batch, n_g + n_l, d_model)."""
    def project(name, x_b):
        weight, bias = params[name]
        return anp.dot(x_b, weight.T) + bias

    n_global = global_x.shape[1]
    d_model = global_x.shape[2]
    d_k = d_model // num_heads
    outputs = []
    for b in range(global_x.shape[0]):
        x = anp.concatenate([global_x[b], long_x[b]], axis=0)
        time = x.shape[0]
        q, k, v = project("q", x), project("k", x), project("v", x)
        heads = []
        for h in range(num_heads):
            cols = slice(h * d_k, (h + 1) * d_k)
            rows = []
            for i in range(time):
                members = [j for j in range(time) if etc_may_attend(i, j, n_global, radius)
                           and (key_mask is None or key_mask[b][j])]
                if not members:
                    rows.append(0.0 * v[0, cols])
                    continue
                weights = [anp.exp(anp.sum(q[i, cols] * (k[j, cols] + relative_keys[h][
                    etc_label(i, j, n_global, segments[b], max_distance)])) / anp.sqrt(d_k))
                    for j in members]
                rows.append(sum(w * v[j, cols] for w, j in zip(weights, members)) / sum(weights))
            heads.append(anp.stack(rows))
        outputs.append(project("o", anp.concatenate(heads, axis=1)))
    return anp.stack(outputs)
