"""Specs of TinyBERT's function-level equations (section VI-A.2, eq 41-44): attention, hidden
state, embedding and prediction-layer distillation. Eq 40, the sum over layers, is an objective
over whole models (``compress.TinyBertLoss``), tested in ``tests/test_sec6_tinybert.py``."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import strategies as S
from ..reference import tinybert as reference
from ..spec import Spec

LIBRARY = "minitorch_nlp.compress.tinybert"


def _real_tokens(draw, batch, time):
    mask = draw(S.bool_masks((batch, time), all_false_row=False))
    mask[:, 0] = True                     # every sequence has a real token
    return mask


@st.composite
def _scores(draw):
    batch, heads, time = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    shape = (batch, heads, time, time)
    return {"student_scores": draw(S.arrays(shape)), "teacher_scores": draw(S.arrays(shape)),
            "key_mask": _real_tokens(draw, batch, time)}


@st.composite
def _states(draw, student, teacher):
    batch, time = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    narrow, wide = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    return {student: draw(S.arrays((batch, time, narrow))),
            teacher: draw(S.arrays((batch, time, wide))),
            "projection": draw(S.arrays((narrow, wide))),
            "mask": _real_tokens(draw, batch, time)}


@st.composite
def _logits(draw):
    batch, classes = draw(st.integers(1, 4)), draw(st.integers(2, 5))
    return {"student_logits": draw(S.arrays((batch, classes))),
            "teacher_logits": draw(S.arrays((batch, classes))),
            "temperature": draw(st.floats(0.5, 4.0))}


def _states_arguments(student, teacher, what):
    return ((student, f"float64 (batch, l, d'), the student's {what}"),
            (teacher, f"float64 (batch, l, d), the teacher's {what}"),
            ("projection", "float64 (d', d), the learnt map into the teacher's width"),
            ("mask", "bool (batch, l), True at the positions that count"))


SPECS = (
    Spec(41, "attention_loss",
         (("student_scores", "float64 (batch, heads, l, l), the student's attention scores"),
          ("teacher_scores", "float64 (batch, heads, l, l), the teacher's"),
          ("key_mask", "bool (batch, l), True on real tokens")),
         "float64 (): (1/h) sum_i MSE(A_i^S, A_i^T) over the pairs of real tokens",
         ("student_scores", "teacher_scores"),
         _scores,
         reference.eq41_attention_loss,
         f"{LIBRARY}:attention_loss"),
    Spec(42, "hidden_state_loss",
         _states_arguments("student_hidden", "teacher_hidden", "hidden states"),
         "float64 (): MSE(H^S W_h, H^T) over the counted positions and the teacher's features",
         ("student_hidden", "teacher_hidden", "projection"),
         lambda: _states("student_hidden", "teacher_hidden"),
         reference.eq42_hidden_loss,
         f"{LIBRARY}:hidden_state_loss"),
    Spec(43, "embedding_loss",
         _states_arguments("student_embeddings", "teacher_embeddings", "embedding outputs"),
         "float64 (): MSE(E^S W_e, E^T) over the counted positions and the teacher's features",
         ("student_embeddings", "teacher_embeddings", "projection"),
         lambda: _states("student_embeddings", "teacher_embeddings"),
         reference.eq43_embedding_loss,
         f"{LIBRARY}:embedding_loss"),
    Spec(44, "prediction_loss",
         (("student_logits", "float64 (batch, classes), z^S"),
          ("teacher_logits", "float64 (batch, classes), z^T"),
          ("temperature", "float > 0, t")),
         "float64 (): -softmax(z^T / t) . log softmax(z^S / t), averaged over the rows",
         ("student_logits", "teacher_logits"),
         _logits,
         reference.eq44_prediction_loss,
         f"{LIBRARY}:prediction_loss",
         "Jiao et al. divide both logits by t; the survey's eq 44 leaves the teacher's alone."),
)
