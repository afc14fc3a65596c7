"""Section IV-E: RoBERTa (Liu et al., 2019): BERT's model with its checkpoints' position ids
(starting after the padding id and skipping padding), one segment type, no NSP. Left and right
padding, round trips and learning a tiny masked-LM batch are the shared checks of
``tests/model_checks.py``. Dynamic masking and FULL-SENTENCES packing are tested in
``test_masking.py``, equality with HuggingFace in ``test_hf_bert.py``."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM, BertModel
from minitorch_nlp.models.roberta import (RobertaConfig, RobertaForMaskedLM, RobertaModel,
                                          create_position_ids_from_input_ids)
from tests.model_checks import Learning, ModelChecks, encoder_spec

pytestmark = pytest.mark.sec4

PAD = 1
TINY = dict(vocab_size=23, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=10, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


def build(model_class, seed=0, **overrides):
    mt.manual_seed(seed)
    return model_class(RobertaConfig(**{**TINY, **overrides}))


@given(st.lists(st.lists(st.integers(0, 9), max_size=8), min_size=1, max_size=4))
def test_position_ids_count_real_tokens_from_padding_plus_one(rows):
    time = max(len(row) for row in rows)
    ids = np.array([row + [PAD] * (time - len(row)) for row in rows], dtype=np.int64)
    positions = create_position_ids_from_input_ids(ids, PAD)
    for b in range(len(rows)):
        real = ids[b] != PAD
        np.testing.assert_array_equal(positions[b][real], PAD + 1 + np.arange(real.sum()))
        assert np.all(positions[b][~real] == PAD)


def test_roberta_is_bert_with_its_own_positions():
    config = RobertaConfig(**TINY)
    assert (config.type_vocab_size, config.pad_token_id, config.layer_norm_eps) == (1, 1, 1e-5)
    assert RobertaConfig().max_position_embeddings == 514 and RobertaConfig().vocab_size == 50265
    roberta = build(RobertaForMaskedLM)
    assert isinstance(roberta, BertForMaskedLM) and isinstance(roberta.bert, BertModel)
    assert roberta.bert.pooler is None and not hasattr(roberta, "nsp")
    # with the padding id absent, RoBERTa's positions are BERT's shifted by pad + 1
    ids = np.array([[0, 5, 9, 11, 2, 7]])
    bert = BertForMaskedLM(config)
    bert.load_state_dict(roberta.state_dict())
    shifted = np.arange(2, 8)[None]
    np.testing.assert_allclose(roberta.eval()(ids).logits.numpy(),
                               bert.eval()(ids, position_ids=shifted).logits.numpy(), atol=1e-6)


def test_errors_name_the_roberta_limits():
    model = build(RobertaForMaskedLM)
    model(np.full((1, 8), 5))                                   # 10 - pad - 1 = 8 tokens fit
    with pytest.raises(ValueError, match="RobertaModel: the sequence length 9 exceeds the 8 "):
        model(np.full((1, 9), 5))
    with pytest.raises(ValueError,
                       match=r"token_type_ids holds 1, outside \[0, type_vocab_size=1\)"):
        model(np.full((1, 3), 5), token_type_ids=np.ones((1, 3), np.int64))
    with pytest.raises(ValueError, match="RobertaConfig: max_position_embeddings=2 leaves no "):
        RobertaConfig(**{**TINY, "max_position_embeddings": 2})
    with pytest.raises(TypeError, match="config must be a RobertaConfig"):
        RobertaModel(BertConfig(**TINY))


def masked_lm_batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 23, (3, 8))
    ids[:, 0], ids[2, 5:] = 0, PAD
    labels = np.where((np.arange(8) % 3 == 1) & (ids != PAD), ids, -100)
    return dict(input_ids=np.where(labels != -100, 4, ids), attention_mask=ids != PAD,
                labels=labels)


def build_with_dropout(model_class):
    def build(dropout=0.0):
        return model_class(RobertaConfig(**{**TINY, "hidden_dropout_prob": dropout,
                                            "attention_probs_dropout_prob": dropout}))
    return build


class TestRobertaForMaskedLMChecks(ModelChecks):
    """Right and left padding (position ids skip padding, so where it goes changes nothing; the
    padding holds the padding id, which the positions read), round trips, learning (the loss
    falls 20-fold in 100 steps), dtypes, backends, dropout: ``tests/model_checks.py``."""

    spec = encoder_spec(
        "RobertaForMaskedLM", build_with_dropout(RobertaForMaskedLM), vocab=(3, 23),
        pad_filler=PAD, padding_left=True,
        learning=Learning(masked_lm_batch, lambda model, inputs: model(**inputs).loss,
                          steps=100, factor=20, lr=1e-2))


class TestRobertaModelChecks(ModelChecks):
    spec = encoder_spec(
        "RobertaModel", build_with_dropout(RobertaModel), vocab=(3, 23),
        output="last_hidden_state", pad_filler=PAD, padding_left=True,
        skips={"learns": "no objective of its own; RobertaForMaskedLM learns"})
