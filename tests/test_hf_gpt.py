"""GPT checkpoints in HuggingFace's format: tiny random ``OpenAIGPTLMHeadModel``,
``OpenAIGPTDoubleHeadsModel`` and ``GPT2LMHeadModel`` made by HuggingFace itself
(``tests/fixtures/hf/make_gpt_fixtures.py``) give HuggingFace's outputs, save back with
HuggingFace's keys and shapes, and a checkpoint that does not fit is an error naming the key.
A freshly built model's round trip is a shared check (``tests/model_checks.py``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

safetensors_numpy = pytest.importorskip("safetensors.numpy")

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp.models.gpt import (GPT2LMHeadModel, GPTConfig, GPTDoubleHeadsModel,  # noqa: E402
                                      GPTLMHeadModel)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
LM_ARCHITECTURES = {"OpenAIGPTLMHeadModel": GPTLMHeadModel, "GPT2LMHeadModel": GPT2LMHeadModel}
TOL = dict(rtol=0, atol=1e-4)


def expected(name):
    with np.load(FIXTURES / name / "expected.npz") as arrays:
        return dict(arrays)


def hf_state(directory):
    return safetensors_numpy.load_file(str(Path(directory) / "model.safetensors"))


def copy_fixture(name, tmp_path, edit):
    """The fixture ``name`` copied to ``tmp_path`` with its weights passed through ``edit``."""
    directory = tmp_path / name
    shutil.copytree(FIXTURES / name, directory)
    safetensors_numpy.save_file(edit(hf_state(directory)), str(directory / "model.safetensors"),
                                metadata={"format": "pt"})
    return directory


def lm_outputs(model, arrays):
    plain = model(arrays["input_ids"]).logits.numpy()
    masked = model(arrays["input_ids"], attention_mask=arrays["attention_mask"]).logits.numpy()
    return plain, masked


@pytest.mark.parametrize("name", sorted(LM_ARCHITECTURES))
def test_language_models_give_huggingface_logits(name):
    model = mt.from_pretrained(FIXTURES / name)
    assert type(model) is LM_ARCHITECTURES[name] and not model.training
    arrays = expected(name)
    plain, masked = lm_outputs(model, arrays)
    np.testing.assert_allclose(plain, arrays["logits"], **TOL)
    real = arrays["attention_mask"].astype(bool)              # padded queries see nothing
    np.testing.assert_allclose(masked[real], arrays["logits_masked"][real], **TOL)


def test_double_heads_model_gives_huggingface_logits():
    model = mt.from_pretrained(FIXTURES / "OpenAIGPTDoubleHeadsModel")
    assert type(model) is GPTDoubleHeadsModel
    arrays = expected("OpenAIGPTDoubleHeadsModel")
    out = model(arrays["input_ids"], mc_token_ids=arrays["mc_token_ids"])
    np.testing.assert_allclose(out.logits.numpy(), arrays["logits"], **TOL)
    np.testing.assert_allclose(out.mc_logits.numpy(), arrays["mc_logits"], **TOL)


@pytest.mark.parametrize("keys", ["transformer.tokens_embed.weight", "both"])
def test_double_heads_checkpoint_of_transformers_4_loads(keys, tmp_path):
    """transformers 4 saved the tied W_e as transformer.tokens_embed.weight (5 as lm_head.weight);
    a checkpoint with both holds two copies of one tensor."""
    def rename(state):
        tied = state["lm_head.weight"]
        state = {k: v for k, v in state.items() if k != "lm_head.weight" or keys == "both"}
        return {**state, "transformer.tokens_embed.weight": tied}

    model = mt.from_pretrained(copy_fixture("OpenAIGPTDoubleHeadsModel", tmp_path, rename))
    arrays = expected("OpenAIGPTDoubleHeadsModel")
    out = model(arrays["input_ids"], mc_token_ids=arrays["mc_token_ids"])
    np.testing.assert_allclose(out.logits.numpy(), arrays["logits"], **TOL)
    mt.save_pretrained(model, tmp_path / "saved")
    assert "lm_head.weight" in hf_state(tmp_path / "saved")
    assert "transformer.tokens_embed.weight" not in hf_state(tmp_path / "saved")


@pytest.mark.parametrize("name", sorted(LM_ARCHITECTURES) + ["OpenAIGPTDoubleHeadsModel"])
def test_save_pretrained_writes_huggingface_keys_and_reloads(name, tmp_path):
    model = mt.from_pretrained(FIXTURES / name)
    mt.save_pretrained(model, tmp_path / "saved")
    ours, theirs = hf_state(tmp_path / "saved"), hf_state(FIXTURES / name)
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert config["architectures"] == [name]
    reference = json.loads((FIXTURES / name / "config.json").read_text())
    for key in ("model_type", "vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                "layer_norm_epsilon", "afn", "activation_function"):
        assert config.get(key) == reference.get(key), key
    again = mt.from_pretrained(tmp_path / "saved")
    ids = expected(name)["input_ids"]
    first, second = model(ids), again(ids)
    np.testing.assert_array_equal(second.logits.numpy(), first.logits.numpy())


def test_a_bare_base_model_checkpoint_loads_into_the_language_model(tmp_path):
    directory = copy_fixture("GPT2LMHeadModel", tmp_path, lambda state: {
        key.removeprefix("transformer."): value for key, value in state.items()})
    np.testing.assert_allclose(mt.from_pretrained(directory)(expected("GPT2LMHeadModel")[
        "input_ids"]).logits.numpy(), expected("GPT2LMHeadModel")["logits"], **TOL)


@pytest.mark.parametrize("edit, message", [
    (lambda s: {k: v for k, v in s.items() if k != "transformer.h.1.mlp.c_fc.bias"},
     r"missing keys: transformer\.h\.1\.mlp\.c_fc\.bias"),
    (lambda s: {**s, "transformer.h.0.attn.extra": np.zeros(3, np.float32)},
     r"unexpected keys: transformer\.h\.0\.attn\.extra"),
    (lambda s: {**s, "transformer.h.0.attn.c_proj.weight": np.zeros((32, 31), np.float32)},
     r"mis-shaped keys: transformer\.h\.0\.attn\.c_proj\.weight \(32, 31\)"),
])
def test_a_checkpoint_that_does_not_fit_names_the_key(tmp_path, edit, message):
    with pytest.raises(ValueError, match=message):
        mt.from_pretrained(copy_fixture("OpenAIGPTLMHeadModel", tmp_path, edit))


def test_configs_huggingface_does_not_have_are_refused(tmp_path):
    directory = tmp_path / "untied"
    shutil.copytree(FIXTURES / "GPT2LMHeadModel", directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    with pytest.raises(ValueError, match="tie_word_embeddings=False is not supported"):
        mt.from_pretrained(directory)
    with pytest.raises(ValueError, match="has no 'gelu' activation"):
        mt.save_pretrained(GPTLMHeadModel(GPTConfig.tiny("gpt1", activation="gelu")), tmp_path)
