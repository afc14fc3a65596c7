"""BM25 (Robertson and Zaragoza, 2009, "The Probabilistic Relevance Framework: BM25 and Beyond"),
the sparse baseline of section VII: DPR mines its hard negatives with it, GoldEn Retriever
searches with it, and every dense retriever is compared with it.

A passage p scores for a query q as

    BM25(q, p) = sum over the query's words t of
                 idf(t) * tf(t, p) (k1 + 1) / (tf(t, p) + k1 (1 - b + b |p| / avgdl)),
    idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

(the idf of Lucene's variant, never negative; N passages, df(t) of them hold t, |p| words in p,
avgdl the mean length). Lucene and ``bm25s`` leave out the constant factor (k1 + 1), which changes
no ranking; ``tests/test_sec7_index.py`` checks the scores against ``bm25s``. The index is inverted
lists in NumPy: one array of passage ids and one of precomputed term weights per word, so a query
costs the length of its words' lists. A word repeated in the query counts once per occurrence, as in
the sum above.
"""
from __future__ import annotations

import re

import numpy as np

from ..io import checkpoint
from .ranking import clamp_k, top_k

__all__ = ["BM25", "tokenize"]

FORMAT = "minitorch_nlp.bm25"
_WORD = re.compile(r"\w+")


def tokenize(text):
    """The lower-cased words (runs of letters, digits and underscores) of ``text``."""
    if not isinstance(text, str):
        raise TypeError(f"tokenize: expected a str, got {type(text).__name__}")
    return _WORD.findall(text.lower())


class BM25:
    """A BM25 index over passages (strings, or lists of words already tokenized)::

        bm25 = BM25().fit(passages)
        scores, ids = bm25.search(["where was Ada born?"], k=5)   # (1, 5) each, best first
    """

    def __init__(self, k1=1.5, b=0.75):
        if not k1 >= 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25: need k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        self.k1, self.b = float(k1), float(b)
        self.size = 0

    def __len__(self):
        return self.size

    def __repr__(self):
        return f"BM25(k1={self.k1}, b={self.b}, passages={self.size}, words={len(self.vocab)})" \
            if self.size else f"BM25(k1={self.k1}, b={self.b}, empty)"

    @staticmethod
    def _words(text, where):
        if isinstance(text, str):
            return tokenize(text)
        if isinstance(text, (list, tuple)) and all(isinstance(w, str) for w in text):
            return list(text)
        raise TypeError(f"{where}: each text must be a str or a list of words, got "
                        f"{type(text).__name__}")

    def fit(self, passages):
        """Index ``passages`` (a non-empty sequence of strings or word lists), replacing any
        previous ones; passage i gets id i."""
        passages = list(passages)
        if not passages:
            raise ValueError("BM25.fit: the corpus is empty; give at least one passage")
        vocab, term_ids, doc_ids, counts, lengths = {}, [], [], [], []
        for doc, text in enumerate(passages):
            words = self._words(text, "BM25.fit")
            lengths.append(len(words))
            ids, tf = np.unique([vocab.setdefault(w, len(vocab)) for w in words],
                                return_counts=True)
            term_ids.append(ids)
            doc_ids.append(np.full(len(ids), doc))
            counts.append(tf)
        term_ids = np.concatenate(term_ids).astype(np.int64)
        order = np.argsort(term_ids, kind="stable")
        self.vocab = vocab
        self.size = len(passages)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self._build(term_ids[order], np.concatenate(doc_ids).astype(np.int64)[order],
                    np.concatenate(counts).astype(np.int64)[order])
        return self

    def _build(self, terms, docs, tf):
        """The inverted lists from (term, passage, count) triples sorted by term."""
        self._terms, self._docs, self._tf = terms, docs, tf
        self._starts = np.searchsorted(terms, np.arange(len(self.vocab) + 1))
        df = np.diff(self._starts)
        idf = np.log1p((self.size - df + 0.5) / (df + 0.5))
        avgdl = max(self.lengths.mean(), 1e-12)
        norm = self.k1 * (1 - self.b + self.b * self.lengths[docs] / avgdl)
        self._weights = idf[terms] * tf * (self.k1 + 1) / (tf + norm)

    def scores(self, query):
        """BM25(query, p) for every passage p: float64 (N,)."""
        if not self.size:
            raise ValueError("BM25.scores: the index is empty; call fit(passages) first")
        total = np.zeros(self.size)
        for word in self._words(query, "BM25.scores"):
            term = self.vocab.get(word)
            if term is not None:
                span = slice(self._starts[term], self._starts[term + 1])
                total[self._docs[span]] += self._weights[span]
        return total

    def search(self, queries, k):
        """The ``k`` best passages for each query (a sequence of strings or word lists):
        ``(scores, ids)`` (queries, k), best first; ``k`` larger than the corpus is clamped with
        a warning, as for the dense indexes."""
        if isinstance(queries, str):
            raise TypeError("BM25.search: queries must be a list of queries; wrap one in [...]")
        k = clamp_k(k, self.size, "BM25.search")
        scores = np.stack([self.scores(query) for query in queries]) if len(queries) else \
            np.zeros((0, self.size))
        return top_k(scores, k)

    def save(self, path):
        """Write the index to ``path`` (a ``.npz`` checkpoint, never pickled)."""
        if not self.size:
            raise ValueError("BM25.save: the index is empty; call fit(passages) first")
        checkpoint.save({"format": FORMAT, "k1": self.k1, "b": self.b,
                         "words": list(self.vocab), "lengths": self.lengths,
                         "terms": self._terms, "docs": self._docs, "tf": self._tf}, path)

    @classmethod
    def load(cls, path):
        """The index ``save`` wrote to ``path``; anything else is a ``ValueError`` naming it."""
        state = checkpoint.load(path)
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"BM25.load: {path!r} is a checkpoint but not a BM25 index")
        try:
            index = cls(state["k1"], state["b"])
            index.vocab = {word: i for i, word in enumerate(state["words"])}
            index.lengths = state["lengths"]
            index.size = len(index.lengths)
            terms, docs, tf = state["terms"], state["docs"], state["tf"]
        except KeyError as missing:
            raise ValueError(f"BM25.load: {path!r} lacks the entry {missing}") from None
        if not (len(terms) == len(docs) == len(tf)) or (len(terms) and (
                terms.min() < 0 or terms.max() >= len(index.vocab) or docs.min() < 0
                or docs.max() >= index.size or np.any(np.diff(terms) < 0))):
            raise ValueError(f"BM25.load: {path!r} holds inconsistent inverted lists")
        index._build(terms, docs, tf)
        return index
