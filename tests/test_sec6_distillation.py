"""Section VI-A: knowledge distillation (Hinton et al., 2015), eq 35-39, and the ``Distiller``.
The equations' values and float64 gradients against the references of
``minitorch_nlp/testing/reference/distillation.py`` are ``tests/test_check.py``'s spec checks;
here are the properties: the soft loss is minimal (zero gradient) where the student's logits
equal the teacher's, soft targets approach uniform as T grows, Hinton's T^2 keeps the soft
gradient's size as T grows, the teacher gets no graph and no gradient, the teacher cache, the
errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import optim
from minitorch_nlp.compress import (Distiller, KnowledgeDistillationLoss, TripleLoss,
                                    cosine_hidden_loss, distillation_loss, hard_target_loss,
                                    soft_target_loss, temperature_softmax)
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import distillation as R

pytestmark = pytest.mark.sec6

TINY = dict(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=16, max_position_embeddings=12, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


def float64(array, requires_grad=False):
    return mt.tensor(array, dtype=mt.float64, requires_grad=requires_grad)


@pytest.mark.eq(37)
@given(S.arrays((3, 5)), st.floats(0.5, 10.0))
def test_soft_loss_is_minimal_where_the_student_matches_the_teacher(logits, temperature):
    student = float64(logits, requires_grad=True)
    loss = soft_target_loss(student, float64(logits), temperature=temperature)
    (gradient,) = mt.grad(loss, [student])
    np.testing.assert_allclose(gradient.numpy(), 0.0, atol=1e-12)
    # and any other student does worse: cross-entropy >= the teacher's entropy
    other = soft_target_loss(float64(logits + np.arange(5.0)), float64(logits),
                             temperature=temperature)
    assert float(other.item()) > float(loss.item())


@pytest.mark.eq(36)
@given(S.arrays((2, 6), -5.0, 5.0))
def test_soft_targets_approach_uniform_as_the_temperature_grows(logits):
    distances = [np.abs(temperature_softmax(float64(logits), t).numpy() - 1 / 6).max()
                 for t in (1.0, 10.0, 100.0, 1000.0)]
    assert all(a >= b for a, b in zip(distances, distances[1:]))
    assert distances[-1] < 1e-2
    np.testing.assert_allclose(temperature_softmax(float64(logits)).numpy(),
                               mt.functional.softmax(float64(logits)).numpy(), rtol=1e-12)


@pytest.mark.eq(39)
@given(S.arrays((4, 5)), S.arrays((4, 5)))
def test_t_squared_keeps_the_soft_gradient_as_t_grows(student, teacher):
    """Hinton et al. 2.1: for zero-mean logits and a large T, dL_D/dz_si ~ (z_si - z_ti) / (N T^2),
    so T^2 L_D has the gradient (z_s - z_t) / N whatever T (here averaged over the 4 rows)."""
    student = student - student.mean(-1, keepdims=True)
    teacher = teacher - teacher.mean(-1, keepdims=True)
    z_s = float64(student, requires_grad=True)
    loss = distillation_loss(z_s, float64(teacher), np.zeros(4, np.int64), temperature=1e4,
                             alpha=1.0)
    (gradient,) = mt.grad(loss, [z_s])
    np.testing.assert_allclose(gradient.numpy(), (student - teacher) / 5 / 4, atol=1e-4)


@pytest.mark.eq(39)
def test_alpha_and_beta_weigh_the_soft_and_hard_losses():
    rng = np.random.default_rng(0)
    student, teacher = float64(rng.normal(size=(3, 4))), float64(rng.normal(size=(3, 4)))
    labels = np.array([0, 3, 1])
    soft = soft_target_loss(student, teacher, temperature=2.0).item()
    hard = hard_target_loss(student, labels).item()
    assert distillation_loss(student, teacher, labels, temperature=2.0, alpha=0.9).item() == \
        pytest.approx(0.9 * 4 * soft + 0.1 * hard, rel=1e-12)
    assert distillation_loss(student, teacher, labels, temperature=2.0, alpha=2.0,
                             beta=0.5).item() == pytest.approx(8 * soft + 0.5 * hard, rel=1e-12)


def test_cosine_hidden_loss_is_one_minus_the_cosine_over_real_tokens():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    mask = np.array([[True, True, False], [True, False, False]])
    cosines = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
    expected = (1 - cosines)[mask].mean()
    assert cosine_hidden_loss(float64(a), float64(b), mask=mask).item() == pytest.approx(expected)
    assert cosine_hidden_loss(float64(a), float64(2 * a)).item() == pytest.approx(0, abs=1e-12)


def test_bad_temperatures_vocabularies_and_masks_are_named():
    logits = float64(np.zeros((2, 5)))
    for temperature in (0, -1.0, float("nan"), float("inf"), True, "2"):
        with pytest.raises(ValueError, match="temperature must be a finite number > 0, got"):
            soft_target_loss(logits, logits, temperature=temperature)
    with pytest.raises(ValueError, match="temperature_softmax: temperature must be"):
        temperature_softmax(logits, 0.0)
    with pytest.raises(ValueError, match="distillation_loss: temperature must be"):
        distillation_loss(logits, logits, np.zeros(2, np.int64), temperature=-2.0)
    with pytest.raises(ValueError, match="student's logits have 5 classes and the teacher's 7: "
                                         "distillation needs the same vocabulary"):
        soft_target_loss(logits, float64(np.zeros((2, 7))))
    with pytest.raises(ValueError, match=r"student logits \(2, 5\) and teacher logits \(3, 5\)"):
        soft_target_loss(logits, float64(np.zeros((3, 5))))
    with pytest.raises(ValueError, match=r"mask of shape \(3,\) must have the logits' shape "):
        soft_target_loss(logits, logits, mask=np.ones(3, bool))
    with pytest.raises(ValueError, match="alpha=1.5 > 1 leaves beta = 1 - alpha < 0; give beta"):
        distillation_loss(logits, logits, np.zeros(2, np.int64), temperature=1.0, alpha=1.5)
    with pytest.raises(ValueError, match="KnowledgeDistillationLoss: beta must be a number >= 0"):
        KnowledgeDistillationLoss(beta=-1)
    with pytest.raises(ValueError, match="TripleLoss: temperature must be a finite number > 0"):
        TripleLoss(temperature=0)
    with pytest.raises(ValueError, match=r"hidden states \(2, 5\) and the teacher's \(2, 6\)"):
        cosine_hidden_loss(logits, float64(np.zeros((2, 6))))


# ---- the Distiller -------------------------------------------------------------------------------
def bert(seed, **overrides):
    mt.manual_seed(seed)
    return BertForMaskedLM(BertConfig(**{**TINY, **overrides}))


def mlm_batch(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 20, (3, 8))
    mask = np.ones((3, 8), bool)
    mask[2, 5:] = False
    labels = np.where((np.arange(8) % 3 == 1) & mask, ids, -100)
    return dict(input_ids=np.where(labels != -100, 4, ids), attention_mask=mask, labels=labels)


def test_the_teacher_records_no_graph_and_gets_no_gradient():
    teacher, student = bert(0), bert(1, num_hidden_layers=1)
    distiller = Distiller(teacher, student, TripleLoss())
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    teacher_out = distiller.teacher_outputs(mlm_batch())
    assert not teacher_out.logits.requires_grad
    assert not any(h.requires_grad for h in teacher_out.hidden_states)
    out = distiller(mlm_batch())
    out.loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert all(p.grad is not None for p in student.parameters() if p.requires_grad)
    assert set(out) == {"loss", "soft_loss", "mlm_loss", "cosine_loss"}
    assert list(distiller.parameters()) == list(student.parameters())


def test_a_student_learns_from_the_teacher():
    teacher, student = bert(0), bert(1, num_hidden_layers=1)
    distiller = Distiller(teacher, student, KnowledgeDistillationLoss(temperature=2.0, alpha=1.0))
    optimizer = optim.AdamW(distiller.parameters(), lr=1e-2)
    batch = mlm_batch()
    teacher_logits = distiller.teacher_outputs(batch).logits

    def kl_divergence():   # eq 37 minus the teacher's entropy: 0 when the student matches
        student_logits = student.eval()(batch["input_ids"]).logits
        return (soft_target_loss(student_logits, teacher_logits, temperature=2.0)
                - soft_target_loss(teacher_logits, teacher_logits, temperature=2.0)).item()

    before = kl_divergence()
    student.train()
    for _ in range(60):
        optimizer.zero_grad()
        distiller(batch).loss.backward()
        optimizer.step()
    assert kl_divergence() < before / 10


def test_the_teacher_cache_is_read_back_for_its_own_inputs_only(tmp_path):
    teacher, student = bert(0), bert(1, num_hidden_layers=1)
    distiller = Distiller(teacher, student, TripleLoss(), cache_dir=tmp_path / "cache")
    first = distiller.teacher_outputs(mlm_batch(), key=0)
    assert (tmp_path / "cache" / "teacher-0.npz").is_file()
    for p in teacher.parameters():            # a changed teacher: the cache still answers
        p.data[...] = 0
    again = distiller.teacher_outputs(mlm_batch(), key=0)
    np.testing.assert_array_equal(again.logits.numpy(), first.logits.numpy())
    for a, b in zip(again.hidden_states, first.hidden_states):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    distiller(mlm_batch(), key=0).loss.backward()
    with pytest.raises(ValueError, match="teacher-0.npz' belong to other inputs than batch 0"):
        distiller.teacher_outputs(mlm_batch(seed=1), key=0)
    with pytest.raises(ValueError, match="with a cache_dir every batch needs a key"):
        distiller(mlm_batch())


def test_the_distiller_refuses_different_vocabularies_and_one_model_twice():
    teacher = bert(0)
    with pytest.raises(ValueError, match="the teacher's vocabulary has 20 tokens and the "
                                         "student's 30: .* the same tokenizer"):
        Distiller(teacher, bert(1, vocab_size=30), TripleLoss())
    with pytest.raises(ValueError, match="the teacher and the student are the same model"):
        Distiller(teacher, teacher, TripleLoss())


# ---- the defaults are the documented ones (the specs pass every argument) ------------------------
def _logits(shape, seed):
    return mt.tensor(np.random.default_rng(seed).normal(0.0, 2.0, shape), dtype=mt.float64)


@pytest.mark.eq(35, 36, 37, 38, 39)
def test_the_distillation_functions_defaults_are_the_papers():
    """T = 1, the last axis, every position, ignore_index -100, alpha = 0.5 and beta = 1 -
    alpha: calls that leave them out match the reference maths with those values."""
    student, teacher = _logits((2, 3, 4), 0), _logits((2, 3, 4), 1)
    z_s, z_t = student.numpy(), teacher.numpy()
    labels = np.array([[1, -100, 3], [0, 2, -100]])
    same = [
        (mt.functional.softmax(student), R.eq35_softmax_along(z_s, -1)),
        (temperature_softmax(student), R.eq35_softmax_along(z_s, -1)),
        (soft_target_loss(student, teacher), R.eq37_soft_target_loss(z_s, z_t, 1.0)),
        (hard_target_loss(student, labels), R.eq38_student_loss(z_s, labels)),
        (distillation_loss(student, teacher, labels, temperature=2.0),
         0.5 * 4.0 * R.eq37_soft_target_loss(z_s, z_t, 2.0) + 0.5 * R.eq38_student_loss(
             z_s, labels)),
    ]
    for default, expected in same:
        np.testing.assert_allclose(default.numpy(), expected, rtol=1e-12)
