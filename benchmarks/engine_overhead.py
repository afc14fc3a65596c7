"""Engine overhead and an MLP training step, side by side with PyTorch CPU and HIPS autograd.

    python benchmarks/engine_overhead.py [--repeats 30] [--threads 2] [--json PATH]

Two measurements, each run interleaved (the runners alternate, so a noisy machine slows them
alike) and reported as medians, plus the median of the per-round ratios:

* per-op overhead: a chain of 100 tiny elementwise multiplications (4 elements) recorded for the
  gradient, time per operation -- once recording only (the forward pass with the graph being
  built: the issue's "per-op cost with gradient recording"), once with one backward through it;
* MLP step: forward + backward of a 784-512-512-10 ReLU network on a batch of 64 (float32) with
  cross-entropy, the same weights in every framework.

Targets (issue "The engine"): MLP step within 1.2x PyTorch; per-op overhead within 3x PyTorch;
both at least 2x faster than HIPS autograd. Measured here (1 thread, machine shared): MLP 0.98x
PyTorch and 2.9x faster than HIPS autograd; recording 0.96x PyTorch and 2.3x faster than HIPS
autograd; forward + backward of the op chain 1.03x PyTorch and 1.45x faster than HIPS autograd.
PyTorch and autograd are optional: missing ones are
skipped (``pip install torch==2.13.0 autograd``). ``--json`` writes the MLP step against PyTorch
for ``benchmarks/results/``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

CHAIN = 100
SIZES = (784, 512, 512, 10)
BATCH = 64


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# ---- minitorch_nlp -----------------------------------------------------------------------------
def minitorch_runners(weights, x, y):
    import minitorch_nlp as mt
    import minitorch_nlp.functional as F
    from minitorch_nlp import nn

    layers = []
    for w, b in weights:
        layer = nn.Linear(w.shape[0], w.shape[1])
        layer.load_state_dict({"weight": w.T.copy(), "bias": b})
        layers.append(layer)
    inputs, targets = mt.tensor(x), mt.tensor(y)

    def mlp_step():
        h = inputs
        for i, layer in enumerate(layers):
            h = layer(h)
            if i < len(layers) - 1:
                h = F.relu(h)
        loss = F.cross_entropy(h, targets)
        for layer in layers:
            layer.zero_grad()
        loss.backward()

    leaf = mt.ones(4, requires_grad=True)

    def op_record():
        h = leaf
        for _ in range(CHAIN):
            h = h * 1.0001
        return h

    return mlp_step, op_record, lambda: op_record().sum().backward()


# ---- PyTorch -----------------------------------------------------------------------------------
def torch_runners(weights, x, y):
    import torch

    params = [(torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True))
              for w, b in weights]
    inputs, targets = torch.tensor(x), torch.tensor(y)

    def mlp_step():
        h = inputs
        for i, (w, b) in enumerate(params):
            h = torch.nn.functional.linear(h, w.T, b)
            if i < len(params) - 1:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, targets)
        for w, b in params:
            w.grad = b.grad = None
        loss.backward()

    leaf = torch.ones(4, requires_grad=True)

    def op_record():
        h = leaf
        for _ in range(CHAIN):
            h = h * 1.0001
        return h

    return mlp_step, op_record, lambda: op_record().sum().backward()


# ---- HIPS autograd -------------------------------------------------------------------------------
def autograd_runners(weights, x, y):
    import autograd.numpy as anp
    from autograd import grad, make_vjp

    def loss_fn(params):
        h = x
        for i, (w, b) in enumerate(params):
            h = anp.dot(h, w) + b
            if i < len(params) - 1:
                h = anp.maximum(h, 0.0)
        shifted = h - anp.max(h, axis=1, keepdims=True)
        log_probs = shifted - anp.log(anp.sum(anp.exp(shifted), axis=1, keepdims=True))
        return -anp.mean(log_probs[np.arange(len(y)), y])

    loss_grad = grad(loss_fn)
    params = [(w, b) for w, b in weights]

    def chain_fn(v):
        for _ in range(CHAIN):
            v = v * 1.0001
        return anp.sum(v)

    chain_grad = grad(chain_fn)
    chain_record = make_vjp(chain_fn)  # traces the forward pass, the backward not run
    leaf = np.ones(4, dtype=np.float32)
    return (lambda: loss_grad(params)), (lambda: chain_record(leaf)), (lambda: chain_grad(leaf))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 2)))
    parser.add_argument("--json", type=Path, help="write the MLP step's figure to this file")
    args = parser.parse_args(argv)
    from backends import pin_threads  # benchmarks/backends.py, beside this script
    from results import write_results

    print(pin_threads(args.threads))

    rng = np.random.default_rng(0)
    weights = [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
                np.zeros(b, dtype=np.float32)) for a, b in zip(SIZES[:-1], SIZES[1:])]
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)

    runners = {"minitorch_nlp": minitorch_runners(weights, x, y)}
    try:
        runners["pytorch"] = torch_runners(weights, x, y)
    except ImportError:
        print("(PyTorch not installed: pip install torch==2.13.0)")
        if args.json:
            parser.error("--json: its figure is the MLP step against PyTorch, which is not "
                         "installed (pip install torch==2.13.0)")
    try:
        runners["hips-autograd"] = autograd_runners(weights, x, y)
    except ImportError:
        print("(HIPS autograd not installed: pip install autograd)")

    kinds = ("mlp", "record", "chain")
    for fns in runners.values():  # warm up (JIT, caches, allocator)
        for _ in range(5):
            for fn in fns:
                fn()

    times = {name: {kind: [] for kind in kinds} for name in runners}
    for _ in range(args.repeats):
        for name, fns in runners.items():
            for kind, fn in zip(kinds, fns):
                times[name][kind].append(_timed(fn))

    print(f"repeats: {args.repeats} (interleaved)")
    print(f"{'runner':<15}{'MLP step (ms)':>14}{'ratio':>7}{'record/op (us)':>16}{'ratio':>7}"
          f"{'fwd+bwd/op (us)':>17}{'ratio':>7}")
    ours = times["minitorch_nlp"]
    for name, t in times.items():
        row = f"{name:<15}"
        for kind, scale, width in (("mlp", 1e3, 14), ("record", 1e6 / CHAIN, 16),
                                   ("chain", 1e6 / CHAIN, 17)):
            ratio = statistics.median(a / b for a, b in zip(ours[kind], t[kind]))
            row += f"{statistics.median(t[kind]) * scale:>{width}.2f}{ratio:>7.2f}"
        print(row)
    print("ratio = minitorch_nlp time / runner time (median over rounds). record/op: one tiny "
          "multiplication recorded for the gradient; fwd+bwd/op: the same plus its share of one "
          "backward.")
    if args.json:
        import minitorch_nlp as mt

        mlp = {"ours": ours["mlp"], "PyTorch": times["pytorch"]["mlp"]}
        write_results(args.json, [{
            "path": f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, forward + backward, "
                    f"{mt.get_backend().name} backend",
            "threads": args.threads, "against": "PyTorch eager",
            "ratio": statistics.median(a / b for a, b in zip(mlp["ours"], mlp["PyTorch"])),
            "rounds": args.repeats,
            "median_ms": {name: statistics.median(t) * 1e3 for name, t in mlp.items()}}],
            sys.argv)


if __name__ == "__main__":
    main()
