"""Encoder-decoder generation written once (``decoding.generate_seq2seq``): greedy, sampling and
beam search over any model with ``start_decoding`` and ``step``; here the section IV
Transformer, the T5 / BART tests run the same function on their models."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import decoding
from minitorch_nlp.models.transformer import Transformer

pytestmark = pytest.mark.sec5

PAD, BOS, EOS, VOCAB = 0, 1, 2, 12


def tiny_transformer(seed=0):
    mt.manual_seed(seed)
    return Transformer(VOCAB, d_model=16, num_heads=2, num_encoder_layers=2,
                       num_decoder_layers=2, d_ff=32, dropout=0.0, max_len=32,
                       label_smoothing=0.0).to(mt.float64).eval()


def sources(seed=0, shape=(3, 5)):
    return np.random.default_rng(seed).integers(3, VOCAB, shape)


def generate(model, ids, mask=None, **options):
    return decoding.generate_seq2seq(model, ids, mask, **{
        "decoder_start_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
        "max_new_tokens": 7, **options})


@pytest.mark.parametrize("options", [{}, {"num_beams": 3}, {"num_beams": 3, "early_stopping": True},
                                     {"do_sample": True, "top_k": 4, "temperature": 1.5}])
def test_cached_equals_uncached(options):
    model, src = tiny_transformer(), sources()
    outputs = []
    for use_cache in (True, False):
        if options.get("do_sample"):
            options["generator"] = mt.Generator(7)
        outputs.append(generate(model, src, use_cache=use_cache, **options))
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_greedy_is_the_transformers_greedy_decode_and_beam_1():
    model, src = tiny_transformer(), sources()
    greedy = generate(model, src)
    assert (greedy[:, 0] == BOS).all()
    np.testing.assert_array_equal(greedy[:, 1:], model.greedy_decode(src, max_len=7))
    np.testing.assert_array_equal(generate(model, src, num_beams=1), greedy)
    beam, _ = model.beam_decode(src, beam_size=1, max_len=7, length_penalty=1.0)
    np.testing.assert_array_equal(beam, greedy[:, 1:])
    np.testing.assert_array_equal(model.generate(src, max_new_tokens=7), greedy)


def test_right_padded_rows_give_what_they_give_alone():
    model = tiny_transformer()
    src = sources(shape=(3, 6))
    lengths = np.array([6, 4, 2])
    mask = np.arange(6)[None, :] < lengths[:, None]
    padded = np.where(mask, src, PAD)
    for options in ({}, {"num_beams": 3}):
        batch = generate(model, padded, mask, **options)
        for row, length in enumerate(lengths):
            alone = generate(model, src[row:row + 1, :length], **options)
            np.testing.assert_array_equal(batch[row, :alone.shape[1]], alone[0])
            assert (batch[row, alone.shape[1]:] == PAD).all()


def test_sampling_is_reproducible_and_top_k_1_is_greedy():
    model, src = tiny_transformer(), sources()
    first = generate(model, src, do_sample=True, generator=mt.Generator(3))
    again = generate(model, src, do_sample=True, generator=mt.Generator(3))
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(generate(model, src, do_sample=True, top_k=1),
                                  generate(model, src))
    other_seeds = [generate(model, src, do_sample=True, temperature=5.0,
                            generator=mt.Generator(seed)) for seed in range(4, 8)]
    assert any(not np.array_equal(first, other) for other in other_seeds)


def test_forced_bos_and_eos():
    model, src = tiny_transformer(), sources()
    out = generate(model, src, forced_bos_token_id=5, forced_eos_token_id=EOS, max_new_tokens=4)
    assert (out[:, 1] == 5).all()
    # every row ends with <eos> by step 4 at the latest (then padding)
    for row in out[:, 1:]:
        assert EOS in row.tolist()
        assert (row[row.tolist().index(EOS) + 1:] == PAD).all()
    beams = generate(model, src, forced_bos_token_id=5, forced_eos_token_id=EOS,
                     max_new_tokens=4, num_beams=2)
    assert (beams[:, 1] == 5).all() and all(EOS in row for row in beams.tolist())
    # the forced first token then conditions the rest exactly as a prefix would
    step_fn = decoding.force_tokens(model.step, 3, forced_bos_id=0)
    state = model.start_decoding(src)
    log_probs, _ = step_fn(np.full(len(src), BOS), state)
    assert (log_probs[:, 0] == 0).all() and np.isneginf(log_probs[:, 1:]).all()


def markov_step(table):
    """Log-probabilities that depend on (row, position, previous token) only."""
    def step_fn(tokens, state):
        logits = table[state["row"], state["position"], tokens]
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return log_probs, {**state, "position": state["position"] + 1}
    return step_fn, {"row": np.arange(len(table)), "position": np.zeros(len(table), np.int64)}


def test_early_stopping_finds_the_same_best_sooner_without_length_penalty():
    table = np.random.default_rng(2).standard_normal((4, 9, 6, 6)) * 2
    table[..., EOS] += 1.0
    calls = {}
    results = {}
    for early in (False, True):
        step_fn, state = markov_step(table)

        def counted(tokens, state, step_fn=step_fn, early=early):
            calls[early] = calls.get(early, 0) + 1
            return step_fn(tokens, state)
        results[early] = decoding.beam_search(counted, state, 4, BOS, EOS, 9, beam_size=3,
                                              length_penalty=0.0, pad_id=PAD,
                                              early_stopping=early)
    ids_late, scores_late = results[False]
    ids_early, scores_early = results[True]
    np.testing.assert_allclose(scores_early, scores_late)
    width = ids_early.shape[1]
    np.testing.assert_array_equal(ids_early, ids_late[:, :width])
    assert (ids_late[:, width:] == PAD).all()
    assert calls[True] < calls[False]


@pytest.mark.parametrize("options, message", [
    ({"num_beams": 2, "do_sample": True}, "beam search does not sample"),
    ({"num_beams": 0}, "num_beams must be a positive int"),
    ({"decoder_start_token_id": None}, "needs a start token"),
    ({"max_new_tokens": 0}, "max_new_tokens must be a positive int"),
])
def test_bad_options_are_clear_errors(options, message):
    model, src = tiny_transformer(), sources()
    with pytest.raises(ValueError, match=message):
        generate(model, src, **options)


def test_bad_inputs_are_clear_errors():
    model, src = tiny_transformer(), sources()
    with pytest.raises(ValueError, match=r"input_ids must be integer token ids"):
        generate(model, src.astype(float))
    with pytest.raises(ValueError, match=r"attention_mask of shape \(3, 4\) must match"):
        generate(model, src, np.ones((3, 4)))
