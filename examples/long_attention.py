# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Long and efficient attention: what each core attends, and what it costs
#
# Full attention compares every query with every key, n^2 pairs. The cores of
# `minitorch_nlp.attention` avoid that (the survey's section IX):
#
# * the **Sparse Transformer** (eq 92-95) attends index sets of about 2 sqrt(n) keys, strided or
#   fixed, in groups of small dense products;
# * the **Reformer** (eq 96-103) hashes shared query-keys into buckets, sorts by bucket and
#   attends within chunks of the sorted order;
# * **Linformer** (eq 111) projects the n keys and values to k along the sequence;
# * the **Performer** replaces exp(q . k) by a product of positive random features, so that
#   attention is phi(Q) (phi(K)^T V), never forming the n x n matrix.
#
# Each is a `core` of `nn.MultiHeadAttention`, so any model takes it. This script draws which
# keys each query really attends (from the cores' own weights, not from a mask builder), then
# times forward + backward and traces the peak memory of each core as n grows, and fits the
# log-log slope (2 for full attention, about 1.5 for sqrt(n) patterns, 1 for linear ones).
# Last, it trains a small model with each pattern on a long-range task (retrieve a token planted
# at the start of the sequence) and reports the accuracy against n.
#
# ```
# python examples/long_attention.py            # several minutes
# python examples/long_attention.py --smoke    # seconds
# ```
#
# Outputs go to `--out` (default `runs/long_attention`): `attended.png`, `scaling.png`,
# `long_range.png` and `metrics.json`.

# %%
from __future__ import annotations

import functools
import gc
import math
import time
import tracemalloc

import numpy as np
from matplotlib.figure import Figure

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import attention as A
from minitorch_nlp import nn, optim, plots, scripting

SETTINGS = {
    "full": dict(picture_time=32, lengths=[256, 512, 1024, 2048, 4096], head_dim=32,
                 task_lengths=[16, 32, 64], task_steps=150, task_layers=2),
    "smoke": dict(picture_time=16, lengths=[128, 256, 512], head_dim=16,
                  task_lengths=[8, 16], task_steps=3, task_layers=1),
}


def parse_args(argv=None):
    return scripting.example_parser(
        "long_attention", "Draw what each efficient attention core attends and measure its "
        "time and memory against the sequence length", backend=False).parse_args(argv)


# %% [markdown]
# ## What each query attends
#
# The pictures are the nonzero weights of each core on random inputs (`need_weights=True`):
# the Sparse Transformer's merged strided and fixed patterns (eq 94), its two factors given to
# alternate heads (eq 95: head 0 the previous l positions, head 1 every l-th), and the
# Reformer's LSH pairs for vectors drawn around three centres, two hashing rounds: queries see
# the keys of their bucket within their chunk and the previous one, never themselves unless
# alone (eq 96-99).

# %%
def attended(cfg, seed):
    n = cfg["picture_time"]
    stride = int(math.sqrt(n))
    rng = np.random.default_rng(seed)
    q, k, v = (mt.tensor(a) for a in rng.standard_normal((3, 1, 2, n, 8)))
    pictures = {}
    for title, core in [
            (f"strided, merged (l = {stride})", A.SparseTransformerAttention(stride)),
            (f"fixed, merged (l = {stride}, c = 1)", A.SparseTransformerAttention(stride, "fixed")),
            (f"strided, per head (l = {stride})",
             A.SparseTransformerAttention(stride, combine="heads"))]:
        _, weights = core(q, k, v, causal=True, need_weights=True)
        heads = range(2) if core.combine == "heads" else range(1)
        for h in heads:
            name = title if core.combine != "heads" else f"{title}: head {h}"
            pictures[name] = weights.numpy()[0, h] != 0
    centres = rng.standard_normal((3, 8))
    clustered = centres[rng.integers(0, 3, n)] + 0.3 * rng.standard_normal((n, 8))
    lsh = A.LSHAttention(4, 4, num_rounds=2, seed=seed)
    pictures["LSH: 4 buckets, chunks of 4, 2 rounds"] = lsh.pairs(clustered[None, None])[0, 0]
    return pictures


# %% [markdown]
# ## What it costs
#
# Forward + backward of one attention call (batch 1, 2 heads, float32, NumPy backend), the
# wall-clock time and the peak of NumPy allocations (tracemalloc), for full causal attention
# (the fused kernel, which keeps the n x n probabilities) and each core. The slope of
# log(cost) against log(n) says how the cost grows: 2 is quadratic, 1 linear.
# `benchmarks/long_attention.py` runs the same to 16k tokens beside PyTorch.

# %%
def cores(n, head_dim, seed):
    stride = max(1, round(math.sqrt(n)))
    sparse = A.SparseTransformerAttention(stride)
    lsh = A.LSHAttention(max(2, 2 * (n // 64 // 2)), 64, seed=seed)
    linformer = A.LinformerAttention(n, 64)
    performer = A.PerformerAttention(head_dim, 64)
    return {
        "full (causal)": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=True),
        "strided l=sqrt(n)": lambda q, k, v: sparse(q, k, v, causal=True)[0],
        "LSH chunks of 64": lambda q, k, v: lsh(q, k, v, causal=True)[0],
        "Linformer k=64": lambda q, k, v: linformer(q, k, v)[0],
        "Performer m=64 (causal)": lambda q, k, v: performer(q, k, v, causal=True)[0],
    }


def measure(attend, q, k, v):
    """(seconds, peak bytes) of forward + backward."""
    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()
    attend(q, k, v).sum().backward()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    for t in (q, k, v):
        t.grad = None
    return seconds, peak


def scaling(cfg, seed):
    rng = np.random.default_rng(seed)
    results = {}
    for n in cfg["lengths"]:
        q, k, v = (mt.tensor(a.astype(np.float32), requires_grad=True)
                   for a in rng.standard_normal((3, 1, 2, n, cfg["head_dim"])))
        for name, attend in cores(n, cfg["head_dim"], seed).items():
            measure(attend, q, k, v)                              # warm up
            seconds, peak = measure(attend, q, k, v)
            results.setdefault(name, {})[n] = {"seconds": seconds, "peak_mb": peak / 2**20}
    return results


# %% [markdown]
# ## A long-range task: retrieve a token planted far back
#
# Each sequence starts with one of 8 *value* tokens, continues with random filler tokens and
# ends with a query token. The model must output the value at the query, n - 1 positions later
# (chance: 1/8). The model is 2 pre-LN layers of 2 heads (d = 32) with learned positions, and a
# linear head on the last position. It is trained for the same number of AdamW steps with each
# pattern, then scored on 256 fresh sequences. What to expect:
#
# * Full attention, BigBird (global block 0), Linformer (k = 8) and the Performer can attend
#   the first token from the last one directly.
# * The strided pattern needs its two layers: position (n - 1) mod l sees position 0 in its
#   window, and the last position sees that position in its column.
# * LSH attention finds the value only when training makes the query and the value hash
#   together.
# * A sliding window of 2 on each side reaches 4 positions back in two layers, so it fails once
#   n > 5.
#
# The Sparse Transformer runs causal (its patterns are causal); the others are bidirectional,
# which changes nothing for the last position.

# %%
VALUES, FILLERS = 8, 8
QUERY = VALUES + FILLERS


def retrieval_batch(rng, batch, n):
    """(ids (batch, n), values (batch,)): a value token, n - 2 fillers, the query token."""
    values = rng.integers(0, VALUES, batch)
    ids = rng.integers(VALUES, VALUES + FILLERS, (batch, n))
    ids[:, 0] = values
    ids[:, -1] = QUERY
    return ids, values


def task_patterns(n, head_dim, seed):
    """Pattern name -> (a function making one layer's core, causal)."""
    return {
        "full": (lambda: nn.FullAttention(), False),
        "sliding window w=2": (lambda: nn.SlidingWindowAttention(2), False),
        "strided l=sqrt(n)": (lambda: A.SparseTransformerAttention(max(1, round(math.sqrt(n)))),
                              True),
        "BigBird (global block 0)": (lambda: A.BlockSparseAttention(max(1, n // 8), 3, (0,), 1,
                                                                    seed=seed), False),
        "LSH 2 buckets": (lambda: A.LSHAttention(2, max(1, n // 4), seed=seed), False),
        "Linformer k=8": (lambda: A.LinformerAttention(n, 8), False),
        "Performer m=32": (lambda: A.PerformerAttention(head_dim, 32), False),
    }


class Retriever(nn.Module):
    """Token and position embeddings, pre-LN layers around the given cores, and a linear head
    that reads the last position."""

    def __init__(self, make_core, causal, n, layers, d=32):
        super().__init__()
        self.embed = nn.Embedding(QUERY + 1, d)
        self.positions = nn.LearnedPositionalEmbedding(n, d)
        self.stack = nn.TransformerStack([nn.TransformerLayer(
            nn.MultiHeadAttention(d, 2, core=make_core()), nn.FeedForward(d, 2 * d),
            functools.partial(nn.LayerNorm, d), norm_first=True, causal=causal)
            for _ in range(layers)])
        self.head = nn.Linear(d, VALUES)

    def forward(self, ids):
        hidden = self.stack(self.positions(self.embed(mt.tensor(ids)))).last_hidden_state
        return self.head(hidden[:, -1])


def retrieval_accuracy(make_core, causal, n, steps, layers, seed):
    """Train a ``Retriever`` for ``steps`` steps on batches of 32; its accuracy on 256 fresh
    sequences."""
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Retriever(make_core, causal, n, layers)
    optimizer = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    for _ in range(steps):
        ids, values = retrieval_batch(rng, 32, n)
        loss = F.cross_entropy(model(ids), mt.tensor(values))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    ids, values = retrieval_batch(np.random.default_rng(seed + 1), 256, n)
    with mt.no_grad():
        return float((model(ids).numpy().argmax(axis=-1) == values).mean())


def long_range(cfg, seed):
    accuracy = {}
    for n in cfg["task_lengths"]:
        for name, (make_core, causal) in task_patterns(n, 16, seed).items():
            accuracy.setdefault(name, {})[n] = retrieval_accuracy(
                make_core, causal, n, cfg["task_steps"], cfg["task_layers"], seed)
    return accuracy


def plot_long_range(accuracy, path):
    figure = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = figure.subplots()
    for name, by_length in accuracy.items():
        lengths = sorted(by_length)
        ax.plot(lengths, [by_length[n] for n in lengths], marker="o", label=name)
    ax.axhline(1 / VALUES, color="grey", linestyle=":", label="chance")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("sequence length n (the value is n - 1 positions back)")
    ax.set_ylabel("accuracy")
    ax.legend(fontsize="small")
    figure.suptitle("retrieving a token planted at the start, trained with each pattern")
    plots.save(figure, path)


# %%
def main(argv=None):
    args = parse_args(argv)
    cfg, out = scripting.start(args, SETTINGS)
    pictures = attended(cfg, args.seed)
    A.draw_masks(pictures, out / "attended.png", columns=3)
    results = scaling(cfg, args.seed)
    plots.log_log_panels(results, [("seconds", "forward + backward (s)"),
                                   ("peak_mb", "peak NumPy memory (MB)")],
                         xlabel="sequence length n", path=out / "scaling.png",
                         title="cost of one attention call against n")
    slopes = {name: {"time": plots.log_log_slope(by_length, "seconds"),
                     "memory": plots.log_log_slope(by_length, "peak_mb")}
              for name, by_length in results.items()}
    print("core".ljust(26) + "".join(f"ms at n={n}".rjust(14) for n in cfg["lengths"])
          + "  time slope  memory slope")
    for name, by_length in results.items():
        print(name.ljust(26) + "".join(f"{by_length[n]['seconds'] * 1e3:>14.1f}"
                                       for n in cfg["lengths"])
              + f"{slopes[name]['time']:>12.2f}{slopes[name]['memory']:>14.2f}")
    accuracy = long_range(cfg, args.seed)
    plot_long_range(accuracy, out / "long_range.png")
    print("pattern".ljust(26) + "".join(f"acc at n={n}".rjust(14) for n in cfg["task_lengths"]))
    for name, by_length in accuracy.items():
        print(name.ljust(26) + "".join(f"{by_length[n]:>14.2f}" for n in cfg["task_lengths"]))
    summary = {
        "smoke": args.smoke, "seed": args.seed,
        "pictures": ["attended.png", "scaling.png", "long_range.png"],
        "long_range_accuracy": {name: {str(n): value for n, value in by_length.items()}
                                for name, by_length in accuracy.items()},
        "attended_fraction": {name: float(mask.mean()) for name, mask in pictures.items()},
        "scaling": {name: {str(n): v for n, v in by_length.items()}
                    for name, by_length in results.items()},
        "slopes": slopes,
    }
    scripting.write_metrics(out, summary)
    print(f"wrote attended.png, scaling.png, long_range.png and metrics.json to {out}")
    return summary


if __name__ == "__main__":
    main()
