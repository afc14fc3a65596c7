"""Section VIII-C: the Longformer model (Beltagy et al., 2020): RoBERTa with
``LongformerSelfAttention`` (a window per layer, global tokens with their own projections), and
HuggingFace's ``LongformerModel`` / ``LongformerForMaskedLM`` checkpoints.

HuggingFace fixtures (``tests/fixtures/hf/make_longformer_fixtures.py``: windows 4 and 8, a
padded batch of three rows whose length is not a multiple of the window, with and without global
tokens, one global flag on padding) give HuggingFace's outputs on every real position; saving
writes HuggingFace's tensors back. Properties: windows as long as the sequence are RoBERTa,
global flags on padding change nothing. The shared checks of ``tests/model_checks.py`` run with
a global first token; ``train longformer`` resumes exactly and fills masks; the errors. The
attention itself is tested in ``test_sec8_longformer.py``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.attention.longformer import LongformerSelfAttention
from minitorch_nlp.models.longformer import (LongformerConfig, LongformerForMaskedLM,
                                             LongformerModel)
from minitorch_nlp.models.roberta import RobertaConfig, RobertaModel
from tests.model_checks import (ENCODER_SKIPS, Learning, ModelChecks, ModelSpec,
                                assert_saves_fixture_tensors, check_train_resume_generate,
                                close_to_fixture)

pytestmark = pytest.mark.sec8

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
OUTPUTS = {"LongformerModel": ("last_hidden_state", "pooler_output"),
           "LongformerForMaskedLM": ("logits", "loss")}
PAD = 1
TINY = dict(vocab_size=23, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=20, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, type_vocab_size=1, layer_norm_eps=1e-5,
            attention_window=[2, 4])


def fixture_inputs(name):
    arrays = dict(np.load(FIXTURES / name / "expected.npz"))
    inputs = {key: arrays[key] for key in ("input_ids", "attention_mask", "labels")
              if key in arrays}
    return inputs, arrays


def fixture_difference(model, name, with_global):
    """max |ours - HuggingFace's| / max(1, max |HuggingFace's|) over the fixture's outputs on
    the real tokens, with or without its global attention mask; asserts 1e-4 x scale."""
    inputs, arrays = fixture_inputs(name)
    real = arrays["attention_mask"].astype(bool)
    extra = {"global_attention_mask": arrays["global_attention_mask"]} if with_global else {}
    out = model(**inputs, **extra)
    differences = []
    for key in OUTPUTS[name]:
        ours, theirs = out[key].numpy(), arrays[key + ("" if with_global else "_local")]
        if ours.ndim == 3:           # per token: HuggingFace zeroes the padding's attention
            ours, theirs = ours[real], theirs[real]
        close_to_fixture(ours, theirs, f"{name} {key}, global tokens: {with_global}")
        differences.append(np.abs(ours - theirs).max() / max(1.0, np.abs(theirs).max()))
    return max(differences)


@pytest.mark.parametrize("with_global", [True, False])
@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_checkpoints_give_huggingfaces_outputs(name, with_global):
    model = mt.from_pretrained(FIXTURES / name)
    assert type(model).__name__ == name and not model.training
    encoder = model.encoder if isinstance(model, LongformerModel) else model.bert.encoder
    assert [layer.self_attn.window for layer in encoder.layers] == [2, 4]   # one side each
    assert fixture_difference(model, name, with_global) < 1e-4


def test_the_fixtures_global_tokens_change_huggingfaces_outputs():
    """So matching both runs tests the global projections, not the window alone."""
    _, arrays = fixture_inputs("LongformerModel")
    real = arrays["attention_mask"].astype(bool)
    rows = np.abs(arrays["last_hidden_state"] - arrays["last_hidden_state_local"]).max(axis=-1)
    assert rows[0][real[0]].min() > 1e-3 and rows[1][real[1]].min() > 1e-3
    np.testing.assert_array_equal(rows[2][real[2]], 0)       # its only global flag is padding


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_save_pretrained_writes_huggingfaces_tensors_and_reloads(name, tmp_path):
    config = assert_saves_fixture_tensors(mt.from_pretrained(FIXTURES / name), FIXTURES / name,
                                          tmp_path)
    assert config["model_type"] == "longformer" and config["architectures"] == [name]
    assert config["attention_window"] == [4, 8]
    again = mt.from_pretrained(tmp_path)
    assert type(again).__name__ == name
    assert fixture_difference(again, name, with_global=True) < 1e-4


def build(model_class, seed=0, **overrides):
    mt.manual_seed(seed)
    return model_class(LongformerConfig(**{**TINY, **overrides})).to(mt.float64).eval()


def test_one_window_serves_every_layer_and_survives_a_round_trip(tmp_path):
    model = build(LongformerModel, attention_window=6).to(mt.float32)
    assert model.config.layer_windows == (6, 6)
    assert [layer.self_attn.window for layer in model.encoder.layers] == [3, 3]
    mt.save_pretrained(model, tmp_path)
    assert mt.from_pretrained(tmp_path).config == model.config


def test_windows_as_long_as_the_sequence_are_roberta():
    longformer = build(LongformerModel, attention_window=16)
    roberta = RobertaModel(RobertaConfig(**{k: v for k, v in TINY.items()
                                            if k != "attention_window"})).to(mt.float64).eval()
    roberta.load_state_dict({k: v for k, v in longformer.state_dict().items()
                             if "_global." not in k})
    ids = np.random.default_rng(0).integers(3, 23, (2, 7))
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3])
    np.testing.assert_allclose(longformer(ids, mask).last_hidden_state.numpy()[mask == 1],
                               roberta(ids, mask).last_hidden_state.numpy()[mask == 1],
                               rtol=1e-12, atol=1e-12)


def test_global_flags_on_padding_change_nothing_and_no_flags_is_no_mask():
    model = build(LongformerForMaskedLM)
    ids = np.random.default_rng(1).integers(3, 23, (2, 9))
    mask = np.array([[1] * 9, [1] * 5 + [0] * 4])
    is_global = np.zeros((2, 9), dtype=bool)
    is_global[0, 0] = True
    base = model(ids, mask, global_attention_mask=is_global).logits.numpy()
    padded_flags = is_global.copy()
    padded_flags[1, 6:] = True
    np.testing.assert_array_equal(
        model(ids, mask, global_attention_mask=padded_flags).logits.numpy(), base)
    np.testing.assert_array_equal(
        model(ids, mask, global_attention_mask=np.zeros((2, 9), np.int64)).logits.numpy(),
        model(ids, mask).logits.numpy())
    assert not np.allclose(base[0], model(ids, mask).logits.numpy()[0])


def test_output_attentions_are_each_layers_window_and_global_weights():
    model = build(LongformerModel)
    ids = np.random.default_rng(2).integers(3, 23, (1, 9))
    is_global = np.zeros((1, 9), dtype=bool)
    is_global[0, 4] = True
    out = model(ids, global_attention_mask=is_global, output_attentions=True)
    np.testing.assert_allclose(out.last_hidden_state.numpy(),
                               model(ids, global_attention_mask=is_global).last_hidden_state
                               .numpy(), rtol=1e-12, atol=1e-12)
    offsets = np.abs(np.arange(9)[None, :] - np.arange(9)[:, None])
    for weights, one_side in zip(out.attentions, (1, 2)):
        weights = weights.numpy()[0]                              # (heads, 9, 9)
        assert weights.shape == (2, 9, 9)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
        local = np.ones(9, dtype=bool)
        local[4] = False
        seen = weights[:, local] > 0
        np.testing.assert_array_equal(seen, np.broadcast_to(
            (offsets[local] <= one_side) | (np.arange(9) == 4), seen.shape))
        assert np.all(weights[:, 4] > 0)                         # the global row sees all


def test_a_head_mask_switches_heads_off():
    mt.manual_seed(0)
    layer = LongformerSelfAttention(8, 2, 2).to(mt.float64)
    x = mt.randn(2, 6, 8, dtype=mt.float64)
    is_global = np.zeros((2, 6), dtype=bool)
    is_global[:, 1] = True
    masked = layer(x, global_attention_mask=is_global, head_mask=np.array([1.0, 0.0]))
    state = {name: value.numpy() for name, value in layer.state_dict().items()}
    state["out_proj.weight"] = state["out_proj.weight"] * (np.arange(8) < 4)  # head 2's columns
    layer.load_state_dict(state)
    np.testing.assert_allclose(masked.numpy(), layer(x, global_attention_mask=is_global).numpy(),
                               rtol=1e-12, atol=1e-12)


def test_errors_name_the_longformer_limits():
    with pytest.raises(ValueError, match="attention_window for layer 1 must be a positive even "
                                         r"int \(the query sees attention_window / 2 tokens on "
                                         "each side\\), got 3"):
        LongformerConfig(**{**TINY, "attention_window": [2, 3]})
    with pytest.raises(ValueError, match="attention_window for layer 0 must be .* got 0"):
        LongformerConfig(**{**TINY, "attention_window": 0})
    with pytest.raises(ValueError, match=r"attention_window has 3 entries; give one per layer "
                                         r"\(num_hidden_layers=2\)"):
        LongformerConfig(**{**TINY, "attention_window": [2, 2, 2]})
    model = build(LongformerModel)
    ids = np.full((2, 5), 4)
    with pytest.raises(ValueError, match=r"LongformerModel: global_attention_mask of shape "
                                         r"\(2, 4\) must be \(batch, time\) = \(2, 5\)"):
        model(ids, global_attention_mask=np.zeros((2, 4), np.int64))
    with pytest.raises(ValueError, match="LongformerModel: global_attention_mask holds 2; use 1 "
                                         "for tokens with global attention"):
        model(ids, global_attention_mask=np.full((2, 5), 2))
    with pytest.raises(TypeError, match="config must be a LongformerConfig"):
        LongformerModel(RobertaConfig(**{k: v for k, v in TINY.items()
                                         if k != "attention_window"}))


def test_a_checkpoint_with_an_odd_window_is_refused(tmp_path):
    mt.save_pretrained(build(LongformerModel).to(mt.float32), tmp_path)
    config = (tmp_path / "config.json").read_text().replace('"attention_window": [\n    2,',
                                                            '"attention_window": [\n    5,')
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(ValueError, match="attention_window for layer 0 must be a positive even"):
        mt.from_pretrained(tmp_path)


def first_token_global(model, ids, mask):
    """The model's output with the first real token of each row global."""
    is_global = np.zeros(mask.shape, dtype=bool)
    is_global[np.arange(len(mask)), mask.argmax(axis=1)] = True
    return model(ids, attention_mask=mask, global_attention_mask=is_global)


def build_with_dropout(model_class):
    def build_model(dropout=0.0):
        return model_class(LongformerConfig(**{**TINY, "hidden_dropout_prob": dropout,
                                               "attention_probs_dropout_prob": dropout}))
    return build_model


def masked_lm_batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 23, (3, 10))
    ids[:, 0], ids[2, 6:] = 0, PAD
    labels = np.where((np.arange(10) % 3 == 1) & (ids != PAD), ids, -100)
    return dict(input_ids=np.where(labels != -100, 4, ids), attention_mask=ids != PAD,
                global_attention_mask=np.arange(10)[None].repeat(3, 0) == 0, labels=labels)


class TestLongformerForMaskedLMChecks(ModelChecks):
    """Right and left padding (the first real token global), round trips, learning (the loss
    falls 20-fold in 100 steps), dtypes, backends, dropout: ``tests/model_checks.py``."""

    spec = ModelSpec(
        name="LongformerForMaskedLM", build=build_with_dropout(LongformerForMaskedLM),
        forward=lambda model, ids, mask: first_token_global(model, ids, mask).logits,
        vocab=(3, 23), pad_filler=PAD, padding_left=True, hf=True, skips=ENCODER_SKIPS,
        learning=Learning(masked_lm_batch, lambda model, inputs: model(**inputs).loss,
                          steps=100, factor=20, lr=1e-2))


class TestLongformerModelChecks(ModelChecks):
    spec = ModelSpec(
        name="LongformerModel", build=build_with_dropout(LongformerModel),
        forward=lambda model, ids, mask: first_token_global(model, ids, mask).last_hidden_state,
        vocab=(3, 23), pad_filler=PAD, padding_left=True, hf=True,
        skips={**ENCODER_SKIPS, "learns": "no objective of its own; LongformerForMaskedLM learns"})


def test_train_longformer_resumes_exactly_and_generate_fills_masks(tmp_path, capsys):
    check_train_resume_generate("longformer", tmp_path, capsys,
                                "bert.encoder.layers.0.self_attn.query_global.weight",
                                prompt="the <mask> fox")
