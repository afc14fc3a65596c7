"""Reference maths of ELECTRA (Clark et al., 2020), the survey's section IX-D: eq 107-110."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.scipy.special import erf
from autograd.tracer import getval


def eq107_generator_mlm_loss(logits, labels):
    """L_MLM = E(sum_{i in m} -log p_G(x_i | x^masked)) (eq 107), as the mean over the masked
    positions m (``labels`` != -100, holding the original x_i) of -log softmax(logits)[x_i],
    one position at a time, the softmax written out as exp / sum exp (the exponents relative
    to the largest score, so that scores of 1e4 do not overflow)."""
    terms = []
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            if labels[b, t] != -100:
                scores = logits[b, t] - anp.max(getval(logits[b, t]))
                terms.append(anp.log(anp.sum(anp.exp(scores))) - scores[labels[b, t]])
    return sum(terms) / len(terms) if terms else 0.0 * anp.sum(logits)


def eq108_discriminator_loss(logits, replaced, attention_mask=None):
    """L_Disc = sum_t -1(x^corr_t = x_t) log D(x^corr, t) - 1(x^corr_t != x_t) log(1 - D) (eq 108)
    with D = P(original) = 1 / (1 + exp(logit)) (the logits score "replaced"), averaged over the
    counted tokens (``attention_mask`` 1; all when None), token by token. -log D =
    log(1 + exp(logit)) and -log(1 - D) = log(1 + exp(-logit)), each as log(exp(0) + exp(.)),
    which stays finite (and D's logarithm exact) at logits of +-1e4."""
    terms = []
    for b in range(replaced.shape[0]):
        for t in range(replaced.shape[1]):
            if attention_mask is None or attention_mask[b, t]:
                logit = logits[b, t]
                terms.append(anp.logaddexp(0.0, logit) if replaced[b, t] == 0
                             else anp.logaddexp(0.0, -logit))
    return sum(terms) / max(len(terms), 1) if terms else 0.0 * anp.sum(logits)


def eq109_generator_probabilities(hidden, embeddings, bias):
    """p_G(x_t | x) = exp(e(x_t)^T h_G(x)_t) / sum_{x'} exp(e(x')^T h_G(x)_t) (eq 109), plus the
    output bias of the released models: ``hidden`` (time, E), ``embeddings`` (V, E), ``bias``
    (V,); returns (time, V), one position and one vocabulary entry at a time."""
    rows = []
    for t in range(hidden.shape[0]):
        scores = anp.array([anp.dot(embeddings[v], hidden[t]) + bias[v]
                            for v in range(embeddings.shape[0])])
        scores = scores - anp.max(getval(scores))       # the same ratios, no overflow
        rows.append(anp.exp(scores) / anp.sum(anp.exp(scores)))
    return anp.stack(rows)


def generator_head(hidden, head, eps=1e-12):
    """h_G(x)_t = LayerNorm(GELU(W h_t + b)) for every position of ``hidden`` (batch, time, H):
    the generator head's dense layer (``head["dense_w"]`` (E, H), ``head["dense_b"]`` (E,)),
    the exact GELU x Phi(x) and the textbook LayerNorm (``norm_g``, ``norm_b``), one position
    at a time. Returns (batch, time, E)."""
    rows = []
    for sequence in hidden:
        states = []
        for h in sequence:
            z = anp.dot(head["dense_w"], h) + head["dense_b"]
            z = 0.5 * z * (1.0 + erf(z / np.sqrt(2.0)))
            mean = anp.mean(z)
            variance = anp.mean((z - mean) ** 2)
            states.append((z - mean) / anp.sqrt(variance + eps) * head["norm_g"] + head["norm_b"])
        rows.append(anp.stack(states))
    return anp.stack(rows)


def eq110_electra_loss(generator_logits, discriminator_logits, mlm_labels, replaced,
                       attention_mask=None, discriminator_weight=50.0):
    """min L_MLM(x, theta_G) + lambda L_Disc(x, theta_D) (eq 110), lambda =
    ``discriminator_weight`` (the paper: 50)."""
    return (eq107_generator_mlm_loss(generator_logits, mlm_labels)
            + discriminator_weight * eq108_discriminator_loss(discriminator_logits, replaced,
                                                              attention_mask))


def replaced_labels(corrupted, original):
    """1 where the corrupted token differs from the original, 0 where it is the same."""
    return np.array([[int(c != o) for c, o in zip(row_c, row_o)]
                     for row_c, row_o in zip(corrupted, original)], dtype=np.int64)
