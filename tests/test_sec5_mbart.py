"""mBART's multilingual pretraining (survey section V-C.1): eq 30's language sampling and eq 31's
denoising objective (checked against the reference maths in ``tests/test_check.py``, with every
spec), language-id tokens, and mBART's decoder start."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.data.multilingual import (LanguageCodes, LanguageSampler,
                                             language_sampling_ratios,
                                             multilingual_denoising_log_likelihood)
from minitorch_nlp.models.bart import MBartConfig, MBartForConditionalGeneration

pytestmark = [pytest.mark.sec5, pytest.mark.filterwarnings("ignore:Output seems independent")]

EOS, PAD, EN, FR = 2, 1, 38, 39


@pytest.mark.eq(30)
def test_eq30_upsamples_small_languages_and_alpha_1_changes_nothing():
    sizes = np.array([1000.0, 100.0, 10.0])
    shares = sizes / sizes.sum()
    ratios = language_sampling_ratios(sizes).numpy()
    probabilities = shares * ratios
    np.testing.assert_allclose(probabilities.sum(), 1.0)
    assert ratios[2] > 1 > ratios[0] and probabilities[2] > shares[2]
    np.testing.assert_allclose(language_sampling_ratios(sizes, alpha=1.0).numpy(), 1.0)
    # a share given as counts or as fractions is the same share
    np.testing.assert_allclose(language_sampling_ratios(shares).numpy(), ratios)


@pytest.mark.eq(30)
def test_eq30_sampler_draws_with_the_smoothed_probabilities():
    corpora = {"en": [f"en{i}" for i in range(90)], "fr": [f"fr{i}" for i in range(9)],
               "de": ["de0"]}
    sampler = LanguageSampler(corpora)
    expected = np.array([90, 9, 1]) ** 0.7 / (np.array([90, 9, 1]) ** 0.7).sum()
    np.testing.assert_allclose(sampler.probabilities, expected)
    draws = sampler.sample(np.random.default_rng(0), count=4000)
    assert all(text in corpora[language] for language, text in draws)
    for language, q in zip(sampler.languages, expected):
        seen = sum(language == drawn for drawn, _ in draws)
        assert abs(seen - 4000 * q) < 4 * np.sqrt(4000 * q * (1 - q)), language


@pytest.mark.eq(30)
@pytest.mark.parametrize("call, message", [
    (lambda: language_sampling_ratios([3.0, 0.0]), "sizes must be a non-empty 1-D array of "
                                                   "positive finite amounts"),
    (lambda: language_sampling_ratios([3.0], alpha=0.0), "alpha must be > 0"),
    (lambda: LanguageSampler({"en": ["a"], "fr": []}), "every language needs texts; empty: fr"),
    (lambda: LanguageCodes({"en": EN}, EOS).id("xx"), "unknown language code 'xx'; this model "
                                                      "knows en"),
])
def test_multilingual_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_language_codes_wrap_sources_and_labels():
    codes = LanguageCodes({"en": EN, "fr": FR}, EOS)
    np.testing.assert_array_equal(codes.wrap([5, 6], "fr"), [5, 6, EOS, FR])


def tiny_mbart(seed=0):
    mt.manual_seed(seed)
    return MBartForConditionalGeneration(MBartConfig.tiny(forced_eos_token_id=None)).eval()


def test_mbart_decoder_starts_from_the_labels_language_id():
    model = tiny_mbart()
    codes = LanguageCodes({"en": EN, "fr": FR}, EOS)
    labels = np.stack([codes.wrap([5, 6, 7], "fr"), np.append(codes.wrap([8, 9], "en"), PAD)])
    np.testing.assert_array_equal(model.model.shift_right(labels),
                                  [[FR, 5, 6, 7, EOS], [EN, 8, 9, EOS, EN]])
    source = codes.wrap([10, 11, 12], "en")[None]
    out = model(source, labels=labels[:1])
    expected = model(source, decoder_input_ids=[[FR, 5, 6, 7, EOS]]).logits
    np.testing.assert_array_equal(out.logits.numpy(), expected.numpy())
    # the objective of eq 31 is minus the summed cross-entropy of the same batch
    total = multilingual_denoising_log_likelihood(out.logits, labels[:1], pad_id=PAD)
    np.testing.assert_allclose(total.item(), -out.loss.item() * 5, rtol=1e-5)   # 5 tokens
    generated = model.generate(source, max_new_tokens=4, decoder_start_token_id=FR)
    assert (generated[:, 0] == FR).all()
    forced = model.generate(source, max_new_tokens=4, decoder_start_token_id=EOS,
                            forced_bos_token_id=EN)
    assert (forced[:, 1] == EN).all()


def test_mbart_labels_of_padding_only_are_refused():
    with pytest.raises(ValueError, match="a row of labels holds only padding"):
        tiny_mbart()(np.array([[5, 2, EN]]), labels=np.array([[PAD, PAD]]))


@pytest.mark.eq(30)
def test_eq30_the_default_alpha_is_mbarts_0_7():
    sizes = np.array([1.0, 10.0, 100.0])
    shares = sizes / sizes.sum()
    expected = shares ** 0.7 / (shares * (shares ** 0.7).sum())
    np.testing.assert_allclose(language_sampling_ratios(sizes).numpy(), expected, rtol=1e-12)
