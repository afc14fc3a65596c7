"""Open-ended generation: the logits processors of ``minitorch_nlp.decoding`` (temperature, top-k,
top-p, CTRL's repetition penalty, sampling) and ``GPTLMHeadModel.generate`` with and without the
key/value cache."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import decoding
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from minitorch_nlp.testing import strategies as S

pytestmark = pytest.mark.sec5


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@st.composite
def logit_rows(draw, max_vocab=12):
    rows, vocab = draw(st.integers(1, 3)), draw(st.integers(1, max_vocab))
    return draw(S.distinct_arrays((rows, vocab)))


# ---- logits processors ------------------------------------------------------------------------
@given(logit_rows(), st.integers(1, 14))
def test_top_k_keeps_exactly_the_k_largest(logits, k):
    out = decoding.top_k_filter(logits, k)
    kept = np.isfinite(out)
    assert (kept.sum(axis=-1) == min(k, logits.shape[1])).all()
    np.testing.assert_array_equal(out[kept], logits[kept])
    for row, mask in zip(logits, kept):
        if not mask.all():
            assert row[mask].min() > row[~mask].max()


def test_top_k_breaks_ties_and_keeps_exactly_k():
    out = decoding.top_k_filter(np.array([[1.0, 2.0, 2.0, 2.0, 0.0]]), 2)
    np.testing.assert_array_equal(np.isfinite(out), [[False, True, True, False, False]])


@given(logit_rows(), st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_most_likely_set_with_mass_at_least_p(logits, p):
    kept = np.isfinite(decoding.top_p_filter(logits, p))
    probs = softmax(logits)
    for row, mask in zip(probs, kept):
        assert row[mask].sum() >= p - 1e-12
        if not mask.all():
            assert row[mask].min() > row[~mask].max()             # the most likely tokens
        assert row[mask].sum() - row[mask].min() < p              # and no fewer would do


def test_top_p_one_keeps_everything_and_tiny_p_keeps_the_argmax():
    logits = np.array([[0.5, 3.0, -1.0, 2.0]])
    np.testing.assert_array_equal(decoding.top_p_filter(logits, 1.0), logits)
    np.testing.assert_array_equal(np.isfinite(decoding.top_p_filter(logits, 1e-6)),
                                  [[False, True, False, False]])


@given(logit_rows(), st.floats(0.1, 5.0))
def test_temperature_divides_the_logits(logits, temperature):
    np.testing.assert_allclose(decoding.apply_temperature(logits, temperature),
                               logits / temperature)


@given(logit_rows(), S.seeds())
def test_temperature_towards_zero_samples_the_argmax(logits, seed):
    tiny = decoding.apply_temperature(logits, 1e-4)
    drawn = decoding.sample_logits(tiny, mt.Generator(seed))
    np.testing.assert_array_equal(drawn, logits.argmax(axis=-1))


@given(logit_rows(), st.floats(1.01, 3.0), S.seeds())
def test_repetition_penalty_lowers_exactly_the_seen_tokens(logits, penalty, seed):
    rng = np.random.default_rng(seed)
    previous = rng.integers(0, logits.shape[1], (logits.shape[0], 3))
    out = decoding.apply_repetition_penalty(logits, previous, penalty)
    for row in range(logits.shape[0]):
        seen = np.zeros(logits.shape[1], dtype=bool)
        seen[previous[row]] = True
        np.testing.assert_array_equal(out[row, ~seen], logits[row, ~seen])
        expected = np.where(logits[row] > 0, logits[row] / penalty, logits[row] * penalty)
        np.testing.assert_allclose(out[row, seen], expected[seen])
        assert (out[row, seen] < logits[row, seen]).all()
    np.testing.assert_array_equal(decoding.apply_repetition_penalty(logits, previous, 1.0),
                                  logits)


def test_sampling_follows_the_distribution_and_the_generator():
    logits = np.log(np.array([[0.1, 0.6, 0.0001, 0.2999]]))
    logits = decoding.top_k_filter(logits, 3)                    # token 2 cannot be drawn
    draws = decoding.sample_logits(np.repeat(logits, 20000, axis=0), mt.Generator(2))
    counts = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(counts, [0.1, 0.6, 0.0, 0.3], atol=0.01)
    a = decoding.sample_logits(np.repeat(logits, 50, axis=0), mt.Generator(7))
    b = decoding.sample_logits(np.repeat(logits, 50, axis=0), mt.Generator(7))
    np.testing.assert_array_equal(a, b)


def test_next_tokens_greedy_is_the_argmax_and_arguments_are_checked():
    logits = np.array([[0.0, 2.0, 1.0], [3.0, -1.0, 0.0]])
    np.testing.assert_array_equal(decoding.next_tokens(logits, [[0], [1]]), [1, 0])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        decoding.next_tokens(logits, [[0], [1]], do_sample=True, temperature=0.0)
    with pytest.raises(ValueError, match="k must be a positive int"):
        decoding.next_tokens(logits, [[0], [1]], do_sample=True, top_k=0)
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\]"):
        decoding.next_tokens(logits, [[0], [1]], do_sample=True, top_p=1.5)
    with pytest.raises(ValueError, match="penalty must be > 0"):
        decoding.next_tokens(logits, [[0], [1]], repetition_penalty=0.0)
    with pytest.raises(ValueError, match=r"logits must be \(rows, vocab\)"):
        decoding.next_tokens(logits[0], [[0]])


# ---- GPTLMHeadModel.generate --------------------------------------------------------------------
@pytest.fixture
def model():
    mt.manual_seed(0)
    return GPT2LMHeadModel(GPTConfig.tiny("gpt2", vocab_size=50))


PROMPTS = np.array([[3, 1, 4, 1], [5, 9, 2, 6]])


@pytest.mark.eq(20)   # positions continue after the cache and skip the left padding
def test_cached_sampling_equals_uncached(model):
    """Greedy decoding with and without the cache is a shared check (``tests/model_checks.py``);
    sampling from the same generator must agree too."""
    greedy = model.generate(PROMPTS, 12)
    settings = dict(do_sample=True, temperature=1.5, top_k=20, top_p=0.95,
                    repetition_penalty=1.3)
    sampled = model.generate(PROMPTS, 12, generator=mt.Generator(3), **settings)
    np.testing.assert_array_equal(
        model.generate(PROMPTS, 12, generator=mt.Generator(3), use_cache=False, **settings),
        sampled)
    assert sampled.shape == (2, 16) and (sampled[:, :4] == PROMPTS).all()
    assert not (sampled == greedy).all()
    assert not (model.generate(PROMPTS, 12, generator=mt.Generator(4), **settings)
                == sampled).all()


def test_greedy_generation_picks_the_argmax_of_the_full_forward(model):
    out = model.generate(PROMPTS[:1], 5)
    for t in range(4, 9):
        assert out[0, t] == model(out[:, :t]).logits.numpy()[0, -1].argmax()


def test_streamer_receives_every_new_token_in_order(model):
    streamed = []
    out = model.generate(PROMPTS, 6, streamer=lambda ids: streamed.append(ids.copy()))
    np.testing.assert_array_equal(np.stack(streamed, axis=1), out[:, 4:])


def test_stop_tokens_end_a_row_and_pad_it(model):
    free = model.generate(PROMPTS, 10)
    stop = int(free[0, 6])                            # the third token row 0 generates
    out = model.generate(PROMPTS, 10, eos_token_id=[stop, 49], pad_token_id=0)
    first = 4 + int(np.argmax(free[0, 4:] == stop))
    np.testing.assert_array_equal(out[0, :first + 1], free[0, :first + 1])
    assert (out[0, first + 1:] == 0).all()
    assert out.shape[1] <= free.shape[1]
    single = GPT2LMHeadModel(GPTConfig.tiny("gpt2", vocab_size=50, eos_token_id=stop))
    single.load_state_dict(model.state_dict())
    stopped = single.generate(PROMPTS[:1], 10)
    assert stopped[0, -1] == stop and stopped.shape[1] == first + 1


def test_generate_edges_and_errors(model):
    np.testing.assert_array_equal(model.generate(PROMPTS, 0), PROMPTS)
    model.train()
    model.generate(PROMPTS, 2)
    assert model.training                                   # the mode is put back
    with pytest.raises(ValueError, match=r"the prompt \(4 tokens\) plus max_new_tokens=29 is "
                                         r"longer than n_positions=32"):
        model.generate(PROMPTS, 29)
    with pytest.raises(ValueError, match="max_new_tokens must be an int"):
        model.generate(PROMPTS, -1)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.generate([[50]], 2)
    with pytest.raises(ValueError, match=r"shape \(batch, time\)"):
        model.generate([[1, 2], [3]], 2)


@pytest.mark.eq(20)   # positions continue after the cache and skip the left padding
@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_prompts_continue_as_they_would_alone(use_cache):
    mt.manual_seed(3)
    model = GPT2LMHeadModel(GPTConfig.tiny(bos_token_id=None, eos_token_id=None))
    short, long = [5, 9, 2], [7, 1, 4, 4, 8, 3]
    alone = [model.generate(np.array([p]), 6, use_cache=use_cache)[0, len(p):]
             for p in (short, long)]
    pad = len(long) - len(short)
    batch = np.array([[0] * pad + short, long])
    mask = np.array([[0] * pad + [1] * len(short), [1] * len(long)])
    together = model.generate(batch, 6, attention_mask=mask, use_cache=use_cache)[:, len(long):]
    np.testing.assert_array_equal(together[0], alone[0])
    np.testing.assert_array_equal(together[1], alone[1])
    with pytest.raises(ValueError, match=r"attention_mask of shape \(2, 5\) must match"):
        model.generate(batch, 2, attention_mask=mask[:, 1:])
