"""Spec of BERT's masked-LM objective (eq 25), the objective XLNet's section sets against its
permutation objective (eq 26-27, tested on whole models in ``tests/test_sec4_xlnet.py``)."""
from __future__ import annotations

import numpy as np

from ..reference import xlnet as reference
from ..spec import Spec
from .seq2seq import logits_and_ids


def _masked(case):
    """Positions with an even id are off T (-100), so that some are predicted and some not."""
    labels = case["labels"]
    return {**case, "labels": np.where(labels % 2 == 0, -100, labels)}


SPECS = (
    Spec(25, "masked_lm_loss",
         (("logits", "float64 (batch, T, V): the scores at every position of the masked input"),
          ("labels", "int64 (batch, T): the original token at the chosen positions T, -100 "
                     "elsewhere")),
         "float64 (): -L_BERT / |T|, the mean of -log p(x | N) over the chosen positions",
         ("logits",),
         lambda: logits_and_ids("labels", 0).map(_masked),
         reference.eq25_masked_lm_objective,
         "minitorch_nlp.models.bert:masked_lm_loss"),
)
