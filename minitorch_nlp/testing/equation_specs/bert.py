"""Spec of BERT's masked-LM objective (eq 25)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import bert as reference
from ..spec import Spec


@st.composite
def _chosen_tokens(draw):
    batch, time, vocab = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    chosen = draw(S.bool_masks((batch, time)))
    chosen[0, 0] = True   # at least one token to predict
    ids = draw(S.arrays((batch, time), 0, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))
    # logits of ±1e4 sometimes, masking values (-1e4, -1e9, -inf) on tokens other than the label
    logits, masked = draw(S.masked_logits((batch, time, vocab)))
    unmasked = draw(S.stress_arrays((batch, time, vocab)))
    labelled = np.arange(vocab) == ids[..., None]
    return {"logits": np.where(masked & labelled, unmasked, logits),
            "labels": np.where(chosen, ids, reference.IGNORED)}


def _mean_negative_objective(logits, labels):
    total, count = reference.eq25_masked_lm_objective(logits, labels)
    return -total / count


SPECS = (
    Spec(25, "masked_lm_loss",
         (("logits", "float64 (batch, T, V), the predictions at every position"),
          ("labels", "int64 (batch, T): the original token at the chosen positions T, -100 "
                     "elsewhere (at least one chosen)")),
         "float64 (): -L_BERT / |T|, L_BERT = sum over the chosen positions of log p(x | N)",
         ("logits",),
         _chosen_tokens,
         _mean_negative_objective,
         "minitorch_nlp.models.bert:masked_lm_loss",
         "The survey prints eq 25 in its XLNet section; it is BERT's objective. The loss is its "
         "negation averaged over the chosen tokens, as Devlin et al. train it."),
)
