"""DistilBERT and MobileBERT HuggingFace checkpoints: the tiny random models of
``tests/fixtures/hf/make_distilbert_fixtures.py`` and ``make_mobilebert_fixtures.py`` give
HuggingFace's outputs through ``from_pretrained``, and ``save_pretrained`` writes HuggingFace's
keys, shapes and config fields back.

NoNorm does not bound MobileBERT's activations, so every output is compared with a tolerance
relative to its scale: 1e-4 x max(1, max |output|). Measured (float32): DistilBERT at most
3.6e-6 (outputs up to 5.5), MobileBERT at most 2.0e-6 (outputs up to 5.4)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import minitorch_nlp as mt
from minitorch_nlp.models.distilbert import DistilBertConfig
from tests.model_checks import assert_saves_fixture_tensors, hf_fixture_difference

pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.sec6

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
INPUTS = ("input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label",
          "start_positions", "end_positions")
ARCHITECTURES = {
    "DistilBertModel": "distilbert", "DistilBertForMaskedLM": "distilbert",
    "DistilBertForSequenceClassification": "distilbert",
    "DistilBertForTokenClassification": "distilbert",
    "DistilBertForQuestionAnswering": "distilbert",
    "MobileBertModel": "mobilebert", "MobileBertForMaskedLM": "mobilebert",
    "MobileBertForPreTraining": "mobilebert", "MobileBertForSequenceClassification": "mobilebert",
    # HuggingFace's configuration switches (make_mobilebert_fixtures.VARIANTS)
    "MobileBertModel-layer_norm": "mobilebert",
    "MobileBertModel-bottleneck_attention": "mobilebert",
    "MobileBertModel-no_bottleneck": "mobilebert", "MobileBertModel-ib_bert": "mobilebert",
}
FIELDS = {
    "distilbert": ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim",
                   "max_position_embeddings", "activation", "dropout", "attention_dropout",
                   "seq_classif_dropout", "qa_dropout", "pad_token_id", "sinusoidal_pos_embds"),
    "mobilebert": ("vocab_size", "hidden_size", "embedding_size", "intra_bottleneck_size",
                   "num_hidden_layers", "num_attention_heads", "intermediate_size",
                   "num_feedforward_networks", "hidden_act", "normalization_type",
                   "trigram_input", "key_query_shared_bottleneck", "max_position_embeddings",
                   "use_bottleneck", "use_bottleneck_attention", "classifier_activation"),
}


def check_outputs(model, name):
    assert hf_fixture_difference(model, FIXTURES / name, INPUTS) < 1e-4, name


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_huggingface_checkpoints_give_huggingfaces_outputs(name):
    model = mt.from_pretrained(FIXTURES / name)
    assert type(model).__name__ == name.split("-")[0] and not model.training
    check_outputs(model, name)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_save_pretrained_writes_huggingfaces_keys_and_reloads(name, tmp_path):
    config = assert_saves_fixture_tensors(mt.from_pretrained(FIXTURES / name), FIXTURES / name,
                                          tmp_path)
    original = json.loads((FIXTURES / name / "config.json").read_text())
    model_type = ARCHITECTURES[name]
    assert config["architectures"] == [name.split("-")[0]]
    assert config["model_type"] == model_type
    for field in FIELDS[model_type]:
        assert config[field] == original[field], field
    check_outputs(mt.from_pretrained(tmp_path), name)


def test_distilbert_config_reads_huggingfaces_names():
    config = DistilBertConfig.from_hf(json.loads(
        (FIXTURES / "DistilBertForMaskedLM" / "config.json").read_text()))
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.intermediate_size, config.classifier_dropout) == (32, 2, 4, 64, 0.2)
    assert "type_vocab_size" not in config.to_hf()


@pytest.mark.parametrize("name, setting, message", [
    ("DistilBertModel", {"sinusoidal_pos_embds": True},
     "sinusoidal_pos_embds=True is not implemented"),
    ("MobileBertModel", {"normalization_type": "batch_norm"},
     r"normalization_type must be one of \('no_norm', 'layer_norm'\), got 'batch_norm'"),
    ("MobileBertModel", {"key_query_shared_bottleneck": False},
     "the queries and keys are the hidden_size=32 wide layer input, but the attention works at "
     "intra_bottleneck_size=16"),
    ("MobileBertModel", {"use_bottleneck_attention": True},
     "use_bottleneck_attention=True and key_query_shared_bottleneck=True is not implemented"),
    ("MobileBertModel", {"trigram_input": False, "embedding_size": 32},
     "trigram_input=False with embedding_size == hidden_size"),
])
def test_configurations_we_do_not_implement_are_named(name, setting, message, tmp_path):
    directory = tmp_path / name
    shutil.copytree(FIXTURES / name, directory)
    hf_config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**hf_config, **setting}))
    with pytest.raises(ValueError, match=message):
        mt.from_pretrained(directory)
