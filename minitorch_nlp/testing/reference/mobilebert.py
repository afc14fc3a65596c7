"""Reference maths for MobileBERT (Sun et al., 2020), the survey's section VI-A.3, eq 45-48, in
``autograd.numpy``: one feature, one position and one head at a time, KL divergences written out
term by term."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np


def eq45_no_norm(h, weight, bias):
    """NoNorm(h) = gamma o h + beta (gamma = ``weight``, beta = ``bias``), feature by feature."""
    columns = [h[..., n] * weight[n] + bias[n] for n in range(h.shape[-1])]
    return anp.stack(columns, axis=-1)


def eq46_feature_map_transfer(teacher_hidden, student_hidden, mask=None):
    """L_FMT = 1/(T N) sum_t sum_n (H^tr_tn - H^st_tn)^2 for one layer, averaged over the
    sequences; with ``mask`` (batch, T) only the real positions count (T = their number)."""
    batch, time, features = teacher_hidden.shape
    keep = np.ones((batch, time), bool) if mask is None else np.asarray(mask, bool)
    total, count = 0.0, 0
    for b in range(batch):
        for t in range(time):
            if keep[b, t]:
                for n in range(features):
                    total = total + (teacher_hidden[b, t, n] - student_hidden[b, t, n]) ** 2
                count += features
    return total / count if count else 0.0 * anp.sum(student_hidden)


def eq47_attention_transfer(teacher_attention, student_attention, mask=None):
    """L_AT = 1/(T A) sum_t sum_a KL(a^tr_ta || a^st_ta) on (batch, A, T, T) attention
    distributions, averaged over the sequences; with ``mask`` only real query positions count,
    and the sums run over real keys."""
    batch, heads, time, _ = teacher_attention.shape
    keep = np.ones((batch, time), bool) if mask is None else np.asarray(mask, bool)
    total, count = 0.0, 0
    for b in range(batch):
        for a in range(heads):
            for t in range(time):
                if not keep[b, t]:
                    continue
                for k in range(time):
                    if keep[b, k]:
                        p, q = teacher_attention[b, a, t, k], student_attention[b, a, t, k]
                        total = total + p * (anp.log(p) - anp.log(q))
                count += 1
    return total / count if count else 0.0 * anp.sum(student_attention)


def eq48_pretraining_distillation(mlm_loss, kd_loss, nsp_loss, alpha):
    """L_PD = alpha L_MLM + (1 - alpha) L_KD + L_NSP."""
    return alpha * mlm_loss + (1.0 - alpha) * kd_loss + nsp_loss
