"""Section V-A: GPT-2 (Radford et al., 2019): GPT-1's model with pre-LN blocks, a final
LayerNorm and residual projections initialised with std 0.02 / sqrt(2 n_layer).

The language model against the autograd.numpy reference (``minitorch_nlp/testing/reference/gpt.py``,
eq 18-21 with ``pre_ln``), the initialisation, the cache, the config's HuggingFace round trip;
causality, padding, cached = uncached, round trips and learning are the shared checks of
``tests/model_checks.py``. Generation is tested in ``test_generation.py``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig, GPTModel
from tests.model_checks import (ModelChecks, causal_lm_spec, check_gpt_lm_against_reference,
                                gpt_lm_case)

pytestmark = [pytest.mark.sec5,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]


@pytest.mark.eq(18, 19, 20, 21)
@given(st.data())
def test_eq18_to_21_gpt2_language_model_matches_reference(data):
    check_gpt_lm_against_reference(GPT2LMHeadModel, data.draw(gpt_lm_case("gpt2")))


def test_gpt2_layout_is_pre_ln_with_a_final_norm():
    model = GPTModel(GPTConfig.tiny("gpt2"))
    assert model.blocks.norm is not None
    assert all(layer.norm_first for layer in model.blocks.layers)
    assert model.blocks.layers[0].feed_forward.activation == "gelu_tanh"
    assert model.blocks.norm.eps == 1e-5


def test_residual_projections_start_with_std_002_over_sqrt_2n():
    n_layer = 8
    model = GPTModel(GPTConfig(n_embd=128, n_head=4, n_layer=n_layer, vocab_size=1000,
                               n_positions=64))
    residual = 0.02 / math.sqrt(2 * n_layer)
    for layer in model.blocks.layers:
        assert layer.self_attn.out_proj.weight.numpy().std() == pytest.approx(residual, rel=0.05)
        assert layer.feed_forward.linear2.weight.numpy().std() == pytest.approx(residual, rel=0.05)
        assert layer.self_attn.q_proj.weight.numpy().std() == pytest.approx(0.02, rel=0.05)
        assert layer.feed_forward.linear1.weight.numpy().std() == pytest.approx(0.02, rel=0.05)
    assert model.wte.weight.numpy().std() == pytest.approx(0.02, rel=0.05)


class TestGPT2Checks(ModelChecks):
    """Causality, right and left padding, the cache, round trips, learning, dtypes, backends,
    dropout: ``tests/model_checks.py``."""

    spec = causal_lm_spec("GPT2LMHeadModel", GPT2LMHeadModel, GPTConfig.tiny)


def test_cache_is_returned_filled_and_bounded_by_n_positions():
    model = GPT2LMHeadModel(GPTConfig.tiny("gpt2"))
    ids = np.random.default_rng(1).integers(0, 100, (3, 10))
    cache = model.transformer.new_cache()
    chunks = [model(ids[:, a:b], cache=cache) for a, b in ((0, 4), (4, 5), (5, 10))]
    assert chunks[-1].past_key_values is cache and cache[0]["self"]["k"].shape == (3, 4, 10, 8)
    with pytest.raises(ValueError, match="33 tokens is longer than n_positions=32"):
        model(np.zeros((3, 23), dtype=np.int64), cache=cache)


def test_token_type_ids_add_rows_of_the_token_embedding():
    model = GPTModel(GPTConfig.tiny("gpt2"))
    ids, types = np.array([[1, 2, 3]]), np.array([[4, 4, 5]])
    with_types = model(ids, token_type_ids=types).last_hidden_state.numpy()
    model.wpe.table.data[:3] += model.wte.weight.data[types[0]]
    np.testing.assert_allclose(model(ids).last_hidden_state.numpy(), with_types, rtol=1e-5,
                               atol=1e-6)


def test_config_round_trips_through_huggingface_fields():
    for config in (GPTConfig.tiny("gpt2", n_inner=48, eos_token_id=3, bos_token_id=3),
                   GPTConfig.tiny("gpt1"), GPTConfig.gpt2(), GPTConfig.gpt1()):
        assert GPTConfig.from_hf(config.to_hf()) == config
    assert GPTConfig.gpt2().to_hf()["activation_function"] == "gelu_new"
    assert GPTConfig.gpt1().to_hf()["afn"] == "gelu"           # HF's "gelu" is the tanh form
    assert GPTConfig.gpt2().d_ff == 3072 and GPTConfig.gpt1().n_positions == 512


def test_config_refuses_what_it_cannot_represent():
    with pytest.raises(ValueError, match="model_type must be"):
        GPTConfig.from_hf({"model_type": "bert"})
    with pytest.raises(ValueError, match="activation_function='silu' is not supported"):
        GPTConfig.from_hf({"model_type": "gpt2", "activation_function": "silu"})
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx=True"):
        GPTConfig.from_hf({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": True})
    with pytest.raises(ValueError, match="tie_word_embeddings=False"):
        GPTConfig.from_hf({"model_type": "gpt2", "tie_word_embeddings": False})
    with pytest.raises(ValueError, match="has no 'gelu' activation"):
        GPTConfig.tiny("gpt1", activation="gelu").to_hf()
    with pytest.raises(ValueError, match="fixed feed-forward width"):
        GPTConfig.tiny("gpt1", n_inner=10).to_hf()
