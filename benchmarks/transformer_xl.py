"""Transformer-XL's two costs, at each thread count given, runners interleaved in one process:

    python benchmarks/transformer_xl.py [--threads 1 2] [--backend numba] \
        [--contexts 128 256 512 1024]
                                        [--n 512] [--repeats 5] [--budget 20]

* Evaluation with memory against sliding-window recomputation: a 2-layer, 64-wide character
  Transformer-XL predicts 32 characters, each from a context of C characters, (a) by re-running
  the window of the last C characters for every prediction (what a model without memory must
  do) and (b) by reading the 32 characters as one segment over a memory of C states per layer.
  Reported: ms per predicted character and the speed-up (a) / (b), for each C.
* One relative-attention layer (``TransformerXLLayer``, eq 91, relative shift included) against
  the same layer with absolute attention (``nn.TransformerLayer`` with ``MultiHeadAttention``,
  causal), forward + backward at n positions (batch 1, d 256, 4 heads); PyTorch CPU runs the
  same two layers written in torch when ``torch`` imports (a throw-away venv:
  ``pip install torch==2.13.0``; never a dependency of the library). Target (issue 13): the
  relative layer at most 1.5x the absolute one.

The machine is shared while this is written: compare ratios measured in one run, not times
across runs.
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
from backends import interleaved, median_ms, median_ratio, pin_threads  # noqa: E402
from minitorch_nlp import nn  # noqa: E402
from minitorch_nlp.models.transformer_xl import (TransfoXLConfig, TransfoXLLMHeadModel,  # noqa: E402
                                                 TransformerXLLayer, relative_position_encoding)

SEGMENT = 32
D, HEADS = 256, 4


def memory_section(args):
    model = TransfoXLLMHeadModel(TransfoXLConfig(
        vocab_size=100, cutoffs=[], d_model=64, d_embed=64, n_head=4, d_head=16, d_inner=256,
        div_val=1, n_layer=2, mem_len=max(args.contexts), clamp_len=0, dropout=0.0))
    model.to(args.backend).eval()
    ids = np.random.default_rng(0).integers(0, 100, max(args.contexts) + SEGMENT)
    print(f"evaluation of {SEGMENT} characters ({args.backend}): ms per predicted character")
    print(f"{'context':>8} {'sliding window':>15} {'memory':>9} {'speed-up':>9}")
    for context in args.contexts:
        model.config.eval_mem_len = context
        with mt.no_grad():
            mems = model(ids[None, :context]).mems

            def sliding():
                for t in range(SEGMENT):
                    model(ids[None, t + 1:t + 1 + context])

            def memory():
                model(ids[None, context:context + SEGMENT], mems=mems)

            times = interleaved({"sliding": sliding, "memory": memory}, args.repeats,
                                args.budget)
        print(f"{context:8d} {median_ms(times['sliding']) / SEGMENT:15.3f} "
              f"{median_ms(times['memory']) / SEGMENT:9.3f} "
              f"{median_ratio(times['sliding'], times['memory']):8.1f}x")


def our_layers(n, backend):
    mt.manual_seed(0)
    relative = TransformerXLLayer(D, HEADS, D // HEADS, 4 * D).to(backend)
    absolute = nn.TransformerLayer(nn.MultiHeadAttention(D, HEADS, bias=False),
                                   nn.FeedForward(D, 4 * D), functools.partial(nn.LayerNorm, D),
                                   causal=True).to(backend)
    x = mt.tensor(np.random.default_rng(1).standard_normal((1, n, D)), dtype=mt.float32,
                  backend=backend)
    positions = relative_position_encoding(n, D, 0, mt.float32, backend, q_time=1)  # as the model

    def run_relative():
        relative.zero_grad()
        relative(x, None, relative_positions=positions).sum().backward()

    def run_absolute():
        absolute.zero_grad()
        absolute(x).sum().backward()

    return {"ours relative": run_relative, "ours absolute": run_absolute}


def torch_layers(torch, n):
    """The same two layers in PyTorch (post-LN, ReLU feed-forward), relative shift included."""
    tnn = torch.nn
    torch.manual_seed(0)
    d_k = D // HEADS
    qkv, out, r_net = tnn.Linear(D, 3 * D, bias=False), tnn.Linear(D, D, bias=False), \
        tnn.Linear(D, D, bias=False)
    u, v = tnn.Parameter(torch.zeros(HEADS, d_k)), tnn.Parameter(torch.zeros(HEADS, d_k))
    ff = tnn.Sequential(tnn.Linear(D, 4 * D), tnn.ReLU(), tnn.Linear(4 * D, D))
    ln1, ln2 = tnn.LayerNorm(D), tnn.LayerNorm(D)
    x = torch.randn(1, n, D)
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    inverse_frequency = 1.0 / 10000 ** (torch.arange(0.0, D, 2.0) / D)
    angles = torch.arange(n - 1, -1, -1.0)[:, None] * inverse_frequency
    positions = torch.cat([angles.sin(), angles.cos()], -1)

    def layer(relative):
        q, k, val = (t.view(1, n, HEADS, d_k).transpose(1, 2) for t in qkv(x).chunk(3, -1))
        if relative:
            r = r_net(positions).view(n, HEADS, d_k).permute(1, 2, 0)
            by_distance = (q + v[:, None]) @ r
            padded = torch.nn.functional.pad(by_distance, (1, 0))
            position_scores = padded.view(1, HEADS, n + 1, n)[:, :, 1:].reshape(1, HEADS, n, n)
            scores = ((q + u[:, None]) @ k.transpose(-1, -2) + position_scores) / math.sqrt(d_k)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(d_k)
        weights = scores.masked_fill(causal, float("-inf")).softmax(-1)
        h = ln1(x + out((weights @ val).transpose(1, 2).reshape(1, n, D)))
        return ln2(h + ff(h))

    params = [*qkv.parameters(), *out.parameters(), *r_net.parameters(), u, v,
              *ff.parameters(), *ln1.parameters(), *ln2.parameters()]

    def runner(relative):
        def run():
            for p in params:
                p.grad = None
            layer(relative).sum().backward()
        return run

    return {"torch relative": runner(True), "torch absolute": runner(False)}


def layer_section(args):
    runners = our_layers(args.n, args.backend)
    try:
        import torch
        runners.update(torch_layers(torch, args.n))
    except ImportError:
        print("(torch not importable: PyTorch's layers are left out)")
    times = interleaved(runners, args.repeats, args.budget)
    print(f"one layer, forward + backward, n = {args.n}, d = {D}, {HEADS} heads "
          f"({args.backend}): median ms")
    for name, seconds in times.items():
        print(f"  {name:15s} {median_ms(seconds):9.1f}")
    for side in ("ours", "torch"):
        if f"{side} relative" in times:
            print(f"  {side}: relative / absolute = "
                  f"{median_ratio(times[f'{side} relative'], times[f'{side} absolute']):.2f}x")
    if "torch relative" in times:
        print(f"  ours relative / torch relative = "
              f"{median_ratio(times['ours relative'], times['torch relative']):.2f}x")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backend", default="numba")
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=20.0)
    args = parser.parse_args(argv)
    mt.set_backend(args.backend)
    for threads in args.threads:
        print(pin_threads(threads))
        memory_section(args)
        layer_section(args)
        print()


if __name__ == "__main__":
    main()
