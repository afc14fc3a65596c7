"""Reference maths of quantisation (the survey's section VI-C): LQ-Nets' quantiser to levels,
learnable basis and bitwise inner product (eq 56-58), Q-BERT's loss and Hessian-vector product
(eq 59-60), Q8BERT's symmetric linear quantisation (eq 61) and its fake-quantised training form,
element by element."""
from __future__ import annotations

import itertools

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval


def eq61_symmetric_quantize(x, scale, bits):
    """Quantize(x | S, M) = Clamp(round(x S), -M, M), M = 2^(b-1) - 1 (Zafrir et al. 2019,
    eq. 1; the survey's eq 61 writes a floor where the paper rounds to nearest), one entry at a
    time, ties to even. Plain NumPy: rounding has no gradient."""
    highest = 2 ** (bits - 1) - 1
    values = np.asarray(x, dtype=np.float64) * scale
    out = np.empty(values.shape)
    for index, value in np.ndenumerate(values):
        nearest = float(np.round(value))
        out[index] = min(max(nearest, -highest), highest)
    return out


def eq61_fake_quantize(x, scale, bits):
    """x^q = Quantize(x) / S in the forward pass, with the straight-through estimator
    dx^q/dx = 1 (Q8BERT section 3): x plus the constant x^q - x."""
    constant = eq61_symmetric_quantize(getval(x), scale, bits) / scale - getval(x)
    return x + constant


def eq56_quantize_to_levels(x, levels):
    """Q(x) = q_l for x in (t_l, t_{l+1}] with t_l = (q_{l-1} + q_l) / 2 (Zhang et al. 2018,
    eq. 1; the survey's eq 56), one entry at a time: the first level whose upper threshold is
    at least x. Returns (values, level indices)."""
    q = [float(level) for level in levels]
    thresholds = [(low + high) / 2 for low, high in zip(q, q[1:])] + [np.inf]
    index = np.array([next(level for level, t in enumerate(thresholds) if value <= t)
                      for value in np.ravel(x)], dtype=np.int64).reshape(np.shape(x))
    return np.array(q)[index], index


def lq_levels(basis):
    """The 2^K levels v^T e of basis ``v`` over every encoding e in {-1, 1}^K, sorted."""
    return sorted(sum(b * e for b, e in zip(basis, code))
                  for code in itertools.product((-1.0, 1.0), repeat=len(basis)))


def eq57_lq_quantize(x, basis):
    """Q_LQ(x, v) = v^T e_l for x in (t_l, t_{l+1}] (Zhang et al. eq. 2; the survey's eq 57) with
    the straight-through gradient: x plus the constant Q_LQ(x) - x."""
    values, _ = eq56_quantize_to_levels(getval(x), lq_levels(basis))
    return x + (values - getval(x))


def eq58_lq_matmul(a, a_basis, w, w_basis):
    """Q(a) Q(w)^T (Zhang et al. eq. 3-4; the survey's eq 58) as the float product of the
    quantised values, entry by entry: what the bitwise xnor-popcount form must equal."""
    qa = eq56_quantize_to_levels(a, lq_levels(a_basis))[0]
    qw = eq56_quantize_to_levels(w, lq_levels(w_basis))[0]
    return np.array([[sum(qa[i, n] * qw[j, n] for n in range(a.shape[1]))
                      for j in range(w.shape[0])] for i in range(a.shape[0])])


def eq59_classification_loss(embedding, classifier, bias, batches):
    """L = sum_i CE(softmax(W_c(mean_t W_e[x_it])), y_i) (Shen et al. 2020, eq. 1; the survey's
    eq 59) for a bag-of-embeddings classifier, example by example (the log-normaliser shifted by the
    largest score, so that logits of +-1e4 stay finite)."""
    total = 0.0
    for ids, labels in batches:
        for row, label in zip(ids, labels):
            pooled = sum(embedding[token] for token in row) / len(row)
            scores = [anp.sum(classifier[c] * pooled) + bias[c] for c in range(len(bias))]
            top = max(getval(s) for s in scores)   # log sum exp s = top + log sum exp(s - top)
            log_normaliser = top + anp.log(sum(anp.exp(s - top) for s in scores))
            total = total - (scores[label] - log_normaliser)
    return total


def eq60_hessian_vector_product(W, v, x):
    """H v for the Hessian H in W (classes, features) of L(W) = sum_i CE(softmax(W x_i), y_i)
    (Q-BERT's eq. 3-4; the survey's eq 60), from the closed form H = sum_i (diag(p_i) - p_i
    p_i^T) (x) x_i x_i^T: (H v)_i = (p_i * (v x_i) - p_i (p_i . v x_i)) x_i^T, summed. The
    labels y_i do not enter H."""
    total = np.zeros(W.shape)
    for features in x:
        scores = W @ features
        p = np.exp(scores - scores.max())
        p = p / p.sum()
        direction = v @ features
        total = total + np.outer(p * direction - p * (p @ direction), features)
    return total
