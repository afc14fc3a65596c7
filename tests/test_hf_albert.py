"""ALBERT HuggingFace checkpoints: the tiny random models of
``tests/fixtures/hf/make_albert_fixtures.py`` (embedding size 8, hidden size 32, three depths of
one shared layer) give HuggingFace's outputs through ``minitorch_nlp.from_pretrained``, within
1e-4 times the outputs' scale; ``save_pretrained`` writes HuggingFace's single shared layer back
(keys, shapes and values) and reloads to the same outputs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt

safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.sec9

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
ARCHITECTURES = ["AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining"]
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids", "labels",
               "sentence_order_label")


def largest_relative_difference(model, name):
    """max |ours - theirs| / max(1, max |theirs|) over every output HuggingFace gave."""
    arrays = dict(np.load(FIXTURES / name / "expected.npz"))
    inputs = {key: arrays.pop(key) for key in INPUT_NAMES if key in arrays}
    out = model(**inputs)
    assert set(out) == set(arrays)
    return max(np.abs(np.asarray(out[key].numpy()) - value).max() / max(1.0, np.abs(value).max())
               for key, value in arrays.items())


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_albert_checkpoints_give_huggingfaces_outputs(name):
    model = mt.from_pretrained(FIXTURES / name)
    assert type(model).__name__ == name and model.config.share_layers == "all"
    layers = model.encoder.layers if name == "AlbertModel" else model.bert.encoder.layers
    assert len(layers) == 3 and all(layer is layers[0] for layer in layers)
    assert largest_relative_difference(model, name) < 1e-4


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_save_pretrained_writes_one_shared_layer_and_reloads(name, tmp_path):
    mt.save_pretrained(mt.from_pretrained(FIXTURES / name), tmp_path)
    ours = safetensors_numpy.load_file(tmp_path / "model.safetensors")
    theirs = safetensors_numpy.load_file(FIXTURES / name / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        np.testing.assert_array_equal(ours[key], value, err_msg=key)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["num_hidden_groups"], config["inner_group_num"]) == (1, 1)
    assert "share_layers" not in config and config["embedding_size"] == 8
    assert largest_relative_difference(mt.from_pretrained(tmp_path), name) < 1e-4
