"""Section VIII: Longformer's attention (Beltagy et al., 2020): a (dilated, per head) sliding
window for every token, and global attention with its own projections for chosen tokens.

``LongformerSelfAttention`` (grouped window, global keys merged by log-sum-exp, global rows
with Q_g, K_g, V_g) against the position-by-position reference of
``minitorch_nlp/testing/reference/long_attention.py`` (float64 values and gradients of the input
and every projection); then the properties: a window at least as long as the sequence is full
attention, global tokens see and are seen by all, causal outputs ignore the future; learning;
the errors.
"""
from __future__ import annotations

import functools

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn
from minitorch_nlp.attention.longformer import LongformerSelfAttention
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import long_attention as R
from tests.attention_core_checks import TOL
from tests.model_checks import overfit

pytestmark = [pytest.mark.sec8,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]

NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "qg": "query_global",
         "kg": "key_global", "vg": "value_global", "o": "out_proj"}


def parameters_of(layer):
    return {name: (getattr(layer, attr).weight.numpy(), getattr(layer, attr).bias.numpy())
            for name, attr in NAMES.items()}


@settings(max_examples=20)
@given(st.data())
def test_longformer_attention_matches_reference(data):
    heads = data.draw(st.integers(1, 2))
    time, window = data.draw(st.integers(1, 8)), data.draw(st.integers(1, 3))
    dilations = tuple(data.draw(st.integers(1, 3)) for _ in range(heads))
    causal = data.draw(st.booleans())
    is_global = (np.zeros((2, time), dtype=bool) if causal
                 else data.draw(S.bool_masks((2, time), all_false_row=False)) & (
                     np.random.default_rng(data.draw(S.seeds())).random((2, time)) < 0.3))
    key_mask = data.draw(st.none() | S.bool_masks((2, time), all_false_row=False).filter(
        lambda m: m.any(axis=1).all()))
    mt.manual_seed(data.draw(st.integers(0, 99)))
    layer = LongformerSelfAttention(2 * heads, heads, window, dilations).to(mt.float64)
    x = data.draw(S.arrays((2, time, 2 * heads)))
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(x.shape)
    tx = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    out = layer(tx, global_attention_mask=is_global, key_mask=key_mask, causal=causal)
    (out * mt.tensor(cotangent)).sum().backward()
    params = parameters_of(layer)

    def reference(x, params):
        return R.longformer_self_attention(x, params, heads, window, dilations, is_global,
                                           key_mask, causal)

    np.testing.assert_allclose(out.numpy(), reference(x, params), **TOL)
    loss = lambda x, params: anp.sum(reference(x, params) * cotangent)  # noqa: E731
    np.testing.assert_allclose(tx.grad.numpy(), autograd.grad(loss, 0)(x, params), **TOL)
    expected = autograd.grad(loss, 1)(x, params)
    for name, attr in NAMES.items():
        projection = getattr(layer, attr)
        if projection.weight.grad is None:       # global projections unused without globals
            assert not is_global.any() and name in ("qg", "kg", "vg")
            continue
        np.testing.assert_allclose(projection.weight.grad.numpy(), expected[name][0], **TOL)
        np.testing.assert_allclose(projection.bias.grad.numpy(), expected[name][1], **TOL)


@given(st.integers(1, 9), st.integers(0, 3), st.booleans(), S.seeds())
def test_a_window_as_long_as_the_sequence_is_full_attention(time, extra, causal, seed):
    mt.manual_seed(seed % 1000)
    layer = LongformerSelfAttention(8, 2, time + extra)
    x = mt.tensor(np.random.default_rng(seed).standard_normal((2, time, 8)))
    full = nn.MultiHeadAttention(8, 2)
    full.load_state_dict({k: v for k, v in layer.state_dict().items()
                          if not k.startswith(("query_global", "key_global", "value_global"))})
    np.testing.assert_allclose(layer(x, causal=causal).numpy(), full(x, causal=causal).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_global_tokens_see_and_are_seen_by_all():
    mt.manual_seed(0)
    layer = LongformerSelfAttention(8, 2, 1, dilation=(1, 2))
    x = mt.randn(1, 12, 8)
    is_global = np.zeros((1, 12), dtype=bool)
    is_global[0, [0, 7]] = True
    _, weights = layer(x, global_attention_mask=is_global, need_weights=True)
    weights = weights.numpy()[0]
    assert np.all(weights[:, [0, 7], :] > 0)          # global rows: every key
    assert np.all(weights[:, :, [0, 7]] > 0)          # global columns: every query
    assert weights[0, 3, 10] == 0 and weights[1, 4, 5] == 0   # outside window (dilation 2)
    out = layer(x, global_attention_mask=is_global)
    np.testing.assert_allclose(out.numpy(), layer(x, global_attention_mask=is_global,
                                                  need_weights=True)[0].numpy(),
                               rtol=1e-5, atol=1e-6)


def test_causal_outputs_ignore_later_tokens():
    mt.manual_seed(0)
    layer = LongformerSelfAttention(8, 2, 2, dilation=(1, 3))
    x = np.random.default_rng(0).standard_normal((1, 10, 8))
    changed = x.copy()
    changed[0, 6:] += 1.0
    before = layer(mt.tensor(x), causal=True).numpy()
    after = layer(mt.tensor(changed), causal=True).numpy()
    np.testing.assert_allclose(after[0, :6], before[0, :6], rtol=1e-6)
    assert not np.allclose(after[0, 6:], before[0, 6:])


def test_an_encoder_with_global_cls_learns_a_tiny_batch():
    """Predict each sequence's majority token at [CLS] (position 0, global): only global
    attention carries the whole sequence to it within a window of 2."""
    mt.manual_seed(0)
    d, vocab, time = 16, 4, 24
    layer = nn.TransformerLayer(LongformerSelfAttention(d, 2, 2), nn.FeedForward(d, 32),
                                functools.partial(nn.LayerNorm, d), norm_first=True)
    embed, head = nn.Embedding(vocab + 1, d), nn.Linear(d, vocab)
    modules = nn.ModuleList([embed, layer, head])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (8, time))
    ids[:, 0] = vocab                                             # [CLS]
    target = np.array([np.bincount(row[1:], minlength=vocab).argmax() for row in ids])
    is_global = np.zeros((8, time), dtype=bool)
    is_global[:, 0] = True
    def loss():
        hidden = layer(embed(mt.tensor(ids)), global_attention_mask=is_global)
        return F.cross_entropy(head(hidden[:, 0]), mt.tensor(target))

    losses = overfit(modules, loss, 60, lr=1e-2)
    assert losses[-1] < losses[0] / 3


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="window"):
        LongformerSelfAttention(8, 2, 0)
    with pytest.raises(ValueError, match="one int or one per head"):
        LongformerSelfAttention(8, 2, 2, dilation=(1, 2, 3))
    layer = LongformerSelfAttention(8, 2, 2)
    x = mt.randn(1, 5, 8)
    with pytest.raises(ValueError, match=r"global_attention_mask of shape \(1, 4\)"):
        layer(x, global_attention_mask=np.ones((1, 4), dtype=bool))
    with pytest.raises(ValueError, match="leave global_attention_mask out when causal"):
        layer(x, global_attention_mask=np.ones((1, 5), dtype=bool), causal=True)
    with pytest.raises(ValueError, match="self-attention"):
        layer(x, x)
