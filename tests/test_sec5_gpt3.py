"""Section V-F: GPT-3 (Brown et al., 2020): Table 2.1's sizes counted from shapes, alternating
dense and locally banded attention, and the in-context evaluation harness.

The language model's maths is GPT-2's (eq 18-21, checked in ``test_sec5_gpt2.py``); here, what
GPT-3 changes: its banded blocks (equal to GPT-2 when the band covers the context, different
otherwise, causal either way -- the shared checks of ``tests/model_checks.py``), its parameter
counts, and zero-/one-/few-shot evaluation, checked with an oracle language model that knows the
task and one that knows nothing.
"""
from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.data import reverse_task
from minitorch_nlp.data.tokenizers.char import CharTokenizer
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from minitorch_nlp.models.gpt3 import (GPT3_SIZES, FewShotTask, GPT3Config, GPT3LMHeadModel,
                                       build_prompt, count_parameters, evaluate_in_context,
                                       parameter_shapes, score_completions)
from minitorch_nlp.nn import FullAttention, SlidingWindowAttention
from tests.model_checks import ModelChecks, causal_lm_spec

pytestmark = [pytest.mark.sec5,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]


# ---- Table 2.1 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(GPT3_SIZES))
def test_table_2_1_parameter_counts_from_shapes(name):
    size, config = GPT3_SIZES[name], GPT3Config.preset(name)
    assert (config.n_layer, config.n_positions, config.vocab_size) == (size.n_layer, 2048, 50257)
    assert config.n_embd // config.n_head == size.d_head
    # Table 2.1 rounds: 125M is 125.2M, 350M is 355.9M, 2.7B is 2.65B, 175.0B is 174.6B
    assert count_parameters(config) == pytest.approx(size.reported_parameters, rel=0.02)


def test_the_175b_count_allocates_nothing():
    tracemalloc.start()
    count = count_parameters(GPT3Config.preset("gpt3-175b"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 174_604_259_328 and peak < 1_000_000


@pytest.mark.parametrize("config", [GPT3Config.tiny(),
                                    GPT3Config.tiny(n_layer=3, n_embd=24, n_head=3, n_inner=40)])
def test_parameter_shapes_are_the_models(config):
    model = GPT3LMHeadModel(config)
    assert {name: tuple(p.shape) for name, p in model.named_parameters()} == \
        parameter_shapes(config)
    assert model.num_parameters() == count_parameters(config)


def test_presets_refuse_unknown_sizes_and_fix_the_inconsistent_rows():
    with pytest.raises(ValueError, match="unknown size 'gpt3-1t'; sizes: gpt3-small"):
        GPT3Config.preset("gpt3-1t")
    assert (GPT3Config.preset("gpt3-xl").n_head, GPT3Config.preset("gpt3-13b").n_embd) == \
        (16, 5120)


# ---- alternating dense and banded attention ------------------------------------------------------
def test_odd_blocks_attend_within_the_band_even_blocks_to_everything():
    model = GPT3LMHeadModel(GPT3Config.tiny(n_layer=4, attention_window=5))
    cores = [layer.self_attn.core for layer in model.transformer.blocks.layers]
    assert [type(core) for core in cores] == [FullAttention, SlidingWindowAttention] * 2
    assert all(core.window == 5 for core in cores[1::2])


def _gpt2_with_the_weights_of(model):
    gpt2 = GPT2LMHeadModel(GPTConfig.tiny())
    gpt2.load_state_dict(model.state_dict())
    return gpt2


def test_a_band_as_wide_as_the_context_is_gpt2_and_a_narrow_band_is_not():
    ids = np.random.default_rng(0).integers(0, 100, (2, 20))
    wide = GPT3LMHeadModel(GPT3Config.tiny(attention_window=32))
    np.testing.assert_allclose(wide(ids).logits.numpy(),
                               _gpt2_with_the_weights_of(wide)(ids).logits.numpy(),
                               rtol=1e-5, atol=1e-6)
    narrow = GPT3LMHeadModel(GPT3Config.tiny(attention_window=2))
    gpt2 = _gpt2_with_the_weights_of(narrow)
    first_three = np.s_[:, :3]          # within the band: the same; further on: not
    np.testing.assert_allclose(narrow(ids).logits.numpy()[first_three],
                               gpt2(ids).logits.numpy()[first_three], rtol=1e-5, atol=1e-6)
    assert not np.allclose(narrow(ids).logits.numpy(), gpt2(ids).logits.numpy(), atol=1e-4)


def test_gpt3_config_errors():
    with pytest.raises(ValueError, match="attention_window must be a positive int, got 0"):
        GPT3Config.tiny(attention_window=0)
    with pytest.raises(ValueError, match="variant must be 'gpt2'"):
        GPT3Config(variant="gpt1")
    with pytest.raises(TypeError, match="GPT3LMHeadModel needs a GPT3Config"):
        GPT3LMHeadModel(GPTConfig.tiny())


class TestGPT3Checks(ModelChecks):
    """Causality, padding, the cache through the banded blocks, round trips, learning, dtypes,
    backends, dropout: ``tests/model_checks.py``."""

    spec = causal_lm_spec(
        "GPT3LMHeadModel", GPT3LMHeadModel, GPT3Config.tiny, hf=False,
        skips={"hf_round_trip": "GPT-3 has no HuggingFace architecture (its weights were never "
                                "released)"})


# ---- in-context evaluation -----------------------------------------------------------------------
TASK = FewShotTask.from_pairs("reverse", "Reverse the letters.",
                              reverse_task(12, 2, 4, alphabet="abcd", seed=1))
TOKENIZER = CharTokenizer.train("abcd =\n" + TASK.description, special_tokens={})


class OracleLM:
    """A stand-in language model that knows the task: after "context =" it puts all its mass on
    " " + reversed(context) + "\\n", one character at a time; anywhere else it is uniform."""

    config = SimpleNamespace(n_positions=512)

    def __call__(self, ids):
        ids = np.asarray(ids)
        logits = np.zeros(ids.shape + (len(TOKENIZER),))
        for t in range(ids.shape[1]):
            line = TOKENIZER.decode(list(ids[0, :t + 1])).split("\n")[-1]
            context, sep, written = line.partition(" =")
            if sep:
                expected = " " + context[::-1] + "\n"
                if expected.startswith(written) and len(written) < len(expected):
                    logits[0, t, TOKENIZER.convert_tokens_to_ids(expected[len(written)])] = 50.0
        return SimpleNamespace(logits=mt.tensor(logits))


class UniformLM(OracleLM):
    def __call__(self, ids):
        return SimpleNamespace(logits=mt.zeros(*np.shape(ids), len(TOKENIZER)))


def test_prompts_are_description_demonstrations_then_the_query():
    demos = [("ab", "ba"), ("cad", "dac")]
    assert build_prompt(TASK, "dc", demos) == \
        "Reverse the letters.\nab = ba\ncad = dac\ndc ="
    assert build_prompt(TASK, "dc", []) == "Reverse the letters.\ndc ="


def test_completion_scores_are_the_models_log_likelihoods():
    mt.manual_seed(0)
    model = GPT3LMHeadModel(GPT3Config.tiny(vocab_size=len(TOKENIZER), n_positions=64))
    prompt = "Reverse the letters.\nab = ba\ncd ="
    scores = score_completions(model, TOKENIZER, prompt, ["dc", "cd"])
    for completion, score in zip(["dc", "cd"], scores):
        ids = TOKENIZER.encode(prompt + " " + completion, add_special_tokens=False)
        logits = model(np.asarray([ids])).logits.numpy()[0].astype(np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        start = len(TOKENIZER.encode(prompt, add_special_tokens=False))
        expected = sum(log_probs[t - 1, ids[t]] for t in range(start, len(ids)))
        assert score == pytest.approx(expected, rel=1e-5)
    per_token = score_completions(model, TOKENIZER, prompt, ["dc"], per_token=True)
    assert per_token[0] == pytest.approx(scores[0] / 3, rel=1e-6)       # " dc": 3 tokens


@pytest.mark.parametrize("shots", [0, 1, 3])
@pytest.mark.parametrize("method", ["likelihood", "greedy"])
def test_an_oracle_scores_one_and_a_uniform_model_zero(shots, method):
    assert evaluate_in_context(OracleLM(), TOKENIZER, TASK, shots, method=method,
                               num_queries=5) == 1.0
    # per token, every candidate ties under a uniform model: a tie is wrong, as is an empty answer
    assert evaluate_in_context(UniformLM(), TOKENIZER, TASK, shots, method=method,
                               num_queries=5, per_token=True) == 0.0


def test_demonstrations_never_contain_the_query():
    seen = []

    class Recording(OracleLM):
        def __call__(self, ids):
            seen.append(TOKENIZER.decode(list(np.asarray(ids)[0])))
            return super().__call__(ids)
    evaluate_in_context(Recording(), TOKENIZER, TASK, 4, method="greedy", num_queries=6)
    for text in seen:
        lines = text.split("\n")
        query = lines[5].split(" =")[0]
        assert all(not line.startswith(query + " =") for line in lines[1:5])


@pytest.mark.parametrize("kwargs, message", [
    (dict(shots=-1), "shots must be an int >= 0"),
    (dict(shots=12), "12 demonstrations need at least 13 examples"),
    (dict(shots=1, method="beam"), "method must be one of"),
    (dict(shots=1, num_candidates=1), r"num_candidates must be in \[2, "),
    (dict(shots=1, num_queries=0), "num_queries must be a positive int"),
])
def test_evaluation_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        evaluate_in_context(OracleLM(), TOKENIZER, TASK, **kwargs)


def test_a_prompt_longer_than_the_context_is_refused():
    model = GPT3LMHeadModel(GPT3Config.tiny(vocab_size=len(TOKENIZER)))    # 32 positions
    with pytest.raises(ValueError, match="longer than the model's n_positions=32"):
        evaluate_in_context(model, TOKENIZER, TASK, 5)
    with pytest.raises(ValueError, match="needs at least 2 examples"):
        FewShotTask("one", "?", (("a", "a"),))
