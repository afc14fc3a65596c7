"""What the kernel tests share: the NumPy reference and the Numba backend (and the CUDA kernels
under the simulator: ``SIMULATOR``, the ``gpu_backend`` fixture), the comparison of a
kernel's output with the reference's (dtype tolerances scaled by the problem's condition), the
hypothesis strategies of kernel inputs, and the switches that put the kernels on Numba's threads
(``on_threads``) or attention's blocks on Python threads (``blocks_in_threads``), whatever the
size of the input."""
from __future__ import annotations

import contextlib
import math
import os
import types
from unittest import mock

import numba
import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minitorch_nlp.backends import cuda_kernels, get_backend, numba_backend
from minitorch_nlp.backends.cupy_backend import CupyBackend
from minitorch_nlp.backends.numpy_backend import NumpyBackend
from minitorch_nlp.backends import threads as cpu_threads
from minitorch_nlp.testing import strategies as S

REF = get_backend("numpy")
NUMBA = get_backend("numba")
FLOAT_DTYPES = (np.float32, np.float64)
RTOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-10}


def assert_same(actual, expected, cond=1.0):
    """``actual`` (numba) equals ``expected`` (NumPy): same shape, dtype, infinities and NaN, and
    values within the dtype's tolerance of the largest |value|; float32 tolerances are further
    multiplied by the problem's condition number ``cond``."""
    if expected is None:
        assert actual is None
        return
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if expected.dtype.kind in "iub":
        np.testing.assert_array_equal(actual, expected)
        return
    rtol = RTOL[expected.dtype]
    finite = np.abs(expected[np.isfinite(expected)])
    magnitude = max(1.0, float(finite.max())) if finite.size else 1.0
    if expected.dtype == np.float32:
        magnitude *= cond
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * magnitude)


def assert_all_same(actual, expected, cond=1.0):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same(a, e, cond)


dtypes = st.sampled_from(FLOAT_DTYPES)
layouts = st.sampled_from((None,) + S.LAYOUTS)
parallel = st.booleans()


@contextlib.contextmanager
def on_threads(parallel):
    """Run the numba kernels with ``prange`` on all of Numba's threads (``parallel``) or on the
    calling thread, whatever the size of their input (by default small inputs, and every input
    when Numba has one thread, stay on the calling thread)."""
    before = numba.get_num_threads()
    with mock.patch.object(numba_backend, "_PARALLEL_WORK", 0 if parallel else 1 << 62):
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS if parallel else before)
        try:
            yield
        finally:
            numba.set_num_threads(before)


@st.composite
def arrays(draw, shape, dtype, low=-3.0, high=3.0, large=False, masked=False):
    """Values in [low, high] (times 1e4 / 3 when ``large`` draws so), some entries and a whole
    row of the last axis set to -inf when ``masked`` draws so, in a layout that may not be
    contiguous."""
    x = draw(S.arrays(shape, low, high, dtype=dtype))
    if large and draw(st.booleans()):
        x = x * x.dtype.type(1e4 / 3)
    if masked and x.size and draw(st.booleans()):
        holes = draw(hnp.arrays(np.bool_, x.shape))
        x = np.where(holes, -np.inf, x).astype(dtype)
        rows = x.reshape(-1, x.shape[-1])
        rows[draw(st.integers(0, rows.shape[0] - 1))] = -np.inf
    layout = draw(layouts)
    return x if layout is None else S.relayout(x, layout)


def small_shapes(min_dims=1, max_dims=3, max_side=5):
    return S.shapes(min_dims=min_dims, max_dims=max_dims, max_side=max_side)


@st.composite
def attention_inputs(draw, same_length=False):
    dtype = draw(dtypes)
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    tq = draw(st.integers(1, 6))
    tk = tq if same_length else draw(st.integers(1, 6))
    d, dv = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    q = draw(arrays((batch, heads, tq, d), dtype))
    k = draw(arrays((batch, heads, tk, d), dtype))
    v = draw(arrays((batch, heads, tk, dv), dtype))
    grad = draw(arrays((batch, heads, tq, dv), dtype))
    key_mask = draw(st.none() | S.bool_masks((batch, tk)))
    scale = draw(st.sampled_from([1 / math.sqrt(d), 1e3]))  # 1e3: scores up to ~1e4
    return q, k, v, grad, key_mask, scale, draw(st.booleans())


@contextlib.contextmanager
def blocks_in_threads():
    """Attention's blocks spread over two Python threads (``threads.in_threads``), whatever their
    size."""
    before = numba.get_num_threads()
    with mock.patch.object(cpu_threads, "_THREADED_WORK", 0):
        numba.set_num_threads(2)
        try:
            yield
        finally:
            numba.set_num_threads(before)


SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


@pytest.fixture(scope="module")
def gpu_backend():
    """The CuPy backend's code with NumPy in cupy's place and the numba.cuda kernels, which run
    under the CUDA simulator."""
    numpy_as_cupy = types.SimpleNamespace(**vars(np), asnumpy=np.asarray)  # cupy.asnumpy's role
    return CupyBackend(modules=(numpy_as_cupy, NumpyBackend(), cuda_kernels))
