"""The Unigram-LM tokenizer (Kudo 2018; T5's SentencePiece model): the same ids as the
``sentencepiece`` package on two models it trained (``tests/fixtures/sentencepiece/``, made by
``make_sentencepiece_fixtures.py``), Viterbi against brute force, sampled cuts against their exact
probabilities, training, files (a T5 directory with ``spiece.model``; ``generate`` on it), and the
errors."""
from __future__ import annotations

import functools
import json
import math
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp.data import stdlib_corpus
from minitorch_nlp.data.tokenizers import (UnigramTokenizer, load_tokenizer,
                                           tokenizer_from_state)
from minitorch_nlp.data.tokenizers.sentencepiece_model import read_message
from minitorch_nlp.data.tokenizers.unigram import UNK_PENALTY, Lattice

pytestmark = pytest.mark.sec5

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sentencepiece"
MODELS = ("spiece", "bytes")
ODD_STRINGS = ["日本語 Ｈｅｌｌｏ  ﬁne  world", "  x  日本語 Hello  world ", "naïve café ① e\u0301",
               "\t\ttabs\u00a0nbsp\u3000ideographic", "", " ", "emoji 😀👍🏽", "a" * 40,
               "control\x00\x01 chars", "ＡＢＣ１２３ full width", "return self._value\n"]
# Characters the fixtures' rules rewrite, spaces, letters the models know and ones they do not.
TEXT = st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz ETAI.,()_\t\u00a0\u3000"
                                             "ＡｚＺ０９ﬁﬂ①\u0301éßж日😀")), max_size=30)


@functools.cache
def ours(name):
    return UnigramTokenizer.from_sentencepiece(FIXTURES / f"{name}.model")


def corpus_lines(count=300):
    return [line for line in stdlib_corpus(60_000).split("\n") if line.strip()][:count]


@pytest.fixture(scope="module", params=MODELS)
def pair(request):
    """(ours, sentencepiece's) for one fixture model."""
    spm = pytest.importorskip("sentencepiece")
    path = FIXTURES / f"{request.param}.model"
    return (UnigramTokenizer.from_sentencepiece(path),
            spm.SentencePieceProcessor(model_file=str(path)))


# ---- the same ids as sentencepiece ---------------------------------------------------------------
def test_ids_equal_sentencepiece_on_the_corpus(pair):
    ours, theirs = pair
    lines = corpus_lines() + ODD_STRINGS
    differ = [line for line in lines if ours.encode(line) != theirs.encode(line)]
    assert not differ, f"{len(differ)} of {len(lines)} strings differ, e.g. {differ[:3]}"


@given(text=TEXT)
def test_ids_and_normalization_equal_sentencepiece(pair, text):
    ours, theirs = pair
    assert ours.normalize(text) == theirs.normalize(text)
    assert ours.encode(text) == theirs.encode(text)


def test_the_model_files_pieces_scores_and_specials_are_read(pair):
    ours, theirs = pair
    assert len(ours) == theirs.get_piece_size()
    for index in range(len(ours)):
        assert ours.id_to_token[index] == theirs.id_to_piece(index)
        if ours.scores[index] is not None:
            assert ours.scores[index] == theirs.get_score(index)
    assert ours.unk_token_id == theirs.unk_id() and ours.eos_token_id == theirs.eos_id()
    assert (-1 if ours.pad_token_id is None else ours.pad_token_id) == theirs.pad_id()


# ---- properties ----------------------------------------------------------------------------------
@given(text=TEXT)
def test_the_chunked_normalizer_equals_the_walk_over_the_whole_text(text):
    """Normalization maps space-separated chunks (cached, by str.translate where no key spans two
    characters); it must give what the charsmap walk over the whole text gives."""
    for name in MODELS:
        normalizer = ours(name).normalizer
        for variant in (text, text + " e\u0301 ﬁ", "\u00a0".join(text.split(" "))):
            assert normalizer(variant) == normalizer._walk_whole(variant)


def _decoded_normal_form(tok, text):
    return tok.normalize(text).replace("\u2581", " ")[1:]


@given(text=TEXT)
def test_decode_encode_gives_the_normalized_text(text):
    tok = ours("spiece")
    ids = tok.encode(text)
    if tok.unk_token_id not in ids:
        assert tok.decode(ids) == _decoded_normal_form(tok, text)


@given(text=st.text(max_size=30))
def test_byte_fallback_round_trips_any_text(text):
    """bytes.model keeps every space and has byte fallback: decoding gives the text back."""
    tok = ours("bytes")
    assert tok.unk_token_id not in tok.encode(text)
    assert tok.decode(tok.encode(text)) == text


SMALL_SCORES = {"a": -2.0, "b": -2.5, "ab": -3.0, "ba": -3.5, "aba": -5.2, "bb": -4.0,
                "abab": -6.1, "c": -9.0}


def _cuts(text, scores, unk_score):
    """Every cut of ``text`` (brute force): lists of (piece or None, score)."""
    if not text:
        return [[]]
    first = [(text[:end], scores[text[:end]]) for end in range(1, len(text) + 1)
             if text[:end] in scores]
    if text[0] not in scores:
        first.append((None, unk_score))
    return [[(piece, score), *rest] for piece, score in first
            for rest in _cuts(text[len(piece or text[0]):], scores, unk_score)]


@given(text=st.text(alphabet="abcd", min_size=1, max_size=9))
def test_viterbi_is_the_best_cut_by_brute_force(text):
    unk_score = min(SMALL_SCORES.values()) - UNK_PENALTY
    nodes = Lattice(text, SMALL_SCORES, 4, unk_score).viterbi()
    pieces = [piece for _, piece in nodes]
    score = sum(unk_score if p is None else SMALL_SCORES[p] for p in pieces)
    best = max(sum(s for _, s in cut) for cut in _cuts(text, SMALL_SCORES, unk_score))
    assert math.isclose(score, best, abs_tol=1e-9)
    assert "".join(p or text[start] for start, p in nodes) == text


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_sampled_cuts_follow_their_probabilities(alpha):
    """Subword regularization: cut c of "ababa" drawn with probability exp(alpha score(c)) / Z."""
    text, draws = "ababa", 2000
    unk_score = min(SMALL_SCORES.values()) - UNK_PENALTY
    cuts = _cuts(text, SMALL_SCORES, unk_score)
    weights = np.array([math.exp(alpha * sum(s for _, s in cut)) for cut in cuts])
    expected = dict(zip((tuple(p for p, _ in cut) for cut in cuts), weights / weights.sum()))
    lattice, rng = Lattice(text, SMALL_SCORES, 4, unk_score), np.random.default_rng(0)
    seen = Counter(tuple(p for _, p in lattice.sample(alpha, rng)) for _ in range(draws))
    assert set(seen) <= set(expected)
    for cut, probability in expected.items():
        sigma = math.sqrt(draws * probability * (1 - probability))
        assert abs(seen[cut] - draws * probability) <= 5 * sigma + 1, cut


def test_sample_keeps_special_tokens_and_covers_the_text():
    tok = UnigramTokenizer.from_sentencepiece(FIXTURES / "spiece.model")
    text = "Return the value of the attribute</s> and more"
    tokens = tok.sample(text, alpha=0.1, rng=0)
    assert "</s>" in tokens
    assert "".join(tokens).replace("</s>", "") == "".join(
        tok.normalize(piece) for piece in text.split("</s>"))
    assert tok.sample(text, alpha=50.0, rng=0) == tok.tokenize(text)  # sharp: the best cut


# ---- training ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    text = stdlib_corpus(6000)
    return text, UnigramTokenizer.train(text, 220)


def test_training_gives_the_vocabulary_asked_for(trained):
    text, tok = trained
    assert len(tok) == 220
    assert tok.id_to_token[:3] == ["<pad>", "</s>", "<unk>"]
    scores = tok.scores[3:]
    assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)
    assert {c for c in tok.normalize(text.replace("\n", " "))} <= set(tok.vocab)


def test_trained_tokenizer_compresses_and_round_trips(trained):
    text, tok = trained
    lines = [line for line in text.split("\n") if line.strip()]
    ids = [tok.encode(line) for line in lines]
    assert all(tok.decode(row) == _decoded_normal_form(tok, line) for row, line in zip(ids, lines))
    assert sum(map(len, ids)) < 0.6 * sum(len(tok.normalize(line)) for line in lines)


def test_trained_with_byte_fallback_encodes_unseen_characters():
    tok = UnigramTokenizer.train("aaa bbb ab ba abab\n" * 20, 270, byte_fallback=True)
    assert tok.tokenize("ab ж") == ["▁ab", "▁", "<0xD0>", "<0xB6>"]
    assert tok.decode(tok.encode("ab ж")) == "ab ж"


# ---- files ---------------------------------------------------------------------------------------
def test_save_and_state_round_trip(tmp_path):
    tok = UnigramTokenizer.from_sentencepiece(FIXTURES / "spiece.model")
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    rebuilt = tokenizer_from_state(tok.state_dict())
    for text in ODD_STRINGS:
        assert again.encode(text) == tok.encode(text) == rebuilt.encode(text)


def t5_directory(path, extra_ids=None):
    path.mkdir(exist_ok=True)
    shutil.copy(FIXTURES / "spiece.model", path / "spiece.model")
    config = {"tokenizer_class": "T5Tokenizer"}
    if extra_ids is not None:
        config["extra_ids"] = extra_ids
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def test_a_t5_directory_loads_with_its_sentinels_and_template(tmp_path):
    tok = load_tokenizer(t5_directory(tmp_path, extra_ids=3))
    assert isinstance(tok, UnigramTokenizer) and len(tok) == 603
    assert tok.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_2>"]) == [602, 600]
    assert tok.encode("Hello")[-1] == tok.eos_token_id == 1
    assert tok.tokenize("a <extra_id_1> b") == ["▁a", "<extra_id_1>", "▁b"]
    assert tok.pad_token_id == 0 and tok.unk_token_id == 2


def test_generate_runs_on_an_imported_t5_directory(tmp_path, capsys):
    pytest.importorskip("safetensors")
    from minitorch_nlp import cli, inference
    from minitorch_nlp.models.t5 import T5Config, T5ForConditionalGeneration
    directory = t5_directory(tmp_path / "t5")
    mt.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config.tiny(vocab_size=704, decoder_start_token_id=0,
                                                     pad_token_id=0, eos_token_id=1))
    mt.save_pretrained(model.eval(), directory)
    _, tokenizer, family = inference.load_for_inference(directory)
    assert isinstance(tokenizer, UnigramTokenizer) and family.name == "t5"
    capsys.readouterr()
    assert cli.main(["generate", str(directory), "--prompt", "Return <extra_id_0> value.",
                     "--max-new-tokens", "5"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Return ") and printed.rstrip().endswith(" value.")
    assert "<extra_id" not in printed


# ---- errors --------------------------------------------------------------------------------------
def test_a_sentencepiece_bpe_model_is_refused(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(corpus_lines(200)), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "bpe"),
                                   vocab_size=120, model_type="bpe", minloglevel=2)
    with pytest.raises(ValueError, match="is a bpe model; minitorch_nlp reads SentencePiece "
                                         "Unigram models only"):
        UnigramTokenizer.from_sentencepiece(tmp_path / "bpe.model")


def test_bad_files_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="wire type 7"):
        UnigramTokenizer.from_sentencepiece(b"\x0f\x00")
    with pytest.raises(ValueError, match="the model has no pieces"):
        UnigramTokenizer.from_sentencepiece(b"")
    with pytest.raises(ValueError, match="ends inside a varint"):
        read_message(b"\x08\x80", "x.model")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="2 scores for a vocabulary of 3 tokens"):
        UnigramTokenizer(["<unk>", "a", "b"], [None, -1.0])
    with pytest.raises(ValueError, match="byte_fallback needs the 256 byte tokens"):
        UnigramTokenizer(["<unk>", "a"], [None, -1.0], byte_fallback=True)
    with pytest.raises(ValueError, match="no token has a score"):
        UnigramTokenizer(["<unk>"], [None])
    tok = UnigramTokenizer(["▁", "a"], [-1.0, -1.0], special_tokens={})
    with pytest.raises(ValueError, match="'b' is covered by no piece and there is no unk token"):
        tok.encode("ab")
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0, got -1"):
        tok.sample("a", alpha=-1)
    with pytest.raises(ValueError, match="a vocabulary of 2 pieces cannot hold the 5 characters"):
        UnigramTokenizer.train("abcd", 5)
    with pytest.raises(ValueError, match="character_coverage must lie in"):
        UnigramTokenizer.train("abcd", 50, character_coverage=0)


def test_a_saved_file_of_another_tokenizer_is_refused(tmp_path):
    from minitorch_nlp.data.tokenizers import CharTokenizer
    (tmp_path / "unigram_tokenizer.json").write_text(
        json.dumps(CharTokenizer.train("abc").state_dict()))
    with pytest.raises(ValueError, match="unigram_tokenizer.json in .* does not hold a unigram "
                                         "tokenizer"):
        load_tokenizer(tmp_path)
