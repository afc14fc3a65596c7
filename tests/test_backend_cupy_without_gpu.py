"""What the CuPy backend does on a machine without a GPU (such as CI): selecting it says what to
install, and its numba.cuda kernels still compile for the CUDA target.

The compile check matters because the CUDA simulator runs kernels as plain Python: code that
numba.cuda cannot compile (an unsupported builtin, a type that does not unify) passes there and
fails only on a GPU. Here every kernel goes through numba's type inference and lowering for a
real device, with the argument types its launcher passes, without launching anything.
"""
from __future__ import annotations

import re
import sys
import types

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.backends import cupy_backend

HINT = "the cupy backend needs an NVIDIA GPU and CuPy: pip install 'minitorch-nlp[gpu]'"


def _gpu_works():
    try:
        mt.get_backend("cupy")
    except RuntimeError:
        return False
    return True


def test_selecting_cupy_without_a_gpu_says_what_to_install():
    if _gpu_works():
        pytest.skip("cupy and a GPU are present here")
    with pytest.raises(RuntimeError, match=re.escape(HINT)):
        mt.set_backend("cupy")
    assert mt.get_backend().name == "numpy"  # the failed switch changed nothing
    with pytest.raises(RuntimeError, match=re.escape(HINT)):
        mt.tensor([1.0]).to("cupy")


def test_the_error_carries_the_underlying_reason(monkeypatch):
    def no_device():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    fake_cupy = types.ModuleType("cupy")
    fake_cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_device))
    fake_cupyx = types.ModuleType("cupyx")
    fake_cupyx.scipy = types.ModuleType("cupyx.scipy")
    fake_cupyx.scipy.special = types.ModuleType("cupyx.scipy.special")
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setitem(sys.modules, "cupyx", fake_cupyx)
    monkeypatch.setitem(sys.modules, "cupyx.scipy", fake_cupyx.scipy)
    monkeypatch.setitem(sys.modules, "cupyx.scipy.special", fake_cupyx.scipy.special)
    with pytest.raises(RuntimeError, match=re.escape(HINT) + r".*cudaErrorNoDevice"):
        cupy_backend.CupyBackend()


def _call_every_launcher(kernels, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(dtype)
    w = np.ones(3, dtype=dtype)
    kernels.softmax_backward(kernels.softmax(x, -1), x, -1)
    kernels.log_softmax_backward(kernels.log_softmax(x, 0), x, 0)
    _, xhat, rstd = kernels.layer_norm(x, w, w, 1e-5)
    kernels.layer_norm_backward(x, xhat, rstd, w)
    kernels.gelu_backward(x, kernels.gelu(x, "none"), "none")
    kernels.bias_gelu_backward(x, w, kernels.bias_gelu(x, w, "tanh"), "tanh")
    kernels.scatter_add_rows(np.array([0, 1]), x, 3)
    target = np.array([0, 2])
    loss, log_probs = kernels.cross_entropy(x, target, -100, 0.1)
    kernels.cross_entropy_backward(log_probs, target, loss, -100, 0.1)
    q = rng.standard_normal((1, 2, 3, 2)).astype(dtype)
    mask = np.ones((1, 3), dtype=bool)
    _, lse = kernels.attention(q, q, q, 0.5, True, mask)
    kernels.attention_backward(q, q, q, q, lse, 0.5, True, mask)
    _, lse = kernels.banded_attention(q, q, q, 0.5, 1, 2, False, mask)
    kernels.banded_attention_backward(q, q, q, q, lse, 0.5, 1, 2, False, mask)
    kernels.pack_signs(x)
    small = rng.integers(-3, 3, size=(2, 2), dtype=np.int8)
    kernels.matmul_int8(small, small)
    kernels.binary_matmul(kernels.pack_signs(x), kernels.pack_signs(x), 3)


@pytest.fixture
def compile_instead_of_launch(monkeypatch):
    """``patch(module)`` makes ``module``'s launchers compile each kernel for a real device (with
    the argument types they pass) instead of launching it; ``compiled`` collects the names."""
    from numba.core import config

    if config.ENABLE_CUDASIM:
        pytest.skip("under the simulator numba.cuda does not compile")
    from numba import cuda, typeof
    from numba.core import types as nb_types

    if cuda.is_available():
        pytest.skip("a GPU is present: the gpu tests compile the kernels for it")
    try:
        import numba.cuda.dispatcher as dispatcher
        from numba.cuda.compiler import compile_cuda
    except ImportError as error:
        pytest.skip(f"numba's CUDA compiler moved: {error}")

    compute_capability = (8, 0)
    # device functions compile for the "current device"; there is none, so name one
    monkeypatch.setattr(dispatcher, "get_current_device",
                        lambda: types.SimpleNamespace(compute_capability=compute_capability))
    compiled = set()

    def compile_kernel(kernel, *args):
        signature = tuple(typeof(a) for a in args)
        compile_cuda(kernel.py_func, nb_types.void, signature, cc=compute_capability)
        compiled.add(kernel.py_func.__name__)

    def patch(module):
        monkeypatch.setattr(module, "_run", lambda kernel, n, *args: compile_kernel(kernel, *args),
                            raising=False)
        monkeypatch.setattr(module, "_launch", lambda kernel, grid, block, args:
                            compile_kernel(kernel, *args), raising=False)
        monkeypatch.setattr(module, "_run_2d", lambda kernel, rows, cols, *args:
                            compile_kernel(kernel, *args), raising=False)
        monkeypatch.setattr(module, "_run_rows", lambda kernel, rows, length, *args:
                            compile_kernel(kernel, *args), raising=False)

    return types.SimpleNamespace(patch=patch, compiled=compiled)


def _kernels(module):
    return {name for name, obj in vars(module).items()
            if hasattr(obj, "py_func") and not obj.targetoptions.get("device")}


@pytest.mark.slow
def test_every_kernel_compiles_for_the_cuda_target(compile_instead_of_launch):
    from minitorch_nlp.backends import cuda_kernels

    compile_instead_of_launch.patch(cuda_kernels)
    for dtype in (np.float32, np.float64):
        _call_every_launcher(cuda_kernels, dtype)
    assert compile_instead_of_launch.compiled == _kernels(cuda_kernels)


@pytest.mark.slow
def test_the_long_attention_kernels_compile_for_the_cuda_target(compile_instead_of_launch):
    """Grouped attention, LSH's round masks (both with device functions compiled from the numba
    backend's loop bodies) and causal linear attention."""
    from minitorch_nlp.backends import cuda_linear_kernels, cuda_sparse_kernels

    for module in (cuda_sparse_kernels, cuda_linear_kernels):
        compile_instead_of_launch.patch(module)
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        q = rng.standard_normal((1, 2, 5, 3)).astype(dtype)
        groups = np.array([[[[0, 1], [2, 3]]]])
        out, probs = cuda_sparse_kernels.grouped_attention(
            q, q, q, groups, groups, np.ones((1, 1, 1, 1, 1), dtype=bool), None, None, 0.5)
        cuda_sparse_kernels.grouped_attention_backward(np.ones((1, 2, 2, 2, 4), dtype=dtype), q,
                                                       q, q, probs, groups, groups, 0.5)
        cuda_linear_kernels.causal_linear_attention_backward(
            q, q, q, q, q, np.ones((2, 5), dtype=dtype))
        cuda_linear_kernels.causal_linear_attention(q, q, q)
    index = np.zeros((2, 2, 3, 6), dtype=np.int64)
    for dtype in (np.float32, np.float64):
        cuda_sparse_kernels.lsh_round_masks(index, index, index[..., :2], index[..., :4],
                                            np.ones((3, 4), dtype=bool), 1, True, 1e5, dtype)
    assert compile_instead_of_launch.compiled == (_kernels(cuda_sparse_kernels)
                                                  | _kernels(cuda_linear_kernels))
