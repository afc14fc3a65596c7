"""Section IV-A: the Transformer (Vaswani et al., 2017), eq 11-12.

Forward values and gradients of the attention weights (eq 11), scaled dot-product and multi-head
attention (eq 12) and whole encoder / decoder layers against the autograd.numpy references in
``minitorch_nlp/testing/reference/transformer.py`` (float64); then what holds by
construction: causal attention ignores the future, an encoder without positions is
permutation-equivariant, a fully padded row gives no NaN, beam 1 equals greedy. Both layer layouts
of the model also run the shared checks of ``tests/model_checks.py``: the decoder is causal, padding
changes nothing, cached decoding equals uncached, round trips, dtypes, backends, dropout, and it
learns to reverse sequences.
"""
from __future__ import annotations

import autograd
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn
from minitorch_nlp.models.transformer import Transformer
from minitorch_nlp.testing import check_equation, strategies as S
from tests.model_checks import (Learning, ModelChecks, ModelSpec, assert_trees_close,
                                attention_parameters, feed_one_at_a_time, grads_of,
                                layer_parameters, randomize, to_numpy)
from minitorch_nlp.testing.reference import transformer as R

pytestmark = [pytest.mark.sec4,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]

TOL = dict(rtol=1e-7, atol=1e-10)


# ---- helpers -------------------------------------------------------------------------------------
def t64(array, requires_grad=False):
    return mt.tensor(array, dtype=mt.float64, requires_grad=requires_grad)


def tiny_transformer(seed=0, **overrides):
    mt.manual_seed(seed)
    config = dict(d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
                  dropout=0.0, max_len=32, label_smoothing=0.0)
    config.update(overrides)
    return Transformer(12, **config)


# ---- eq 11-12 against the references -------------------------------------------------------------
@pytest.mark.eq(11)
def test_eq11_attention_weights_match_reference():
    check_equation(11, nn.attention_weights)


@pytest.mark.eq(11)
def test_eq11_rows_are_distributions_over_visible_keys():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 1, 3, 8)), rng.standard_normal((2, 1, 4, 8))
    key_mask = np.array([[True, True, False, True], [False, False, False, False]])
    weights = nn.attention_weights(t64(q), t64(k), key_mask=key_mask, causal=True).numpy()
    np.testing.assert_allclose(weights[0].sum(-1), 1.0)
    assert np.all(weights[0][..., 2] == 0)              # the padded key gets nothing
    assert np.all(np.triu(weights[0, 0], k=2) == 0)    # 3 queries, 4 keys: query i sees keys <= i+1
    assert np.all(weights[1] == 0)                      # a fully padded row gives zeros, not NaN


@pytest.mark.eq(11)
def test_eq11_uses_the_original_scale_not_the_surveys():
    """The survey's softmax(Q K^T) omits 1/sqrt(d_k); the paper's (and ours) has it."""
    q, k = np.random.default_rng(1).standard_normal((2, 1, 1, 3, 16))
    scaled = nn.attention_weights(t64(q), t64(k)).numpy()
    unscaled = nn.attention_weights(t64(q), t64(k), scale=1.0).numpy()
    scores = q[0, 0] @ k[0, 0].T
    np.testing.assert_allclose(scaled[0, 0], np.exp(scores / 4) / np.exp(scores / 4).sum(
        -1, keepdims=True), **TOL)
    np.testing.assert_allclose(unscaled[0, 0], np.exp(scores) / np.exp(scores).sum(
        -1, keepdims=True), **TOL)


@pytest.mark.eq(12)
def test_eq12_scaled_dot_product_attention_matches_reference():
    check_equation(12, F.scaled_dot_product_attention)


@pytest.mark.eq(12)
@settings(max_examples=15)
@given(st.data())
def test_eq12_multi_head_attention_matches_reference(data):
    heads, head_dim = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
    batch, n_q = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 4))
    cross, causal = data.draw(st.booleans()), data.draw(st.booleans())
    n_k = data.draw(st.integers(1, 4)) if cross else n_q
    d_model = heads * head_dim
    attention = randomize(nn.MultiHeadAttention(d_model, heads), data.draw(S.seeds()))
    query = data.draw(S.arrays((batch, n_q, d_model)))
    key = data.draw(S.arrays((batch, n_k, d_model))) if cross else query
    key_mask = data.draw(st.none() | S.bool_masks((batch, n_k)))
    params = attention_parameters(attention)

    tq = t64(query, requires_grad=True)
    tk = t64(key, requires_grad=True) if cross else None
    out = attention(tq, tk, key_mask=key_mask, causal=causal)

    def reference(q, k, p):
        return R.eq12_multi_head_attention(q, k if cross else q, k if cross else q, p, heads,
                                           key_mask, causal)

    expected = reference(query, key, to_numpy(params))
    np.testing.assert_allclose(out.numpy(), expected, **TOL)
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(expected.shape)
    out.backward(t64(cotangent))

    def loss(q, k, p):
        return autograd.numpy.sum(reference(q, k, p) * cotangent)

    np.testing.assert_allclose(tq.grad.numpy(), autograd.grad(loss, 0)(query, key,
                                                                        to_numpy(params)), **TOL)
    if cross:
        np.testing.assert_allclose(tk.grad.numpy(), autograd.grad(loss, 1)(query, key,
                                                                            to_numpy(params)),
                                   **TOL)
    assert_trees_close(grads_of(params), autograd.grad(loss, 2)(query, key, to_numpy(params)))


@pytest.mark.eq(11, 12)
def test_need_weights_agrees_with_the_fused_output():
    """The explicit weights (eq 11) times the values, heads merged and projected, are the
    layer's output (eq 12): both paths compute the same attention."""
    attention = randomize(nn.MultiHeadAttention(6, 3), 0)
    x = t64(np.random.default_rng(2).standard_normal((2, 5, 6)))
    key_mask = np.array([[True] * 5, [True, True, True, False, False]])
    out, weights = attention(x, key_mask=key_mask, causal=True, need_weights=True)
    values = attention.split_heads(attention.v_proj(x))
    rebuilt = attention.out_proj(attention.merge_heads(weights @ values))
    np.testing.assert_allclose(out.numpy(), rebuilt.numpy(), **TOL)
    assert weights.shape == (2, 3, 5, 5)


@pytest.mark.eq(12)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_reference(norm_first, activation):
    layer = randomize(nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, activation=activation,
                                                 norm_first=norm_first), 3)
    x = np.random.default_rng(4).standard_normal((2, 3, 4))
    key_mask = np.array([[True, True, True], [True, False, False]])
    params = layer_parameters(layer)
    tx = t64(x, requires_grad=True)
    out = layer(tx, key_mask=key_mask)

    def reference(x, p):
        return R.encoder_layer(x, p, 2, norm_first, key_mask, activation=activation)

    np.testing.assert_allclose(out.numpy(), reference(x, to_numpy(params)), **TOL)
    cotangent = np.random.default_rng(5).standard_normal(out.shape)
    out.backward(t64(cotangent))

    def loss(x, p):
        return autograd.numpy.sum(reference(x, p) * cotangent)

    np.testing.assert_allclose(tx.grad.numpy(), autograd.grad(loss, 0)(x, to_numpy(params)),
                               **TOL)
    assert_trees_close(grads_of(params), autograd.grad(loss, 1)(x, to_numpy(params)))


@pytest.mark.eq(12)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_matches_reference(norm_first):
    layer = randomize(nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, norm_first=norm_first), 6)
    rng = np.random.default_rng(7)
    x, memory = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 4))
    memory_mask = np.array([[True, True, True, True], [True, True, False, False]])
    params = layer_parameters(layer)
    tx, tm = t64(x, requires_grad=True), t64(memory, requires_grad=True)
    out = layer(tx, tm, memory_key_mask=memory_mask)

    def reference(x, m, p):
        return R.decoder_layer(x, m, p, 2, norm_first, memory_key_mask=memory_mask)

    np.testing.assert_allclose(out.numpy(), reference(x, memory, to_numpy(params)), **TOL)
    cotangent = rng.standard_normal(out.shape)
    out.backward(t64(cotangent))

    def loss(x, m, p):
        return autograd.numpy.sum(reference(x, m, p) * cotangent)

    arrays = (x, memory, to_numpy(params))
    np.testing.assert_allclose(tx.grad.numpy(), autograd.grad(loss, 0)(*arrays), **TOL)
    np.testing.assert_allclose(tm.grad.numpy(), autograd.grad(loss, 1)(*arrays), **TOL)
    assert_trees_close(grads_of(params), autograd.grad(loss, 2)(*arrays))


# ---- positions, feed-forward, stacks ------------------------------------------------------------
def test_sinusoidal_encoding_is_the_papers():
    for d_model in (6, 7):
        table = nn.SinusoidalPositionalEncoding(d_model, max_len=30).table.numpy()
        np.testing.assert_allclose(table, R.sinusoidal_positions(30, d_model), rtol=1e-6,
                                   atol=1e-6)


@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_positions_start_offset_and_ids(kind):
    layer = (nn.SinusoidalPositionalEncoding(4, max_len=10) if kind == "sinusoidal"
             else nn.LearnedPositionalEmbedding(10, 4))
    x = mt.zeros(2, 3, 4)
    table = layer.table.numpy()
    np.testing.assert_allclose(layer(x, start=5).numpy()[1], table[5:8])
    ids = np.array([[0, 1, 2], [3, 0, 9]])
    np.testing.assert_allclose(layer(x, position_ids=ids).numpy(), table[ids])
    with pytest.raises(ValueError, match="max_len=10"):
        layer(mt.zeros(1, 4, 4), start=7)
    with pytest.raises(ValueError, match="position ids"):
        layer(x, position_ids=ids + 5)


def test_learned_positions_train_only_the_rows_used():
    layer = nn.LearnedPositionalEmbedding(6, 3)
    layer(mt.zeros(2, 2, 3), start=1).sum().backward()
    grad = layer.table.grad.numpy()
    assert np.all(grad[1:3] == 2) and np.all(grad[[0, 3, 4, 5]] == 0)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
def test_feed_forward_activations(activation):
    ff = randomize(nn.FeedForward(3, 5, activation=activation), 8)
    x = np.random.default_rng(9).standard_normal((2, 3))
    hidden = x @ ff.linear1.weight.numpy().T + ff.linear1.bias.numpy()
    act = {"relu": np.maximum(hidden, 0),
           "gelu": F.gelu(t64(hidden)).numpy(),
           "gelu_tanh": F.gelu(t64(hidden), approximate="tanh").numpy()}[activation]
    expected = act @ ff.linear2.weight.numpy().T + ff.linear2.bias.numpy()
    np.testing.assert_allclose(ff(t64(x)).numpy(), expected, **TOL)


def test_final_norm_defaults_follow_the_layout():
    assert nn.TransformerEncoder(1, 4, 2, 8, norm_first=True).norm is not None
    assert nn.TransformerEncoder(1, 4, 2, 8, norm_first=False).norm is None
    assert nn.TransformerDecoder(1, 4, 2, 8, norm_first=False, final_norm=True).norm is not None


# ---- errors --------------------------------------------------------------------------------------
def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match=r"num_heads=3.*d_model=10"):
        nn.MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match=r"num_heads=3.*d_model=10"):
        nn.TransformerEncoder(2, 10, 3, 16)


def test_wrong_masks_and_shapes_are_named():
    attention = nn.MultiHeadAttention(4, 2)
    x = mt.zeros(2, 3, 4)
    with pytest.raises(ValueError, match=r"key_mask must be a bool array of shape .*\(2, 3\)"):
        attention(x, key_mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match="key_mask must be a bool"):
        attention(x, key_mask=np.ones((2, 3), np.int64))
    with pytest.raises(ValueError, match=r"query must be a Tensor of shape \(batch, time, "
                                         r"d_model=4\)"):
        attention(mt.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="same batch"):
        attention(x, mt.zeros(3, 3, 4))
    with pytest.raises(ValueError, match="activation"):
        nn.FeedForward(4, 8, activation="swish")
    with pytest.raises(ValueError, match="share_embeddings"):
        Transformer(10, 12)


# ---- properties ---------------------------------------------------------------------------------
@pytest.mark.eq(12)
@settings(max_examples=15)
@given(st.integers(2, 6), st.data())
def test_causal_output_at_t_ignores_later_inputs(length, data):
    attention = randomize(nn.MultiHeadAttention(4, 2), data.draw(S.seeds()))
    t = data.draw(st.integers(0, length - 2))
    x = data.draw(S.arrays((2, length, 4)))
    changed = x.copy()
    changed[:, t + 1:] = data.draw(S.arrays((2, length - t - 1, 4)))
    before = attention(t64(x), causal=True).numpy()
    after = attention(t64(changed), causal=True).numpy()
    np.testing.assert_allclose(after[:, :t + 1], before[:, :t + 1], **TOL)


@settings(max_examples=10)
@given(st.integers(2, 6), st.data())
def test_encoder_without_positions_is_permutation_equivariant(length, data):
    encoder = randomize(nn.TransformerEncoder(2, 4, 2, 8, dropout=0.0), data.draw(S.seeds()))
    x = data.draw(S.arrays((2, length, 4)))
    key_mask = data.draw(S.bool_masks((2, length), all_false_row=False))
    perm = np.array(data.draw(st.permutations(range(length))))
    out = encoder(t64(x), key_mask=key_mask).last_hidden_state.numpy()
    permuted = encoder(t64(x[:, perm]), key_mask=key_mask[:, perm]).last_hidden_state.numpy()
    np.testing.assert_allclose(permuted, out[:, perm], rtol=1e-9, atol=1e-9)


@pytest.mark.eq(12)
def test_fully_padded_rows_give_no_nan():
    attention = randomize(nn.MultiHeadAttention(4, 2), 10)
    x = t64(np.random.default_rng(11).standard_normal((2, 3, 4)), requires_grad=True)
    key_mask = np.array([[True, False, True], [False, False, False]])
    out = attention(x, key_mask=key_mask)
    # no visible key: the heads give 0, so the row is the output projection's bias
    np.testing.assert_allclose(out.numpy()[1], np.broadcast_to(attention.out_proj.bias.numpy(),
                                                               (3, 4)), **TOL)
    out.sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    assert all(np.isfinite(p.grad.numpy()).all() for p in attention.parameters())

    model = tiny_transformer()
    src = np.array([[3, 4, 5], [0, 0, 0]])                # the second source is all padding
    tgt_in, tgt_out = np.array([[1, 6, 7], [1, 8, 0]]), np.array([[6, 7, 2], [8, 2, 0]])
    loss = model.loss(src, tgt_in, mt.tensor(tgt_out))
    loss.backward()
    assert np.isfinite(loss.item())
    assert all(np.isfinite(p.grad.numpy()).all() for p in model.parameters())
    assert np.isfinite(model.greedy_decode(src, max_len=4)).all()


# ---- the model -----------------------------------------------------------------------------------
def test_embeddings_are_shared_scaled_and_tied():
    model = tiny_transformer()
    assert model.tgt_embed is model.src_embed
    assert sum(p is model.src_embed.weight for p in model.parameters()) == 1
    ids = np.array([[3, 4]])
    expected = model.src_embed.weight.numpy()[ids] * 4.0 + model.positions.table.numpy()[:2]
    np.testing.assert_allclose(model.embed(ids, model.src_embed).numpy(), expected, rtol=1e-6)
    hidden = mt.randn(1, 2, 16)
    np.testing.assert_allclose(F.linear(hidden, model.src_embed.weight).numpy(),
                               hidden.numpy() @ model.src_embed.weight.numpy().T, rtol=1e-5)
    separate = Transformer(10, 12, d_model=8, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=8, share_embeddings=False)
    logits = separate(np.array([[3, 4]]), np.array([[1, 11, 5]]))
    assert logits.shape == (1, 3, 12)


def test_loss_is_label_smoothed_and_ignores_padding():
    model = tiny_transformer(label_smoothing=0.1).to(mt.float64)
    src = np.array([[3, 4, 5], [6, 7, 0]])
    tgt_in, tgt_out = np.array([[1, 8, 9], [1, 10, 0]]), np.array([[8, 9, 2], [10, 2, 0]])
    logits = model(src, tgt_in).numpy()
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = tgt_out != 0
    per_token = (0.9 * -np.take_along_axis(log_p, tgt_out[..., None], -1)[..., 0]
                 + 0.1 * -log_p.mean(-1))
    expected = per_token[real].mean()
    np.testing.assert_allclose(model.loss(src, tgt_in, mt.tensor(tgt_out)).item(), expected,
                               rtol=1e-9)


def test_kv_cache_holds_every_step_and_the_source_once():
    model = tiny_transformer().to(mt.float64)
    state = model.start_decoding(np.array([[3, 4, 5, 0], [6, 7, 8, 9]]))
    for token in (1, 10, 11, 4, 5):
        _, state = model.step(np.full(2, token), state)
    assert state["cache"][0]["self"]["k"].shape == (2, 2, 5, 8)
    assert state["cache"][0]["cross"]["k"].shape == (2, 2, 4, 8)


@pytest.mark.eq(12)   # attention over cached keys: queries aligned with the last keys
def test_kv_cache_in_a_causal_encoder_stack():
    """The decoder-only use (GPT): a causal stack fed one token at a time with a cache equals the
    stack run on the whole sequence, and feeding two tokens at once works too."""
    stack = randomize(nn.TransformerEncoder(2, 4, 2, 8, dropout=0.0, norm_first=True), 12)
    x = t64(np.random.default_rng(13).standard_normal((2, 5, 4)))
    def run(x, cache=None):
        return stack(x, causal=True, cache=cache).last_hidden_state.numpy()

    full = run(x)
    cache = stack.new_cache()
    steps = [run(x[:, :2], cache)] + [run(x[:, t:t + 1], cache) for t in range(2, 5)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-9, atol=1e-9)


@pytest.mark.eq(12)   # attention over cached keys: queries aligned with the last keys
def test_beam_one_equals_greedy_and_cached_beams_equal_uncached():
    model = tiny_transformer(seed=3)
    src = np.array([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0], [11, 3, 0, 0, 0]])
    cached = model.greedy_decode(src, max_len=8)
    beam_ids, _ = model.beam_decode(src, beam_size=1, max_len=8)
    np.testing.assert_array_equal(beam_ids[:, :cached.shape[1]], cached)
    assert np.all(beam_ids[:, cached.shape[1]:] == model.pad_id)
    wide_cached, scores = model.beam_decode(src, beam_size=3, max_len=8)
    wide_uncached, _ = model.beam_decode(src, beam_size=3, max_len=8, use_cache=False)
    np.testing.assert_array_equal(wide_cached, wide_uncached)
    assert scores.shape == (3,) and model.training       # decoding put the mode back


# ---- the shared checks ---------------------------------------------------------------------------
VOCAB, PAD, BOS = 12, 0, 1
SOURCE = np.array([[3, 4, 5, 6, PAD]])       # padding in the source too


def transformer_spec(norm_first):
    """The encoder-decoder under the shared checks. ``forward`` reads ``ids`` as the source and,
    from <bos> on, as the (padded) target, so that padding both sides is checked; ``causal`` varies
    the target under a fixed (padded) source; the reverse-a-sequence task is learnt 20-fold in 150
    steps and greedy decoding then gives the targets back."""

    def build(dropout=0.0):
        return Transformer(VOCAB, d_model=32, num_heads=4, num_encoder_layers=2,
                           num_decoder_layers=2, d_ff=64, dropout=dropout, max_len=32,
                           label_smoothing=0.0, norm_first=norm_first)

    def forward(model, ids, mask):
        tgt = np.where(mask, ids, PAD)
        tgt[:, 0] = BOS
        return model(ids, tgt, mask, mask)

    def incremental(model, ids):
        return feed_one_at_a_time(model.step, model.start_decoding(SOURCE.repeat(len(ids), 0)),
                                  ids)

    def reversal_batch():
        src = np.random.default_rng(0).integers(3, VOCAB, (8, 5))
        body = src[:, ::-1]
        tgt_in = np.concatenate([np.full((8, 1), BOS), body], 1)
        return src, tgt_in, mt.tensor(np.concatenate([body, np.full((8, 1), 2)], 1))

    def decodes_the_targets(model, batch):
        src, tgt_in, _ = batch
        np.testing.assert_array_equal(model.greedy_decode(src, max_len=6)[:, :5], tgt_in[:, 1:])

    return ModelSpec(
        name=f"Transformer(norm_first={norm_first})", build=build, forward=forward,
        vocab=(3, VOCAB),
        causal=lambda model, ids: model(SOURCE.repeat(len(ids), 0), ids),
        incremental=incremental,
        decode=lambda model, ids, use_cache: model.greedy_decode(ids, max_len=8,
                                                                 use_cache=use_cache),
        learning=Learning(reversal_batch, lambda model, batch: model.loss(*batch), steps=150,
                          factor=20, after=decodes_the_targets),
        skips={"padding_left": "sinusoidal positions count from the first column",
               "hf_round_trip": "no HuggingFace architecture: the paper's model has no "
                                "checkpoint format to match"})


class TestPostLNTransformerChecks(ModelChecks):
    spec = transformer_spec(norm_first=False)


class TestPreLNTransformerChecks(ModelChecks):
    spec = transformer_spec(norm_first=True)


def dropped_weights(q, k, p, seed):
    """The attention weights after dropout, as the seeded attention draws them: read through
    values that are the identity, and checked entry by entry against the weights without dropout
    (each dropped to 0 or kept and rescaled by 1/(1-p), the expectation unchanged); the draw
    itself is the one thing taken from the library."""
    weights = nn.attention_weights(q, k, causal=True).numpy()
    keys = k.shape[2]
    identity = mt.tensor(np.broadcast_to(np.eye(keys), q.shape[:2] + (keys, keys)).copy())
    mt.manual_seed(seed)
    dropped = F.scaled_dot_product_attention(q.detach(), k.detach(), identity, causal=True,
                                             dropout_p=p).numpy()
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], weights[kept] / (1 - p), **TOL)
    assert kept.any() and not kept[weights > 0].all()
    return dropped


@pytest.mark.eq(11, 12)
def test_attention_dropout_drops_weights_in_training_only():
    attention = randomize(nn.MultiHeadAttention(4, 2, dropout=0.5), 12)
    x = t64(np.random.default_rng(13).standard_normal((2, 3, 4)), requires_grad=True)
    mt.manual_seed(5)
    out = attention(x, causal=True)
    q, k, v = (attention.split_heads(proj(x)) for proj in
               (attention.q_proj, attention.k_proj, attention.v_proj))
    dropped = dropped_weights(q, k, 0.5, seed=5)
    expected = attention.out_proj(attention.merge_heads(mt.tensor(dropped) @ v))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), **TOL)
    out.sum().backward()
    assert np.isfinite(x.grad.numpy()).all()

    attention.eval()
    fused = attention(x, causal=True).numpy()
    attention.core.dropout.p = 0.0
    np.testing.assert_allclose(fused, attention(x, causal=True).numpy(), **TOL)
    assert not np.allclose(fused, out.numpy())


def test_dropout_placements_are_separate_settings():
    layer = nn.TransformerEncoderLayer(4, 2, 6, dropout=0.3, attention_dropout=0.2,
                                       activation_dropout=0.0)
    assert (layer.dropout.p, layer.self_attn.core.dropout.p, layer.feed_forward.dropout.p) == \
        (0.3, 0.2, 0.0)
    stack = nn.TransformerDecoder(2, 4, 2, 6, dropout=0.3)
    assert all(layer.feed_forward.dropout.p == 0.3 and layer.cross_attn.core.dropout.p == 0.0
               for layer in stack.layers)
