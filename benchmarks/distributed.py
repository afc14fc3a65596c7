"""A GPT training step on 1, 2 and 4 MPI ranks: data parallelism, Megatron tensor parallelism and
ZeRO stage 3, against one process training on the whole batch (the peer every parallel form
must equal), with the bytes each rank hands to the collectives per step beside the formulas.

    python benchmarks/distributed.py [--ranks 1 2 4] [--steps 4]

Each rank runs one thread (``--oversubscribe`` starts 4 ranks on a 2-core machine, so 4 ranks
share 2 cores: the times say what MPI costs here, not what more machines would give); the peer
runs at 1 and 2 threads. The model: GPT-2 layout, 4 layers, d 128, 4 heads, vocabulary 256,
64 positions; the global batch: 8 sequences of 64 tokens. Times are medians over ``--steps``
steps after one warm-up step.

Formulas (elements; x 4 bytes for float32), Psi parameters, L layers, b x s tokens on a rank, h
the width, N ranks:
* data parallelism: one all-reduce of the gradients, Psi;
* tensor parallelism: (4 L + 2) b s h (g after attention and MLP forward, f before them
  backward; the vocabulary-parallel embedding's g; the output layer's f) + 3 b (s - 1) (the
  loss's max, sum of exponentials and target logit);
* ZeRO stage 3: a reduce-scatter of Psi (padded to a multiple of N) and an all-gather of
  Psi / N.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
from backends import pin_threads  # noqa: E402
from minitorch_nlp import distributed as D  # noqa: E402
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig  # noqa: E402
from minitorch_nlp.optim import AdamW  # noqa: E402

CONFIG = GPTConfig.tiny(vocab_size=256, n_positions=64, n_embd=128, n_layer=4, n_head=4)
BATCH = np.random.default_rng(0).integers(0, 256, (8, 64))


def _median_ms(step, steps):
    step()                                                  # warm-up
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _plain_step(model, optimizer, ids):
    optimizer.zero_grad()
    model(ids, labels=ids).loss.backward()
    optimizer.step()


def worker(steps):
    """One rank: the three parallel forms, timed; rank 0 prints one JSON line."""
    comm = D.world()
    pin_threads(1)
    n, r = comm.size, comm.rank
    local = BATCH[r * len(BATCH) // n:(r + 1) * len(BATCH) // n]
    result = {"ranks": n}

    mt.manual_seed(0)
    model = GPT2LMHeadModel(CONFIG)
    psi = model.num_parameters()
    parallel, optimizer = D.DataParallel(model, comm), AdamW(model.parameters(), lr=1e-3)

    def dp_step():
        optimizer.zero_grad()
        parallel(local, labels=local).loss.backward()
        parallel.sync_gradients()
        optimizer.step()
    before = comm.bytes["all_reduce"]
    result["dp_ms"] = _median_ms(dp_step, steps)
    result["dp_bytes"] = (comm.bytes["all_reduce"] - before) / (steps + 1)
    result["dp_formula"] = 4 * psi

    mt.manual_seed(0)
    tensor_parallel = D.TensorParallelGPT2(CONFIG, comm)
    tp_optimizer = AdamW(tensor_parallel.parameters(), lr=1e-3)
    before = comm.bytes["all_reduce"]
    result["tp_ms"] = _median_ms(lambda: _plain_step(tensor_parallel, tp_optimizer, BATCH), steps)
    result["tp_bytes"] = (comm.bytes["all_reduce"] - before) / (steps + 1)
    b, s = BATCH.shape
    result["tp_formula"] = 4 * ((4 * CONFIG.n_layer + 2) * b * s * CONFIG.n_embd + 3 * b * (s - 1))

    mt.manual_seed(0)
    model = GPT2LMHeadModel(CONFIG)
    zero = D.ZeroAdamW(model, comm, 3, lr=1e-3)

    def zero_step():
        zero.zero_grad()
        with zero.gathered():
            model(local, labels=local).loss.backward()
        zero.step()
    before = comm.bytes["reduce_scatter"] + comm.bytes["all_gather"]
    result["zero_ms"] = _median_ms(zero_step, steps)
    result["zero_bytes"] = (comm.bytes["reduce_scatter"] + comm.bytes["all_gather"]
                            - before) / (steps + 1)
    padded = zero.partition * n
    result["zero_formula"] = 4 * (padded + padded / n)
    result["zero_state_bytes"] = sum(zero.state_bytes().values())
    if r == 0:
        print(json.dumps(result), flush=True)


def peer(steps, threads):
    """One process, the whole batch: the step every parallel form must reproduce."""
    pin_threads(threads)
    mt.manual_seed(0)
    model = GPT2LMHeadModel(CONFIG)
    optimizer = AdamW(model.parameters(), lr=1e-3)
    return _median_ms(lambda: _plain_step(model, optimizer, BATCH), steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps)
        return
    if shutil.which("mpirun") is None:
        sys.exit("benchmarks/distributed.py: needs mpirun: "
                 "pip install 'minitorch_nlp[distributed]'")
    print(f"one process, whole batch {BATCH.shape}: "
          + ", ".join(f"{peer(args.steps, t):.0f} ms/step at {t} thread(s)" for t in (1, 2)))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=str(ROOT))
    print(f"{'ranks':>5} | {'DP ms':>7} {'bytes/rank':>11} {'formula':>9} | {'TP ms':>7} "
          f"{'bytes/rank':>11} {'formula':>9} | {'ZeRO-3 ms':>9} {'bytes/rank':>11} "
          f"{'formula':>9} {'state B':>9}")
    for ranks in args.ranks:
        out = subprocess.run(["mpirun", "-n", str(ranks), "--oversubscribe", sys.executable,
                              __file__, "--worker", "--steps", str(args.steps)], env=env,
                             capture_output=True, text=True, timeout=600, check=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        print(f"{ranks:>5} | {row['dp_ms']:>7.0f} {row['dp_bytes']:>11.0f} "
              f"{row['dp_formula']:>9.0f} | {row['tp_ms']:>7.0f} {row['tp_bytes']:>11.0f} "
              f"{row['tp_formula']:>9.0f} | {row['zero_ms']:>9.0f} {row['zero_bytes']:>11.0f} "
              f"{row['zero_formula']:>9.0f} {row['zero_state_bytes']:>9.0f}")


if __name__ == "__main__":
    main()
