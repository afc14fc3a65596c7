"""Reference maths of head pruning (the survey's section VI-B.3, Michel et al., 2019, eq 53):
multi-head attention written as a sum over heads, each head's output times its mask."""
from __future__ import annotations

import autograd.numpy as anp

from .transformer import eq12_scaled_dot_product_attention


def eq53_masked_multi_head_attention(x, xi, params, num_heads):
    """MH(x) = sum_h xi_h Att_h(x) + b^O, Att_h(x) = softmax(q_h k_h^T / sqrt(d_k)) v_h W^O_h^T
    (Michel et al. eq. 1-2 with the head masks xi_h of their section 2.2), self-attention,
    sequence by sequence and head by head.

    ``x`` (B, n, d); ``xi`` (heads,); ``params`` holds ``q_w, q_b, k_w, k_b, v_w, v_b, out_w,
    out_b`` in ``Linear``'s layout; head h owns rows h d_k .. (h+1) d_k of W^Q, W^K, W^V and the
    same columns of W^O."""
    d_k = x.shape[-1] // num_heads
    outputs = []
    for b in range(x.shape[0]):
        total = params["out_b"] + 0.0 * x[b]
        for h in range(num_heads):
            rows = slice(h * d_k, (h + 1) * d_k)
            q = anp.dot(x[b], params["q_w"][rows].T) + params["q_b"][rows]
            k = anp.dot(x[b], params["k_w"][rows].T) + params["k_b"][rows]
            v = anp.dot(x[b], params["v_w"][rows].T) + params["v_b"][rows]
            head = eq12_scaled_dot_product_attention(q, k, v)
            total = total + xi[h] * anp.dot(head, params["out_w"][:, rows].T)
        outputs.append(total)
    return anp.stack(outputs)


def eq52_hard_concrete_sample(log_alpha, u, beta, gamma, zeta):
    """Louizos et al. (2018) eq. 10-11, entry by entry: the concrete (binary Gumbel-softmax)
    sample s = 1 / (1 + (u / (1 - u))^(-1 / beta) alpha^(-1 / beta)), stretched to (gamma, zeta)
    and clamped to [0, 1]."""
    values = []
    for a, noise in zip(log_alpha, u):
        odds = anp.exp((anp.log(noise) - anp.log(1 - noise) + a) / beta)
        stretched = odds / (1 + odds) * (zeta - gamma) + gamma
        values.append(anp.minimum(1.0, anp.maximum(0.0, stretched)))
    return anp.stack(values)


def eq52_expected_l0(log_alpha, beta, gamma, zeta):
    """L_C = sum_i (1 - P(z_i = 0)) (Voita et al. 2019, eq. 5; the survey's eq 52). z_i = 0 when
    the stretched concrete variable is <= 0, i.e. s_i <= t = -gamma / (zeta - gamma); the
    logistic noise L = log u - log(1 - u) makes P(s_i <= t) = CDF_logistic(beta logit(t) -
    log_alpha_i)."""
    threshold = -gamma / (zeta - gamma)
    logit = anp.log(threshold) - anp.log(1 - threshold)
    total = 0.0
    for a in log_alpha:
        closed = 1 / (1 + anp.exp(-(beta * logit - a)))
        total = total + (1 - closed)
    return total
