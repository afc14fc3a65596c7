"""Reference maths of pruning (the survey's section VI-B): FLOP's gated factorised layer (Wang et
al., 2020, eq 49-50), the L0 norm of gates (eq 51), Voita et al.'s relaxed L0 (eq 52), and head
pruning (Michel et al., 2019, eq 53-55): multi-head attention written as a sum over heads, each
head's output times its mask, and the heads' importance scores."""
from __future__ import annotations

import autograd
import autograd.numpy as anp
import numpy as np

from .transformer import eq12_scaled_dot_product_attention


def eq53_masked_multi_head_attention(x, xi, params, num_heads):
    """MH(x) = sum_h xi_h Att_h(x) + b^O, Att_h(x) = softmax(q_h k_h^T / sqrt(d_k)) v_h W^O_h^T
    (Michel et al. eq. 1-2 with the head masks xi_h of their section 2.2), self-attention,
    sequence by sequence and head by head.

    ``x`` (B, n, d); ``xi`` (heads,), or (B, heads): each sequence its own masks; ``params`` holds
    ``q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b`` in ``Linear``'s layout; head h owns rows h d_k ..
    (h+1) d_k of W^Q, W^K, W^V and the same columns of W^O."""
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
            mask = xi[b, h] if anp.ndim(xi) == 2 else xi[h]
            total = total + mask * anp.dot(head, params["out_w"][:, rows].T)
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


def test_time_gate(log_alpha, gamma, zeta):
    """Louizos et al. eq. 13, entry by entry: min(1, max(0, sigmoid(log_alpha) (zeta - gamma) +
    gamma))."""
    return anp.stack([anp.minimum(1.0, anp.maximum(0.0, (zeta - gamma) / (1 + anp.exp(-a))
                                                   + gamma)) for a in log_alpha])


def eq50_factorized_weight(P, Q, log_alpha, gamma, zeta):
    """W = P G Q = sum_k z_k p_k q_k^T (Wang et al. 2020, eq. 4; the survey's eq 50), G =
    diag(z) the test-time gates: a sum of rank-one matrices, one per component."""
    z = test_time_gate(log_alpha, gamma, zeta)
    return sum(z[k] * anp.outer(P[:, k], Q[k]) for k in range(P.shape[1]))


def eq49_gated_linear(x, P, Q, bias, log_alpha, gamma, zeta):
    """y = x W~^T + b with W~ the pruned parameters theta * z (eq 49) of the factorisation
    W = P G Q (eq 50), one input row at a time."""
    weight = eq50_factorized_weight(P, Q, log_alpha, gamma, zeta)
    rows = [anp.dot(weight, row) + bias for row in x.reshape(-1, x.shape[-1])]
    return anp.stack(rows).reshape(x.shape[:-1] + (P.shape[0],))


def eq51_l0_norm(gates):
    """L0(g) = sum_i (1 - [g_i = 0]) (eq 51): the open gates, counted one by one."""
    return sum(0 if g == 0 else 1 for g in np.ravel(gates))


def _squared_error(output, target):
    return anp.sum((output - target) ** 2) / 2


def eq54_head_importance(batches, params, num_heads, head_mask):
    """I_h = E_x |dL(x) / d xi_h| (Michel et al. eq. 2; the survey's eq 54) for the loss
    L = ||MH(x) - target||^2 / 2 of eq 53's layer, the gradient taken at xi = ``head_mask`` by
    HIPS autograd, averaged over ``batches`` of (x, target)."""
    total = np.zeros(num_heads)
    for x, target in batches:
        grad = autograd.grad(lambda xi, x=x, target=target: _squared_error(
            eq53_masked_multi_head_attention(x, xi * head_mask, params, num_heads), target))
        total = total + np.abs(grad(np.ones(num_heads)))
    return total / len(batches)


def _head_outputs(x, params, num_heads):
    """Att_h(x) of every head (heads, B, n, d_k), before the output projection."""
    d_k = x.shape[-1] // num_heads
    heads = []
    for h in range(num_heads):
        rows = slice(h * d_k, (h + 1) * d_k)
        per_sequence = []
        for b in range(x.shape[0]):
            q = anp.dot(x[b], params["q_w"][rows].T) + params["q_b"][rows]
            k = anp.dot(x[b], params["k_w"][rows].T) + params["k_b"][rows]
            v = anp.dot(x[b], params["v_w"][rows].T) + params["v_b"][rows]
            per_sequence.append(eq12_scaled_dot_product_attention(q, k, v))
        heads.append(anp.stack(per_sequence))
    return anp.stack(heads)


def eq55_head_importance_from_outputs(batches, params, num_heads, head_mask):
    """I_h = E_x |Att_h(x)^T dL(x) / d Att_h(x)| (Michel et al. eq. 3; the survey's eq 55): the
    heads' outputs computed first, the loss as a function of them (each times its mask, through
    W^O), its gradient by HIPS autograd, the product summed over every entry of head h."""
    d_k = params["q_w"].shape[0] // num_heads
    total = np.zeros(num_heads)
    for x, target in batches:
        outputs = _head_outputs(x, params, num_heads)

        def loss(heads, target=target):
            mixed = params["out_b"] + sum(
                head_mask[h] * anp.einsum("bnk,dk->bnd", heads[h],
                                          params["out_w"][:, h * d_k:(h + 1) * d_k])
                for h in range(num_heads))
            return _squared_error(mixed, target)

        grads = autograd.grad(loss)(outputs)
        total = total + np.abs([np.sum(outputs[h] * grads[h]) for h in range(num_heads)])
    return total / len(batches)
