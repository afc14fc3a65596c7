"""Reference maths for XLNet (Yang et al., 2019), the survey's section IV-D, eq 26-29, in
``autograd.numpy``: the references of ``tests/test_sec4_xlnet.py``.

Written from the paper, one sequence, one head and one (query, key) pair at a time: each score is
the sum of the content term, the relative-position term with the sinusoid of that pair's
distance, and the segment term chosen by "same segment or not"; masks multiply the
exponentials; the query stream's rows are computed at their target positions directly (no
target_mapping products); the permutation masks come from the order by definition
(``permutation_masks``), not from ranks. Weights use the library's layouts ((out, in)) only so
that a test can pass the same arrays.
"""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.scipy.special import erf

from .transformer_xl import layer_norm, sinusoid


def permutation_masks(order, num_predict):
    """(query, content) bool (T, T), True where query i may attend key j, for one factorisation
    ``order`` whose last ``num_predict`` positions are predicted (the paper's code): a target
    sees the context and the targets earlier in the order; the content stream also sees itself;
    context positions see the context only."""
    time = len(order)
    context = set(int(p) for p in order[:time - num_predict])
    step = {int(p): t for t, p in enumerate(order)}
    query = np.zeros((time, time), dtype=bool)
    for i in range(time):
        for j in range(time):
            query[i, j] = j in context or (i not in context and step[j] < step[i])
    return query, query | np.eye(time, dtype=bool)


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _score(q, k_j, r, p, head, same_segment):
    """(q + u) . k_j + (q + v) . W_R R + (q + b) . s (one head; ``r`` = W_R R_{i-j}); no
    segment term when ``same_segment`` is None (no segments given)."""
    score = anp.sum((q + p["u"][head]) * k_j) + anp.sum((q + p["v_bias"][head]) * r)
    if same_segment is None:
        return score
    segment = p["seg"][0 if same_segment else 1][head]
    return score + anp.sum((q + p["s_bias"][head]) * segment)


def two_stream_attention(x, position, context, allowed, types, p, n_head, d_head, memory_time,
                         clamp_len):
    """Attention of the row ``x`` (d_model,) standing at ``position`` over ``context`` (K,
    d_model) of memory and segment, keys where ``allowed`` (K,) is True, with segment ids
    ``types`` ((K,) with the query's own id last, or None): Concat(heads) W_o."""
    d_model = x.shape[0]
    heads = []
    for head in range(n_head):
        rows = slice(head * d_head, (head + 1) * d_head)
        q = anp.dot(p["q"][rows], x)
        scores, visible = [], []
        for j in range(context.shape[0]):
            distance = memory_time + position - j
            if clamp_len > 0:
                distance = max(-clamp_len, min(clamp_len, distance))
            r = anp.dot(p["r"][rows], sinusoid(distance, d_model))
            same = None if types is None else bool(types[-1] == types[j])
            scores.append(_score(q, anp.dot(p["k"][rows], context[j]), r, p, head, same)
                          / np.sqrt(d_head))
            visible.append(bool(allowed[j]))
        if not any(visible):
            heads.append(anp.zeros(d_head))
            continue
        shift = max(s for s, v in zip(scores, visible) if v)
        e = [anp.exp(s - shift) * float(v) for s, v in zip(scores, visible)]
        total = sum(e)
        heads.append(sum(e[j] / total * anp.dot(p["v"][rows], context[j])
                         for j in range(context.shape[0])))
    return anp.dot(p["o"], anp.concatenate(heads))


def _residual_blocks(x, attention, p, eps):
    x = layer_norm(x + attention, *p["ln1"], eps)
    hidden = _gelu(anp.dot(p["w1"], x) + p["b1"])
    return layer_norm(x + anp.dot(p["w2"], hidden) + p["b2"], *p["ln2"], eps)


def eq29_xlnet_layer(h, g, targets, memory, p, n_head, d_head, query_allowed, content_allowed,
                     types=None, eps=1e-12, clamp_len=0):
    """One two-stream layer on one sequence (eq 29): h (T, d) the content stream, g
    (num_predict, d) the query stream at positions ``targets`` (or None), ``memory`` (m, d) or
    None (a constant), masks (T, m + T) bool, ``types`` (T,) segment ids (memory: 0) or None.
    Returns (h', g')."""
    m = 0 if memory is None else memory.shape[0]
    context = h if memory is None else anp.concatenate([memory, h], axis=0)
    key_types = None if types is None else np.concatenate([np.zeros(m, dtype=int), types])

    def attend(x, i, allowed):
        own = None if key_types is None else np.append(key_types, types[i])
        return two_stream_attention(x, i, context, allowed, own, p, n_head, d_head, m,
                                    clamp_len)

    new_h = anp.stack([_residual_blocks(h[i], attend(h[i], i, content_allowed[i]), p, eps)
                       for i in range(h.shape[0])])
    if g is None:
        return new_h, None
    new_g = anp.stack([_residual_blocks(g[n], attend(g[n], t, query_allowed[t]), p, eps)
                       for n, t in enumerate(targets)])
    return new_h, new_g


def eq29_query_stream(ids, targets, p, config, query_allowed, content_allowed, types=None,
                      mems=None):
    """g(x_{z_<t}, z_t) for every target position of one sequence (eq 29): embeddings, the query
    stream started from w (``mask_emb``) at every target, the layers; (num_predict, d). Also
    returns each layer's content-stream input (the next memories)."""
    h = anp.stack([p["embedding"][token] for token in ids])
    g = anp.stack([p["mask_emb"][0, 0] for _ in targets])   # w, (1, 1, d) as HuggingFace keeps it
    inputs = []
    for n, layer in enumerate(p["layers"]):
        inputs.append(h)
        h, g = eq29_xlnet_layer(h, g, targets, None if mems is None else mems[n], layer,
                                config.n_head, config.d_head, query_allowed, content_allowed,
                                types, config.layer_norm_eps, max(config.clamp_len, 0))
    return g, inputs


def eq28_next_token_distribution(h, embedding, lm_bias):
    """p(X = x | h) = exp(e(x)^T h + b_x) / sum_x' exp(e(x')^T h + b_x') (eq 28; on the query
    stream g, eq 29) for one state ``h`` (d,), by explicit sums over the vocabulary."""
    scores = [anp.sum(embedding[x] * h) + lm_bias[x] for x in range(embedding.shape[0])]
    largest = max(scores)            # the same ratios, no overflow at ±1e4
    total = sum(anp.exp(s - largest) for s in scores)
    return anp.stack([anp.exp(s - largest) / total for s in scores])


def eq26_target_log_probs(ids, targets, p, config, query_allowed, content_allowed, types=None,
                          mems=None):
    """log p(x_{z_t} = w | x_{z_<t}) for every target position of one sequence (eq 26 with the
    target-aware softmax of eq 29): the query stream g of ``eq29_query_stream``, then
    softmax(e(x)^T g + b) by explicit sums. Also returns each layer's content-stream input (the
    next memories)."""
    g, inputs = eq29_query_stream(ids, targets, p, config, query_allowed, content_allowed, types,
                                  mems)
    rows = []
    for n in range(len(targets)):
        logits = anp.stack([anp.sum(p["embedding"][w] * g[n]) + p["lm_bias"][w]
                            for w in range(p["embedding"].shape[0])])
        largest = anp.max(logits)
        rows.append(logits - largest - anp.log(anp.sum(anp.exp(logits - largest))))
    return anp.stack(rows), inputs


def eq25_masked_lm_objective(logits, labels):
    """-L_BERT / |T| = -(1/|T|) sum_{x in T} log p(x | N) (eq 25): BERT's objective, the one XLNet
    replaces. ``logits`` (batch, time, vocab), ``labels`` (batch, time) with -100 off T; each
    chosen position's log-probability by the textbook softmax, summed position by position
    (0 when T is empty)."""
    total, count = 0.0, 0
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            if labels[b, t] != -100:
                scores = logits[b, t]
                largest = anp.max(scores)
                total = total - (scores[labels[b, t]] - largest
                                 - anp.log(anp.sum(anp.exp(scores - largest))))
                count += 1
    return total / count if count else 0.0 * anp.sum(logits)
