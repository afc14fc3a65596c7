"""ALBERT and ELECTRA HuggingFace checkpoints: the tiny random models of
``tests/fixtures/hf/make_albert_fixtures.py`` (embedding size 8, hidden size 32, three depths of
one shared layer) and ``make_electra_fixtures.py`` (with and without ``embeddings_project``) give
HuggingFace's outputs through ``minitorch_nlp.from_pretrained``, within 1e-4 times the outputs'
scale; ``save_pretrained`` writes HuggingFace's keys, shapes and values back (ALBERT's shared
layer once) and reloads to the same outputs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import minitorch_nlp as mt
from tests.model_checks import assert_saves_fixture_tensors, hf_fixture_difference

pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.sec9

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
ALBERT = ["AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining"]
ELECTRA = ["ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM"]
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids", "labels",
               "sentence_order_label")


def largest_relative_difference(model, name):
    return hf_fixture_difference(model, FIXTURES / name, INPUT_NAMES)


@pytest.mark.parametrize("name", ALBERT + ELECTRA)
def test_checkpoints_give_huggingfaces_outputs(name):
    model = mt.from_pretrained(FIXTURES / name)
    assert type(model).__name__ == name and not model.training
    assert largest_relative_difference(model, name) < 1e-4


@pytest.mark.parametrize("name", ALBERT + ELECTRA)
def test_save_pretrained_writes_huggingfaces_tensors_and_reloads(name, tmp_path):
    config = assert_saves_fixture_tensors(mt.from_pretrained(FIXTURES / name), FIXTURES / name,
                                          tmp_path)
    original = json.loads((FIXTURES / name / "config.json").read_text())
    for field in ("embedding_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                  "hidden_act"):
        assert config[field] == original[field], field
    assert largest_relative_difference(mt.from_pretrained(tmp_path), name) < 1e-4


@pytest.mark.parametrize("name", ALBERT)
def test_albert_checkpoints_fill_every_depth_with_the_one_shared_layer(name):
    model = mt.from_pretrained(FIXTURES / name)
    layers = model.encoder.layers if name == "AlbertModel" else model.bert.encoder.layers
    assert model.config.share_layers == "all"
    assert len(layers) == 3 and all(layer is layers[0] for layer in layers)


def test_electra_projects_embeddings_only_when_their_size_differs():
    assert mt.from_pretrained(FIXTURES / "ElectraModel").embeddings.project is None
    generator = mt.from_pretrained(FIXTURES / "ElectraForMaskedLM")
    assert generator.bert.embeddings.project.weight.shape == (8, 16)
    assert generator.mlm.dense.weight.shape == (16, 8)
