# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # The Reformer's reversible layers: activation memory against depth
#
# Backpropagation keeps every layer's activations from the forward pass until the backward pass
# needs them, so training memory grows with depth. The Reformer (Kitaev et al., 2020, section
# 4) uses reversible residual blocks (RevNets; the survey's eq 104-105):
#
#     Y1 = X1 + F(X2)        Y2 = X2 + G(Y1)           (eq 104)
#     X2 = Y2 - G(Y1)        X1 = Y1 - F(X2)           (eq 105)
#
# Each block's inputs can be rebuilt from its outputs. `nn.ReversibleStack` therefore keeps
# only the last outputs. In backward it walks down the blocks, rebuilds each block's inputs
# and recomputes F and G to take their gradients. Activation memory then stays flat in depth,
# and the price is one more forward pass of each block.
#
# This script builds Reformer stacks of 1 to 16 blocks: F is LayerNorm then LSH self-attention,
# G is LayerNorm then a chunked feed-forward network. It traces the peak memory of one forward
# + backward pass in two ways:
#
# * with recomputation: `ReversibleStack(blocks)`;
# * as an ordinary network: `ReversibleStack(blocks, recompute=False)`, the same blocks with
#   the graph recorded.
#
# The two give the same gradients (`tests/test_sec9_reformer.py` checks it).
#
# ```
# python examples/reformer_memory.py            # about half a minute
# python examples/reformer_memory.py --smoke    # seconds
# ```
#
# Outputs go to `--out` (default `runs/reformer_memory`): `memory.png` and `metrics.json`. In a
# notebook the figure also shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import gc  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import nn, plots, scripting  # noqa: E402
from minitorch_nlp.attention import LSHAttention  # noqa: E402

SETTINGS = {
    "full": dict(depths=[1, 2, 4, 8, 16], batch=2, time=512, d_model=64, heads=4, chunk=64),
    "smoke": dict(depths=[1, 2, 4, 8], batch=1, time=128, d_model=32, heads=2, chunk=32),
}
parser = scripting.example_parser(
    "reformer_memory", "Peak memory of forward + backward against depth, reversible Reformer "
    "blocks with and without recomputation", backend=False)
args = scripting.arguments(parser, smoke=SMOKE)
cfg, out = scripting.start(args, SETTINGS)


# %% [markdown]
# ## The blocks
#
# F is LayerNorm, then multi-head LSH attention: 4 buckets per chunk of the sorted sequence,
# and the rotations fixed by a seed, so that the recomputation hashes as the forward pass did.
# G is LayerNorm, then the feed-forward network run a chunk of positions at a time
# (`nn.ChunkedFeedForward`). Its (chunk, 4 d) hidden activations are the largest thing alive,
# where the whole network would hold (time, 4 d) at once.

# %%
def reformer_blocks(depth, seed):
    d, chunk = cfg["d_model"], cfg["chunk"]
    buckets = max(2, 2 * (cfg["time"] // chunk // 2))
    return [nn.ReversibleBlock(
        nn.Sequential(nn.LayerNorm(d), nn.MultiHeadAttention(
            d, cfg["heads"], core=LSHAttention(buckets, chunk, seed=seed + i))),
        nn.Sequential(nn.LayerNorm(d), nn.ChunkedFeedForward(nn.FeedForward(d, 4 * d), chunk)))
        for i in range(depth)]


def peak_memory(stack, x):
    """(peak MB, seconds) of forward + backward, the parameters already allocated."""
    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()
    y1, y2 = stack(x, x)
    (y1 + y2).sum().backward()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    stack.zero_grad()
    x.grad = None
    return peak / 2**20, seconds


# %% [markdown]
# ## Memory against depth
#
# For each depth, the same blocks run once with recomputation and once recorded. The slope of
# log(peak) against log(depth) says how memory grows: close to 1 for the recorded stack, whose
# activations pile up block after block, and close to 0 for the recomputing one. Part of the
# recomputing stack's small growth is the gradients of the parameters, which grow with depth in
# both.

# %%
rng = np.random.default_rng(args.seed)
x = mt.tensor(rng.standard_normal((cfg["batch"], cfg["time"], cfg["d_model"]))
              .astype(np.float32), requires_grad=True)
results = {"reversible (recomputed)": {}, "ordinary (recorded)": {}}
for depth in cfg["depths"]:
    mt.manual_seed(args.seed)
    blocks = reformer_blocks(depth, args.seed)
    for name, stack in (("reversible (recomputed)", nn.ReversibleStack(blocks)),
                        ("ordinary (recorded)", nn.ReversibleStack(blocks, recompute=False))):
        peak_memory(stack, x)                                   # warm up
        megabytes, seconds = peak_memory(stack, x)
        results[name][depth] = {"peak_mb": megabytes, "seconds": seconds}

slopes = {name: {"memory": plots.log_log_slope(by_depth, "peak_mb"),
                 "time": plots.log_log_slope(by_depth, "seconds")}
          for name, by_depth in results.items()}
print("stack".ljust(26) + "".join(f"MB at {d}".rjust(11) for d in cfg["depths"])
      + "  memory slope  time slope")
for name, by_depth in results.items():
    print(name.ljust(26) + "".join(f"{by_depth[d]['peak_mb']:>11.2f}" for d in cfg["depths"])
          + f"{slopes[name]['memory']:>14.2f}{slopes[name]['time']:>12.2f}")
plots.log_log_panels(results, [("peak_mb", "peak memory of forward + backward (MB)"),
                               ("seconds", "forward + backward (s)")],
                     xlabel="reversible blocks", path=out / "memory.png",
                     title="Reformer blocks: recomputing from the outputs keeps memory "
                           "nearly flat in depth")

# %%
deepest, shallowest = max(cfg["depths"]), min(cfg["depths"])
summary = scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "pictures": ["memory.png"], "settings": cfg,
    "results": {name: {str(d): v for d, v in by_depth.items()}
                for name, by_depth in results.items()},
    "growth": {name: by_depth[deepest]["peak_mb"] / by_depth[shallowest]["peak_mb"]
               for name, by_depth in results.items()},
    "slopes": slopes,
})
print(f"memory grows {summary['growth']['reversible (recomputed)']:.2f}x with recomputation "
      f"and {summary['growth']['ordinary (recorded)']:.2f}x recorded, from {shallowest} to "
      f"{deepest} blocks")
