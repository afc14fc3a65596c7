"""DistilBERT HuggingFace checkpoints: the tiny random models of
``tests/fixtures/hf/make_distilbert_fixtures.py`` (DistilBertModel, DistilBertForMaskedLM,
DistilBertForSequenceClassification) give HuggingFace's outputs within 1e-4 x the output scale
(measured: at most 3.6e-6 absolute on outputs of size 1.4-5.5) through ``from_pretrained``;
``save_pretrained`` writes HuggingFace's keys, shapes and config fields back."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.models.distilbert import DistilBertConfig

safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.sec6

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
ARCHITECTURES = ["DistilBertModel", "DistilBertForMaskedLM", "DistilBertForSequenceClassification"]


def check_outputs(model, name):
    arrays = dict(np.load(FIXTURES / name / "expected.npz"))
    inputs = {key: arrays.pop(key) for key in ("input_ids", "attention_mask", "labels")
              if key in arrays}
    out = model(**inputs)
    assert set(out) == set(arrays)
    for key, value in arrays.items():
        scale = max(1.0, float(np.abs(value).max()))
        np.testing.assert_allclose(out[key].numpy(), value, rtol=0, atol=1e-4 * scale,
                                   err_msg=f"{name}.{key}")


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_huggingface_checkpoints_give_huggingfaces_outputs(name):
    model = mt.from_pretrained(FIXTURES / name)
    assert type(model).__name__ == name and not model.training
    check_outputs(model, name)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_save_pretrained_writes_huggingfaces_keys_and_reloads(name, tmp_path):
    model = mt.from_pretrained(FIXTURES / name)
    mt.save_pretrained(model, tmp_path)
    ours = safetensors_numpy.load_file(tmp_path / "model.safetensors")
    theirs = safetensors_numpy.load_file(FIXTURES / name / "model.safetensors")
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    for key, value in theirs.items():
        np.testing.assert_array_equal(ours[key], value, err_msg=key)
    config = json.loads((tmp_path / "config.json").read_text())
    original = json.loads((FIXTURES / name / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == "distilbert"
    for field in ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim",
                  "max_position_embeddings", "activation", "dropout", "attention_dropout",
                  "seq_classif_dropout", "pad_token_id", "sinusoidal_pos_embds"):
        assert config[field] == original[field], field
    assert "type_vocab_size" not in config
    check_outputs(mt.from_pretrained(tmp_path), name)


def test_the_config_reads_huggingfaces_names_and_refuses_sinusoids(tmp_path):
    config = DistilBertConfig.from_hf(json.loads(
        (FIXTURES / "DistilBertForMaskedLM" / "config.json").read_text()))
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.intermediate_size, config.classifier_dropout) == (32, 2, 4, 64, 0.2)
    directory = tmp_path / "DistilBertModel"
    shutil.copytree(FIXTURES / "DistilBertModel", directory)
    hf_config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**hf_config, "sinusoidal_pos_embds": True}))
    with pytest.raises(ValueError, match="sinusoidal_pos_embds=True is not implemented"):
        mt.from_pretrained(directory)
