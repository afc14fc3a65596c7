"""TinyBERT's data augmentation (Jiao et al., 2020, Algorithm 1) as a data transform: properties
that hold for any example, p_t, K and seed (hypothesis), a reference written as plain loops for
the deterministic case (p_t = 1, K = 1), and the errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.compress.tinybert_augmentation import TinyBertAugmenter
from minitorch_nlp.data.tokenizers import WordPieceTokenizer
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM

pytestmark = pytest.mark.sec6

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "a", "extraordinary")
TOKENIZER = WordPieceTokenizer.train(" ".join(WORDS * 2) + " the the the a a", vocab_size=60)


def masked_lm(seed=0):
    mt.manual_seed(seed)
    return BertForMaskedLM(BertConfig(vocab_size=len(TOKENIZER), hidden_size=16,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=16, max_position_embeddings=64))


MODEL = masked_lm()
sentences = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)


def is_whole_word(token_id):
    return (token_id not in TOKENIZER.all_special_ids
            and not TOKENIZER.id_to_token[token_id].startswith("##"))


def test_the_tokenizer_makes_single_and_multi_piece_words():
    assert len(TOKENIZER.encode("the", add_special_tokens=False)) == 1
    assert len(TOKENIZER.encode("extraordinary", add_special_tokens=False)) > 1


@given(sentences, st.floats(0, 1), st.integers(1, 4), st.integers(0, 2**16))
def test_each_copy_replaces_whole_words_by_whole_words(text, p_t, k, seed):
    augmenter = TinyBertAugmenter(MODEL, TOKENIZER, p_t=p_t, n_samples=3, k=k)
    ids = TOKENIZER.encode(text)
    units, is_word = augmenter.words(ids)
    samples = augmenter.augment(ids, seed)
    assert len(samples) == 3
    for sample in samples:
        new_units, new_is_word = augmenter.words(sample)
        assert new_is_word == is_word             # as many words, specials where they were
        for old, new, word in zip(units, new_units, is_word):
            if not word:
                assert new == old
            elif new != old:
                assert len(new) == 1 and is_whole_word(new[0])
    again = augmenter.augment(ids, seed)
    assert all(np.array_equal(a, b) for a, b in zip(samples, again))


@given(sentences, st.integers(0, 2**16))
def test_p_t_zero_keeps_every_example(text, seed):
    ids = TOKENIZER.encode(text)
    for sample in TinyBertAugmenter(MODEL, TOKENIZER, p_t=0.0, n_samples=4).augment(ids, seed):
        np.testing.assert_array_equal(sample, ids)


def reference_greedy_augmentation(model, text):
    """Algorithm 1 with p_t = 1 and K = 1, written as loops: every word, left to right, becomes
    the MLM's likeliest whole word at its [MASK] (one piece) or the whole word of greatest
    cosine similarity to the mean of its pieces' embeddings (several pieces)."""
    table = model.bert.embeddings.word_embeddings.weight.numpy().astype(np.float64)
    words = [TOKENIZER.encode(word, add_special_tokens=False) for word in text.split()]
    for i, pieces in enumerate(words):
        if len(pieces) == 1:
            ids = [TOKENIZER.cls_token_id]
            for j, word in enumerate(words):
                ids += [TOKENIZER.mask_token_id] if j == i else word
            ids.append(TOKENIZER.sep_token_id)
            position = 1 + sum(len(word) for word in words[:i])
            with model.inference():
                scores = model(input_ids=np.array([ids])).logits.numpy()[0, position]
        else:
            mean = sum(table[p] for p in pieces) / len(pieces)
            scores = [float(np.dot(row, mean) / max(np.linalg.norm(row), 1e-300))
                      for row in table]
        best, best_score = None, -np.inf
        for token_id, score in enumerate(scores):
            if is_whole_word(token_id) and score > best_score:
                best, best_score = token_id, score
        words[i] = [best]
    return [TOKENIZER.cls_token_id, *[w[0] for w in words], TOKENIZER.sep_token_id]


@given(sentences, st.integers(0, 3))
def test_greedy_augmentation_matches_the_reference(text, model_seed):
    model = masked_lm(model_seed)
    augmenter = TinyBertAugmenter(model, TOKENIZER, p_t=1.0, n_samples=1, k=1)
    (sample,) = augmenter.augment(TOKENIZER.encode(text), 0)
    assert sample.tolist() == reference_greedy_augmentation(model, text)


@given(st.integers(1, 6), st.integers(0, 2**16))
def test_a_replaced_one_piece_word_is_among_the_k_likeliest(k, seed):
    augmenter = TinyBertAugmenter(MODEL, TOKENIZER, p_t=1.0, n_samples=2, k=k)
    ids = TOKENIZER.encode("the quick fox")
    masked = [ids[0], TOKENIZER.mask_token_id, *ids[2:]]
    with MODEL.inference():
        scores = MODEL(input_ids=np.array([masked])).logits.numpy()[0, 1]
    allowed = [i for i in range(len(TOKENIZER)) if is_whole_word(i)]
    likeliest = sorted(allowed, key=lambda i: -scores[i])[:k]
    for sample in augmenter.augment(ids, seed):
        assert sample[1] in likeliest


def test_augment_text_gives_n_samples_texts_of_as_many_words():
    augmenter = TinyBertAugmenter(MODEL, TOKENIZER, p_t=0.4, n_samples=5, k=3)
    texts = augmenter.augment_text("the quick brown fox", 0)
    assert len(texts) == 5 and all(len(text.split()) == 4 for text in texts)
    assert any(text != "the quick brown fox" for text in texts)


@pytest.mark.parametrize("options, message", [
    (dict(p_t=1.5), r"p_t must be a number in \[0, 1\], got 1.5"),
    (dict(n_samples=0), "n_samples must be an int >= 1, got 0"),
    (dict(k=2.5), "k must be an int >= 1, got 2.5"),
    (dict(k=500), "k=500 is more than the vocabulary's"),
])
def test_settings_that_cannot_work_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        TinyBertAugmenter(MODEL, TOKENIZER, **options)


def test_a_model_and_tokenizer_that_do_not_fit_are_named():
    other = WordPieceTokenizer.train("pack my box with five dozen jugs " * 5, vocab_size=50)
    with pytest.raises(ValueError, match=f"the model's vocabulary has {len(TOKENIZER)} tokens "
                                         f"and the tokenizer's {len(other)}"):
        TinyBertAugmenter(MODEL, other)
    with pytest.raises(TypeError, match="Linear is not a BERT-style masked LM"):
        TinyBertAugmenter(mt.nn.Linear(2, 2), TOKENIZER)
