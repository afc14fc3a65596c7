"""Section VI-A.3: MobileBERT (Sun et al., 2020): NoNorm (eq 45), the bottlenecks, the stacked
feed-forward networks and the 3-gram embedding under the shared model checks
(``tests/model_checks.py``); the knowledge-transfer objective (eq 46-48; the equations themselves
are the spec checks of ``tests/test_check.py``) in the auxiliary and the progressive strategies;
the errors. Equality with HuggingFace: ``test_hf_distillation_students.py``."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import optim
from minitorch_nlp.compress import Distiller, MobileBertTransferLoss, freeze_layers_below
from minitorch_nlp.compress.mobilebert_losses import attention_transfer_loss
from minitorch_nlp.models.mobilebert import (MobileBertConfig, MobileBertForMaskedLM,
                                             MobileBertForPreTraining,
                                             MobileBertForSequenceClassification,
                                             MobileBertModel, NoNorm)
from tests.model_checks import (Learning, ModelChecks, check_train_resume_generate,
                                encoder_spec)

pytestmark = pytest.mark.sec6

TINY = dict(vocab_size=23, hidden_size=16, embedding_size=8, intra_bottleneck_size=8,
            num_hidden_layers=2, num_attention_heads=2, intermediate_size=12,
            num_feedforward_networks=2, max_position_embeddings=10,
            attention_probs_dropout_prob=0.0)
PAD = 0
LEFT_PADDING = "absolute positions count from the first column, as BERT's"


def build_with_dropout(model_class, **overrides):
    def build(dropout=0.0):
        return model_class(MobileBertConfig(**{**TINY, "hidden_dropout_prob": dropout,
                                               "attention_probs_dropout_prob": dropout,
                                               **overrides}))
    return build


def masked_lm_batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 23, (3, 8))
    ids[2, 5:] = PAD
    labels = np.where((np.arange(8) % 3 == 1) & (ids != PAD), ids, -100)
    return dict(input_ids=np.where(labels != -100, 4, ids), attention_mask=ids != PAD,
                labels=labels)


class TestMobileBertForMaskedLMChecks(ModelChecks):
    """Padding holds the padding id, whose word embedding is zero: the 3-gram embedding of the
    last real token then sees what it sees at the end of an unpadded row."""

    spec = encoder_spec(
        "MobileBertForMaskedLM", build_with_dropout(MobileBertForMaskedLM), vocab=(3, 23),
        pad_filler=PAD,
        learning=Learning(masked_lm_batch, lambda model, inputs: model(**inputs).loss,
                          steps=100, factor=20, lr=1e-2),
        skips={"padding_left": LEFT_PADDING})


class TestMobileBertModelChecks(ModelChecks):
    spec = encoder_spec(
        "MobileBertModel", build_with_dropout(MobileBertModel), vocab=(3, 23),
        output="last_hidden_state", pad_filler=PAD, padding_token_type=1,
        skips={"learns": "no objective of its own; MobileBertForMaskedLM learns",
               "padding_left": LEFT_PADDING})


class TestMobileBertForSequenceClassificationChecks(ModelChecks):
    spec = encoder_spec(
        "MobileBertForSequenceClassification",
        build_with_dropout(MobileBertForSequenceClassification), vocab=(3, 23),
        pad_filler=PAD, outputs_follow_ids=False,
        learning=Learning(lambda: dict(masked_lm_batch(), labels=np.array([0, 1, 0])),
                          lambda model, inputs: model(**inputs).loss, steps=60, factor=20,
                          lr=1e-2),
        skips={"padding_left": LEFT_PADDING})


@pytest.mark.eq(45)
def test_no_norm_starts_as_the_identity_and_does_not_normalise():
    x = mt.randn(2, 3, 5) * 7.0 + 3.0
    np.testing.assert_array_equal(NoNorm(5)(x).numpy(), x.numpy())
    norm = NoNorm(5)
    norm.weight.data[...] = 2.0
    np.testing.assert_allclose(norm(x).numpy(), 2 * x.numpy(), rtol=1e-6)


@given(st.integers(0, 7), st.integers(3, 22))
def test_the_3_gram_embedding_sees_each_token_and_its_two_neighbours(position, new_id):
    mt.manual_seed(0)
    embeddings = MobileBertModel(MobileBertConfig(**TINY)).embeddings.eval()
    ids = np.random.default_rng(0).integers(3, 23, (1, 8))
    changed = ids.copy()
    changed[0, position] = new_id if new_id != ids[0, position] else 3 + (new_id - 2) % 20
    types = np.zeros_like(ids)
    before, after = embeddings(ids, types).numpy()[0], embeddings(changed, types).numpy()[0]
    moved = np.abs(before - after).max(axis=-1) > 0
    assert moved.tolist() == [abs(t - position) <= 1 for t in range(8)]


# IB-BERT, MobileBERT's teacher, in TINY's proportions: inter-block width 16 as the student's,
# intra-block width 32 (inverted bottlenecks), one feed-forward network, LayerNorm, GELU
IB_BERT_TINY = dict(TINY, intra_bottleneck_size=32, intermediate_size=64,
                    num_feedforward_networks=1)


class TestIBBertForMaskedLMChecks(ModelChecks):
    spec = encoder_spec(
        "IB-BERT (MobileBertForMaskedLM)",
        lambda dropout=0.0: MobileBertForMaskedLM(MobileBertConfig.ib_bert(**{
            **IB_BERT_TINY, "hidden_dropout_prob": dropout,
            "attention_probs_dropout_prob": dropout})),
        vocab=(3, 23), pad_filler=PAD,
        learning=Learning(masked_lm_batch, lambda model, inputs: model(**inputs).loss,
                          steps=60, factor=20, lr=1e-2),
        skips={"padding_left": LEFT_PADDING})


def test_ib_bert_is_bert_large_inside_inverted_bottlenecks():
    config = MobileBertConfig.ib_bert()
    assert (config.hidden_size, config.intra_bottleneck_size, config.intermediate_size,
            config.num_feedforward_networks, config.num_attention_heads,
            config.num_hidden_layers) == (512, 1024, 4096, 1, 4, 24)
    assert (config.normalization_type, config.hidden_act) == ("layer_norm", "gelu")
    layer = MobileBertModel(MobileBertConfig.ib_bert(**IB_BERT_TINY)).encoder.layers[0]
    assert layer.input_bottleneck.dense.weight.shape == (32, 16)    # 16 -> 32: inverted
    assert layer.output_bottleneck.weight.shape == (16, 32)
    assert not hasattr(layer, "attention_bottleneck") and layer.self_attn.value_width == 32


def _causal_rows(time, seed):
    """(1, 1, time, time) attention rows of a causal model: exact zeros above the diagonal."""
    scores = np.random.default_rng(seed).standard_normal((1, 1, time, time))
    weights = np.exp(np.where(np.tri(time, dtype=bool), scores, -np.inf))
    return weights / weights.sum(axis=-1, keepdims=True)


@pytest.mark.eq(47)
@pytest.mark.parametrize("teacher, student", [
    (np.array([[[[1.0, 0.0], [0.5, 0.5]]]]), np.array([[[[0.9, 0.1], [0.4, 0.6]]]])),
    (_causal_rows(4, 0), _causal_rows(4, 1) * 0.5 + 0.125),      # a causal teacher, no mask
    (np.array([[[[1.0, np.exp(-1e4)], [np.exp(-800.0), 1.0]]]]),  # weights that underflowed
     np.array([[[[0.7, 0.3], [0.2, 0.8]]]]))], ids=["zeros", "causal", "underflowed"])
def test_eq47_a_teacher_weight_of_zero_adds_nothing(teacher, student):
    """KL(p || q) = sum_k p_k log(p_k / q_k) with 0 log 0 = 0: a teacher weight of exactly 0 (a
    causal or padded teacher without a mask, or underflow) adds nothing to the loss and nothing
    to the student's gradient, -p_k / q_k / (T A)."""
    rows = teacher.shape[1] * teacher.shape[2]
    positive = teacher > 0
    expected = np.sum(teacher[positive] * np.log(teacher[positive] / student[positive])) / rows
    student_tensor = mt.tensor(student, dtype=mt.float64, requires_grad=True)
    loss = attention_transfer_loss(mt.tensor(teacher, dtype=mt.float64), student_tensor)
    np.testing.assert_allclose(loss.item(), expected, rtol=1e-12)
    loss.backward()
    np.testing.assert_allclose(student_tensor.grad.numpy(), -teacher / student / rows, rtol=1e-12)


@pytest.mark.eq(46, 47)
def test_ib_bert_feature_and_attention_maps_line_up_with_mobilebert():
    teacher, student = transfer_pair()
    batch = pretraining_batch()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    ours = student(**inputs, output_hidden_states=True, output_attentions=True)
    theirs = teacher(**inputs, output_hidden_states=True, output_attentions=True)
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 3
    for mine, its in zip(ours.hidden_states + ours.attentions,
                         theirs.hidden_states + theirs.attentions):
        assert mine.shape == its.shape
    assert ours.hidden_states[1].shape == (3, 8, 16) and ours.attentions[0].shape == (3, 2, 8, 8)


def transfer_pair():
    """An IB-BERT teacher, every parameter redrawn from N(0, 0.2^2) (norm gains around 1) so
    that its layers differ from a fresh student's, and a fresh MobileBERT student."""
    mt.manual_seed(0)
    teacher = MobileBertForPreTraining(MobileBertConfig.ib_bert(**IB_BERT_TINY))
    rng = np.random.default_rng(0)
    for name, p in teacher.named_parameters():
        p.data[...] = rng.normal(1.0 if name.endswith("norm.weight") else 0.0, 0.2, p.shape)
    mt.manual_seed(1)
    return teacher, MobileBertForPreTraining(MobileBertConfig(**TINY))


def pretraining_batch():
    return dict(masked_lm_batch(), token_type_ids=np.repeat([[0] * 4 + [1] * 4], 3, axis=0),
                next_sentence_label=np.array([0, 1, 0]))


def train(distiller, steps, lr=1e-2):
    optimizer = optim.AdamW(distiller.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        out = distiller(pretraining_batch())
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    return out, losses


@pytest.mark.eq(46, 47, 48)
def test_auxiliary_knowledge_transfer_lowers_every_part():
    teacher, student = transfer_pair()
    distiller = Distiller(teacher, student, MobileBertTransferLoss(alpha=0.5))
    first = distiller(pretraining_batch())
    out, losses = train(distiller, 40)
    assert set(out) == {"loss", "feature_map_loss", "attention_loss", "pretraining_loss"}
    for part in ("feature_map_loss", "attention_loss", "pretraining_loss"):
        assert out[part].item() < first[part].item(), part
    assert losses[-1] < losses[0] / 1.5
    assert all(p.grad is None for p in teacher.parameters())


@pytest.mark.eq(46, 47)
def test_progressive_transfer_trains_one_layer_at_a_time():
    teacher, student = transfer_pair()
    for layer in (1, 2):
        freeze_layers_below(student, layer)
        frozen = {name: p.numpy().copy() for name, p in student.named_parameters()
                  if not p.requires_grad}
        objective = MobileBertTransferLoss(objectives=("feature_map", "attention"),
                                           layers=[layer])
        out, losses = train(Distiller(teacher, student, objective), 15)
        assert losses[-1] < losses[0]
        assert any("encoder.layers.0." in name for name in frozen) == (layer == 2)
        assert any(name.startswith("bert.embeddings.") for name in frozen)
        for name, p in student.named_parameters():
            if name in frozen:
                np.testing.assert_array_equal(p.numpy(), frozen[name], err_msg=name)


def test_transfer_errors_are_named():
    teacher, student = transfer_pair()
    deeper = MobileBertForPreTraining(MobileBertConfig(**{**TINY, "num_hidden_layers": 3}))
    with pytest.raises(ValueError, match="the teacher has 3 layers and the student 2; MobileBERT "
                                         "transfers layer l to layer l"):
        Distiller(deeper, student, MobileBertTransferLoss())(pretraining_batch())
    with pytest.raises(ValueError, match=r"layers \[3\] go past the 2 layers of the models"):
        Distiller(teacher, student, MobileBertTransferLoss(layers=[3]))(pretraining_batch())
    wider = MobileBertForPreTraining(MobileBertConfig(**{**TINY, "hidden_size": 32}))
    with pytest.raises(ValueError, match="the teacher's feature maps .* differ; MobileBERT's "
                                         "teacher and student share"):
        Distiller(wider, student, MobileBertTransferLoss())(pretraining_batch())
    with pytest.raises(ValueError, match="layers are counted from 1"):
        MobileBertTransferLoss(layers=[0])
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\], got 1.5"):
        MobileBertTransferLoss(alpha=1.5)
    with pytest.raises(ValueError, match="objectives must be some of"):
        MobileBertTransferLoss(objectives=("hidden",))


def test_configurations_are_checked():
    with pytest.raises(ValueError, match=r"the attention's width 7 \(intra_bottleneck_size\) is "
                                         "not a multiple of num_attention_heads=2"):
        MobileBertConfig(**{**TINY, "intra_bottleneck_size": 7})
    with pytest.raises(ValueError, match="embedding_size=32 must not exceed hidden_size=16"):
        MobileBertConfig(**{**TINY, "embedding_size": 32})
    with pytest.raises(ValueError, match="hidden_act must be one of"):
        MobileBertConfig(**TINY, hidden_act="gelu_new")


def test_train_mobilebert_resumes_exactly_and_generate_fills_masks(tmp_path, capsys):
    check_train_resume_generate("mobilebert", tmp_path, capsys,
                                "bert.encoder.layers.0.input_bottleneck.dense.weight",
                                prompt="the [MASK] fox")
