"""ALBERT's pretraining data (Lan et al., 2020, "ALBERT: A Lite BERT for Self-supervised Learning
of Language Representations"), the survey's section IX-C:

* ``ngram_length_probabilities`` and ``NgramMaskedLMCollator``: the masked-LM targets are
  n-grams of up to N = 3 tokens, the length n drawn with p(n) = (1/n) / sum_{k=1}^{N} 1/k
  (eq 106; Lan section 4.1, after Joshi et al.'s SpanBERT), chosen until 15% of the tokens are
  covered, never over special tokens or padding;
* ``sentence_order_pairs``: sentence-order prediction (SOP, Lan section 3.1): two consecutive
  segments of one document, in their order (label 0) or swapped (label 1), with equal
  probability, instead of BERT's next-sentence prediction.

Randomness comes from a seed, a ``numpy.random.Generator`` or ``minitorch_nlp.Generator``, as in
``minitorch_nlp.data.masking``.
"""
from __future__ import annotations

import numpy as np

from .. import checks, cookbook
from .masking import MaskedLMCollator, _generator

__all__ = ["NgramMaskedLMCollator", "ngram_length_probabilities", "sentence_order_pairs"]


@cookbook.equation(106)
def ngram_length_probabilities(max_n=3):
    r"""The probabilities of the n-gram lengths 1 .. ``max_n`` of ALBERT's masked LM::

        p(n) = (1/n) / sum_{k=1}^{N} (1/k)                                      (eq 106)

    with N = ``max_n`` (3 in ALBERT: p = 6/11, 3/11, 2/11). The survey prints the sum's upper
    limit as n; Lan et al. (section 4.1) sum to N, which makes the p(n) a distribution. Returns
    a float64 array of length ``max_n``, entry n - 1 holding p(n).
    """
    checks.positive_int(max_n, "max_n", "ngram_length_probabilities")
    inverse = 1.0 / np.arange(1, max_n + 1, dtype=np.float64)
    return inverse / inverse.sum()


class NgramMaskedLMCollator(MaskedLMCollator):
    """BERT's masked-LM corruption with ALBERT's n-gram targets (Lan et al. section 4.1, eq 106).

    Each row gets the budget of ``MaskedLMCollator`` (round(``mlm_probability`` * n) of its n
    maskable tokens). Candidate start positions are visited in a random order; at each, a length
    is drawn from eq 106 (``max_n`` = 3), and the n-gram is chosen when it lies on maskable,
    not yet chosen positions and fits the rest of the budget (else the start is passed over, as
    in ALBERT's ``create_pretraining_data.py``), until the budget is spent; a row where every draw
    failed (a short one) gets a single token, so that no row is left without a target, as in
    ``MaskedLMCollator``. The chosen tokens are
    then corrupted 80/10/10 and labelled as in BERT. ``choose_spans`` gives the n-grams.
    """

    def __init__(self, *, max_n=3, **options):
        super().__init__(**options)
        self.max_n = checks.positive_int(max_n, "max_n", "NgramMaskedLMCollator")
        self.length_probabilities = ngram_length_probabilities(max_n)

    def choose_spans(self, maskable, rng):
        """For each row, the chosen n-grams as a list of (start, length) in the order drawn."""
        rng = _generator(rng)
        maskable = np.asarray(maskable, dtype=bool)
        batch, time = maskable.shape
        spans = []
        for row, budget in zip(maskable, self.budget(maskable)):
            free, chosen, row_spans = row.copy(), 0, []
            lengths = rng.choice(np.arange(1, self.max_n + 1), size=time,
                                 p=self.length_probabilities)                   # eq 106
            for start, length in zip(rng.permutation(time), lengths):
                if chosen >= budget:
                    break
                end = start + length
                if chosen + length > budget or end > time or not free[start:end].all():
                    continue
                free[start:end] = False
                chosen += length
                row_spans.append((int(start), int(length)))
            if budget and not row_spans:        # every draw failed (a short row): one 1-gram
                row_spans.append((int(rng.choice(np.flatnonzero(row))), 1))
            spans.append(row_spans)
        return spans

    def choose(self, maskable, rng):
        chosen = np.zeros(maskable.shape, dtype=bool)
        for row, row_spans in enumerate(self.choose_spans(maskable, rng)):
            for start, length in row_spans:
                chosen[row, start:start + length] = True
        return chosen


def sentence_order_pairs(documents, seed=None):
    """ALBERT's sentence-order-prediction pairs (Lan et al. section 3.1).

    ``documents``: a list of documents, each a list of segments (strings or id lists) in order.
    Every two consecutive segments of a document make one pair: in their order (A, B) with label
    0 half of the time, swapped (B, A) with label 1 otherwise (HuggingFace's
    ``sentence_order_label``). Both segments always come from the same document, so only their
    order tells the classes apart (with NSP's random segments, topic alone would). Returns the
    lists ``first``, ``second`` and the int64 array ``labels``, in document order.
    """
    rng = _generator(seed)
    first, second, labels = [], [], []
    for document in documents:
        document = list(document)
        for a, b in zip(document, document[1:]):
            swapped = rng.random() < 0.5
            first.append(b if swapped else a)
            second.append(a if swapped else b)
            labels.append(int(swapped))
    if not labels:
        raise ValueError("sentence_order_pairs: no document has two segments; SOP pairs are two "
                         "consecutive segments of one document")
    return first, second, np.asarray(labels, dtype=np.int64)
