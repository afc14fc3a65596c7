"""Section VI-C.1: LQ-Nets (Zhang et al., 2018; eq 56-58) of ``minitorch_nlp.compress.lq_nets``.

Eq 56 against a reference that walks the intervals; eq 57 against a brute-force search over all
2^K encodings, with the straight-through gradient; QEM never increases the quantisation error;
eq 58 by the xnor-popcount kernels: each bit-plane product equals the float inner product of the
{-1, 1} encodings exactly, and the whole sum the float product of the quantised values, on the
NumPy and Numba backends; errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.backends import get_backend
from minitorch_nlp.compress import lq_nets as L
from minitorch_nlp.testing import strategies as S

pytestmark = pytest.mark.sec6

BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    "numba" not in mt.available_backends(), reason="numba is not installed"))]


def bases(k_max=3):
    return st.integers(1, k_max).flatmap(lambda k: S.arrays((k,), 0.05, 2.0))


def reference_interval_quantiser(x, levels):
    """Walk the intervals (t_l, t_{l+1}] of eq 56 one by one."""
    thresholds = [-np.inf] + [(a + b) / 2 for a, b in zip(levels[:-1], levels[1:])] + [np.inf]
    out = np.empty(len(x))
    for n, value in enumerate(x):
        for level in range(len(levels)):
            if thresholds[level] < value <= thresholds[level + 1]:
                out[n] = levels[level]
    return out


@pytest.mark.eq(56)
@given(S.arrays((7,), -4, 4), st.lists(st.floats(-3, 3), min_size=1, max_size=5, unique=True))
def test_eq56_interval_quantiser_matches_reference(x, levels):
    levels = np.array(sorted(levels))
    if len(levels) > 1 and np.min(np.diff(levels)) < 1e-9:
        return
    values, index = L.quantize_to_levels(x, levels)
    np.testing.assert_array_equal(values, reference_interval_quantiser(x, levels))
    np.testing.assert_array_equal(levels[index], values)


@pytest.mark.eq(57)
@given(S.arrays((6,), -4, 4), bases(), S.seeds())
def test_eq57_lq_quantiser_picks_the_nearest_encoding_with_straight_through_gradient(x, v, seed):
    brute = []
    for value in x:
        candidates = sorted(float(np.dot(v, e)) for e in itertools.product((-1, 1), repeat=len(v)))
        brute.append(min(candidates, key=lambda q: abs(value - q)))
    t = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    out = L.lq_quantize(t, v)
    np.testing.assert_allclose(np.abs(out.numpy() - x), np.abs(np.array(brute) - x),
                               rtol=1e-12, atol=1e-12)
    planes, values = L.lq_encode(x, v)
    assert set(np.unique(planes)) <= {-1.0, 1.0}
    np.testing.assert_allclose(np.tensordot(v, planes, axes=1), values, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), values, atol=1e-12)
    incoming = np.random.default_rng(seed).standard_normal(6)
    out.backward(mt.tensor(incoming, dtype=mt.float64))
    np.testing.assert_array_equal(t.grad.numpy(), incoming)


@pytest.mark.eq(57)
@pytest.mark.parametrize("bits", [1, 2, 3])
def test_qem_never_increases_the_quantisation_error(bits):
    x = np.random.default_rng(bits).standard_normal(500) ** 3
    v = L.initial_basis(x, bits)
    errors = [L.quantization_error(x, v)]
    for _ in range(6):
        v = L.fit_basis(x, basis=v, iterations=1)
        errors.append(L.quantization_error(x, v))
    assert all(b <= a + 1e-9 for a, b in zip(errors, errors[1:]))
    assert errors[-1] < 0.9 * errors[0]


@pytest.mark.eq(58)
@pytest.mark.parametrize("backend", BACKENDS)
@given(st.integers(1, 4), st.integers(1, 70), st.integers(1, 4), S.seeds())
def test_eq58_xnor_products_equal_the_float_products_exactly(backend, m, n, p, seed):
    rng = np.random.default_rng(seed)
    a, w = rng.standard_normal((m, n)), rng.standard_normal((p, n))
    v_a, v_w = np.array([0.3, 0.7]), np.array([0.2, 0.5, 1.1])
    kernels = get_backend(backend)
    a_planes, a_values = L.lq_encode(a, v_a)
    w_planes, w_values = L.lq_encode(w, v_w)
    for a_plane in a_planes:
        for w_plane in w_planes:
            bits = kernels.binary_matmul(kernels.pack_signs(a_plane), kernels.pack_signs(w_plane),
                                         n)
            np.testing.assert_array_equal(bits, (a_plane @ w_plane.T).astype(np.int32))
    np.testing.assert_allclose(L.lq_matmul(a, v_a, w, v_w, backend=backend),
                               a_values @ w_values.T, rtol=1e-12, atol=1e-12)


def test_lq_errors():
    with pytest.raises(ValueError, match=r"bits must be an integer in \[1, 16\]"):
        L.lq_levels(np.ones(17))
    with pytest.raises(ValueError, match=r"bits must be an integer in \[1, 16\]"):
        L.lq_levels(np.ones(0))
    with pytest.raises(ValueError, match="1-D array of K coefficients"):
        L.lq_levels(np.ones((2, 2)))
    with pytest.raises(ValueError, match="must share N"):
        L.lq_matmul(np.ones((2, 3)), [1.0], np.ones((2, 4)), [1.0])
    with pytest.raises(ValueError, match="sorted"):
        L.quantize_to_levels([0.0], [1.0, 0.5])
    with pytest.raises(ValueError, match="give bits"):
        L.fit_basis(np.ones(3))
