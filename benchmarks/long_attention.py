"""Long attention: time and peak memory against the sequence length n, for every efficient
attention core, next to full attention (ours and PyTorch's SDPA) in the same run.

    python benchmarks/long_attention.py [--threads 1 2] [--sizes 1024 2048 4096 8192 16384]
                                        [--repeats 3] [--budget 20] [--memory-cap 2]
                                        [--backend numba]

Each runner does forward + backward of one attention call, batch 1, ``--heads`` heads of
``--head-dim`` features, float32, runners interleaved round by round (``backends.interleaved``):
first the efficient cores, then the full ones, whose n x n allocations would otherwise slow the
fresh memory of the runner after them (measured in the comment in ``run``).
The efficient cores run on ``--backend`` (numba by default: the fused grouped-attention and
causal linear-attention kernels; numpy when Numba is missing):

* full (numpy) / full (numba): ``F.scaled_dot_product_attention(causal=True)``, the fused kernel
  (NumPy keeps the n x n probabilities; Numba recomputes them in blocks);
* banded w=W (numba): ``F.banded_attention``, W keys on the left of each query (causal;
  W = 512 by default);
* strided l=sqrt(n): ``SparseTransformerAttention`` (merged strided pattern, eq 94), causal;
* linformer k=K: ``LinformerAttention`` (headwise sharing), bidirectional (it cannot be causal);
* performer m=M: ``PerformerAttention``, causal (prefix sums in chunks of 64);
* bigbird b=64: ``BlockSparseAttention``, blocks of 64, window 3, global 2, random 3 blocks
  (BigBird-ITC's shape), causal;
* lsh m=C: ``LSHAttention``, one hashing round, chunks of C, n / C buckets (about one chunk
  per bucket, the Reformer's choice), causal;
* pytorch sdpa: ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` on the CPU,
  when torch imports (run from a throw-away venv that has it; never a dependency).

Printed: median ms per call, peak MB of NumPy allocations (tracemalloc, so PyTorch's are not
seen), and per runner the log-log slope of time and memory against n over the sizes >= 2048 it
ran. A runner whose estimated memory is above ``--memory-cap`` GB is skipped at that size. At the
largest n, each runner's speedup over full attention on the numba backend and its time per
(query, key) pair visited relative to the banded kernel's: the pairs are the scores a runner
computes (full causal: n (n + 1) / 2 per head; banded: the band; a grouped core: the slots of
its groups, counted by running it once; Linformer and Performer visit none).

The issue's table on a quiet machine (one thread setting with ``--repeats 1`` took 7 minutes
on a loaded 2-core machine; PyTorch's column needs a Python that also has torch):

    python benchmarks/long_attention.py --threads 1 2 --repeats 3 --budget 10
"""
from __future__ import annotations

import argparse
import gc
import math
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
import minitorch_nlp.functional as F  # noqa: E402
from backends import (interleaved, median_ms, mt_runner, numba_available, peak_bytes,  # noqa: E402
                      pin_threads, torch_runner)
from minitorch_nlp.attention import (BlockSparseAttention, LinformerAttention,  # noqa: E402
                                     LSHAttention, PerformerAttention,
                                     SparseTransformerAttention)
from minitorch_nlp.attention.grouped import GroupedAttention  # noqa: E402

FULL = "full (numba)"


def grouped_cores(n, args):
    """The cores that run as groups of queries and keys, by the first word of their name."""
    return {"strided": SparseTransformerAttention(max(1, round(math.sqrt(n)))),
            "bigbird": BlockSparseAttention(64, 3, (0, -1), 3, seed=0),
            "lsh": LSHAttention(max(2, 2 * (n // args.chunk // 2)), args.chunk, seed=0)}


def runners_for(n, args, torch, have_numba):
    """name -> (estimated peak bytes, a runner factory(q, k, v, g))."""
    h, d = args.heads, args.head_dim
    stride = max(1, round(math.sqrt(n)))
    cores = grouped_cores(n, args)
    strided, bigbird, lsh = cores["strided"], cores["bigbird"], cores["lsh"]
    fast = args.backend if have_numba else "numpy"
    with mt.backend(fast):                  # their projections / features live on ``fast``
        linformer = LinformerAttention(n, args.rank)
        performer = PerformerAttention(d, args.features)
    table = {
        "full (numpy)": (3 * h * n * n * 4, lambda *a: mt_runner(
            "numpy", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=True), *a)),
        "strided l=sqrt(n)": (12 * h * n * 3 * stride * 4, lambda *a: mt_runner(
            fast, lambda q, k, v: strided(q, k, v, causal=True)[0], *a)),
        f"linformer k={args.rank}": (6 * h * n * args.rank * 4, lambda *a: mt_runner(
            fast, lambda q, k, v: linformer(q, k, v)[0], *a)),
        f"performer m={args.features}": (8 * h * n * args.features * 4, lambda *a: mt_runner(
            fast, lambda q, k, v: performer(q, k, v, causal=True)[0], *a)),
        "bigbird b=64": (12 * h * n * 8 * 64 * 4, lambda *a: mt_runner(
            fast, lambda q, k, v: bigbird(q, k, v, causal=True)[0], *a)),
        f"lsh m={args.chunk}": (12 * h * n * 2 * args.chunk * 4, lambda *a: mt_runner(
            fast, lambda q, k, v: lsh(q, k, v, causal=True)[0], *a)),
    }
    if have_numba:
        table[FULL] = (8 * h * n * d * 4, lambda *a: mt_runner(
            "numba", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=True), *a))
        table[f"banded w={args.window} (numba)"] = (4 * h * n * (args.window + 1) * 4,
                                                     lambda *a: mt_runner(
            "numba", lambda q, k, v: F.banded_attention(q, k, v, window=args.window,
                                                        causal=True), *a))
    if torch is not None:
        table["pytorch sdpa"] = (3 * h * n * n * 4, lambda *a: torch_runner(
            torch, lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True), *a))
    return table


def quadratic(name):
    """Whether the runner ``name`` computes all n x n scores (full attention, ours or PyTorch's)."""
    return name.startswith("full") or name.startswith("pytorch")


def pairs_visited(name, n, args, q):
    """(query, key) scores a runner computes per head, or None where it computes none."""
    if quadratic(name):
        return n * (n + 1) / 2
    if name.startswith("banded"):
        w = args.window
        return (w + 1) * n - w * (w + 1) / 2
    core = grouped_cores(n, args).get(name.split()[0])
    if core is None:
        return None
    slots = []
    apply = GroupedAttention.apply

    def counting(*inputs, **static):
        out = apply(*inputs, **static)
        slots.append(math.prod(out.shape[:-1]) * static["key_index"].shape[-1])
        return out

    fast = args.backend if numba_available() else "numpy"
    with mt.backend(fast), mt.no_grad(), mock.patch.object(GroupedAttention, "apply", counting):
        x = mt.tensor(q)
        core(x, x, x, causal=True)
    return sum(slots) / q.shape[1]


def slope(points):
    """Least-squares slope of log(value) against log(n) over ``points`` [(n, value)]."""
    if len(points) < 2:
        return None
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def run(args, torch, have_numba):
    rng = np.random.default_rng(0)
    times, memory, skipped = {}, {}, {}
    names = None
    for n in args.sizes:
        q, k, v, g = (rng.standard_normal((1, args.heads, n, args.head_dim)).astype(np.float32)
                      for _ in range(4))
        table = runners_for(n, args, torch, have_numba)
        names = names or list(table)
        runners = {}
        for name, (estimate, factory) in table.items():
            if estimate > args.memory_cap * 2**30:
                skipped[(name, n)] = f"~{estimate / 2**30:.0f}GB"
            else:
                runners[name] = factory([q, k, v], g, [True, True, True])
        # the n x n runners are timed after the others: their allocations of up to gigabytes,
        # freed, make the next runner's fresh memory cost more (banded at 16k, one thread: 366 ms
        # alone, 681-749 ms right after full attention, its system time 44 -> 236 ms)
        for group in (False, True):
            timed = {name: fn for name, fn in runners.items() if quadratic(name) == group}
            for name, seconds in interleaved(timed, args.repeats, args.budget).items():
                times[(name, n)] = median_ms(seconds)
        for name, fn in runners.items():
            if not name.startswith("pytorch"):
                memory[(name, n)] = peak_bytes(fn) / 2**20
        del runners
        gc.collect()
    return names, times, memory, skipped


def print_summary(names, n, times, args, q):
    """At ``n``: speedup over full attention (numba) and time per pair relative to banded."""
    banded = next((name for name in names if name.startswith("banded")), None)
    if (FULL, n) not in times or banded is None or (banded, n) not in times:
        print(f"\n(no summary at n = {n}: full (numba) or banded did not run)")
        return
    per_pair_banded = times[(banded, n)] / pairs_visited(banded, n, args, q)
    print(f"\nat n = {n}: speedup over {FULL}, and time per (query, key) pair visited "
          f"relative to {banded}")
    for name in names:
        if (name, n) not in times:
            continue
        pairs = pairs_visited(name, n, args, q)
        relative = ("-" if pairs is None
                    else f"{times[(name, n)] / pairs / per_pair_banded:.2f}x")
        print(f"  {name:<24} {times[(FULL, n)] / times[(name, n)]:>8.1f}x   per pair {relative}"
              + (f"   ({pairs / n:.0f} keys per query)" if pairs else ""))


def print_table(title, names, sizes, values, skipped, fmt):
    width = max(len(name) for name in names) + 2
    print(f"\n{title}")
    print(f"{'n':>7}" + "".join(f"{name:>{width}}" for name in names))
    for n in sizes:
        cells = [fmt.format(values[(name, n)]) if (name, n) in values
                 else skipped.get((name, n), "-") for name in names]
        print(f"{n:>7}" + "".join(f"{cell:>{width}}" for cell in cells))
    slopes = [slope([(n, values[(name, n)]) for n in sizes if n >= 2048 and (name, n) in values])
              for name in names]
    print(f"{'slope':>7}" + "".join(f"{'-' if s is None else f'{s:.2f}':>{width}}"
                                     for s in slopes) + "   (log-log, over n >= 2048)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--rank", type=int, default=256)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=20.0)
    parser.add_argument("--memory-cap", type=float, default=2.0)
    parser.add_argument("--backend", default="numba", choices=["numba", "numpy"],
                        help="the backend of the efficient cores")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
        print("(PyTorch not installed: its column is skipped; run from a venv with torch)")
    have_numba = numba_available()
    for threads in args.threads:
        print(f"\n==== {pin_threads(threads)}; batch 1, heads {args.heads}, head_dim "
              f"{args.head_dim}, float32, forward + backward")
        names, times, memory, skipped = run(args, torch, have_numba)
        print_table("median ms per call", names, args.sizes, times, skipped, "{:.1f}")
        traced = [name for name in names if not name.startswith("pytorch")]
        print_table("peak MB of NumPy allocations (tracemalloc)", traced, args.sizes, memory,
                    skipped, "{:.1f}")
        largest = max(args.sizes)
        print_summary(names, largest, times, args, np.random.default_rng(0).standard_normal(
            (1, args.heads, largest, args.head_dim)).astype(np.float32))


if __name__ == "__main__":
    main()
