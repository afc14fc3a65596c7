"""Section VI-A.1: DistilBERT (Sanh et al., 2019): BERT without segments or pooler, half the
layers, initialised from every other teacher layer, trained with the triple loss. The shared
model checks (``tests/model_checks.py``), the initialisation from a teacher (exactly the
teacher's layers 0, 2, 4 ...; with every layer kept, exactly the teacher's outputs), learning a
tiny batch by distillation, the errors. Equality with HuggingFace:
``test_hf_distillation_students.py``."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import optim
from minitorch_nlp.compress import Distiller, TripleLoss
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM, BertModel
from minitorch_nlp.models.distilbert import (DistilBertConfig, DistilBertForMaskedLM,
                                             DistilBertForQuestionAnswering,
                                             DistilBertForSequenceClassification,
                                             DistilBertForTokenClassification,
                                             DistilBertModel, distilbert_from_teacher)
from tests.model_checks import Learning, ModelChecks, encoder_spec

pytestmark = pytest.mark.sec6

TINY = dict(vocab_size=23, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=10, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


def masked_lm_batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 23, (3, 8))
    ids[2, 5:] = 0
    labels = np.where((np.arange(8) % 3 == 1) & (ids != 0), ids, -100)
    return dict(input_ids=np.where(labels != -100, 4, ids), attention_mask=ids != 0,
                labels=labels)


def build_with_dropout(model_class, **overrides):
    def build(dropout=0.0):
        return model_class(DistilBertConfig(**{**TINY, "hidden_dropout_prob": dropout,
                                               "attention_probs_dropout_prob": dropout,
                                               **overrides}))
    return build


class TestDistilBertForMaskedLMChecks(ModelChecks):
    spec = encoder_spec(
        "DistilBertForMaskedLM", build_with_dropout(DistilBertForMaskedLM), vocab=(3, 23),
        learning=Learning(masked_lm_batch, lambda model, inputs: model(**inputs).loss,
                          steps=100, factor=20, lr=1e-2),
        skips={"padding_left": "absolute positions count from the first column, as BERT's"})


class TestDistilBertModelChecks(ModelChecks):
    spec = encoder_spec(
        "DistilBertModel", build_with_dropout(DistilBertModel), vocab=(3, 23),
        output="last_hidden_state",
        skips={"learns": "no objective of its own; DistilBertForMaskedLM learns",
               "padding_left": "absolute positions count from the first column, as BERT's"})


class TestDistilBertForSequenceClassificationChecks(ModelChecks):
    spec = encoder_spec(
        "DistilBertForSequenceClassification",
        build_with_dropout(DistilBertForSequenceClassification, classifier_dropout=0.0),
        vocab=(3, 23), outputs_follow_ids=False,
        learning=Learning(lambda: dict(masked_lm_batch(), labels=np.array([0, 1, 0])),
                          lambda model, inputs: model(**inputs).loss, steps=60, factor=20,
                          lr=1e-2),
        skips={"padding_left": "absolute positions count from the first column, as BERT's"})


class TestDistilBertForTokenClassificationChecks(ModelChecks):
    spec = encoder_spec(
        "DistilBertForTokenClassification", build_with_dropout(DistilBertForTokenClassification),
        vocab=(3, 23),
        learning=Learning(lambda: dict(masked_lm_batch(),
                                       labels=np.where(masked_lm_batch()["attention_mask"],
                                                       masked_lm_batch()["input_ids"] % 2, -100)),
                          lambda model, inputs: model(**inputs).loss, steps=60, factor=10,
                          lr=1e-2),
        skips={"padding_left": "absolute positions count from the first column, as BERT's"})


class TestDistilBertForQuestionAnsweringChecks(ModelChecks):
    spec = encoder_spec(
        "DistilBertForQuestionAnswering",
        build_with_dropout(DistilBertForQuestionAnswering, qa_dropout=0.0), vocab=(3, 23),
        output="start_logits",
        learning=Learning(lambda: dict(input_ids=masked_lm_batch()["input_ids"],
                                       attention_mask=masked_lm_batch()["attention_mask"],
                                       start_positions=np.array([1, 3, 0]),
                                       end_positions=np.array([4, 3, 2])),
                          lambda model, inputs: model(**inputs).loss, steps=60, factor=10,
                          lr=1e-2),
        skips={"padding_left": "absolute positions count from the first column, as BERT's"})


def test_the_question_answering_head_drops_the_hidden_states_with_qa_dropout():
    model = DistilBertForQuestionAnswering(DistilBertConfig(**TINY, qa_dropout=0.5))
    ids = masked_lm_batch()["input_ids"]
    assert model.dropout.p == 0.5
    mt.manual_seed(0)
    first = model(ids).start_logits.numpy()
    assert not np.array_equal(first, model(ids).start_logits.numpy())   # training: dropped
    model.eval()
    evaluated = model(ids).start_logits.numpy()
    np.testing.assert_array_equal(evaluated, model(ids).start_logits.numpy())
    token = DistilBertForTokenClassification(DistilBertConfig(**{**TINY,
                                                                 "hidden_dropout_prob": 0.3}))
    assert token.dropout.p == 0.3     # the encoder's dropout, not seq_classif_dropout (0.2)


def teacher(layers, head=True, seed=0):
    mt.manual_seed(seed)
    config = BertConfig(**{**TINY, "num_hidden_layers": layers})
    return BertForMaskedLM(config) if head else BertModel(config)


def test_a_student_holds_exactly_every_other_teacher_layer():
    big = teacher(6)
    student = distilbert_from_teacher(big)
    assert isinstance(student, DistilBertForMaskedLM)
    assert student.config.num_hidden_layers == 3 and student.config.hidden_size == 8
    for ours, theirs in enumerate((0, 2, 4)):
        mine = student.bert.encoder.layers[ours].state_dict()
        for name, value in big.bert.encoder.layers[theirs].state_dict().items():
            np.testing.assert_array_equal(mine[name].numpy(), value.numpy(), err_msg=name)
    for name, value in big.mlm.state_dict().items():
        np.testing.assert_array_equal(student.mlm.state_dict()[name].numpy(), value.numpy())
    assert not hasattr(student.bert.embeddings, "token_type_embeddings")
    assert student.bert.pooler is None
    assert student.num_parameters() < big.num_parameters()
    chosen = distilbert_from_teacher(teacher(4, head=False), layers=[1, 3])
    assert isinstance(chosen, DistilBertModel) and chosen.config.num_hidden_layers == 2


def test_a_student_with_every_teacher_layer_gives_the_teachers_outputs():
    big = teacher(3).eval()
    copy = distilbert_from_teacher(big, layers=[0, 1, 2]).eval()
    batch = masked_lm_batch()
    np.testing.assert_allclose(copy(batch["input_ids"], batch["attention_mask"]).logits.numpy(),
                               big(batch["input_ids"], batch["attention_mask"]).logits.numpy(),
                               rtol=1e-5, atol=1e-6)


def test_init_from_the_teacher_distils_better_than_random_init():
    """Sanh et al. section 4.2 (ablation): initialising from the teacher matters. A 4-layer
    teacher, 2-layer students from its layers 0 and 2 or from random weights, 30 steps of the
    triple loss on a tiny batch: the teacher-initialised student ends closer to the teacher."""
    big, batch = teacher(4), masked_lm_batch()
    mt.manual_seed(1)
    students = {"teacher": distilbert_from_teacher(big),
                "random": DistilBertForMaskedLM(DistilBertConfig(**TINY))}
    final = {}
    for name, student in students.items():
        distiller = Distiller(big, student, TripleLoss())
        optimizer = optim.AdamW(distiller.parameters(), lr=3e-3)
        for _ in range(30):
            optimizer.zero_grad()
            out = distiller(batch)
            out.loss.backward()
            optimizer.step()
        final[name] = out.cosine_loss.item()
    assert final["teacher"] < final["random"]


def test_errors_name_the_distilbert_limits():
    model = build_with_dropout(DistilBertModel)()
    with pytest.raises(ValueError, match="DistilBertModel: DistilBERT has no token types"):
        model(np.full((1, 3), 5), token_type_ids=np.zeros((1, 3), np.int64))
    with pytest.raises(ValueError, match="DistilBertModel: DistilBERT has no pooler"):
        DistilBertModel(DistilBertConfig(**TINY), add_pooling_layer=True)
    with pytest.raises(ValueError, match=r"layers \[0, 2, 4\] must be 1 to 4 indices of the "
                                         r"teacher's 4 layers \(0 .. 3\)"):
        distilbert_from_teacher(teacher(4), layers=[0, 2, 4])
    with pytest.raises(ValueError, match=r"layers \[0, 1, 2, 3, 0\] must be 1 to 4 indices"):
        distilbert_from_teacher(teacher(4), layers=[0, 1, 2, 3, 0])
    with pytest.raises(TypeError, match="the teacher must be a BertModel or BertForMaskedLM"):
        distilbert_from_teacher(build_with_dropout(DistilBertForSequenceClassification)())
    with pytest.raises(TypeError, match="config must be a DistilBertConfig"):
        DistilBertModel(BertConfig(**TINY))
