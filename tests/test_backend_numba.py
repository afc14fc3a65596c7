"""The numba backend against the NumPy backend, its reference.

Every numba kernel is compared with the NumPy backend's kernel of the same name, forward and
backward, on hypothesis-drawn inputs: float32 and float64, odd sizes and length-1 axes,
non-contiguous layouts (transposed, strided, sliced, reversed views), all-masked rows, logits of
1e4, and both the parallel and the single-thread path of each kernel. Tolerances: float64 1e-10,
float32 1e-5, relative to the largest value of the result (in float32 also times the problem's
condition number where it is large: for layer norm the rounding of the row mean is amplified by
1 / std, for attention gradients by the scale of the scores). Then the same comparison end to end
through the ``FusedFunction``s and ``mt.grad``, properties of banded attention, second order
(which runs the composite path), and the backend's plumbing (lazy import, concurrent callers).

Numba compiles each kernel once per dtype on first use (seconds) and caches it on disk; tests reuse
the two backend objects so that nothing compiles twice in a session.
"""
from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time
from unittest import mock

import numba
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_nlp as mt
from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.autograd.ops_fused import (Attention, BandedAttention, BiasGelu, CrossEntropy,
                                              Gelu, LayerNorm, LogSoftmax, Softmax)
from minitorch_nlp.backends import erf as erf_coefficients
from minitorch_nlp.backends import numba_backend, numba_kernels
from minitorch_nlp.backends.threads import in_threads, inside_a_task
from minitorch_nlp.testing import strategies as S
from tests.kernel_checks import (FLOAT_DTYPES, NUMBA, REF, arrays, assert_all_same, assert_same,
                                 attention_inputs, blocks_in_threads, dtypes, on_threads,
                                 parallel, small_shapes)
from tests.backend_checks import (ERF_ULPS, adam_cases, adam_steps,
                                  assert_heads_merge_without_a_copy, erf_arguments, erf_grid,
                                  erf_ulp_errors, heads_split_by_a_permute)


# ---- the kernels one by one --------------------------------------------------------------------
@numba.njit(cache=True)
def _exp_array(x, out):
    for i in range(x.shape[0]):
        out[i] = numba_kernels.fast_exp(x[i])


def test_fast_exp_is_exp_to_an_ulp():
    for dtype, low, high, ulps in ((np.float32, -110, 95, 1.5), (np.float64, -760, 720, 2.5)):
        x = np.concatenate([np.linspace(low, high, 200_001), np.linspace(-1e-3, 1e-3, 2_001),
                            [-np.inf, np.inf, np.nan, 0.0]]).astype(dtype)
        out = np.empty_like(x)
        _exp_array(x, out)
        exact = np.exp(x.astype(np.longdouble))
        info = np.finfo(dtype)
        normal = (exact >= info.tiny) & (exact <= info.max)
        relative = np.abs(out[normal] - exact[normal]) / exact[normal]
        assert relative.max() <= ulps * info.eps
        assert np.all(np.abs(out[exact < info.tiny] - exact[exact < info.tiny]) <= info.tiny)
        assert np.all(np.isposinf(out[exact > info.max]))
        assert out[-4] == 0 and np.isposinf(out[-3]) and np.isnan(out[-2]) and out[-1] == 1


@numba.njit(cache=True)
def _shifted_exp_array(x, out):
    for i in range(x.shape[0]):
        out[i] = numba_kernels.shifted_exp(x[i])


def test_shifted_exp_is_exp_to_an_ulp_on_a_softmaxs_range():
    """The softmax kernels' exp of (score - max) <= 0: within 1.5 ulp down to -87, 0 below (and
    for -inf, a masked score), in float32; fast_exp in float64."""
    for dtype, ulps in ((np.float32, 1.5), (np.float64, 2.5)):
        x = np.concatenate([np.linspace(-86.9, 0, 200_001), [-1e-30, 0.0]]).astype(dtype)
        out = np.empty_like(x)
        _shifted_exp_array(x, out)
        exact = np.exp(x.astype(np.longdouble))
        assert (np.abs(out - exact) / exact).max() <= ulps * np.finfo(dtype).eps
    below = np.array([-87.5, -100.0, -1e30, -np.inf], dtype=np.float32)
    out = np.empty_like(below)
    _shifted_exp_array(below, out)
    assert np.all(out == 0)


@numba.njit  # not cached: Numba's cache would not see an edit of numba_kernels.py
def _erf_array(x, out):
    for i in range(x.shape[0]):
        out[i] = numba_kernels.fast_erf(x[i])


def _kernels_erf(x):
    out = np.empty_like(x)
    _erf_array(x, out)
    return out


# the erf inside the numba kernels' GELU, and the NumPy backend's (which the numba backend keeps)
ERFS = {"numba_kernels.fast_erf": _kernels_erf, "NumPy backend": REF.erf}


@pytest.mark.parametrize("erf", ERFS.values(), ids=ERFS.keys())
def test_erf_is_within_a_few_ulp_of_math_erf_everywhere(erf):
    for dtype in FLOAT_DTYPES:
        x = erf_grid(dtype)
        got = erf(x)
        assert got.dtype == dtype
        assert erf_ulp_errors(got, x).max() <= ERF_ULPS
        assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


@pytest.mark.parametrize("erf", ERFS.values(), ids=ERFS.keys())
@given(x32=erf_arguments(np.float32), x64=erf_arguments(np.float64))
def test_erf_of_drawn_floats_is_within_a_few_ulp(erf, x32, x64):
    for x in (x32, x64):
        assert erf_ulp_errors(erf(x), x).max() <= ERF_ULPS


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gelu_constants_hold_erf_py_coefficients_where_the_loops_unpack_them(dtype):
    """The array the erf-GELU kernel takes, unpacked as its loops unpack it (the Python mirror of
    the compiled unpacking, both from ``_gelu_layout``): erf.py's polynomials and range, the four
    numbers, and for float32 the exponential's constants."""
    erf, numbers, exp = numba_kernels._unpack_gelu_constants(numba_kernels.gelu_constants(dtype))
    coefficients = erf_coefficients.FLOAT32 if dtype == np.float32 else erf_coefficients.FLOAT64
    assert erf == (tuple(coefficients.small), tuple(coefficients.tail), coefficients.split,
                   coefficients.centre, coefficients.end)
    assert numbers == tuple(dtype(v) for v in (0.5, 1.0, 1 / math.sqrt(2),
                                               1 / math.sqrt(2 * math.pi)))
    assert exp == (numba_kernels._SHIFTED_EXP32 if dtype == np.float32 else ())


def test_erf_gelu_is_the_erf_formula_to_a_few_ulp():
    """The erf GELU kernels (forward, and backward with the exponential shared between erf and
    the normal density) against x Phi(x) and Phi(x) + x phi(x) from ``math.erf`` in float64."""
    for dtype, tol in ((np.float32, 4e-7), (np.float64, 1e-15)):
        x = np.linspace(-12, 12, 20_001).astype(dtype)
        w = x.astype(np.float64)
        cdf = 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in w]))
        pdf = np.exp(-0.5 * w * w) / math.sqrt(2 * math.pi)
        got = NUMBA.gelu(x, "none"), NUMBA.gelu_backward(x, np.ones_like(x), "none")
        for value, want in zip(got, (w * cdf, cdf + w * pdf)):
            assert value.dtype == dtype
            np.testing.assert_allclose(value, want, rtol=tol, atol=tol)


def test_gelu_tanh_is_as_accurate_as_its_precision_allows():
    """The tanh GELU is computed as x * sigmoid(2u) (0.5 (1 + tanh u) = sigmoid(2u)) in the
    precision of x. On [-10, 10], in float32, its values and derivatives are as close to the exact
    ones (long double) as the NumPy backend's float32 tanh formula, within a factor of 2 in the
    worst absolute error (relative error is no measure near the derivative's zero at x = -0.75,
    where two terms cancel); in float64 it agrees with the textbook formula to 1e-12."""
    x = np.linspace(-10, 10, 400_001).astype(np.float32)
    w = x.astype(np.longdouble)
    u = np.sqrt(np.longdouble(2) / np.pi) * (w + np.longdouble(0.044715) * w ** 3)
    s = 1 / (1 + np.exp(-2 * u))
    du = np.sqrt(np.longdouble(2) / np.pi) * (1 + 3 * np.longdouble(0.044715) * w ** 2)
    exact, exact_grad = w * s, s + 2 * w * s * (1 - s) * du
    ones = np.ones_like(x)
    ours = (NUMBA.gelu(x, "tanh"), NUMBA.gelu_backward(x, ones, "tanh"))
    numpy_f32 = (REF.gelu(x, "tanh"), REF.gelu_backward(x, ones, "tanh"))
    for got, baseline, want in zip(ours, numpy_f32, (exact, exact_grad)):
        assert got.dtype == np.float32
        worst = np.abs(got.astype(np.longdouble) - want).max()
        assert worst <= 2 * np.abs(baseline.astype(np.longdouble) - want).max()
        assert worst <= 2.5e-6
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(NUMBA.gelu(x64, "tanh"), REF.gelu(x64, "tanh"), rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_allclose(NUMBA.gelu_backward(x64, np.ones_like(x64), "tanh"),
                               REF.gelu_backward(x64, np.ones_like(x64), "tanh"), rtol=1e-12,
                               atol=1e-14)


@given(st.data())
def test_softmax_and_log_softmax(data):
    dtype = data.draw(dtypes)
    x = data.draw(arrays(data.draw(small_shapes()), dtype, large=True, masked=True))
    axis = data.draw(st.sampled_from([-1, x.ndim - 1]) | S.axis(x.ndim))
    grad = data.draw(arrays(x.shape, dtype))
    for name in ("softmax", "log_softmax"):
        expected = getattr(REF, name)(x, axis)
        with on_threads(data.draw(parallel)):
            actual = getattr(NUMBA, name)(x, axis)
            actual_grad = getattr(NUMBA, f"{name}_backward")(actual, grad, axis)
        assert_same(actual, expected)
        assert_same(actual_grad, getattr(REF, f"{name}_backward")(expected, grad, axis))


def test_softmax_all_masked_row_is_zero_not_nan():
    for dtype in FLOAT_DTYPES:
        x = np.array([[-np.inf] * 3, [1e4, 0, -1e4]], dtype=dtype)
        y = NUMBA.softmax(x, -1)
        np.testing.assert_array_equal(y, [[0, 0, 0], [1, 0, 0]])
        np.testing.assert_array_equal(NUMBA.softmax_backward(y, np.ones_like(x), -1), 0)
        np.testing.assert_array_equal(NUMBA.log_softmax(x, -1)[0], -np.inf)


@pytest.mark.parametrize("rows", [1, numba_kernels._CHUNKS - 1, numba_kernels._CHUNKS + 1, 200])
def test_row_kernels_on_threads_give_the_calling_threads_bits(rows):
    """The row kernels split the rows into ``_CHUNKS`` chunks of consecutive rows on Numba's
    threads (every row in one chunk, whether there are fewer rows than chunks or more): each
    row's result is the one the calling thread computes, bit for bit."""
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 33)).astype(np.float32) * 4
    x[rows // 2] = -np.inf      # a row that sees nothing
    finite = np.where(np.isfinite(x), x, 0)
    grad = rng.standard_normal(x.shape).astype(np.float32)
    target = rng.integers(-1, x.shape[1], rows)       # -1: ignored rows
    weight, bias = (rng.standard_normal(x.shape[1]).astype(np.float32) for _ in range(2))

    def results():
        out = []
        for name in ("softmax", "log_softmax"):
            y = getattr(NUMBA, name)(x, -1)
            out += [y, getattr(NUMBA, f"{name}_backward")(y, grad, -1)]
        for smoothing in (0.0, 0.1):
            loss, state = NUMBA.cross_entropy(finite, target, -1, smoothing)
            out += [loss, NUMBA.cross_entropy_backward(state, target, grad[:, 0], -1, smoothing)]
        y, state = NUMBA.layer_norm(finite, weight, bias, 1e-5)
        return out + [y, *state, NUMBA.layer_norm_backward(grad, finite, state, weight)[0]]

    with on_threads(False):
        alone = results()
    with on_threads(True):
        shared = results()
    for got, want in zip(shared, alone):
        np.testing.assert_array_equal(got, want)


@given(st.data())
def test_layer_norm(data):
    dtype = data.draw(dtypes)
    x = data.draw(arrays(data.draw(small_shapes()), dtype))
    width = x.shape[-1:]
    weight = data.draw(st.none() | arrays(width, dtype))
    bias = data.draw(st.none() | arrays(width, dtype))
    eps = data.draw(st.sampled_from([1e-5, 0.1]))
    grad = data.draw(arrays(x.shape, dtype))
    expected, ref_state = REF.layer_norm(x, weight, bias, eps)
    with on_threads(data.draw(parallel)):
        actual, state = NUMBA.layer_norm(x, weight, bias, eps)
        grads = NUMBA.layer_norm_backward(grad, x, state, weight)
    assert isinstance(state, numba_backend._LayerNormState)  # the kernels ran, no fallback
    rstd = ref_state[1].reshape(-1)
    cond = max(1.0, float(np.abs(x).max() * rstd.max()))
    assert_all_same((actual, state.mean, state.rstd),
                    (expected, x.mean(axis=-1).reshape(-1), rstd), cond)
    rows = x.size // x.shape[-1]
    assert_all_same(grads, REF.layer_norm_backward(grad, x, ref_state, weight),
                    cond * float(rstd.max()) * rows)


def test_layer_norm_falls_back_to_numpy_for_what_the_kernel_does_not_take():
    x = np.arange(6.0).reshape(2, 3)
    weight = np.ones(3, np.float32)               # another dtype than x's
    grad = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    expected, ref_state = REF.layer_norm(x, weight, None, 1e-5)
    y, state = NUMBA.layer_norm(x, weight, None, 1e-5)
    assert not isinstance(state, numba_backend._LayerNormState)
    assert_same(y, expected)
    assert_all_same(NUMBA.layer_norm_backward(grad, x, state, weight),
                    REF.layer_norm_backward(grad, x, ref_state, weight))


def test_layer_norm_constant_rows_give_bias():
    for dtype in FLOAT_DTYPES:
        x = np.full((2, 5), 0.7, dtype=dtype)
        bias = np.arange(5, dtype=dtype)
        y, state = NUMBA.layer_norm(x, np.ones(5, dtype), bias, 1e-5)
        np.testing.assert_allclose(y, np.broadcast_to(bias, x.shape), atol=1e-3)
        grads = NUMBA.layer_norm_backward(np.ones_like(x), x, state, np.ones(5, dtype))
        assert all(np.isfinite(a).all() for a in (*state, *grads))


@given(st.data())
def test_gelu_and_bias_gelu(data):
    dtype = data.draw(dtypes)
    approximate = data.draw(st.sampled_from(["none", "tanh"]))
    x = data.draw(arrays(data.draw(small_shapes()), dtype, low=-10, high=10))
    bias = data.draw(arrays(x.shape[-1:], dtype))
    grad = data.draw(arrays(x.shape, dtype))
    with on_threads(data.draw(parallel)):
        assert_same(NUMBA.gelu(x, approximate), REF.gelu(x, approximate))
        assert_same(NUMBA.gelu_backward(x, grad, approximate),
                    REF.gelu_backward(x, grad, approximate))
        assert_same(NUMBA.bias_gelu(x, bias, approximate), REF.bias_gelu(x, bias, approximate))
        assert_same(NUMBA.bias_gelu_backward(x, bias, grad, approximate),
                    REF.bias_gelu_backward(x, bias, grad, approximate))


@given(case=adam_cases(FLOAT_DTYPES), threads=parallel)
def test_adam_update(case, threads):
    """The fused update against the NumPy backend's whole-array one, over a few steps (Adam and
    AdamW, with and without AMSGrad), on the calling thread and on Numba's threads."""
    theta, grads, amsgrad, options = case
    with on_threads(threads):
        assert_all_same(adam_steps(NUMBA, theta, grads, amsgrad, options),
                        adam_steps(REF, theta, grads, amsgrad, options))


def test_adam_update_falls_back_on_layouts_the_kernel_does_not_take():
    """A transposed (non-contiguous) parameter and a float32 gradient on a float64 parameter go
    to the NumPy update; the result is the same."""
    rng = np.random.default_rng(0)
    options = dict(step=1, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
                   decoupled=True)
    for theta, grad in ((rng.standard_normal((4, 3)).T, rng.standard_normal((3, 4))),
                        (rng.standard_normal(5), rng.standard_normal(5).astype(np.float32))):
        results = []
        for backend in (NUMBA, REF):
            state = [theta.T.copy().T, np.zeros_like(theta), np.zeros_like(theta)]  # layout kept
            backend.adam_update(state[0], grad, state[1], state[2], None,
                                [np.empty_like(theta), np.empty_like(theta)], **options)
            results.append(state)
        assert_all_same(*results)


@given(st.data())
def test_scatter_add_rows(data):
    dtype = data.draw(dtypes)
    num_rows = data.draw(st.integers(1, 6))
    index = data.draw(S.index_arrays(num_rows, small_shapes(max_dims=2), allow_negative=False))
    src = data.draw(arrays(index.shape + (data.draw(st.integers(1, 4)),), dtype))
    with on_threads(data.draw(parallel)):
        actual = NUMBA.scatter_add_rows(index, src, num_rows)
    assert_same(actual, REF.scatter_add_rows(index, src, num_rows))


@given(st.data())
def test_scatter_add_rows_negative_indices_count_from_the_end(data):
    num_rows = data.draw(st.integers(1, 6))
    index = data.draw(S.index_arrays(num_rows, st.just((7,))))
    src = data.draw(arrays((7, 3), np.float64))
    expected = np.zeros((num_rows, 3))
    np.add.at(expected, index, src)
    assert_same(NUMBA.scatter_add_rows(index, src, num_rows), expected)


def test_scatter_add_rows_refuses_an_index_out_of_range():
    with pytest.raises(IndexError, match="index 4 is out of range for 4 rows"):
        NUMBA.scatter_add_rows(np.array([0, 4]), np.ones((2, 3)), 4)


@given(st.data())
def test_cross_entropy(data):
    dtype = data.draw(dtypes)
    rows, classes = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 7))
    logits = data.draw(arrays((rows, classes), dtype, large=True))
    ignore_index = data.draw(st.sampled_from([-100, 0]))
    target = data.draw(hnp.arrays(np.int64, (rows,), elements=st.integers(-classes, classes - 1)
                                  | st.just(ignore_index)))
    smoothing = data.draw(st.sampled_from([0.0, 0.1, 0.5]))
    grad_rows = data.draw(arrays((rows,), dtype))
    expected, ref_state = REF.cross_entropy(logits, target, ignore_index, smoothing)
    with on_threads(data.draw(parallel)):
        actual, state = NUMBA.cross_entropy(logits, target, ignore_index, smoothing)
        grad = NUMBA.cross_entropy_backward(state, target, grad_rows, ignore_index, smoothing)
    assert_same(actual, expected)
    assert_same(grad, REF.cross_entropy_backward(ref_state, target, grad_rows, ignore_index,
                                                 smoothing))


@given(attention_inputs(), st.booleans(), st.sampled_from([1 << 20, 7, 3]),
       st.sampled_from([128, 2, 1]), parallel, st.booleans(), st.data())
def test_attention_with_a_score_bias(inputs, keep_probs, block, causal_rows, parallel, strided,
                                     data):
    """As ``test_attention``, with a bias added to the scores inside the kernel; its gradient
    (the scores' gradient summed over the axes it was broadcast along) against the NumPy
    backend's."""
    q, k, v, grad, key_mask, scale, causal = inputs
    bias = data.draw(S.score_biases(q.shape[:3] + k.shape[2:3], q.dtype))
    if strided:
        q, k, v, grad = (heads_split_by_a_permute(x) for x in (q, k, v, grad))
    expected, ref_state = REF.attention(q, k, v, scale, causal, key_mask, bias)
    keep = (1 << 20) * keep_probs
    with mock.patch.multiple(numba_backend, _KEEP_PROBS=keep, _CAUSAL_KEEP_PROBS=keep,
                             _ATTENTION_BLOCK=block, _CAUSAL_ROWS=causal_rows), \
            on_threads(parallel):
        actual, state = NUMBA.attention(q, k, v, scale, causal, key_mask, bias)
        grads = NUMBA.attention_backward(grad, q, k, v, state, scale, causal, key_mask, True)
    assert isinstance(state, numba_backend._AttentionState)  # the kernels ran, no fallback
    assert_same(actual, expected)
    assert np.isfinite(actual).all() and all(np.isfinite(g).all() for g in grads)
    assert grads[3].shape == bias.shape
    assert_all_same(grads, REF.attention_backward(grad, q, k, v, ref_state, scale, causal,
                                                  key_mask, True), cond=max(1.0, scale))
    assert_heads_merge_without_a_copy(actual, grads[:3] if strided else ())


def test_attention_bias_of_another_dtype_falls_back_to_numpy():
    q = np.ones((1, 1, 2, 2), np.float32)
    bias = np.zeros((2, 2))
    out, state = NUMBA.attention(q, q, q, 1.0, False, None, bias)
    assert not isinstance(state, numba_backend._AttentionState)
    assert_same(out, REF.attention(q, q, q, 1.0, False, None, bias)[0])


@given(attention_inputs(), st.booleans(), st.sampled_from([1 << 20, 7, 3]),
       st.sampled_from([128, 2, 1]), parallel, st.booleans())
def test_attention(inputs, keep_probs, block, causal_rows, parallel, strided):
    """Without ``keep_probs`` the backward recomputes the probabilities. A small ``block`` splits
    the scores, kept or not, into blocks of pairs and query rows; without ``keep_probs`` a small
    ``causal_rows`` then makes causal blocks of only the keys their rows can see, as at long
    sequence lengths. ``strided``: q, k, v and the output's gradient as heads split off a
    projection, read where they are."""
    q, k, v, grad, key_mask, scale, causal = inputs
    if strided:
        q, k, v, grad = (heads_split_by_a_permute(x) for x in (q, k, v, grad))
    expected, ref_state = REF.attention(q, k, v, scale, causal, key_mask)
    keep = (1 << 20) * keep_probs
    with mock.patch.multiple(numba_backend, _KEEP_PROBS=keep, _CAUSAL_KEEP_PROBS=keep,
                             _ATTENTION_BLOCK=block, _CAUSAL_ROWS=causal_rows), \
            on_threads(parallel):
        actual, state = NUMBA.attention(q, k, v, scale, causal, key_mask)
        grads = NUMBA.attention_backward(grad, q, k, v, state, scale, causal, key_mask)
    assert_same(actual, expected)
    # in float32 a gradient's rounding error grows with the scale of the scores
    assert_all_same(grads, REF.attention_backward(grad, q, k, v, ref_state, scale, causal,
                                                  key_mask), cond=max(1.0, scale))
    assert_heads_merge_without_a_copy(actual, grads[:3] if strided else ())


@given(attention_inputs(), st.booleans(), st.sampled_from([1 << 20, 7, 3]),
       st.sampled_from([128, 2, 1]), st.booleans(), st.data())
def test_attention_blocks_in_threads_give_the_calling_threads_result(inputs, keep_probs, block,
                                                                     causal_rows, with_bias,
                                                                     data):
    """With the blocks spread over Python threads (the backward's only when they are whole
    pairs), the output, the saved state and the gradients are those of the calling thread's
    run, bit for bit, and match the NumPy backend."""
    q, k, v, grad, key_mask, scale, causal = inputs
    bias = data.draw(S.score_biases(q.shape[:3] + k.shape[2:3], q.dtype)) if with_bias else None
    keep = (1 << 20) * keep_probs
    with mock.patch.multiple(numba_backend, _KEEP_PROBS=keep, _CAUSAL_KEEP_PROBS=keep,
                             _ATTENTION_BLOCK=block, _CAUSAL_ROWS=causal_rows):
        with on_threads(False):
            expected, expected_state = NUMBA.attention(q, k, v, scale, causal, key_mask, bias)
            expected_grads = NUMBA.attention_backward(grad, q, k, v, expected_state, scale,
                                                      causal, key_mask, with_bias)
        with blocks_in_threads():
            actual, state = NUMBA.attention(q, k, v, scale, causal, key_mask, bias)
            grads = NUMBA.attention_backward(grad, q, k, v, state, scale, causal, key_mask,
                                             with_bias)
    np.testing.assert_array_equal(actual, expected)
    for saved, expected_saved in zip((state.peak, state.inv_total, state.probs),
                                     (expected_state.peak, expected_state.inv_total,
                                      expected_state.probs)):
        np.testing.assert_array_equal(saved, expected_saved)
    for g, expected_g in zip(grads, expected_grads):
        np.testing.assert_array_equal(g, expected_g)
    _, ref_state = REF.attention(q, k, v, scale, causal, key_mask, bias)
    assert_all_same(grads, REF.attention_backward(grad, q, k, v, ref_state, scale, causal,
                                                  key_mask, with_bias), cond=max(1.0, scale))


@given(st.integers(1, 10), st.integers(1, 6), st.integers(1, 9), st.integers(1, 9),
       st.booleans(), st.integers(1, 4), st.sampled_from([1 << 18, 50, 7]))
def test_attention_blocks_cover_every_pair_once_in_slices_of_the_batch(batch, heads, tq, tk,
                                                                      causal, threads, block):
    with mock.patch.object(numba_backend, "_ATTENTION_BLOCK", block):
        blocks = list(NUMBA._attention_blocks(batch, heads, tq, tk, causal, threads))
    covered = np.zeros((batch, heads, tq), dtype=int)
    for b0, b1, h0, h1, i0, i1, keys in blocks:
        assert (b1 - b0) * (h1 - h0) * (i1 - i0) * keys <= max(block, tk)
        # whole entries, or heads of one entry; query rows of one pair only: the block's
        # kept probabilities are a contiguous slice of (batch, heads, tq, tk)
        assert (h0, h1) == (0, heads) or b1 == b0 + 1
        assert (i0, i1) == (0, tq) or (b1 - b0) * (h1 - h0) == 1
        covered[b0:b1, h0:h1, i0:i1] += 1
    assert (covered == 1).all()
    pairs = batch * heads
    first_rows = [(b1 - b0) * (h1 - h0) for b0, b1, h0, h1, i0, *_ in blocks if i0 == 0]
    if len(first_rows) < threads:   # fewer blocks than threads only when each is a thread's share
        assert max(first_rows) <= -(-pairs // threads)


def test_in_threads_runs_every_task_and_hands_back_its_error():
    done = []
    in_threads([lambda i=i: done.append(i) for i in range(5)], 2)
    assert sorted(done) == list(range(5))

    def fails():
        raise ValueError("a task's error")

    with pytest.raises(ValueError, match="a task's error"):
        in_threads([fails, lambda: None], 2)


def test_in_threads_runs_tasks_on_the_calling_thread_and_one_pool_thread_side_by_side():
    """With two threads, the calling thread takes tasks too: two tasks that each wait for the
    other to start finish only if they run at the same time, one of them on the caller. Inside
    a task ``inside_a_task`` holds (its kernels use one thread); after, the caller is itself
    again."""
    together = threading.Barrier(2, timeout=30)
    ran_on = []

    def task():
        ran_on.append((threading.get_ident(), inside_a_task()))
        together.wait()

    in_threads([task, task], 2)
    assert {ident for ident, _ in ran_on} >= {threading.get_ident()} and len(set(ran_on)) == 2
    assert all(inside for _, inside in ran_on) and not inside_a_task()


def test_blocks_in_threads_after_a_fork():
    """A child forked after the pool started has none of its threads: it must start its own
    rather than wait for them."""
    in_threads([lambda: None, lambda: None], 2)   # the parent's pool exists
    q = np.random.default_rng(0).standard_normal((2, 2, 8, 4))
    expected = NUMBA.attention(q, q, q, 0.5, False, None)[0]
    child = os.fork()
    if child == 0:
        with blocks_in_threads():
            same = np.array_equal(NUMBA.attention(q, q, q, 0.5, False, None)[0], expected)
        os._exit(0 if same else 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    pytest.fail("the forked child hung in in_threads")


def test_attention_all_masked_query_gives_zero_output_and_gradient():
    q = k = v = np.ones((1, 1, 3, 2))
    key_mask = np.zeros((1, 3), dtype=bool)
    out, state = NUMBA.attention(q, k, v, 1.0, False, key_mask)
    np.testing.assert_array_equal(out, 0)
    *grads, dbias = NUMBA.attention_backward(np.ones_like(out), q, k, v, state, 1.0, False,
                                             key_mask)
    assert dbias is None
    for g in grads:
        np.testing.assert_array_equal(g, 0)


@given(attention_inputs(same_length=True), st.integers(0, 7), st.integers(1, 3), parallel)
def test_banded_attention(inputs, window, dilation, parallel):
    q, k, v, grad, key_mask, scale, causal = inputs
    args = (scale, window, dilation, causal, key_mask)
    expected, ref_state = REF.banded_attention(q, k, v, *args)
    with on_threads(parallel):
        actual, state = NUMBA.banded_attention(q, k, v, *args)
        grads = NUMBA.banded_attention_backward(grad, q, k, v, state, *args)
    width = (window + 1) if causal else (2 * window + 1)
    assert state.shape == q.shape[:3] + (width,)  # memory n * width, never n^2
    assert_same(actual, expected)
    assert_all_same(grads, REF.banded_attention_backward(grad, q, k, v, ref_state, *args),
                    cond=max(1.0, scale))


@contextlib.contextmanager
def few_row_products_of_any_size(calls):
    """The few-row kernel for weights of every size, each call recorded in ``calls``."""
    kernel = numba_backend.product_kernels.few_rows_product

    def recording(*args):
        calls.append(args[3].shape)
        return kernel(*args)

    with mock.patch.object(numba_backend, "_FEW_ROWS_LEAST", 0), \
            mock.patch.object(numba_backend.product_kernels, "few_rows_product", recording):
        yield


@given(st.data())
def test_few_row_product_is_numpys_product(data):
    """(rows <= _FEW_ROWS, K) @ a column-major (K, N), a transposed row-major weight, runs the
    few-row kernel and gives NumPy's product; more rows, a row-major (K, N) or mixed dtypes are
    NumPy's own product."""
    dtype = data.draw(dtypes)
    rows = data.draw(st.integers(1, numba_backend._FEW_ROWS + 2))
    depth, n = data.draw(st.integers(1, 40)), data.draw(st.integers(1, 40))
    a = data.draw(arrays((rows, depth), dtype))
    weight = data.draw(S.arrays((n, depth), -3, 3, dtype=dtype))
    b = weight.T if data.draw(st.booleans()) else np.ascontiguousarray(weight.T)
    calls = []
    with on_threads(data.draw(parallel)), few_row_products_of_any_size(calls):
        got = NUMBA.matmul(a, b)
    assert_same(got, np.matmul(a, b), cond=depth)
    kernel_applies = (rows <= numba_backend._FEW_ROWS and b.flags.f_contiguous
                      and not b.flags.c_contiguous)
    assert calls == ([(rows, n)] if kernel_applies else [])


def test_few_row_product_leaves_mixed_dtypes_and_stacks_to_numpy():
    a32 = np.ones((2, 3), np.float32)
    b64 = np.asfortranarray(np.ones((3, 4)))
    calls = []
    with few_row_products_of_any_size(calls):
        assert NUMBA.matmul(a32, b64).dtype == np.float64
        assert NUMBA.matmul(np.ones((2, 2, 3)), b64).shape == (2, 2, 4)
        out = np.empty((2, 4))
        assert NUMBA.matmul(np.ones((2, 3)), b64, out=out) is out
    assert calls == []


def test_linear_on_the_numba_backend_keeps_weights_row_major_and_decodes_with_the_kernel():
    """The numba backend stores every ``nn.Linear`` weight row-major, so that a decoding step's
    few rows take the few-row kernel; values match the NumPy backend's layer."""
    with mt.backend("numpy"):
        mt.manual_seed(0)
        reference = nn.Linear(6, 9, dtype=mt.float64)
    with mt.backend("numba"):
        mt.manual_seed(0)
        layer = nn.Linear(6, 9, dtype=mt.float64)
    assert layer.weight.data.flags.c_contiguous and reference.weight.data.flags.f_contiguous
    x = np.random.default_rng(1).standard_normal((3, 6))
    calls = []
    with few_row_products_of_any_size(calls):
        got = layer(mt.tensor(x, backend="numba")).numpy()
    assert calls == [(3, 9)]
    np.testing.assert_allclose(got, reference(mt.tensor(x, backend="numpy")).numpy(),
                               rtol=1e-12, atol=1e-12)


@given(st.data())
def test_matmul_int8(data):
    m, depth, n = (data.draw(st.integers(1, 9)) for _ in range(3))
    a = data.draw(hnp.arrays(np.int8, (m, depth)))
    b = data.draw(hnp.arrays(np.int8, (depth, n)))
    if data.draw(st.booleans()):  # non-contiguous: a transposed copy and every other column
        a, b = np.asfortranarray(a), np.repeat(b, 2, axis=1)[:, ::2]
    with on_threads(data.draw(parallel)):
        assert_same(NUMBA.matmul_int8(a, b), REF.matmul_int8(a, b))


@given(st.data())
def test_binary_matmul(data):
    m, n, depth = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5)), \
        data.draw(st.integers(1, 140))
    a = data.draw(S.arrays((m, depth)))
    b = data.draw(S.arrays((n, depth)))
    a_bits, b_bits = REF.pack_signs(a), REF.pack_signs(b)
    expected = np.where(a >= 0, 1, -1) @ np.where(b >= 0, 1, -1).T
    with on_threads(data.draw(parallel)):
        actual = NUMBA.binary_matmul(a_bits, b_bits, depth)
    assert_same(actual, REF.binary_matmul(a_bits, b_bits, depth))
    np.testing.assert_array_equal(actual, expected)


# ---- end to end: tensors on the numba backend through the fused functions -----------------------
def _values_and_grads(backend_name, fn, arrays, seed=0, create_graph=False):
    """``fn(*tensors)`` on ``backend_name`` and the gradients of <fn, random cotangent> with
    respect to every tensor (with ``create_graph``: the gradient of <those gradients, random
    directions> instead)."""
    rng = np.random.default_rng(seed)
    with mt.backend(backend_name):
        tensors = [mt.tensor(a, dtype=a.dtype, requires_grad=True) for a in arrays]
        out = fn(*tensors)
        assert out.backend.name == backend_name
        cotangent = mt.tensor(rng.standard_normal(out.shape), dtype=out.dtype)
        grads = mt.grad((out * cotangent).sum(), tensors, create_graph=create_graph)
        if create_graph:
            total = sum((g * mt.tensor(rng.standard_normal(g.shape), dtype=g.dtype)).sum()
                        for g in grads)
            grads = mt.grad(total, tensors, allow_unused=True)
    return [out.numpy()] + [None if g is None else g.numpy() for g in grads]


def _fused_cases(dtype):
    rng = np.random.default_rng(1)

    def normal(*shape):
        return rng.standard_normal(shape).astype(dtype)

    key_mask = np.array([[True, True, False, True, True], [False] * 5])
    target = np.array([3, -100, 0, 6, 6, 1])
    ids = np.array([[0, 2, 2], [4, 0, 2]])
    return {
        "softmax": (lambda x: Softmax.apply(x, axis=-1), [normal(3, 4, 7)]),
        "log_softmax": (lambda x: LogSoftmax.apply(x, axis=-1), [normal(3, 4, 7)]),
        "layer_norm": (lambda x, w, b: LayerNorm.apply(x, w, b, eps=1e-5),
                       [normal(3, 4, 7), normal(7), normal(7)]),
        "gelu_erf": (lambda x: Gelu.apply(x, approximate="none"), [normal(3, 4, 7)]),
        "gelu_tanh": (lambda x: Gelu.apply(x, approximate="tanh"), [normal(3, 4, 7)]),
        "bias_gelu": (lambda x, b: BiasGelu.apply(x, b, approximate="tanh"),
                      [normal(3, 4, 7), normal(7)]),
        "cross_entropy": (lambda x: CrossEntropy.apply(x, target, ignore_index=-100,
                                                       label_smoothing=0.1), [normal(6, 7)]),
        "attention": (lambda q, k, v: Attention.apply(q, k, v, key_mask, None, scale=0.5,
                                                      causal=True),
                      [normal(2, 3, 5, 4), normal(2, 3, 5, 4), normal(2, 3, 5, 3)]),
        "attention_bias": (lambda q, k, v, b: Attention.apply(q, k, v, key_mask, b, scale=0.5,
                                                              causal=True),
                           [normal(2, 3, 5, 4), normal(2, 3, 5, 4), normal(2, 3, 5, 3),
                            normal(3, 5, 5)]),
        "banded_attention": (lambda q, k, v: BandedAttention.apply(
            q, k, v, key_mask, scale=0.5, window=2, dilation=1, causal=False),
            [normal(2, 3, 5, 4), normal(2, 3, 5, 4), normal(2, 3, 5, 3)]),
        "embedding_lookup": (lambda w: w[ids], [normal(5, 4)]),
    }


@pytest.mark.parametrize("threads", [False, True])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", sorted(_fused_cases(np.float64)))
def test_fused_functions_match_the_numpy_backend(case, dtype, threads):
    fn, inputs = _fused_cases(dtype)[case]
    with on_threads(threads):
        actual = _values_and_grads("numba", fn, inputs)
    assert_all_same(actual, _values_and_grads("numpy", fn, inputs))


@pytest.mark.parametrize("case", ["softmax", "layer_norm", "gelu_tanh", "bias_gelu",
                                  "cross_entropy", "attention", "attention_bias",
                                  "banded_attention"])
def test_second_order_on_the_numba_backend(case):
    """Under create_graph the fused functions differentiate their composite path."""
    fn, inputs = _fused_cases(np.float64)[case]
    assert_all_same(_values_and_grads("numba", fn, inputs, create_graph=True),
                    _values_and_grads("numpy", fn, inputs, create_graph=True))


@pytest.mark.parametrize("causal", [False, True])
def test_banded_attention_with_a_wide_window_is_full_attention(causal):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 2, 6, 3)) for _ in range(3))
    key_mask = np.array([[True] * 6, [True, False, True, True, False, True]])
    for window in (5, 9):
        banded = _values_and_grads("numba", lambda q, k, v: BandedAttention.apply(
            q, k, v, key_mask, scale=0.4, window=window, dilation=1, causal=causal), [q, k, v])
        full = _values_and_grads("numba", lambda q, k, v: Attention.apply(
            q, k, v, key_mask, None, scale=0.4, causal=causal), [q, k, v])
        assert_all_same(banded, full)


def test_key_mask_given_as_a_tensor():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 4, 3)) for _ in range(3))
    mask = np.array([[True, False, True, True]])
    results = []
    for name in ("numpy", "numba"):
        with mt.backend(name):
            key_mask = mt.tensor(mask)
            results.append(_values_and_grads(name, lambda q, k, v: Attention.apply(
                q, k, v, key_mask, None, scale=0.5, causal=False), [q, k, v]))
    assert_all_same(*reversed(results))


def test_a_tiny_transformer_block_trains_the_same_on_both_backends():
    """Embedding, layer norm, causal multi-head attention, bias+GELU feed-forward, cross-entropy:
    the loss and every parameter's gradient agree between the numpy and numba backends."""
    vocab, d_model, heads, length, batch = 11, 8, 2, 6, 3
    rng = np.random.default_rng(4)
    ids = rng.integers(0, vocab, (batch, length))
    targets = np.where(rng.random((batch, length)) < 0.2, -100, rng.integers(0, vocab,
                                                                             (batch, length)))
    key_mask = np.ones((batch, length), dtype=bool)
    key_mask[0, 4:] = False
    results = []
    for name in ("numpy", "numba"):
        mt.manual_seed(0)
        layers = nn.ModuleDict({
            "embed": nn.Embedding(vocab, d_model, dtype=mt.float64),
            "norm": nn.LayerNorm(d_model, dtype=mt.float64),
            "qkv": nn.Linear(d_model, 3 * d_model, dtype=mt.float64),
            "up": nn.Linear(d_model, 4 * d_model, bias=False, dtype=mt.float64),
            "down": nn.Linear(4 * d_model, vocab, dtype=mt.float64),
        }).to(name)
        up_bias = nn.Parameter(mt.tensor(np.linspace(-1, 1, 4 * d_model), dtype=mt.float64,
                                         backend=name))
        with mt.backend(name):
            x = layers["norm"](layers["embed"](mt.tensor(ids)))
            q, k, v = (t.reshape(batch, length, heads, -1).transpose(0, 2, 1, 3)
                       for t in layers["qkv"](x).chunk(3, axis=-1))
            attended = Attention.apply(q, k, v, key_mask, None, scale=0.5, causal=True)
            x = x + attended.transpose(0, 2, 1, 3).reshape(batch, length, d_model)
            hidden = BiasGelu.apply(layers["up"](x), up_bias, approximate="tanh")
            logits = layers["down"](hidden)
            loss = F.cross_entropy(logits.reshape(-1, vocab), mt.tensor(targets.reshape(-1)))
            params = list(layers.parameters()) + [up_bias]
            grads = mt.grad(loss, params)
        results.append([loss.numpy()] + [g.numpy() for g in grads])
    assert_all_same(results[1], results[0])


# ---- plumbing -----------------------------------------------------------------------------------
def test_importing_the_package_does_not_import_numba():
    code = "import sys, minitorch_nlp; print('numba' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_kernels_called_from_several_threads_at_once():
    """Numba's workqueue threading layer aborts the process if two threads enter it together;
    the backend serialises its kernel calls."""
    x = np.random.default_rng(5).standard_normal((64, 33))
    expected = REF.softmax(x, -1)
    errors = []

    def work():
        for _ in range(50):
            if not np.allclose(NUMBA.softmax(x, -1), expected):
                errors.append("wrong result")

    with on_threads(True):
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


def test_kernels_stay_on_the_calling_thread_when_numba_has_one_thread():
    calls = []
    before = numba.get_num_threads()
    try:
        for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(threads)
            numba_backend._run(lambda parallel: calls.append((threads, parallel)), 1 << 30)
    finally:
        numba.set_num_threads(before)
    assert calls[0] == (1, False)
    assert all(parallel for threads, parallel in calls[1:])


def test_set_num_threads_before_the_backend_keeps_the_workqueue_layer():
    """``numba.set_num_threads`` starts Numba's threads: had it run before the backend chose the
    layer, the OpenMP layer would have started (and fought OpenBLAS's threads)."""
    code = ("import numba, minitorch_nlp as mt\n"
            "mt.set_num_threads(2)\n"
            "with mt.backend('numba'):\n"
            "    mt.functional.softmax(mt.randn(64, 1024), -1)\n"
            "print(numba.threading_layer())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "workqueue"


def test_set_num_threads_takes_openblas_and_numba_and_refuses_nonsense():
    before = numba.get_num_threads()
    try:
        assert "OpenBLAS" in mt.set_num_threads(1)
        assert numba.get_num_threads() == 1
    finally:
        mt.set_num_threads(before)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="set_num_threads: threads must be a positive int"):
            mt.set_num_threads(bad)
