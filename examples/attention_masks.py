# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Attention masks: who may look at whom
#
# Every Transformer layer computes softmax(Q K^T / sqrt(d_k)) V (the survey's eq 11-12). The
# models of *The NLP Cookbook* differ, among other things, in **which keys each query is allowed
# to see**. That choice is a mask: a grid with one row per query position and one column per key
# position, True (dark) where the query may attend the key. Blocked scores are set to -inf before
# the softmax, so they get no weight, and a pattern with few allowed cells can be computed in
# less than the n^2 time and memory of full attention.
#
# `minitorch_nlp.attention` builds every pattern below as a NumPy bool array, broadcastable to
# (batch, heads, q_time, k_time), True = allowed. This script draws each one (one PNG per
# pattern and an overview) and counts how many query-key pairs each keeps as the sequence grows.
#
# ```
# python examples/attention_masks.py            # a few seconds
# python examples/attention_masks.py --smoke    # the same with shorter sequences
# ```
#
# Outputs go to `--out` (default `runs/attention_masks`): the PNGs, `all_masks.png`, `cost.png`
# and `metrics.json`. In a notebook each picture also shows below the cell that draws it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import attention as A  # noqa: E402
from minitorch_nlp import plots, scripting  # noqa: E402

SETTINGS = {
    "full": dict(time=16, long_time=32, block=4, cost_lengths=[64, 256, 1024, 2048]),
    "smoke": dict(time=8, long_time=16, block=2, cost_lengths=[16, 64]),
}
parser = scripting.example_parser("attention_masks", "Draw the attention mask of every pattern "
                                  "in minitorch_nlp.attention", backend=False)
args = scripting.arguments(parser, smoke=SMOKE)
cfg, out = scripting.start(args, SETTINGS)
rng = np.random.default_rng(args.seed)
drawn = {}


def draw(name, title, mask, tokens=None):
    """Draw ``mask`` (tokens label its rows and columns), save it as NAME.png and show it."""
    plots.show(A.draw_mask(mask, title=title, query_labels=tokens, key_labels=tokens).figure,
               out / f"{name}.png")
    drawn[name] = (title, mask)


# %% [markdown]
# ## Causal (decoder) masking
#
# Vaswani et al. (2017), GPT: a position is predicted from the positions before it, so it must
# not see the future: **allowed[i, j] = j <= i**. When generating with a key/value cache, the
# new queries are the *last* positions and every cached key lies in the past:
# **allowed[i, j] = j <= i + (k_time - q_time)**.

# %%
time = cfg["time"]
draw("causal", "causal: j <= i", A.causal_mask(time))
draw("causal_with_cache", f"causal, 3 new queries after {time - 3} cached keys",
     A.causal_mask(3, time))


# %% [markdown]
# ## Padding
#
# Sequences of a batch have different lengths; the shorter ones are padded, and no query may
# attend a padding key: **allowed[b, :, :, j] = j < length[b]**. The padding mask has shape
# (batch, 1, 1, k_time) and `combine` (a logical and, broadcast) joins it with the causal one.

# %%
words = ["the", "cat", "sat", "down"]
padded = words + ["<pad>"] * 2
padding = A.padding_mask([len(words), len(padded)], len(padded))
both = A.combine(A.causal_mask(len(padded)), padding)   # (batch, 1, time, time)
draw("padding_and_causal", "causal and padding (a padded sentence)", both[0, 0], padded)


# %% [markdown]
# ## Prefix language model (UniLM, T5)
#
# Dong et al. (2019) and Raffel et al. (2020): the input (prefix) is read in both directions,
# like BERT, and the output is generated left to right, like GPT, in one stack:
# **allowed[i, j] = j < prefix or j <= i**. Prefix 0 is the causal mask, prefix = length is
# full attention.

# %%
question, answer = ["Q:", "who", "sat", "?", "A:"], ["the", "cat", "sat"]
draw("prefix_lm", "prefix LM: bidirectional prefix, causal answer",
     A.prefix_lm_mask(len(question), len(question) + len(answer)), question + answer)


# %% [markdown]
# ## XLNet's permutation language model
#
# Yang et al. (2019), the survey's eq 26-27: predict the tokens in a random factorisation
# order z and let each see only what comes before it *in z*, so that over many orders every
# token learns from context on both sides. With rank[j] the step at which position j is
# predicted, the **content stream** (which carries the token itself) has
# **rank[j] <= rank[i]** and the **query stream** (which must predict the token without reading
# it) has **rank[j] < rank[i]**. Here the order predicts "is a city" first, then "San", then
# "Francisco": log p(San | is a city) + log p(Francisco | San is a city), the survey's example.

# %%
sentence, order = ["San", "Francisco", "is", "a", "city"], [2, 3, 4, 0, 1]
content, query = A.permutation_mask(order)
order_text = " → ".join(sentence[p] for p in order)
draw("permutation_content", f"XLNet content stream\norder {order_text}", content, sentence)
draw("permutation_query", "XLNet query stream (content minus the diagonal)", query, sentence)


# %% [markdown]
# ## Longformer: sliding window, dilation, global tokens
#
# Beltagy et al. (2020): each query sees w keys on each side, **|j - i| <= w**, so the cost
# grows as n (2w + 1); stacking layers widens the receptive field. The dilated window skips
# keys, **(j - i) mod d = 0 and |j - i| <= w d**, reaching further for the same cost. A few
# **global** positions (the [CLS] token, the question) attend everything and are attended by
# everything: **allowed[i, j] = i in G or j in G or window[i, j]** (ETC, Ainslie et al. (2020),
# keeps such global tokens as a separate input).

# %%
draw("sliding_window", "sliding window, w = 2", A.sliding_window_mask(time, 2))
draw("dilated_window", "dilated sliding window, w = 2, d = 2",
     A.sliding_window_mask(time, 2, dilation=2))
draw("global", "Longformer: global [CLS] + window w = 1", A.global_mask(time, [0], window=1))


# %% [markdown]
# ## BigBird: window + global + random blocks
#
# Zaheer et al. (2020) work on blocks of b positions (to use dense matrix products) and give
# each query block I (i) its neighbouring blocks, **|I - J| <= 1**, (ii) the global blocks,
# which attend and are attended by all, and (iii) r random key blocks. The random links put any
# two positions a few hops apart, which BigBird's universal-approximation and
# Turing-completeness results rest on.

# %%
block = cfg["block"]
draw("bigbird", f"BigBird: blocks of {block}, window 3, global 1, random 1",
     A.block_sparse_mask(cfg["long_time"], block, num_window_blocks=3, global_blocks=(0,),
                         num_random_blocks=1, generator=mt.Generator(args.seed)))


# %% [markdown]
# ## Sparse Transformer: strided and fixed patterns
#
# Child et al. (2019), the survey's section IX-A: two heads, each causal. **Strided**: head 1
# sees the previous l positions, **max(0, i - l) <= j <= i**, head 2 every l-th position,
# **(i - j) mod l = 0**. **Fixed**: head 1 sees its own block, **j // l = i // l**, head 2 the
# last c positions of every block, **j mod l >= l - c**. With l ~ sqrt(n) each query sees
# O(sqrt(n)) keys. The heads can alternate by layer (eq 93), be merged into one head seeing the
# union (eq 94, drawn here), or be separate heads (eq 95: `factorized=True` gives a (2, n, n)
# mask, one pattern per head).

# %%
stride = int(np.sqrt(time))
local_head, strided_head = A.strided_mask(time, stride, factorized=True)
draw("strided_head_1", f"strided, head 1: the previous l = {stride}", local_head)
draw("strided_head_2", f"strided, head 2: every l = {stride}-th", strided_head)
draw("strided", f"strided, merged heads (l = {stride})", A.strided_mask(time, stride))
draw("fixed", f"fixed, merged heads (l = {stride}, c = 1)", A.fixed_mask(time, stride, 1))


# %% [markdown]
# ## Reformer: attention within hash buckets
#
# Kitaev et al. (2020), the survey's eq 96-98: locality-sensitive hashing puts similar vectors
# in the same bucket, h(x) = argmax([xR; -xR]) for a random rotation R, and a query attends only
# the keys of its bucket, **h(x_i) = h(x_j)** (in any of several rounds, eq 98). Sorted by
# bucket, the mask is block-diagonal: that is what makes chunked attention cheap. The vectors
# here are random points near three centres.

# %%
centres = rng.standard_normal((3, 8))
vectors = centres[rng.integers(0, 3, time)] + 0.3 * rng.standard_normal((time, 8))
projected = vectors @ rng.standard_normal((8, 2))
buckets = np.argmax(np.concatenate([projected, -projected], axis=1), axis=1)
mask = A.bucket_mask(buckets[None], causal=True)[0, 0]
by_bucket = np.argsort(buckets, kind="stable")
draw("buckets", f"Reformer: same bucket, causal\nbuckets {buckets.tolist()}", mask)
draw("buckets_sorted", "the same, sorted by bucket (position:bucket)",
     mask[np.ix_(by_bucket, by_bucket)], [f"{p}:{buckets[p]}" for p in by_bucket])

# %% [markdown]
# ## All of them side by side

# %%
plots.show(A.draw_masks(dict(drawn.values()), columns=4), out / "all_masks.png")


# %% [markdown]
# ## What they cost
#
# The count that matters for long inputs: how many query-key pairs each pattern keeps as n
# grows. Full attention keeps n^2 (causal about half); a sliding window and BigBird keep O(n);
# the Sparse Transformer's patterns keep O(n sqrt(n)).

# %%
def cost_patterns(n, seed):
    stride = max(1, int(np.sqrt(n)))
    return {
        "full": np.ones((n, n), dtype=bool),
        "causal": A.causal_mask(n),
        "sliding window w=8": A.sliding_window_mask(n, 8),
        "BigBird b=8, r=1": A.block_sparse_mask(n, 8, num_random_blocks=1,
                                                 generator=mt.Generator(seed)),
        "strided l=sqrt(n)": A.strided_mask(n, stride),
        "fixed l=sqrt(n), c=1": A.fixed_mask(n, stride, 1),
    }


cost = {}
for n in cfg["cost_lengths"]:
    for name, pattern in cost_patterns(n, args.seed).items():
        cost.setdefault(name, {})[n] = {"pairs": int(pattern.sum()),
                                        "max_keys_per_query": int(pattern.sum(axis=1).max())}
print("pattern".ljust(24) + "".join(f"pairs at n={n}".rjust(18) for n in cfg["cost_lengths"]))
for name, by_length in cost.items():
    print(name.ljust(24) + "".join(f"{v['pairs']:>18,}" for v in by_length.values()))

figure = Figure(figsize=(6.5, 4.5), layout="constrained")
ax = figure.add_subplot()
for name, by_length in cost.items():
    ax.plot(list(by_length), [v["pairs"] for v in by_length.values()], marker="o", label=name)
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xlabel("sequence length n")
ax.set_ylabel("query-key pairs computed")
ax.set_title("attention cost of each pattern")
ax.legend(fontsize="small")
plots.show(figure, out / "cost.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed,
    "pictures": sorted(f"{name}.png" for name in drawn) + ["all_masks.png", "cost.png"],
    "allowed_fraction": {name: float(m.mean()) for name, (_, m) in drawn.items()},
    "cost": {name: {str(n): v for n, v in by_length.items()} for name, by_length in cost.items()},
})
