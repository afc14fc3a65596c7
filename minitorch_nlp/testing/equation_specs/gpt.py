"""Spec of GPT's language-modelling objective (eq 18)."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np

from ..reference import gpt as reference
from ..spec import Spec
from .seq2seq import logits_and_ids


def _causal_lm_reference(logits, labels):
    """The mean of -log P over the counted predictions: eq 18 (negated, averaged) per sequence."""
    total, count = 0.0, 0
    for b in range(logits.shape[0]):
        counted = labels[b] != -100
        total = total + reference.eq18_lm_objective(
            reference.softmax_rows(logits[b]), np.where(counted, labels[b], 0), counted)
        count += int(counted[1:].sum())
    return -total / count if count else 0.0 * anp.sum(logits)


SPECS = (
    Spec(18, "causal_lm_loss",
         (("logits", "float64 (batch, T, V): position t predicts token t + 1"),
          ("labels", "int64 (batch, T), the token ids; -100 marks positions not predicted")),
         "float64 (): -L_1 / (number of predictions), labels shifted inside (position t is "
         "scored on labels[:, t + 1])",
         ("logits",),
         lambda: logits_and_ids("labels", -1).map(
             lambda case: {**case, "labels": np.where(case["labels"] < 0, -100,
                                                      case["labels"])}),
         _causal_lm_reference,
         "minitorch_nlp.models.gpt:causal_lm_loss"),
)
