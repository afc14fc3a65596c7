"""Specs of ELECTRA's losses (eq 107, 108, 110)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import electra as reference
from ..spec import Spec


@st.composite
def _electra_case(draw):
    """Generator logits with masked-LM labels (at least one masked position), discriminator
    logits with replaced labels and a padding mask (at least one real token)."""
    batch, time, vocab = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 5))
    targets = draw(S.arrays((batch, time), 0, vocab - 1)).round().astype(np.int64)
    masked = draw(S.bool_masks((batch, time)))
    masked.flat[0] = True
    attention_mask = draw(S.bool_masks((batch, time))) | masked
    return {"generator_logits": draw(S.arrays((batch, time, vocab))),
            "discriminator_logits": draw(S.arrays((batch, time))),
            "mlm_labels": np.where(masked, targets, -100),
            "replaced": draw(S.bool_masks((batch, time))).astype(np.int64),
            "attention_mask": draw(st.none() | st.just(attention_mask))}


_GENERATOR_ARGS = (
    ("generator_logits", "float64 (batch, T, V), the generator's scores of every token"),
    ("mlm_labels", "int64 (batch, T): the original id at masked positions, -100 elsewhere"),
)
_DISCRIMINATOR_ARGS = (
    ("discriminator_logits", "float64 (batch, T), each token's score of being replaced: "
                             "D(x^corr, t) = P(original) = sigmoid(-logit)"),
    ("replaced", "int64 (batch, T): 1 where x^corr_t != x_t, 0 where it is the original"),
    ("attention_mask", "None or bool (batch, T), False on padding (not counted)"),
)


def _rename(case, names):
    return {new: case[old] for old, new in names.items()}


SPECS = (
    Spec(107, "masked_lm_loss",
         (("logits", _GENERATOR_ARGS[0][1]), ("labels", _GENERATOR_ARGS[1][1])),
         "float64 (): the mean over the masked positions of -log p_G(x_i | x^masked)",
         ("logits",),
         lambda: _electra_case().map(lambda case: _rename(
             case, {"generator_logits": "logits", "mlm_labels": "labels"})),
         reference.eq107_generator_mlm_loss,
         "minitorch_nlp.models.bert:masked_lm_loss",
         "ELECTRA's generator is trained with BERT's masked-LM loss (eq 25 is the same "
         "objective); the survey's expectation of a sum becomes a mean over masked positions."),
    Spec(108, "discriminator_loss",
         (("logits", _DISCRIMINATOR_ARGS[0][1]), _DISCRIMINATOR_ARGS[1],
          _DISCRIMINATOR_ARGS[2]),
         "float64 (): eq 108's sum over tokens, averaged over the counted tokens",
         ("logits",),
         lambda: _electra_case().map(lambda case: {
             "logits": case["discriminator_logits"], "replaced": case["replaced"],
             "attention_mask": case["attention_mask"]}),
         lambda logits, replaced, attention_mask: reference.eq108_discriminator_loss(
             logits, replaced, attention_mask),
         "minitorch_nlp.models.electra:discriminator_loss",
         "The logits score 'replaced' (HuggingFace's convention), so D = sigmoid(-logit); the "
         "mean over tokens is ELECTRA's released normalisation, against which lambda = 50 was "
         "tuned."),
    Spec(110, "electra_loss",
         _GENERATOR_ARGS[:1] + _DISCRIMINATOR_ARGS[:1] + _GENERATOR_ARGS[1:]
         + _DISCRIMINATOR_ARGS[1:],
         "float64 (): L_MLM (eq 107) + 50 L_Disc (eq 108)",
         ("generator_logits", "discriminator_logits"),
         _electra_case,
         reference.eq110_electra_loss,
         "minitorch_nlp.models.electra:electra_loss",
         "lambda = 50 (Clark et al. section 3.2), the library's default discriminator_weight."),
)
