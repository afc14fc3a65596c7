"""Encoder-decoder generation written once (``decoding.generate_seq2seq``): greedy, sampling and
beam search over any model with ``start_decoding`` and ``step``; here the section IV
Transformer, the T5 / BART tests run the same function on their models."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import decoding
from minitorch_nlp.testing import strategies as S
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


def exhaustive_huggingface_best(table, max_len, length_penalty):
    """Every sequence a search can return (ended by <eos> or cut at ``max_len``), scored as
    HuggingFace's finished hypotheses: sum of log-probabilities / length ** length_penalty."""
    log_probs = table - np.log(np.exp(table).sum(-1, keepdims=True))
    best, best_score = None, -np.inf
    for length in range(1, max_len + 1):
        for sequence in itertools.product(range(table.shape[-1]), repeat=length):
            if EOS in sequence[:-1] or (length < max_len and sequence[-1] != EOS):
                continue
            total = sum(log_probs[t, previous, token] for t, (previous, token)
                        in enumerate(zip((BOS,) + sequence[:-1], sequence)))
            if total / length ** length_penalty > best_score:
                best, best_score = sequence, total / length ** length_penalty
    return best, best_score


@pytest.mark.eq(1)
@settings(max_examples=15, deadline=None)
@given(table=S.arrays((2, 3, 4, 4)), length_penalty=st.sampled_from([0.5, 1.0, 2.0]))
def test_eq01_huggingface_convention_never_stopping_with_a_wide_beam_is_exhaustive(
        table, length_penalty):
    """With a beam as wide as the prefixes (4^3) every hypothesis is kept, and
    ``early_stopping="never"`` stops only when no live hypothesis can beat a finished one, so the
    result is the best finished hypothesis of all."""
    table[..., EOS] += 1.0  # hypotheses of every length
    step_fn, state = markov_step(table)
    ids, scores = decoding.beam_search(step_fn, state, 2, BOS, EOS, 3, beam_size=64,
                                       length_penalty=length_penalty, pad_id=PAD,
                                       early_stopping="never", convention="huggingface")
    for row in range(2):
        best, best_score = exhaustive_huggingface_best(table[row], 3, length_penalty)
        assert tuple(ids[row, :len(best)]) == best
        assert (ids[row, len(best):] == PAD).all()
        np.testing.assert_allclose(scores[row], best_score, rtol=1e-12)


def test_huggingface_convention_keeps_finished_hypotheses_out_of_the_beam():
    """P(<eos>) = 0.6, P(a) = 0.4 first, then P(<eos> | a) = 1. With one beam, <eos> leaves the
    beam for the finished set (score log 0.6) and a lives on: ``early_stopping=False`` judges a
    at its current length (log 0.4 < log 0.6) and stops; ``"never"`` judges it at ``max_len``
    and goes on to find a <eos>, log(0.4) / 2 > log 0.6. Section III's convention keeps <eos>
    in the one beam: greedy."""
    a = 3
    table = np.full((1, 3, VOCAB, VOCAB), 1e-12)
    table[0, 0, BOS, [EOS, a]] = [0.6, 0.4]
    table[0, 1:, :, EOS] = 1.0
    step_fn, state = markov_step(np.log(table))

    def search(**options):
        return decoding.beam_search(step_fn, state, 1, BOS, EOS, 3, beam_size=1, pad_id=PAD,
                                    **options)
    for early_stopping in (False, True):
        ids, score = search(convention="huggingface", early_stopping=early_stopping)
        assert ids.tolist() == [[EOS]]
        np.testing.assert_allclose(score, [np.log(0.6)])
    ids, score = search(convention="huggingface", early_stopping="never")
    assert ids.tolist() == [[a, EOS]]
    np.testing.assert_allclose(score, [np.log(0.4) / 2], rtol=1e-9)
    assert search()[0].tolist() == [[EOS]]


def test_generate_uses_the_huggingface_convention_and_keeps_wu_reachable():
    table = np.random.default_rng(5).standard_normal((3, 7, VOCAB, VOCAB)) * 2
    table[..., EOS] += 1.5
    step_fn, state = markov_step(table)
    results = {convention: decoding.beam_search(step_fn, state, 3, BOS, EOS, 7, beam_size=2,
                                                length_penalty=2.0, pad_id=PAD,
                                                convention=convention)[0]
               for convention in ("wu", "huggingface")}
    assert results["wu"].tolist() != results["huggingface"].tolist()
    model, src = tiny_transformer(), sources()
    for convention in ("wu", "huggingface"):
        state = model.start_decoding(src)
        ids, _ = decoding.beam_search(model.step, state, 3, BOS, EOS, 7, beam_size=3,
                                      pad_id=PAD, convention=convention)
        options = {} if convention == "huggingface" else {"beam_convention": "wu"}
        generated = generate(model, src, num_beams=3, **options)
        np.testing.assert_array_equal(generated[:, 1:ids.shape[1] + 1], ids)


@pytest.mark.parametrize("options, message", [
    ({"num_beams": 2, "beam_convention": "fairseq"},
     "convention must be 'wu' or 'huggingface', got 'fairseq'"),
    ({"num_beams": 2, "early_stopping": "sometimes"},
     "early_stopping must be True, False or 'never', got 'sometimes'"),
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
