"""BART's five ways of corrupting a document (Lewis et al., 2020, section 2.2 and Figure 2), each a
data transform ``transform(ids, rng) -> ids`` on one document's token ids (a 1-D int array), with
its parameters bound by the class:

* ``TokenMasking(mask_id, probability)``: each token becomes <mask> with ``probability`` (BERT);
* ``TokenDeletion(probability)``: each token is deleted with ``probability``; the model must find
  where input is missing;
* ``TextInfilling(mask_id, mask_ratio=0.3, poisson_lambda=3)``: spans whose lengths are drawn
  from Poisson(lambda) cover ``mask_ratio`` of the tokens; each span becomes ONE <mask>, and a
  span of length 0 inserts a <mask> (the model must find how many tokens are missing);
* ``SentencePermutation(sentence_end_ids)``: the sentences (each ending with one of
  ``sentence_end_ids``, e.g. the id of ".") are shuffled;
* ``DocumentRotation()``: a token chosen uniformly at random becomes the start, the document
  rotated around it (the model must find the document's start).

``Compose(*transforms)`` applies several in turn: the paper's best setting is
``Compose(SentencePermutation(ends), TextInfilling(mask_id))``. ``rng`` is a
``numpy.random.Generator``. ``protected`` ids (special tokens such as <s> and </s>) are never
masked, deleted or counted in a span.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import checks

__all__ = ["Compose", "DocumentRotation", "SentencePermutation", "TextInfilling",
           "TokenDeletion", "TokenMasking"]


def _document(ids, where):
    return checks.ids_array(ids, "ids", where, axes="(time)")


def _probability(value, name, where, high_open=True):
    if not (0.0 <= value < 1.0 if high_open else 0.0 <= value <= 1.0):
        raise ValueError(f"{where}: {name} must be in [0, {'1)' if high_open else '1]'}, got "
                         f"{value}")
    return float(value)


def _free(ids, protected):
    """True where a token may be noised (not a protected special token)."""
    return ~np.isin(ids, np.asarray(protected, dtype=np.int64))


@dataclass(frozen=True)
class TokenMasking:
    """Each unprotected token replaced by ``mask_id`` with ``probability``."""

    mask_id: int
    probability: float = 0.15
    protected: tuple = ()

    def __post_init__(self):
        _probability(self.probability, "probability", "TokenMasking", high_open=False)

    def __call__(self, ids, rng):
        ids = _document(ids, "TokenMasking")
        chosen = (rng.random(len(ids)) < self.probability) & _free(ids, self.protected)
        return np.where(chosen, self.mask_id, ids)


@dataclass(frozen=True)
class TokenDeletion:
    """Each unprotected token deleted with ``probability``."""

    probability: float = 0.15
    protected: tuple = ()

    def __post_init__(self):
        _probability(self.probability, "probability", "TokenDeletion")

    def __call__(self, ids, rng):
        ids = _document(ids, "TokenDeletion")
        return ids[~((rng.random(len(ids)) < self.probability) & _free(ids, self.protected))]


@dataclass(frozen=True)
class TextInfilling:
    """Spans of Poisson(``poisson_lambda``) lengths covering round(``mask_ratio`` x the tokens)
    of each run of unprotected tokens, each span replaced by one ``mask_id``.

    The lengths are drawn until they cover the tokens to mask (the last one shortened to fit),
    then the spans are laid over the document at random without overlapping: the kept tokens are
    cut into gaps around the spans (every arrangement of spans and kept tokens equally likely),
    so a zero-length span is a <mask> inserted between two kept tokens. Protected tokens are kept
    where they are and spans never cross them."""

    mask_id: int
    mask_ratio: float = 0.3
    poisson_lambda: float = 3.0
    protected: tuple = ()

    def __post_init__(self):
        _probability(self.mask_ratio, "mask_ratio", "TextInfilling")
        if not self.poisson_lambda > 0:
            raise ValueError(f"TextInfilling: poisson_lambda must be > 0, got "
                             f"{self.poisson_lambda}")

    def span_lengths(self, num_tokens, rng):
        """Poisson(lambda) lengths adding up to round(mask_ratio * num_tokens), the last one cut
        to fit; at least one span (of length 0 when there is nothing to mask)."""
        to_mask, lengths = int(round(self.mask_ratio * num_tokens)), []
        while sum(lengths) < to_mask or not lengths:
            lengths.append(int(rng.poisson(self.poisson_lambda)))
        lengths[-1] -= sum(lengths) - to_mask
        return lengths

    def __call__(self, ids, rng):
        ids = _document(ids, "TextInfilling")
        free = _free(ids, self.protected)
        out, segment_start = [], 0
        # noise each run of unprotected tokens alone; protected tokens stay where they are
        boundaries = np.flatnonzero(np.diff(np.concatenate([[0], free.astype(int), [0]])))
        for start, end in zip(boundaries[::2], boundaries[1::2]):
            out += ids[segment_start:start].tolist()
            out += self._infill(ids[start:end], rng)
            segment_start = end
        return np.asarray(out + ids[segment_start:].tolist(), dtype=np.int64)

    def _infill(self, run, rng):
        lengths = self.span_lengths(len(run), rng)
        kept = len(run) - sum(lengths)
        # spans and kept tokens in a random order: choose which of the len(lengths) + kept slots
        # hold the spans
        slots = np.zeros(len(lengths) + kept, dtype=bool)
        slots[rng.choice(len(slots), size=len(lengths), replace=False)] = True
        out, position, span = [], 0, 0
        for is_span in slots:
            if is_span:
                out.append(self.mask_id)
                position += lengths[span]
                span += 1
            else:
                out.append(int(run[position]))
                position += 1
        return out


@dataclass(frozen=True)
class SentencePermutation:
    """The document's sentences in a random order; a sentence ends with any of
    ``sentence_end_ids`` (a last one without an end is a sentence too)."""

    sentence_end_ids: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not len(self.sentence_end_ids):
            raise ValueError("SentencePermutation: give the ids that end a sentence "
                             "(sentence_end_ids), e.g. the id of '.'")

    def __call__(self, ids, rng):
        ids = _document(ids, "SentencePermutation")
        ends = np.flatnonzero(np.isin(ids, np.asarray(self.sentence_end_ids))) + 1
        sentences = [s for s in np.split(ids, ends) if len(s)]
        order = rng.permutation(len(sentences))
        return np.concatenate([sentences[i] for i in order]) if sentences else ids


@dataclass(frozen=True)
class DocumentRotation:
    """The document rotated to start at a token chosen uniformly at random."""

    def __call__(self, ids, rng):
        ids = _document(ids, "DocumentRotation")
        return np.roll(ids, -int(rng.integers(len(ids)))) if len(ids) else ids


class Compose:
    """Several transforms applied in turn: ``Compose(a, b)(ids, rng) = b(a(ids, rng), rng)``."""

    def __init__(self, *transforms):
        if not transforms or not all(callable(t) for t in transforms):
            raise ValueError("Compose: give one or more transforms, each called as "
                             "transform(ids, rng)")
        self.transforms = transforms

    def __call__(self, ids, rng):
        for transform in self.transforms:
            ids = transform(ids, rng)
        return ids
