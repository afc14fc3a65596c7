"""The CuPy backend on a real GPU; every test here is marked ``gpu`` and skips without CuPy and a
GPU (``pip install -e '.[gpu]'``).

The kernel property tests are the ones ``test_backend_cuda.py`` runs under the CUDA simulator
(from ``backend_checks.py``), here on CuPy arrays through ``mt.get_backend("cupy")``. Added to
them: moving tensors between backends, and engine operations beyond the fused kernels (indexing,
sorting, masking, einsum ...) giving the NumPy backend's values and gradients on the GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from tests.backend_checks import *  # noqa: F401,F403 - the shared tests, collected here

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_backend():
    return mt.get_backend("cupy")


def test_tensor_moves_to_cupy_and_back_with_its_gradient():
    import cupy

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = mt.tensor(x, requires_grad=True)
    on_gpu = t.to("cupy")
    assert isinstance(on_gpu.data, cupy.ndarray) and on_gpu.backend.name == "cupy"
    assert "backend='cupy'" in repr(on_gpu)
    (on_gpu * on_gpu).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), 2 * x)
    back = on_gpu.to("numpy")
    assert isinstance(back.data, np.ndarray)
    np.testing.assert_array_equal(back.numpy(), x)
    with pytest.raises(TypeError, match="different backends"):
        t + on_gpu


def engine_workout(backend):
    """Values and gradients of a chain of engine operations that are not fused kernels."""
    rng = np.random.default_rng(0)
    with mt.backend(backend):
        x = mt.tensor(rng.standard_normal((4, 5)), dtype=mt.float64, requires_grad=True)
        rows = mt.tensor([0, 2, 2, 3, -1])
        picked = x[rows]  # repeated and negative rows: the scatter-add backward
        values, _ = mt.sort(picked, axis=-1)
        top, _ = mt.topk(x, 2, axis=0)
        masked = x.masked_fill(x > 0.5, 0.0)
        mixed = mt.einsum("ij,kj->ik", x, masked)
        hot = mt.one_hot(mt.tensor([1, 0, 4]), 5).astype(mt.float64)
        parts = [values.cumsum(axis=1).logsumexp(axis=0).sum(), top.prod(), mixed.max(),
                 mt.where(x > 0, x, 0.1 * x).clip(-1, 1).sum(), (hot @ x.T).tanh().sum(),
                 mt.stack([x, x.flip(0)], axis=0).gelu().mean(), x.softmax(0).log().mean()]
        loss = mt.concatenate([p.reshape(1) for p in parts]).sum()
        loss.backward()
    return loss.item(), x.grad.numpy()


def test_engine_operations_on_cupy_match_numpy():
    loss, grad = engine_workout("cupy")
    want_loss, want_grad = engine_workout("numpy")
    assert loss == pytest.approx(want_loss, rel=1e-9)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-8, atol=1e-10)


def test_a_gpt_training_step_on_cupy_matches_numpy():
    """The whole model path on the GPU: labels given as plain ids (not Tensors), a head mask, the
    fused kernels; the loss and every parameter's gradient agree with the NumPy backend's."""
    from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig

    ids = np.random.default_rng(0).integers(0, 50, size=(2, 12))
    results = {}
    for name in ("numpy", "cupy"):
        with mt.backend(name):
            mt.manual_seed(0)
            model = GPT2LMHeadModel(GPTConfig.tiny("gpt2", vocab_size=50)).to(mt.float64)
            loss = model(ids, labels=ids, head_mask=np.ones((2, 4))).loss
            loss.backward()
            results[name] = (loss.item(),
                             {k: p.grad.numpy() for k, p in model.named_parameters()})
    assert results["cupy"][0] == pytest.approx(results["numpy"][0], rel=1e-10)
    for key, grad in results["numpy"][1].items():
        np.testing.assert_allclose(results["cupy"][1][key], grad, rtol=1e-8, atol=1e-10)
