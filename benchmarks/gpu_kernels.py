"""The CuPy backend's numba.cuda kernels against plain CuPy and PyTorch CUDA, side by side.

    python benchmarks/gpu_kernels.py [--repeats 20] [--lengths 128 256 512 1024]
                                     [--band-lengths 1024 4096 16384] [--window 256]

Needs an NVIDIA GPU with CuPy (``pip install -e '.[gpu]'``); without one it exits with a message
saying so. PyTorch CUDA is optional (a CPU-only torch is skipped).

For each kernel, forward and backward together (one step of training needs both), three runners:

* ``kernel``: the CupyBackend method (a numba.cuda kernel launched on CuPy arrays);
* ``cupy``: the same maths as plain CuPy array expressions (what the backend would do without its
  kernels: several passes over memory and their temporaries);
* ``torch``: PyTorch CUDA's own operation (``F.softmax``, ``F.layer_norm``,
  ``F.scaled_dot_product_attention`` ...) with autograd.

Sizes follow the issue: batch 8, 4 heads, head size 64 (d_model 256), sequence length n; banded
attention at batch 1 with a window of 256 over long sequences, where the CuPy pool's size after
one step (about the peak memory) shows linear growth. The runners alternate round by round (a
noisy GPU slows them alike); the table gives medians in milliseconds and the median of the
per-round ratios kernel / other (below 1: the kernel is faster). ``first call`` is the kernel's
first run in this process: numba compiles it then (or loads it from its disk cache).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

BATCH, HEADS, HEAD_SIZE = 8, 4, 64
WIDTH = HEADS * HEAD_SIZE
VOCAB = 1024


def _gpu_or_exit():
    import minitorch_nlp as mt

    try:
        backend = mt.get_backend("cupy")
    except RuntimeError as error:
        raise SystemExit(f"benchmarks/gpu_kernels.py needs a GPU: {error}") from None
    import cupy

    return backend, cupy


def _torch_cuda():
    try:
        import torch
    except ImportError:
        print("(PyTorch not installed: the torch column is skipped)")
        return None
    if not torch.cuda.is_available():
        print("(PyTorch has no CUDA here: the torch column is skipped)")
        return None
    return torch


# ---- the plain CuPy composites -------------------------------------------------------------------
def cupy_softmax_step(cp, x, g):
    e = cp.exp(x - x.max(axis=-1, keepdims=True))
    y = e / e.sum(axis=-1, keepdims=True)
    return (g - (g * y).sum(axis=-1, keepdims=True)) * y


def cupy_layer_norm_step(cp, x, w, b, g, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / cp.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    _ = xhat * w + b
    d = g * w
    dx = (d - d.mean(axis=-1, keepdims=True) - xhat * (d * xhat).mean(axis=-1, keepdims=True))
    return dx * rstd, (g * xhat).reshape(-1, x.shape[-1]).sum(axis=0), g.reshape(
        -1, x.shape[-1]).sum(axis=0)


def cupy_gelu_step(cp, erf, x, g):
    _ = 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    return g * (0.5 * (1.0 + erf(x / math.sqrt(2.0)))
                + x * cp.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi))


def cupy_cross_entropy_step(cp, logits, target, g, smoothing=0.1):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - cp.log(cp.exp(shifted).sum(axis=1, keepdims=True))
    rows = cp.arange(len(target))
    _ = -(1 - smoothing) * log_probs[rows, target] - smoothing * log_probs.mean(axis=1)
    d = cp.exp(log_probs) - smoothing / logits.shape[1]
    d[rows, target] -= 1 - smoothing
    return d * g[:, None]


def cupy_attention_step(cp, q, k, v, g, scale):
    n = q.shape[-2]
    scores = (q @ k.swapaxes(-1, -2)) * scale
    scores = cp.where(cp.tri(n, dtype=bool), scores, -cp.inf)
    p = cupy_softmax_forward(cp, scores)
    _ = p @ v
    dv = p.swapaxes(-1, -2) @ g
    dp = g @ v.swapaxes(-1, -2)
    ds = (dp - (dp * p).sum(axis=-1, keepdims=True)) * p * scale
    return ds @ k, ds.swapaxes(-1, -2) @ q, dv


def cupy_softmax_forward(cp, x):
    e = cp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def cupy_banded_step(cp, q, k, v, g, scale, window):
    """Causal sliding-window attention as gathers and einsums (the NumPy backend's method)."""
    n = q.shape[-2]
    offsets = cp.arange(-window, 1)
    idx = cp.arange(n)[:, None] + offsets[None, :]
    valid = idx >= 0
    idx = cp.clip(idx, 0, n - 1)
    scores = cp.einsum("bhnd,bhnwd->bhnw", q, k[:, :, idx, :]) * scale
    p = cupy_softmax_forward(cp, cp.where(valid, scores, -cp.inf))
    _ = cp.einsum("bhnw,bhnwd->bhnd", p, v[:, :, idx, :])
    dp = cp.einsum("bhnd,bhnwd->bhnw", g, v[:, :, idx, :])
    ds = (dp - (dp * p).sum(axis=-1, keepdims=True)) * p * scale
    dq = cp.einsum("bhnw,bhnwd->bhnd", ds, k[:, :, idx, :])
    dk, dv = cp.zeros_like(k), cp.zeros_like(v)
    for w, offset in enumerate(range(-window, 1)):
        lo = -offset
        dk[:, :, :n - lo] += ds[:, :, lo:, w, None] * q[:, :, lo:]
        dv[:, :, :n - lo] += p[:, :, lo:, w, None] * g[:, :, lo:]
    return dq, dk, dv


# ---- the cases: (name, size label, kernel runner, cupy runner, torch runner or None) -------------
def cases(backend, cp, torch, lengths, band_lengths, window):
    from cupyx import scatter_add
    from cupyx.scipy.special import erf

    rng = cp.random.default_rng(0)

    def normal(*shape):
        return rng.standard_normal(shape, dtype=cp.float32)

    def on_torch(*arrays):
        return [torch.as_tensor(a, device="cuda").requires_grad_(a.dtype.kind == "f")
                for a in arrays]

    for n in lengths:
        size = f"B{BATCH} H{HEADS} n{n}"
        x, g = normal(BATCH, HEADS, n, n), normal(BATCH, HEADS, n, n)

        def kernel(x=x, g=g):
            backend.softmax_backward(backend.softmax(x, -1), g, -1)

        t = on_torch(x) if torch else None
        yield ("softmax", size, kernel, lambda x=x, g=g: cupy_softmax_step(cp, x, g),
               torch and (lambda t=t, g=torch.as_tensor(g, device="cuda"):
                          torch.softmax(t[0], -1).backward(g)))

        x, g = normal(BATCH, n, WIDTH), normal(BATCH, n, WIDTH)
        w, b = normal(WIDTH), normal(WIDTH)
        size = f"{BATCH}x{n}x{WIDTH}"

        def kernel(x=x, w=w, b=b, g=g):
            _, state = backend.layer_norm(x, w, b, 1e-5)
            backend.layer_norm_backward(g, x, state, w)

        t = on_torch(x, w, b) if torch else None
        yield ("layer norm", size, kernel,
               lambda x=x, w=w, b=b, g=g: cupy_layer_norm_step(cp, x, w, b, g),
               torch and (lambda t=t, g=torch.as_tensor(g, device="cuda"):
                          torch.nn.functional.layer_norm(t[0], (WIDTH,), t[1], t[2]).backward(g)))

        x, g = normal(BATCH, n, 4 * WIDTH), normal(BATCH, n, 4 * WIDTH)
        size = f"{BATCH}x{n}x{4 * WIDTH}"

        def kernel(x=x, g=g):
            backend.gelu(x, "none")
            backend.gelu_backward(x, g, "none")

        t = on_torch(x) if torch else None
        yield ("gelu (erf)", size, kernel, lambda x=x, g=g: cupy_gelu_step(cp, erf, x, g),
               torch and (lambda t=t, g=torch.as_tensor(g, device="cuda"):
                          torch.nn.functional.gelu(t[0]).backward(g)))

        logits, g = normal(BATCH * n, VOCAB), normal(BATCH * n)
        target = rng.integers(0, VOCAB, BATCH * n).astype(cp.int64)
        size = f"{BATCH * n}x{VOCAB}"

        def kernel(logits=logits, target=target, g=g):
            _, log_probs = backend.cross_entropy(logits, target, -100, 0.1)
            backend.cross_entropy_backward(log_probs, target, g, -100, 0.1)

        t = on_torch(logits) if torch else None
        yield ("cross-entropy", size, kernel,
               lambda logits=logits, target=target, g=g: cupy_cross_entropy_step(
                   cp, logits, target, g),
               torch and (lambda t=t, target=torch.as_tensor(target, device="cuda"),
                          g=torch.as_tensor(g, device="cuda"): torch.nn.functional.cross_entropy(
                              t[0], target, reduction="none", label_smoothing=0.1).backward(g)))

        q, k, v, g = (normal(BATCH, HEADS, n, HEAD_SIZE) for _ in range(4))
        scale = 1.0 / math.sqrt(HEAD_SIZE)
        size = f"B{BATCH} H{HEADS} n{n} d{HEAD_SIZE}"

        def kernel(q=q, k=k, v=v, g=g):
            _, state = backend.attention(q, k, v, scale, True, None)
            backend.attention_backward(g, q, k, v, state, scale, True, None)

        t = on_torch(q, k, v) if torch else None
        yield ("causal attention", size, kernel,
               lambda q=q, k=k, v=v, g=g: cupy_attention_step(cp, q, k, v, g, scale),
               torch and (lambda t=t, g=torch.as_tensor(g, device="cuda"):
                          torch.nn.functional.scaled_dot_product_attention(
                              *t, is_causal=True).backward(g)))

        index = rng.integers(0, VOCAB, BATCH * n).astype(cp.int64)
        src = normal(BATCH * n, WIDTH)
        size = f"{BATCH * n} rows of {WIDTH} into {VOCAB}"

        def cupy_scatter(index=index, src=src):
            out = cp.zeros((VOCAB, WIDTH), dtype=src.dtype)
            scatter_add(out, index, src)

        yield ("embedding scatter-add", size,
               lambda index=index, src=src: backend.scatter_add_rows(index, src, VOCAB),
               cupy_scatter,
               torch and (lambda index=torch.as_tensor(index, device="cuda"),
                          src=torch.as_tensor(src, device="cuda"):
                          torch.zeros(VOCAB, WIDTH, device="cuda").index_add_(0, index, src)))

    for n in band_lengths:
        q, k, v, g = (normal(1, HEADS, n, HEAD_SIZE) for _ in range(4))
        scale = 1.0 / math.sqrt(HEAD_SIZE)

        def kernel(q=q, k=k, v=v, g=g):
            _, state = backend.banded_attention(q, k, v, scale, window, 1, True, None)
            backend.banded_attention_backward(g, q, k, v, state, scale, window, 1, True, None)

        yield (f"banded attention w{window}", f"B1 H{HEADS} n{n} d{HEAD_SIZE}", kernel,
               lambda q=q, k=k, v=v, g=g: cupy_banded_step(cp, q, k, v, g, scale, window), None)

    a = rng.integers(-128, 128, (1024, 1024)).astype(cp.int8)
    b = rng.integers(-128, 128, (1024, 1024)).astype(cp.int8)
    yield ("int8 matmul -> int32", "1024^3", lambda: backend.matmul_int8(a, b),
           lambda: cp.matmul(a.astype(cp.int32), b.astype(cp.int32)),
           torch and (lambda ta=torch.as_tensor(a, device="cuda"),
                      tb=torch.as_tensor(b, device="cuda"): torch._int_mm(ta, tb)))

    signs_a, signs_b = cp.sign(normal(1024, 1024)), cp.sign(normal(1024, 1024))
    bits_a, bits_b = backend.pack_signs(signs_a), backend.pack_signs(signs_b)
    yield ("binary matmul (xnor-popcount)", "1024^3 bits",
           lambda: backend.binary_matmul(bits_a, bits_b, 1024),
           lambda: signs_a @ signs_b.T,  # the float32 product it replaces (cuBLAS)
           torch and (lambda ta=torch.as_tensor(signs_a, device="cuda"),
                      tb=torch.as_tensor(signs_b, device="cuda"): ta @ tb.T))


def _timed(fn, sync):
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def _pool_bytes_of_one_run(cp, fn):
    pool = cp.get_default_memory_pool()
    cp.cuda.runtime.deviceSynchronize()
    pool.free_all_blocks()
    fn()
    cp.cuda.runtime.deviceSynchronize()
    return pool.total_bytes()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--band-lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--window", type=int, default=256)
    args = parser.parse_args(argv)

    backend, cp = _gpu_or_exit()
    torch = _torch_cuda()
    sync = cp.cuda.runtime.deviceSynchronize
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}   "
          f"repeats: {args.repeats} (interleaved)   float32, forward + backward")
    header = (f"{'kernel':<30}{'size':<24}{'first call s':>13}{'kernel ms':>11}{'cupy ms':>9}"
              f"{'k/cupy':>8}{'torch ms':>10}{'k/torch':>9}")
    print(header)
    print("-" * len(header))
    for name, size, kernel, composite, on_torch in cases(backend, cp, torch, args.lengths,
                                                          args.band_lengths, args.window):
        try:
            first = _timed(kernel, sync)
            runners = {"kernel": kernel, "cupy": composite}
            if on_torch:
                runners["torch"] = on_torch
            for fn in runners.values():
                fn()  # warm up: caches, allocator pools, cuBLAS handles
            times = {runner: [] for runner in runners}
            for _ in range(args.repeats):
                for runner, fn in runners.items():
                    times[runner].append(_timed(fn, sync))
        except Exception as error:  # noqa: BLE001 - one failing case must not hide the others
            print(f"{name:<30}{size:<24}failed: {type(error).__name__}: {error}")
            continue

        def ms(runner):
            return f"{statistics.median(times[runner]) * 1e3:.3f}" if runner in times else "-"

        def ratio(runner):
            if runner not in times:
                return "-"
            return f"{statistics.median(a / b for a, b in zip(times['kernel'], times[runner])):.2f}"

        print(f"{name:<30}{size:<24}{first:>13.2f}{ms('kernel'):>11}{ms('cupy'):>9}"
              f"{ratio('cupy'):>8}{ms('torch'):>10}{ratio('torch'):>9}")
        if name.startswith("banded"):
            memory = {runner: _pool_bytes_of_one_run(cp, runners[runner]) / 2**20
                      for runner in ("kernel", "cupy")}
            print(f"{'':<30}{'':<24}memory (CuPy pool after one step): kernel "
                  f"{memory['kernel']:.1f} MiB, cupy {memory['cupy']:.1f} MiB")
    print("k/cupy, k/torch: median over rounds of kernel time / other time (below 1: kernel "
          "faster).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
