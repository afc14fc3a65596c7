"""Data: vocabularies, synthetic tasks, number words, batching and the built-in corpus."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp.data import (LANGUAGES, MAX_NUMBER, Seq2SeqBatch, Vocab, addition_task,
                                copy_task, load_text, make_batches, number_tokens,
                                number_translation_task, number_words, pad_sequences,
                                reverse_task, sort_task, stdlib_corpus, train_test_split_numbers)
from minitorch_nlp.data import corpus as corpus_module

pytestmark = pytest.mark.sec3

# Written by hand from each language's grammar (see minitorch_nlp/data/numbers.py for the chosen
# conventions), not printed from the code.
EXPECTED_WORDS = {
    "en": {
        0: "zero", 1: "one", 16: "sixteen", 17: "seventeen", 21: "twenty-one", 40: "forty",
        70: "seventy", 71: "seventy-one", 80: "eighty", 81: "eighty-one", 90: "ninety",
        99: "ninety-nine", 100: "one hundred", 101: "one hundred one", 115: "one hundred fifteen",
        200: "two hundred", 1000: "one thousand", 1001: "one thousand one",
        2000: "two thousand", 4071: "four thousand seventy-one", 12345:
        "twelve thousand three hundred forty-five", 21000: "twenty-one thousand",
        100000: "one hundred thousand",
        999999: "nine hundred ninety-nine thousand nine hundred ninety-nine",
    },
    "fr": {
        0: "zéro", 1: "un", 16: "seize", 17: "dix-sept", 21: "vingt et un", 31: "trente et un",
        61: "soixante et un", 70: "soixante-dix", 71: "soixante et onze", 72: "soixante-douze",
        77: "soixante-dix-sept", 80: "quatre-vingts", 81: "quatre-vingt-un",
        90: "quatre-vingt-dix", 91: "quatre-vingt-onze", 99: "quatre-vingt-dix-neuf",
        100: "cent", 101: "cent un", 200: "deux cents", 201: "deux cent un",
        280: "deux cent quatre-vingts", 1000: "mille", 1001: "mille un", 1980:
        "mille neuf cent quatre-vingts", 2000: "deux mille",
        4071: "quatre mille soixante et onze", 21000: "vingt et un mille",
        80000: "quatre-vingt mille", 200000: "deux cent mille",
        999999: "neuf cent quatre-vingt-dix-neuf mille neuf cent quatre-vingt-dix-neuf",
    },
    "de": {
        0: "null", 1: "eins", 11: "elf", 12: "zwölf", 16: "sechzehn", 17: "siebzehn",
        21: "einundzwanzig", 30: "dreißig", 60: "sechzig", 70: "siebzig", 71: "einundsiebzig",
        80: "achtzig", 81: "einundachtzig", 90: "neunzig", 99: "neunundneunzig",
        100: "einhundert", 101: "einhunderteins", 200: "zweihundert", 1000: "eintausend",
        1001: "eintausendeins", 2000: "zweitausend", 4071: "viertausendeinundsiebzig",
        21000: "einundzwanzigtausend", 101000: "einhunderteintausend",
        999999: "neunhundertneunundneunzigtausendneunhundertneunundneunzig",
    },
    "es": {
        0: "cero", 1: "uno", 16: "dieciséis", 17: "diecisiete", 21: "veintiuno", 22: "veintidós",
        70: "setenta", 71: "setenta y uno", 80: "ochenta", 81: "ochenta y uno", 90: "noventa",
        99: "noventa y nueve", 100: "cien", 101: "ciento uno", 200: "doscientos",
        500: "quinientos", 700: "setecientos", 900: "novecientos", 1000: "mil", 1001: "mil uno",
        1100: "mil cien", 2000: "dos mil", 4071: "cuatro mil setenta y uno",
        21000: "veintiún mil", 31000: "treinta y un mil", 100000: "cien mil",
        101000: "ciento un mil",
        999999: "novecientos noventa y nueve mil novecientos noventa y nueve",
    },
}
REQUIRED = {0, 1, 16, 17, 21, 70, 71, 80, 81, 90, 99, 100, 101, 200, 1000, 1001, 2000, 4071,
            999999}


# --- Vocab ---

def test_vocab_special_ids_and_unknown_tokens():
    vocab = Vocab(["a", "b", "a", "<eos>"])
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2, 3)
    assert len(vocab) == 6
    assert vocab.encode(["b", "a", "zzz"]) == [5, 4, 3]
    assert vocab.decode([1, 5, 3, 4, 2, 4, 0]) == ["b", "<unk>", "a"]
    assert vocab.decode([1, 5, 2, 0], strip_special=False) == ["<bos>", "b", "<eos>", "<pad>"]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([6])
    with pytest.raises(TypeError, match="not the string"):
        vocab.encode("ab")


def test_vocab_build_orders_by_frequency_then_alphabet():
    vocab = Vocab.build([["b", "c", "c"], ["a", "d", "c", "b"]], min_count=2)
    assert vocab.itos[4:] == ["c", "b"]


_tokens = st.text(st.characters(codec="utf-8"), min_size=1, max_size=5).filter(
    lambda token: token not in ("<pad>", "<bos>", "<eos>", "<unk>"))


@given(st.lists(st.lists(_tokens, max_size=8), min_size=1, max_size=5))
def test_vocab_encode_decode_round_trip(sequences):
    vocab = Vocab.build(sequences)
    for sequence in sequences:
        assert vocab.decode(vocab.encode(sequence)) == sequence
    restored = Vocab.from_state_dict(json.loads(json.dumps(vocab.state_dict())))
    assert restored == vocab and restored.encode(sequences[0]) == vocab.encode(sequences[0])


# --- synthetic tasks ---

SYMBOL_TASKS = [copy_task, reverse_task, sort_task]


@pytest.mark.parametrize("task", SYMBOL_TASKS)
def test_symbol_tasks_are_deterministic_given_seed(task):
    assert task(50, 2, 9, seed=3) == task(50, 2, 9, seed=3)
    assert task(50, 2, 9, seed=3) != task(50, 2, 9, seed=4)


def test_copy_reverse_sort_targets_are_correct():
    rank = {symbol: index for index, symbol in enumerate("abcdefghij")}
    for task, check in [(copy_task, lambda s, t: t == s), (reverse_task, lambda s, t: t == s[::-1]),
                        (sort_task, lambda s, t: sorted(s) == sorted(t) and all(
                            rank[x] <= rank[y] for x, y in zip(t, t[1:])))]:
        pairs = task(200, 3, 7, seed=1)
        assert len(pairs) == 200
        assert {len(source) for source, _ in pairs} == set(range(3, 8))
        for source, target in pairs:
            assert set(source) <= set("abcdefghij") and check(source, target)


def test_sort_task_follows_the_alphabet_order_given():
    for source, target in sort_task(20, 4, 6, alphabet=["z", "y", "x"], seed=0):
        assert target == sorted(source, reverse=True)


def test_addition_task_sums_are_correct():
    pairs = addition_task(500, 4, seed=2)
    assert pairs == addition_task(500, 4, seed=2)
    lengths = set()
    for source, target in pairs:
        left, right = "".join(source).split("+")
        lengths.update((len(left), len(right)))
        for operand in (left, right):
            assert operand == str(int(operand))  # no leading zeros
        assert int("".join(target)) == int(left) + int(right)
        assert all(len(token) == 1 for token in source + target)
    assert lengths == {1, 2, 3, 4}


def test_task_arguments_are_checked():
    with pytest.raises(ValueError, match="min_len"):
        copy_task(3, 5, 2)
    with pytest.raises(ValueError, match="max_digits"):
        addition_task(3, 0)


# --- number words ---

@pytest.mark.parametrize("lang", LANGUAGES)
def test_number_words_hand_written_examples(lang):
    expected = EXPECTED_WORDS[lang]
    assert len(expected) >= 15 and REQUIRED <= set(expected)
    assert {number: number_words(number, lang) for number in expected} == expected


def test_number_tokens_split_hyphens_and_german_morphemes():
    assert number_tokens(4071, "digits") == ["4", "0", "7", "1"]
    assert number_tokens(4071, "en") == ["four", "thousand", "seventy", "-", "one"]
    assert number_tokens(81, "fr") == ["quatre", "-", "vingt", "-", "un"]
    assert number_tokens(4071, "de") == ["vier", "tausend", "ein", "und", "siebzig"]
    assert number_tokens(101, "de") == ["ein", "hundert", "eins"]
    assert number_tokens(4071, "es") == ["cuatro", "mil", "setenta", "y", "uno"]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_number_words_are_one_to_one_and_tokens_rebuild_them(lang):
    phrases, token_tuples = set(), set()
    for number in range(100_000):
        words, tokens = number_words(number, lang), number_tokens(number, lang)
        rebuilt = "".join(tokens) if lang == "de" else " ".join(tokens).replace(" - ", "-")
        assert rebuilt == words
        phrases.add(words)
        token_tuples.add(tuple(tokens))
    assert len(phrases) == len(token_tuples) == 100_000


def test_number_words_errors_name_languages_and_range():
    with pytest.raises(ValueError, match="'en', 'fr', 'de', 'es'"):
        number_words(5, "it")
    with pytest.raises(ValueError, match="'digits', 'en', 'fr', 'de', 'es'"):
        number_translation_task(5, src="klingon")
    for number in (-1, MAX_NUMBER + 1):
        with pytest.raises(ValueError, match=r"range 0\.\.999999"):
            number_words(number, "en")
    with pytest.raises(TypeError, match="int"):
        number_words(3.0, "en")


def test_train_test_split_numbers_is_disjoint_and_complete():
    train, test = train_test_split_numbers(0, 10_000, 0.1, seed=5)
    assert len(test) == 1000 and len(train) == 9000
    assert not set(train.tolist()) & set(test.tolist())
    assert sorted(train.tolist() + test.tolist()) == list(range(10_000))
    again = train_test_split_numbers(0, 10_000, 0.1, seed=5)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], test)


def test_number_translation_task_keeps_held_out_numbers_out():
    train, test = train_test_split_numbers(0, 2000, 0.2, seed=0)
    pairs = number_translation_task(5000, src="digits", tgt="fr", low=0, high=2000, seed=1,
                                    exclude=test)
    assert pairs == number_translation_task(5000, src="digits", tgt="fr", low=0, high=2000,
                                            seed=1, exclude=test)
    drawn = [int("".join(source)) for source, _ in pairs]
    assert set(drawn) == set(train.tolist())  # every training number, no test number
    counts = np.bincount(drawn)
    assert counts[train].min() >= 3 and counts[train].max() <= 4  # balanced passes
    for number, (_, target) in zip(drawn[:50], pairs[:50]):
        assert target == number_tokens(number, "fr")


def test_number_translation_task_any_direction():
    pairs = number_translation_task(30, src="es", tgt="de", low=990, high=1010, seed=2)
    assert len(pairs) == 30
    by_source = {tuple(number_tokens(n, "es")): number_tokens(n, "de") for n in range(990, 1010)}
    for source, target in pairs:
        assert by_source[tuple(source)] == target
    small = number_translation_task(20, low=0, high=20, seed=0)
    assert sorted(int("".join(source)) for source, _ in small) == list(range(20))


# --- batching ---

def test_pad_sequences_pads_right_and_masks():
    ids, mask = pad_sequences([[5, 6, 7], [8], []], pad_id=0)
    assert ids.dtype == np.int64 and mask.dtype == bool
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert mask.tolist() == [[True] * 3, [True, False, False], [False] * 3]


def test_make_batches_shapes_padding_masks_bos_eos():
    pairs = reverse_task(10, 1, 6, seed=0)
    vocab = Vocab.build(source for source, _ in pairs)
    batches = make_batches(pairs, vocab, vocab, batch_size=4, shuffle=False)
    assert [len(batch) for batch in batches] == [4, 4, 2]
    seen = []
    for batch in batches:
        assert isinstance(batch, Seq2SeqBatch)
        for tensor in (batch.src, batch.tgt_in, batch.tgt_out):
            assert isinstance(tensor, mt.Tensor) and tensor.dtype == np.int64
        src, tgt_in, tgt_out = batch.src.numpy(), batch.tgt_in.numpy(), batch.tgt_out.numpy()
        lengths = batch.src_lengths
        assert lengths.dtype == np.int64 and batch.src_mask.dtype == batch.tgt_mask.dtype == bool
        assert src.shape == batch.src_mask.shape == (len(batch), lengths.max())
        assert tgt_in.shape == tgt_out.shape == batch.tgt_mask.shape == (len(batch),
                                                                         lengths.max() + 1)
        assert np.array_equal(batch.src_mask.sum(axis=1), lengths)
        assert np.all(src[~batch.src_mask] == vocab.pad_id)
        assert np.all(tgt_out[~batch.tgt_mask] == vocab.pad_id)
        assert np.all(tgt_in[~batch.tgt_mask] == vocab.pad_id)
        assert np.all(tgt_in[:, 0] == vocab.bos_id)
        assert np.all(tgt_out[np.arange(len(batch)), lengths] == vocab.eos_id)  # |tgt| = |src|
        assert np.array_equal(tgt_in[:, 1:][batch.tgt_mask[:, 1:]],
                              tgt_out[:, :-1][batch.tgt_mask[:, 1:]])
        for row in range(len(batch)):
            seen.append((vocab.decode(src[row]), vocab.decode(tgt_out[row])))
    assert seen == pairs


def test_make_batches_shuffle_is_deterministic_and_keeps_every_pair():
    pairs = copy_task(23, 1, 4, seed=0)
    vocab = Vocab.build(source for source, _ in pairs)

    def rows(batches):
        return [tuple(vocab.decode(row)) for batch in batches for row in batch.src.numpy()]

    first = rows(make_batches(pairs, vocab, vocab, 5, shuffle=True, seed=9))
    assert first == rows(make_batches(pairs, vocab, vocab, 5, shuffle=True, seed=9))
    assert first != rows(make_batches(pairs, vocab, vocab, 5, shuffle=False))
    assert sorted(first) == sorted(tuple(source) for source, _ in pairs)


# --- corpus ---

def test_stdlib_corpus_is_large_deterministic_and_cached():
    text = stdlib_corpus()
    assert len(text) > 500_000 and stdlib_corpus() is text
    assert "Abstract Base Classes" in text and "\n\n\n" not in text
    corpus_module._build_corpus.cache_clear()
    assert stdlib_corpus() == text
    assert stdlib_corpus(max_chars=1000) == text[:1000]
    digest = hashlib.sha256(text.encode()).hexdigest()
    script = ("import hashlib, concurrent.futures, asyncio; from minitorch_nlp.data import "
              "stdlib_corpus; print(hashlib.sha256(stdlib_corpus().encode()).hexdigest())")
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert other.stdout.strip() == digest


def test_load_text_reads_a_file_or_falls_back_to_the_corpus(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("héllo wörld\n", encoding="utf-8")
    assert load_text(path) == "héllo wörld\n"
    assert load_text(None) == stdlib_corpus()
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    with pytest.raises(ValueError, match="no text"):
        load_text(tmp_path / "empty.txt")
