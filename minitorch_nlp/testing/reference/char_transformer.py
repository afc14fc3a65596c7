"""Reference maths for the deep character Transformer (Al-Rfou et al., 2019), the survey's
section VIII-A, eq 85, in ``autograd.numpy``: the references of
``tests/test_sec8_char_transformer.py`` and of eq 85's ``check`` spec.

Written from the paper, one sequence and one position at a time: the probabilities are
exponentials over their sum (their logs taken relative to the largest score), eq 85's product is a
sum of logs over the positions, the schedule of the intermediate layers is the paper's sentence
("the l-th intermediate layer stops contributing any loss after finishing l/2n of the training")
with the fraction 1/2 as a parameter, and the extra targets' losses are halved (their weight a
parameter).
"""
from __future__ import annotations

import autograd.numpy as anp
from autograd.tracer import getval


def log_distribution(scores):
    """log softmax of one position's scores: log(exp(s_v) / sum_w exp(s_w)) written as
    (s_v - m) - log sum_w exp(s_w - m) for the largest score m, so that a probability of
    exp(-1e4) keeps its logarithm instead of underflowing to log 0."""
    top = anp.max(getval(scores))
    return (scores - top) - anp.log(anp.sum(anp.exp(scores - top)))


def eq85_log_probability(scores, chars, ahead=1):
    """log P(t_{ahead:L} | t_0 ...) = sum_i log P(t_{i + ahead} | t_{0:i}) for one segment: eq 85's
    product of conditionals (with ``ahead=1``; ``ahead=k`` is the extra target k steps away),
    from ``scores`` (T, V), position i's scores of the character ``ahead`` steps after it, and
    the segment ``chars`` (T,). Positions whose target is -100 are left out. Returns (sum,
    number of terms)."""
    total, count = 0.0, 0
    for i in range(len(chars) - ahead):
        target = int(chars[i + ahead])
        if target == -100:
            continue
        total = total + log_distribution(scores[i])[target]
        count += 1
    return total, count


def layer_is_counted(layer, num_layers, progress, intermediate_stop):
    """Layer ``layer`` (1-based) of ``num_layers``: the last always counts; an intermediate one
    stops after ``layer / num_layers * intermediate_stop`` of the training (the paper: l/2n)."""
    return layer == num_layers or progress < intermediate_stop * layer / num_layers


def deep_char_loss(logits, labels, progress=0.0, all_positions=True, intermediate_stop=0.5,
                   extra_target_weight=0.5):
    """The paper's training loss for ``logits`` (layers, targets, batch, T, V) and the segments
    ``labels`` (batch, T): per counted layer, the mean of -log P over the predicted positions of
    every segment for the next character, plus ``extra_target_weight`` times the same for each
    character further ahead; summed over the layers."""
    num_layers, num_targets, batch, time = logits.shape[:4]
    total = 0.0
    for layer in range(1, num_layers + 1):
        if not layer_is_counted(layer, num_layers, progress, intermediate_stop):
            continue
        for ahead in range(1, num_targets + 1):
            log_probability, count = 0.0, 0
            for b in range(batch):
                if all_positions:
                    part, n = eq85_log_probability(logits[layer - 1, ahead - 1, b], labels[b],
                                                   ahead)
                else:                        # only the last position that has a target
                    last = time - 1 - ahead
                    part, n = eq85_log_probability(
                        logits[layer - 1, ahead - 1, b, last:last + 1],
                        labels[b, last:last + ahead + 1], ahead)
                log_probability, count = log_probability + part, count + n
            mean = -log_probability / count if count else 0.0 * anp.sum(logits)
            total = total + (mean if ahead == 1 else extra_target_weight * mean)
    return total
