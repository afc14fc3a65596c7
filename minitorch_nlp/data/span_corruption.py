"""T5's pretraining objective, span corruption (Raffel et al., 2020, section 3.1.4 and 3.3.4):
about ``noise_density`` (15%) of a text's tokens, in spans of mean length
``mean_noise_span_length`` (3), are dropped from the input; each span is replaced by one sentinel
token, and the target lists the sentinels, each followed by the tokens it hides::

    text    Thank you for inviting me to your party last week .
    input   Thank you <X> me to your party <Y> week .
    target  <X> for inviting <Y> last <Z>

The span lengths follow the paper's code (``random_spans_noise_mask`` of the T5 repository):
round(length * density) noise tokens (at least 1, at most length - 1) in round(noise / mean)
spans (at least 1, and no more than there are kept tokens); the noise tokens and the kept tokens
are each cut into that many non-empty segments at random, and the text alternates kept, noise,
kept, noise ... starting with kept.
"""
from __future__ import annotations

import numpy as np

from .. import checks

__all__ = ["random_spans_noise_mask", "span_corruption"]


def _random_segment_lengths(num_items, num_segments, rng):
    """``num_items`` cut into ``num_segments`` non-empty pieces, every cut equally likely."""
    cuts = rng.choice(np.arange(1, num_items), size=num_segments - 1, replace=False)
    return np.diff(np.concatenate([[0], np.sort(cuts), [num_items]]))


def random_spans_noise_mask(length, noise_density=0.15, mean_noise_span_length=3.0, rng=None):
    """A bool array (length,), True on the tokens span corruption hides (see the module
    docstring). ``rng``: a ``numpy.random.Generator`` (a fresh unseeded one when None)."""
    where = "random_spans_noise_mask"
    checks.int_at_least(length, 2, "length", where)
    if not 0.0 < noise_density < 1.0:
        raise ValueError(f"{where}: noise_density must be in (0, 1), got {noise_density}")
    if not mean_noise_span_length >= 1.0:
        raise ValueError(f"{where}: mean_noise_span_length must be >= 1, got "
                         f"{mean_noise_span_length}")
    rng = np.random.default_rng() if rng is None else rng
    num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    num_spans = max(int(round(num_noise / mean_noise_span_length)), 1)
    num_spans = min(num_spans, num_noise, length - num_noise)
    noise = _random_segment_lengths(num_noise, num_spans, rng)
    kept = _random_segment_lengths(length - num_noise, num_spans, rng)
    return np.concatenate([np.concatenate([np.zeros(k, bool), np.ones(n, bool)])
                           for k, n in zip(kept, noise)])


def span_corruption(ids, sentinel_ids, noise_density=0.15, mean_noise_span_length=3.0,
                    rng=None, eos_id=None):
    """One text's ids (1-D) -> ``(inputs, targets)``, int64: the input with each noise span
    replaced by the next sentinel, and the target of the sentinels, each followed by its span,
    closed by one more sentinel (T5's final one). ``sentinel_ids``: the sentinels in order
    (HuggingFace's T5 uses <extra_id_0> = vocab_size - 1, <extra_id_1> = vocab_size - 2 ...).
    ``eos_id``, when given, ends both. Inputs and targets together hold every token once."""
    where = "span_corruption"
    ids = checks.ids_array(ids, "ids", where, axes="(time)")
    sentinels = checks.ids_array(sentinel_ids, "sentinel_ids", where, axes="(sentinels)")
    noise = random_spans_noise_mask(len(ids), noise_density, mean_noise_span_length, rng)
    starts = noise & ~np.concatenate([[False], noise[:-1]])
    if starts.sum() + 1 > len(sentinels):
        raise ValueError(f"{where}: {int(starts.sum())} spans need {int(starts.sum()) + 1} "
                         f"sentinels, got {len(sentinels)}; give more sentinel_ids")
    num_spans = int(starts.sum())
    span_number = np.cumsum(starts) - 1      # the span each noise token belongs to
    inputs = np.where(starts, sentinels[span_number], ids)[~noise | starts]
    targets = []
    for span in range(num_spans):
        targets += [sentinels[span], *ids[noise & (span_number == span)]]
    targets = np.array(targets + [sentinels[num_spans]])
    if eos_id is not None:
        inputs, targets = np.append(inputs, eos_id), np.append(targets, eos_id)
    return inputs.astype(np.int64), targets.astype(np.int64)
