"""The numba.cuda kernels of the long-sequence attention operations, run on the CPU by the CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1`` set before Python starts, as for ``test_backend_cuda.py``)::

    NUMBA_ENABLE_CUDASIM=1 python -m pytest -m cudasim tests/test_cuda_sparse_kernels.py

Without it every test here is skipped. The launchers are called directly on tiny NumPy arrays (the
simulator runs every GPU thread as a Python thread) and compared, values and gradients, with the
NumPy backend's methods in float64 and float32; then the CuPy backend's wiring: it uses the
kernels on float32 / float64 and falls back to the NumPy backend's code on other dtypes and on a
state that code made. LSH's round masks are checked on the arguments ``LSHAttention`` really
passes, recorded from forward passes on the NumPy backend; ``LSHAttention`` itself on the CuPy
backend; and the dilated window (the banded kernel of ``cuda_kernels``) with dilations 2 and 3.
"""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.attention import LSHAttention
from minitorch_nlp.attention.lsh import SELF_PENALTY
from minitorch_nlp.backends import cuda_linear_kernels, cuda_sparse_kernels
from minitorch_nlp.backends.numpy_backend import NumpyBackend
from tests.kernel_checks import SIMULATOR, gpu_backend  # noqa: F401 - the fixture

pytestmark = [
    pytest.mark.cudasim,
    pytest.mark.skipif(not SIMULATOR, reason="needs the CUDA simulator: NUMBA_ENABLE_CUDASIM=1 "
                                             "set before Python starts"),
]

REFERENCE = NumpyBackend()
TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-5)}
# (batch, heads, time, features m, value width d_v): m above and below d_v, a single position
SHAPES = [(1, 2, 5, 3, 4), (2, 1, 4, 4, 2), (1, 1, 1, 2, 3)]


def _linear_inputs(shape, dtype, seed=0):
    """Positive features (as phi makes them), values and an output cotangent."""
    batch, heads, time, width, values = shape
    rng = np.random.default_rng(seed)
    qf, kf = (np.exp(rng.uniform(-1, 1, (batch, heads, time, width))).astype(dtype)
              for _ in range(2))
    v = rng.standard_normal((batch, heads, time, values)).astype(dtype)
    grad = rng.standard_normal((batch, heads, time, values)).astype(dtype)
    return qf, kf, v, grad


def _assert_close(got, want, dtype):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype == dtype, f"output {i}"
        np.testing.assert_allclose(g, w, **TOLERANCE[dtype], err_msg=f"output {i}")


# ---- causal linear attention (the Performer's prefix sums) ---------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_causal_linear_kernels_match_the_numpy_backend(shape, dtype):
    qf, kf, v, grad = _linear_inputs(shape, dtype)
    out, den = cuda_linear_kernels.causal_linear_attention(qf, kf, v)
    want_out, want_state = REFERENCE.causal_linear_attention(qf, kf, v, 2)
    _assert_close((out, den), (want_out, want_state[1].reshape(den.shape)), dtype)
    grads = cuda_linear_kernels.causal_linear_attention_backward(grad, qf, kf, v, out, den)
    want = REFERENCE.causal_linear_attention_backward(grad, qf, kf, v, want_state, 2)
    _assert_close(grads, want, dtype)


def test_causal_linear_kernels_take_strided_views():
    """Features and values given as views with the time axis not contiguous."""
    qf, kf, v, grad = (np.ascontiguousarray(a.swapaxes(2, 3)).swapaxes(2, 3)
                       for a in _linear_inputs((1, 2, 4, 3, 3), np.float64, seed=1))
    assert not qf.flags.c_contiguous
    out, den = cuda_linear_kernels.causal_linear_attention(qf, kf, v)
    want_out, want_state = REFERENCE.causal_linear_attention(qf, kf, v, 3)
    _assert_close((out,), (want_out,), np.float64)
    _assert_close(cuda_linear_kernels.causal_linear_attention_backward(grad, qf, kf, v, out, den),
                  REFERENCE.causal_linear_attention_backward(grad, qf, kf, v, want_state, 3),
                  np.float64)


def test_the_cupy_backend_runs_the_causal_linear_kernels(gpu_backend):  # noqa: F811
    qf, kf, v, grad = _linear_inputs((1, 2, 3, 2, 2), np.float32, seed=2)
    out, state = gpu_backend.causal_linear_attention(qf, kf, v, 2)
    assert state[1].shape == (2, 3)                   # the kernels' (pairs, time) denominators
    want_out, want_state = REFERENCE.causal_linear_attention(qf, kf, v, 2)
    _assert_close((out,), (want_out,), np.float32)
    _assert_close(gpu_backend.causal_linear_attention_backward(grad, qf, kf, v, state, 2),
                  REFERENCE.causal_linear_attention_backward(grad, qf, kf, v, want_state, 2),
                  np.float32)


def test_the_cupy_backend_falls_back_to_numpy_code_off_the_kernels(gpu_backend):  # noqa: F811
    """float16 has no kernel, and a state made by the NumPy code is not the kernels' state: both
    take the NumPy backend's chunked code."""
    qf, kf, v, grad = _linear_inputs((1, 1, 3, 2, 2), np.float16, seed=3)
    out, state = gpu_backend.causal_linear_attention(qf, kf, v, 2)
    want_out, want_state = REFERENCE.causal_linear_attention(qf, kf, v, 2)
    assert state[1].shape == want_state[1].shape == (1, 1, 3, 1)
    np.testing.assert_array_equal(out, want_out)
    got = gpu_backend.causal_linear_attention_backward(grad, qf, kf, v, state, 2)
    want = REFERENCE.causal_linear_attention_backward(grad, qf, kf, v, want_state, 2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    qf, kf, v, grad = _linear_inputs((1, 1, 3, 2, 2), np.float64, seed=3)
    numpy_state = REFERENCE.causal_linear_attention(qf, kf, v, 2)[1]
    _assert_close(gpu_backend.causal_linear_attention_backward(grad, qf, kf, v, numpy_state, 2),
                  REFERENCE.causal_linear_attention_backward(grad, qf, kf, v, numpy_state, 2),
                  np.float64)


# ---- grouped attention (the sparse patterns' groups of queries and keys) -------------------------
def _grouped_inputs(dtype, batch=2, heads=2, time=5, seed=0):
    """q, k, v (batch, heads, time, 4) with two groups of two queries and three keys each: the
    query index shared over the batch, the key index over the heads, a repeated position, a key
    mask hiding the last position of batch row 1, an ``allowed`` that leaves query (0, 0, 1, 1)
    no key, a constant bias; and a cotangent for the output and log-sum-exp column."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, heads, time, 4)).astype(dtype) for _ in range(3))
    query_index = np.array([[[0, 1], [3, 3]], [[2, 4], [1, 0]]])[None, :heads]
    key_index = np.array([[0, 1, 2], [2, 3, 4]])[None, None].repeat(batch, axis=0)
    allowed = rng.random((batch, heads, 2, 2, 3)) < 0.8
    allowed[0, 0, 1, 1] = False
    key_mask = np.ones((batch, time), bool)
    key_mask[-1, -1] = False
    bias = rng.standard_normal((1, heads, 2, 2, 3))
    grad = rng.standard_normal((batch, heads, 2, 2, 5)).astype(dtype)
    return q, k, v, query_index, key_index, allowed, key_mask, bias, grad


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("with_mask_and_bias", [True, False])
def test_grouped_attention_kernels_match_the_numpy_backend(dtype, with_mask_and_bias):
    q, k, v, query_index, key_index, allowed, key_mask, bias, grad = _grouped_inputs(dtype)
    if not with_mask_and_bias:
        key_mask = bias = None
    out, probs = cuda_sparse_kernels.grouped_attention(q, k, v, query_index, key_index, allowed,
                                                       key_mask, bias, 0.7)
    want_out, want_probs = REFERENCE.grouped_attention(q, k, v, query_index, key_index, allowed,
                                                       key_mask, bias, 0.7)
    _assert_close((out, probs), (want_out, want_probs.reshape(probs.shape)), dtype)
    if with_mask_and_bias:
        assert out[0, 0, 1, 1, -1] == -np.inf and not out[0, 0, 1, 1, :-1].any()
    grads = cuda_sparse_kernels.grouped_attention_backward(grad, q, k, v, probs, query_index,
                                                           key_index, 0.7)
    want = REFERENCE.grouped_attention_backward(grad, q, k, v, want_probs, query_index,
                                                key_index, 0.7)
    _assert_close(grads, want, dtype)


def test_the_cupy_backend_runs_the_grouped_attention_kernels(gpu_backend):  # noqa: F811
    q, k, v, query_index, key_index, allowed, key_mask, bias, grad = _grouped_inputs(
        np.float32, batch=1, heads=1, time=4, seed=1)
    key_index = np.minimum(key_index, 3)
    args = (query_index, key_index, allowed, key_mask, bias)
    out, state = gpu_backend.grouped_attention(q, k, v, *args, 0.7)
    assert state.shape == (1, 2, 2, 3)               # the kernels' (pairs, G, Q, K) probabilities
    want_out, want_state = REFERENCE.grouped_attention(q, k, v, *args, 0.7)
    _assert_close((out,), (want_out,), np.float32)
    _assert_close(gpu_backend.grouped_attention_backward(grad, q, k, v, state, query_index,
                                                         key_index, 0.7),
                  REFERENCE.grouped_attention_backward(grad, q, k, v, want_state, query_index,
                                                       key_index, 0.7), np.float32)


def test_the_cupy_backend_falls_back_to_numpy_code_off_grouped_kernels(gpu_backend):  # noqa: F811
    """float16 has no kernel, and the NumPy code's (B, H, G, Q, K) probabilities are not the
    kernels' state: both take the NumPy backend's code."""
    for dtype in (np.float16, np.float64):
        q, k, v, query_index, key_index, allowed, key_mask, bias, grad = _grouped_inputs(
            dtype, batch=1, heads=1, time=5, seed=2)
        args = (query_index, key_index, allowed, key_mask, bias)
        want_out, want_state = REFERENCE.grouped_attention(q, k, v, *args, 0.7)
        if dtype == np.float16:
            out, state = gpu_backend.grouped_attention(q, k, v, *args, 0.7)
            assert state.shape == want_state.shape
            np.testing.assert_array_equal(out, want_out)
        got = gpu_backend.grouped_attention_backward(grad, q, k, v, want_state, query_index,
                                                     key_index, 0.7)
        want = REFERENCE.grouped_attention_backward(grad, q, k, v, want_state, query_index,
                                                    key_index, 0.7)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


# ---- LSH attention's round masks -----------------------------------------------------------------
def _lsh_mask_calls(rounds, causal, seed, num_buckets=4, chunk_length=2, chunks=3):
    """The arguments ``LSHAttention`` hands ``lsh_round_masks``, one tuple per round, recorded
    from a forward pass on the NumPy backend (batch 2, 2 heads, head width 3)."""
    calls = []
    numpy_masks = NumpyBackend.lsh_round_masks

    def record(*args):
        calls.append(args)
        return numpy_masks(*args)

    q = mt.tensor(np.random.default_rng(seed).standard_normal((2, 2, chunk_length * chunks, 3)))
    with mock.patch.object(NumpyBackend, "lsh_round_masks", staticmethod(record)):
        LSHAttention(num_buckets, chunk_length, rounds, seed=seed)(q, q, q, causal=causal)
    assert len(calls) == rounds
    return calls


def _lsh_masks_agree(got, want):
    return (got[0].dtype == want[0].dtype == np.bool_ and got[1].dtype == want[1].dtype
            and np.array_equal(got[0], want[0])
            and np.allclose(got[1], want[1], rtol=1e-15, atol=0))


# (rounds, causal, seed, buckets): with one bucket the first chunk's missing previous matters
LSH_CASES = [(rounds, causal, seed, buckets) for rounds in (1, 2, 3) for causal in (False, True)
             for seed, buckets in ((0, 4), (1, 2), (2, 1))]


@pytest.mark.parametrize("rounds, causal, seed, buckets", LSH_CASES)
@pytest.mark.parametrize("self_penalty", [SELF_PENALTY, 0.0, 2.5])
def test_lsh_mask_kernel_matches_the_numpy_backend(rounds, causal, seed, buckets, self_penalty):
    """Every round of a 1-3 round LSH pass (the first chunk without a previous one, causal on
    and off, 1, 2 or 4 buckets) with the library's self penalty, none, and another."""
    for args in _lsh_mask_calls(rounds, causal, seed, buckets):
        args = args[:7] + (self_penalty,) + args[8:]     # (..., self_penalty, dtype)
        assert _lsh_masks_agree(cuda_sparse_kernels.lsh_round_masks(*args),
                                REFERENCE.lsh_round_masks(*args))


def test_a_wrong_lsh_mask_rule_fails_the_comparison():
    """The cases above exercise every rule, so a kernel that broke one would fail them: a pair
    found in two rounds (-log 2) occurs, and the kernel given a wrong round, causal flag,
    first-chunk rule or self penalty disagrees with the NumPy masks of the true arguments."""
    calls = [args for case in LSH_CASES for args in _lsh_mask_calls(*case)]
    assert any(np.isclose(REFERENCE.lsh_round_masks(*args)[1], -np.log(2)).any()
               for args in calls)
    wrong = {
        "another round's buckets": lambda a: a[:5] + ((a[5] + 1) % a[0].shape[2],) + a[6:],
        "causal flipped": lambda a: a[:6] + (not a[6],) + a[7:],
        "a previous chunk for the first": lambda a: a[:4] + (np.ones_like(a[4]),) + a[5:],
        "no self penalty": lambda a: a[:7] + (0.0,) + a[8:],
    }
    for rule, mutate in wrong.items():
        assert any(not _lsh_masks_agree(cuda_sparse_kernels.lsh_round_masks(*mutate(args)),
                                        REFERENCE.lsh_round_masks(*args))
                   for args in calls), rule


def test_the_cupy_backend_runs_the_lsh_mask_kernel(gpu_backend):  # noqa: F811
    """The kernel on LSH's shapes; a ``has_previous`` that only broadcasts takes the NumPy
    backend's code."""
    args = _lsh_mask_calls(2, True, 3, 2)[1]
    want = REFERENCE.lsh_round_masks(*args)
    with mock.patch.object(cuda_sparse_kernels, "lsh_round_masks",
                           wraps=cuda_sparse_kernels.lsh_round_masks) as kernel:
        assert _lsh_masks_agree(gpu_backend.lsh_round_masks(*args), want)
        assert kernel.call_count == 1
        broadcast = args[:4] + (args[4][:1] | True,) + args[5:]
        assert _lsh_masks_agree(gpu_backend.lsh_round_masks(*broadcast),
                                REFERENCE.lsh_round_masks(*broadcast))
        assert kernel.call_count == 1


def _lsh_attention(backend, dtype, causal, seed=0):
    """Output and (dq, dv) of a two-round ``LSHAttention`` over (2, 2, 12, 4) inputs with a key
    mask, computed on ``backend``, as NumPy arrays."""
    rng = np.random.default_rng(seed)
    q, v, cotangent = (rng.standard_normal((2, 2, 12, 4)).astype(dtype) for _ in range(3))
    key_mask = np.ones((2, 12), dtype=bool)
    key_mask[1, 9:] = False
    q, v = (mt.tensor(a, backend=backend, requires_grad=True) for a in (q, v))
    out, _ = LSHAttention(4, 3, num_rounds=2, seed=5)(q, q, v, causal=causal,
                                                      key_mask=mt.tensor(key_mask, backend=backend))
    grads = mt.grad((out * mt.tensor(cotangent, backend=backend)).sum(), [q, v])
    return [backend.to_numpy(a.data) for a in (out, *grads)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_lsh_attention_on_the_cupy_backend_matches_the_numpy_backend(gpu_backend, dtype,  # noqa: F811
                                                                     causal):
    """Hashing, sorting, masks and the grouped kernels on the (simulated) GPU: output and
    gradients as on the NumPy backend."""
    got = _lsh_attention(gpu_backend, dtype, causal)
    want = _lsh_attention(REFERENCE, dtype, causal)
    _assert_close(got, want, dtype)


def test_lsh_attention_on_the_cupy_backend_copies_only_positions_to_the_host(
        gpu_backend):  # noqa: F811
    """Forward and backward copy nothing to the host but the chunks' positions (integers, the
    index arrays ``grouped_attention`` takes): no activations, buckets or masks."""
    copied = []

    def to_numpy(array):
        copied.append((array.dtype, array.shape))
        return np.asarray(array)

    with mock.patch.object(gpu_backend, "to_numpy", to_numpy):
        rng = np.random.default_rng(1)
        q, v = (mt.tensor(rng.standard_normal((1, 2, 6, 4)), backend=gpu_backend,
                          requires_grad=True) for _ in range(2))
        out, _ = LSHAttention(2, 2, num_rounds=3, seed=1)(q, q, v)
        out.sum().backward()
    assert copied and all(np.issubdtype(dtype, np.integer) for dtype, _ in copied), copied
    assert {shape for _, shape in copied} == {(1, 2, 3, 2), (1, 2, 3, 4)}   # queries, key_index


# ---- the dilated window (Longformer's dilated heads): the banded kernel of ``cuda_kernels`` ------
@pytest.mark.parametrize("dilation", [2, 3])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_dilated_banded_attention_matches_the_numpy_backend(gpu_backend, dilation, window,  # noqa: F811
                                                            causal):
    """Offsets o * dilation, |o| <= window (o <= 0 when causal), windows reaching past both
    ends, and a key mask under which query 0 of batch row 1 sees no key (causal, its keys are
    0, -d, ...; otherwise also d, 2d ...): output zero, gradients as on the NumPy backend."""
    rng = np.random.default_rng(dilation * 10 + window)
    q, k, v, grad = (rng.standard_normal((2, 2, 7, 3)) for _ in range(4))
    key_mask = np.ones((2, 7), dtype=bool)
    key_mask[1, ::dilation] = False
    results = []
    for backend in (gpu_backend, REFERENCE):
        out, state = backend.banded_attention(q, k, v, 0.6, window, dilation, causal, key_mask)
        results.append((out,) + tuple(backend.banded_attention_backward(
            grad, q, k, v, state, 0.6, window, dilation, causal, key_mask)))
    _assert_close(*results, np.float64)
    assert not results[0][0][1, :, 0].any()
