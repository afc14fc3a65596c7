"""MobileBERT HuggingFace checkpoints: the tiny random models of
``tests/fixtures/hf/make_mobilebert_fixtures.py`` (bottlenecks, NoNorm, three stacked
feed-forward networks, the 3-gram embedding) for MobileBertModel, MobileBertForMaskedLM and
MobileBertForPreTraining give HuggingFace's outputs through ``from_pretrained``. NoNorm does not
bound the activations, so float32 results are compared with a tolerance relative to the output's
scale: 1e-4 x max(1, max |output|) (measured: at most 2.0e-6 absolute on outputs of size up to
5.4); ``save_pretrained`` writes HuggingFace's keys, shapes and config fields back."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt

safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.sec6

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
ARCHITECTURES = ["MobileBertModel", "MobileBertForMaskedLM", "MobileBertForPreTraining"]
INPUTS = ("input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label")


def check_outputs(model, name):
    arrays = dict(np.load(FIXTURES / name / "expected.npz"))
    inputs = {key: arrays.pop(key) for key in INPUTS if key in arrays}
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
    assert config["architectures"] == [name] and config["model_type"] == "mobilebert"
    for field in ("vocab_size", "hidden_size", "embedding_size", "intra_bottleneck_size",
                  "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "num_feedforward_networks", "hidden_act", "normalization_type",
                  "trigram_input", "key_query_shared_bottleneck", "max_position_embeddings"):
        assert config[field] == original[field], field
    check_outputs(mt.from_pretrained(tmp_path), name)


def test_configurations_we_do_not_implement_are_named(tmp_path):
    directory = tmp_path / "MobileBertModel"
    shutil.copytree(FIXTURES / "MobileBertModel", directory)
    hf_config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**hf_config,
                                                       "normalization_type": "layer_norm"}))
    with pytest.raises(ValueError, match="normalization_type='layer_norm' is not implemented; "
                                         "MobileBERT's setting is normalization_type='no_norm'"):
        mt.from_pretrained(directory)
