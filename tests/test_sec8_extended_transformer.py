"""Section VIII-D: ETC's global-local attention (Ainslie et al., 2020): global and long inputs,
the four pieces g2g, g2l, l2g, l2l (l2l within a radius), relative position labels and the
global-local mapping.

``ETCAttention`` (grouped pieces merged by log-sum-exp) against the dense-with-mask reference of
``minitorch_nlp/testing/reference/extended_transformer.py`` (float64 values and gradients of both
inputs, every projection and the relative vectors); then the properties: a radius covering the long
input with zero relative vectors is full attention over the joint sequence, a long token ignores
long tokens beyond its radius while every global token sees them, the labels follow their
definition, the memory stays far below the joint sequence squared; learning; the errors.
"""
from __future__ import annotations

import tracemalloc

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn
from minitorch_nlp.attention import ETCAttention
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import extended_transformer as R
from tests.attention_core_checks import TOL, t64
from tests.model_checks import overfit

pytestmark = [pytest.mark.sec8,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]

NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}


@settings(max_examples=15)
@given(st.data())
def test_etc_attention_matches_the_dense_reference(data):
    heads, batch = data.draw(st.integers(1, 2)), 2
    n_global, n_long = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 9))
    radius, max_distance = data.draw(st.integers(1, 3)), data.draw(st.integers(0, 3))
    segments = data.draw(S.index_arrays(n_global + 1, (batch, n_long), False)) - 1
    key_mask = data.draw(st.none() | S.bool_masks((batch, n_global + n_long)))
    mt.manual_seed(data.draw(st.integers(0, 99)))
    layer = ETCAttention(2 * heads, heads, radius, max_distance).to(mt.float64)
    nn.init.normal_(layer.relative_keys, std=0.5)
    global_x = data.draw(S.arrays((batch, n_global, 2 * heads)))
    long_x = data.draw(S.arrays((batch, n_long, 2 * heads)))
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(
        (batch, n_global + n_long, 2 * heads))
    tg, tl = t64(global_x), t64(long_x)
    masks = {} if key_mask is None else {"global_mask": key_mask[:, :n_global],
                                         "long_mask": key_mask[:, n_global:]}
    out_g, out_l = layer(tg, tl, segment_ids=segments, **masks)
    out = mt.concatenate([out_g, out_l], axis=1)
    (out * mt.tensor(cotangent)).sum().backward()
    params = {name: (getattr(layer, attr).weight.numpy(), getattr(layer, attr).bias.numpy())
              for name, attr in NAMES.items()}

    def reference(global_x, long_x, params, relative_keys):
        return R.etc_attention(global_x, long_x, params, relative_keys, heads, radius,
                               max_distance, segments, key_mask)

    arguments = (global_x, long_x, params, layer.relative_keys.numpy())
    np.testing.assert_allclose(out.numpy(), reference(*arguments), **TOL)
    loss = lambda *a: anp.sum(reference(*a) * cotangent)  # noqa: E731
    np.testing.assert_allclose(tg.grad.numpy(), autograd.grad(loss, 0)(*arguments), **TOL)
    np.testing.assert_allclose(tl.grad.numpy(), autograd.grad(loss, 1)(*arguments), **TOL)
    expected = autograd.grad(loss, 2)(*arguments)
    for name, attr in NAMES.items():
        np.testing.assert_allclose(getattr(layer, attr).weight.grad.numpy(), expected[name][0],
                                   **TOL)
        np.testing.assert_allclose(getattr(layer, attr).bias.grad.numpy(), expected[name][1],
                                   **TOL)
    np.testing.assert_allclose(layer.relative_keys.grad.numpy(),
                               autograd.grad(loss, 3)(*arguments), **TOL)


@given(st.integers(1, 3), st.integers(1, 8), st.integers(0, 3), S.seeds())
def test_a_radius_covering_the_long_input_without_relative_vectors_is_full_attention(
        n_global, n_long, extra, seed):
    mt.manual_seed(seed % 1000)
    layer = ETCAttention(8, 2, n_long + extra)
    nn.init.zeros_(layer.relative_keys)
    full = nn.MultiHeadAttention(8, 2)
    full.load_state_dict({k: v for k, v in layer.state_dict().items()
                          if k != "relative_keys"})
    rng = np.random.default_rng(seed)
    global_x = mt.tensor(rng.standard_normal((2, n_global, 8)))
    long_x = mt.tensor(rng.standard_normal((2, n_long, 8)))
    out_g, out_l = layer(global_x, long_x)
    joint = full(mt.concatenate([global_x, long_x], axis=1)).numpy()
    np.testing.assert_allclose(out_g.numpy(), joint[:, :n_global], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out_l.numpy(), joint[:, n_global:], rtol=1e-5, atol=1e-6)


def test_a_long_token_sees_only_its_radius_and_the_globals_see_everything():
    """Moving long token 9 changes the long outputs within the radius (2) and every global
    output, not long token 3's; moving a global token changes every output."""
    mt.manual_seed(0)
    layer = ETCAttention(8, 2, 2)
    rng = np.random.default_rng(0)
    global_x, long_x = rng.standard_normal((1, 2, 8)), rng.standard_normal((1, 12, 8))
    base_g, base_l = (o.numpy() for o in layer(mt.tensor(global_x), mt.tensor(long_x)))
    moved = long_x.copy()
    moved[0, 9] += 1.0
    out_g, out_l = (o.numpy() for o in layer(mt.tensor(global_x), mt.tensor(moved)))
    changed = ~np.isclose(out_l, base_l, rtol=0, atol=1e-9).all(axis=-1)[0]
    assert np.flatnonzero(changed).tolist() == [7, 8, 9, 10, 11]
    assert not np.isclose(out_g, base_g, rtol=0, atol=1e-9).all(axis=-1).any()
    moved_global = global_x.copy()
    moved_global[0, 1] += 1.0
    out_g, out_l = (o.numpy() for o in layer(mt.tensor(moved_global), mt.tensor(long_x)))
    assert not np.isclose(out_l, base_l, rtol=0, atol=1e-9).all(axis=-1).any()
    assert not np.isclose(out_g, base_g, rtol=0, atol=1e-9).all(axis=-1).any()


def test_the_labels_follow_their_definition():
    """Joint positions 0-1 are global, 2-7 long; segments map long tokens 0-2 to global 0 and
    3-5 to global 1; distances clip at k = 2."""
    layer = ETCAttention(4, 1, 1, max_distance=2)
    segments = np.array([[0, 0, 0, 1, 1, -1]])
    everyone = np.arange(8)[None, None, None]
    labels = layer.labels(everyone, everyone, segments, 2)[0, 0, 0]
    expected = np.array([[R.etc_label(i, j, 2, segments[0], 2) for j in range(8)]
                         for i in range(8)])
    np.testing.assert_array_equal(labels, expected)
    assert labels[2, 7] == 4 and labels[7, 2] == 0 and labels[3, 4] == 3   # clipped distances
    assert labels[0, 2] == 5 and labels[4, 0] == 5                          # own segment
    assert labels[1, 2] == 6 and labels[7, 1] == 6                          # other, or none
    assert layer.num_labels == 7


def peak_bytes(run):
    tracemalloc.start()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_memory_is_a_small_fraction_of_full_attention_over_the_joint_sequence():
    """n_g = 8 and n_l = 2048 with radius 16: forward and backward peak at less than a sixth of
    full attention's weights over the 2056 joint tokens (which hold 2056 x 2056 scores)."""
    mt.manual_seed(0)
    layer = ETCAttention(8, 1, 16)
    rng = np.random.default_rng(0)
    global_x = mt.tensor(rng.standard_normal((1, 8, 8)), requires_grad=True)
    long_x = mt.tensor(rng.standard_normal((1, 2048, 8)), requires_grad=True)

    def etc():
        out_g, out_l = layer(global_x, long_x)
        (out_g.sum() + out_l.sum()).backward()

    def full():
        q, k, v = layer.project(mt.concatenate([global_x, long_x], axis=1), None, None, None)
        F.attention_weights(q, k).sum().backward()

    assert peak_bytes(etc) < peak_bytes(full) / 6


def test_etc_learns_a_tiny_batch():
    """Each long token is labelled with a token of its segment's global input: the task needs
    l2g attention and the global-local mapping."""
    mt.manual_seed(0)
    vocab, d = 7, 16
    rng = np.random.default_rng(0)
    global_ids = rng.integers(0, vocab, (4, 3))
    segments = np.repeat(np.arange(3), 4)[None].repeat(4, axis=0)
    long_ids = rng.integers(0, vocab, (4, 12))
    targets = np.take_along_axis(global_ids, segments, axis=1)
    embed, layer, head = nn.Embedding(vocab, d), ETCAttention(d, 2, 1), nn.Linear(d, vocab)

    def loss():
        _, out = layer(embed(mt.tensor(global_ids)), embed(mt.tensor(long_ids)),
                       segment_ids=segments)
        return F.cross_entropy(head(out).reshape(-1, vocab), mt.tensor(targets.ravel()))

    losses = overfit(nn.ModuleList([embed, layer, head]), loss, 80, lr=2e-2)
    assert losses[-1] < losses[0] / 3, losses


# ---- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(local_radius=0), "local_radius must be a positive int"),
    (dict(local_radius=2, max_distance=-1), "max_distance must be an int >= 0"),
])
def test_bad_configuration_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ETCAttention(8, 2, **kwargs)


def test_bad_calls_are_refused():
    layer = ETCAttention(8, 2, 2)
    global_x, long_x = mt.randn(2, 3, 8), mt.randn(2, 10, 8)
    with pytest.raises(ValueError, match=r"long_x must be a Tensor of shape \(batch, time, "
                                         r"d_model=8\), got \(2, 10, 4\)"):
        layer(global_x, mt.randn(2, 10, 4))
    with pytest.raises(ValueError, match="global_x has batch 2, long_x 1"):
        layer(global_x, mt.randn(1, 10, 8))
    with pytest.raises(ValueError, match="at least one global and one long token, got n_g=0"):
        layer(mt.randn(2, 0, 8), long_x)
    with pytest.raises(ValueError, match="segment_ids holds 3; each long token names its global "
                                         r"token in \[0, n_g=3\)"):
        layer(global_x, long_x, segment_ids=np.full((2, 10), 3))
    with pytest.raises(ValueError, match=r"segment_ids must be integer ids of shape \(2, 10\)"):
        layer(global_x, long_x, segment_ids=np.zeros((2, 9), dtype=int))
    with pytest.raises(ValueError, match=r"long_mask of shape \(2, 9\) must be \(batch, n_l\)"):
        layer(global_x, long_x, long_mask=np.ones((2, 9), dtype=bool))
    with pytest.raises(ValueError, match=r"global_mask of shape \(3,\) must be \(batch, n_g\)"):
        layer(global_x, long_x, global_mask=np.ones(3, dtype=bool))
