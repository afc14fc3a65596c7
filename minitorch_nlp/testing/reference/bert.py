"""Reference maths for BERT's pretraining objective (survey eq 25, Devlin et al. 2019, section
3.1, Task #1), in ``autograd.numpy``: a loop over the chosen positions with the textbook
softmax (its largest score subtracted), where the library calls a fused cross-entropy."""
from __future__ import annotations

import autograd.numpy as anp

IGNORED = -100


def eq25_masked_lm_objective(logits, labels):
    """L_BERT = sum_{x in T} log p(x | N) (eq 25): the log-likelihood of the chosen tokens T
    (the positions where ``labels`` is not -100), each predicted from the masked input N by a
    softmax over its position's ``logits`` (batch, time, vocab). Returns (L_BERT, |T|)."""
    terms = [_log_p(logits[b, t], labels[b, t])
             for b in range(labels.shape[0]) for t in range(labels.shape[1])
             if labels[b, t] != IGNORED]
    return sum(terms), len(terms)


def _log_p(scores, x):
    """log(exp(s_x) / sum_v exp(s_v)) written as s_x - m - log sum_v exp(s_v - m), m the largest
    score, so that scores of ±1e4 and -inf stay finite."""
    m = anp.max(scores)
    return scores[x] - m - anp.log(anp.sum(anp.exp(scores - m)))
