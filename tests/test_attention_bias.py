"""The additive score bias inside the fused attention kernel (``ops_fused.Attention``), on the
NumPy and numba backends: values and float64 gradients of q, k, v and the bias against the
composite (``Attention.composite``, built from differentiable primitives), for biases of every
broadcast shape, with -inf entries and queries that see no key; a general bool mask reaches the
kernel as -inf entries of the bias; Transformer-XL's relative attention and T5's position bias
take the kernel. (The kernels one by one against the NumPy backend's are in
``test_backend_numba.py`` and, under the CUDA simulator, ``backend_checks.py``; the same bias
against the one-head reference in HIPS autograd in ``test_toolkit.py``.)
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp.autograd.ops_fused import Attention
from minitorch_nlp.backends import get_backend
from minitorch_nlp.testing import strategies as S

pytestmark = [pytest.mark.sec4]

TOL = dict(rtol=1e-9, atol=1e-11)
BACKENDS = ["numpy", "numba"]


@st.composite
def biased_problems(draw):
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    tq, tk, d = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    q = draw(S.arrays((batch, heads, tq, d)))
    k, v = draw(S.arrays((batch, heads, tk, d))), draw(S.arrays((batch, heads, tk, d)))
    bias = draw(S.score_biases((batch, heads, tq, tk)))
    key_mask = draw(st.none() | S.bool_masks((batch, tk)))
    return q, k, v, bias, key_mask, draw(st.booleans())


def values_and_grads(backend, attend, arrays, wanted, seed=0):
    """``attend(*tensors)`` on ``backend`` and the gradients of <output, random cotangent> with
    respect to the tensors at positions ``wanted``."""
    with mt.backend(backend):
        tensors = [mt.tensor(a, dtype=mt.float64, requires_grad=i in wanted)
                   for i, a in enumerate(arrays)]
        out = attend(*tensors)
        cotangent = np.random.default_rng(seed).standard_normal(out.shape)
        grads = mt.grad((out * mt.tensor(cotangent)).sum(), [tensors[i] for i in wanted])
    return [out.numpy()] + [g.numpy() for g in grads]


def assert_all_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, w, **TOL)


@pytest.mark.slow
@pytest.mark.eq(11, 12)
@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=25)
@given(problem=biased_problems(), bias_grad=st.booleans())
def test_the_fused_bias_matches_the_composite(backend, problem, bias_grad):
    """Values and gradients of q, k, v and (when it requires one) the bias, whose gradient has
    the bias's own shape: the scores' gradient summed over the broadcast axes."""
    q, k, v, bias, key_mask, causal = problem
    wanted = [0, 1, 2, 3] if bias_grad else [0, 1, 2]

    def fused(q, k, v, bias):
        return Attention.apply(q, k, v, key_mask, bias, scale=0.7, causal=causal)

    def composite(q, k, v, bias):
        return Attention.composite(q, k, v, key_mask, bias, scale=0.7, causal=causal)

    got = values_and_grads(backend, fused, (q, k, v, bias), wanted)
    assert_all_close(got, values_and_grads("numpy", composite, (q, k, v, bias), wanted))
    if bias_grad:
        assert got[4].shape == bias.shape


@pytest.mark.parametrize("backend", BACKENDS)
def test_queries_that_see_no_key_give_zero_output_and_zero_gradients(backend):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 2, 3, 4)) for _ in range(3))
    bias = rng.standard_normal((2, 1, 3, 3))
    bias[0, 0, 1] = -np.inf                       # batch row 0: query 1 sees nothing
    bias[1, 0, :, 2] = -np.inf                    # batch row 1: key 2 is hidden from all
    out, dq, dk, dv, dbias = values_and_grads(backend, lambda q, k, v, b: Attention.apply(
        q, k, v, None, b, scale=0.5, causal=False), (q, k, v, bias), [0, 1, 2, 3])
    np.testing.assert_array_equal(out[0, :, 1], 0)
    np.testing.assert_array_equal(dq[0, :, 1], 0)
    np.testing.assert_array_equal(dbias[0, 0, 1], 0)
    np.testing.assert_array_equal(dbias[1, 0, :, 2], 0)
    np.testing.assert_array_equal(dk[1, :, 2], 0)
    np.testing.assert_array_equal(dv[1, :, 2], 0)


def spy_on_the_kernel(monkeypatch, backend):
    """The bias (None or an array) of every call of ``backend``'s attention kernel."""
    seen = []
    instance = get_backend(backend)
    kernel = instance.attention

    def attention(q, k, v, scale, causal, key_mask, bias=None):
        seen.append(bias)
        return kernel(q, k, v, scale, causal, key_mask, bias)

    monkeypatch.setattr(instance, "attention", attention)
    return seen


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_general_mask_reaches_the_kernel_as_minus_infinity_in_the_bias(backend, monkeypatch):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 2, 4, 3)) for _ in range(3))
    bias = rng.standard_normal((2, 4, 4))
    mask = rng.random((2, 1, 4, 4)) < 0.6
    seen = spy_on_the_kernel(monkeypatch, backend)
    got = values_and_grads(backend, lambda q, k, v, b: F.scaled_dot_product_attention(
        q, k, v, mask=mask, bias=b), (q, k, v, bias), [0, 1, 2, 3])
    assert len(seen) == 1 and np.isneginf(seen[0][~np.broadcast_to(mask, (2, 2, 4, 4))]).all()
    want = values_and_grads("numpy", lambda q, k, v, b: F.attention_weights(
        q, k, mask=mask, bias=b) @ v, (q, k, v, bias), [0, 1, 2, 3])
    assert_all_close(got, want)


def test_a_bias_of_another_dtype_takes_the_composite(monkeypatch):
    seen = spy_on_the_kernel(monkeypatch, "numpy")
    q = mt.ones((1, 1, 2, 2), dtype=mt.float32)
    out = F.scaled_dot_product_attention(q, q, q, bias=mt.zeros((2, 2), dtype=mt.float64))
    assert seen == [] and out.dtype == mt.float64


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_relative_attention_and_t5_position_bias_run_the_fused_kernel(backend, monkeypatch):
    """Transformer-XL's positional terms and T5's bucketed position bias are score biases: the
    kernel gets them, and the layers still learn (a gradient reaches every parameter)."""
    from minitorch_nlp.models.t5 import T5Config, T5Model
    from minitorch_nlp.models.transformer_xl import (TransformerXLLayer,
                                                     relative_position_encoding)

    seen = spy_on_the_kernel(monkeypatch, backend)
    mt.manual_seed(0)
    layer = TransformerXLLayer(8, 2, 4, 16).to(backend)
    x = mt.tensor(np.random.default_rng(3).standard_normal((2, 5, 8)), backend=backend)
    memory = mt.tensor(np.random.default_rng(4).standard_normal((2, 3, 8)), backend=backend)
    positions = relative_position_encoding(8, 8, 0, mt.float32, backend, q_time=1)
    layer(x, memory, relative_positions=positions).sum().backward()
    assert len(seen) == 1 and seen[0].shape == (2, 2, 5, 8)
    assert all(p.grad is not None for p in layer.parameters())

    t5 = T5Model(T5Config.tiny(dropout_rate=0.0)).to(backend)
    ids = np.array([[3, 4, 5, 1]])
    t5(input_ids=ids, decoder_input_ids=ids).last_hidden_state.sum().backward()
    assert sum(b is not None for b in seen[1:]) >= 2   # encoder and decoder self-attention
    for stack in (t5.encoder, t5.decoder):
        assert stack.position_bias.relative_attention_bias.weight.grad is not None
