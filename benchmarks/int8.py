"""Compressed inference against float32: the int8 Linear of Q8BERT, the 1-bit xnor-popcount
GEMM, and a Transformer layer with half its heads removed, at BERT-base shapes.

    python benchmarks/int8.py [--batch 4] [--threads 1 2] [--repeats 7] [--budget 20]

At every thread count given (OpenBLAS, Numba and PyTorch get the same count), in one process with
the runners interleaved (``backends.interleaved``), median times and the median per-round ratio
to each suite's first runner (our float32 on the numba backend, or the step without LayerDrop):

* Linear forward, (batch x 128 tokens, 768) -> 3072: float32 on the numpy and numba backends;
  ``compress.quantization.Int8Linear`` on numba (activations quantised, int8 x int8 -> int32
  kernel, one rescale, bias), checked against the float32 output first; and, when ``torch`` is
  importable, PyTorch's float32 ``nn.Linear`` and its dynamically quantised int8 Linear
  (``torch.ao.quantization.quantize_dynamic``) as peers;
* the 1-bit product of the same shapes: signs packed, then the backend's ``binary_matmul``
  (a.b = K - 2 popcount(a xor b)) on numba, against the float32 product of the same +-1 matrices;
  and LQ-Nets' 2-bit x 2-bit product (eq 58, ``compress.lq_nets.lq_matmul``: encoding and
  packing included, four 1-bit GEMMs);
* a BERT-base encoder layer (12 heads, 768, feed-forward 3072) on numba, whole and with 6 of its
  12 heads removed by ``compress.pruning.prune_heads``;
* a training step of a 6-layer encoder without and with ``compress.pruning.LayerDrop`` (p = 0.5).

PyTorch is optional (install it in a throw-away virtual environment, never as a dependency).
Issue #18's target: the int8 Linear at least 1.5x faster than the float32 numba path.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
from backends import interleaved, median_ms, median_ratio, pin_threads  # noqa: E402
from minitorch_nlp.backends import get_backend  # noqa: E402
from minitorch_nlp.compress import lq_nets, pruning, quantization  # noqa: E402
from minitorch_nlp.nn import Linear, TransformerEncoder  # noqa: E402

D_MODEL, D_FF, TOKENS = 768, 3072, 128


def linear_runners(batch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, TOKENS, D_MODEL)).astype(np.float32)
    mt.manual_seed(0)
    layers, inputs = {}, {}
    for name in ("numpy", "numba"):
        with mt.backend(name):
            layers[name] = Linear(D_MODEL, D_FF)
            inputs[name] = mt.tensor(x)
    layers["numpy"].load_state_dict(layers["numba"].state_dict())
    with mt.backend("numba"):
        fake = quantization.QuantizedLinear.from_linear(layers["numba"])
        fake(inputs["numba"])                                  # observe the input range
        int8 = quantization.Int8Linear.from_quantized(fake.eval())
    with mt.no_grad():
        reference = layers["numba"](inputs["numba"]).numpy()
        error = np.abs(int8(inputs["numba"]).numpy() - reference).max()

    def run(layer, x):
        def call():
            with mt.no_grad():
                return layer(x)
        return call

    runners = {"float32 numba": run(layers["numba"], inputs["numba"]),
               "float32 numpy": run(layers["numpy"], inputs["numpy"]),
               "int8 numba (Int8Linear)": run(int8, inputs["numba"])}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        peer = torch.nn.Linear(D_MODEL, D_FF)
        dynamic = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(peer),
                                                         {torch.nn.Linear}, dtype=torch.qint8)
        tx = torch.from_numpy(x)

        def torch_run(module):
            def call():
                with torch.inference_mode():
                    return module(tx)
            return call

        runners["PyTorch float32"] = torch_run(peer)
        runners["PyTorch dynamic int8"] = torch_run(dynamic)
    return runners, (f"Linear {batch}x{TOKENS}x{D_MODEL} -> {D_FF} (int8 max |error| "
                     f"{error:.3g}, output max |y| {np.abs(reference).max():.3g})")


def binary_runners(batch):
    backend = get_backend("numba")
    rng = np.random.default_rng(1)
    a = np.where(rng.random((batch * TOKENS, D_MODEL)) < 0.5, -1.0, 1.0).astype(np.float32)
    b = np.where(rng.random((D_FF, D_MODEL)) < 0.5, -1.0, 1.0).astype(np.float32)
    b_bits = backend.pack_signs(b)
    if not np.array_equal(backend.binary_matmul(backend.pack_signs(a), b_bits, D_MODEL),
                          (a @ b.T).astype(np.int32)):
        raise SystemExit("binary_matmul differs from the float product of the signs")
    v = np.array([0.5, 1.0])
    return {"float32 numba": lambda: a @ b.T,
            "xnor-popcount numba": lambda: backend.binary_matmul(backend.pack_signs(a), b_bits,
                                                                 D_MODEL),
            "LQ 2x2-bit (eq 58) numba": lambda: lq_nets.lq_matmul(a, v, b, v,
                                                                  backend="numba")}, (
        f"1-bit GEMM {batch * TOKENS}x{D_MODEL} @ {D_MODEL}x{D_FF} (packing included, equal to "
        "the float product)")


def pruned_runners(batch):
    with mt.backend("numba"):
        mt.manual_seed(0)
        whole = TransformerEncoder(1, D_MODEL, 12, D_FF, dropout=0.0, activation="gelu").eval()
        mt.manual_seed(0)
        pruned = TransformerEncoder(1, D_MODEL, 12, D_FF, dropout=0.0, activation="gelu").eval()
        pruning.prune_heads(pruned, {0: [0, 2, 4, 6, 8, 10]})
        x = mt.tensor(np.random.default_rng(2).standard_normal((batch, TOKENS, D_MODEL)),
                      dtype=mt.float32)

    def run(stack):
        def call():
            with mt.no_grad():
                return stack(x).last_hidden_state
        return call

    return {"float32 numba": run(whole), "6 of 12 heads removed": run(pruned)}, (
        f"BERT-base encoder layer, {batch}x{TOKENS} tokens")


def layerdrop_runners(batch):
    """A training step (forward and backward) of a 6-layer encoder, without and with LayerDrop
    p = 0.5: a skipped layer is not evaluated, so the step should cost about half."""
    with mt.backend("numba"):
        mt.manual_seed(0)
        stack = TransformerEncoder(6, 256, 4, 1024, dropout=0.0, activation="gelu").train()
        x = mt.tensor(np.random.default_rng(3).standard_normal((batch, TOKENS, 256)),
                      dtype=mt.float32)

    def step():
        stack.zero_grad()
        stack(x).last_hidden_state.sum().backward()

    seeds = itertools.count()

    def step_with_layerdrop():
        drop = pruning.LayerDrop(stack, p=0.5, seed=next(seeds))
        step()
        drop.remove()

    return {"no LayerDrop": step, "LayerDrop p=0.5": step_with_layerdrop}, (
        f"training step of a 6-layer encoder (d 256, {batch}x{TOKENS} tokens)")


def measure_and_report(suites, repeats, budget):
    """Each suite's runners interleaved, then their median times and their median ratio to the
    suite's first runner."""
    for runners, title in suites:
        times = interleaved(runners, repeats, budget)
        first = next(iter(times))
        print(f"  {title}")
        for name, seconds in times.items():
            print(f"    {name:26s} {median_ms(seconds):9.2f} ms   {first} / this = "
                  f"{median_ratio(times[first], seconds):5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per measurement")
    args = parser.parse_args()
    suites = [linear_runners(args.batch), binary_runners(args.batch),
              pruned_runners(args.batch), layerdrop_runners(args.batch)]
    for threads in args.threads:
        print(pin_threads(threads))
        measure_and_report(suites, args.repeats, args.budget)


if __name__ == "__main__":
    main()
