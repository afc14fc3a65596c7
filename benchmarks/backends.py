"""The backends side by side: numpy and numba backends, PyTorch CPU eager and HIPS autograd.

    python benchmarks/backends.py [--quick] [--only gpt|kernels|banded] [--threads 2 ...]
                                  [--repeats 15] [--budget 20] [--profile] [--json PATH]

Three sections, each measured in one process with the runners interleaved (every round runs
each runner once, in a rotating order, so that a noisy machine slows them alike), reported as the
median time per runner and the median of the per-round ratios:

* kernels: softmax, layer norm, cross-entropy and scaled dot-product attention (without and with
  the causal mask), forward + backward, at batch 8, heads 4, n = 128 ... 1024, head_dim 64 (layer
  norm over 4 * 64 = 256 features, cross-entropy over 1024 classes for every one of the 8 * n
  positions); attention also through its composite of primitives (``Attention.composite`` on the
  numpy backend: matmul, masked_fill, softmax, matmul, recorded by the engine);
* banded: sliding-window attention (window 256 on each side, batch 1, heads 4, head_dim 64) at
  n = 1k ... 16k, forward + backward time and peak memory (NumPy allocations traced with
  ``tracemalloc``, in a separate untimed call), next to full attention where it fits;
* gpt: one AdamW training step of a small GPT (vocab 65, d_model 128, 4 heads, 4 layers,
  context 128, batch 16; ``benchmarks/gpt.py``) on each runner, from the same weights, each
  timed step right after an untimed one of the same runner, as in a training loop (``interleaved``'s
  ``lead_in``: otherwise the step after PyTorch's loses a core to its spinning workers); with
  ``--profile``, where the time of a step goes on the numpy and numba backends. The
  ``library/numba`` runner is the library's own ``models.gpt.GPT2LMHeadModel`` at the same sizes
  (what ``minitorch-nlp demo`` trains), from its own initialisation.

Targets (issue "Backends"): numba GPT step <= 1.0x PyTorch's, numpy's <= 1.2x, both >= 3.5x faster
than HIPS autograd; fused attention forward + backward at n = 512 >= 1.5x faster than the numpy
composite; banded attention memory growing linearly in n. PyTorch and HIPS autograd are optional:
missing ones are skipped with a message (``pip install torch==2.13.0 autograd``).

Threads: ``--threads N`` is given to OpenBLAS (NumPy's BLAS, set through its C API), to Numba and
to PyTorch; with several counts (``--threads 1 2``) the sections run at each in turn. On a small,
busy machine OpenBLAS threads that wait for each other turn every small batched matmul into a
scheduling contest (see the printed warning); compare with ``--threads 1``.

``--json PATH`` writes, for ``benchmarks/results/``, the GPT step of the numba and numpy backends
against PyTorch's and the numba backend's causal attention against PyTorch's at every n measured,
at each thread count.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
import minitorch_nlp.functional as F  # noqa: E402
from minitorch_nlp.autograd.ops_fused import Attention  # noqa: E402

BATCH, HEADS, HEAD_DIM = 8, 4, 64
FEATURES = HEADS * HEAD_DIM  # layer norm width
CLASSES = 1024               # cross-entropy classes
BAND_WINDOW, BAND_HEADS = 256, 4
DTYPE = np.float32


# ---- timing ------------------------------------------------------------------------------------
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def _timed(fn):
    start = clock()
    fn()
    return clock() - start


def interleaved(runners, repeats, budget, warmup=1, lead_in=False):
    """name -> list of seconds: ``warmup`` untimed rounds, then rounds of every runner once (the
    first runner rotates), as many as fit in ``budget`` seconds, between 3 and ``repeats``.

    With ``lead_in``, each timed call comes right after an untimed call of the same runner, so
    that it runs as in a loop of its own calls (a training loop), not in the wake of the runner
    before it: PyTorch's OpenMP workers spin for milliseconds after its last operation and take a
    core from whatever runs next (at two threads the numpy GPT step took 113 ms after its own
    step and 118-121 ms right after PyTorch's, and 114 ms there with ``OMP_WAIT_POLICY=passive``,
    which however slows PyTorch's own step from 95 to 116 ms)."""
    names = list(runners)
    calls = 2 if lead_in else 1
    round_time = 0.0
    for _ in range(warmup):
        round_time = calls * sum(_timed(runners[name]) for name in names)
    rounds = max(3, min(repeats, int(budget / max(round_time, 1e-9))))
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if lead_in:
                runners[name]()
            times[name].append(_timed(runners[name]))
    return times


def median_ms(seconds):
    return statistics.median(seconds) * 1e3


def median_ratio(a, b):
    """Median over rounds of a[i] / b[i]."""
    return statistics.median(x / y for x, y in zip(a, b))


# ---- threads -------------------------------------------------------------------------------------
def pin_threads(threads):
    """Give ``threads`` threads to OpenBLAS, Numba and PyTorch; returns a line saying so."""
    done = mt.set_num_threads(threads)
    try:
        import torch

        torch.set_num_threads(threads)
        done.append("PyTorch")
    except ImportError:
        pass
    return f"threads: {threads} for " + ", ".join(done)


def optional_peers():
    """{'torch': module or None, 'autograd': module or None}, printing what is missing."""
    peers = {}
    try:
        import torch

        peers["torch"] = torch
    except ImportError:
        print("(PyTorch not installed, its columns are skipped: pip install torch==2.13.0)")
        peers["torch"] = None
    try:
        import autograd

        peers["autograd"] = autograd
    except ImportError:
        print("(HIPS autograd not installed, its columns are skipped: pip install autograd)")
        peers["autograd"] = None
    return peers


def numba_available():
    try:
        mt.get_backend("numba")
        return True
    except Exception as error:  # noqa: BLE001 - any failure to start means: skip the column
        print(f"(numba backend unavailable, its columns are skipped: {error})")
        return False


# ---- runners: one forward + backward of an operation ---------------------------------------------
def mt_runner(backend, op, arrays, cotangent, needs_grad):
    """forward + backward of ``op(*tensors)`` on a minitorch_nlp backend."""
    with mt.backend(backend):
        tensors = [mt.tensor(a, requires_grad=need) for a, need in zip(arrays, needs_grad)]
        g = None if cotangent is None else mt.tensor(cotangent)
    leaves = [t for t in tensors if t.requires_grad]

    def run():
        out = op(*tensors)
        out.backward(g)
        for t in leaves:
            t.grad = None

    return run


def torch_runner(torch, op, arrays, cotangent, needs_grad):
    tensors = [torch.from_numpy(a.copy()).requires_grad_(need)
               for a, need in zip(arrays, needs_grad)]
    g = None if cotangent is None else torch.from_numpy(cotangent)
    leaves = [t for t in tensors if t.requires_grad]

    def run():
        out = op(*tensors)
        out.backward(g)
        for t in leaves:
            t.grad = None

    return run


def autograd_runner(op, arrays, cotangent, needs_grad):
    """forward + vector-Jacobian product of every differentiable input with HIPS autograd."""
    from autograd import make_vjp

    wanted = [i for i, need in enumerate(needs_grad) if need]

    def of_wanted(*xs):
        full = list(arrays)
        for i, x in zip(wanted, xs):
            full[i] = x
        return op(*full)

    g = np.ones((), dtype=DTYPE) if cotangent is None else cotangent

    def run():
        vjp, _ = make_vjp(lambda xs: of_wanted(*xs))([arrays[i] for i in wanted])
        vjp(g)

    return run


# ---- the operations, per framework ---------------------------------------------------------------
def _anp():
    import autograd.numpy as anp

    return anp


def _hips_softmax(x):
    anp = _anp()
    e = anp.exp(x - anp.max(x, axis=-1, keepdims=True))
    return e / anp.sum(e, axis=-1, keepdims=True)


def _hips_layer_norm(x, w, b):
    anp = _anp()
    centred = x - anp.mean(x, axis=-1, keepdims=True)
    return centred / anp.sqrt(anp.mean(centred * centred, axis=-1, keepdims=True) + 1e-5) * w + b


def _hips_cross_entropy(logits, target):
    anp = _anp()
    shifted = logits - anp.max(logits, axis=-1, keepdims=True)
    log_probs = shifted - anp.log(anp.sum(anp.exp(shifted), axis=-1, keepdims=True))
    return -anp.mean(log_probs[np.arange(target.size), target])


def _hips_attention(q, k, v, causal=False):
    anp = _anp()
    scores = anp.matmul(q, anp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[-2]
        scores = anp.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, scores)
    return anp.matmul(_hips_softmax(scores), v)


KERNELS = ("softmax", "layer norm", "cross-entropy", "attention", "causal attention")


def kernel_cases(n, rng):
    """For each operation at length n: (name, title, arrays, cotangent or None, which arrays are
    differentiated, {"mt" / "composite" / "hips": op on tensors or arrays, "torch": op maker})."""
    def normal(*shape):
        return rng.standard_normal(shape).astype(DTYPE)

    scale = 1.0 / math.sqrt(HEAD_DIM)
    scores = normal(BATCH, HEADS, n, n)
    x_ln, w_ln, b_ln = normal(BATCH, n, FEATURES), normal(FEATURES), normal(FEATURES)
    logits, target = normal(BATCH * n, CLASSES), rng.integers(0, CLASSES, BATCH * n)
    q, k, v = (normal(BATCH, HEADS, n, HEAD_DIM) for _ in range(3))

    def torch_op(name):
        import torch
        import torch.nn.functional as TF

        return {
            "softmax": lambda x: torch.softmax(x, -1),
            "layer norm": lambda x, w, b: TF.layer_norm(x, (FEATURES,), w, b),
            "cross-entropy": lambda z, t: TF.cross_entropy(z, t),
            "attention": lambda q, k, v: TF.scaled_dot_product_attention(q, k, v),
            "causal attention": lambda q, k, v: TF.scaled_dot_product_attention(q, k, v,
                                                                                is_causal=True),
        }[name]

    def attention(causal):
        return {"mt": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=causal),
                "composite": lambda q, k, v: Attention.composite(q, k, v, None, None,
                                                                 scale=scale, causal=causal),
                "hips": lambda q, k, v: _hips_attention(q, k, v, causal), "torch": torch_op}

    qkv_shape = f"q k v ({BATCH}, {HEADS}, n, {HEAD_DIM})"
    return [
        ("softmax", f"softmax over the last axis of ({BATCH}, {HEADS}, n, n)",
         [scores], normal(*scores.shape), [True],
         {"mt": lambda x: F.softmax(x, -1), "hips": _hips_softmax, "torch": torch_op}),
        ("layer norm", f"layer norm of ({BATCH}, n, {FEATURES}) with weight and bias",
         [x_ln, w_ln, b_ln], normal(*x_ln.shape), [True, True, True],
         {"mt": lambda x, w, b: F.layer_norm(x, FEATURES, w, b), "hips": _hips_layer_norm,
          "torch": torch_op}),
        ("cross-entropy", f"cross-entropy of ({BATCH} * n, {CLASSES}) logits, mean",
         [logits, target], None, [True, False],
         {"mt": lambda z, t: F.cross_entropy(z, t), "hips": _hips_cross_entropy,
          "torch": torch_op}),
        ("attention", f"attention, {qkv_shape}", [q, k, v], normal(*q.shape), [True] * 3,
         attention(False)),
        ("causal attention", f"causal attention, {qkv_shape}", [q, k, v], normal(*q.shape),
         [True] * 3, attention(True)),
    ]


def kernels_section(args, peers, have_numba):
    sizes = (128, 256) if args.quick else (128, 256, 512, 1024)
    rng = np.random.default_rng(0)
    results = {}
    for n in sizes:
        for key, title, arrays, cot, needs, ops in kernel_cases(n, rng):
            runners = {"numpy": mt_runner("numpy", ops["mt"], arrays, cot, needs)}
            if "composite" in ops:
                runners["numpy composite"] = mt_runner("numpy", ops["composite"], arrays, cot,
                                                       needs)
            if have_numba:
                runners["numba"] = mt_runner("numba", ops["mt"], arrays, cot, needs)
            if peers["torch"] is not None:
                runners["pytorch"] = torch_runner(peers["torch"], ops["torch"](key), arrays, cot,
                                                  needs)
            if peers["autograd"] is not None:
                runners["hips-autograd"] = autograd_runner(ops["hips"], arrays, cot, needs)
            results[(key, n)] = (title, interleaved(runners, args.repeats, args.budget))
            del runners
            gc.collect()
    for key in KERNELS:
        rows = [(n, results[(key, n)][1]) for n in sizes]
        print_kernel_table(results[(key, sizes[0])][0], rows)
    for key in ("attention", "causal attention"):
        times = results.get((key, 512), (None, {}))[1]
        if "numba" in times:
            ratio = median_ratio(times["numpy composite"], times["numba"])
            print(f"target {key} at n = 512, numpy composite / numba >= 1.5: {ratio:.2f}  "
                  f"{'met' if ratio >= 1.5 else 'MISSED'}")
    return [against_pytorch(f"causal attention forward + backward, q k v ({BATCH}, {HEADS}, {n}, "
                            f"{HEAD_DIM}), numba backend", times, "numba")
            for n in sizes for times in [results[("causal attention", n)][1]]
            if "numba" in times and "pytorch" in times]


def against_pytorch(path, times, ours):
    """The figure of runner ``ours`` against ``times["pytorch"]`` (the thread count is added by
    ``main``)."""
    return {"path": path, "against": "PyTorch eager",
            "ratio": median_ratio(times[ours], times["pytorch"]), "rounds": len(times[ours]),
            "median_ms": {"ours": median_ms(times[ours]), "PyTorch": median_ms(times["pytorch"])}}


def print_kernel_table(title, rows):
    names = list(rows[0][1])
    print(f"\n{title}: forward + backward, median ms")
    header = f"{'n':>6}" + "".join(f"{name:>17}" for name in names)
    ratios = []
    if "numba" in names:
        ratios.append(("numpy/numba", "numpy", "numba"))
        if "numpy composite" in names:
            ratios.append(("composite/numba", "numpy composite", "numba"))
        if "pytorch" in names:
            ratios.append(("numba/pytorch", "numba", "pytorch"))
    if "pytorch" in names:
        ratios.append(("numpy/pytorch", "numpy", "pytorch"))
    if "hips-autograd" in names and "numba" in names:
        ratios.append(("hips/numba", "hips-autograd", "numba"))
    header += "".join(f"{label:>17}" for label, _, _ in ratios)
    print(header)
    for n, times in rows:
        line = f"{n:>6}" + "".join(f"{median_ms(times[name]):>17.2f}" for name in names)
        line += "".join(f"{median_ratio(times[a], times[b]):>16.2f}x" for _, a, b in ratios)
        print(line)
    print("ratio a/b = median over rounds of (a's time / b's time): above 1 means b is faster.")


# ---- banded attention: time and peak memory ------------------------------------------------------
def peak_bytes(fn):
    """Peak of NumPy allocations (bytes above what was live before) during one call of ``fn``."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def banded_section(args, peers, have_numba):
    sizes = (1024, 2048) if args.quick else (1024, 2048, 4096, 8192, 16384)
    w, d, h, itemsize = BAND_WINDOW, HEAD_DIM, BAND_HEADS, np.dtype(DTYPE).itemsize
    band = 2 * w + 1
    estimates = {  # (peak bytes, flops) of forward + backward, to skip what does not fit
        # both compute the band in blocks of 64 queries (``BandBlocks``): 64 + 2w keys each
        "numpy banded": lambda n: (4 * h * n * (band + 63) * itemsize,
                                   6 * h * n * (band + 63) * d),
        "numba banded": lambda n: (4 * h * n * (band + 63) * itemsize,
                                   6 * h * n * (band + 63) * d),
        "numpy full": lambda n: (3 * h * n * n * itemsize, 6 * h * n * n * d),
        "numba full": lambda n: (8 * h * n * d * itemsize, 8 * h * n * n * d),
        "pytorch band mask": lambda n: (4 * h * n * n * itemsize, 6 * h * n * n * d),
    }
    names = [name for name in estimates
             if (have_numba or not name.startswith("numba"))
             and (peers["torch"] is not None or not name.startswith("pytorch"))]
    traced = [name for name in names if not name.startswith("pytorch")]
    rng = np.random.default_rng(1)
    time_rows, memory_rows = [], []
    for n in sizes:
        q, k, v, g = (rng.standard_normal((1, h, n, d)).astype(DTYPE) for _ in range(4))
        runners, skipped = {}, {}
        for name in names:
            memory, flops = estimates[name](n)
            if memory > args.memory_cap * 2**30:
                skipped[name] = f"~{memory / 2**30:.1f} GB"
            elif flops > args.flop_cap * 1e9:
                skipped[name] = "too slow"
            else:
                runners[name] = banded_runner(name, q, k, v, g, w, peers)
        times = interleaved(runners, args.repeats, args.budget) if runners else {}
        time_rows.append((n, {name: median_ms(t) for name, t in times.items()}, skipped))
        memory_rows.append((n, {name: peak_bytes(fn) / 2**20 for name, fn in runners.items()
                                if name in traced}, skipped))
        del runners
        gc.collect()
    print(f"\nbanded attention: window {w} on each side ({band} keys per query), batch 1, heads "
          f"{h}, head_dim {d}, float32, forward + backward; next to full attention")
    print_band_table("median ms", names, time_rows, "{:.1f}")
    print("peak MB of NumPy allocations during one call (tracemalloc; inputs excluded); "
          "'n x n MB' is one float32 score matrix per head, what full attention stores")
    print_band_table("peak MB", traced, memory_rows, "{:.1f}",
                     extra=("n x n MB", lambda n: h * n * n * itemsize / 2**20))
    growth = []
    for name in traced:
        points = [(n, row[name]) for n, row, _ in memory_rows if name in row]
        if len(points) >= 2:
            (n0, m0), (n1, m1) = points[0], points[-1]
            growth.append(f"{name} x{m1 / m0:.1f} for n x{n1 // n0}")
    if growth:
        print("memory growth from the smallest to the largest n each runner measured: "
              + ", ".join(growth))
    print("'~X GB': estimated to need more than --memory-cap, not run; 'too slow': estimated "
          "above --flop-cap. PyTorch's allocations are not visible to tracemalloc (it builds "
          "an n x n mask and scores).")


def print_band_table(what, names, rows, fmt, extra=None):
    width = max(len(name) for name in names) + 3
    header = f"{'n':>6}" + (f"{extra[0]:>12}" if extra else "")
    print(header + "".join(f"{name:>{width}}" for name in names) + f"   ({what})")
    for n, values, skipped in rows:
        line = f"{n:>6}" + (f"{extra[1](n):>12.0f}" if extra else "")
        for name in names:
            cell = fmt.format(values[name]) if name in values else skipped.get(name, "-")
            line += f"{cell:>{width}}"
        print(line)


def banded_runner(name, q, k, v, g, window, peers):
    arrays, needs = [q, k, v], [True, True, True]
    if name.endswith("banded"):
        def op(q, k, v, window=window):
            return F.banded_attention(q, k, v, window=window)
        return mt_runner(name.split()[0], op, arrays, g, needs)
    if name.endswith("full"):
        return mt_runner(name.split()[0], F.scaled_dot_product_attention, arrays, g, needs)
    torch = peers["torch"]
    n = q.shape[2]
    offsets = np.arange(n)[None, :] - np.arange(n)[:, None]
    mask = torch.from_numpy(np.abs(offsets) <= window)
    return torch_runner(torch, lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask), arrays, g, needs)


# ---- the GPT training step -----------------------------------------------------------------------
def gpt_section(args, peers, have_numba):
    from benchmarks import gpt as G
    from minitorch_nlp import optim

    config = G.GPTConfig()
    batch = 4 if args.quick else 16
    rng = np.random.default_rng(2)
    x = rng.integers(0, config.vocab_size, (batch, config.block_size))
    y = rng.integers(0, config.vocab_size, (batch, config.block_size))
    mt.manual_seed(0)
    reference = G.GPT(config)
    weights = G.weights_of(reference)
    print(f"\nGPT training step (AdamW): vocab {config.vocab_size}, d_model {config.n_embd}, "
          f"{config.n_head} heads, {config.n_layer} layers, context {config.block_size}, batch "
          f"{batch}, {sum(w.size for w in weights.values())} parameters, float32; GELU "
          f"{config.approximate!r} ({'bias_gelu' if config.fused_gelu else 'linear + gelu'}), "
          f"{'tied' if config.tied else 'untied'} head")

    def ours(backend):
        with mt.backend(backend):
            model = G.GPT(config)
            inputs, targets = mt.tensor(x), mt.tensor(y)
        model.load_state_dict(weights)
        opt = optim.AdamW(model.parameters(), lr=1e-3)
        return lambda: G.train_step(model, opt, inputs, targets)

    def library(backend):
        """The library's own GPT-2 (``models.gpt``: separate q/k/v projections, labels shifted
        inside) at the same sizes, from its own initialisation."""
        from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig

        with mt.backend(backend):
            mt.manual_seed(0)
            model = GPT2LMHeadModel(GPTConfig(
                vocab_size=config.vocab_size, n_positions=config.block_size,
                n_embd=config.n_embd, n_layer=config.n_layer, n_head=config.n_head,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                eos_token_id=None))
            inputs = mt.tensor(x)
        opt = optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            loss = model(inputs, labels=inputs).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.item()
        return step

    steps = {"numpy": ours("numpy")}
    if have_numba:
        steps["numba"] = ours("numba")
        steps["library/numba"] = library("numba")
    torch = peers["torch"]
    if torch is not None:
        model = G.torch_gpt(config, weights)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        steps["pytorch"] = lambda: G.torch_train_step(model, opt, tx, ty)
    if peers["autograd"] is not None:
        from autograd import value_and_grad

        params = {name: w.copy() for name, w in weights.items()}
        loss_and_grad = value_and_grad(G.autograd_loss(config))
        hips_opt = G.NumpyAdamW(params, lr=1e-3)
        steps["hips-autograd"] = lambda: G.autograd_train_step(loss_and_grad, hips_opt, params,
                                                               x, y)

    losses = {name: step() for name, step in steps.items()}  # step 0 from the same weights
    print("loss at step 0: " + ", ".join(f"{name} {loss:.6f}" for name, loss in losses.items()))
    times = interleaved(steps, args.repeats, args.budget * 4, lead_in=True)
    print(f"{'runner':<15}{'step ms':>10}{'/ pytorch':>11}{'hips /':>9}   (medians of "
          f"{len(next(iter(times.values())))} interleaved rounds, each timed step right after "
          "an untimed one of its own runner)")
    for name, t in times.items():
        vs_torch = (f"{median_ratio(t, times['pytorch']):>10.2f}x" if "pytorch" in times
                    else f"{'-':>11}")
        vs_hips = (f"{median_ratio(times['hips-autograd'], t):>8.2f}x" if "hips-autograd" in times
                   else f"{'-':>9}")
        print(f"{name:<15}{median_ms(t):>10.1f}{vs_torch}{vs_hips}")
    targets = []
    if "pytorch" in times:
        targets += [("numba", "pytorch", 1.0, "<="), ("numpy", "pytorch", 1.2, "<=")]
    if "hips-autograd" in times:
        targets += [("hips-autograd", "numba", 3.5, ">="), ("hips-autograd", "numpy", 3.5, ">=")]
    for a, b, bound, sense in targets:
        if a in times and b in times:
            ratio = median_ratio(times[a], times[b])
            met = ratio <= bound if sense == "<=" else ratio >= bound
            print(f"target {a}/{b} {sense} {bound}: {ratio:.2f}  {'met' if met else 'MISSED'}")
    if args.profile:
        for backend in steps:
            if backend in ("numpy", "numba"):
                profile_step(backend, ours(backend), times[backend])
    measured = (f"GPT training step (vocab {config.vocab_size}, d {config.n_embd}, "
                f"{config.n_layer} layers, context {config.block_size}, batch {batch}, AdamW)")
    return [against_pytorch(f"{measured}, {backend} backend", times, backend)
            for backend in ("numba", "numpy") if backend in times and "pytorch" in times]


# ---- where the time of a step goes ---------------------------------------------------------------
_BACKEND_FILES = ("numpy_backend.py", "numba_backend.py", "numba_kernels.py")
_KERNEL_WORDS = (("attention", "attention (its matmuls, masking, kernels)"),
                 ("softmax", "softmax"), ("layer_norm", "layer norm"), ("gelu", "GELU"),
                 ("cross_entropy", "cross-entropy"), ("scatter_add", "embedding scatter-add"))


def _category(func):
    """The category of a profiled function's own time, or None to inherit its callers'."""
    filename, _, name = func
    base = os.path.basename(filename)
    if base in _BACKEND_FILES:
        for word, category in _KERNEL_WORDS:
            if word in name:
                return category
        return None
    if "optim" + os.sep in filename:
        return "optimizer (AdamW)"
    if base == "ops_linalg.py" and name == "forward":
        return "matmul (linear layers, fwd + bwd)"
    if base == "ops_elementwise.py" and name == "forward":
        return "elementwise (residual adds ...)"
    if base == "ops_shape.py" and name in ("forward", "index_add_into_zeros"):
        return "shape ops (split / reshape copies, index)"
    if base == "engine.py" and name.startswith("_accumulate"):
        return "gradient accumulation (engine)"
    return None


def breakdown(stats):
    """category -> seconds: each function's own time goes to its category, or, for helpers
    (NumPy calls, ``_run`` ...), to its callers' categories in proportion to the time each call
    edge took; what reaches no category is engine and Python overhead."""
    overhead = "engine / Python overhead"
    shares = {}

    def share_of(func, active):
        if func in shares:
            return shares[func]
        own = _category(func)
        if own is not None:
            return {own: 1.0}
        callers = stats[func][4] if func in stats else {}
        callers = {c: e for c, e in callers.items() if c not in active}
        if not callers:
            return {overhead: 1.0}
        weights = {c: (e[2] if e[2] > 0 else 0.0) for c, e in callers.items()}
        total = sum(weights.values())
        if total == 0:
            weights = {c: float(e[1]) for c, e in callers.items()}
            total = sum(weights.values())
        mixed = {}
        for caller, weight in weights.items():
            for category, part in share_of(caller, active | {func}).items():
                mixed[category] = mixed.get(category, 0.0) + part * weight / total
        shares[func] = mixed
        return mixed

    result = {}
    for func, (_, _, own_time, _, _) in stats.items():
        for category, part in share_of(func, frozenset()).items():
            result[category] = result.get(category, 0.0) + own_time * part
    return result


def profile_step(backend, step, measured):
    import cProfile
    import pstats

    steps = 5
    for _ in range(2):
        step()
    profiler = cProfile.Profile(clock)
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    parts = breakdown(stats)
    total = sum(parts.values())
    print(f"\nprofile of the {backend} backend's step (cProfile, {steps} steps, "
          f"{clock.__name__}; {total / steps * 1e3:.0f} ms per step under the profiler, "
          f"{median_ms(measured):.0f} ms without):")
    for category, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {category:<44}{seconds / steps * 1e3:>8.1f} ms{100 * seconds / total:>7.1f}%")
    print("  (cProfile charges every Python call; what the profiled step takes beyond the "
          "measured one lands mostly in the overhead row)")


# ---- main ----------------------------------------------------------------------------------------
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (smoke run)")
    parser.add_argument("--only", choices=("gpt", "kernels", "banded"))
    parser.add_argument("--threads", type=int, nargs="+",
                        default=[int(os.environ.get("OMP_NUM_THREADS", 2))],
                        help="thread counts, each run in turn")
    parser.add_argument("--repeats", type=int, default=15, help="most rounds per measurement")
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds of rounds per measurement (at least 3 rounds)")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                        help="wall time, or this process's CPU time (all its threads): with "
                             "--threads 1 on a shared machine, CPU time leaves out the time other "
                             "processes hold the CPU")
    parser.add_argument("--profile", action="store_true", help="profile the GPT step")
    parser.add_argument("--memory-cap", type=float, default=3.0,
                        help="GiB: banded-section runners estimated to need more are skipped")
    parser.add_argument("--flop-cap", type=float, default=60.0,
                        help="GFLOP: banded-section runners estimated to need more are skipped")
    parser.add_argument("--json", type=Path,
                        help="write the GPT step and causal attention figures to this file")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    if args.quick:
        args.repeats, args.budget = min(args.repeats, 3), min(args.budget, 1.0)

    peers = optional_peers()
    have_numba = numba_available()
    if args.json and (peers["torch"] is None or not have_numba or args.only == "banded"):
        parser.error("--json: its figures are the numba and numpy backends against PyTorch in the "
                     "gpt and kernels sections, which need PyTorch and the numba backend")
    sections = {"kernels": kernels_section, "banded": banded_section, "gpt": gpt_section}
    figures = []
    # CPU time is not what the other scripts' figures measure, so those figures say so
    measured_in = {} if args.clock == "wall" else {"clock": args.clock}
    for threads in args.threads:
        print(pin_threads(threads))
        if threads > 1 and (os.cpu_count() or 1) <= threads:
            print(f"(this machine has {os.cpu_count()} CPUs: with {threads} BLAS threads per "
                  "process and other processes running, OpenBLAS threads that wait for each other "
                  "slow small batched matmuls down; compare with --threads 1)")
        print(f"clock: {args.clock}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
              "CPUs; all runners are interleaved and reported as medians (the machine may be "
              "shared)")
        for name, section in sections.items():
            if args.only in (None, name):
                figures += [dict(figure, threads=threads, **measured_in)
                            for figure in section(args, peers, have_numba) or []]
    if args.json:
        from results import write_results  # benchmarks/results.py, beside this script

        write_results(args.json, figures, sys.argv)


if __name__ == "__main__":
    main()
