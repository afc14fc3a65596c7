"""Reference maths for the Transformer (Vaswani et al., 2017), the survey's section IV-A, eq 11-12,
in ``autograd.numpy``: the references of ``tests/test_sec4_transformer.py``.

Written from the paper, one query and one head at a time: masks multiply the exponentials
instead of filling scores with -inf, heads are column blocks of the projection matrices instead of
a reshape, LayerNorm is the textbook formula. Weight matrices follow the library's layout
(``(out_features, in_features)``, y = x W^T + b) only so that a test can pass the same arrays.

The survey writes eq 11 as softmax(Q . K^T) and eq 12 as softmax(Q . K^T) . V; the original
paper (eq. 1 there) divides the scores by sqrt(d_k). These references implement the original.
"""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval


def _allowed(n_q, n_k, causal, key_mask_row):
    """(n_q, n_k) 0/1 constant: 1 where query i may see key j. Causal queries are the *last* n_q
    positions of the n_k keys (decoding with a cache)."""
    allowed = np.ones((n_q, n_k))
    for i in range(n_q):
        for j in range(n_k):
            if causal and j > i + (n_k - n_q):
                allowed[i, j] = 0.0
            if key_mask_row is not None and not key_mask_row[j]:
                allowed[i, j] = 0.0
    return allowed


def eq11_attention_weights(q, k, key_mask_row=None, causal=False, scale=None, mask=None,
                           bias=None):
    """W_SM = softmax(Q K^T / sqrt(d_k) + B)  (survey eq 11 without, Vaswani eq. 1 with the
    scale; the bias B of T5 and Transformer-XL is 0 in both).

    ``q`` (n_q, d_k), ``k`` (n_k, d_k) of one head; ``key_mask_row`` (n_k,) bool, False on
    padding; ``mask`` (n_q, n_k) bool, False where the query may not attend the key; ``bias``
    (n_q, n_k) added to each score. Each row is exp(score) over the allowed keys divided by
    their sum (the largest allowed score subtracted first, so that large biases stay finite); a
    query that may see no key gets a row of zeros."""
    d_k = q.shape[-1]
    scale = 1.0 / np.sqrt(d_k) if scale is None else scale
    allowed = _allowed(q.shape[0], k.shape[0], causal, key_mask_row)
    if mask is not None:
        allowed = allowed * np.asarray(mask, dtype=float)
    if bias is not None:     # exp(-inf) = 0: a bias of -inf hides the key as a mask does
        allowed = allowed * (np.asarray(getval(bias)) != -np.inf)
    rows = []
    for i in range(q.shape[0]):
        scores = anp.array([anp.sum(q[i] * k[j]) * scale
                            + (0.0 if bias is None or not allowed[i, j] else bias[i][j])
                            for j in range(k.shape[0])])
        visible = [scores[j] for j in range(k.shape[0]) if allowed[i, j]]
        shift = max(visible) if visible else 0.0
        e = anp.exp(anp.where(allowed[i] > 0, scores - shift, -np.inf))
        total = anp.sum(e)
        rows.append(e / total if allowed[i].any() else e * 0.0)
    return anp.stack(rows)


def eq12_scaled_dot_product_attention(q, k, v, key_mask_row=None, causal=False, scale=None,
                                      mask=None, bias=None):
    """Z = W_SM V = softmax(Q K^T / sqrt(d_k) + B) V for one head (survey eq 12 with Vaswani's
    scale): each output row is the weighted sum of the value rows."""
    weights = eq11_attention_weights(q, k, key_mask_row, causal, scale, mask, bias)
    rows = []
    for i in range(q.shape[0]):
        row = 0.0 * v[0]
        for j in range(k.shape[0]):
            row = row + weights[i, j] * v[j]
        rows.append(row)
    return anp.stack(rows)


def _affine(x, w, b):
    return anp.dot(x, w.T) + b


def eq12_multi_head_attention(query, key, value, params, num_heads, key_mask=None,
                              causal=False):
    """MultiHead(Q, K, V) = Concat(head_1 .. head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K,
    V W_i^V) (Vaswani section 3.2.2), batch by batch and head by head.

    ``query`` (B, n_q, d), ``key``/``value`` (B, n_k, d); ``params`` holds ``q_w, q_b, k_w, k_b,
    v_w, v_b, out_w, out_b``; head i uses rows i*d_k .. (i+1)*d_k of W^Q, W^K, W^V."""
    d_model = query.shape[-1]
    d_k = d_model // num_heads
    outputs = []
    for b in range(query.shape[0]):
        mask_row = None if key_mask is None else key_mask[b]
        heads = []
        for h in range(num_heads):
            block = slice(h * d_k, (h + 1) * d_k)
            q = _affine(query[b], params["q_w"][block], params["q_b"][block])
            k = _affine(key[b], params["k_w"][block], params["k_b"][block])
            v = _affine(value[b], params["v_w"][block], params["v_b"][block])
            heads.append(eq12_scaled_dot_product_attention(q, k, v, mask_row, causal))
        outputs.append(_affine(anp.concatenate(heads, axis=1), params["out_w"], params["out_b"]))
    return anp.stack(outputs)


def sinusoidal_positions(max_len, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))
    (Vaswani section 3.5), entry by entry."""
    table = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (2 * (j // 2) / d_model)
            table[pos, j] = np.sin(angle) if j % 2 == 0 else np.cos(angle)
    return table


def layer_norm(x, gain, bias, eps=1e-5):
    """(x - mu) / sqrt(sigma^2 + eps) * gain + bias over the last axis (Ba et al., 2016)."""
    mu = anp.mean(x, axis=-1, keepdims=True)
    sigma2 = anp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / anp.sqrt(sigma2 + eps) * gain + bias


def feed_forward(x, params, activation="relu"):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (Vaswani eq. 2), or GELU x Phi(x) for ReLU."""
    hidden = _affine(x, params["w1"], params["b1"])
    if activation == "relu":
        hidden = 0.5 * (hidden + anp.abs(hidden))
    else:
        from autograd.scipy.special import erf
        hidden = hidden * 0.5 * (1.0 + erf(hidden / np.sqrt(2.0)))
    return _affine(hidden, params["w2"], params["b2"])


def _sublayer(x, norm, sublayer, norm_first):
    """LayerNorm(x + Sublayer(x)) (post-LN, the paper) or x + Sublayer(LayerNorm(x)) (pre-LN)."""
    if norm_first:
        return x + sublayer(layer_norm(x, *norm))
    return layer_norm(x + sublayer(x), *norm)


def encoder_layer(x, params, num_heads, norm_first=False, key_mask=None, causal=False,
                  activation="relu"):
    """One encoder layer (Vaswani section 3.1): self-attention and FFN sub-layers, each in a
    residual connection with LayerNorm. ``params``: ``attn`` (see ``eq12_multi_head_attention``),
    ``ff`` (``w1 b1 w2 b2``), ``norm1``/``norm2`` (gain, bias)."""
    x = _sublayer(x, params["norm1"], lambda h: eq12_multi_head_attention(
        h, h, h, params["attn"], num_heads, key_mask, causal), norm_first)
    return _sublayer(x, params["norm2"], lambda h: feed_forward(h, params["ff"], activation),
                     norm_first)


def decoder_layer(x, memory, params, num_heads, norm_first=False, tgt_key_mask=None,
                  memory_key_mask=None):
    """One decoder layer (Vaswani section 3.1): causal self-attention, attention over the encoder
    output ``memory``, FFN; ``params`` as ``encoder_layer`` plus ``cross`` and ``norm3``."""
    x = _sublayer(x, params["norm1"], lambda h: eq12_multi_head_attention(
        h, h, h, params["attn"], num_heads, tgt_key_mask, True), norm_first)
    x = _sublayer(x, params["norm2"], lambda h: eq12_multi_head_attention(
        h, memory, memory, params["cross"], num_heads, memory_key_mask), norm_first)
    return _sublayer(x, params["norm3"], lambda h: feed_forward(h, params["ff"]), norm_first)
