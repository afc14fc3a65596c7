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
#   attention is phi(Q) (phi(K)^T V), never forming the n x n matrix;
#
# and section VIII's Longformer window (`F.banded_attention`) and BigBird blocks
# (`BlockSparseAttention`) join them below. Each is a `core` of `nn.MultiHeadAttention`, so any
# model takes it. This script draws which keys each query really attends (from the cores' own
# weights, not from a mask builder), then trains a small model with each pattern on a
# long-range task (retrieve a token planted at the start of the sequence) and reports the
# accuracy against n. Last, it times forward + backward and traces the peak memory of each
# core on the numba backend as n grows from 256 to 4k tokens, and fits the log-log slope
# (2 for full attention, 1.5 for sqrt(n) patterns, 1 for linear ones).
#
# ```
# python examples/long_attention.py            # the full run: minutes on 2 CPU cores
# python examples/long_attention.py --smoke    # seconds
# ```
#
# Outputs go to `--out` (default `runs/long_attention`): `attended.png`, `scaling.png`,
# `long_range.png` and `metrics.json`. In a notebook each figure also shows below the cell that
# makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import functools  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
import minitorch_nlp.functional as F  # noqa: E402
from minitorch_nlp import attention as A  # noqa: E402
from minitorch_nlp import nn, optim, plots, scripting  # noqa: E402

SETTINGS = {
    "full": dict(picture_time=32, lengths=[256, 512, 1024, 2048, 4096], head_dim=32,
                 full_up_to=2048, task_lengths=[32, 64, 128], task_steps=150, task_layers=2),
    "smoke": dict(picture_time=16, lengths=[128, 256, 512], head_dim=16, full_up_to=512,
                  task_lengths=[32, 64], task_steps=3, task_layers=1),
}

parser = scripting.example_parser(
    "long_attention", "Draw what each efficient attention core attends and measure its time and "
    "memory against the sequence length", backend=False)
args = scripting.arguments(parser, smoke=SMOKE)
cfg, out = scripting.start(args, SETTINGS)
started = time.perf_counter()


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
n = cfg["picture_time"]
stride = int(math.sqrt(n))
rng = np.random.default_rng(args.seed)
q, k, v = (mt.tensor(a) for a in rng.standard_normal((3, 1, 2, n, 8)))
pictures = {}
for title, core in [
        (f"strided, merged (l = {stride})", A.SparseTransformerAttention(stride)),
        (f"fixed, merged (l = {stride}, c = 1)", A.SparseTransformerAttention(stride, "fixed")),
        (f"strided, per head (l = {stride})",
         A.SparseTransformerAttention(stride, combine="heads"))]:
    _, weights = core(q, k, v, causal=True, need_weights=True)
    for h in range(2) if core.combine == "heads" else range(1):
        name = title if core.combine != "heads" else f"{title}: head {h}"
        pictures[name] = weights.numpy()[0, h] != 0
centres = rng.standard_normal((3, 8))
clustered = centres[rng.integers(0, 3, n)] + 0.3 * rng.standard_normal((n, 8))
lsh = A.LSHAttention(4, 4, num_rounds=2, seed=args.seed)
pictures["LSH: 4 buckets, chunks of 4, 2 rounds"] = lsh.pairs(clustered[None, None])[0, 0]
plots.show(A.draw_masks(pictures, columns=3), out / "attended.png")


# %% [markdown]
# ## A long-range task: retrieve a token planted far back
#
# Each sequence starts with one of 8 *value* tokens, continues with random filler tokens and
# ends with a query token. The model must output the value at the query, n - 1 positions later
# (chance: 1/8). The fillers are drawn independently of the value, so the last position's output
# carries information about the value only through a chain of attention steps that reaches
# position 0: a model whose layers cannot connect the last position to the first scores 1/8 in
# expectation, however long it trains.
#
# The model is 2 pre-LN layers of 2 heads (d = 32) with learned positions, and a linear head on
# the last position. Every pattern gets the same model, the same batches (16 sequences), the
# same AdamW steps with the same warm-up and cosine decay, and is scored on 512 fresh sequences.
# The pattern sizes are fixed, as in practice, while n grows:
#
# * **full** attention sees position 0 from the last position directly;
# * a **sliding window** of 8 on each side reaches 8 positions back per layer, 16 in two layers,
#   so it cannot reach position 0 once n > 17: it is the control, at chance;
# * the **strided** pattern (l = sqrt(n), causal, eq 94) needs its two layers: in the first,
#   position j = (n - 1) mod l (< l) sees position 0 in its window of the last l positions; in
#   the second, the last position sees j in its column (every l-th position back);
# * **BigBird** (blocks of 16, a window of 3 blocks, global block 0, 1 random block) attends the
#   global block 0 from every query directly;
# * **LSH** (chunks of 32, n / 32 buckets, one round) attends position 0 only where the query and
#   the value hash into the same bucket and land in the same or the previous chunk of the sorted
#   order: training must make their shared query-key vectors point the same way and the
#   fillers' elsewhere;
# * **Linformer** (k = 16) mixes all n positions into each of its k projected keys and values,
#   so position 0 is always in reach, diluted among n - 1 fillers unless the projection learns
#   to weigh it;
# * the **Performer** (32 random features) estimates full softmax attention, so it can reach
#   position 0, through an estimate whose noise grows with the number of keys it sums over.

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
        "sliding window w=8": (lambda: nn.SlidingWindowAttention(8), False),
        "strided l=sqrt(n)": (lambda: A.SparseTransformerAttention(max(1, round(math.sqrt(n)))),
                              True),
        "BigBird b=16 (global block 0)": (lambda: A.BlockSparseAttention(16, 3, (0,), 1,
                                                                         seed=seed), False),
        "LSH chunks of 32": (lambda: A.LSHAttention(max(2, 2 * (n // 32 // 2)), 32, seed=seed),
                             False),
        "Linformer k=16": (lambda: A.LinformerAttention(n, 16), False),
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


def retrieval_accuracy(make_core, causal, n, steps, layers, seed, lr=1e-2, batch=16):
    """Train a ``Retriever`` on the numba backend for ``steps`` AdamW steps on batches of
    ``batch`` (a tenth of the steps warm-up, then cosine decay); its accuracy on 512 fresh
    sequences."""
    with mt.backend("numba"):
        mt.manual_seed(seed)
        rng = np.random.default_rng(seed)
        model = Retriever(make_core, causal, n, layers)
        optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        schedule = optim.lr_scheduler.CosineWarmupDecayLR(optimizer, max(1, steps // 10), steps)
        for _ in range(steps):
            ids, values = retrieval_batch(rng, batch, n)
            loss = F.cross_entropy(model(ids), mt.tensor(values))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        model.eval()
        ids, values = retrieval_batch(np.random.default_rng(seed + 1), 512, n)
        with mt.no_grad():
            return float((model(ids).numpy().argmax(axis=-1) == values).mean())


# %% [markdown]
# Each pattern trains at each length; the table and the figure follow.

# %%
accuracy = {}
for n in cfg["task_lengths"]:
    for name, (make_core, causal) in task_patterns(n, 16, args.seed).items():
        began = time.perf_counter()
        accuracy.setdefault(name, {})[n] = retrieval_accuracy(
            make_core, causal, n, cfg["task_steps"], cfg["task_layers"], args.seed)
        print(f"  {name} at n = {n}: accuracy {accuracy[name][n]:.2f} "
              f"({time.perf_counter() - began:.0f} s)", flush=True)

width = max(len(name) for name in accuracy) + 2
print(f"\nretrieval accuracy on 512 fresh sequences (chance {1 / VALUES:.3f})")
print("pattern".ljust(width) + "".join(f"n={n}".rjust(8) for n in cfg["task_lengths"]))
for name, by_length in accuracy.items():
    print(name.ljust(width) + "".join(f"{by_length[n]:>8.2f}" for n in cfg["task_lengths"]))

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
plots.show(figure, out / "long_range.png")
seconds_task = time.perf_counter() - started


# %% [markdown]
# ## What it costs
#
# Forward + backward of one attention call (batch 1, 2 heads, float32, on the numba backend:
# the fused full and banded kernels, the grouped kernel of the sparse cores, the prefix sums of
# the causal Performer), the wall-clock time (the fastest of 3 calls up to 4096 tokens, of 2
# above) and the peak of NumPy allocations (tracemalloc, a separate call), for full causal
# attention and each core:
#
# * full: `F.scaled_dot_product_attention(causal=True)`; on numba it recomputes the
#   probabilities in blocks instead of keeping the n x n matrix, so its memory is linear and only
#   its time is quadratic;
# * banded: `F.banded_attention`, the 256 keys on the left of each query;
# * BigBird: `BlockSparseAttention`, blocks of 64, a window of 3 blocks, global block 0 and 3
#   random blocks;
# * strided: `SparseTransformerAttention`, the merged pattern with l = sqrt(n);
# * LSH: `LSHAttention`, one hashing round, chunks of 64 and n / 64 buckets;
# * Linformer: `LinformerAttention`, keys and values projected to k = 64 (bidirectional: it
#   cannot be causal);
# * Performer: `PerformerAttention`, 64 random features, causal.
#
# The slope of log(cost) against log(n) says how the cost grows: 2 is quadratic, 1 linear. Full
# attention stops at `full_up_to` tokens (2k in the full run): at 4k one call would take 4x
# its 2k time, the skip is printed. `benchmarks/long_attention.py` times the same kinds of core
# beside PyTorch's SDPA at 1 and 2 threads.

# %%
FULL = "full (causal)"


def cores(n, head_dim, seed):
    """Core name -> a function of (q, k, v): one attention call. Build it under the backend that
    q, k, v live on (Linformer's projections and the Performer's features are tensors)."""
    sparse = A.SparseTransformerAttention(max(1, round(math.sqrt(n))))
    bigbird = A.BlockSparseAttention(64, 3, (0,), 3, seed=seed)
    lsh = A.LSHAttention(max(2, 2 * (n // 64 // 2)), 64, seed=seed)
    linformer = A.LinformerAttention(n, 64)
    performer = A.PerformerAttention(head_dim, 64)
    return {
        FULL: lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=True),
        "banded w=256": lambda q, k, v: F.banded_attention(q, k, v, window=256, causal=True),
        "BigBird b=64": lambda q, k, v: bigbird(q, k, v, causal=True)[0],
        "strided l=sqrt(n)": lambda q, k, v: sparse(q, k, v, causal=True)[0],
        "LSH chunks of 64": lambda q, k, v: lsh(q, k, v, causal=True)[0],
        "Linformer k=64": lambda q, k, v: linformer(q, k, v)[0],
        "Performer m=64 (causal)": lambda q, k, v: performer(q, k, v, causal=True)[0],
    }


def forward_backward(attend, q, k, v):
    attend(q, k, v).sum().backward()
    for t in (q, k, v):
        t.grad = None


def seconds(attend, q, k, v, repeats):
    """The fastest of ``repeats`` forward + backward calls."""
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        forward_backward(attend, q, k, v)
        times.append(time.perf_counter() - start)
    return min(times)


def peak_bytes(attend, q, k, v):
    """The peak of traced allocations during one forward + backward call."""
    gc.collect()
    tracemalloc.start()
    forward_backward(attend, q, k, v)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def scaling(cfg, seed):
    """Core name -> n -> {"seconds", "peak_mb"}, and the skips as (core, n)."""
    rng = np.random.default_rng(seed)
    results, skipped = {}, []
    with mt.backend("numba"):
        for n in cfg["lengths"]:
            q, k, v = (mt.tensor(a.astype(np.float32), requires_grad=True)
                       for a in rng.standard_normal((3, 1, 2, n, cfg["head_dim"])))
            for name, attend in cores(n, cfg["head_dim"], seed).items():
                by_length = results.setdefault(name, {})
                if name == FULL and n > cfg["full_up_to"]:
                    skipped.append((name, n))
                    print(f"{name} skipped at n = {n}: its time grows as n^2, one call would "
                          f"take about {(n / max(by_length)) ** 2:.0f}x its time at "
                          f"n = {max(by_length)}")
                    continue
                if not by_length:
                    forward_backward(attend, q, k, v)           # compile the kernels
                repeats = 3 if n <= 4096 else 2
                by_length[n] = {"seconds": seconds(attend, q, k, v, repeats),
                                "peak_mb": peak_bytes(attend, q, k, v) / 2**20}
                print(f"  {name} at n = {n}: {by_length[n]['seconds'] * 1e3:.1f} ms, "
                      f"{by_length[n]['peak_mb']:.1f} MB", flush=True)
    return results, skipped


# %% [markdown]
# The table, then the log-log figure: a line's slope is the power of n its cost grows with.

# %%
results, skipped = scaling(cfg, args.seed)
width = max(len(name) for name in results) + 2
for key, title, scale in (("seconds", "forward + backward, ms (numba backend)", 1e3),
                          ("peak_mb", "peak NumPy memory, MB", 1.0)):
    print(f"\n{title}; '-': skipped")
    print("core".ljust(width) + "".join(f"n={n}".rjust(9) for n in cfg["lengths"]) + "    slope")
    for name, by_length in results.items():
        print(name.ljust(width) + "".join((f"{by_length[n][key] * scale:.1f}"
                                           if n in by_length else "-").rjust(9)
                                          for n in cfg["lengths"])
              + f"{plots.log_log_slope(by_length, key):>9.2f}")
plots.log_log_panels(results, [("seconds", "forward + backward (s)"),
                               ("peak_mb", "peak NumPy memory (MB)")],
                     xlabel="sequence length n", path=out / "scaling.png",
                     title="cost of one attention call against n (numba backend)")
slopes = {name: {"time": plots.log_log_slope(by_length, "seconds"),
                 "memory": plots.log_log_slope(by_length, "peak_mb")}
          for name, by_length in results.items()}
seconds_total = time.perf_counter() - started
print(f"\nwall time: {seconds_task:.0f} s for the pictures and the task, "
      f"{seconds_total - seconds_task:.0f} s for the scaling, {seconds_total:.0f} s in all")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed,
    "pictures": ["attended.png", "scaling.png", "long_range.png"],
    "long_range_accuracy": {name: {str(n): value for n, value in by_length.items()}
                            for name, by_length in accuracy.items()},
    "attended_fraction": {name: float(mask.mean()) for name, mask in pictures.items()},
    "scaling": {name: {str(n): v for n, v in by_length.items()}
                for name, by_length in results.items()},
    "slopes": slopes,
    "skipped": [{"core": name, "n": n} for name, n in skipped],
    "seconds": {"pictures_and_task": seconds_task, "scaling": seconds_total - seconds_task},
})
