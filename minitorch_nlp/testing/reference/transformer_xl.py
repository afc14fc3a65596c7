"""Reference maths for Transformer-XL (Dai et al., 2019), the survey's section VIII-B, eq 86-91,
in ``autograd.numpy``: the references of ``tests/test_sec8_transformer_xl.py``.

Written from the paper, one sequence, one head and one (query, key) pair at a time: eq 91's four
terms are four dot products with the sinusoid of the distance i - j computed for that pair (no
relative shift), masks multiply the exponentials, LayerNorm is the textbook formula, the adaptive
input looks each token up in its cluster's table, and the adaptive softmax scores each token from
its cluster's formula. Weight matrices follow the library's layout ((out, in), y = W x) only so
that a test can pass the same arrays; the adaptive projections P of the tied softmax are
(d_model, width) and applied as h P, as in the paper's code.

The survey's eq 88 takes the queries from the extended context too; the paper (and these
references) take them from the current segment only.
"""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval


def sinusoid(distance, d_model):
    """R_distance: [sin(distance / 10000^(2i/d)) for i < d/2] then the cosines (a constant)."""
    frequencies = [10000.0 ** (-2.0 * i / d_model) for i in range(d_model // 2)]
    return np.array([np.sin(distance * f) for f in frequencies]
                    + [np.cos(distance * f) for f in frequencies])


def eq91_relative_scores(q, k, position_proj, u, v, memory_length, clamp_len=0):
    """A^rel_ij = q_i . k_j + q_i . W_R R_{i-j} + u . k_j + v . W_R R_{i-j}  (eq 91, one head).

    ``q`` (n_q, d_k) = E_x W_q^T of the segment, ``k`` (n_k, d_k) = E_x W_{k,E}^T of memory and
    segment (n_k = memory_length + n_q), ``position_proj`` W_R (d_k, d_model), ``u``, ``v``
    (d_k,). Query i sits at position memory_length + i, so its distance to key j is
    memory_length + i - j (clamped to ``clamp_len`` > 0). Keys after the query score 0 (they are
    masked)."""
    d_model = position_proj.shape[1]
    rows = []
    for i in range(q.shape[0]):
        row = []
        for j in range(k.shape[0]):
            distance = memory_length + i - j
            if distance < 0:
                row.append(0.0 * anp.sum(q[i]))
                continue
            if clamp_len > 0:
                distance = min(distance, clamp_len)
            r = anp.dot(position_proj, sinusoid(distance, d_model))            # W_R R_{i-j}
            row.append(anp.sum(q[i] * k[j]) + anp.sum(q[i] * r)                 # (a) + (b)
                       + anp.sum(u * k[j]) + anp.sum(v * r))                    # (c) + (d)
        rows.append(anp.stack(row))
    return anp.stack(rows)


def relative_attention(q, k, values, position_proj, u, v, memory_length, clamp_len=0):
    """softmax(A^rel / sqrt(d_k)) V over the keys up to the query's own position (one head)."""
    scores = eq91_relative_scores(q, k, position_proj, u, v, memory_length,
                                  clamp_len) / np.sqrt(q.shape[1])
    outputs = []
    for i in range(q.shape[0]):
        visible = range(memory_length + i + 1)          # keys up to the query's position
        shift = max(getval(scores[i][j]) for j in visible)
        e = [anp.exp(scores[i][j] - shift) for j in visible]
        total = sum(e)
        outputs.append(sum(e[j] / total * values[j] for j in visible))
    return anp.stack(outputs)


def layer_norm(x, gain, bias, eps):
    mean = anp.mean(x, axis=-1, keepdims=True)
    variance = anp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / anp.sqrt(variance + eps) * gain + bias


def eq87_extended_context(memory, h):
    """h~ = [SG(memory) o h] (eq 87) for one sequence: the memory (m, d_model), a constant to
    the gradient (``getval`` unboxes it from autograd's trace, the stop-gradient), then the
    segment h (n, d_model), on the time axis."""
    return anp.concatenate([getval(memory), h], axis=0)


def eq88_attention(queries_from, context, p, n_head, d_head, memory_length, clamp_len=0):
    """Concat_heads(RelAttn(q, k, v)) W_o^T (eq 88, one sequence): per head q = h W_q^T from
    the segment ``queries_from`` (n, d_model), k = h~ W_k^T and v = h~ W_v^T from the extended
    ``context`` (memory_length + n, d_model), relative attention over them. ``p``: q, k, v, o,
    r (W_R), u, v_bias (heads, d_k)."""
    heads = []
    for head in range(n_head):
        rows = slice(head * d_head, (head + 1) * d_head)
        q = anp.dot(queries_from, p["q"][rows].T)
        k = anp.dot(context, p["k"][rows].T)
        values = anp.dot(context, p["v"][rows].T)
        heads.append(relative_attention(q, k, values, p["r"][rows], p["u"][head],
                                        p["v_bias"][head], memory_length, clamp_len))
    return anp.dot(anp.concatenate(heads, axis=1), p["o"].T)


def eq89_layer(h, memory, p, n_head, d_head, pre_ln=False, eps=1e-5, clamp_len=0):
    """One Transformer-XL layer on one sequence (eq 87-89): h (n, d_model), ``memory``
    (m, d_model) or None, treated as a constant (the stop-gradient SG of eq 87 is the caller
    passing plain arrays).

    h~ = [memory o h] (eq 87); per head q = h W_q, k = h~ W_k, v = h~ W_v (eq 88); relative
    attention, the output projection, the residual and LayerNorm, then the ReLU feed-forward
    network in its residual (eq 89). ``p``: q, k, v, o, r (W_R), u, v_bias (heads, d_k), ln1,
    ln2 ((gain, bias)), w1, b1, w2, b2."""
    m = 0 if memory is None else memory.shape[0]
    context = h if memory is None else anp.concatenate([memory, h], axis=0)
    if pre_ln:
        queries_from = layer_norm(h, *p["ln1"], eps)
        context = layer_norm(context, *p["ln1"], eps)
    else:
        queries_from = h
    x = h + eq88_attention(queries_from, context, p, n_head, d_head, m, clamp_len)
    if not pre_ln:
        x = layer_norm(x, *p["ln1"], eps)
    ff_in = layer_norm(x, *p["ln2"], eps) if pre_ln else x
    hidden = anp.maximum(anp.dot(ff_in, p["w1"].T) + p["b1"], 0.0)
    x = x + anp.dot(hidden, p["w2"].T) + p["b2"]
    return x if pre_ln else layer_norm(x, *p["ln2"], eps)


def _clusters(vocab_size, cutoffs):
    bounds = [0, *cutoffs, vocab_size]
    return list(zip(bounds, bounds[1:]))


def _cluster_of(token, clusters):
    return next(c for c, (low, high) in enumerate(clusters) if low <= token < high)


def adaptive_input(ids, p, vocab_size, cutoffs, d_model):
    """Baevski & Auli's adaptive input, token by token: the row of the token's cluster table
    (div_val 1: one table), times its projection (d_model, width) if any, times sqrt(d_model).
    ``p``: tables (list), emb_projs ({cluster: (d_model, width)}, only the projected ones)."""
    clusters = _clusters(vocab_size, cutoffs)
    vectors = []
    for token in ids:
        if len(p["tables"]) == 1:
            row, projection = p["tables"][0][token], p["emb_projs"].get(0)
        else:
            c = _cluster_of(token, clusters)
            row, projection = p["tables"][c][token - clusters[c][0]], p["emb_projs"].get(c)
        vector = row if projection is None else anp.dot(projection, row)
        vectors.append(vector * np.sqrt(d_model))
    return anp.stack(vectors)


def _cluster_scores(h, p, c, clusters):
    """Logits of cluster c's tokens (and, for the head, of the other clusters) at state h."""
    low, high = clusters[c]
    if "bias" in p:                              # div_val 1: one table, one bias
        weight, bias = p["tables"][0][low:high], p["bias"][low:high]
        tied = p["emb_projs"].get(0)
    else:
        weight, bias, tied = p["tables"][c], p["biases"][c], p["emb_projs"].get(c)
    own = p["own_projs"].get(c)
    if own is not None:
        h = anp.dot(own, h)                      # our Linear: (width, d_model)
    elif tied is not None:
        h = anp.dot(h, tied)                     # the embedding's (d_model, width), as h P
    scores = [anp.sum(weight[t] * h) + bias[t] for t in range(high - low)]
    if c == 0:
        scores += [anp.sum(p["cluster_weight"][i] * h) + p["cluster_bias"][i]
                   for i in range(len(clusters) - 1)]
    return anp.stack(scores)


def _log_sum_exp(scores):
    """log sum_t exp(s_t), taken relative to the largest score (finite at scores of 1e4)."""
    top = anp.max(getval(scores))
    return top + anp.log(anp.sum(anp.exp(scores - top)))


def adaptive_log_softmax(h, p, vocab_size, cutoffs):
    """log P(token | h) for every token (Grave et al.'s adaptive softmax): a head token's
    log-softmax in the head; a cluster-c token's is log P_head(cluster c) + its log-softmax in
    its cluster. With no cutoffs, a plain log-softmax. ``p``: tables, emb_projs (a dict), own_projs
    ({cluster: (width, d_model)}), bias (div_val 1) or biases, cluster_weight, cluster_bias."""
    clusters = _clusters(vocab_size, cutoffs)
    head = _cluster_scores(h, p, 0, clusters)
    head = head - _log_sum_exp(head)
    out = [head[t] for t in range(clusters[0][1])]
    for c in range(1, len(clusters)):
        tail = _cluster_scores(h, p, c, clusters)
        tail = tail - _log_sum_exp(tail)
        out += [head[clusters[0][1] + c - 1] + tail[t] for t in range(len(tail))]
    return anp.stack(out)


def eq86_log_probs(ids, p, config, mems=None):
    """log P(x_{t+1} = w | x_<=t, memory) for every position of one sequence (eq 86), and each
    layer's input states (the next memories before cutting): the adaptive input, the layers of
    eq 87-89 over ``mems`` (one (m, d_model) array per layer, or None), the adaptive softmax."""
    x = adaptive_input(ids, p, config.vocab_size, config.cutoffs, config.d_model)
    inputs = []
    for n, layer in enumerate(p["layers"]):
        inputs.append(x)
        x = eq89_layer(x, None if mems is None else mems[n], layer, config.n_head,
                       config.d_head, config.pre_lnorm, config.layer_norm_epsilon,
                       config.clamp_len)
    log_probs = anp.stack([adaptive_log_softmax(x[t], p, config.vocab_size, config.cutoffs)
                           for t in range(len(ids))])
    return log_probs, inputs
