"""Reference maths for BigBird's attention as HuggingFace computes it (Zaheer et al., 2020; the
survey's section VIII-E, no equation number), for ``tests/test_sec8_big_bird_model.py``.

Each query's keys are listed position by position from the pattern's definition, a key listed
once per time its block is counted (HuggingFace's evaluation counts block 0 r + 1 times), then
one textbook softmax over the list: no blocks, no grouping, no gathers.
"""
from __future__ import annotations

import autograd.numpy as anp


def bigbird_key_lists(time, block, plan):
    """For each head and query position of a ``time``-long sequence in blocks of ``block``, the
    keys it attends: the first and the last block's queries all keys; the others the window of
    3 blocks and the first and last blocks (each block once), then the row's random blocks from
    ``plan`` (heads, blocks - 2, r), repeats kept."""
    blocks = time // block
    lists = []
    for head_plan in plan:
        rows = []
        for i in range(time):
            row = i // block
            if row in (0, blocks - 1):
                chosen = list(range(blocks))
            else:
                chosen = sorted({0, blocks - 1, row - 1, row, row + 1}) + list(head_plan[row - 1])
            rows.append([b * block + j for b in chosen for j in range(block)])
        lists.append(rows)
    return lists


def attend_key_lists(q, k, v, lists, real):
    """out[b, h, i] = sum_{j in L_hi} exp(q_i . k_j / sqrt(d)) v_j / sum_{j in L_hi} exp(...),
    a repeated key counted each time, padded keys (``real`` False) left out; padded queries give
    zeros (HuggingFace multiplies them out). q, k, v: (batch, heads, time, d)."""
    d = q.shape[-1]
    out = []
    for b in range(q.shape[0]):
        heads = []
        for h in range(q.shape[1]):
            rows = []
            for i, keys in enumerate(lists[h]):
                keys = [j for j in keys if real[b, j]]
                weights = [anp.exp(anp.sum(q[b, h, i] * k[b, h, j]) / anp.sqrt(d)) for j in keys]
                row = sum(w * v[b, h, j] for w, j in zip(weights, keys)) / sum(weights)
                rows.append(row * float(real[b, i]))
            heads.append(anp.stack(rows))
        out.append(anp.stack(heads))
    return anp.stack(out)
