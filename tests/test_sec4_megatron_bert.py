"""Section IV-E: Megatron-BERT (Shoeybi et al., 2019), BERT with its layers re-ordered: pre-LN
sub-layers, a final LayerNorm, no LayerNorm on the embeddings. The tiny random HuggingFace models
of ``tests/fixtures/hf/make_megatron_bert_fixtures.py`` give HuggingFace's outputs within 1e-4
times their scale and save back to the same tensors; the shared model checks; learning MLM + NSP.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.models.bert import BertConfig, BertModel
from minitorch_nlp.models.megatron_bert import (MegatronBertConfig, MegatronBertForPreTraining,
                                                MegatronBertModel)
from minitorch_nlp.nn import Identity
from tests.model_checks import (Learning, ModelChecks, assert_saves_fixture_tensors,
                                encoder_spec, hf_fixture_difference, masked_lm_batch, randomize)

pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.sec4

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
ARCHITECTURES = ["MegatronBertModel", "MegatronBertForPreTraining"]
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label")
TINY = dict(vocab_size=23, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=10, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_checkpoints_give_huggingfaces_outputs(name):
    model = mt.from_pretrained(FIXTURES / name)
    assert type(model).__name__ == name and not model.training
    assert hf_fixture_difference(model, FIXTURES / name, INPUT_NAMES) < 1e-4


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_save_pretrained_writes_huggingfaces_tensors_and_reloads(name, tmp_path):
    config = assert_saves_fixture_tensors(mt.from_pretrained(FIXTURES / name), FIXTURES / name,
                                          tmp_path)
    assert config["model_type"] == "megatron-bert" and config["architectures"] == [name]
    assert hf_fixture_difference(mt.from_pretrained(tmp_path), FIXTURES / name, INPUT_NAMES) < 1e-4


def test_megatron_is_bert_re_ordered():
    """The same weights in BERT's post-LN order and Megatron's pre-LN order give different
    outputs; the re-ordered model has a final LayerNorm and none on its embeddings, and, fed
    the embeddings BERT would normalise, each of its layers computes x + Sublayer(LN(x))."""
    mt.manual_seed(0)
    megatron = randomize(MegatronBertModel(MegatronBertConfig(**TINY)), seed=1,
                         norm_gain_mean=1.0)
    assert isinstance(megatron.embeddings.norm, Identity)
    assert megatron.encoder.norm is not None
    assert all(layer.norm_first for layer in megatron.encoder.layers)
    bert = BertModel(BertConfig(**TINY)).to(mt.float64)
    bert.load_state_dict({k: v for k, v in megatron.state_dict().items()
                          if not k.startswith("encoder.norm.")}, strict=False)
    ids = np.random.default_rng(0).integers(1, 23, (2, 6))
    out = megatron.eval()(ids, output_hidden_states=True)
    assert not np.allclose(out.last_hidden_state.numpy(),
                           bert.eval()(ids).last_hidden_state.numpy())
    x = out.hidden_states[0]
    layer = megatron.encoder.layers[0]
    attended = x + layer.self_attn(layer.norm1(x))
    expected = attended + layer.feed_forward(layer.norm2(attended))
    np.testing.assert_allclose(out.hidden_states[1].numpy(), expected.numpy(), rtol=1e-12)


def build_with_dropout(model_class):
    def build_model(dropout=0.0):
        return model_class(MegatronBertConfig(**{**TINY, "hidden_dropout_prob": dropout,
                                                 "attention_probs_dropout_prob": dropout}))
    return build_model


def pretraining_batch(seed=10):
    return dict(masked_lm_batch(seed), next_sentence_label=np.array([0, 1, 0]))


SKIPS = {"padding_left": "Megatron-BERT's absolute positions count from the first column"}


class TestMegatronBertForPreTrainingChecks(ModelChecks):
    """Right padding, round trips, learning MLM + NSP (the loss falls 20-fold in 100 steps),
    dtypes, backends, dropout: ``tests/model_checks.py``."""

    spec = encoder_spec(
        "MegatronBertForPreTraining", build_with_dropout(MegatronBertForPreTraining),
        vocab=(4, 23), output="prediction_logits", padding_token_type=1, skips=SKIPS,
        learning=Learning(pretraining_batch, lambda model, inputs: model(**inputs).loss,
                          steps=100, factor=20, lr=1e-2))


class TestMegatronBertModelChecks(ModelChecks):
    spec = encoder_spec(
        "MegatronBertModel", build_with_dropout(MegatronBertModel), vocab=(4, 23),
        output="last_hidden_state", padding_token_type=1,
        skips={**SKIPS, "learns": "no objective of its own; MegatronBertForPreTraining learns"})
