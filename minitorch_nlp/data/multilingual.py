"""mBART's multilingual pretraining data (Liu et al., 2020; the survey's section V-C.1, eq 30-31):
languages sampled with smoothed ratios, language-id tokens, and the multilingual denoising
objective.

* eq 30: with p_i the share of language i in the data, each language is up- or down-sampled by
  lambda_i = (1 / p_i) * p_i^alpha / sum_j p_j^alpha (alpha = 0.7), so that a text of language i
  is drawn with probability p_i lambda_i = p_i^alpha / sum_j p_j^alpha: a small language is seen
  more often than its share, a large one less (``language_sampling_ratios``,
  ``LanguageSampler``);
* language ids (``LanguageCodes``): mBART appends its language's token to the source,
  ``X </s> <lang>``, and the decoder starts from the target language's token (the labels end
  with it, and the decoder's inputs are the labels rotated: ``<lang> Y </s>``);
* eq 31: L_theta = sum over the languages' corpora C_i of sum over their texts X of
  log P(X | g(X); theta), g a noising function (``multilingual_denoising_log_likelihood``).
"""
from __future__ import annotations

import numpy as np

from .. import cookbook
from ..autograd import Tensor, tensor
from ..decoding import sequence_log_prob

__all__ = ["LanguageCodes", "LanguageSampler", "language_sampling_ratios",
           "multilingual_denoising_log_likelihood"]


@cookbook.equation(30)
def language_sampling_ratios(sizes, *, alpha=0.7):
    """lambda_i = (1 / p_i) * p_i^alpha / sum_j p_j^alpha (eq 30), p_i = sizes_i / sum_j sizes_j
    the share of language i (``sizes``: a Tensor or array (K,) of positive amounts: texts,
    tokens or shares). Differentiable in ``sizes`` when it is a Tensor. alpha = 1 gives
    lambda_i = 1 (sample as the data are); alpha -> 0 samples every language equally."""
    sizes = sizes if isinstance(sizes, Tensor) else tensor(np.asarray(sizes, dtype=np.float64))
    values = sizes.numpy()
    if sizes.ndim != 1 or not len(values) or not (values > 0).all() \
            or not np.isfinite(values).all():
        raise ValueError(f"language_sampling_ratios: sizes must be a non-empty 1-D array of "
                         f"positive finite amounts, one per language, got {values!r}; drop a "
                         "language without data")
    if not alpha > 0:
        raise ValueError(f"language_sampling_ratios: alpha must be > 0, got {alpha}")
    shares = sizes / sizes.sum()
    smoothed = shares ** alpha
    return smoothed / (shares * smoothed.sum())


class LanguageSampler:
    """Draws texts from per-language corpora with eq 30's probabilities q_i = p_i lambda_i =
    p_i^alpha / sum_j p_j^alpha, p_i the language's share of all texts (``corpora``: language ->
    list of texts, token-id arrays or anything else); within a language every text is equally
    likely."""

    def __init__(self, corpora, alpha=0.7):
        if not corpora or any(len(texts) == 0 for texts in corpora.values()):
            empty = [name for name, texts in corpora.items() if len(texts) == 0]
            raise ValueError(f"LanguageSampler: every language needs texts; "
                             f"{'empty: ' + ', '.join(map(str, empty)) if empty else 'none given'}")
        self.corpora = dict(corpora)
        self.languages = list(self.corpora)
        sizes = np.array([len(texts) for texts in self.corpora.values()], dtype=np.float64)
        ratios = language_sampling_ratios(sizes, alpha=alpha).numpy()
        self.probabilities = sizes / sizes.sum() * ratios

    def sample(self, rng, count=1):
        """``count`` (language, text) pairs drawn with the probabilities of eq 30."""
        chosen = rng.choice(len(self.languages), size=count, p=self.probabilities)
        pairs = []
        for index in chosen:
            texts = self.corpora[self.languages[index]]
            pairs.append((self.languages[index], texts[rng.integers(len(texts))]))
        return pairs


class LanguageCodes:
    """The language-id tokens of an mBART vocabulary (``codes``: language -> token id, e.g.
    {"en": 250004}), and the sequences mBART reads: the source ``X </s> <lang>`` and the labels
    ``Y </s> <lang>``, whose rotation ``<lang> Y </s>`` the decoder reads."""

    def __init__(self, codes, eos_id):
        self.codes, self.eos_id = dict(codes), int(eos_id)

    def id(self, language):
        """The token id of ``language``; a ``ValueError`` naming the known ones otherwise."""
        if language not in self.codes:
            raise ValueError(f"LanguageCodes: unknown language code {language!r}; this model "
                             f"knows {', '.join(map(str, self.codes))}")
        return self.codes[language]

    def wrap(self, ids, language):
        """``ids`` followed by </s> and the language's token, int64 (the source and the labels
        of mBART)."""
        return np.concatenate([np.asarray(ids, dtype=np.int64),
                               [self.eos_id, self.id(language)]]).astype(np.int64)


@cookbook.equation(31)
def multilingual_denoising_log_likelihood(logits, targets, *, pad_id):
    """L_theta = sum_{C_i in C} sum_{X in C_i} log P(X | g(X); theta) (eq 31): for a batch of
    texts X drawn from all the languages' corpora, ``logits`` (batch, T, V) are the decoder's
    teacher-forced scores reading the noised g(X), ``targets`` (batch, T) the original X (each
    ending with </s> and its language id); positions holding ``pad_id`` count for nothing.
    Returns the sum over texts of log P(X | g(X)) (eq 2's sequence log-probability), the scalar
    pretraining maximises; training minimises its negative mean per token."""
    return sequence_log_prob(logits, targets, pad_id=pad_id).sum()
