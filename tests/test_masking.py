"""BERT's and RoBERTa's pretraining data (``minitorch_nlp.data.masking``): the masked-LM
corruption (15% chosen, 80/10/10, within binomial bounds; special tokens and padding never
chosen; labels), NSP pairs with negatives from other documents, static vs dynamic masking, and
FULL-SENTENCES packing."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.data.masking import (MaskedLMCollator, MaskedLMDataset, next_sentence_pairs,
                                        pack_full_sentences)

pytestmark = pytest.mark.sec4

PAD, UNK, CLS, SEP, MASK = range(5)
SPECIAL = (PAD, UNK, CLS, SEP, MASK)
VOCAB = 1000


def collator(seed=0, **overrides):
    return MaskedLMCollator(**{**dict(vocab_size=VOCAB, mask_token_id=MASK, special_ids=SPECIAL,
                                      seed=seed), **overrides})


def padded_batch(seed=0, rows=400, time=40):
    """[CLS] tokens [SEP] [PAD]..., lengths 3 .. time: ids, attention mask."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, time + 1, rows)
    ids = rng.integers(len(SPECIAL), VOCAB, (rows, time))
    ids[:, 0] = CLS
    ids[np.arange(rows), lengths - 1] = SEP
    mask = np.arange(time)[None, :] < lengths[:, None]
    return np.where(mask, ids, PAD), mask


def within_4_sigma(count, n, p):
    return abs(count - n * p) <= 4 * np.sqrt(n * p * (1 - p)), (count, n, p)


def test_each_sequence_has_15_percent_of_its_maskable_tokens_chosen():
    ids, mask = padded_batch()
    out = collator()({"input_ids": ids, "attention_mask": mask})
    chosen = out["labels"] != -100
    maskable = mask & ~np.isin(ids, SPECIAL)
    expected = np.maximum(1, np.rint(0.15 * maskable.sum(1)))       # BERT's create_pretraining_data
    np.testing.assert_array_equal(chosen.sum(1), expected)
    assert not (chosen & ~maskable).any()                             # specials, padding: never
    np.testing.assert_array_equal(out["labels"][chosen], ids[chosen])  # the original ids
    np.testing.assert_array_equal(out["input_ids"][~chosen], ids[~chosen])
    np.testing.assert_array_equal(out["attention_mask"], mask)


def test_chosen_tokens_are_80_percent_mask_10_random_10_unchanged():
    ids, mask = padded_batch(1, rows=4000)
    out = collator(1)({"input_ids": ids, "attention_mask": mask})
    chosen = out["labels"] != -100
    n = int(chosen.sum())
    assert n > 10_000
    new, old = out["input_ids"][chosen], ids[chosen]
    random_tokens = new[(new != MASK) & (new != old)]
    # a random replacement equals the original with probability 1 / |non-special vocabulary|
    same = 1 / (VOCAB - len(SPECIAL))
    assert within_4_sigma((new == MASK).sum(), n, 0.8)
    assert within_4_sigma(len(random_tokens), n, 0.1 * (1 - same))
    assert within_4_sigma((new == old).sum(), n, 0.1 + 0.1 * same)
    assert not np.isin(random_tokens, SPECIAL).any() and random_tokens.max() < VOCAB
    # the random tokens are uniform over the non-special vocabulary: each half gets its share
    assert within_4_sigma((random_tokens < (VOCAB + len(SPECIAL)) // 2).sum(), len(random_tokens),
                          0.5)


def test_selection_is_uniform_over_positions():
    ids = np.full((4000, 21), 7)
    ids[:, 0] = CLS
    chosen = collator(2)(ids)["labels"] != -100          # 20 maskable tokens: 3 chosen per row
    assert (chosen.sum(1) == 3).all() and not chosen[:, 0].any()
    for position in range(1, 21):
        assert within_4_sigma(chosen[:, position].sum(), 4000, 3 / 20)


@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_special_tokens_and_padding_are_never_chosen(rows, time, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 12, (rows, time))                 # plenty of special ids (< 5)
    mask = rng.random((rows, time)) < 0.8
    marked = rng.random((rows, time)) < 0.2
    out = collator(seed, vocab_size=12)({"input_ids": ids, "attention_mask": mask,
                                         "special_tokens_mask": marked})
    chosen = out["labels"] != -100
    assert not (chosen & (np.isin(ids, SPECIAL) | ~mask | marked)).any()
    assert "special_tokens_mask" not in out
    maskable = (~np.isin(ids, SPECIAL) & mask & ~marked).sum(1)
    assert ((chosen.sum(1) > 0) == (maskable > 0)).all()
    replaced = out["input_ids"][chosen]
    assert not np.isin(replaced, [PAD, UNK, CLS, SEP]).any()


def test_the_seed_makes_it_reproducible_and_every_call_draws_anew():
    ids, mask = padded_batch(3, rows=20)
    first, second = collator(5), collator(5)
    a, b = first(ids), second(ids)
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    np.testing.assert_array_equal(a["labels"], b["labels"])
    assert not np.array_equal(first(ids)["labels"], a["labels"])
    generator = mt.Generator(5)
    np.testing.assert_array_equal(collator(generator)(ids)["labels"], a["labels"])
    own = collator(9)          # a call's rng replaces the collator's stream for that call
    np.testing.assert_array_equal(own(ids, rng=np.random.default_rng(5))["labels"], a["labels"])


def test_collator_errors_are_clear():
    with pytest.raises(ValueError, match="mask_token_id=7 must be one of special_ids"):
        collator(mask_token_id=7)
    with pytest.raises(ValueError, match="mlm_probability must be in"):
        collator(mlm_probability=0.0)
    with pytest.raises(ValueError, match="sum to at most 1"):
        collator(mask_prob=0.9, random_prob=0.2)
    with pytest.raises(ValueError, match="every id of the vocabulary is special"):
        collator(vocab_size=5)
    with pytest.raises(ValueError, match="input_ids must be integer ids"):
        collator()(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(2, 3\)"):
        collator()({"input_ids": np.ones((2, 3), int), "attention_mask": np.ones((3, 2))})


# ---- static vs dynamic masking (RoBERTa section 4.1) ---------------------------------------------
def test_dynamic_masks_differ_between_epochs_and_static_masks_do_not():
    ids, mask = padded_batch(4, rows=50)
    batch = {"input_ids": ids, "attention_mask": mask}
    dynamic = MaskedLMDataset(batch, collator(6), dynamic=True)
    static = MaskedLMDataset(batch, collator(6), dynamic=False)
    dynamic_labels = [dynamic.epoch(e)["labels"] for e in range(3)]
    static_labels = [static.epoch(e)["labels"] for e in range(3)]
    for e in (1, 2):
        assert not np.array_equal(dynamic_labels[e], dynamic_labels[0])
        np.testing.assert_array_equal(static_labels[e], static_labels[0])
    duplicated = MaskedLMDataset(batch, collator(6), dynamic=False, dupe_factor=2)
    copies = [duplicated.epoch(e)["labels"] for e in range(4)]
    assert not np.array_equal(copies[0], copies[1])
    np.testing.assert_array_equal(copies[0], copies[2])
    np.testing.assert_array_equal(copies[1], copies[3])
    with pytest.raises(ValueError, match="dupe_factor must be a positive int"):
        MaskedLMDataset(batch, collator(), dynamic=False, dupe_factor=0)


def test_batches_cover_every_sequence_once():
    ids, mask = padded_batch(5, rows=23)
    dataset = MaskedLMDataset({"input_ids": ids, "attention_mask": mask}, collator(7),
                              dynamic=False)
    batches = list(dataset.batches(0, 5, seed=1))
    assert [len(b["input_ids"]) for b in batches] == [5, 5, 5, 5, 3]
    seen = np.concatenate([b["attention_mask"] for b in batches])
    assert sorted(map(bytes, seen)) == sorted(map(bytes, mask))
    labels = np.concatenate([b["labels"] for b in batches])
    assert sorted(map(bytes, labels)) == sorted(map(bytes, dataset.epoch(0)["labels"]))


# ---- next sentence prediction (BERT section 3.1, Task #2) ----------------------------------------
def test_nsp_pairs_take_negatives_from_another_document():
    documents = [[(d, i) for i in range(np.random.default_rng(d).integers(1, 30))]
                 for d in range(60)]
    first, second, labels = next_sentence_pairs(documents, seed=0)
    assert len(first) == sum(len(doc) - 1 for doc in documents)
    for (doc_a, i), (doc_b, j), label in zip(first, second, labels):
        if label == 0:
            assert (doc_b, j) == (doc_a, i + 1)
        else:
            assert doc_b != doc_a
    assert within_4_sigma((labels == 0).sum(), len(labels), 0.5)
    # the random segments come from all over the corpus
    sources = {doc for (doc, _), label in zip(second, labels) if label == 1}
    assert len(sources) > 50
    with pytest.raises(ValueError, match="at least two non-empty documents"):
        next_sentence_pairs([["a", "b"], []])


# ---- FULL-SENTENCES packing (RoBERTa section 4.2) ------------------------------------------------
documents_strategy = st.lists(st.lists(st.lists(st.integers(10, 99), max_size=12), max_size=5),
                              min_size=1, max_size=6)


@given(documents_strategy, st.integers(3, 20))
def test_packing_fits_the_length_and_keeps_every_token_in_order(documents, max_length):
    sep, bos, eos = 1, 0, 2
    packed = pack_full_sentences(documents, max_length, sep_id=sep, bos_id=bos, eos_id=eos)
    assert all(len(ids) <= max_length and ids[0] == bos and ids[-1] == eos for ids in packed)
    inner = [ids[1:-1] for ids in packed]
    assert all(ids and ids[0] != sep and ids[-1] != sep for ids in inner)
    stream = [token for ids in inner for token in ids if token != sep]
    assert stream == [token for doc in documents for sentence in doc for token in sentence]
    # separators exactly where a document ends and the next begins inside one input
    separators = sum(ids.count(sep) for ids in inner)
    assert separators <= max(0, sum(1 for doc in documents if any(doc)) - 1)


def test_packing_keeps_sentences_whole_and_separates_documents():
    documents = [[[10, 11, 12], [13, 14]], [[20, 21, 22, 23]], [[30] * 9], [[40]]]
    packed = pack_full_sentences(documents, 8, sep_id=1, bos_id=0, eos_id=2)
    assert packed == [[0, 10, 11, 12, 13, 14, 2],             # [20 .. 23] does not fit after a sep
                      [0, 20, 21, 22, 23, 2],
                      [0] + [30] * 6 + [2],                     # a sentence longer than an input
                      [0, 30, 30, 30, 1, 40, 2]]                # crosses a document boundary
    assert pack_full_sentences([[[5, 6]], [[7]]], 4, sep_id=1) == [[5, 6, 1, 7]]
    with pytest.raises(ValueError, match="max_length=2 leaves no room"):
        pack_full_sentences(documents, 2, sep_id=1, bos_id=0, eos_id=2)
