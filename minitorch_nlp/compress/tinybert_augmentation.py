"""TinyBERT's data augmentation (Jiao et al., 2020, "TinyBERT: Distilling BERT for Natural
Language Understanding", section 3.3 and Algorithm 1), for the task-specific distillation stage:
more task inputs, made by replacing words of each example with words a language model finds
plausible there.

For each of ``n_samples`` (N_a) copies of a tokenized example, every word i in turn:

* a word that is one WordPiece token is replaced by [MASK] and the masked LM predicts it: the
  candidates C are its K likeliest whole-word tokens at that position, given the words already
  decided before it;
* a word of several pieces cannot be predicted as one token: the candidates are the K whole-word
  tokens nearest to it. Jiao et al. take them from GloVe; no download is available here, so the
  nearest are by cosine similarity in the masked LM's own input embeddings, the word being the
  mean of its pieces' embeddings;
* with probability p_t the word becomes a candidate drawn uniformly from C; otherwise it stays.

The paper's settings are p_t = 0.4, N_a = 20, K = 15. Special tokens ([CLS], [SEP], [PAD]) stay
as they are. A "whole-word token" is one that is neither special nor a continuation piece
(``##...``), so every replacement is one complete word.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["TinyBertAugmenter"]


def _check_number(value, name, low, high=None, integer=False):
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or value < low or (
            high is not None and value > high):
        where = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"TinyBertAugmenter: {name} must be {'an int' if integer else 'a number'}"
                         f" {where}, got {value!r}")
    return value


class TinyBertAugmenter:
    """The augmentation of the module docstring with the masked LM ``model`` (a
    ``BertForMaskedLM``-like model: ``model(input_ids=...).logits`` over ``tokenizer``'s
    vocabulary, word embeddings at ``model.bert.embeddings.word_embeddings``) and its WordPiece
    ``tokenizer``. ``p_t``: the probability of replacing a word; ``n_samples``: N_a, the copies
    made of each example; ``k``: K, the candidates per word.

    ``augment(ids, rng)`` takes one example's token ids (with its special tokens) and returns
    ``n_samples`` arrays of ids; ``augment_text(text, rng)`` does the same from and to text. The
    model runs in evaluation mode with no graph."""

    def __init__(self, model, tokenizer, *, p_t=0.4, n_samples=20, k=15):
        self.p_t = float(_check_number(p_t, "p_t", 0, 1))
        self.n_samples = _check_number(n_samples, "n_samples", 1, integer=True)
        self.k = _check_number(k, "k", 1, integer=True)
        if tokenizer.mask_token_id is None:
            raise ValueError("TinyBertAugmenter: the tokenizer has no [MASK] token, which the "
                             "masked LM predicts words at")
        try:
            table = model.bert.embeddings.word_embeddings.weight.numpy()
        except AttributeError:
            raise TypeError(f"TinyBertAugmenter: {type(model).__name__} is not a BERT-style "
                            "masked LM (no bert.embeddings.word_embeddings)") from None
        if table.shape[0] != len(tokenizer):
            raise ValueError(f"TinyBertAugmenter: the model's vocabulary has {table.shape[0]} "
                             f"tokens and the tokenizer's {len(tokenizer)}; give the tokenizer "
                             "the model was trained with")
        self.model, self.tokenizer = model, tokenizer
        self.special_ids = frozenset(tokenizer.all_special_ids)
        self.whole_words = np.array([i for i, token in enumerate(tokenizer.id_to_token)
                                     if i not in self.special_ids and not token.startswith("##")],
                                    dtype=np.int64)
        if len(self.whole_words) < self.k:
            raise ValueError(f"TinyBertAugmenter: k={self.k} is more than the vocabulary's "
                             f"{len(self.whole_words)} whole-word tokens")
        self.embeddings = table.astype(np.float64)
        norms = np.linalg.norm(self.embeddings, axis=1, keepdims=True)
        self.unit_embeddings = self.embeddings / np.where(norms > 0, norms, 1.0)

    # ---- the example as words ----------------------------------------------------------------
    def words(self, ids):
        """``ids`` split into units: a special token alone, or a word (its first piece and the
        ``##`` pieces after it). Returns (units as tuples of ids, whether each is a word)."""
        units, is_word = [], []
        for token_id in (int(i) for i in ids):
            special = token_id in self.special_ids
            continuation = not special and self.tokenizer.id_to_token[token_id].startswith("##")
            if continuation and is_word and is_word[-1]:
                units[-1] += (token_id,)
            else:
                units.append((token_id,))
                is_word.append(not special)
        return units, is_word

    # ---- the candidates C ----------------------------------------------------------------------
    def predicted_candidates(self, units, position):
        """The K likeliest whole-word tokens for unit ``position`` of ``units`` (which holds
        [MASK] there), by the masked LM."""
        ids = [token for unit in units for token in unit]
        index = sum(len(unit) for unit in units[:position])
        with self.model.inference():
            logits = self.model(input_ids=np.array([ids], dtype=np.int64)).logits
        scores = logits.numpy()[0, index, self.whole_words]
        return self.whole_words[np.argsort(-scores, kind="stable")[:self.k]]

    def nearest_candidates(self, pieces):
        """The K whole-word tokens whose input embeddings are nearest (cosine) to the mean of
        ``pieces``' embeddings."""
        word = self.embeddings[list(pieces)].mean(axis=0)
        scores = self.unit_embeddings[self.whole_words] @ word   # cosine, up to |word| > 0
        return self.whole_words[np.argsort(-scores, kind="stable")[:self.k]]

    # ---- Algorithm 1 ---------------------------------------------------------------------------
    def augment(self, ids, rng):
        """``n_samples`` augmented copies (int64 arrays) of the example ``ids``; ``rng`` a
        ``numpy.random.Generator`` (or a seed). The words are decided left to right, each
        prediction seeing the words already decided; p is drawn before the candidates, which
        are computed only for the words that change (the same draws and outcome as drawing it
        after them)."""
        rng = np.random.default_rng(rng)
        original, is_word = self.words(ids)
        samples = []
        for _ in range(self.n_samples):
            units = list(original)
            for i, word in enumerate(original):
                if not is_word[i] or not rng.random() <= self.p_t:
                    continue
                if len(word) == 1:
                    units[i] = (self.tokenizer.mask_token_id,)
                    candidates = self.predicted_candidates(units, i)
                else:
                    candidates = self.nearest_candidates(word)
                units[i] = (int(rng.choice(candidates)),)
            samples.append(np.array([token for unit in units for token in unit], dtype=np.int64))
        return samples

    def augment_text(self, text, rng):
        """``augment`` on the tokenized ``text``, decoded back to ``n_samples`` texts."""
        ids = self.tokenizer.encode(text)
        return [self.tokenizer.decode(sample.tolist(), skip_special_tokens=True)
                for sample in self.augment(ids, rng)]
