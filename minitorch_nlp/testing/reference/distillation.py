"""Reference maths for knowledge distillation (Hinton et al., 2015), the survey's section VI-A,
eq 35-39, in ``autograd.numpy``: one row of logits at a time, the textbook softmax (no max
subtraction: the strategies' logits are small), one-hot sums for the labels, the mean taken by
counting the rows that count."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np


def eq35_softmax(z):
    """p_i = exp(z_i) / sum_j exp(z_j) for one vector z."""
    e = anp.exp(z)
    return e / anp.sum(e)


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
        p_s = eq36_temperature_softmax(z_s, temperature)
        total = total + anp.sum(-p_t * anp.log(p_s))
        count += 1
    return total / count if count else 0.0 * anp.sum(student_logits)


def eq38_student_loss(student_logits, labels, ignore_index=-100):
    """L_s = sum_i -y_i log p_i(z_s, 1) with y the one-hot label, averaged over the rows whose
    label is not ``ignore_index``."""
    student, ids = _rows(student_logits), np.asarray(labels).reshape(-1)
    total, count = 0.0, 0
    for z_s, label in zip(student, ids):
        if label == ignore_index:
            continue
        y = np.eye(len(z_s))[label]
        total = total + anp.sum(-y * anp.log(eq35_softmax(z_s)))
        count += 1
    return total / count if count else 0.0 * anp.sum(student_logits)


def eq39_distillation_loss(student_logits, teacher_logits, labels, temperature, alpha,
                           beta=None):
    """L = alpha T^2 L_D + beta L_s (Hinton et al.'s T^2; beta = 1 - alpha when None)."""
    beta = 1.0 - alpha if beta is None else beta
    return (alpha * temperature ** 2
            * eq37_soft_target_loss(student_logits, teacher_logits, temperature)
            + beta * eq38_student_loss(student_logits, labels))
