"""Specs of TinyBERT's equations (section VI-A.2): the layer-wise objective (eq 40) and the
attention, hidden state, embedding and prediction-layer distillation it sums (eq 41-44).

Eq 40 is the ``TinyBertLoss`` module; its spec takes both models' outputs (stacked over layers)
and the two projections as arguments, and the library's side is the module run with them
(``nn.replaced_tensors``)."""
from __future__ import annotations

from types import SimpleNamespace

from hypothesis import strategies as st

from minitorch_nlp import nn
from minitorch_nlp.compress.tinybert import TinyBertLoss
from minitorch_nlp.nn.outputs import ModelOutput

from .. import strategies as S
from ..reference import tinybert as reference
from ..spec import Spec

LIBRARY = "minitorch_nlp.compress.tinybert"


TEMPERATURES = st.floats(0.5, 4.0) | st.sampled_from((1.0, 1e-3, 1e3))


def _real_tokens(draw, batch, time):
    """None (every position counts) or a padding mask; sometimes a sequence with no real token
    at all (it counts for nothing)."""
    if draw(st.booleans()):
        return None
    mask = draw(S.bool_masks((batch, time), all_false_row=False))
    mask[:, 0] = True
    if draw(st.booleans()):
        mask[draw(st.integers(0, batch - 1))] = False
    return mask


@st.composite
def _scores(draw):
    batch, heads, time = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    shape = (batch, heads, time, time)
    return {"student_scores": draw(S.stress_arrays(shape, kinds=("large", "tiny"))),
            "teacher_scores": draw(S.stress_arrays(shape, kinds=("large", "tiny"))),
            "key_mask": _real_tokens(draw, batch, time)}


@st.composite
def _states(draw, student, teacher):
    batch, time = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    narrow, wide = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    return {student: draw(S.stress_arrays((batch, time, narrow), kinds=("large", "tiny"),
                                          large=100.0)),
            teacher: draw(S.stress_arrays((batch, time, wide), kinds=("large", "tiny"))),
            "projection": draw(S.arrays((narrow, wide))),
            "mask": _real_tokens(draw, batch, time)}


@st.composite
def _logits(draw):
    """Student logits of ±1e4 sometimes, teacher logits with masking values (probabilities of
    exactly 0), tiny and huge temperatures, rows of 1-3 axes."""
    shape = draw(S.shapes(min_dims=1, max_dims=3)) + (draw(st.integers(2, 5)),)
    return {"student_logits": draw(S.stress_arrays(shape)),
            "teacher_logits": draw(S.masked_logits(shape))[0],
            "temperature": draw(TEMPERATURES)}


def _states_arguments(student, teacher, what):
    return ((student, f"float64 (batch, l, d'), the student's {what}"),
            (teacher, f"float64 (batch, l, d), the teacher's {what}"),
            ("projection", "float64 (d', d), the learnt map into the teacher's width"),
            ("mask", "None (every position counts) or bool (batch, l), True at the positions "
                     "that count"))


def layerwise_loss(student_hidden, student_scores, student_logits, teacher_hidden,
                   teacher_scores, teacher_logits, embedding_projection, hidden_projection, *,
                   mapping, weights, temperature, mask, objectives):
    """L_model = sum_{m=0}^{M+1} lambda_m L_layer(S_m, T_g(m)) (eq 40): L_embd (eq 43) at m = 0,
    L_attn + L_hidn (eq 41-42) at 0 < m <= M against teacher layer g(m) = ``mapping[m - 1]``
    (counted from 1), L_pred (eq 44) at m = M + 1, lambda_m = ``weights[m]``. The students'
    ``*_hidden`` (M + 1, batch, l, d') and the teacher's (N + 1, batch, l, d) stack the embedding
    output and every layer's; ``*_scores`` (M or N, batch, heads, l, l) every layer's attention
    scores; ``*_logits`` (batch, classes); projections (d', d); ``mask`` bool (batch, l).

    The library's ``TinyBertLoss`` computes it with these projections."""
    depth, width = student_hidden.shape[0] - 1, student_hidden.shape[-1]
    loss = TinyBertLoss(SimpleNamespace(num_hidden_layers=depth, hidden_size=width),
                        SimpleNamespace(num_hidden_layers=teacher_hidden.shape[0] - 1,
                                        hidden_size=teacher_hidden.shape[-1]),
                        layer_mapping=mapping, layer_weights=weights, objectives=objectives,
                        temperature=temperature)

    def outputs(hidden, scores, logits):
        return ModelOutput(hidden_states=[hidden[i] for i in range(hidden.shape[0])],
                           attention_scores=[scores[i] for i in range(scores.shape[0])],
                           logits=logits)

    with nn.replaced_tensors(loss, {"embedding_projection": embedding_projection,
                                    "hidden_projection": hidden_projection}):
        return loss(outputs(student_hidden, student_scores, student_logits),
                    outputs(teacher_hidden, teacher_scores, teacher_logits),
                    {"attention_mask": mask}).loss


@st.composite
def _layerwise_cases(draw):
    students = draw(st.integers(1, 2))
    teachers = draw(st.integers(students, 3))            # a student no deeper than its teacher
    batch, heads, time, classes = (draw(st.integers(1, 2)) for _ in range(4))
    narrow, wide = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    case = {}
    for who, depth, width in (("student", students, narrow), ("teacher", teachers, wide)):
        case[f"{who}_hidden"] = draw(S.arrays((depth + 1, batch, time, width)))
        case[f"{who}_scores"] = draw(S.arrays((depth, batch, heads, time, time)))
    case["student_logits"] = draw(S.stress_arrays((batch, classes + 1)))
    case["teacher_logits"] = draw(S.masked_logits((batch, classes + 1)))[0]
    objectives = draw(st.lists(st.sampled_from(reference.OBJECTIVES), min_size=1, unique=True))
    case.update(embedding_projection=draw(S.arrays((narrow, wide))),
                hidden_projection=draw(S.arrays((narrow, wide))),
                mapping=draw(st.none() | st.lists(st.integers(1, teachers), min_size=students,
                                                  max_size=students)),
                weights=draw(st.none() | st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]),
                                                  min_size=students + 2,
                                                  max_size=students + 2)),
                temperature=draw(TEMPERATURES), mask=_real_tokens(draw, batch, time),
                objectives=draw(st.sampled_from([reference.OBJECTIVES, tuple(objectives)])))
    return case


def _layerwise_reference(student_hidden, student_scores, student_logits, teacher_hidden,
                         teacher_scores, teacher_logits, embedding_projection,
                         hidden_projection, mapping, weights, temperature, mask, objectives):
    def outputs(hidden, scores, logits):
        return {"hidden_states": [hidden[i] for i in range(hidden.shape[0])],
                "attention_scores": [scores[i] for i in range(scores.shape[0])],
                "logits": logits}

    return reference.eq40_layerwise_loss(
        outputs(student_hidden, student_scores, student_logits),
        outputs(teacher_hidden, teacher_scores, teacher_logits), embedding_projection,
        hidden_projection, mapping, weights, temperature, mask, objectives)


_MODELS = tuple(
    (f"{who}_{part}", f"float64 {shape}, the {who}'s {what}")
    for who, depth, width in (("student", "M", "d'"), ("teacher", "N", "d"))
    for part, shape, what in (
        ("hidden", f"({depth} + 1, batch, l, {width})", "embedding output and layer outputs"),
        ("scores", f"({depth}, batch, heads, l, l)", "attention scores of every layer"),
        ("logits", "(batch, classes)", "logits")))

SPECS = (
    Spec(40, "layerwise_loss",
         _MODELS + (
             ("embedding_projection", "float64 (d', d), W_e of eq 43"),
             ("hidden_projection", "float64 (d', d), W_h of eq 42, shared by every layer"),
             ("mapping", "None (uniform: g(m) = floor(m N / M)) or a list of M ints in [1, N], "
                         "M <= N: g(1) .. g(M)"),
             ("weights", "None (all 1) or a list of M + 2 floats >= 0: lambda_0 .. lambda_{M+1}"),
             ("temperature", "float > 0, t of eq 44"),
             ("mask", "None (every position counts) or bool (batch, l), True at the positions "
                      "that count"),
             ("objectives", "the terms of L_layer that count, some of ('embedding', "
                            "'attention', 'hidden', 'prediction')")),
         "float64 (): sum_m lambda_m L_layer(S_m, T_g(m))",
         tuple(name for name, _ in _MODELS) + ("embedding_projection", "hidden_projection"),
         _layerwise_cases,
         _layerwise_reference,
         "minitorch_nlp.testing.equation_specs.tinybert:layerwise_loss",
         "Jiao et al. (2020) eq. 11. The library's side is TinyBertLoss (every objective) with "
         "these projections."),
    Spec(41, "attention_loss",
         (("student_scores", "float64 (batch, heads, l, l), the student's attention scores"),
          ("teacher_scores", "float64 (batch, heads, l, l), the teacher's"),
          ("key_mask", "None (every pair counts) or bool (batch, l), True on real tokens")),
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
         (("student_logits", "float64 (..., classes), z^S"),
          ("teacher_logits", "float64 (..., classes), z^T"),
          ("temperature", "float > 0, t")),
         "float64 (): -softmax(z^T / t) . log softmax(z^S / t), averaged over the rows",
         ("student_logits", "teacher_logits"),
         _logits,
         reference.eq44_prediction_loss,
         f"{LIBRARY}:prediction_loss",
         "Jiao et al. divide both logits by t; the survey's eq 44 leaves the teacher's alone."),
)
