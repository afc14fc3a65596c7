"""BART and mBART (survey sections V-B, V-C): the five noising functions' invariants,
HuggingFace checkpoints (``tests/fixtures/hf/make_bart_fixtures.py``), the shared model checks,
and the errors."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp.data.bart_noising import (Compose, DocumentRotation, SentencePermutation,
                                             TextInfilling, TokenDeletion, TokenMasking)
from minitorch_nlp.models.bart import (BartConfig, BartForConditionalGeneration, BartModel,
                                       MBartConfig, MBartForConditionalGeneration)
from tests.model_checks import (Learning, ModelChecks, check_seq2seq_fixture, close_to_fixture,
                                seq2seq_spec)

pytestmark = pytest.mark.sec5

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
MASK, BOS, EOS, DOT = 3, 0, 2, 4

documents = st.lists(st.integers(5, 30), min_size=0, max_size=60).map(
    lambda tokens: np.array(tokens, dtype=np.int64))


def is_subsequence(small, big):
    it = iter(big.tolist())
    return all(token in it for token in small.tolist())


# ---- the noising functions ---------------------------------------------------------------------
@given(ids=documents, p=st.sampled_from([0.0, 0.3, 1.0]), seed=st.integers(0, 999))
def test_token_masking_keeps_length_and_unmasked_tokens(ids, p, seed):
    out = TokenMasking(MASK, p)(ids, np.random.default_rng(seed))
    assert len(out) == len(ids)
    assert np.all((out == ids) | (out == MASK))
    if p == 0.0:
        np.testing.assert_array_equal(out, ids)
    if p == 1.0:
        assert (out == MASK).all()


@given(ids=documents, seed=st.integers(0, 999))
def test_token_deletion_leaves_a_subsequence_and_spares_protected(ids, seed):
    ids = np.concatenate([[BOS], ids, [EOS]])
    out = TokenDeletion(0.5, protected=(BOS, EOS))(ids, np.random.default_rng(seed))
    assert is_subsequence(out, ids) and out[0] == BOS and out[-1] == EOS


@given(ids=documents, ratio=st.sampled_from([0.0, 0.3, 0.6]), seed=st.integers(0, 999))
def test_text_infilling_replaces_each_span_with_one_mask(ids, ratio, seed):
    ids = np.concatenate([[BOS], ids, [EOS]])
    infill = TextInfilling(MASK, mask_ratio=ratio, protected=(BOS, EOS))
    out = infill(ids, np.random.default_rng(seed))
    kept = out[out != MASK]
    assert out[0] == BOS and out[-1] == EOS and is_subsequence(kept, ids)
    free = len(ids) - 2
    assert len(ids) - len(kept) == round(ratio * free)          # the tokens masked
    assert 1 <= (out == MASK).sum() or free == 0                  # one mask per span, >= 1 span


def test_text_infilling_span_lengths_are_poisson():
    infill, rng = TextInfilling(MASK, mask_ratio=0.3, poisson_lambda=3.0), np.random.default_rng(0)
    lengths = []
    for _ in range(400):
        lengths += infill.span_lengths(100, rng)[:-1]            # the last one is cut to fit
    lengths = np.array(lengths)
    n = len(lengths)
    assert abs(lengths.mean() - 3.0) < 4 * np.sqrt(3.0 / n)      # mean lambda, 4 sigma
    assert abs(lengths.var() - 3.0) < 0.5                        # variance lambda too
    zero = (lengths == 0).mean()                                 # P(0) = e^-3 = 0.0498
    assert abs(zero - np.exp(-3)) < 4 * np.sqrt(np.exp(-3) * (1 - np.exp(-3)) / n)


def test_zero_length_spans_insert_a_mask():
    rng = np.random.default_rng(1)
    infill = TextInfilling(MASK, mask_ratio=0.0)
    out = infill(np.arange(5, 15), rng)                           # nothing to mask: one empty span
    assert (out == MASK).sum() == 1 and len(out) == 11
    np.testing.assert_array_equal(out[out != MASK], np.arange(5, 15))


@given(ids=documents, seed=st.integers(0, 999))
def test_sentence_permutation_permutes_whole_sentences(ids, seed):
    ids = np.where(np.arange(len(ids)) % 7 == 6, DOT, ids)
    out = SentencePermutation((DOT,))(ids, np.random.default_rng(seed))

    def sentences(a):
        ends = np.flatnonzero(a == DOT) + 1
        return Counter(tuple(s) for s in np.split(a, ends) if len(s))
    assert len(out) == len(ids) and Counter(out.tolist()) == Counter(ids.tolist())
    # the trailing unfinished sentence may move inside, which joins it with the next one
    if len(ids) == 0 or ids[-1] == DOT:
        assert sentences(out) == sentences(ids)


@given(ids=documents, seed=st.integers(0, 999))
def test_document_rotation_is_a_rotation(ids, seed):
    out = DocumentRotation()(ids, np.random.default_rng(seed))
    assert any(np.array_equal(out, np.roll(ids, -k)) for k in range(max(1, len(ids))))


def test_rotation_start_is_uniform():
    ids, rng = np.arange(10), np.random.default_rng(0)
    starts = Counter(int(DocumentRotation()(ids, rng)[0]) for _ in range(5000))
    assert len(starts) == 10 and all(abs(c - 500) < 4 * np.sqrt(450) for c in starts.values())


def test_compose_is_the_papers_best_setting():
    ids = np.array([5, 6, DOT, 7, 8, 9, DOT, 10, DOT])
    noise = Compose(SentencePermutation((DOT,)), TextInfilling(MASK, mask_ratio=0.3))
    out = noise(ids, np.random.default_rng(0))
    kept = out[out != MASK]
    assert (out == MASK).sum() >= 1 and len(kept) == len(ids) - 3        # round(0.3 * 9) masked
    assert not Counter(kept.tolist()) - Counter(ids.tolist())


@pytest.mark.parametrize("make, message", [
    (lambda: TokenMasking(MASK, 1.5), "TokenMasking: probability must be in"),
    (lambda: TokenDeletion(1.0), "TokenDeletion: probability must be in"),
    (lambda: TextInfilling(MASK, poisson_lambda=0), "poisson_lambda must be > 0"),
    (lambda: SentencePermutation(()), "give the ids that end a sentence"),
    (lambda: Compose(), "give one or more transforms"),
    (lambda: TokenMasking(MASK)(np.zeros((2, 2), int), np.random.default_rng()),
     r"ids must be integer ids of shape \(time\)"),
])
def test_noising_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ---- HuggingFace checkpoints -------------------------------------------------------------------
@pytest.mark.parametrize("directory, model_class", [
    ("BartForConditionalGeneration", BartForConditionalGeneration),
    ("MBartForConditionalGeneration", MBartForConditionalGeneration)])
def test_conditional_generation_matches_huggingface(directory, model_class):
    pytest.importorskip("safetensors")
    model = mt.from_pretrained(FIXTURES / directory)
    assert type(model) is model_class
    e = dict(np.load(FIXTURES / directory / "expected.npz"))
    check_seq2seq_fixture(model, e, decoder_start_token_id=int(e["decoder_input_ids"][0, 0]))


def test_bart_model_matches_huggingface():
    pytest.importorskip("safetensors")
    model = mt.from_pretrained(FIXTURES / "BartModel")
    assert type(model) is BartModel
    e = dict(np.load(FIXTURES / "BartModel" / "expected.npz"))
    out = model(e["input_ids"], e["attention_mask"], decoder_input_ids=e["decoder_input_ids"],
                decoder_attention_mask=e["decoder_attention_mask"])
    close_to_fixture(out.last_hidden_state.numpy(), e["last_hidden_state"], "decoder")
    close_to_fixture(out.encoder_last_hidden_state.numpy(), e["encoder_last_hidden_state"],
                     "encoder")


def test_bart_details():
    mt.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig.tiny()).eval()
    # positions read rows 2 .. : rows 0 and 1 of the table are never used
    table = model.model.encoder.embed_positions.table
    assert table.shape == (32 + 2, 16)
    ids = np.array([[5, 6, 7, 2]])
    before = model(ids, decoder_input_ids=ids).logits.numpy()
    table.data[:2] = 100.0
    np.testing.assert_array_equal(model(ids, decoder_input_ids=ids).logits.numpy(), before)
    # the output layer is the shared embedding, plus final_logits_bias
    model.final_logits_bias.data[0, 7] = 5.0
    np.testing.assert_allclose(model(ids, decoder_input_ids=ids).logits.numpy()[..., 7],
                               before[..., 7] + 5.0, rtol=1e-6)
    assert dict(model.named_parameters()).keys().isdisjoint({"lm_head.weight"})
    mbart = MBartForConditionalGeneration(MBartConfig.tiny())
    assert mbart.model.encoder.stack.norm is not None and model.model.encoder.stack.norm is None


def test_errors():
    with pytest.raises(ValueError, match="encoder_attention_heads=3 does not divide d_model=16"):
        BartConfig.tiny(encoder_attention_heads=3)
    with pytest.raises(ValueError, match="activation_function must be one of"):
        BartConfig.tiny(activation_function="swish")
    with pytest.warns(UserWarning, match="forced_bos_token_id=40 is outside the vocabulary"):
        BartConfig.tiny(forced_bos_token_id=40)
    model = BartForConditionalGeneration(BartConfig.tiny(max_position_embeddings=4))
    with pytest.raises(ValueError, match="5 tokens is longer than max_position_embeddings=4"):
        model(np.array([[5, 6, 7, 8, 2]]), decoder_input_ids=np.array([[2]]))


# ---- the shared model checks ---------------------------------------------------------------------
VOCAB = 40
SOURCE = np.array([[5, 9, 7, 12, 2]])


def spec(name, model_class, config_class, **fields):
    def build(dropout=0.0):
        return model_class(config_class.tiny(dropout=dropout, attention_dropout=dropout,
                                             activation_dropout=dropout,
                                             forced_eos_token_id=None))

    def batch():
        rng = np.random.default_rng(0)
        return np.concatenate([rng.integers(3, VOCAB, (2, 3)), np.full((2, 1), EOS)], axis=1)

    def learned_to_reconstruct(model, batch):
        np.testing.assert_array_equal(model.generate(batch, max_new_tokens=4)[:, 1:], batch)

    return seq2seq_spec(
        name, build, source=SOURCE, decoder_start=2, vocab=(3, VOCAB),
        learning=Learning(batch, lambda model, b: model(b, labels=b).loss, steps=40, factor=10,
                          lr=1e-2, after=learned_to_reconstruct),
        skips={"padding_left": "positions count from the first column, as in HuggingFace"},
        **fields)


class TestBartChecks(ModelChecks):
    spec = spec("BartForConditionalGeneration", BartForConditionalGeneration, BartConfig)


class TestMBartChecks(ModelChecks):
    spec = spec("MBartForConditionalGeneration", MBartForConditionalGeneration, MBartConfig)


# ---- the command line: train bart, resume exactly, generate --------------------------------------
def test_train_bart_resumes_exactly_and_generate_reconstructs(tmp_path, capsys):
    from minitorch_nlp import cli, inference, training
    text_file = tmp_path / "text.txt"
    text_file.write_text("the quick brown fox jumps. over the lazy dog. " * 30, encoding="utf-8")
    common = ["--text", str(text_file), "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
              "--block-size", "12", "--batch-size", "2", "--steps", "4", "--warmup-steps", "1",
              "--eval-every", "2", "--vocab-size", "280",
              "--backend", "numpy", "--no-progress"]
    assert cli.main(["train", "bart", *common, "--out", str(tmp_path / "once")]) == 0
    assert cli.main(["train", "bart", *common, "--out", str(tmp_path / "twice"),
                     "--stop-at", "2"]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "twice"), "--no-progress"]) == 0
    once = training.read_checkpoint(tmp_path / "once")["model"]
    twice = training.read_checkpoint(tmp_path / "twice")["model"]
    for name in once:
        np.testing.assert_array_equal(once[name], twice[name], err_msg=name)
    model, tokenizer, _ = inference.load_for_inference(tmp_path / "once")
    assert type(model) is BartForConditionalGeneration
    capsys.readouterr()
    assert cli.main(["generate", str(tmp_path / "once"), "--prompt", "the <mask> fox"]) == 0
    assert "<mask>" not in capsys.readouterr().out
    assert cli.main(["train", "bart", "--tokenizer", "char"]) == 2
    assert "needs a <mask>" in capsys.readouterr().err


def test_denoising_batches_pad_the_noised_inputs():
    from minitorch_nlp.data import tokenizers
    from minitorch_nlp.models.families.bart import DENOISING
    tokenizer = tokenizers.ByteLevelBPETokenizer.train("the cat sat. the dog ran. " * 30,
                                                       vocab_size=280, style="roberta")
    windows = np.array([tokenizer.encode("the cat sat. the dog ran.",
                                         add_special_tokens=False)] * 3)
    inputs, labels, mask = DENOISING.batcher(tokenizer, 0.3)(windows, np.random.default_rng(0))
    assert (labels[:, 0] == tokenizer.bos_token_id).all()
    assert (labels[:, -1] == tokenizer.eos_token_id).all()
    assert (inputs[~mask] == tokenizer.pad_token_id).all() and mask[:, 0].all()
    assert (inputs == tokenizer.mask_token_id).sum(axis=1).min() >= 1
