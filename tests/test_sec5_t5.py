"""T5 (survey section V-D): RMS norm and the relative-position buckets against the reference
maths, HuggingFace checkpoints (``tests/fixtures/hf/make_t5_fixtures.py``), span corruption,
the shared model checks (the encoder-decoder, and the prefix LM and decoder-only models of the
architecture comparison), and the errors."""
from __future__ import annotations

from pathlib import Path

import autograd
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp.data.span_corruption import random_spans_noise_mask, span_corruption
from minitorch_nlp.models.t5 import (RMSNorm, RelativePositionBias, T5Config, T5DecoderOnly,
                                     T5EncoderModel, T5ForConditionalGeneration, T5Model,
                                     relative_position_bucket)
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import t5 as R
from tests.model_checks import (Learning, ModelChecks, check_seq2seq_fixture, close_to_fixture,
                                seq2seq_spec)

pytestmark = pytest.mark.sec5

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
TOL = dict(rtol=1e-7, atol=1e-10)


# ---- the parts against the reference maths ------------------------------------------------------
@given(offsets=st.lists(st.integers(-300, 300), min_size=1, max_size=20),
       bidirectional=st.booleans(), num_buckets=st.integers(4, 40),
       max_distance=st.integers(21, 200))
def test_relative_position_bucket_matches_reference(offsets, bidirectional, num_buckets,
                                                    max_distance):
    got = relative_position_bucket(np.array(offsets), bidirectional=bidirectional,
                                   num_buckets=num_buckets, max_distance=max_distance)
    expected = [R.relative_position_bucket(o, bidirectional=bidirectional,
                                           num_buckets=num_buckets, max_distance=max_distance)
                for o in offsets]
    assert got.tolist() == expected
    assert got.min() >= 0 and got.max() < num_buckets


def test_buckets_are_exact_near_and_log_spaced_far():
    offsets = np.arange(-200, 201)
    causal = relative_position_bucket(offsets, bidirectional=False, num_buckets=32,
                                      max_distance=128)
    assert (causal[offsets >= 0] == 0).all()                       # the future is one bucket
    assert causal[offsets == -15].item() == 15 and causal[offsets == -16].item() == 16
    assert (causal[offsets <= -128] == 31).all()                   # beyond max_distance
    both = relative_position_bucket(offsets, bidirectional=True, num_buckets=32,
                                    max_distance=128)
    np.testing.assert_array_equal(both[offsets > 0] - 16, both[::-1][offsets > 0])
    assert np.all(np.diff(causal[offsets <= 0][::-1]) >= 0)         # monotone in the distance


@given(x=S.arrays((2, 3, 5)), weight=S.arrays((5,)), eps=st.sampled_from([1e-6, 0.1]))
def test_rms_norm_matches_reference_and_its_gradients(x, weight, eps):
    norm = RMSNorm(5, eps=eps).to(mt.float64)
    norm.weight.data[...] = weight
    xt = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    out = norm(xt)
    np.testing.assert_allclose(out.numpy(), R.rms_norm(x, weight, eps), **TOL)
    cotangent = np.random.default_rng(0).standard_normal(x.shape)
    (out * mt.tensor(cotangent, dtype=mt.float64)).sum().backward()

    def objective(x, weight):
        return np.sum(R.rms_norm(x, weight, eps) * cotangent)
    np.testing.assert_allclose(xt.grad.numpy(), autograd.grad(objective, 0)(x, weight), **TOL)
    np.testing.assert_allclose(norm.weight.grad.numpy(), autograd.grad(objective, 1)(x, weight),
                               **TOL)


def test_position_bias_is_computed_once_per_stack_and_shared():
    mt.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config.tiny(num_layers=3)).eval()
    calls = []
    for stack in (model.encoder, model.decoder):
        stack.position_bias.register_forward_hook(lambda module, args, out: calls.append(out))
    model(np.array([[5, 6, 7, 1]]), decoder_input_ids=np.array([[0, 4, 5]]))
    assert [c.shape for c in calls] == [(1, 4, 4, 4), (1, 4, 3, 3)]
    tables = [name for name, _ in model.named_parameters() if "relative_attention_bias" in name]
    assert tables == ["encoder.position_bias.relative_attention_bias.weight",
                      "decoder.position_bias.relative_attention_bias.weight"]
    # the decoder's bias is causal-bucketed: the future shares bucket 0, with the cache too
    bias = model.decoder.position_bias
    whole = bias(3, 3).numpy()
    np.testing.assert_array_equal(bias(1, 3, start=2).numpy(), whole[:, :, 2:])


# ---- HuggingFace checkpoints --------------------------------------------------------------------
@pytest.mark.parametrize("directory", ["T5ForConditionalGeneration",
                                       "T5ForConditionalGeneration-v1_1"])
def test_conditional_generation_matches_huggingface(directory):
    pytest.importorskip("safetensors")
    model = mt.from_pretrained(FIXTURES / directory)
    assert type(model) is T5ForConditionalGeneration
    check_seq2seq_fixture(model, dict(np.load(FIXTURES / directory / "expected.npz")))


def test_v1_1_fixture_is_gated_and_unscaled():
    model = mt.from_pretrained(FIXTURES / "T5ForConditionalGeneration-v1_1")
    assert model.config.feed_forward_proj == "gated-gelu"
    assert model.config.scale_decoder_outputs is False


def test_t5_model_and_encoder_match_huggingface():
    pytest.importorskip("safetensors")
    model = mt.from_pretrained(FIXTURES / "T5Model")
    assert type(model) is T5Model and len(model.decoder.layers) == 3
    e = dict(np.load(FIXTURES / "T5Model" / "expected.npz"))
    out = model(e["input_ids"], e["attention_mask"], decoder_input_ids=e["decoder_input_ids"],
                decoder_attention_mask=e["decoder_attention_mask"])
    close_to_fixture(out.last_hidden_state.numpy(), e["last_hidden_state"], "decoder")
    close_to_fixture(out.encoder_last_hidden_state.numpy(), e["encoder_last_hidden_state"],
                     "encoder")
    encoder = mt.from_pretrained(FIXTURES / "T5EncoderModel")
    assert type(encoder) is T5EncoderModel
    e = dict(np.load(FIXTURES / "T5EncoderModel" / "expected.npz"))
    close_to_fixture(encoder(e["input_ids"], e["attention_mask"]).last_hidden_state.numpy(),
          e["last_hidden_state"], "encoder")


def test_untied_head_round_trips_through_save_pretrained(tmp_path):
    pytest.importorskip("safetensors")
    mt.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config.v1_1(**vars(T5Config.tiny()) | {
        "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False,
        "scale_decoder_outputs": None})).eval()
    assert model.lm_head is not None and not model.config.scale_decoder_outputs
    mt.save_pretrained(model, tmp_path)
    again = mt.from_pretrained(tmp_path)
    ids = np.array([[5, 6, 1]])
    np.testing.assert_array_equal(again(ids, decoder_input_ids=ids).logits.numpy(),
                                  model(ids, decoder_input_ids=ids).logits.numpy())


def test_a_missing_tensor_is_named(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.numpy import load_file, save_file
    source = FIXTURES / "T5Model"
    state = load_file(source / "model.safetensors")
    del state["decoder.block.2.layer.2.DenseReluDense.wo.weight"]
    save_file(state, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text((source / "config.json").read_text())
    with pytest.raises(ValueError, match=r"missing keys: decoder\.block\.2\.layer\.2\."
                                         r"DenseReluDense\.wo\.weight"):
        mt.from_pretrained(tmp_path)


# ---- span corruption ----------------------------------------------------------------------------
SENTINELS = np.arange(999, 899, -1)


def reassemble(inputs, targets):
    """The original text from span corruption's inputs and targets."""
    spans, current = {}, None
    for token in targets:
        if token in SENTINELS:
            current = spans.setdefault(int(token), [])
        else:
            current.append(int(token))
    out = []
    for token in inputs:
        out += spans[int(token)] if token in SENTINELS else [int(token)]
    return out


@given(length=st.integers(2, 80), density=st.sampled_from([0.15, 0.3, 0.5]),
       mean=st.sampled_from([1.0, 3.0, 5.0]), seed=st.integers(0, 2 ** 16))
def test_span_corruption_round_trip_and_counts(length, density, mean, seed):
    ids = np.random.default_rng(seed).integers(0, 500, length)
    inputs, targets = span_corruption(ids, SENTINELS, density, mean,
                                      rng=np.random.default_rng(seed))
    assert reassemble(inputs, targets) == ids.tolist()
    noise = min(max(round(length * density), 1), length - 1)
    spans = int(np.isin(inputs, SENTINELS).sum())
    assert len(targets) == noise + spans + 1 and len(inputs) == length - noise + spans
    assert targets[-1] == SENTINELS[spans]
    assert spans == min(max(round(noise / mean), 1), noise, length - noise)


def test_noise_mask_alternates_kept_and_noise_spans_with_the_mean_length():
    rng = np.random.default_rng(0)
    lengths = []
    for _ in range(300):
        mask = random_spans_noise_mask(100, 0.15, 3.0, rng)
        assert mask.sum() == 15 and not mask[0]
        edges = np.flatnonzero(np.diff(mask.astype(int)))
        runs = np.diff(np.concatenate([edges, [99]]))[::2]       # noise runs
        lengths += runs.tolist()
    assert len(lengths) == 300 * 5
    assert abs(np.mean(lengths) - 3.0) < 1e-9                     # 15 tokens in 5 spans


@pytest.mark.parametrize("call, message", [
    (lambda: random_spans_noise_mask(1), "length must be an int >= 2"),
    (lambda: random_spans_noise_mask(10, noise_density=1.0), "noise_density must be in"),
    (lambda: random_spans_noise_mask(10, mean_noise_span_length=0.5), "must be >= 1"),
    (lambda: span_corruption(np.arange(40), [99], 0.5, 1.0), "need .* sentinels, got 1"),
])
def test_span_corruption_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- errors -------------------------------------------------------------------------------------
def test_model_errors():
    with pytest.raises(ValueError, match="relative_attention_num_buckets must be an int >= 4"):
        T5Config.tiny(relative_attention_num_buckets=3)
    with pytest.raises(ValueError, match="feed_forward_proj must be one of"):
        T5Config.tiny(feed_forward_proj="swish")
    with pytest.raises(ValueError, match="num_buckets must be an int >= 2"):
        RelativePositionBias(2, 1, 8, bidirectional=False)
    with pytest.raises(ValueError, match="max_distance=2 must exceed"):
        relative_position_bucket(np.arange(4), bidirectional=False, num_buckets=8,
                                 max_distance=2)
    model = T5ForConditionalGeneration(T5Config.tiny())
    with pytest.raises(ValueError, match="give decoder_input_ids .*decoder_start_token_id=0"):
        model(np.array([[5, 6, 1]]))
    with pytest.raises(ValueError, match=r"input_ids holds 40, outside the vocabulary"):
        model(np.array([[5, 40, 1]]), decoder_input_ids=np.array([[0]]))
    with pytest.raises(ValueError, match="RMSNorm: the input's last axis has 3 features"):
        RMSNorm(4)(mt.zeros(2, 3))
    with pytest.raises(ValueError, match="architecture must be 'prefix-lm' or 'decoder-only', "
                                         "got 'encoder-decoder'"):
        T5DecoderOnly(T5Config.tiny(), "encoder-decoder")
    joined = T5DecoderOnly(T5Config.tiny())
    with pytest.raises(ValueError, match="T5DecoderOnly: give labels or decoder_input_ids"):
        joined(np.array([[5, 6, 1]]))
    with pytest.raises(ValueError, match=r"decoder_input_ids holds 41, outside the vocabulary"):
        joined(np.array([[5, 6, 1]]), decoder_input_ids=np.array([[0, 41]]))


# ---- the shared model checks --------------------------------------------------------------------
VOCAB = 40
SOURCE = np.array([[5, 9, 7, 12, 1]])


def build(dropout=0.0, **overrides):
    return T5ForConditionalGeneration(T5Config.tiny(dropout_rate=dropout, **overrides))


def copy_batch():
    rng = np.random.default_rng(0)
    src = rng.integers(2, VOCAB, (2, 3))
    return np.concatenate([src, np.ones((2, 1), int)], axis=1)


def learned_to_copy(model, batch):
    np.testing.assert_array_equal(model.generate(batch, max_new_tokens=4)[:, 1:], batch)


class TestT5Checks(ModelChecks):
    spec = seq2seq_spec(
        "T5ForConditionalGeneration", build, source=SOURCE, decoder_start=0, vocab=(2, VOCAB),
        padding_left=True,
        learning=Learning(copy_batch, lambda model, batch: model(batch, labels=batch).loss,
                          steps=40, factor=20, lr=2e-2, after=learned_to_copy))


class TestT5v11Checks(ModelChecks):
    spec = seq2seq_spec(
        "T5ForConditionalGeneration(v1.1)",
        lambda dropout=0.0: build(dropout, feed_forward_proj="gated-gelu",
                                  tie_word_embeddings=False),
        source=SOURCE, decoder_start=0, vocab=(2, VOCAB), padding_left=True,
        skips={"learns": "T5ForConditionalGeneration learns above; v1.1 changes only the "
                         "feed-forward network and the head"})


def build_joined(architecture):
    def build_model(dropout=0.0):
        return T5DecoderOnly(T5Config.tiny(dropout_rate=dropout), architecture)
    return build_model


NO_HF = {"hf_round_trip": "HuggingFace has no T5 prefix LM or decoder-only T5"}


class TestT5PrefixLMChecks(ModelChecks):
    spec = seq2seq_spec(
        "T5DecoderOnly(prefix-lm)", build_joined("prefix-lm"), source=SOURCE, decoder_start=0,
        vocab=(2, VOCAB), padding_left=True, hf=False, skips=NO_HF,
        learning=Learning(copy_batch, lambda model, batch: model(batch, labels=batch).loss,
                          steps=40, factor=20, lr=2e-2, after=learned_to_copy))


class TestT5DecoderOnlyChecks(ModelChecks):
    spec = seq2seq_spec(
        "T5DecoderOnly(decoder-only)", build_joined("decoder-only"), source=SOURCE,
        decoder_start=0, vocab=(2, VOCAB), padding_left=True, hf=False, skips={
            **NO_HF, "learns": "the prefix LM learns above; this model differs only in its mask"})


def test_prefix_lm_and_decoder_only_differ_only_in_the_mask():
    """The same weights serve both; in the prefix LM an input position sees the input after it,
    in the decoder-only model it does not; a target position sees all the input in both."""
    mt.manual_seed(0)
    prefix_lm = build_joined("prefix-lm")().to(mt.float64)
    decoder_only = build_joined("decoder-only")().to(mt.float64)
    decoder_only.load_state_dict(prefix_lm.state_dict())
    joined = np.array([[5, 6, 7, 0, 9, 10]])  # input 5 6 7, start token 0, target 9 10
    changed = joined.copy()
    changed[0, 2] = 8  # the last input token
    key_mask = np.ones(joined.shape, dtype=bool)
    for model, first_position_moves in ((prefix_lm, True), (decoder_only, False)):
        before, after = (model.joined_hidden(ids, key_mask, 4).numpy() for ids in (joined, changed))
        assert (not np.allclose(before[0, 0], after[0, 0])) == first_position_moves
        assert not np.allclose(before[0, 4], after[0, 4])
    same = (np.allclose(*(model.joined_hidden(joined, key_mask, 4).numpy()
                          for model in (prefix_lm, decoder_only))))
    assert not same


def test_padded_sources_generate_what_they_generate_alone():
    mt.manual_seed(0)
    ids = np.array([[5, 6, 7, 8, 1], [0, 0, 9, 10, 1], [11, 12, 1, 0, 0]])
    mask = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])
    for model in (build(), build_joined("prefix-lm")(), build_joined("decoder-only")()):
        model = model.to(mt.float64).eval()
        for options in ({}, {"num_beams": 3}):
            batch = model.generate(ids, mask, max_new_tokens=6, **options)
            for row in range(3):
                alone = model.generate(ids[row:row + 1, mask[row] == 1], max_new_tokens=6,
                                       **options)
                np.testing.assert_array_equal(batch[row, :alone.shape[1]], alone[0])


@settings(max_examples=5)
@given(seed=st.integers(0, 100))
def test_beam_1_equals_greedy(seed):
    mt.manual_seed(seed)
    model = build().eval()
    ids = np.random.default_rng(seed).integers(2, VOCAB, (2, 5))
    np.testing.assert_array_equal(model.generate(ids, num_beams=1, max_new_tokens=5),
                                  model.generate(ids, max_new_tokens=5))


# ---- the command line: train t5, resume exactly, generate ---------------------------------------
def test_train_t5_resumes_exactly_and_generate_fills_spans(tmp_path, capsys):
    from minitorch_nlp import cli, inference, training
    text_file = tmp_path / "text.txt"
    text_file.write_text("the quick brown fox jumps over the lazy dog. " * 30, encoding="utf-8")
    common = ["--text", str(text_file), "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
              "--block-size", "20", "--batch-size", "2", "--steps", "4", "--warmup-steps", "1",
              "--eval-every", "2", "--backend", "numpy", "--no-progress"]
    assert cli.main(["train", "t5", *common, "--out", str(tmp_path / "once")]) == 0
    assert cli.main(["train", "t5", *common, "--out", str(tmp_path / "twice"),
                     "--stop-at", "2"]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "twice"), "--no-progress"]) == 0
    once = training.read_checkpoint(tmp_path / "once")["model"]
    twice = training.read_checkpoint(tmp_path / "twice")["model"]
    assert once.keys() == twice.keys()
    for name in once:
        np.testing.assert_array_equal(once[name], twice[name], err_msg=name)
    model, tokenizer, _ = inference.load_for_inference(tmp_path / "once")
    assert type(model) is T5ForConditionalGeneration
    assert model.config.vocab_size == len(tokenizer) + 20 // 10 + 2
    capsys.readouterr()
    assert cli.main(["generate", str(tmp_path / "once"), "--prompt",
                     "the quick <extra_id_0> fox"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("the quick ") and printed.rstrip().endswith(" fox")
    assert "<extra_id" not in printed
    assert cli.main(["generate", str(tmp_path / "once"), "--prompt", "the <extra_id_9>"]) == 2
    assert "<extra_id_9> is not one of this model's 4 sentinels" in capsys.readouterr().err
