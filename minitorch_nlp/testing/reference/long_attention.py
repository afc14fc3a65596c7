"""Reference maths for Longformer (Beltagy et al., 2020) and BigBird (Zaheer et al., 2020), the
survey's section VIII, in ``autograd.numpy``: the references of ``tests/test_sec8_longformer.py``
and ``tests/test_sec8_big_bird.py``.

Each query's key set is built position by position from the paper's definition (a window every
d-th position plus the global tokens; the blocks of BigBird's pattern), then one textbook
softmax over it: no grouping, no log-sum-exp merging, no gathers.
"""
from __future__ import annotations

import autograd.numpy as anp


def attend_sets(q, k, v, sets):
    """out_i = sum_{j in S_i} exp(q_i . k_j / sqrt(d)) v_j / sum_{j in S_i} exp(...) for one
    head; an empty set gives zeros."""
    d = q.shape[-1]
    rows = []
    for i in range(q.shape[0]):
        members = sorted(sets[i])
        if not members:
            rows.append(0.0 * v[0])
            continue
        weights = [anp.exp(anp.sum(q[i] * k[j]) / anp.sqrt(d)) for j in members]
        rows.append(sum(w * v[j] for w, j in zip(weights, members)) / sum(weights))
    return anp.stack(rows)


def longformer_sets(time, window, dilation, is_global, key_mask_row=None, causal=False):
    """Local tokens: {j : (j - i) mod d = 0, |j - i| <= w d (j <= i when causal)} u G; global
    tokens: every position. Padded keys leave every set."""
    sets = []
    for i in range(time):
        members = set()
        for j in range(time):
            offset = j - i
            in_window = offset % dilation == 0 and abs(offset) <= window * dilation and (
                not causal or offset <= 0)
            if (is_global[i] or in_window or is_global[j]) and (
                    key_mask_row is None or key_mask_row[j]):
                members.add(j)
        sets.append(members)
    return sets


def longformer_self_attention(x, params, num_heads, window, dilations, is_global, key_mask=None,
                              causal=False):
    """Longformer self-attention of a batch ``x`` (batch, time, d_model): per head, local rows
    attend their window and the global tokens with Q, K, V; global rows attend everything with
    Q_g, K_g, V_g (Beltagy et al., section 3.1); then the output projection. ``params`` maps
    q, k, v, qg, kg, vg, o to (weight (out, in), bias)."""
    def project(name, x_b):
        weight, bias = params[name]
        return anp.dot(x_b, weight.T) + bias

    batch, time, d_model = x.shape
    head_dim = d_model // num_heads
    outputs = []
    for b in range(batch):
        projected = {name: project(name, x[b]) for name in ("q", "k", "v", "qg", "kg", "vg")}
        row_mask = None if key_mask is None else key_mask[b]
        heads = []
        for h in range(num_heads):
            cols = slice(h * head_dim, (h + 1) * head_dim)
            local = attend_sets(projected["q"][:, cols], projected["k"][:, cols],
                                projected["v"][:, cols],
                                longformer_sets(time, window, dilations[h], is_global[b],
                                                row_mask, causal))
            everything = [set(j for j in range(time) if row_mask is None or row_mask[j])] * time
            global_rows = attend_sets(projected["qg"][:, cols], projected["kg"][:, cols],
                                      projected["vg"][:, cols], everything)
            heads.append(anp.stack([global_rows[i] if is_global[b][i] else local[i]
                                    for i in range(time)]))
        outputs.append(project("o", anp.concatenate(heads, axis=1)))
    return anp.stack(outputs)


def bigbird_sets(time, block, layout, key_mask_row=None, causal=False):
    """S_i = {j : layout[i // b, j // b]} (window, global and random blocks of BigBird's
    pattern), real keys only, j <= i when causal."""
    return [{j for j in range(time) if layout[i // block][j // block]
             and (key_mask_row is None or key_mask_row[j]) and (not causal or j <= i)}
            for i in range(time)]
