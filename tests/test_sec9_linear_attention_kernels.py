"""Causal linear attention (the Performer's prefix sums) as one fused operation
(``attention/causal_linear.py``, numba kernels in ``backends/numba_linear_kernels.py``).

``causal_linear_attention`` on the numpy and numba backends against a reference in HIPS autograd
written as the dense lower-triangular kernel matrix (values and float64 gradients); the numba
kernels against the NumPy backend's (float32 and float64, parallel and one thread); the chunk
length does not change the result; second derivatives (the composite) equal the composite's
own; a causal Performer gives the same values and gradients on both backends; the errors.
"""
from __future__ import annotations

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.attention import PerformerAttention
from minitorch_nlp.attention.causal_linear import CausalLinearAttention, causal_linear_attention
from minitorch_nlp.backends import get_backend
from tests.kernel_checks import on_threads

pytestmark = pytest.mark.sec9

NUMPY, NUMBA = get_backend("numpy"), get_backend("numba")
TOL64 = dict(rtol=1e-9, atol=1e-11)


@st.composite
def features_and_values(draw, dtype=np.float64):
    """Positive features (as phi makes them) of queries and keys, and values."""
    batch, heads, time = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 9))
    width, values = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    shape = (batch, heads, time)
    return (np.exp(rng.standard_normal(shape + (width,))).astype(dtype),
            np.exp(rng.standard_normal(shape + (width,))).astype(dtype),
            rng.standard_normal(shape + (values,)).astype(dtype))


def reference(qf, kf, v):
    """The kernel matrix qf kf^T kept on and below the diagonal, each row normalised."""
    kernel = anp.einsum("bhim,bhjm->bhij", qf, kf) * np.tril(np.ones((qf.shape[2],) * 2))
    return anp.einsum("bhij,bhjd->bhid", kernel / anp.sum(kernel, axis=-1, keepdims=True), v)


def _values_and_grads(backend_name, arrays, cotangent, chunk, fn=None):
    with mt.backend(backend_name):
        tensors = [mt.tensor(a, requires_grad=True) for a in arrays]
        out = (fn or causal_linear_attention)(*tensors, chunk=chunk)
        grads = mt.grad((out * mt.tensor(cotangent)).sum(), tensors)
    return [out.numpy()] + [g.numpy() for g in grads]


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["numpy", "numba"])
@given(arrays=features_and_values(), chunk=st.integers(1, 5), seed=st.integers(0, 99))
def test_causal_linear_attention_matches_reference(backend_name, arrays, chunk, seed):
    cotangent = np.random.default_rng(seed).standard_normal(arrays[2].shape)
    got = _values_and_grads(backend_name, arrays, cotangent, chunk)
    want = [reference(*arrays)] + list(autograd.grad(
        lambda *a: anp.sum(reference(*a) * cotangent), (0, 1, 2))(*arrays))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL64)


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]),
       parallel=st.booleans(), chunk=st.integers(1, 5), seed=st.integers(0, 99))
def test_numba_kernels_match_the_numpy_backend(data, dtype, parallel, chunk, seed):
    arrays = data.draw(features_and_values(dtype))
    expected, state = NUMPY.causal_linear_attention(*arrays, chunk)
    with on_threads(parallel):
        got, numba_state = NUMBA.causal_linear_attention(*arrays, chunk)
    tol = TOL64 if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, expected, **tol)
    grad = np.random.default_rng(seed).standard_normal(got.shape).astype(dtype)
    want = NUMPY.causal_linear_attention_backward(grad, *arrays, state, chunk)
    with on_threads(parallel):
        grads = NUMBA.causal_linear_attention_backward(grad, *arrays, numba_state, chunk)
    for g, w in zip(grads, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, **tol)


@given(arrays=features_and_values(), seed=st.integers(0, 99))
def test_the_chunk_length_does_not_change_the_result(arrays, seed):
    cotangent = np.random.default_rng(seed).standard_normal(arrays[2].shape)
    one = _values_and_grads("numpy", arrays, cotangent, 1)
    for g, w in zip(_values_and_grads("numpy", arrays, cotangent, 4), one):
        np.testing.assert_allclose(g, w, **TOL64)


@pytest.mark.parametrize("backend_name", ["numpy", "numba"])
@given(arrays=features_and_values(), seed=st.integers(0, 99))
def test_second_derivatives_equal_the_composites(backend_name, arrays, seed):
    results = []
    for fn in (CausalLinearAttention.apply, CausalLinearAttention.composite):
        rng = np.random.default_rng(seed)
        with mt.backend(backend_name):
            tensors = [mt.tensor(a, requires_grad=True) for a in arrays]
            out = fn(*tensors, chunk=3)
            grads = mt.grad((out * mt.tensor(rng.standard_normal(out.shape))).sum(), tensors,
                            create_graph=True)
            total = sum((g * mt.tensor(rng.standard_normal(g.shape))).sum() for g in grads)
            results.append([g.numpy() for g in mt.grad(total, tensors)])
    for fused, composite in zip(*results):
        np.testing.assert_allclose(fused, composite, **TOL64)


def test_a_causal_performer_agrees_between_numpy_and_numba():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 2, 10, 4)) for _ in range(3))
    cotangent = rng.standard_normal(v.shape)
    results = []
    for backend_name in ("numpy", "numba"):
        with mt.backend(backend_name):
            core = PerformerAttention(4, num_features=6, chunk=3,
                                      generator=mt.Generator(1)).to(mt.float64)
            tensors = [mt.tensor(a, requires_grad=True) for a in (q, k, v)]
            out, _ = core(*tensors, causal=True)
            grads = mt.grad((out * mt.tensor(cotangent)).sum(), tensors)
            results.append([out.numpy()] + [g.numpy() for g in grads])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, **TOL64)


def test_bad_shapes_and_chunks_are_refused():
    f = mt.tensor(np.ones((1, 2, 5, 3)))
    with pytest.raises(ValueError, match=r"causal_linear_attention: features \(1, 2, 5, 3\) and "
                                         r"\(1, 2, 4, 3\) must be equal"):
        causal_linear_attention(f, mt.tensor(np.ones((1, 2, 4, 3))), f)
    with pytest.raises(ValueError, match=r"values \(1, 2, 4, 3\)"):
        causal_linear_attention(f, f, mt.tensor(np.ones((1, 2, 4, 3))))
    with pytest.raises(ValueError, match="chunk"):
        causal_linear_attention(f, f, f, chunk=0)
