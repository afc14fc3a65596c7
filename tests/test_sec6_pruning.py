"""Section VI-B: head pruning (Michel et al., eq 53-55) and layer pruning (LayerDrop, Poor Man's
BERT) of ``minitorch_nlp.compress.pruning``.

The masked multi-head sum (eq 53) against a float64 reference written head by head; head
importance (eq 54) against central finite differences of the loss in the head mask, and eq 55
equal to eq 54; what holds by construction: a mask of ones changes nothing, a zero mask equals
removing the heads' weights, dropping no layer changes nothing, a dropped layer equals skipping
it; the layer-choice rules on the papers' own examples; clear errors."""
from __future__ import annotations

import autograd
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.compress import pruning as P
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM, BertModel
from minitorch_nlp.nn import MultiHeadAttention
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import pruning as R

pytestmark = pytest.mark.sec6

TOL = dict(rtol=1e-7, atol=1e-10)
TINY = dict(vocab_size=23, hidden_size=12, num_hidden_layers=3, num_attention_heads=3,
            intermediate_size=16, max_position_embeddings=10, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


def tiny_bert(model_class=BertModel, seed=0, **overrides):
    mt.manual_seed(seed)
    return model_class(BertConfig(**{**TINY, **overrides})).to(mt.float64)


def ids(seed=0, batch=2, time=6):
    return np.random.default_rng(seed).integers(1, 23, (batch, time))


def mlm_batches(count=2):
    batches = []
    for seed in range(count):
        tokens = ids(seed)
        labels = np.where(np.random.default_rng(seed + 10).random(tokens.shape) < 0.5, tokens, -100)
        labels[:, 0] = tokens[:, 0]
        batches.append((tokens, labels))
    return batches


def mlm_loss(model, batch, head_mask=None):
    tokens, labels = batch
    return model(tokens, labels=labels, head_mask=head_mask).loss


def hidden(model, tokens, head_mask=None):
    return model(tokens, head_mask=head_mask).last_hidden_state.numpy()


# ---- eq 53: the masked multi-head sum ------------------------------------------------------------
@pytest.mark.eq(53)
@given(st.data())
def test_eq53_masked_multi_head_attention_matches_reference(data):
    heads, d_k = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
    batch, time = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    d = heads * d_k
    x = data.draw(S.arrays((batch, time, d)))
    xi = data.draw(S.arrays((heads,)))
    mt.manual_seed(data.draw(S.seeds()))
    attention = MultiHeadAttention(d, heads).to(mt.float64)
    names = {"q_w": attention.q_proj.weight, "q_b": attention.q_proj.bias,
             "k_w": attention.k_proj.weight, "k_b": attention.k_proj.bias,
             "v_w": attention.v_proj.weight, "v_b": attention.v_proj.bias,
             "out_w": attention.out_proj.weight, "out_b": attention.out_proj.bias}
    params = {name: p.numpy() for name, p in names.items()}
    tx, txi = (mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in (x, xi))
    out = attention(tx, head_mask=txi)
    expected = R.eq53_masked_multi_head_attention(x, xi, params, heads)
    np.testing.assert_allclose(out.numpy(), expected, **TOL)

    cotangent = np.random.default_rng(1).standard_normal(out.shape)
    out.backward(mt.tensor(cotangent, dtype=mt.float64))

    def loss(x, xi):
        return np.sum(R.eq53_masked_multi_head_attention(x, xi, params, heads) * cotangent)

    np.testing.assert_allclose(tx.grad.numpy(), autograd.grad(loss, 0)(x, xi), **TOL)
    np.testing.assert_allclose(txi.grad.numpy(), autograd.grad(loss, 1)(x, xi), **TOL)


@pytest.mark.eq(53)
def test_a_head_mask_of_ones_changes_nothing():
    model, tokens = tiny_bert(), ids()
    np.testing.assert_allclose(hidden(model, tokens, np.ones((3, 3))), hidden(model, tokens),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.eq(53)
def test_a_zero_mask_equals_removing_the_heads_weights():
    model, tokens = tiny_bert(), ids()
    mask = np.ones((3, 3))
    mask[0, 1] = mask[2, 0] = mask[2, 2] = 0
    masked = hidden(model, tokens, mask)
    before = model.num_parameters()
    P.prune_heads(model, {0: [1], 2: [0, 2]})
    np.testing.assert_allclose(hidden(model, tokens), masked, rtol=1e-10, atol=1e-12)
    assert [layer.self_attn.num_heads for layer in model.encoder.layers] == [2, 3, 1]
    assert model.encoder.layers[2].self_attn.q_proj.weight.shape == (4, 12)
    assert model.encoder.layers[2].self_attn.out_proj.weight.shape == (12, 4)
    assert before - model.num_parameters() == 3 * (4 * 4 * 12 + 3 * 4)   # 3 heads of d_k = 4


def test_a_pruned_model_still_trains_and_prunes_again():
    model = tiny_bert(BertForMaskedLM)
    P.prune_heads(model, {1: [0]})
    loss = mlm_loss(model, mlm_batches(1)[0])
    loss.backward()
    assert model.bert.encoder.layers[1].self_attn.q_proj.weight.grad.shape == (8, 12)
    P.prune_heads(model, {1: [1]})       # the renumbered heads: 0, 1 are the old 1, 2
    assert model.bert.encoder.layers[1].self_attn.num_heads == 1


# ---- eq 54-55: head importance -------------------------------------------------------------------
@pytest.mark.eq(54)
def test_eq54_head_importance_is_the_mean_absolute_derivative_in_the_mask():
    model, batches = tiny_bert(BertForMaskedLM), mlm_batches()
    importance = np.stack(P.head_importance(model, batches, mlm_loss))
    step = 1e-6
    expected = np.zeros((3, 3))
    for layer in range(3):
        for head in range(3):
            for batch in batches:
                up, down = np.ones((3, 3)), np.ones((3, 3))
                up[layer, head] += step
                down[layer, head] -= step
                slope = (mlm_loss(model, batch, up).item()
                         - mlm_loss(model, batch, down).item()) / (2 * step)
                expected[layer, head] += abs(slope) / len(batches)
    np.testing.assert_allclose(importance, expected, rtol=1e-5, atol=1e-9)
    assert (importance > 0).all()


@pytest.mark.eq(54)
@pytest.mark.eq(55)
def test_eq55_importance_from_head_outputs_equals_eq54():
    model, batches = tiny_bert(BertForMaskedLM), mlm_batches()
    mask = np.ones((3, 3))
    mask[1, 2] = 0
    for head_mask in (None, mask):
        through_mask = P.head_importance(model, batches, mlm_loss, head_mask=head_mask)
        through_outputs = P.head_importance_from_outputs(model, batches, mlm_loss,
                                                         head_mask=head_mask)
        for a, b in zip(through_mask, through_outputs):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert through_mask[1][2] == 0          # a masked head has no influence left


def test_least_important_heads_follows_the_scores_and_keeps_a_head_per_layer():
    importance = [np.array([0.1, 0.5, 0.2]), np.array([0.05, 0.06, 0.07]), np.array([1, 2, 3.0])]
    assert P.least_important_heads(importance, 2) == {1: [0, 1]}
    # layer 1's third head is next by score, but a layer keeps one head
    assert P.least_important_heads(importance, 3) == {0: [0], 1: [0, 1]}
    masked = [[1, 1, 1], [0, 0, 1], [1, 1, 1]]
    assert P.least_important_heads(importance, 2, head_mask=masked) == {0: [0, 2]}
    with pytest.raises(ValueError, match="only 6 heads can be pruned"):
        P.least_important_heads(importance, 7)


def test_head_pruning_errors():
    model = tiny_bert()
    with pytest.raises(ValueError, match="head 3 of layer 0 is out of range"):
        P.prune_heads(model, {0: [3]})
    with pytest.raises(ValueError, match="layer 5 is out of range"):
        P.prune_heads(model, {5: [0]})
    with pytest.raises(ValueError, match="pruning every head of layer 1"):
        P.prune_heads(model, {1: [0, 1, 2]})
    with pytest.raises(ValueError, match="one row per layer"):
        P.head_importance(tiny_bert(BertForMaskedLM), mlm_batches(1), mlm_loss,
                          head_mask=np.ones((3, 2)))
    with pytest.raises(ValueError, match="batches is empty"):
        P.head_importance(tiny_bert(BertForMaskedLM), [], mlm_loss)
    with pytest.raises(ValueError, match="num_kv_heads"):
        P._remove_heads(MultiHeadAttention(8, 4, num_kv_heads=2), [0], 0)
    with pytest.raises(ValueError, match="has 0 TransformerStacks"):
        P.prune_heads(MultiHeadAttention(8, 2), {0: [0]})


# ---- layers --------------------------------------------------------------------------------------
def test_dropping_no_layer_changes_nothing_and_dropping_equals_skipping():
    model, tokens = tiny_bert(), ids()
    before = hidden(model, tokens)
    P.drop_layers(model, [])
    np.testing.assert_array_equal(hidden(model, tokens), before)
    states = model(tokens).last_hidden_state
    embedded = model.embeddings(mt.tensor(tokens), mt.tensor(np.zeros_like(tokens)))
    kept = [model.encoder.layers[i] for i in (0, 2)]
    P.drop_layers(model, [1])
    expected = kept[1](kept[0](embedded)).numpy()
    np.testing.assert_allclose(hidden(model, tokens), expected, rtol=1e-12, atol=1e-12)
    assert model.config.num_hidden_layers == 2 and states.shape == (2, 6, 12)
    assert list(model.state_dict()).count("encoder.layers.1.norm2.weight") == 1
    with pytest.raises(ValueError, match="layer 2 is out of range"):
        P.drop_layers(model, [2])
    with pytest.raises(ValueError, match="dropping all 2 layers is refused"):
        P.drop_layers(model, [0, 1])


def test_layerdrop_drops_whole_layers_while_training_only():
    model, tokens = tiny_bert(BertForMaskedLM), mlm_batches(1)[0]
    reference = hidden(model.bert, tokens[0])
    drop = P.LayerDrop(model, p=0.0)
    np.testing.assert_array_equal(hidden(model.bert, tokens[0]), reference)
    drop.remove()
    drop = P.LayerDrop(model, p=0.6, seed=3)
    model.eval()
    np.testing.assert_array_equal(hidden(model.bert, tokens[0]), reference)
    assert drop.dropped == []
    model.train()
    mlm_loss(model, tokens).backward()
    assert drop.dropped, "with p = 0.6 some of the 3 layers should have been dropped (seed 3)"
    for i, layer in enumerate(model.bert.encoder.layers):
        got_gradient = layer.feed_forward.linear1.weight.grad is not None
        assert got_gradient == (i not in drop.dropped)
    drop.remove()
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        P.LayerDrop(model, p=1.0)


def test_layerdrop_does_not_evaluate_a_skipped_layer():
    model, tokens = tiny_bert(BertForMaskedLM), mlm_batches(1)[0]
    layers = model.bert.encoder.layers
    calls = []
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda module, args, i=i: calls.append(i))
    drop = P.LayerDrop(model, p=0.6, seed=3)
    model.train()
    trained = hidden(model.bert, tokens[0])
    assert drop.dropped and sorted(calls + drop.dropped) == list(range(len(layers)))
    kept = [i for i in range(len(layers)) if i not in drop.dropped]
    drop.remove()
    assert model.bert.encoder.skip_layer is None
    model.eval()
    P.drop_layers(model, drop.dropped)
    assert len(model.bert.encoder.layers) == len(kept)
    np.testing.assert_allclose(hidden(model.bert, tokens[0]), trained, rtol=1e-12, atol=1e-12)


def test_layerdrop_refuses_a_second_layerdrop_on_the_same_stack():
    model = tiny_bert(BertForMaskedLM)
    first = P.LayerDrop(model, p=0.5)
    with pytest.raises(ValueError, match="another LayerDrop is attached"):
        P.LayerDrop(model, p=0.5)
    first.remove()
    P.LayerDrop(model, p=0.5).remove()


def test_layerdrop_every_other_layer_rule():
    assert P.layerdrop_layers_to_drop(12, p=0.5) == [1, 3, 5, 7, 9, 11]    # depths 2, 4 .. 12
    assert P.layerdrop_layers_to_drop(12, p=0.25) == [3, 7, 11]            # depths 4, 8, 12
    assert P.layerdrop_layers_to_drop(12, keep=6) == [1, 3, 5, 7, 9, 11]   # p* = 1 - 6/12
    assert P.layerdrop_layers_to_drop(6, keep=6) == []
    with pytest.raises(ValueError, match="exactly one of p and keep"):
        P.layerdrop_layers_to_drop(6)
    with pytest.raises(ValueError, match="keep=7 exceeds"):
        P.layerdrop_layers_to_drop(6, keep=7)


@pytest.mark.parametrize("strategy, expected", [
    ("top", [9, 10, 11, 12]), ("bottom", [1, 2, 3, 4]), ("even-alternate", [6, 8, 10, 12]),
    ("odd-alternate", [5, 7, 9, 11]), ("symmetric", [5, 6, 7, 8])])
def test_poor_mans_strategies_on_the_papers_twelve_layers(strategy, expected):
    assert P.poor_mans_layers_to_drop(strategy, 12, 4) == [d - 1 for d in expected]


@pytest.mark.parametrize("strategy, expected", [
    ("top", [11, 12]), ("even-alternate", [10, 12]), ("odd-alternate", [9, 11])])
def test_poor_mans_strategies_number_layers_as_the_survey_does(strategy, expected):
    # Section VI-B.1-B, K = 2 in a 12-layer network: "top - {11, 12}; even-alternate - {10, 12};
    # odd-alternate - {9, 11}" (layers counted from 1 at the bottom).
    assert P.poor_mans_layers_to_drop(strategy, 12, 2) == [d - 1 for d in expected]


def test_contribution_strategy_drops_the_layers_that_change_their_input_least():
    model, tokens = tiny_bert(), ids()
    contributions = P.layer_contributions(
        model, [tokens], lambda m, b: m(b, output_hidden_states=True).hidden_states)
    assert contributions.shape == (3,) and (np.abs(contributions) <= 1 + 1e-12).all()
    chosen = P.poor_mans_layers_to_drop("contribution", 3, 1, contributions)
    assert chosen == [int(np.argmax(contributions))]
    with pytest.raises(ValueError, match="needs contributions"):
        P.poor_mans_layers_to_drop("contribution", 3, 1)
    with pytest.raises(ValueError, match="strategy must be one of"):
        P.poor_mans_layers_to_drop("middle", 3, 1)
    with pytest.raises(ValueError, match="leaves none"):
        P.poor_mans_layers_to_drop("top", 3, 3)
