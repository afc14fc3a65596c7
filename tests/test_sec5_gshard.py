"""Section V-G: GShard's mixture of experts (Lepikhin et al., 2020), eq 32-34, and Switch's top-1
routing.

The three equations are checked against the reference maths
(``minitorch_nlp/testing/reference/moe.py``) through ``check_equation`` in ``tests/test_check.py``
with every other spec; here, the whole layer (gate, experts, combine) against the references
chained together, gradients of the gate's weights included; the properties that hold by
construction (capacity, one big expert = a dense FFN, the auxiliary loss at uniform routing,
random routing's probability, overflow through the residual); the errors.
"""
from __future__ import annotations

import functools

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import nn
from minitorch_nlp.nn import moe
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from minitorch_nlp.optim import AdamW
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import moe as reference

pytestmark = pytest.mark.sec5


def _float64_layer(d_model, d_ff, num_experts, k, capacity_factor, seed):
    layer = moe.MixtureOfExperts(d_model, d_ff, num_experts, k=k, capacity_factor=capacity_factor,
                                 generator=mt.Generator(seed))
    for parameter in layer.parameters():
        parameter.data = parameter.data.astype(np.float64)
    return layer.eval()


@pytest.mark.eq(32, 33, 34)
@given(st.data())
def test_eq32_to_34_moe_layer_matches_chained_references_with_gate_gradients(data):
    batch, time, d_model, d_ff = (data.draw(st.integers(1, 3)) for _ in range(4))
    num_experts = data.draw(st.integers(2, 4))
    k = data.draw(st.sampled_from((1, 2)))
    capacity_factor = data.draw(st.sampled_from((0.5, 1.0, 2.0)))
    layer = _float64_layer(d_model, d_ff, num_experts, k, capacity_factor,
                           data.draw(S.seeds()))
    x = data.draw(S.arrays((batch, time, d_model)))
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(x.shape)
    tx = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    out = layer(tx)
    (out * mt.tensor(cotangent)).sum().backward()
    capacity = moe.expert_capacity(batch * time, num_experts, k, capacity_factor)

    def reference_layer(x, wg, wi, wo):
        tokens = anp.reshape(x, (-1, d_model))
        combine = reference.eq32_gshard_gating(anp.dot(tokens, wg.T), k=k, capacity=capacity)
        return anp.reshape(reference.eq34_mixture_of_experts(tokens, wi, wo, combine=combine),
                           x.shape)

    weights = [p.numpy() for p in (layer.gate.weight, layer.experts.wi, layer.experts.wo)]
    logits = x.reshape(-1, d_model) @ weights[0].T
    if np.any(np.abs(np.diff(np.sort(logits, axis=-1), axis=-1)) < 1e-9):
        return            # a tie between two experts: the choice (and the gradient) is arbitrary
    np.testing.assert_allclose(out.numpy(), reference_layer(x, *weights), rtol=1e-9, atol=1e-11)

    def loss(*arrays):
        return anp.sum(reference_layer(*arrays) * cotangent)
    for i, got in enumerate((tx, layer.gate.weight, layer.experts.wi, layer.experts.wo)):
        expected = autograd.grad(loss, i)(x, *weights)
        np.testing.assert_allclose(got.grad.numpy(), expected, rtol=1e-7, atol=1e-10)


# ---- properties ----------------------------------------------------------------------------------
@pytest.mark.eq(32)
@given(st.data())
def test_no_expert_receives_more_than_its_capacity(data):
    tokens, experts = data.draw(st.integers(1, 12)), data.draw(st.integers(2, 5))
    k, capacity = data.draw(st.sampled_from((1, 2))), data.draw(st.integers(1, 6))
    logits = mt.tensor(data.draw(S.arrays((tokens, experts))))
    draws = data.draw(st.none() | st.just(np.random.default_rng(tokens).random(tokens)))
    routing = moe.route(logits, k=k, capacity=capacity, draws=None if k == 1 else draws)
    dispatch = np.asarray(routing.dispatch).astype(int)
    assert dispatch.shape == (tokens, experts, capacity)
    assert dispatch.sum(axis=0).max() <= 1                # one token per slot
    assert (routing.tokens_per_expert <= capacity).all()
    assert (dispatch.sum(axis=(1, 2)) <= k).all()         # at most k experts per token
    assert (dispatch.sum(axis=2) <= 1).all()              # never twice to one expert
    slots_used = dispatch.sum(axis=0).sum(axis=1)
    # buffers fill from slot 0 without gaps
    assert all(dispatch[:, e, :slots_used[e]].sum() == slots_used[e] for e in range(experts))


@pytest.mark.eq(32)
def test_first_choices_take_slots_before_second_choices():
    # every token prefers expert 0, then expert 1; capacity 2 of 3 tokens
    logits = mt.tensor([[3.0, 2.0, 0.0], [3.0, 2.0, 0.0], [3.0, 2.0, 0.0]])
    dispatch = np.asarray(moe.route(logits, k=2, capacity=2).dispatch)
    assert dispatch[:, 0].sum(axis=1).tolist() == [1, 1, 0]      # first two tokens win expert 0
    assert dispatch[:, 1].sum(axis=1).tolist() == [1, 1, 0]      # seconds fill expert 1 in order
    assert dispatch[2].sum() == 0                                 # the third goes nowhere


@pytest.mark.eq(33, 34)
@given(st.data())
def test_one_expert_with_room_for_every_token_is_a_dense_ffn(data):
    batch, time, d_model, d_ff = (data.draw(st.integers(1, 3)) for _ in range(4))
    layer = _float64_layer(d_model, d_ff, 1, 1, 1.0, data.draw(S.seeds()))
    dense = nn.FeedForward(d_model, d_ff, activation="relu")
    dense.linear1.weight.data = layer.experts.wi.data[0].T.copy()
    dense.linear2.weight.data = layer.experts.wo.data[0].T.copy()
    dense.linear1.bias.data = np.zeros(d_ff)
    dense.linear2.bias.data = np.zeros(d_model)
    x = data.draw(S.arrays((batch, time, d_model)))
    tx, tx_dense = (mt.tensor(x, dtype=mt.float64, requires_grad=True) for _ in range(2))
    out, expected = layer(tx), dense(tx_dense)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
    out.sum().backward()
    expected.sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), tx_dense.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert layer.routing.tokens_per_expert.tolist() == [batch * time]


@given(S.arrays((6, 3)), st.integers(0, 2))
def test_aux_loss_is_one_under_uniform_gates_whatever_the_choice(logits, offset):
    uniform = mt.softmax(mt.zeros(6, 3), axis=-1)
    first_choice = (np.arange(6) * 0 + offset) % 3          # every token on one expert
    assert float(moe.load_balancing_loss(uniform, first_choice)) == pytest.approx(1.0)
    balanced = np.arange(6) % 3                            # tokens spread evenly
    gates = mt.softmax(mt.tensor(logits), axis=-1)
    assert float(moe.load_balancing_loss(gates, balanced)) == pytest.approx(1.0)


@given(S.arrays((6, 4), low=-1.0, high=1.0), st.integers(0, 3))
def test_aux_loss_of_collapsed_routing_is_above_its_uniform_value(logits, expert):
    logits = logits.copy()
    logits[:, expert] += 5.0                               # every token's first choice: expert
    gates = mt.softmax(mt.tensor(logits), axis=-1)
    loss = float(moe.route(mt.tensor(logits), k=2, capacity=6).aux_loss)
    assert loss == pytest.approx(float(moe.load_balancing_loss(gates, np.full(6, expert))))
    assert loss > 1.0 + 1e-3


def test_aux_loss_gradient_pushes_the_gates_towards_balance():
    logits = mt.tensor(np.array([[2.0, 0.0], [1.0, 0.0], [0.5, 0.0]]), requires_grad=True)
    moe.route(logits, k=1, capacity=3).aux_loss.backward()
    grad = logits.grad.numpy()
    assert (grad[:, 0] > 0).all() and (grad[:, 1] < 0).all()   # descent lowers the busy expert


@pytest.mark.slow
@pytest.mark.eq(32)
def test_second_expert_is_used_with_probability_twice_its_normalised_gate():
    g1, g2 = 0.6, 0.25                            # normalised second gate 0.25 / 0.85
    logits = mt.tensor(np.log(np.tile([g1, g2, 0.15], (4000, 1))))
    draws = np.random.default_rng(0).random(4000)
    routing = moe.route(logits, k=2, capacity=4000, draws=draws)
    used = np.asarray(routing.dispatch)[:, 1].sum() / 4000
    assert used == pytest.approx(2 * g2 / (g1 + g2), abs=0.03)
    assert moe.route(logits, k=2, capacity=4000).tokens_per_expert[1] == 4000   # draws=None: all


@pytest.mark.eq(32)
def test_top2_weights_are_the_renormalised_gates_and_top1_the_raw_gate():
    probabilities = np.array([[0.5, 0.3, 0.2]])
    logits = mt.tensor(np.log(probabilities))
    top2 = moe.gshard_gating(logits, k=2, capacity=1).numpy()
    np.testing.assert_allclose(top2[0, :, 0], [0.5 / 0.8, 0.3 / 0.8, 0.0])
    top1 = moe.gshard_gating(logits, k=1, capacity=1).numpy()
    np.testing.assert_allclose(top1[0, :, 0], [0.5, 0.0, 0.0])


@pytest.mark.eq(34)
def test_a_token_over_capacity_passes_through_the_residual_unchanged():
    d = 4
    mt.manual_seed(3)
    layer = moe.MixtureOfExperts(d, 8, 2, k=1, capacity_factor=0.25).eval()   # 1 slot each
    x = mt.randn(1, 6, d)
    y = layer(x)
    sent = np.asarray(layer.routing.dispatch).sum(axis=(1, 2))
    assert sent.sum() <= 2 and (sent == 0).sum() >= 4
    np.testing.assert_array_equal(y.numpy()[0, sent == 0], 0.0)
    block = nn.TransformerLayer(nn.MultiHeadAttention(d, 2), layer,
                                functools.partial(nn.LayerNorm, d), norm_first=True).eval()
    h = block.residual(x, block.norm2, block.feed_forward)
    np.testing.assert_allclose(h.numpy()[0, sent == 0], x.numpy()[0, sent == 0])


def test_random_routing_only_while_training():
    layer = moe.MixtureOfExperts(4, 8, 4, generator=mt.Generator(0))
    x = mt.randn(2, 16, 4)
    layer.train()(x)
    training_counts = layer.routing.tokens_per_expert.sum()
    layer.eval()(x)
    assert layer.routing.tokens_per_expert.sum() > training_counts   # every second expert fits
    all_layer = moe.MixtureOfExperts(4, 8, 4, second_expert="all", generator=mt.Generator(0))
    all_layer(x)
    assert all_layer.routing.tokens_per_expert.sum() == layer.routing.tokens_per_expert.sum()


def test_moe_transformer_layer_learns_with_the_aux_loss():
    mt.manual_seed(0)
    d = 8
    block = nn.TransformerLayer(nn.MultiHeadAttention(d, 2), moe.MixtureOfExperts(d, 16, 4),
                                functools.partial(nn.LayerNorm, d), norm_first=True)
    x, target = mt.randn(4, 6, d), mt.randn(4, 6, d)
    optimizer = AdamW(block.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        task = ((block(x) - target) ** 2).mean()
        loss = task + 0.01 * moe.aux_losses(block)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(task))
    assert losses[-1] < losses[0] / 2
    assert block.feed_forward.gate.weight.grad is not None


def test_a_gpt_with_experts_in_every_other_layer_learns():
    mt.manual_seed(0)
    model = GPT2LMHeadModel(GPTConfig.tiny(n_layer=4, vocab_size=20))
    layers = model.transformer.blocks.layers
    moes = moe.mixture_every_other_layer(layers, 4, k=2)
    assert [type(layer.feed_forward) for layer in layers] == \
        [nn.FeedForward, moe.MixtureOfExperts] * 2 and moes == [layers[1].feed_forward,
                                                               layers[3].feed_forward]
    ids = np.random.default_rng(0).integers(0, 20, (4, 16))
    optimizer = AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        lm_loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        (lm_loss + 0.01 * moe.aux_losses(model)).backward()
        optimizer.step()
        losses.append(float(lm_loss))
    assert losses[-1] < losses[0] / 2
    with pytest.raises(TypeError, match="feed_forward is a MixtureOfExperts, not an"):
        moe.mixture_every_other_layer([layers[0], layers[1]], 2)


@pytest.mark.eq(32, 33, 34)
@pytest.mark.parametrize("group_size", [5, "sequence"])
def test_groups_are_routed_each_alone_as_separate_calls_would(group_size):
    layer = _float64_layer(6, 8, 4, 2, 1.0, seed=3)
    layer.group_size = group_size
    x = mt.tensor(np.random.default_rng(0).standard_normal((3, 5, 6)), requires_grad=True)
    cotangent = mt.tensor(np.random.default_rng(1).standard_normal((3, 5, 6)))
    y = layer(x)
    ((y * cotangent).sum() + layer.aux_loss).backward()
    grads = (x.grad.numpy(), layer.gate.weight.grad.numpy(), layer.experts.wi.grad.numpy())
    counts = layer.routing.tokens_per_expert
    x.grad = layer.gate.weight.grad = layer.experts.wi.grad = layer.experts.wo.grad = None
    layer.group_size = None                                    # one call per sequence
    alone, aux, alone_counts = [], [], 0
    for i in range(3):
        alone.append(layer(x[i:i + 1]))
        aux.append(layer.aux_loss)
        alone_counts = alone_counts + layer.routing.tokens_per_expert
    (sum((a * cotangent[i:i + 1]).sum() for i, a in enumerate(alone)) + sum(aux) / 3).backward()
    np.testing.assert_allclose(y.numpy(), np.concatenate([a.numpy() for a in alone]), rtol=1e-12)
    for got, want in zip(grads, (x.grad, layer.gate.weight.grad, layer.experts.wi.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(counts, alone_counts)


@pytest.mark.eq(32)
def test_expert_capacity_is_gshards_2s_over_e_and_switchs_s_over_e():
    assert moe.expert_capacity(64, 8) == 16                       # 2 S / E
    assert moe.expert_capacity(64, 8, k=1) == 8                   # S / E
    assert moe.expert_capacity(64, 8, k=1, capacity_factor=1.25) == 10
    assert moe.expert_capacity(3, 8, k=1) == 1


# ---- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, message", [
    (lambda: moe.route(mt.zeros(3), capacity=1), r"route: logits must be .*\(tokens, num_experts"),
    (lambda: moe.route(mt.zeros(3, 4), k=3, capacity=1), "route: k must be 1"),
    (lambda: moe.route(mt.zeros(3, 1), k=2, capacity=1), "k=2 experts per token needs"),
    (lambda: moe.route(mt.zeros(3, 4), capacity=0), "route: capacity must be a positive int"),
    (lambda: moe.route(mt.zeros(3, 4), capacity=1, draws=np.zeros(2)), r"shape \(3,\)"),
    (lambda: moe.route(mt.zeros(3, 4), capacity=1, draws=np.ones(3)), r"in \[0, 1\)"),
    (lambda: moe.expert_capacity(4, 2, capacity_factor=0), "capacity_factor must be"),
    (lambda: moe.MixtureOfExperts(4, 8, 2, k=3), "MixtureOfExperts: k must be 1"),
    (lambda: moe.MixtureOfExperts(4, 8, 1, k=2), "at most num_experts=1"),
    (lambda: moe.MixtureOfExperts(4, 8, 2, second_expert="top"), "second_expert must be"),
    (lambda: moe.MixtureOfExperts(4, 8, 2)(mt.zeros(2, 3, 5)), r"d_model=4\), got \(2, 3, 5\)"),
    (lambda: moe.Experts(2, 4, 8)(mt.zeros(3, 1, 4)), r"x must be \(num_experts=2"),
    (lambda: moe.expert_ffn(mt.zeros(1, 1, 2), mt.zeros(1, 2, 3), mt.zeros(1, 2, 3)),
     "wi must be .* and wo"),
    (lambda: moe.mixture_of_experts(mt.zeros(3, 2), mt.zeros(2, 2, 4), mt.zeros(2, 4, 2),
                                    combine=np.zeros((3, 3, 1))), "combine must be"),
    (lambda: moe.mixture_of_experts(mt.zeros(3, 2), mt.zeros(2, 2, 4), mt.zeros(2, 4, 2),
                                    combine=np.zeros((3, 2, 1)), dispatch=np.zeros((3, 2, 2))),
     "dispatch"),
    (lambda: moe.aux_losses(moe.MixtureOfExperts(4, 8, 2)), "has run a forward pass"),
    (lambda: moe.aux_losses(nn.Linear(2, 2)), "no MixtureOfExperts"),
    (lambda: moe.MixtureOfExperts(4, 8, 2, group_size=0), "group_size must be a positive int"),
    (lambda: moe.MixtureOfExperts(4, 8, 2, group_size=4)(mt.zeros(2, 3, 4)),
     "6 tokens do not split into groups of group_size=4"),
])
def test_bad_input_is_refused_with_a_clear_message(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


@pytest.mark.eq(32)
def test_eq32_the_default_is_gshards_top_two_with_every_second_expert():
    logits = mt.tensor(np.array([[2.0, 1.0, -1.0], [0.0, 0.5, 3.0]]), dtype=mt.float64)
    np.testing.assert_allclose(
        moe.gshard_gating(logits, capacity=2).numpy(),
        reference.eq32_gshard_gating(logits.numpy(), k=2, capacity=2, draws=None), rtol=1e-12)
    assert (moe.gshard_gating(logits, capacity=2).numpy() > 0).sum() == 4   # two per token
