"""Section IX-E: Linformer's low-rank attention (Wang et al., 2020), eq 111.

``LinformerAttention`` against the position-by-position reference of
``minitorch_nlp/testing/reference/linformer.py`` (float64 values and gradients, the projections'
included) for every sharing level; then what holds by construction: with k = n and identity
projections it is full attention, the three sharing levels give the paper's counts of distinct
projections (24, 12, 1 for 12 layers of 12 heads), a saved model reloads; an encoder with the
core learns; then the errors.
"""
from __future__ import annotations

import functools

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn
from minitorch_nlp.attention import LinformerAttention, linformer_cores
from minitorch_nlp.testing import strategies as S
from tests.attention_core_checks import TOL, stack_learns, t64
from minitorch_nlp.testing.reference import linformer as R

pytestmark = [pytest.mark.sec9,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]


@pytest.mark.eq(111)
@given(st.data())
def test_eq111_matches_reference_for_every_sharing_level(data):
    sharing = data.draw(st.sampled_from(["none", "headwise", "key_value", "layerwise"]))
    heads, seq_len, rank = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 7)), \
        data.draw(st.integers(1, 4))
    time, d = data.draw(st.integers(1, seq_len)), data.draw(st.integers(1, 3))
    core = linformer_cores(1, seq_len, rank, sharing=sharing, num_heads=heads)[0].to(mt.float64)
    q, k, v = (data.draw(S.arrays((2, heads, time, d))) for _ in range(3))
    key_mask = data.draw(st.none() | S.bool_masks((2, time), all_false_row=False).filter(
        lambda m: m.any(axis=1).all()))
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(q.shape)
    e, f = (p.numpy() for p in core.projections())
    tensors = [t64(a) for a in (q, k, v)]
    out, _ = core(*tensors, key_mask=key_mask)
    (out * mt.tensor(cotangent)).sum().backward()

    def reference(q, k, v, e, f):
        def head(b, h):
            return R.eq111_linformer_head(q[b, h], k[b, h], v[b, h], e[h] if e.ndim == 3 else e,
                                          f[h] if f.ndim == 3 else f,
                                          None if key_mask is None else key_mask[b])
        return anp.stack([anp.stack([head(b, h) for h in range(heads)]) for b in range(2)])

    np.testing.assert_allclose(out.numpy(), reference(q, k, v, e, f), **TOL)
    loss = lambda *a: anp.sum(reference(*a) * cotangent)  # noqa: E731
    for i, t in enumerate(tensors):
        np.testing.assert_allclose(t.grad.numpy(), autograd.grad(loss, i)(q, k, v, e, f), **TOL)
    expected_e = autograd.grad(loss, 3)(q, k, v, e, f)
    if sharing in ("key_value", "layerwise"):                # E = F: both uses add up on E
        expected_e = expected_e + autograd.grad(loss, 4)(q, k, v, e, f)
    np.testing.assert_allclose(core.E.grad.numpy(), expected_e, **TOL)


@pytest.mark.eq(111)
@given(st.integers(1, 9), st.booleans(), S.seeds())
def test_identity_projections_with_k_equal_n_give_full_attention(time, shared, seed):
    q, k, v = (mt.tensor(a) for a in np.random.default_rng(seed).standard_normal(
        (3, 2, 2, time, 4)))
    core = LinformerAttention(time, time, sharing="key_value" if shared else "headwise")
    for projection in core.parameters():
        projection.data[...] = np.eye(time)
    out, _ = core(q, k, v)
    np.testing.assert_allclose(out.numpy(), F.scaled_dot_product_attention(q, k, v).numpy(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.eq(111)
@pytest.mark.parametrize("sharing, count", [("none", 288), ("headwise", 24),
                                            ("key_value", 12), ("layerwise", 1)])
def test_sharing_levels_give_the_papers_counts_for_12_layers_of_12_heads(sharing, count):
    cores = linformer_cores(12, 8, 2, sharing=sharing, num_heads=12)
    distinct = {id(p) for core in cores for p in core.parameters()}
    matrices = sum(p.shape[0] if p.ndim == 3 else 1 for p in
                   {id(p): p for core in cores for p in core.parameters()}.values())
    assert matrices == count
    assert len(distinct) == (1 if sharing == "layerwise" else
                             12 if sharing == "key_value" else 24)


@pytest.mark.eq(111)
def test_dropout_keeps_the_expected_output_by_rescaling_the_kept_weights():
    """Training-mode dropout on the attention weights, rescaled by 1/(1-p): averaged over many
    independent masks (a batch of copies of one input), the output is the evaluation-mode one;
    without the rescale it would be (1-p) times it."""
    rng = np.random.default_rng(0)
    q, k, v = (np.broadcast_to(a, (4000, 1, 6, 4)) for a in rng.standard_normal((3, 1, 1, 6, 4)))
    core = LinformerAttention(6, 3, dropout=0.5).to(mt.float64)
    tensors = [mt.tensor(np.ascontiguousarray(a), dtype=mt.float64) for a in (q, k, v)]
    evaluated = core.eval()(*tensors)[0].numpy()[0]
    trained = core.train()(*tensors)[0].numpy()
    spread = trained.std(axis=0) / np.sqrt(len(trained))
    assert np.all(np.abs(trained.mean(axis=0) - evaluated) <= 5 * spread + 1e-9)


def test_a_layerwise_shared_stack_saves_and_reloads_its_one_projection(tmp_path):
    mt.manual_seed(0)
    d = 8
    layers = [nn.TransformerLayer(nn.MultiHeadAttention(d, 2, core=core), nn.FeedForward(d, 16),
                                  functools.partial(nn.LayerNorm, d))
              for core in linformer_cores(2, 6, 3, sharing="layerwise")]
    stack = nn.TransformerStack(layers)
    x = mt.randn(2, 6, d)
    assert sum(tuple(p.shape) == (3, 6) for p in stack.parameters()) == 1
    mt.save(stack.state_dict(), tmp_path / "linformer.npz")
    mt.manual_seed(1)
    other = nn.TransformerStack(
        [nn.TransformerLayer(nn.MultiHeadAttention(d, 2, core=core), nn.FeedForward(d, 16),
                             functools.partial(nn.LayerNorm, d))
         for core in linformer_cores(2, 6, 3, sharing="layerwise")])
    other.load_state_dict(mt.load(tmp_path / "linformer.npz"))
    np.testing.assert_allclose(other(x).last_hidden_state.numpy(),
                               stack(x).last_hidden_state.numpy(), rtol=1e-6)
    assert other.layers[0].self_attn.core.E is other.layers[1].self_attn.core.E


def test_an_encoder_with_the_core_learns_a_tiny_batch():
    """Copy each input token to the output through two Linformer layers (n = 16, k = 8)."""
    stack_learns(linformer_cores(2, 16, 8, sharing="headwise"), causal=False, steps=40)


@pytest.mark.parametrize("kwargs, message", [
    (dict(seq_len=0, rank=2), "seq_len"),
    (dict(seq_len=4, rank=2, sharing="columnwise"), "sharing must be one of"),
    (dict(seq_len=4, rank=2, sharing="none"), "num_heads"),
    (dict(seq_len=4, rank=2, sharing="layerwise"), "takes the shared projection"),
    (dict(seq_len=4, rank=2, projection=mt.zeros(2, 4)), "takes the shared projection"),
    (dict(seq_len=4, rank=2, sharing="layerwise", projection=nn.Parameter(mt.zeros(2, 5))),
     r"shape \(rank, seq_len\) = \(2, 4\)"),
])
def test_bad_configuration_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinformerAttention(**kwargs)


def test_bad_calls_are_refused():
    q = mt.randn(1, 2, 6, 4)
    core = LinformerAttention(5, 2)
    with pytest.raises(ValueError, match="6 positions, more than seq_len=5"):
        core(q, q, q)
    with pytest.raises(ValueError, match="cannot be causal"):
        core(q[:, :, :5], q[:, :, :5], q[:, :, :5], causal=True)
    with pytest.raises(ValueError, match="key_mask for padding"):
        core(q[:, :, :5], q[:, :, :5], q[:, :, :5], mask=np.ones((5, 5), dtype=bool))
    with pytest.raises(ValueError, match="projections for 3 heads, the attention 2"):
        LinformerAttention(6, 2, sharing="none", num_heads=3)(q, q, q)
