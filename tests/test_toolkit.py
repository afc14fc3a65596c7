"""The Transformer toolkit: attention with a general mask and an additive score bias, grouped-query
heads, attention cores, head masks, layers assembled from parts, shared layers, and stacks that
return every hidden state and attention map.

The mask/bias paths are checked against ``minitorch_nlp/testing/reference/transformer.py`` (one head
and one query at a time, masks as 0/1 factors, the bias added score by score), values and float64
gradients of q, k, v *and the bias* from HIPS autograd.
"""
from __future__ import annotations

import functools
import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn
from minitorch_nlp.autograd.ops_fused import Attention
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import transformer as R

pytestmark = [pytest.mark.sec4]

TOL = dict(rtol=1e-8, atol=1e-10)
SCALES = st.sampled_from([None, 1.0, 0.125, 1e-3, 30.0])
"""Attention's ``scale``: None (1/sqrt(d_k)), the survey's 1, others that no d_k gives."""


def t64(array, requires_grad=False):
    return mt.tensor(np.asarray(array, dtype=np.float64), requires_grad=requires_grad)


def head_block(array, b, h):
    """The (q_time, k_time) block of batch row b and head h of an array broadcastable to
    (batch, heads, q_time, k_time), by indexing (a size-1 axis serves every row)."""
    if array is None:
        return None
    lead = (1,) * (4 - array.ndim) + array.shape[:-2]
    index = tuple(0 if size == 1 else i for size, i in zip(lead, (b, h)))
    return array.reshape(lead + array.shape[-2:])[index]


def reference_sdpa(q, k, v, key_mask, causal, mask, bias, scale=None):
    """(B, H, Tq, d) outputs from the one-head reference, head by head."""
    batch, heads = q.shape[:2]
    return anp.stack([anp.stack([
        R.eq12_scaled_dot_product_attention(
            q[b, h], k[b, h], v[b, h], None if key_mask is None else key_mask[b], causal,
            scale=scale, mask=head_block(mask, b, h), bias=head_block(bias, b, h))
        for h in range(heads)]) for b in range(batch)])


@st.composite
def attention_problems(draw):
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    tq, d = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    tk = draw(st.integers(tq, tq + 2))
    # queries and keys of up to 100 (scores of about 1e4), and tiny ones
    q = draw(S.stress_arrays((batch, heads, tq, d), kinds=("large", "tiny"), large=100.0))
    k = draw(S.stress_arrays((batch, heads, tk, d), kinds=("large", "tiny"), large=100.0))
    v = draw(S.arrays((batch, heads, tk, d)))
    bias_shape = draw(st.sampled_from([(batch, heads, tq, tk), (1, heads, tq, tk),
                                       (batch, 1, tq, tk), (tq, tk)]))
    # a bias that masks (-1e4, -1e9 or -inf entries), sometimes a whole query row
    bias = draw(S.masked_logits(bias_shape, -2.0, 2.0, all_masked_rows=True))[0]
    mask_shape = draw(st.sampled_from([(batch, 1, tq, tk), (tq, tk), (batch, heads, tq, tk)]))
    mask = draw(S.bool_masks(mask_shape))
    key_mask = draw(st.none() | S.bool_masks((batch, tk)))
    return q, k, v, bias, mask, key_mask, draw(st.booleans())


@pytest.mark.eq(11, 12)
@settings(max_examples=25)
@given(attention_problems(), st.booleans(), st.booleans(), SCALES)
def test_mask_and_bias_match_the_reference_values_and_gradients(problem, use_mask, use_bias,
                                                                scale):
    q, k, v, bias, mask, key_mask, causal = problem
    mask = mask if use_mask else None
    bias = bias if use_bias else None
    tensors = [t64(a, requires_grad=True) for a in (q, k, v)]
    tbias = None if bias is None else t64(bias, requires_grad=True)
    out = F.scaled_dot_product_attention(*tensors, mask=mask, bias=tbias, causal=causal,
                                         key_mask=key_mask, scale=scale)
    np.testing.assert_allclose(out.numpy(),
                               reference_sdpa(q, k, v, key_mask, causal, mask, bias, scale),
                               **TOL)
    cotangent = np.random.default_rng(0).standard_normal(out.shape)
    wanted = tensors + ([] if tbias is None else [tbias])
    grads = mt.grad((out * t64(cotangent)).sum(), wanted)

    def loss(q, k, v, bias):
        return anp.sum(reference_sdpa(q, k, v, key_mask, causal, mask, bias, scale) * cotangent)

    arrays = (q, k, v, bias)
    for i, got in enumerate(grads):
        np.testing.assert_allclose(got.numpy(), autograd.grad(loss, i)(*arrays), **TOL)


@pytest.mark.eq(11)
@settings(max_examples=15)
@given(attention_problems(), SCALES)
def test_attention_weights_are_the_reference_weights(problem, scale):
    q, k, _, bias, mask, key_mask, causal = problem
    weights = F.attention_weights(t64(q), t64(k), mask=mask, bias=bias, causal=causal,
                                  key_mask=key_mask, scale=scale).numpy()
    batch, heads, tq, tk = weights.shape
    mask4, bias4 = np.broadcast_to(mask, weights.shape), np.broadcast_to(bias, weights.shape)
    for b in range(batch):
        for h in range(heads):
            expected = R.eq11_attention_weights(q[b, h], k[b, h],
                                                None if key_mask is None else key_mask[b],
                                                causal, scale, mask=mask4[b, h],
                                                bias=bias4[b, h])
            np.testing.assert_allclose(weights[b, h], expected, **TOL)


def test_the_fused_kernel_and_the_composite_agree_without_mask_or_bias():
    rng = np.random.default_rng(1)
    q, k, v = (t64(rng.standard_normal((2, 3, 5, 4))) for _ in range(3))
    key_mask = np.array([[True] * 5, [True, True, True, False, False]])
    fused = F.scaled_dot_product_attention(q, k, v, causal=True, key_mask=key_mask)
    composite = Attention.composite(q, k, v, key_mask, None, scale=0.5, causal=True)
    np.testing.assert_allclose(fused.numpy(), composite.numpy(), **TOL)


@pytest.mark.eq(12)
@settings(max_examples=15)
@given(st.sampled_from([(4, 1), (4, 2), (6, 3)]), st.booleans(), S.seeds())
def test_grouped_query_heads_equal_repeated_heads(heads, causal, seed):
    """k/v with fewer heads = every q head of a group reading its group's k/v head; the shared
    head's gradient is the sum of its group's."""
    q_heads, kv_heads = heads
    rng = np.random.default_rng(seed)
    q = t64(rng.standard_normal((2, q_heads, 3, 2)), requires_grad=True)
    k, v = (t64(rng.standard_normal((2, kv_heads, 3, 2)), requires_grad=True) for _ in range(2))
    out = F.scaled_dot_product_attention(q, k, v, causal=causal)
    group = np.arange(q_heads) // (q_heads // kv_heads)
    k_full, v_full = (t64(a.numpy()[:, group], requires_grad=True) for a in (k, v))
    expected = F.scaled_dot_product_attention(t64(q.numpy()), k_full, v_full, causal=causal)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), **TOL)
    out.sum().backward()
    expected.sum().backward()
    for shared, full in ((k, k_full), (v, v_full)):
        summed = np.zeros(shared.shape)
        np.add.at(summed, (slice(None), group), full.grad.numpy())
        np.testing.assert_allclose(shared.grad.numpy(), summed, **TOL)


@pytest.mark.eq(11, 12)
def test_attention_dropout_is_dropout_of_the_weights():
    """Read through values that are the identity, the dropped weights are the weights, each
    dropped to 0 or kept and rescaled by 1/(1-p); with other values the same draw gives those
    weights times the values; the fraction dropped is p."""
    p = 0.3
    rng = np.random.default_rng(2)
    q, k, v = (t64(rng.standard_normal((2, 4, 32, 3))) for _ in range(3))
    weights = F.attention_weights(q, k).numpy()
    identity = t64(np.broadcast_to(np.eye(32), (2, 4, 32, 32)).copy())
    dropped = F.scaled_dot_product_attention(q, k, identity, dropout_p=p,
                                             generator=mt.Generator(7)).numpy()
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], weights[kept] / (1 - p), **TOL)
    assert abs((1 - kept.mean()) - p) < 5 * math.sqrt(p * (1 - p) / kept.size)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, generator=mt.Generator(7))
    np.testing.assert_allclose(out.numpy(), dropped @ v.numpy(), **TOL)
    assert np.all(F.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy() == 0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(mask=np.ones((2, 3, 4, 4))), "mask must be a bool array broadcastable to"),
    (dict(mask=np.ones((5, 4), dtype=bool)), r"mask must be a bool array broadcastable to \(batch, "
                                             r"heads, q_time, k_time\) = \(2, 3, 4, 4\)"),
    (dict(bias=np.ones((3, 4))), r"bias must be a float tensor broadcastable to"),
    (dict(bias=mt.tensor(np.ones((4, 4), dtype=np.int64))), "bias must be a float tensor"),
    (dict(dropout_p=1.5), "the drop probability dropout_p must be a number in"),
])
def test_bad_masks_and_biases_are_named(kwargs, message):
    q = t64(np.zeros((2, 3, 4, 2)))
    with pytest.raises(ValueError, match=f"scaled_dot_product_attention: {message}"):
        F.scaled_dot_product_attention(q, q, q, **kwargs)


# ---- cores and multi-head attention --------------------------------------------------------------
def randomize(module, seed):
    module.to(mt.float64)
    rng = np.random.default_rng(seed)
    with mt.no_grad():
        for p in module.parameters():
            p.data[...] = rng.normal(0.0, 0.5, p.shape)
            p._bump_version()
    return module


def band(n, window, causal):
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return (np.abs(j - i) <= window) & ((j <= i) if causal else True)


@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_core_is_full_attention_under_its_band(causal):
    rng = np.random.default_rng(3)
    x = t64(rng.standard_normal((2, 7, 8)))
    key_mask = np.array([[True] * 7, [True] * 5 + [False] * 2])
    local = randomize(nn.MultiHeadAttention(8, 2, core=nn.SlidingWindowAttention(2)), 4)
    full = randomize(nn.MultiHeadAttention(8, 2), 4)
    expected = full(x, key_mask=key_mask, causal=causal, mask=band(7, 2, causal)).numpy()
    np.testing.assert_allclose(local(x, key_mask=key_mask, causal=causal).numpy(), expected,
                               **TOL)
    out, weights = local(x, key_mask=key_mask, causal=causal, need_weights=True)
    np.testing.assert_allclose(out.numpy(), expected, **TOL)
    assert np.all(weights.numpy()[:, :, ~band(7, 2, causal)] == 0)
    wide = randomize(nn.MultiHeadAttention(8, 2, core=nn.SlidingWindowAttention(7)), 4)
    np.testing.assert_allclose(wide(x, key_mask=key_mask, causal=causal).numpy(),
                               full(x, key_mask=key_mask, causal=causal).numpy(), **TOL)


def test_sliding_window_core_decodes_with_a_cache():
    attention = randomize(nn.MultiHeadAttention(4, 2, core=nn.SlidingWindowAttention(1)), 5)
    x = t64(np.random.default_rng(6).standard_normal((1, 5, 4)))
    full = attention(x, causal=True).numpy()
    cache = {}
    steps = [attention(x[:, t:t + 1], causal=True, cache=cache).numpy() for t in range(5)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, **TOL)


def test_head_mask_switches_heads_off():
    attention = randomize(nn.MultiHeadAttention(6, 3), 7)
    x = t64(np.random.default_rng(8).standard_normal((2, 4, 6)))
    out, weights = attention(x, head_mask=[1.0, 0.0, 1.0], need_weights=True)
    q = attention.split_heads(attention.q_proj(x))
    k, v = attention.split_heads(attention.k_proj(x)), attention.split_heads(attention.v_proj(x))
    z = F.scaled_dot_product_attention(q, k, v).numpy()
    z[:, 1] = 0
    expected = attention.out_proj(attention.merge_heads(t64(z)))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), **TOL)
    assert np.all(weights.numpy()[:, 1] == 0)
    with pytest.raises(ValueError, match=r"head_mask must have shape \(heads,\) = \(3,\)"):
        attention(x, head_mask=[1.0, 0.0])


def test_multi_head_attention_shapes_and_errors():
    attention = nn.MultiHeadAttention(8, 4, head_dim=3, num_kv_heads=2, bias=False)
    assert attention.q_proj.weight.shape == (12, 8) and attention.k_proj.weight.shape == (6, 8)
    assert attention.out_proj.bias is None
    assert attention(mt.randn(2, 5, 8)).shape == (2, 5, 8)
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        nn.MultiHeadAttention(8, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_heads=3 does not divide d_model=8"):
        nn.MultiHeadAttention(8, 3)
    with pytest.raises(ValueError, match="SlidingWindowAttention: window must be a positive int"):
        nn.SlidingWindowAttention(0)


@pytest.mark.eq(12)
def test_a_bias_reaches_its_parameter_through_a_layer():
    """T5's way: a learned table of biases, passed through the layer to the self-attention."""
    layer = randomize(nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0), 9)
    table = nn.Parameter(mt.zeros(2, 3, 3, dtype=mt.float64))
    x = t64(np.random.default_rng(10).standard_normal((1, 3, 4)))
    layer(x, bias=table).sum().backward()
    assert table.grad is not None and np.abs(table.grad.numpy()).sum() > 0
    np.testing.assert_allclose(layer(x, bias=table * 0.0).numpy(), layer(x).numpy(), **TOL)


# ---- layers from parts, stacks -------------------------------------------------------------------
class Doubling(nn.Module):
    """A stand-in feed-forward part: anything mapping (batch, time, d) to itself fits."""

    def forward(self, x):
        return x * 2.0


def test_a_layer_assembled_from_parts_reads_as_the_paper():
    attention = randomize(nn.MultiHeadAttention(4, 2), 11)
    layer = nn.TransformerLayer(attention, Doubling(), functools.partial(nn.LayerNorm, 4),
                                norm_first=True).to(mt.float64)
    x = t64(np.random.default_rng(12).standard_normal((2, 3, 4)))
    h = x + attention(layer.norm1(x))
    np.testing.assert_allclose(layer(x).numpy(), (h + 2.0 * layer.norm2(h)).numpy(), **TOL)
    post = nn.TransformerLayer(attention, Doubling(), nn.Identity)
    h = x + attention(x)
    np.testing.assert_allclose(post(x).numpy(), (h + 2.0 * h).numpy(), **TOL)


def test_decoder_only_stack_is_a_causal_encoder_stack():
    gpt = randomize(nn.DecoderOnlyStack(2, 4, 2, 8, dropout=0.0, norm_first=True), 13)
    encoder = nn.TransformerEncoder(2, 4, 2, 8, dropout=0.0, norm_first=True).to(mt.float64)
    encoder.load_state_dict(gpt.state_dict())
    x = t64(np.random.default_rng(14).standard_normal((2, 5, 4)))
    np.testing.assert_allclose(gpt(x).last_hidden_state.numpy(),
                               encoder(x, causal=True).last_hidden_state.numpy(), **TOL)


def test_one_layer_listed_three_times_shares_its_parameters():
    """ALBERT's cross-layer sharing: the same layer object at every depth."""
    layer = randomize(nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0), 15)
    stack = nn.TransformerStack([layer] * 3)
    assert len(list(stack.parameters())) == len(list(layer.parameters()))
    x = t64(np.random.default_rng(16).standard_normal((2, 3, 4)))
    out = stack(x, output_hidden_states=True)
    np.testing.assert_allclose(out.last_hidden_state.numpy(), layer(layer(layer(x))).numpy(),
                               **TOL)
    assert len(out.hidden_states) == 4
    out.last_hidden_state.sum().backward()
    copies = [nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0).to(mt.float64) for _ in range(3)]
    for copy in copies:
        copy.load_state_dict(layer.state_dict())
    nn.TransformerStack(copies)(x).last_hidden_state.sum().backward()
    for name, shared in layer.named_parameters():
        per_depth = sum(dict(copy.named_parameters())[name].grad.numpy() for copy in copies)
        np.testing.assert_allclose(shared.grad.numpy(), per_depth, **TOL)


def test_stacks_return_hidden_states_and_attention_maps():
    stack = randomize(nn.TransformerDecoder(2, 4, 2, 8, dropout=0.0), 17)
    rng = np.random.default_rng(18)
    x, memory = t64(rng.standard_normal((2, 3, 4))), t64(rng.standard_normal((2, 5, 4)))
    plain = stack(x, memory)
    assert set(plain) == {"last_hidden_state"}
    out = stack(x, memory, output_hidden_states=True, output_attentions=True)
    np.testing.assert_allclose(out.last_hidden_state.numpy(), plain.last_hidden_state.numpy(),
                               **TOL)
    assert len(out.hidden_states) == 3 and out.hidden_states[0] is x
    assert [a.shape for a in out.attentions] == [(2, 2, 3, 3)] * 2
    assert [a.shape for a in out.cross_attentions] == [(2, 2, 3, 5)] * 2
    assert np.all(np.triu(out.attentions[0].numpy()[0, 0], k=1) == 0)   # causal self-attention
    layer0 = stack.layers[0]
    np.testing.assert_allclose(out.hidden_states[1].numpy(), layer0(x, memory).numpy(), **TOL)


def test_stack_head_mask_gives_each_layer_its_row():
    stack = randomize(nn.TransformerEncoder(2, 4, 2, 8, dropout=0.0), 19)
    x = t64(np.random.default_rng(20).standard_normal((1, 3, 4)))
    ones = stack(x, head_mask=np.ones((2, 2))).last_hidden_state.numpy()
    np.testing.assert_allclose(ones, stack(x).last_hidden_state.numpy(), **TOL)
    masked = stack(x, head_mask=np.array([[1.0, 1.0], [0.0, 1.0]]), output_attentions=True)
    assert np.all(masked.attentions[1].numpy()[:, 0] == 0)
    assert np.any(masked.attentions[0].numpy()[:, 0] != 0)
    with pytest.raises(ValueError, match=r"head_mask must have shape \(layers, heads\) with 2 "
                                         r"layers, got \(3, 2\)"):
        stack(x, head_mask=np.ones((3, 2)))


def test_models_return_hidden_states_and_attentions():
    from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM
    from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig

    ids = np.array([[1, 2, 3, 4], [4, 3, 2, 1]])
    gpt = GPT2LMHeadModel(GPTConfig.tiny("gpt2")).eval()
    out = gpt(ids, output_hidden_states=True, output_attentions=True)
    layers = gpt.config.n_layer
    assert len(out.hidden_states) == layers + 1 and len(out.attentions) == layers
    np.testing.assert_allclose(gpt.transformer.lm_logits(out.hidden_states[-1]).numpy(),
                               out.logits.numpy(), rtol=1e-6, atol=1e-6)
    pruned = gpt(ids, head_mask=np.zeros((layers, gpt.config.n_head))).logits
    assert not np.allclose(pruned.numpy(), out.logits.numpy())
    bert = BertForMaskedLM(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=16,
                                      max_position_embeddings=8)).eval()
    out = bert(ids, attention_mask=[[1, 1, 1, 1], [1, 1, 0, 0]], output_attentions=True)
    assert np.all(out.attentions[0].numpy()[1, :, :, 2:] == 0)


def test_forward_hooks_on_layers_see_what_the_stack_reports():
    """Distillation reads intermediate states through hooks; they are the stack's hidden states,
    and a hook with kwargs sees the masks the stack passes on."""
    stack = randomize(nn.TransformerEncoder(2, 4, 2, 8, dropout=0.0), 21)
    seen, masks = [], []
    for layer in stack.layers:
        layer.register_forward_hook(lambda module, args, output: seen.append(output))
        layer.register_forward_pre_hook(
            lambda module, args, kwargs: masks.append(kwargs["key_mask"]), with_kwargs=True)
    x = t64(np.random.default_rng(22).standard_normal((2, 3, 4)))
    key_mask = np.array([[True, True, True], [True, True, False]])
    out = stack(x, key_mask=key_mask, output_hidden_states=True)
    for got, expected in zip(seen, out.hidden_states[1:]):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert all(mask is key_mask for mask in masks)


@pytest.mark.parametrize("causal", [False, True])
def test_the_mask_builders_feed_the_attention_path(causal):
    from minitorch_nlp.attention import sliding_window_mask

    attention = randomize(nn.MultiHeadAttention(4, 2, core=nn.SlidingWindowAttention(2)), 23)
    x = t64(np.random.default_rng(24).standard_normal((1, 9, 4)))
    mask = sliding_window_mask(9, 2, causal=causal)
    np.testing.assert_allclose(attention(x, causal=causal).numpy(),
                               attention(x, mask=mask, causal=causal, need_weights=True)[0].numpy(),
                               **TOL)
    full = randomize(nn.MultiHeadAttention(4, 2), 23)
    np.testing.assert_allclose(full(x, mask=mask).numpy(), attention(x, causal=causal).numpy(),
                               **TOL)
