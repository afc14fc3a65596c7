"""Specs of section III's function-level equations: the sequence log-probability (eq 2) and
Bahdanau attention's weights and context (eq 9-10)."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import seq2seq as reference
from ..spec import Spec


@st.composite
def logits_and_ids(draw, ids_name, low):
    """{"logits": (batch, T, V), ids_name: int64 (batch, T) in [low, V)}."""
    batch, time, vocab = (draw(st.integers(1, 4)) for _ in range(3))
    ids = draw(S.arrays((batch, time), low, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))
    return {"logits": draw(S.arrays((batch, time, vocab))), ids_name: ids}


@st.composite
def _scores_and_mask(draw):
    batch, source = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    mask = draw(S.bool_masks((batch, source), all_false_row=False))
    mask[:, 0] = True   # every sentence has at least one real token
    return {"scores": draw(S.arrays((batch, source))), "mask": mask}


@st.composite
def _weights_and_memory(draw):
    batch, source, dim = (draw(st.integers(1, 4)) for _ in range(3))
    return {"weights": draw(S.arrays((batch, source), 0.0, 1.0)),
            "memory": draw(S.arrays((batch, source, dim)))}


SPECS = (
    Spec(2, "sequence_log_prob",
         (("logits", "float64 (batch, T, V), teacher-forced scores of the next token"),
          ("targets", "int64 (batch, T), the target tokens; positions holding pad_id count "
                      "for nothing"),
          ("pad_id", "int, the padding id (0)")),
         "float64 (batch,): log P(y | x) = sum_t log softmax(logits[b, t])[y_t]",
         ("logits",),
         lambda: logits_and_ids("targets", 0).map(lambda case: {**case, "pad_id": 0}),
         reference.eq02_sequence_log_prob,
         "minitorch_nlp.decoding:sequence_log_prob"),
    Spec(9, "alignment_weights",
         (("scores", "float64 (batch, S), the alignment scores e_j"),
          ("mask", "bool (batch, S), True at real source tokens (at least one per row)")),
         "float64 (batch, S): alpha_j = exp(e_j) / sum_k exp(e_k) over the real tokens, 0 on "
         "padding",
         ("scores",),
         _scores_and_mask,
         lambda scores, mask: anp.stack([reference.eq09_attention_weights(s, m)
                                         for s, m in zip(scores, mask)]),
         "minitorch_nlp.models.seq2seq:alignment_weights"),
    Spec(10, "context_vector",
         (("weights", "float64 (batch, S), the attention weights alpha_j"),
          ("memory", "float64 (batch, S, D), the encoder states h_j")),
         "float64 (batch, D): c = sum_j alpha_j h_j",
         ("weights", "memory"),
         _weights_and_memory,
         lambda weights, memory: anp.stack([reference.eq10_context_vector(w, m)
                                            for w, m in zip(weights, memory)]),
         "minitorch_nlp.models.seq2seq:context_vector"),
)
