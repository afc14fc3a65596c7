"""The NumPy backend's speed-minded forms, against the textbook ones they replace.

* the tanh GELU as x / (1 + exp(-2u)) (four passes fewer than 0.5 x (1 + tanh u)), forward and
  backward, as accurate as float32 allows and equal to the tanh formula in float64;
* every GELU over blocks of rows shared among threads: the values of one block on the calling
  thread;
* ``one_blas_thread``: OpenBLAS on one thread inside, the count it had restored after (nested,
  concurrent and failing bodies included);
* dense attention shared among threads by batch entries: the calling thread's values;
* ``NumpyBackend.matmul``: ``np.matmul``'s values for every shape, with stacks of small products
  (attention's per-head products) run on one BLAS thread and everything else left to OpenBLAS.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import os
import subprocess
import sys
import threading
import warnings
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, strategies as st

from minitorch_nlp.backends import numpy_tuning, threads
from minitorch_nlp.backends.numpy_backend import NumpyBackend
from minitorch_nlp.testing import strategies as S
from tests.backend_checks import assert_heads_merge_without_a_copy, heads_split_by_a_permute

pytestmark = pytest.mark.sec4

NUMPY = NumpyBackend()
K, C = math.sqrt(2 / math.pi), 0.044715


def tanh_gelu_textbook(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and its derivative, in x's precision."""
    t = np.tanh(K * (x + C * x ** 3))
    return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K * (1 + 3 * C * x * x)


# ---- tanh GELU -----------------------------------------------------------------------------------
def test_tanh_gelu_is_as_accurate_as_float32_allows():
    """On [-10, 10] in float32, values and derivatives against the exact ones (long double): no
    worse than twice the textbook tanh formula's worst absolute error, and within 2.5e-6."""
    x = np.linspace(-10, 10, 400_001).astype(np.float32)
    w = x.astype(np.longdouble)
    u = np.sqrt(np.longdouble(2) / np.pi) * (w + np.longdouble(C) * w ** 3)
    s = 1 / (1 + np.exp(-2 * u))
    du = np.sqrt(np.longdouble(2) / np.pi) * (1 + 3 * np.longdouble(C) * w ** 2)
    exact = (w * s, s + 2 * w * s * (1 - s) * du)
    ours = (NUMPY.gelu(x, "tanh"), NUMPY.gelu_backward(x, np.ones_like(x), "tanh"))
    for got, textbook, want in zip(ours, tanh_gelu_textbook(x), exact):
        assert got.dtype == np.float32
        worst = np.abs(got.astype(np.longdouble) - want).max()
        assert worst <= 2 * np.abs(textbook.astype(np.longdouble) - want).max()
        assert worst <= 2.5e-6


@given(x=S.maybe_noncontiguous(S.arrays(S.shapes(min_dims=1, max_dims=3), -30, 30)),
       seed=S.seeds())
def test_tanh_gelu_is_the_textbook_formula_in_float64(x, seed):
    g = np.random.default_rng(seed).standard_normal(x.shape)
    value, slope = tanh_gelu_textbook(x)
    np.testing.assert_allclose(NUMPY.gelu(x, "tanh"), value, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(NUMPY.gelu_backward(x, g, "tanh"), slope * g, rtol=1e-12,
                               atol=1e-14)


@contextlib.contextmanager
def parts_in_threads(threads):
    """``_in_parts`` spreads its blocks over ``threads`` Python threads whatever their work
    (``threads`` 1: everything on the calling thread)."""
    with mock.patch.object(NumpyBackend, "_task_threads",
                           staticmethod(lambda work, tasks: min(threads, tasks))):
        yield


@contextlib.contextmanager
def row_blocks_in_threads(block, threads):
    """The NumPy backend's row-block kernels with ``block`` elements per block, spread over
    ``threads`` Python threads whatever the size of the input."""
    with mock.patch.object(numpy_tuning, "ELEMENTWISE_BLOCK", block), parts_in_threads(threads):
        yield


@given(x=S.maybe_noncontiguous(S.arrays(S.shapes(min_dims=0, max_dims=3), -12, 12)),
       seed=S.seeds(), approximate=st.sampled_from(["tanh", "none"]),
       block=st.sampled_from([1, 3, 8]), threads=st.integers(2, 3))
def test_gelus_in_row_blocks_shared_among_threads_give_the_calling_threads_values(
        x, seed, approximate, block, threads):
    """The GELUs run over blocks of rows (``_in_row_blocks``) spread over Python threads: bit for
    bit what one block on the calling thread gives, whatever the block size and thread count."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(x.shape)
    bias = rng.standard_normal(x.shape[-1:])
    per_row = rng.standard_normal(x.shape[:-1] + (1,)) if x.ndim else None   # added first

    def results():
        out = [NUMPY.gelu(x, approximate), NUMPY.gelu_backward(x, g, approximate),
               NUMPY.bias_gelu(x, bias, approximate),
               NUMPY.bias_gelu_backward(x, bias, g, approximate)]
        if per_row is not None:
            out += [NUMPY.bias_gelu(x, per_row, approximate),
                    NUMPY.bias_gelu_backward(x, per_row, g, approximate)]
        return out

    with mock.patch.object(numpy_tuning, "ELEMENTWISE_BLOCK", 1 << 30):
        alone = results()
    with row_blocks_in_threads(block, threads):
        shared = results()
    for got, want in zip(shared, alone):
        assert got.shape == x.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_tanh_gelu_of_large_inputs_is_exact_and_quiet():
    """exp(-2u) overflows below about -9 (float32): the GELU and its derivative vanish there,
    without NumPy's overflow warning; for large positive x, the GELU is x and its derivative 1."""
    for dtype in (np.float32, np.float64):
        x = np.array([-1e4, -100.0, -20.0, 20.0, 100.0, 1e4], dtype=dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            value = NUMPY.gelu(x, "tanh")
            slope = NUMPY.gelu_backward(x, np.ones_like(x), "tanh")
        negative = x < 0
        assert np.abs(value[negative]).max() < 1e-30 and np.abs(slope[negative]).max() < 1e-30
        assert np.array_equal(value[~negative], x[~negative])
        assert np.all(slope[~negative] == 1)


# ---- one BLAS thread -----------------------------------------------------------------------------
def blas_thread_counts():
    return [get() for _, get in threads._blas_thread_controls()]


@pytest.fixture
def two_blas_threads():
    if not threads._blas_thread_controls():
        pytest.skip("NumPy is not linked to an OpenBLAS whose thread count can be set")
    before = blas_thread_counts()
    for set_count, _ in threads._blas_thread_controls():  # OpenBLAS only: Numba's count stays
        set_count(2)
    yield
    for (set_count, _), count in zip(threads._blas_thread_controls(), before):
        set_count(count)


def test_one_blas_thread_inside_and_the_count_restored_after(two_blas_threads):
    with threads.one_blas_thread():
        assert set(blas_thread_counts()) == {1}
        with threads.one_blas_thread():  # nested: still one, and the outer one restores
            assert set(blas_thread_counts()) == {1}
        assert set(blas_thread_counts()) == {1}
    assert set(blas_thread_counts()) == {2}
    with pytest.raises(RuntimeError), threads.one_blas_thread():
        raise RuntimeError("the body failed")
    assert set(blas_thread_counts()) == {2}


def test_one_blas_thread_restores_once_the_last_concurrent_user_leaves(two_blas_threads):
    inside, leave = threading.Barrier(2), threading.Event()
    counts = []

    def user():
        with threads.one_blas_thread():
            inside.wait()
            leave.wait()

    worker = threading.Thread(target=user)
    worker.start()
    with threads.one_blas_thread():
        inside.wait()
        leave.set()
        worker.join()
        counts.append(blas_thread_counts())  # the worker has left, this user has not
    assert set(counts[0]) == {1}
    assert set(blas_thread_counts()) == {2}


def _fresh_python(code, environment, dropped):
    """The words ``code`` prints in a fresh Python process, whose environment is this one's
    without the variables ``dropped`` says to drop, plus ``environment``."""
    env = {k: v for k, v in os.environ.items() if not dropped(k)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**env, **environment})
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _blas_spin_after_import(environment):
    """OpenBLAS's idle-thread wait exponent after ``import minitorch_nlp`` in a fresh process
    that imported NumPy (and ran a threaded product) first, as user scripts do."""
    code = ("import ctypes, numpy as np\n"
            "a = np.ones((400, 400)); a @ a\n"
            "import minitorch_nlp\n"
            "from minitorch_nlp.backends import threads\n"
            "(path,) = threads._openblas_libraries()\n"
            "print((a @ a)[0, 0], ctypes.CDLL(path).openblas_thread_timeout())\n")
    product, exponent = _fresh_python(code, {"OPENBLAS_NUM_THREADS": "2", **environment},
                                      lambda name: name == "OPENBLAS_THREAD_TIMEOUT")
    assert float(product) == 400.0   # the stopped threads start again for the next product
    return int(exponent)


def test_importing_shortens_openblas_idle_spin_unless_the_user_chose_one():
    if not threads._blas_thread_controls():
        pytest.skip("NumPy is not linked to an OpenBLAS whose threads can be controlled")
    assert _blas_spin_after_import({}) == threads.BLAS_SPIN_EXPONENT
    assert _blas_spin_after_import({"OPENBLAS_THREAD_TIMEOUT": "20"}) == 20


def _page_faults_of_repeated_arrays(environment):
    """Minor page faults while a fresh process (after ``import minitorch_nlp``) makes, writes
    and frees five 4 MB arrays ten times over, as a training step's temporaries come and go."""
    code = ("import resource, numpy as np, minitorch_nlp\n"
            "from minitorch_nlp.backends import memory\n"
            "def rounds(n):\n"
            "    for _ in range(n):\n"
            "        arrays = [np.ones(1 << 20, np.float32) for _ in range(5)]\n"
            "        del arrays\n"
            "rounds(2)\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "rounds(10)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before,\n"
            "      memory.keep_freed_memory())\n")
    faults, settable = _fresh_python(
        code, environment, lambda name: name.startswith("MALLOC_") or name == "GLIBC_TUNABLES")
    return int(faults), settable == "True"


def test_importing_keeps_freed_memory_for_the_next_arrays_unless_the_user_chose():
    if not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"):
        pytest.skip("the C library is not glibc")
    kept, settable = _page_faults_of_repeated_arrays({})
    assert settable
    returned, settable = _page_faults_of_repeated_arrays(
        {"MALLOC_TRIM_THRESHOLD_": "131072", "MALLOC_MMAP_THRESHOLD_": "131072"})
    assert not settable   # the user's settings stand
    assert returned >= 10 * 5 * 1024 // 2   # about one fault per 4 kB page, every round
    assert kept <= returned // 20


# ---- matmul --------------------------------------------------------------------------------------
@contextlib.contextmanager
def counting_one_thread_sections(monkeypatch):
    entered = []

    @contextlib.contextmanager
    def recording():
        entered.append(True)
        yield

    monkeypatch.setattr(numpy_tuning, "one_blas_thread", recording)
    yield entered


@st.composite
def matmul_operands(draw):
    """Operands of any matmul: 1-D to 4-D, batch axes that broadcast, float32 or float64."""
    m, k, n = (draw(st.integers(1, 6)) for _ in range(3))
    batch = draw(S.shapes(min_dims=0, max_dims=2, max_side=4))
    a_batch = tuple(draw(st.sampled_from([side, 1])) for side in batch)
    b_batch = tuple(draw(st.sampled_from([side, 1])) for side in batch)[draw(st.integers(0, 1)):]
    a_shape = draw(st.sampled_from([(k,), a_batch + (m, k)]))
    b_shape = draw(st.sampled_from([(k,), b_batch + (k, n)]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(S.seeds()))
    return (rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype))


@given(operands=matmul_operands())
def test_matmul_is_numpys(operands):
    a, b = operands
    want = np.matmul(a, b)
    got = NUMPY.matmul(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    out = np.empty_like(want)
    assert NUMPY.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_only_stacks_of_small_products_take_one_blas_thread(monkeypatch):
    heads = np.ones((16, 4, 128, 32), np.float32)
    with counting_one_thread_sections(monkeypatch) as entered:
        NUMPY.matmul(heads, heads.swapaxes(-1, -2))                      # 64 products of 128^2 x 32
        assert len(entered) == 1
        NUMPY.matmul(np.ones((2048, 128)), np.ones((128, 512)))           # one product
        NUMPY.matmul(np.ones((1, 128, 128)), np.ones((128, 64)))          # a stack of one
        big = np.ones((2, 256, 256), np.float32)
        NUMPY.matmul(big, big[:, :, :128])                                # 256 x 128 x 256 > 4M
        assert len(entered) == 1


def test_attention_takes_one_blas_thread_for_its_head_products(monkeypatch):
    q = np.random.default_rng(0).standard_normal((2, 4, 16, 8))
    with counting_one_thread_sections(monkeypatch) as entered:
        out, probs = NUMPY.attention(q, q, q, 0.5, True, None)
        assert len(entered) == 2
        NUMPY.attention_backward(np.ones_like(out), q, q, q, probs, 0.5, True, None)
        assert len(entered) == 6



@st.composite
def batched_attention_inputs(draw):
    """q, k, v, the output's gradient, a key mask or None, a score bias or None, whether
    causal: up to 5 batch entries, k and v sometimes shared by the whole batch."""
    batch, heads = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    tq, tk, d, dv = (draw(st.integers(1, 5)) for _ in range(4))
    shared_keys = draw(st.booleans())
    q = draw(S.arrays((batch, heads, tq, d)))
    k, v = (draw(S.maybe_noncontiguous(S.arrays((1 if shared_keys else batch, heads, tk, n))))
            for n in (d, dv))
    grad = draw(S.arrays((batch, heads, tq, dv)))
    key_mask = draw(st.none() | S.bool_masks((batch, tk)))
    bias = draw(st.none() | S.score_biases((batch, heads, tq, tk)))
    return q, k, v, grad, key_mask, bias, draw(st.booleans())


@given(inputs=batched_attention_inputs())
def test_attention_output_lies_heads_apart_and_gradients_as_their_inputs(inputs):
    """Heads split off a projection by a permute come back merged by a reshape, not a copy: the
    output and q's gradient lie (B, T, H, D) in memory; the values are those of contiguous
    inputs."""
    q, k, v, grad, key_mask, bias, causal = inputs
    strided = heads_split_by_a_permute(q)
    out, state = NUMPY.attention(strided, k, v, 0.5, causal, key_mask, bias)
    grads = NUMPY.attention_backward(grad, strided, k, v, state, 0.5, causal, key_mask,
                                     bias is not None)
    assert_heads_merge_without_a_copy(out, grads[:1])
    want_out, want_state = NUMPY.attention(q, k, v, 0.5, causal, key_mask, bias)
    want = NUMPY.attention_backward(grad, q, k, v, want_state, 0.5, causal, key_mask,
                                    bias is not None)
    for got, expected in zip((out,) + grads, (want_out,) + want):
        if expected is not None:
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@given(inputs=batched_attention_inputs(), threads=st.integers(2, 3))
def test_attention_shared_among_threads_by_batch_entries_gives_the_calling_threads_result(
        inputs, threads):
    """Dense attention runs consecutive batch entries on each thread: output, probabilities and
    gradients are the calling thread's bit for bit; a bias shared by the batch sums its parts'
    gradients, equal up to the order of that sum."""
    q, k, v, grad, key_mask, bias, causal = inputs

    def results():
        out, state = NUMPY.attention(q, k, v, 0.5, causal, key_mask, bias)
        return (out, state[0]) + NUMPY.attention_backward(grad, q, k, v, state, 0.5, causal,
                                                          key_mask, bias is not None)

    with parts_in_threads(1):
        alone = results()
    with parts_in_threads(threads):
        shared = results()
    for got, want in zip(shared[:-1], alone[:-1]):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    if bias is None:
        assert shared[-1] is None and alone[-1] is None
    else:
        assert shared[-1].shape == bias.shape
        np.testing.assert_allclose(shared[-1], alone[-1], rtol=1e-12, atol=1e-12)


# ---- banded attention's chunks on threads --------------------------------------------------------
@given(n=st.integers(1, 90), window=st.integers(1, 20), dilation=st.integers(1, 3),
       causal=st.booleans(), masked=st.booleans(), threads=st.integers(2, 3), seed=S.seeds())
def test_banded_attention_chunks_shared_among_threads_give_the_calling_threads_values(
        n, window, dilation, causal, masked, threads, seed):
    """The blocked band's chunks (a few blocks each here) spread over Python threads: the
    forward bit for bit what the calling thread gives alone; the backward the same up to the
    order in which the parts' key and value gradients are added."""
    rng = np.random.default_rng(seed)
    q, k, v, grad = (rng.standard_normal((2, 2, n, 3)) for _ in range(4))
    key_mask = rng.random((2, n)) > 0.3 if masked else None
    arguments = (1 / math.sqrt(3), window, dilation, causal, key_mask)

    def results():
        out, probs = NUMPY.banded_attention(q, k, v, *arguments)
        return (out, probs) + NUMPY.banded_attention_backward(grad, q, k, v, probs, *arguments)

    with mock.patch.object(numpy_tuning, "GROUP_BLOCK", 1), parts_in_threads(1):
        alone = results()
    with mock.patch.object(numpy_tuning, "GROUP_BLOCK", 1), parts_in_threads(threads):
        shared = results()
    for got, want in zip(shared[:3], alone[:3]):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(shared[3:], alone[3:]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
