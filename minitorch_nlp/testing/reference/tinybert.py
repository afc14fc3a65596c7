"""Reference maths for TinyBERT's layer-wise distillation (Jiao et al., 2020), the survey's
section VI-A.2, eq 40-44, in ``autograd.numpy``: one head, one position and one pair of tokens at
a time, the mean taken by counting what counts."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np

from .distillation import eq36_temperature_softmax, log_probabilities

OBJECTIVES = ("embedding", "attention", "hidden", "prediction")


def eq41_attention_loss(student_scores, teacher_scores, key_mask=None):
    """L_attn = (1/h) sum_i MSE(A_i^S, A_i^T) on (batch, heads, l, l) scores; with ``key_mask``
    (batch, l) only the (query, key) pairs of two real tokens count."""
    batch, heads, time, _ = student_scores.shape
    keep = np.ones((batch, time), bool) if key_mask is None else np.asarray(key_mask, bool)
    per_head = []
    for i in range(heads):
        total, count = 0.0, 0
        for b in range(batch):
            for q in range(time):
                for k in range(time):
                    if keep[b, q] and keep[b, k]:
                        total = total + (student_scores[b, i, q, k]
                                         - teacher_scores[b, i, q, k]) ** 2
                        count += 1
        per_head.append(total / count if count else 0.0 * anp.sum(student_scores))
    return sum(per_head) / heads


def eq42_hidden_loss(student_hidden, teacher_hidden, projection, mask=None):
    """L_hidn = MSE(H^S W_h, H^T): the squared error of each real position's projected state,
    averaged over the positions and the teacher's features."""
    batch, time, _ = student_hidden.shape
    width = teacher_hidden.shape[-1]
    keep = np.ones((batch, time), bool) if mask is None else np.asarray(mask, bool)
    total, count = 0.0, 0
    for b in range(batch):
        for t in range(time):
            if keep[b, t]:
                mapped = anp.dot(student_hidden[b, t], projection)
                total = total + anp.sum((mapped - teacher_hidden[b, t]) ** 2)
                count += width
    return total / count if count else 0.0 * anp.sum(student_hidden)


def eq43_embedding_loss(student_embeddings, teacher_embeddings, projection, mask=None):
    """L_embd = MSE(E^S W_e, E^T): eq 42 on the embedding layer."""
    return eq42_hidden_loss(student_embeddings, teacher_embeddings, projection, mask)


def eq44_prediction_loss(student_logits, teacher_logits, temperature=1.0):
    """L_pred = -softmax(z^T / t) . log softmax(z^S / t) per row (Jiao et al. eq 10; the survey
    leaves the t off the teacher), averaged over the rows."""
    student = student_logits.reshape(-1, student_logits.shape[-1])
    teacher = teacher_logits.reshape(-1, teacher_logits.shape[-1])
    rows = [anp.sum(-eq36_temperature_softmax(z_t, temperature)
                    * log_probabilities(z_s / temperature))
            for z_s, z_t in zip(student, teacher)]
    return sum(rows) / len(rows)


def eq40_layerwise_loss(student, teacher, embedding_projection, hidden_projection, mapping,
                        weights, temperature=1.0, mask=None, objectives=OBJECTIVES):
    """L_model = sum_{m=0}^{M+1} lambda_m L_layer(S_m, T_g(m)). ``student`` / ``teacher`` are
    dicts with ``hidden_states`` (embeddings, then every layer's output), ``attention_scores``
    (every layer's) and ``logits``; ``mapping`` g(1) .. g(M), teacher layers from 1 (None: the
    uniform g(m) = floor(m N / M)); ``weights`` lambda_0 .. lambda_{M+1} (None: all 1);
    ``objectives`` the terms of L_layer that count (general distillation leaves out the
    prediction layer)."""
    depth = len(student["hidden_states"]) - 1
    teacher_depth = len(teacher["hidden_states"]) - 1
    if mapping is None:
        mapping = [int(np.floor(m * teacher_depth / depth)) for m in range(1, depth + 1)]
    if weights is None:
        weights = [1.0] * (depth + 2)
    loss = 0.0
    if "embedding" in objectives:
        loss = loss + weights[0] * eq43_embedding_loss(
            student["hidden_states"][0], teacher["hidden_states"][0], embedding_projection, mask)
    for m, n in enumerate(mapping, start=1):
        if "attention" in objectives:
            loss = loss + weights[m] * eq41_attention_loss(
                student["attention_scores"][m - 1], teacher["attention_scores"][n - 1], mask)
        if "hidden" in objectives:
            loss = loss + weights[m] * eq42_hidden_loss(
                student["hidden_states"][m], teacher["hidden_states"][n], hidden_projection, mask)
    if "prediction" in objectives:
        loss = loss + weights[len(mapping) + 1] * eq44_prediction_loss(
            student["logits"], teacher["logits"], temperature)
    return loss
