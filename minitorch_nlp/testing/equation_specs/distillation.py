"""Specs of knowledge distillation's function-level equations (section VI-A, eq 35-39): the
softmax with a temperature, the soft-target loss, the student loss and their combination."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import distillation as reference
from ..spec import Spec

LIBRARY = "minitorch_nlp.compress.distillation"
TEMPERATURES = st.floats(0.5, 8.0)


@st.composite
def _logits(draw):
    """{"logits": (batch, classes), "temperature"}."""
    batch, classes = draw(st.integers(1, 4)), draw(st.integers(2, 5))
    return {"logits": draw(S.arrays((batch, classes))), "temperature": draw(TEMPERATURES)}


@st.composite
def _student_teacher(draw, with_labels=False, with_mask=False):
    """Student and teacher logits (batch, time, classes), a temperature, and on request class
    ids (-100 at some positions) and a mask of the positions that count."""
    batch, time, classes = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 5))
    case = {"student_logits": draw(S.arrays((batch, time, classes))),
            "teacher_logits": draw(S.arrays((batch, time, classes), -6.0, 6.0)),
            "temperature": draw(TEMPERATURES)}
    if with_labels:
        labels = draw(S.arrays((batch, time), 0, classes - 1).map(
            lambda a: np.rint(a).astype(np.int64)))
        ignored = draw(S.bool_masks((batch, time), all_false_row=False))
        case["labels"] = np.where(ignored, -100, labels)
    if with_mask:
        case["mask"] = draw(S.bool_masks((batch, time)))
    return case


def _temperature_softmax(logits, temperature):
    return anp.stack([reference.eq36_temperature_softmax(row, temperature) for row in logits])


def _student_loss_case():
    return _student_teacher(with_labels=True).map(
        lambda case: {"student_logits": case["student_logits"], "labels": case["labels"]})


def _distillation_case():
    return st.tuples(_student_teacher(with_labels=True), st.floats(0.0, 1.0)).map(
        lambda pair: {**pair[0], "alpha": pair[1]})


SPECS = (
    Spec(35, "softmax",
         (("x", "float64 (batch, classes), the logits z"),),
         "float64 (batch, classes): p_i = exp(z_i) / sum_j exp(z_j) along the last axis",
         ("x",),
         lambda: _logits().map(lambda case: {"x": case["logits"]}),
         lambda x: anp.stack([reference.eq35_softmax(row) for row in x]),
         "minitorch_nlp.functional:softmax"),
    Spec(36, "temperature_softmax",
         (("logits", "float64 (batch, classes), the logits z"),
          ("temperature", "float > 0, the temperature T")),
         "float64 (batch, classes): p_i = exp(z_i / T) / sum_j exp(z_j / T)",
         ("logits",),
         _logits,
         _temperature_softmax,
         f"{LIBRARY}:temperature_softmax"),
    Spec(37, "soft_target_loss",
         (("student_logits", "float64 (batch, time, classes), z_s"),
          ("teacher_logits", "float64 (batch, time, classes), z_t"),
          ("temperature", "float > 0, T"),
          ("mask", "bool (batch, time), True at the positions that count")),
         "float64 (): sum_i -p_i(z_t, T) log p_i(z_s, T), averaged over the counted positions "
         "(0 when none counts)",
         ("student_logits", "teacher_logits"),
         lambda: _student_teacher(with_mask=True),
         reference.eq37_soft_target_loss,
         f"{LIBRARY}:soft_target_loss",
         "The survey's form, without Hinton et al.'s T^2 (eq 39 applies it)."),
    Spec(38, "hard_target_loss",
         (("student_logits", "float64 (batch, time, classes), z_s"),
          ("labels", "int64 (batch, time), class ids; -100 marks positions that do not count")),
         "float64 (): sum_i -y_i log p_i(z_s, 1) for the one-hot y, averaged over the counted "
         "positions",
         ("student_logits",),
         _student_loss_case,
         reference.eq38_student_loss,
         f"{LIBRARY}:hard_target_loss"),
    Spec(39, "distillation_loss",
         (("student_logits", "float64 (batch, time, classes), z_s"),
          ("teacher_logits", "float64 (batch, time, classes), z_t"),
          ("labels", "int64 (batch, time), class ids; -100 marks positions that do not count"),
          ("temperature", "float > 0, T"),
          ("alpha", "float in [0, 1]; beta = 1 - alpha")),
         "float64 (): alpha T^2 L_D(p(z_t, T), p(z_s, T)) + (1 - alpha) L_s(y, p(z_s, 1)), "
         "L_D over every position",
         ("student_logits", "teacher_logits"),
         _distillation_case,
         reference.eq39_distillation_loss,
         f"{LIBRARY}:distillation_loss",
         "Hinton et al. scale the soft loss by T^2 (the survey's eq 39 does not)."),
)
