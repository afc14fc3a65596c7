"""Pretraining data for BERT (Devlin et al., 2019) and RoBERTa (Liu et al., 2019): the masked-LM
corruption, next-sentence pairs, static and dynamic masking, FULL-SENTENCES packing.

* ``MaskedLMCollator``: BERT's masked LM (Devlin section 3.1 Task #1 and appendix A.1): 15% of
  the tokens of each sequence are chosen (never special tokens or padding); a chosen token is
  replaced by [MASK] 80% of the time, by a random token 10% of the time and left unchanged 10% of
  the time, and the model must predict the original at every chosen position (labels: the
  original id there, -100 elsewhere).
* ``next_sentence_pairs``: BERT's NSP data (section 3.1 Task #2): sentence A and, half of the
  time, the sentence that really follows it (IsNext, label 0), otherwise a random sentence from
  another document (NotNext, label 1).
* ``MaskedLMDataset``: static masking, BERT's (the data masked once during preprocessing, with
  ``dupe_factor`` differently masked copies; BERT used 10 over 40 epochs) or dynamic masking,
  RoBERTa's (Liu section 4.1: a new mask every time a sequence is fed to the model).
* ``pack_full_sentences``: RoBERTa's FULL-SENTENCES inputs (Liu section 4.2): full sentences
  sampled contiguously from one or more documents up to the maximum length, with an extra
  separator token between documents.

Everything here is NumPy and plain Python; randomness comes from a ``numpy.random.Generator``
(give a seed, a Generator or ``minitorch_nlp.Generator``), so that a run can be repeated.
"""
from __future__ import annotations

import numpy as np

from .. import checks

__all__ = ["IGNORE_INDEX", "MaskedLMCollator", "MaskedLMDataset", "next_sentence_pairs",
           "pack_full_sentences"]

IGNORE_INDEX = -100


def _generator(seed):
    """A ``numpy.random.Generator`` from a seed (int or None), a Generator, or a
    ``minitorch_nlp.Generator``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if hasattr(seed, "numpy_rng"):
        return seed.numpy_rng
    return np.random.default_rng(seed)


def _array(values, name, shape=None):
    array = np.asarray(values.numpy() if hasattr(values, "numpy") else values)
    if array.ndim != 2 or (shape is not None and array.shape != shape):
        raise ValueError(f"MaskedLMCollator: {name} must have shape "
                         f"{'(batch, time)' if shape is None else shape}, got {array.shape}")
    return array


class MaskedLMCollator:
    """BERT's masked-LM corruption of a batch (Devlin et al., section 3.1 and appendix A.1).

    In each sequence, round(``mlm_probability`` * n) of its n maskable tokens (at least one when
    n > 0) are chosen uniformly at random, as in BERT's ``create_pretraining_data.py``; maskable
    means not in ``special_ids`` (which must include [PAD], [CLS], [SEP], [MASK]), not padding
    (``attention_mask`` 0) and not marked in ``special_tokens_mask``. Each chosen token becomes
    ``mask_token_id`` with probability ``mask_prob`` (0.8), a token drawn uniformly from the
    non-special vocabulary with probability ``random_prob`` (0.1), and stays itself otherwise.
    All chosen positions are predicted: ``labels`` holds their original ids and -100 elsewhere.

    ``collator(batch)`` takes a (batch, time) id array, or a dict with ``input_ids`` (and
    optionally ``attention_mask``, ``token_type_ids``, ``special_tokens_mask``) such as a
    tokenizer's output, and returns a new dict: the corrupted ``input_ids``, ``labels`` and the
    other fields passed through (``special_tokens_mask`` dropped: the model does not take it).
    Every call draws a new mask from the collator's generator (``seed``), or from ``rng`` when
    the call gives one (a run that checkpoints its own random stream).
    """

    def __init__(self, *, vocab_size, mask_token_id, special_ids, mlm_probability=0.15,
                 mask_prob=0.8, random_prob=0.1, seed=None):
        if not 0.0 < mlm_probability <= 1.0:
            raise ValueError(f"MaskedLMCollator: mlm_probability must be in (0, 1], got "
                             f"{mlm_probability!r}")
        if not (mask_prob >= 0 and random_prob >= 0 and mask_prob + random_prob <= 1):
            raise ValueError(f"MaskedLMCollator: mask_prob={mask_prob!r} and random_prob="
                             f"{random_prob!r} must be >= 0 and sum to at most 1")
        self.special_ids = np.unique(np.asarray(list(special_ids), dtype=np.int64))
        if mask_token_id not in self.special_ids:
            raise ValueError(f"MaskedLMCollator: mask_token_id={mask_token_id} must be one of "
                             f"special_ids {self.special_ids.tolist()} (a [MASK] is never "
                             "chosen again)")
        if self.special_ids.min() < 0 or self.special_ids.max() >= vocab_size:
            raise ValueError(f"MaskedLMCollator: special_ids {self.special_ids.tolist()} must "
                             f"lie in [0, vocab_size={vocab_size})")
        self.vocab_size, self.mask_token_id = vocab_size, mask_token_id
        self.mlm_probability, self.mask_prob, self.random_prob = (mlm_probability, mask_prob,
                                                                  random_prob)
        self.replacements = np.setdiff1d(np.arange(vocab_size), self.special_ids)
        if self.replacements.size == 0:
            raise ValueError("MaskedLMCollator: every id of the vocabulary is special; there is "
                             "no token to draw as a random replacement")
        self.rng = _generator(seed)

    @classmethod
    def from_tokenizer(cls, tokenizer, **options):
        """The collator of ``tokenizer`` (``minitorch_nlp.data.tokenizers``): its vocabulary size,
        its mask token, and all its special tokens kept out of the masking."""
        return cls(vocab_size=len(tokenizer), mask_token_id=tokenizer.mask_token_id,
                   special_ids=tokenizer.all_special_ids, **options)

    def maskable(self, input_ids, attention_mask=None, special_tokens_mask=None):
        """Bool (batch, time): the positions that may be chosen."""
        maskable = ~np.isin(input_ids, self.special_ids)
        if attention_mask is not None:
            maskable &= _array(attention_mask, "attention_mask", input_ids.shape).astype(bool)
        if special_tokens_mask is not None:
            maskable &= ~_array(special_tokens_mask, "special_tokens_mask",
                                input_ids.shape).astype(bool)
        return maskable

    def budget(self, maskable):
        """How many positions each row has chosen: round(``mlm_probability`` * n) of its n
        maskable ones, at least one when n > 0; int64 (batch,)."""
        count = maskable.sum(axis=1)
        return np.where(count > 0, np.maximum(1, np.rint(count * self.mlm_probability)),
                        0).astype(np.int64)

    def choose(self, maskable, rng):
        """Bool (batch, time): the positions to predict, ``budget`` of each row's maskable ones
        drawn uniformly (the k smallest of uniform keys). ALBERT's collator chooses n-grams."""
        keys = np.where(maskable, rng.random(maskable.shape), 2.0)
        rank = np.argsort(np.argsort(keys, axis=1, kind="stable"), axis=1, kind="stable")
        return rank < self.budget(maskable)[:, None]

    def __call__(self, batch, rng=None):
        fields = dict(batch) if isinstance(batch, dict) else {"input_ids": batch}
        ids = _array(fields["input_ids"], "input_ids")
        if ids.dtype.kind not in "iu":
            raise ValueError(f"MaskedLMCollator: input_ids must be integer ids, got {ids.dtype}")
        ids = ids.astype(np.int64)
        maskable = self.maskable(ids, fields.get("attention_mask"),
                                 fields.pop("special_tokens_mask", None))
        rng = self.rng if rng is None else _generator(rng)
        chosen = self.choose(maskable, rng)
        # 80% [MASK], 10% a random token, 10% unchanged
        u = rng.random(ids.shape)
        to_mask = chosen & (u < self.mask_prob)
        to_random = chosen & (u >= self.mask_prob) & (u < self.mask_prob + self.random_prob)
        corrupted = ids.copy()
        corrupted[to_mask] = self.mask_token_id
        corrupted[to_random] = rng.choice(self.replacements, size=int(to_random.sum()))
        fields.update(input_ids=corrupted, labels=np.where(chosen, ids, IGNORE_INDEX))
        return fields


class MaskedLMDataset:
    """Sequences to pretrain on with masked LM, masked statically (BERT) or dynamically
    (RoBERTa, Liu et al. section 4.1).

    ``batch``: a dict of (N, time) arrays (``input_ids``, ``attention_mask`` ...; a tokenizer's
    output) or an (N, time) id array. Static (``dynamic=False``): the sequences are masked
    ``dupe_factor`` times here, once and for all, and epoch e sees copy e % ``dupe_factor``
    (BERT duplicated its data 10 times, so each sequence was seen with the same mask 4 times in
    40 epochs). Dynamic: each call of ``epoch`` draws new masks, so a sequence is never fed twice
    with the same mask (but by chance).
    """

    def __init__(self, batch, collator, *, dynamic=True, dupe_factor=1):
        checks.positive_int(dupe_factor, "dupe_factor", "MaskedLMDataset")
        self.fields = dict(batch) if isinstance(batch, dict) else {"input_ids": batch}
        self.collator, self.dynamic = collator, dynamic
        self.copies = None if dynamic else [collator(self.fields) for _ in range(dupe_factor)]

    def __len__(self):
        return len(self.fields["input_ids"])

    def epoch(self, index):
        """The masked sequences for epoch ``index``: a dict with ``input_ids``, ``labels`` and
        the other fields, (N, time) arrays."""
        return self.collator(self.fields) if self.dynamic else self.copies[index % len(self.copies)]

    def batches(self, index, batch_size, seed=None):
        """Epoch ``index`` in shuffled mini-batches of ``batch_size`` sequences (the last one
        may be smaller), each a dict of arrays."""
        data = self.epoch(index)
        order = _generator(seed).permutation(len(self))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            yield {name: np.asarray(values)[rows] for name, values in data.items()}


def next_sentence_pairs(documents, seed=None):
    """BERT's next-sentence-prediction pairs (Devlin section 3.1, Task #2).

    ``documents``: a list of documents, each a list of segments (sentences: strings or id
    lists) in order. Every segment that has a successor in its document becomes an A; its B is
    that successor half of the time (label 0, IsNext) and otherwise a random segment of a
    *different* document (label 1, NotNext; HuggingFace's convention). Returns the lists
    ``first``, ``second`` and the int64 array ``labels``, in document order.
    """
    rng = _generator(seed)
    documents = [list(document) for document in documents]
    others = [d for d, document in enumerate(documents) if document]
    if len(others) < 2:
        raise ValueError("next_sentence_pairs: needs at least two non-empty documents (a "
                         "NotNext segment comes from another document)")
    first, second, labels = [], [], []
    for d, document in enumerate(documents):
        for i in range(len(document) - 1):
            first.append(document[i])
            if rng.random() < 0.5:
                second.append(document[i + 1])
                labels.append(0)
            else:
                other = others[rng.integers(len(others) - 1)]
                other = others[-1] if other == d else other   # uniform over the other documents
                second.append(documents[other][rng.integers(len(documents[other]))])
                labels.append(1)
    return first, second, np.asarray(labels, dtype=np.int64)


def pack_full_sentences(documents, max_length, *, sep_id, bos_id=None, eos_id=None):
    """RoBERTa's FULL-SENTENCES inputs (Liu et al., section 4.2): "each input is packed with full
    sentences sampled contiguously from one or more documents, such that the total length is at
    most 512 tokens. Inputs may cross document boundaries. When we reach the end of one document,
    we begin sampling sentences from the next document and add an extra separator token between
    documents."

    ``documents``: a list of documents, each a list of sentences (lists of token ids). Each input
    is ``bos_id`` (if given), whole sentences in their order, ``sep_id`` where a document ends
    and the next begins inside the input, then ``eos_id`` (if given); at most ``max_length``
    tokens. A sentence is never split across inputs unless it alone is longer than an input can
    hold; then it fills inputs of its own. Returns a list of id lists (pad them with
    ``data.pad_sequences``).
    """
    budget = max_length - (bos_id is not None) - (eos_id is not None)
    if budget < 1:
        raise ValueError(f"pack_full_sentences: max_length={max_length} leaves no room for a "
                         "token between the bos and eos tokens")
    def wrap(tokens):
        return ([] if bos_id is None else [bos_id]) + tokens + ([] if eos_id is None else [eos_id])

    inputs, current = [], []
    for d, document in enumerate(documents):
        separate = d > 0
        for sentence in document:
            sentence = [int(token) for token in sentence]
            for start in range(0, len(sentence), budget):
                piece = sentence[start:start + budget]
                separator = [sep_id] if separate and current else []
                if len(current) + len(separator) + len(piece) > budget:
                    inputs.append(wrap(current))
                    current, separator = [], []
                current += separator + piece
                separate = False
    if current:
        inputs.append(wrap(current))
    return inputs
