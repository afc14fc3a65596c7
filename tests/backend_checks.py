"""Property tests of the CuPy backend's kernels against the NumPy backend, shared by two modules:

* ``test_backend_cuda.py`` runs them under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): the
  ``gpu_backend`` fixture there is a ``CupyBackend`` wired to NumPy arrays, so the numba.cuda
  kernels run on the CPU (CI has no GPU);
* ``test_backend_cupy.py`` runs them on a real GPU with CuPy arrays.

Each test draws small inputs (the simulator runs every GPU thread as a Python thread), runs the
kernel and its backward on ``gpu_backend`` and on the NumPy backend, and compares. Inputs include
odd sizes, length-1 axes, non-contiguous views, rows that are entirely -inf or masked (they must
give 0, never NaN) and logits of size 1e4. Backward kernels get the same cotangent on both sides.
"""
from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from minitorch_nlp.backends.numpy_backend import NumpyBackend
from minitorch_nlp.testing import strategies as S

FEW = settings(max_examples=20)  # the simulator runs each GPU thread as a Python thread
TOL = dict(rtol=1e-9, atol=1e-11)  # float64: the kernels differ from NumPy in summation order
REFERENCE = NumpyBackend()


def run(backend, op, *args):
    """``backend.op(*args)`` with NumPy arrays moved to the backend and the results moved back."""
    moved = [backend.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    result = getattr(backend, op)(*moved)
    if isinstance(result, tuple):
        return tuple(None if r is None else backend.to_numpy(r) for r in result)
    return backend.to_numpy(result)


def assert_same(got, want, tol=TOL):
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            assert g is None, f"output {i}: expected None"
            continue
        assert g.shape == w.shape, f"output {i}: shape {g.shape}, expected {w.shape}"
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype}, expected {w.dtype}"
        np.testing.assert_allclose(g, w, **tol, err_msg=f"output {i}")


def heads_split_by_a_permute(x):
    """``x`` (B, H, T, D) as ``MultiHeadAttention.split_heads`` hands it to the attention core: a
    permute of a (B, T, H, D) array, so that each head's rows are strided."""
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)


def assert_heads_merge_without_a_copy(out, grads=()):
    """Attention's (B, H, T, D) output lies heads apart, (B, T, H, D) in memory, and so do
    ``grads``, the gradients of ``heads_split_by_a_permute`` inputs: merging the heads back into
    (B, T, H * D), or the backward of splitting them, is a reshape, not a copy."""
    for array in (out, *grads):
        assert array.transpose(0, 2, 1, 3).flags.c_contiguous


def cotangent(seed, shape):
    return np.random.default_rng(seed).standard_normal(shape)


# ---- strategies ----------------------------------------------------------------------------------
@st.composite
def logits_and_axis(draw):
    """Logits (up to 3-d, sides up to 5), an axis, sometimes of size 1e4, sometimes a line along
    the axis that is entirely -inf, sometimes a non-contiguous view."""
    shape = draw(S.shapes(min_dims=1, max_dims=3, max_side=5))
    axis = draw(S.axis(len(shape)))
    x = draw(S.arrays(shape))
    if draw(st.booleans()):
        x = x * (1e4 / 3)
    if draw(st.booleans()):
        line = [draw(st.integers(0, n - 1)) for n in shape]
        line[axis] = slice(None)
        x[tuple(line)] = -np.inf
    layout = draw(st.sampled_from((None,) + S.LAYOUTS))
    return (x if layout is None else S.relayout(x, layout)), axis


@st.composite
def attention_inputs(draw, self_attention=False):
    """q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv) and a key mask (B, Tk) or None; the mask
    sometimes hides every key of a batch row."""
    b, h = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    tq = draw(st.integers(1, 5))
    tk = tq if self_attention else draw(st.integers(1, 5))
    d, dv = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    q = draw(S.arrays((b, h, tq, d)))
    k = draw(S.arrays((b, h, tk, d)))
    v = draw(S.maybe_noncontiguous(S.arrays((b, h, tk, dv))))
    key_mask = draw(st.one_of(st.none(), S.bool_masks((b, tk))))
    return q, k, v, key_mask


# ---- softmax, log-softmax ------------------------------------------------------------------------
@FEW
@given(case=logits_and_axis(), log=st.booleans(), seed=S.seeds())
def test_softmax_family_matches_numpy(gpu_backend, case, log, seed):
    x, axis = case
    forward, backward = ("log_softmax", "log_softmax_backward") if log else (
        "softmax", "softmax_backward")
    want = getattr(REFERENCE, forward)(x, axis)
    got = run(gpu_backend, forward, x, axis)
    assert_same(got, want)
    if not log:
        assert np.isfinite(got).all(), "softmax of an all -inf line must be 0, not NaN"
    g = cotangent(seed, x.shape)
    assert_same(run(gpu_backend, backward, want, g, axis),
                getattr(REFERENCE, backward)(want, g, axis))


# ---- layer norm ----------------------------------------------------------------------------------
@FEW
@given(x=S.maybe_noncontiguous(S.arrays(S.shapes(min_dims=1, max_dims=3, max_side=5))),
       affine=st.sampled_from(["both", "weight", "none"]), seed=S.seeds())
def test_layer_norm_matches_numpy(gpu_backend, x, affine, seed):
    rng = np.random.default_rng(seed)
    n = x.shape[-1]
    weight = rng.standard_normal(n) if affine != "none" else None
    bias = rng.standard_normal(n) if affine == "both" else None
    want, ref_state = REFERENCE.layer_norm(x, weight, bias, 1e-5)
    moved = [None if a is None else gpu_backend.asarray(a) for a in (x, weight, bias)]
    y, state = gpu_backend.layer_norm(*moved, 1e-5)
    assert_same(gpu_backend.to_numpy(y), want)
    g = cotangent(seed, x.shape)
    grads = gpu_backend.layer_norm_backward(gpu_backend.asarray(g), moved[0], state, moved[1])
    assert_same(tuple(None if a is None else gpu_backend.to_numpy(a) for a in grads),
                REFERENCE.layer_norm_backward(g, x, ref_state, weight))


# ---- erf ----------------------------------------------------------------------------------------
ERF_ULPS = 3  # every backend's erf, in float32 and float64, against math.erf (itself within 1 ulp)


def erf_ulp_errors(got, x):
    """|got - math.erf(x)| in units in the last place of x's dtype, for each element; 0 where
    both are NaN."""
    x = np.asarray(x)
    exact = np.array([math.erf(float(v)) for v in x.reshape(-1)]).reshape(x.shape)
    rounded = np.abs(exact.astype(x.dtype))
    ulp = np.spacing(rounded).astype(np.float64)
    with np.errstate(invalid="ignore"):
        errors = np.abs(np.asarray(got, dtype=np.float64) - exact) / ulp
    errors[np.isnan(exact) & np.isnan(got)] = 0.0
    return errors


def erf_grid(dtype):
    """Every kind of float of ``dtype``: a fine grid over the range where erf moves, both signs of
    the subnormals and of numbers up to the largest, signed zeros, infinities and NaN."""
    info = np.finfo(dtype)
    tiny = np.geomspace(info.smallest_subnormal, 1.0, 4001)
    huge = np.geomspace(1.0, info.max / 4, 1001)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, info.max, -info.max, info.tiny, -info.tiny]
    return np.concatenate([np.linspace(-7, 7, 40001), tiny, -tiny, huge, -huge,
                           edges]).astype(dtype)


def erf_arguments(dtype):
    """Hypothesis arrays of ``dtype`` drawn from the whole float range."""
    width = np.finfo(dtype).bits
    return hnp.arrays(dtype, st.integers(1, 40), elements=st.one_of(
        st.floats(width=width, allow_subnormal=True),
        st.floats(-7, 7, width=width)))


def test_erf_is_within_a_few_ulp_of_math_erf_everywhere(gpu_backend):
    for dtype in (np.float32, np.float64):
        x = erf_grid(dtype)
        got = run(gpu_backend, "erf", x)
        assert got.dtype == dtype
        assert erf_ulp_errors(got, x).max() <= ERF_ULPS


@FEW
@given(x32=erf_arguments(np.float32), x64=erf_arguments(np.float64))
def test_erf_of_drawn_floats_is_within_a_few_ulp(gpu_backend, x32, x64):
    for x in (x32, x64):
        assert erf_ulp_errors(run(gpu_backend, "erf", x), x).max() <= ERF_ULPS


# ---- GELU, bias + GELU ---------------------------------------------------------------------------
def test_erf_gelu_is_the_erf_formula_to_a_few_ulp(gpu_backend):
    """The erf GELU kernels, forward and backward, against x Phi(x) and Phi(x) + x phi(x) from
    ``math.erf`` in float64, on [-12, 12] and beyond."""
    for dtype, tol in ((np.float32, 4e-7), (np.float64, 1e-15)):
        x = np.concatenate([np.linspace(-12, 12, 1201), [-40.0, 40.0]]).astype(dtype)
        w = x.astype(np.float64)
        cdf = 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in w]))
        pdf = np.exp(-0.5 * w * w) / math.sqrt(2 * math.pi)
        got = (run(gpu_backend, "gelu", x, "none"),
               run(gpu_backend, "gelu_backward", x, np.ones_like(x), "none"))
        for value, want in zip(got, (w * cdf, cdf + w * pdf)):
            assert value.dtype == dtype
            np.testing.assert_allclose(value, want, rtol=tol, atol=tol)


@FEW
@given(x=S.maybe_noncontiguous(S.arrays(S.shapes(min_dims=1, max_dims=3, max_side=5), -5, 5)),
       approximate=st.sampled_from(["none", "tanh"]), bias_along=st.sampled_from(["last", "rows"]),
       seed=S.seeds())
def test_gelu_and_bias_gelu_match_numpy(gpu_backend, x, approximate, bias_along, seed):
    g = cotangent(seed, x.shape)
    assert_same(run(gpu_backend, "gelu", x, approximate), REFERENCE.gelu(x, approximate))
    assert_same(run(gpu_backend, "gelu_backward", x, g, approximate),
                REFERENCE.gelu_backward(x, g, approximate))
    # a bias along the last axis takes the fused kernel, any other broadcast the plain one
    bias_shape = x.shape[-1:] if bias_along == "last" else x.shape[:-1] + (1,)
    bias = cotangent(seed + 1, bias_shape)
    assert_same(run(gpu_backend, "bias_gelu", x, bias, approximate),
                REFERENCE.bias_gelu(x, bias, approximate))
    assert_same(run(gpu_backend, "bias_gelu_backward", x, bias, g, approximate),
                REFERENCE.bias_gelu_backward(x, bias, g, approximate))


# ---- Adam / AdamW update ------------------------------------------------------------------------
@st.composite
def adam_cases(draw, dtypes=(np.float64,)):
    """Parameter, gradients for a few steps and hyper-parameters of an Adam or AdamW update."""
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(S.shapes(min_dims=1, max_dims=3, max_side=6))
    seed = draw(S.seeds())
    rng = np.random.default_rng(seed)
    steps = draw(st.integers(1, 3))
    options = dict(lr=draw(st.sampled_from([1e-3, 0.1])),
                   beta1=draw(st.sampled_from([0.0, 0.9])),
                   beta2=draw(st.sampled_from([0.5, 0.999])),
                   eps=draw(st.sampled_from([1e-8, 1e-3])),
                   weight_decay=draw(st.sampled_from([0.0, 0.01, 0.3])),
                   decoupled=draw(st.booleans()))
    theta = rng.standard_normal(shape).astype(dtype)
    grads = [rng.standard_normal(shape).astype(dtype) for _ in range(steps)]
    return theta, grads, draw(st.booleans()), options


def adam_steps(backend, theta, grads, amsgrad, options):
    """``backend.adam_update`` run for each gradient in turn from zero moments; theta and the
    moments after the last step, as NumPy arrays."""
    xp_arrays = [backend.asarray(theta.copy())] + [backend.asarray(np.zeros_like(theta))
                                                   for _ in range(3)]
    theta_b, exp_avg, exp_avg_sq, max_exp_avg_sq = xp_arrays
    scratch = [backend.asarray(np.empty_like(theta)) for _ in range(2)]
    for step, grad in enumerate(grads, start=1):
        backend.adam_update(theta_b, backend.asarray(grad), exp_avg, exp_avg_sq,
                            max_exp_avg_sq if amsgrad else None, scratch, step=step, **options)
    return tuple(backend.to_numpy(a) for a in (theta_b, exp_avg, exp_avg_sq, max_exp_avg_sq))


@FEW
@given(case=adam_cases())
def test_adam_update_matches_numpy(gpu_backend, case):
    theta, grads, amsgrad, options = case
    assert_same(adam_steps(gpu_backend, theta, grads, amsgrad, options),
                adam_steps(REFERENCE, theta, grads, amsgrad, options))


# ---- scatter-add of rows -------------------------------------------------------------------------
@FEW
@given(num_rows=st.integers(1, 5), index_shape=S.shapes(min_dims=1, max_dims=2),
       row_shape=S.shapes(min_dims=1, max_dims=2, max_side=3), seed=S.seeds())
def test_scatter_add_rows_matches_numpy(gpu_backend, num_rows, index_shape, row_shape, seed):
    rng = np.random.default_rng(seed)
    index = rng.integers(0, num_rows, size=index_shape)  # repeats are the point: they must add up
    src = rng.standard_normal(index_shape + row_shape)
    assert_same(run(gpu_backend, "scatter_add_rows", index, src, num_rows),
                REFERENCE.scatter_add_rows(index, src, num_rows))


# ---- cross-entropy -------------------------------------------------------------------------------
@FEW
@given(n=st.integers(1, 5), classes=st.integers(1, 6), large=st.booleans(),
       smoothing=st.sampled_from([0.0, 0.1, 0.3]), seed=S.seeds())
def test_cross_entropy_matches_numpy(gpu_backend, n, classes, large, smoothing, seed):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((n, classes)) * (1e4 if large else 1.0)
    target = rng.integers(0, classes, size=n)
    target[rng.random(n) < 0.3] = -100
    want = REFERENCE.cross_entropy(logits, target, -100, smoothing)
    assert_same(run(gpu_backend, "cross_entropy", logits, target, -100, smoothing), want)
    grad_rows = cotangent(seed, n)
    assert_same(run(gpu_backend, "cross_entropy_backward", want[1], target, grad_rows, -100,
                    smoothing),
                REFERENCE.cross_entropy_backward(want[1], target, grad_rows, -100, smoothing))


# ---- attention -----------------------------------------------------------------------------------
def _attention_pair(backend, inputs, scale, causal, seed):
    """(output, gradients) of attention on ``backend``, each backend with its own saved state."""
    q, k, v, key_mask = inputs
    g = cotangent(seed, q.shape[:-1] + v.shape[-1:])
    device = [backend.asarray(a) for a in (q, k, v, g)]
    mask = None if key_mask is None else backend.asarray(key_mask)
    out, state = backend.attention(*device[:3], scale, causal, mask)
    *grads, dbias = backend.attention_backward(device[3], *device[:3], state, scale, causal, mask)
    assert dbias is None
    return backend.to_numpy(out), tuple(backend.to_numpy(a) for a in grads)


@FEW
@given(inputs=attention_inputs(), causal=st.booleans(), one_pair_blocks=st.booleans(),
       seed=S.seeds())
@example(inputs=(np.zeros((1, 1, 3, 1)), np.zeros((1, 1, 1, 1)), np.zeros((1, 1, 1, 1)), None),
         causal=False, one_pair_blocks=False, seed=0)  # more queries than keys: each sees them all
def test_attention_matches_numpy(gpu_backend, inputs, causal, one_pair_blocks, seed):
    """``one_pair_blocks``: the scores are computed one (batch, head) pair at a time, as for
    long sequences."""
    from minitorch_nlp.backends import cuda_kernels

    scale = 1.0 / math.sqrt(inputs[0].shape[-1])
    block = 1 if one_pair_blocks else cuda_kernels.ATTENTION_BLOCK
    with mock.patch.object(cuda_kernels, "ATTENTION_BLOCK", block):
        out, grads = _attention_pair(gpu_backend, inputs, scale, causal, seed)
    want_out, want_grads = _attention_pair(REFERENCE, inputs, scale, causal, seed)
    assert np.isfinite(out).all() and all(np.isfinite(g).all() for g in grads)
    assert_same(out, want_out)
    assert_same(grads, want_grads)


def _attention_bias_pair(backend, inputs, bias, scale, causal, seed):
    """(output, (dq, dk, dv, dbias)) of attention with a score bias on ``backend``."""
    q, k, v, key_mask = inputs
    g = cotangent(seed, q.shape[:-1] + v.shape[-1:])
    device = [backend.asarray(a) for a in (q, k, v, g, bias)]
    mask = None if key_mask is None else backend.asarray(key_mask)
    out, state = backend.attention(*device[:3], scale, causal, mask, device[4])
    grads = backend.attention_backward(device[3], *device[:3], state, scale, causal, mask, True)
    return backend.to_numpy(out), tuple(backend.to_numpy(a) for a in grads)


@FEW
@given(inputs=attention_inputs(), causal=st.booleans(), one_pair_blocks=st.booleans(),
       seed=S.seeds(), data=st.data())
def test_attention_with_a_score_bias_matches_numpy(gpu_backend, inputs, causal, one_pair_blocks,
                                                   seed, data):
    """The bias (broadcast shapes, -inf entries, queries that see no key) added inside the
    kernels; its gradient summed over the axes it was broadcast along."""
    from minitorch_nlp.backends import cuda_kernels

    q, k = inputs[:2]
    bias = data.draw(S.score_biases(q.shape[:3] + k.shape[2:3]))
    block = 1 if one_pair_blocks else cuda_kernels.ATTENTION_BLOCK
    with mock.patch.object(cuda_kernels, "ATTENTION_BLOCK", block):
        out, grads = _attention_bias_pair(gpu_backend, inputs, bias, 0.7, causal, seed)
    want_out, want_grads = _attention_bias_pair(REFERENCE, inputs, bias, 0.7, causal, seed)
    assert np.isfinite(out).all() and all(np.isfinite(g).all() for g in grads)
    assert grads[3].shape == bias.shape
    assert_same(out, want_out)
    assert_same(grads, want_grads)


def _banded_pair(backend, inputs, scale, window, dilation, causal, seed):
    q, k, v, key_mask = inputs
    g = cotangent(seed, q.shape[:-1] + v.shape[-1:])
    device = [backend.asarray(a) for a in (q, k, v, g)]
    mask = None if key_mask is None else backend.asarray(key_mask)
    out, state = backend.banded_attention(*device[:3], scale, window, dilation, causal, mask)
    grads = backend.banded_attention_backward(device[3], *device[:3], state, scale, window,
                                              dilation, causal, mask)
    return backend.to_numpy(out), tuple(backend.to_numpy(a) for a in grads)


@FEW
@given(inputs=attention_inputs(self_attention=True), window=st.integers(0, 3),
       dilation=st.integers(1, 2), causal=st.booleans(), seed=S.seeds())
def test_banded_attention_matches_numpy(gpu_backend, inputs, window, dilation, causal, seed):
    out, grads = _banded_pair(gpu_backend, inputs, 0.7, window, dilation, causal, seed)
    want_out, want_grads = _banded_pair(REFERENCE, inputs, 0.7, window, dilation, causal, seed)
    assert np.isfinite(out).all() and all(np.isfinite(g).all() for g in grads)
    assert_same(out, want_out)
    assert_same(grads, want_grads)


@settings(max_examples=10)
@given(inputs=attention_inputs(self_attention=True), causal=st.booleans(), seed=S.seeds())
def test_banded_attention_with_a_wide_window_is_full_attention(gpu_backend, inputs, causal, seed):
    n = inputs[0].shape[-2]
    full = _attention_pair(gpu_backend, inputs, 0.7, causal, seed)
    banded = _banded_pair(gpu_backend, inputs, 0.7, n, 1, causal, seed)
    assert_same(banded[0], full[0])
    assert_same(banded[1], full[1])


# ---- grouped attention (the NumPy backend's array-module code), causal linear attention ---------
def _moved(backend, arrays):
    return [None if a is None else backend.asarray(a) for a in arrays]


@FEW
@given(inputs=attention_inputs(self_attention=True), seed=S.seeds())
def test_grouped_attention_matches_numpy(gpu_backend, inputs, seed):
    q, k, v, key_mask = inputs
    (batch, heads, time), rng = q.shape[:3], np.random.default_rng(seed)
    query_index = rng.integers(0, time, (1, heads, 2, 2))           # index arrays stay NumPy
    key_index = rng.integers(0, time, (batch, 1, 2, 3))
    allowed = rng.random((batch, heads, 2, 2, 3)) < 0.7
    results = []
    for backend in (gpu_backend, REFERENCE):
        q_, k_, v_, mask = _moved(backend, (q, k, v, key_mask))
        out, state = backend.grouped_attention(q_, k_, v_, query_index, key_index, allowed, mask,
                                               None, 0.7)
        grad = backend.asarray(cotangent(seed, out.shape))
        grads = backend.grouped_attention_backward(grad, q_, k_, v_, state, query_index,
                                                   key_index, 0.7)
        results.append([backend.to_numpy(a) for a in (out,) + tuple(grads)])
    assert_same(tuple(results[0]), tuple(results[1]))


@FEW
@given(inputs=attention_inputs(self_attention=True), chunk=st.integers(1, 3), seed=S.seeds())
def test_causal_linear_attention_matches_numpy(gpu_backend, inputs, chunk, seed):
    q, k, v, _ = inputs
    q_features, k_features = np.exp(np.tanh(q)), np.exp(np.tanh(k))   # positive, as phi makes them
    results = []
    for backend in (gpu_backend, REFERENCE):
        arrays = _moved(backend, (q_features, k_features, v))
        out, state = backend.causal_linear_attention(*arrays, chunk)
        grad = backend.asarray(cotangent(seed, out.shape))
        grads = backend.causal_linear_attention_backward(grad, *arrays, state, chunk)
        results.append([backend.to_numpy(a) for a in (out,) + tuple(grads)])
    assert_same(tuple(results[0]), tuple(results[1]))


# ---- dtype: float32 in, float32 out --------------------------------------------------------------
def test_float32_kernels_keep_float32(gpu_backend):
    rng = np.random.default_rng(0)
    tol = dict(rtol=2e-5, atol=2e-6)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    w, b = np.ones(5, np.float32), np.zeros(5, np.float32)
    for op, args in [("softmax", (x, -1)), ("log_softmax", (x, 0)), ("gelu", (x, "none")),
                     ("gelu", (x, "tanh")), ("bias_gelu", (x, b, "tanh")),
                     ("cross_entropy", (x, np.array([0, 4, -100]), -100, 0.1))]:
        assert_same(run(gpu_backend, op, *args), getattr(REFERENCE, op)(*args), tol)
    y, _ = gpu_backend.layer_norm(*(gpu_backend.asarray(a) for a in (x, w, b)), 1e-5)
    assert_same(gpu_backend.to_numpy(y), REFERENCE.layer_norm(x, w, b, 1e-5)[0], tol)
    q, k, v = (rng.standard_normal((1, 2, 4, 3)).astype(np.float32) for _ in range(3))
    out, _ = gpu_backend.attention(*(gpu_backend.asarray(a) for a in (q, k, v)), 0.5, True, None)
    assert_same(gpu_backend.to_numpy(out), REFERENCE.attention(q, k, v, 0.5, True, None)[0], tol)


# ---- low-precision products ----------------------------------------------------------------------
@FEW
@given(m=st.integers(1, 3), k=st.integers(1, 6), n=st.integers(1, 3), batched=st.booleans(),
       seed=S.seeds())
def test_matmul_int8_matches_numpy(gpu_backend, m, k, n, batched, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=((2,) if batched else ()) + (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    assert_same(run(gpu_backend, "matmul_int8", a, b), REFERENCE.matmul_int8(a, b))


@FEW
@given(m=st.integers(1, 3), k=st.integers(1, 40), n=st.integers(1, 3), seed=S.seeds())
def test_binary_matmul_matches_numpy_and_the_sign_product(gpu_backend, m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    a_bits, b_bits = REFERENCE.pack_signs(a), REFERENCE.pack_signs(b)
    assert_same(run(gpu_backend, "pack_signs", a), a_bits)
    got = run(gpu_backend, "binary_matmul", a_bits, b_bits, k)
    assert_same(got, REFERENCE.binary_matmul(a_bits, b_bits, k))
    signs = lambda x: np.where(x >= 0, 1, -1)  # noqa: E731
    np.testing.assert_array_equal(got, signs(a) @ signs(b).T)


# ---- through the engine: a tiny Transformer block, forward and backward --------------------------
def tiny_transformer_step(backend, seed=0):
    """Loss and parameter gradients of one pre-LN Transformer block (embedding, causal masked
    attention, banded attention, bias-GELU feed-forward, cross-entropy with label smoothing, a
    softmax)
    computed with the engine on ``backend``; float64, fixed weights from ``seed``."""
    import minitorch_nlp as mt
    from minitorch_nlp.autograd import ops_fused as fused

    rng = np.random.default_rng(seed)
    vocab, batch, length, width, heads = 7, 2, 5, 4, 2
    shapes = {"emb": (vocab, width), "ln_w": (width,), "ln_b": (width,), "wq": (width, width),
              "wk": (width, width), "wv": (width, width), "wo": (width, width),
              "w1": (width, 2 * width), "b1": (2 * width,), "w2": (2 * width, width),
              "out": (width, vocab)}
    params = {name: mt.tensor(rng.standard_normal(shape) * 0.5, dtype=mt.float64,
                              requires_grad=True, backend=backend)
              for name, shape in shapes.items()}
    ids = mt.tensor(rng.integers(0, vocab, size=(batch, length)), backend=backend)
    targets = rng.integers(0, vocab, size=batch * length)
    targets[1] = -100
    score = rng.standard_normal((batch * length, vocab))  # an expected-score term for softmax
    key_mask = mt.tensor(np.array([[True] * length, [True, True, True, False, False]]),
                         backend=backend)

    def split(t):
        return t.reshape(batch, length, heads, width // heads).transpose(0, 2, 1, 3)

    def merge(t):
        return t.transpose(0, 2, 1, 3).reshape(batch, length, width)

    p = params
    x = p["emb"][ids]
    h = fused.LayerNorm.apply(x, p["ln_w"], p["ln_b"], eps=1e-5)
    q, k, v = split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"])
    scale = 1.0 / math.sqrt(width // heads)
    a = fused.Attention.apply(q, k, v, key_mask, None, scale=scale, causal=True)
    a = a + fused.BandedAttention.apply(q, k, v, key_mask, scale=scale, window=1, dilation=1,
                                        causal=False)
    x = x + merge(a) @ p["wo"]
    f = fused.LayerNorm.apply(x, None, None, eps=1e-5) @ p["w1"]
    x = x + fused.BiasGelu.apply(f, p["b1"], approximate="tanh") @ p["w2"]
    logits = (x @ p["out"]).reshape(batch * length, vocab)
    loss = fused.CrossEntropy.apply(logits, mt.tensor(targets, backend=backend),
                                    ignore_index=-100, label_smoothing=0.1).mean()
    loss = loss + (logits.softmax(-1) * mt.tensor(score, backend=backend)).sum()
    loss.backward()
    return loss.item(), {name: t.grad.numpy() for name, t in params.items()}


def test_tiny_transformer_step_matches_numpy(gpu_backend):
    loss, grads = tiny_transformer_step(gpu_backend)
    want_loss, want_grads = tiny_transformer_step(REFERENCE)
    assert loss == pytest.approx(want_loss, rel=1e-9)
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, want_grads[name], rtol=1e-8, atol=1e-10, err_msg=name)
