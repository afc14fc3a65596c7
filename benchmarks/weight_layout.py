"""Column-major weights (``nn.column_major_``) against the row-major layout they replaced, in one
process: the one-row products of GPT-2 small's decoding, one cached decoding step, and a whole
greedy generation (GPT-2-small-shaped model, batch 1, 8-token prompt, 64 new tokens, numba
backend), and the training step of ``benchmarks/backends.py --only gpt`` (vocab 65, d 128,
4 layers, context 128, batch 16, AdamW) on the numpy and numba backends.

    python benchmarks/weight_layout.py [--threads 1 2] [--rounds 9]
                                       [--only products|generation|training]

The two models hold the same values; the "row-major" one is a copy whose parameters were made
row-major (``np.ascontiguousarray``), as every weight was before. Each round runs every
measurement on both, in a rotating order. At one thread the times are CPU time
(``time.process_time``), the time the work took even when other processes share the machine; at
more threads they are wall time, since OpenBLAS's waiting threads spin and CPU time counts the
spinning (run those on a quiet machine). Printed:
the median times and the median of the per-round ratios column-major / row-major (below 1: the
column-major layout is faster). Plain NumPy is the peer of the products (the same ``x @ W.T``,
both layouts). Generated tokens are checked identical before timing.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
import gpt as G  # noqa: E402
from backends import pin_threads  # noqa: E402
from minitorch_nlp import optim  # noqa: E402
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig  # noqa: E402

NEW_TOKENS = 64
# (in, out) of the products x @ W.T one decoding step of GPT-2 small runs
PRODUCTS = {"LM head 768 -> 50257": (768, 50257), "MLP up 768 -> 3072": (768, 3072),
            "MLP down 3072 -> 768": (3072, 768), "attention 768 -> 768": (768, 768)}


def seconds(fn, clock):
    start = clock()
    fn()
    return clock() - start


def product_runners():
    rng = np.random.default_rng(0)
    runners = {}
    for name, (n_in, n_out) in PRODUCTS.items():
        x = rng.standard_normal((1, n_in)).astype(np.float32)
        rows = rng.standard_normal((n_out, n_in)).astype(np.float32)
        columns = np.asfortranarray(rows)
        runners[name] = (lambda x=x, w=rows: x @ w.T, lambda x=x, w=columns: x @ w.T)
    return runners


def model_runners():
    with mt.backend("numba"):
        mt.manual_seed(0)
        column_major = GPT2LMHeadModel(GPTConfig()).eval()
    row_major = made_row_major(column_major)
    prompt = np.random.default_rng(0).integers(0, column_major.config.vocab_size, (1, 8))

    def generation(model):
        def run():
            with mt.no_grad():
                return np.asarray(model.generate(prompt, max_new_tokens=NEW_TOKENS))
        return run

    def decode_step(model):
        cache = model.transformer.new_cache()
        with mt.no_grad():
            model(prompt, cache=cache)
        token = prompt[:, -1:]

        def run():
            with mt.no_grad():
                model(token, cache=cache)   # the cache grows by one position per call, alike
        return run

    if not np.array_equal(generation(row_major)(), generation(column_major)()):
        raise SystemExit("the two layouts generate different tokens")
    return {"one cached decoding step": (decode_step(row_major), decode_step(column_major)),
            f"greedy generation, {NEW_TOKENS} new tokens":
                (generation(row_major), generation(column_major))}


def made_row_major(model):
    """A copy of ``model`` with every parameter row-major, as all were before."""
    twin = copy.deepcopy(model)
    for param in twin.parameters():
        param.data = np.ascontiguousarray(param.data)
    return twin


def training_runners():
    config = G.GPTConfig()
    rng = np.random.default_rng(2)
    x, y = (rng.integers(0, config.vocab_size, (16, config.block_size)) for _ in range(2))
    runners = {}
    for backend in ("numpy", "numba"):
        with mt.backend(backend):
            mt.manual_seed(0)
            column_major = G.GPT(config)
            inputs, targets = mt.tensor(x), mt.tensor(y)
        pair = []
        for model in (made_row_major(column_major), column_major):
            opt = optim.AdamW(model.parameters(), lr=1e-3)
            pair.append(lambda model=model, opt=opt, inputs=inputs, targets=targets:
                        G.train_step(model, opt, inputs, targets))
        runners[f"training step, {backend} backend"] = tuple(pair)
    return runners


def measure(runners, rounds, clock):
    """name -> (row-major seconds, column-major seconds), rounds interleaved in rotating order."""
    times = {name: ([], []) for name in runners}
    for r in range(rounds + 1):                       # round 0 warms up (JIT, caches)
        for name, pair in runners.items():
            for which in ((0, 1) if r % 2 else (1, 0)):
                took = seconds(pair[which], clock)
                if r:
                    times[name][which].append(took)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--only", choices=["products", "generation", "training"])
    args = parser.parse_args()
    sections = [("products", "one-row products x @ W.T, plain NumPy", product_runners,
                 args.rounds * 20),
                ("generation", "GPT-2 small, ours on the numba backend", model_runners,
                 args.rounds),
                ("training", "GPT training step (AdamW), ours", training_runners,
                 args.rounds * 3)]
    sections = [(title, make(), rounds) for key, title, make, rounds in sections
                if args.only in (None, key)]
    for threads in args.threads:
        clock = time.process_time if threads == 1 else time.perf_counter
        print(pin_threads(threads) + (" (CPU time)" if threads == 1 else " (wall time)"))
        for title, runners, rounds in sections:
            print(f"  {title}")
            for name, (rows, columns) in measure(runners, rounds, clock).items():
                ratio = statistics.median(c / r for r, c in zip(rows, columns))
                print(f"    {name:36s} row-major {statistics.median(rows) * 1e3:9.3f} ms   "
                      f"column-major {statistics.median(columns) * 1e3:9.3f} ms   "
                      f"column / row = {ratio:.2f}x   ({len(rows)} rounds)")


if __name__ == "__main__":
    main()
