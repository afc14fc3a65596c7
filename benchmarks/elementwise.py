"""The element-wise kernels side by side: erf-GELU against tanh-GELU, and the Adam update.

    python benchmarks/elementwise.py [--threads 1 2] [--repeats 30]

In one process, at each thread count (OpenBLAS and Numba), the runners interleaved (every round
runs each once, in a rotating order), medians and medians of per-round ratios:

* bias + GELU forward and backward on a (1280, 1536) float32 array (a batch of 32 sentences of 40
  tokens in a MiniLM feed-forward layer) in the numba kernels: the exact (erf) form against the
  tanh form, and against the same kernel loop calling the scalar ``math.erf`` (what the kernels
  did before the polynomial erf of ``backends/erf.py``); the NumPy backend's erf GELU next to its
  tanh GELU;
* one AdamW update of a (768, 3072) float32 parameter: the numba backend's fused loop against
  the NumPy backend's whole-array update.

Target (issue "Speed where users feel it"): erf-GELU within 1.2x of tanh-GELU's time in the
numba kernels.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from backends import interleaved, median_ms, median_ratio, pin_threads  # noqa: E402
from minitorch_nlp.backends import get_backend  # noqa: E402


def scalar_erf_gelu():
    """bias + erf-GELU forward, one loop calling ``math.erf`` (the old kernel's body)."""
    import numba

    @numba.njit(parallel=True, fastmath={"contract", "reassoc"})
    def gelu(x, bias, out):
        cols = bias.shape[0]
        for r in numba.prange(x.shape[0] // cols):
            for i in range(cols):
                v = x[r * cols + i] + bias[i]
                out[r * cols + i] = np.float32(0.5) * v * (
                    np.float32(1.0) + math.erf(v * np.float32(0.7071067811865476)))
    return gelu


def gelu_runners(numba_backend, numpy_backend):
    rng = np.random.default_rng(0)
    x = (2 * rng.standard_normal((1280, 1536))).astype(np.float32)
    bias = rng.standard_normal(1536).astype(np.float32)
    grad = rng.standard_normal(x.shape).astype(np.float32)
    old = scalar_erf_gelu()
    out = np.empty(x.size, dtype=np.float32)
    return {
        "numba tanh fwd": lambda: numba_backend.bias_gelu(x, bias, "tanh"),
        "numba erf fwd": lambda: numba_backend.bias_gelu(x, bias, "none"),
        "numba math.erf fwd (old)": lambda: old(x.reshape(-1), bias, out),
        "numba tanh bwd": lambda: numba_backend.bias_gelu_backward(x, bias, grad, "tanh"),
        "numba erf bwd": lambda: numba_backend.bias_gelu_backward(x, bias, grad, "none"),
        "numpy tanh fwd": lambda: numpy_backend.bias_gelu(x, bias, "tanh"),
        "numpy erf fwd": lambda: numpy_backend.bias_gelu(x, bias, "none"),
    }


def adam_runners(numba_backend, numpy_backend):
    rng = np.random.default_rng(0)
    shape = (768, 3072)

    def runner(backend):
        theta = rng.standard_normal(shape).astype(np.float32)
        exp_avg = np.zeros_like(theta)
        exp_avg_sq = np.zeros_like(theta)
        grad = rng.standard_normal(shape).astype(np.float32)
        scratch = [np.empty_like(theta), np.empty_like(theta)]
        return lambda: backend.adam_update(theta, grad, exp_avg, exp_avg_sq, None, scratch,
                                           step=10, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                                           weight_decay=0.01, decoupled=True)
    return {"numba AdamW": runner(numba_backend), "numpy AdamW": runner(numpy_backend)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    numba_backend, numpy_backend = get_backend("numba"), get_backend("numpy")
    gelu, adam = gelu_runners(numba_backend, numpy_backend), adam_runners(numba_backend,
                                                                          numpy_backend)
    pairs = [("numba erf fwd", "numba tanh fwd"), ("numba erf bwd", "numba tanh bwd"),
             ("numba math.erf fwd (old)", "numba erf fwd"), ("numpy erf fwd", "numpy tanh fwd"),
             ("numba AdamW", "numpy AdamW")]
    for threads in args.threads:
        print(pin_threads(threads))
        times = {**interleaved(gelu, args.repeats, budget=60.0, warmup=2),
                 **interleaved(adam, args.repeats, budget=60.0, warmup=2)}
        for name, seconds in times.items():
            print(f"  {name:26s} {median_ms(seconds):8.2f} ms")
        for a, b in pairs:
            print(f"  {a} / {b}: {median_ratio(times[a], times[b]):.2f}x")


if __name__ == "__main__":
    main()
