"""Specs of knowledge distillation's function-level equations (section VI-A, eq 35-39): the
softmax with a temperature, the soft-target loss, the student loss and their combination."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .. import strategies as S
from ..reference import distillation as reference
from ..spec import Spec

LIBRARY = "minitorch_nlp.compress.distillation"
TEMPERATURES = st.floats(0.5, 8.0) | st.sampled_from((1.0, 1e-3, 1e3))
"""Temperatures: moderate ones, 1 (the plain softmax), and a tiny and a huge one (logits
divided by 1e-3 reach ±1e4; by 1e3, a nearly uniform distribution)."""
IGNORE_INDICES = st.sampled_from((-100, -1, 0))


@st.composite
def _logits(draw, with_temperature=True):
    """{"logits" or "x": 1-3 axes, logits of ±1e4 and masking values (-1e4, -1e9, -inf) along
    the softmax's axis, a row masked throughout sometimes; "axis", "temperature"}."""
    shape = draw(S.shapes(min_dims=1, max_dims=3))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    moved = tuple(np.moveaxis(np.empty(shape), axis, -1).shape)
    logits, _ = draw(S.masked_logits(moved, all_masked_rows=True))
    case = {"logits": np.moveaxis(logits, -1, axis), "axis": axis}
    if with_temperature:
        case["temperature"] = draw(TEMPERATURES)
    return case


@st.composite
def _soft_labels(draw, shape):
    """Class distributions of ``shape`` (..., classes) with exact zeros (0 log p counts 0)."""
    weights = draw(S.arrays(shape, 0.0, 1.0))
    weights[draw(hnp.arrays(np.bool_, shape))] = 0.0
    rows = weights.reshape(-1, shape[-1])
    rows[rows.sum(axis=1) == 0, 0] = 1.0
    return weights / weights.sum(axis=-1, keepdims=True)


@st.composite
def _student_teacher(draw, with_labels=False, with_mask=False, soft_labels=False):
    """Student logits (batch, time, classes), sometimes of ±1e4; teacher logits with masking
    values (a teacher probability of exactly 0); a temperature; on request class ids (the ignore
    index at some positions, and the ignore index drawn: -100, -1 or the real class 0) or, with
    ``soft_labels``, sometimes class distributions instead; and a mask of the positions that
    count, or None (every position)."""
    batch, time, classes = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 5))
    shape = (batch, time, classes)
    case = {"student_logits": draw(S.stress_arrays(shape)),
            "teacher_logits": draw(S.masked_logits(shape, -6.0, 6.0))[0],
            "temperature": draw(TEMPERATURES)}
    if with_labels:
        case["ignore_index"] = draw(IGNORE_INDICES)
        if soft_labels and draw(st.booleans()):
            case["labels"] = draw(_soft_labels(shape))
        else:
            labels = draw(hnp.arrays(np.int64, (batch, time), elements=st.integers(0, classes - 1)))
            ignored = draw(S.bool_masks((batch, time), all_false_row=False))
            case["labels"] = np.where(ignored, case["ignore_index"], labels)
    if with_mask:
        case["mask"] = draw(st.none() | S.bool_masks((batch, time)))
    return case


def _softmax(x, axis):
    return reference.eq35_softmax_along(x, axis)


def _temperature_softmax(logits, temperature, axis):
    return reference.eq35_softmax_along(logits / temperature, axis)


def _student_loss_case():
    return _student_teacher(with_labels=True, soft_labels=True).map(
        lambda case: {key: case[key] for key in ("student_logits", "labels", "ignore_index")})


def _distillation_case():
    return st.tuples(_student_teacher(with_labels=True, with_mask=True), st.floats(0.0, 1.0),
                     st.none() | st.floats(0.0, 2.0)).map(
        lambda parts: {**parts[0], "alpha": parts[1], "beta": parts[2]})


SPECS = (
    Spec(35, "softmax",
         (("x", "float64 (..., classes, ...), the logits z: any size (±1e4), masked entries of "
                "-1e4, -1e9 or -inf"),
          ("axis", "int, the axis of the classes (negative counts from the end)")),
         "float64, x's shape: p_i = exp(z_i) / sum_j exp(z_j) along axis; a vector that is -inf "
         "throughout gives zeros",
         ("x",),
         lambda: _logits(with_temperature=False).map(
             lambda case: {"x": case["logits"], "axis": case["axis"]}),
         _softmax,
         "minitorch_nlp.functional:softmax",
         "Logits of ±1e4 overflow exp: subtract each vector's largest logit first (the ratio is "
         "the same)."),
    Spec(36, "temperature_softmax",
         (("logits", "float64 (..., classes, ...), the logits z (±1e4, masking values too)"),
          ("temperature", "float > 0, the temperature T"),
          ("axis", "int, the axis of the classes")),
         "float64, the logits' shape: p_i = exp(z_i / T) / sum_j exp(z_j / T) along axis",
         ("logits",),
         _logits,
         _temperature_softmax,
         f"{LIBRARY}:temperature_softmax"),
    Spec(37, "soft_target_loss",
         (("student_logits", "float64 (batch, time, classes), z_s"),
          ("teacher_logits", "float64 (batch, time, classes), z_t"),
          ("temperature", "float > 0, T"),
          ("mask", "None (every position counts) or bool (batch, time), True at the positions "
                   "that count")),
         "float64 (): sum_i -p_i(z_t, T) log p_i(z_s, T), averaged over the counted positions "
         "(0 when none counts)",
         ("student_logits", "teacher_logits"),
         lambda: _student_teacher(with_mask=True),
         reference.eq37_soft_target_loss,
         f"{LIBRARY}:soft_target_loss",
         "The survey's form, without Hinton et al.'s T^2 (eq 39 applies it)."),
    Spec(38, "hard_target_loss",
         (("student_logits", "float64 (batch, time, classes), z_s"),
          ("labels", "int64 (batch, time), class ids, ignore_index at positions that do not "
                     "count; or float64 (batch, time, classes), class distributions y"),
          ("ignore_index", "int, the label of positions that do not count (-100 by default)")),
         "float64 (): sum_i -y_i log p_i(z_s, 1) (y one-hot for ids), averaged over the counted "
         "positions (every position for distributions)",
         ("student_logits",),
         _student_loss_case,
         reference.eq38_student_loss,
         f"{LIBRARY}:hard_target_loss"),
    Spec(39, "distillation_loss",
         (("student_logits", "float64 (batch, time, classes), z_s"),
          ("teacher_logits", "float64 (batch, time, classes), z_t"),
          ("labels", "int64 (batch, time), class ids; ignore_index marks positions that do not "
                     "count"),
          ("temperature", "float > 0, T"),
          ("alpha", "float in [0, 1]"),
          ("beta", "None (beta = 1 - alpha) or float >= 0"),
          ("mask", "None (L_D over every position) or bool (batch, time), the positions of L_D"),
          ("ignore_index", "int, the label of positions that L_s skips")),
         "float64 (): alpha T^2 L_D(p(z_t, T), p(z_s, T)) + beta L_s(y, p(z_s, 1))",
         ("student_logits", "teacher_logits"),
         _distillation_case,
         reference.eq39_distillation_loss,
         f"{LIBRARY}:distillation_loss",
         "Hinton et al. scale the soft loss by T^2 (the survey's eq 39 does not)."),
)
