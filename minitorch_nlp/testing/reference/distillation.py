"""Reference maths for knowledge distillation (Hinton et al., 2015), the survey's section VI-A,
eq 35-39, in ``autograd.numpy``: one row of logits at a time, the textbook softmax with the row's
largest logit subtracted first (the strategies draw logits of ±1e4 and masking values of -1e9 and
-inf), the log of a probability written as z - max - log sum exp(z - max), one-hot sums for the
labels, the mean taken by counting the rows that count."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval


def eq35_softmax(z):
    """p_i = exp(z_i) / sum_j exp(z_j) for one vector z: exp(z_i - m) / sum_j exp(z_j - m) with m
    the largest z_j (the same ratio); a vector that is -inf throughout gives zeros."""
    if np.all(np.isneginf(getval(z))):
        return np.zeros(np.shape(z))
    e = anp.exp(z - anp.max(z))
    return e / anp.sum(e)


def eq35_softmax_along(x, axis):
    """``eq35_softmax`` of every vector of ``x`` along ``axis``."""
    moved = anp.moveaxis(x, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = anp.stack([eq35_softmax(row) for row in rows]).reshape(moved.shape)
    return anp.moveaxis(out, -1, axis)


def log_probabilities(z):
    """log p_i(z) = z_i - m - log sum_j exp(z_j - m) for one vector z (m its largest entry): the
    log of eq 35, finite wherever z_i is."""
    m = anp.max(z)
    return z - m - anp.log(anp.sum(anp.exp(z - m)))


def eq36_temperature_softmax(z, temperature):
    """p_i = exp(z_i / T) / sum_j exp(z_j / T) for one vector z."""
    return eq35_softmax(z / temperature)


def _rows(logits):
    return logits.reshape(-1, logits.shape[-1])


def eq37_soft_target_loss(student_logits, teacher_logits, temperature, mask=None):
    """L_D = sum_i -p_i(z_t, T) log p_i(z_s, T) per row (the survey's eq 37, no T^2), averaged
    over the rows where ``mask`` is True (every row when None)."""
    student, teacher = _rows(student_logits), _rows(teacher_logits)
    keep = (np.ones(len(student), dtype=bool) if mask is None
            else np.asarray(mask, dtype=bool).reshape(-1))
    total, count = 0.0, 0
    for z_s, z_t, counted in zip(student, teacher, keep):
        if not counted:
            continue
        p_t = eq36_temperature_softmax(z_t, temperature)
        log_p_s = log_probabilities(z_s / temperature)
        total = total + anp.sum(-p_t * log_p_s)
        count += 1
    return total / count if count else 0.0 * anp.sum(student_logits)


def eq38_student_loss(student_logits, labels, ignore_index=-100):
    """L_s = sum_i -y_i log p_i(z_s, 1), averaged over the rows that count: with integer
    ``labels`` y is the one-hot label and rows labelled ``ignore_index`` do not count; with float
    ``labels`` of the logits' shape y is that distribution and every row counts."""
    student = _rows(student_logits)
    soft = np.asarray(labels).dtype.kind == "f"
    targets = _rows(np.asarray(labels)) if soft else np.asarray(labels).reshape(-1)
    total, count = 0.0, 0
    for z_s, label in zip(student, targets):
        if not soft and label == ignore_index:
            continue
        y = label if soft else np.eye(len(z_s))[label]
        total = total + anp.sum(-y * log_probabilities(z_s))
        count += 1
    return total / count if count else 0.0 * anp.sum(student_logits)


def eq39_distillation_loss(student_logits, teacher_logits, labels, temperature, alpha,
                           beta=None, mask=None, ignore_index=-100):
    """L = alpha T^2 L_D + beta L_s (Hinton et al.'s T^2; beta = 1 - alpha when None), L_D over
    the rows where ``mask`` is True, L_s over the rows not labelled ``ignore_index``."""
    beta = 1.0 - alpha if beta is None else beta
    return (alpha * temperature ** 2
            * eq37_soft_target_loss(student_logits, teacher_logits, temperature, mask)
            + beta * eq38_student_loss(student_logits, labels, ignore_index))
