"""Section VI-A.2: TinyBERT's layer-wise distillation (Jiao et al., 2020). Eq 40-44 are the spec
checks of ``tests/test_check.py``; here eq 40 (``TinyBertLoss``) against the float64 reference
of ``minitorch_nlp/testing/reference/tinybert.py`` (values and gradients), the layer mapping,
the recorded attention scores (their softmax is the model's attention), a narrower student
learning from a teacher in the general then the task stage, and the errors."""
from __future__ import annotations

from types import SimpleNamespace

import autograd
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import optim
from minitorch_nlp.compress import (Distiller, TinyBertLoss, check_layer_mapping,
                                    prediction_loss, recorded_attention_scores,
                                    uniform_layer_mapping)
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM
from minitorch_nlp.nn.outputs import ModelOutput
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import tinybert as reference

pytestmark = pytest.mark.sec6

SMALL = dict(vocab_size=20, num_attention_heads=2, max_position_embeddings=12,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def bert_config(layers, width):
    return BertConfig(num_hidden_layers=layers, hidden_size=width, intermediate_size=2 * width,
                      **SMALL)


@st.composite
def layerwise_case(draw):
    """Outputs of an M-layer, d'-wide student and an N-layer, d-wide teacher (float64 arrays),
    a mapping, weights and a mask."""
    student_layers, extra = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    teacher_layers = student_layers + extra
    batch, time, heads, classes = 2, draw(st.integers(1, 3)), 2, 3
    narrow, wide = draw(st.integers(1, 3)), draw(st.integers(1, 4))

    def outputs(layers, width):
        return {"hidden_states": [draw(S.arrays((batch, time, width))) for _ in range(layers + 1)],
                "attention_scores": [draw(S.arrays((batch, heads, time, time)))
                                     for _ in range(layers)],
                "logits": draw(S.arrays((batch, time, classes)))}

    mapping = sorted(draw(st.lists(st.integers(1, teacher_layers), min_size=student_layers,
                                   max_size=student_layers)))
    mask = draw(S.bool_masks((batch, time), all_false_row=False))
    mask[:, 0] = True
    return dict(student=outputs(student_layers, narrow), teacher=outputs(teacher_layers, wide),
                embedding_projection=draw(S.arrays((narrow, wide))),
                hidden_projection=draw(S.arrays((narrow, wide))), mapping=mapping,
                weights=draw(st.lists(st.floats(0.0, 2.0), min_size=student_layers + 2,
                                      max_size=student_layers + 2)),
                temperature=draw(st.floats(0.5, 3.0)), mask=mask,
                sizes=(student_layers, narrow, teacher_layers, wide))


def as_output(arrays, requires_grad):
    def t(a):
        return mt.tensor(a, dtype=mt.float64, requires_grad=requires_grad)
    return ModelOutput(hidden_states=tuple(map(t, arrays["hidden_states"])),
                       attention_scores=tuple(map(t, arrays["attention_scores"])),
                       logits=t(arrays["logits"]))


@pytest.mark.eq(40)
@given(layerwise_case())
def test_eq40_tinybert_loss_matches_the_reference(case):
    student_layers, narrow, teacher_layers, wide = case["sizes"]
    objective = TinyBertLoss(bert_config(student_layers, narrow * 2),
                             bert_config(teacher_layers, wide * 2),
                             layer_mapping=case["mapping"], layer_weights=case["weights"],
                             temperature=case["temperature"]).to(mt.float64)
    objective.embedding_projection = mt.nn.Parameter(mt.tensor(case["embedding_projection"],
                                                               dtype=mt.float64))
    objective.hidden_projection = mt.nn.Parameter(mt.tensor(case["hidden_projection"],
                                                            dtype=mt.float64))
    student = as_output(case["student"], requires_grad=True)
    out = objective(student, as_output(case["teacher"], False),
                    {"attention_mask": case["mask"]})

    def loss(student_arrays, embedding_projection, hidden_projection):
        return reference.eq40_layerwise_loss(
            student_arrays, case["teacher"], embedding_projection, hidden_projection,
            case["mapping"], case["weights"], case["temperature"], case["mask"])

    arguments = (case["student"], case["embedding_projection"], case["hidden_projection"])
    np.testing.assert_allclose(out.loss.item(), loss(*arguments), rtol=1e-9, atol=1e-11)
    parameters = [objective.embedding_projection, objective.hidden_projection]
    tensors = [*student.hidden_states, *student.attention_scores, student.logits, *parameters]
    grads = mt.grad(out.loss, tensors, allow_unused=True)
    expected_student, *expected_projections = (autograd.grad(loss, i)(*arguments)
                                               for i in range(3))
    expected = [*expected_student["hidden_states"], *expected_student["attention_scores"],
                expected_student["logits"], *expected_projections]
    for got, want in zip(grads, expected):
        got = np.zeros_like(want) if got is None else got.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-10)


@pytest.mark.eq(40)
def test_the_uniform_mapping_and_its_errors():
    assert uniform_layer_mapping(4, 12) == (3, 6, 9, 12)
    assert uniform_layer_mapping(3, 4) == (1, 2, 4)
    assert check_layer_mapping([2, 4], 2, 4) == (2, 4)
    with pytest.raises(ValueError, match="the student has 5 layers and the teacher 4; a layer "
                                         "mapping g\\(m\\) cannot be longer than the teacher"):
        uniform_layer_mapping(5, 4)
    with pytest.raises(ValueError, match=r"layer mapping \[1, 2, 3, 4, 4\] is longer than the "
                                         r"teacher's 4 layers"):
        check_layer_mapping([1, 2, 3, 4, 4], 5, 4)
    with pytest.raises(ValueError, match="has 3 entries for the student's 2 layers"):
        check_layer_mapping([1, 2, 3], 2, 4)
    with pytest.raises(ValueError, match=r"teacher layers are counted 1 .. 4"):
        check_layer_mapping([0, 4], 2, 4)


def test_bad_objectives_weights_and_temperatures_are_named():
    student, teacher = bert_config(2, 8), bert_config(4, 16)
    with pytest.raises(ValueError, match="cannot be longer than the teacher"):
        TinyBertLoss(teacher, student)
    with pytest.raises(ValueError, match=r"layer_weights must be 4 numbers >= 0 \(lambda_0"):
        TinyBertLoss(student, teacher, layer_weights=[1, 1, 1])
    with pytest.raises(ValueError, match="objectives must be some of"):
        TinyBertLoss(student, teacher, objectives=("attention", "logits"))
    with pytest.raises(ValueError, match="TinyBertLoss: temperature must be a finite number > 0"):
        TinyBertLoss(student, teacher, temperature=0.0)
    with pytest.raises(TypeError, match="the teacher's config needs num_hidden_layers"):
        TinyBertLoss(student, object())


@pytest.mark.eq(41)
def test_recorded_scores_are_the_attention_before_its_softmax():
    mt.manual_seed(0)
    model = BertForMaskedLM(bert_config(2, 8)).eval()
    ids = np.random.default_rng(0).integers(3, 20, (2, 6))
    with recorded_attention_scores(model) as record:
        out = model(ids, output_attentions=True)
    assert len(record["attention_scores"]) == 2
    for scores, weights in zip(record["attention_scores"], out.attentions):
        np.testing.assert_allclose(mt.functional.softmax(scores).numpy(), weights.numpy(),
                                   rtol=1e-5, atol=1e-6)
    model(ids)                                    # the hooks are gone: nothing more recorded
    assert len(record["attention_scores"]) == 2
    with pytest.raises(TypeError, match="Linear has no TransformerStack"):
        with recorded_attention_scores(mt.nn.Linear(2, 2)):
            pass


def test_a_narrow_student_learns_from_the_teacher_in_two_stages():
    """General distillation (embeddings, attention, hidden states): the loss falls 3-fold; then
    the prediction layer: the gap to the teacher's own entropy (the KL divergence) 5-fold. W_e
    and W_h are trained with the student; the teacher gets no gradient."""
    mt.manual_seed(0)
    teacher = BertForMaskedLM(bert_config(4, 16))
    student = BertForMaskedLM(bert_config(2, 8))
    ids = np.random.default_rng(1).integers(3, 20, (3, 8))
    batch = dict(input_ids=ids, attention_mask=np.ones((3, 8), bool))
    with teacher.inference():
        teacher_logits = teacher(ids).logits
    floors = {"intermediate": 0.0,
              "prediction": prediction_loss(teacher_logits, teacher_logits).item()}
    stages = {"intermediate": (("embedding", "attention", "hidden"), 3),
              "prediction": (("prediction",), 5)}
    for stage, (objectives, factor) in stages.items():
        objective = TinyBertLoss(student.config, teacher.config, objectives=objectives)
        distiller = Distiller(teacher, student, objective)
        assert len(list(distiller.parameters())) == len(list(student.parameters())) + 2
        optimizer = optim.AdamW(distiller.parameters(), lr=1e-2)
        losses = []
        for _ in range(40):
            optimizer.zero_grad()
            out = distiller(batch)
            out.loss.backward()
            optimizer.step()
            losses.append(out.loss.item() - floors[stage])
        assert set(out) == {"loss", *(f"{name}_loss" for name in objectives)}
        assert losses[-1] < losses[0] / factor, (stage, losses[0], losses[-1])
    assert all(p.grad is None for p in teacher.parameters())


@pytest.mark.eq(40, 44)
def test_tinybert_defaults_are_the_papers():
    """t = 1 for the prediction loss; TinyBertLoss's uniform mapping (M = 2 of N = 4: layers
    2 and 4), weights of 1, every objective and t = 1: calls that leave them out match the
    reference maths with those values."""
    rng = np.random.default_rng(0)
    student_logits, teacher_logits = (mt.tensor(rng.normal(size=(3, 4)), dtype=mt.float64)
                                      for _ in range(2))
    np.testing.assert_allclose(
        prediction_loss(student_logits, teacher_logits).item(),
        reference.eq44_prediction_loss(student_logits.numpy(), teacher_logits.numpy(), 1.0),
        rtol=1e-12)
    student = SimpleNamespace(num_hidden_layers=2, hidden_size=3)
    teacher = SimpleNamespace(num_hidden_layers=4, hidden_size=5)

    def outputs(depth, width):
        return ModelOutput(
            hidden_states=[mt.tensor(rng.normal(size=(2, 3, width))) for _ in range(depth + 1)],
            attention_scores=[mt.tensor(rng.normal(size=(2, 2, 3, 3))) for _ in range(depth)],
            logits=mt.tensor(rng.normal(size=(2, 4))))

    s_out, t_out, batch = outputs(2, 3), outputs(4, 5), {"attention_mask": None}
    loss = TinyBertLoss(student, teacher).to(mt.float64)

    def as_dict(out):
        return {"hidden_states": [h.numpy() for h in out.hidden_states],
                "attention_scores": [a.numpy() for a in out.attention_scores],
                "logits": out.logits.numpy()}

    expected = reference.eq40_layerwise_loss(
        as_dict(s_out), as_dict(t_out), loss.embedding_projection.numpy(),
        loss.hidden_projection.numpy(), [2, 4], [1.0] * 4, 1.0, None,
        ("embedding", "attention", "hidden", "prediction"))
    np.testing.assert_allclose(loss(s_out, t_out, batch).loss.item(), expected, rtol=1e-12)
