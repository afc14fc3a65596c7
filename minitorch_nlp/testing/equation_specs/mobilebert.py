"""Specs of MobileBERT's function-level equations (section VI-A.3, eq 45-48): NoNorm, feature
map transfer, attention transfer and the pre-training distillation loss."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import mobilebert as reference
from ..spec import Spec


def _real_tokens(draw, batch, time):
    """None (every token is real) or a padding mask, sometimes with a sequence of padding only."""
    if draw(st.booleans()):
        return None
    mask = draw(S.bool_masks((batch, time), all_false_row=False))
    mask[:, 0] = True
    if draw(st.booleans()):
        mask[draw(st.integers(0, batch - 1))] = False
    return mask


@st.composite
def _no_norm_case(draw):
    shape = draw(S.shapes(min_dims=1, max_dims=4))
    return {"h": draw(S.stress_arrays(shape, kinds=("large", "tiny"))),
            "weight": draw(S.arrays(shape[-1:])), "bias": draw(S.arrays(shape[-1:]))}


@st.composite
def _feature_maps(draw):
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    return {"teacher_hidden": draw(S.stress_arrays(shape, kinds=("large", "tiny"))),
            "student_hidden": draw(S.stress_arrays(shape, kinds=("large", "tiny"))),
            "mask": _real_tokens(draw, *shape[:2])}


def _distributions(scores):
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@st.composite
def _attentions(draw):
    """Attention rows from scores of up to ±30 (probabilities down to about 1e-26, never 0: the
    gradient with respect to a teacher weight of 0 is -inf), and a mask or None."""
    batch, heads, time = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    shape = (batch, heads, time, time)
    scale = draw(st.sampled_from((1.0, 10.0)))
    return {"teacher_attention": _distributions(scale * draw(S.arrays(shape))),
            "student_attention": _distributions(scale * draw(S.arrays(shape))),
            "mask": _real_tokens(draw, batch, time)}


@st.composite
def _losses(draw):
    return {"mlm_loss": draw(S.arrays((), 0.0, 8.0)), "kd_loss": draw(S.arrays((), 0.0, 8.0)),
            "nsp_loss": draw(S.arrays((), 0.0, 2.0)),
            "alpha": draw(st.sampled_from((0.0, 1.0)) | st.floats(0.0, 1.0))}


LIBRARY = "minitorch_nlp.compress.mobilebert_losses"
SPECS = (
    Spec(45, "no_norm",
         (("h", "float64 (..., n), the activations"), ("weight", "float64 (n,), gamma"),
          ("bias", "float64 (n,), beta")),
         "float64 (..., n): gamma o h + beta",
         ("h", "weight", "bias"),
         _no_norm_case,
         reference.eq45_no_norm,
         "minitorch_nlp.models.mobilebert:no_norm"),
    Spec(46, "feature_map_transfer_loss",
         (("teacher_hidden", "float64 (batch, T, N), the teacher's layer output"),
          ("student_hidden", "float64 (batch, T, N), the student's"),
          ("mask", "None (every token is real) or bool (batch, T), True on real tokens")),
         "float64 (): 1/(T N) sum_t sum_n (H^tr - H^st)^2 over the real tokens",
         ("teacher_hidden", "student_hidden"),
         _feature_maps,
         reference.eq46_feature_map_transfer,
         f"{LIBRARY}:feature_map_transfer_loss"),
    Spec(47, "attention_transfer_loss",
         (("teacher_attention", "float64 (batch, A, T, T), the teacher's attention rows"),
          ("student_attention", "float64 (batch, A, T, T), the student's"),
          ("mask", "None (every token is real) or bool (batch, T), True on real tokens")),
         "float64 (): 1/(T A) sum_t sum_a KL(a^tr_ta || a^st_ta), real queries and keys only",
         ("teacher_attention", "student_attention"),
         _attentions,
         reference.eq47_attention_transfer,
         f"{LIBRARY}:attention_transfer_loss"),
    Spec(48, "pretraining_distillation_loss",
         (("mlm_loss", "float64 (), L_MLM"), ("kd_loss", "float64 (), L_KD"),
          ("nsp_loss", "float64 (), L_NSP"), ("alpha", "float in [0, 1]")),
         "float64 (): alpha L_MLM + (1 - alpha) L_KD + L_NSP",
         ("mlm_loss", "kd_loss", "nsp_loss"),
         _losses,
         reference.eq48_pretraining_distillation,
         f"{LIBRARY}:pretraining_distillation_loss"),
)
