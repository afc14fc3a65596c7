"""mBART's equations (Liu et al., 2020; survey section V-C.1): the language sampling ratio (eq 30)
and the multilingual denoising objective (eq 31), written one language and one token at a time."""
from __future__ import annotations

import autograd.numpy as anp


def eq30_language_sampling_ratios(sizes, alpha=0.7):
    """lambda_i = (1 / p_i) * p_i^alpha / sum_j p_j^alpha, p_i = sizes_i / sum_j sizes_j."""
    total = sum(sizes[j] for j in range(len(sizes)))
    shares = [sizes[i] / total for i in range(len(sizes))]
    normaliser = sum(anp.exp(alpha * anp.log(p)) for p in shares)
    return anp.stack([(1.0 / p) * anp.exp(alpha * anp.log(p)) / normaliser for p in shares])


def eq31_multilingual_denoising_log_likelihood(logits, targets, pad_id):
    """L = sum over texts X (of every language) of log P(X | g(X)) = sum_t log softmax(scores
    of step t)[x_t], skipping positions that hold ``pad_id``."""
    total = 0.0
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            if targets[b, t] == pad_id:
                continue
            scores = logits[b, t]
            largest = anp.max(scores)      # exp(scores - largest): no overflow at ±1e4
            total = total + scores[targets[b, t]] - largest - anp.log(
                anp.sum(anp.exp(scores - largest)))
    return total
