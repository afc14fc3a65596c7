# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Transformer-XL against the deep character Transformer
#
# *The NLP Cookbook*, sections VIII-A (eq 85: Al-Rfou et al., 2019, "Character-Level Language
# Modeling with Deeper Self-Attention") and VIII-B (eq 86-91: Dai et al., 2019, "Transformer-XL:
# Attentive Language Models Beyond a Fixed-Length Context").
#
# A vanilla Transformer language model reads text in fixed-length segments and forgets
# everything before the current one ("context fragmentation"). Transformer-XL keeps each layer's
# hidden states of the previous segment as a memory, with no gradient through it (eq 87), lets
# the segment attend to the memory (eq 88-89), and scores attention by relative position
# (eq 91) so the memory's positions make sense.
#
# We train two character models of the same size (width, depth, heads) for the same number of
# steps on the same batches' worth of the docstrings of the Python standard library:
#
# * **XL**: reads the text as consecutive segments, the memory of the previous segment carried
#   from step to step;
# * **vanilla + auxiliary losses**: Al-Rfou et al.'s model (Transformer-XL's baseline): a causal
#   Transformer on random fixed-length segments, no memory, trained with the paper's three
#   auxiliary losses: every position predicts, every layer predicts (layer l of n until l/(2n)
#   of the run), and each position also predicts the character after next (weight 0.5).
#
# Then: bits per character on held-out text by the context a prediction sees (XL: its segment
# plus an evaluation memory, which may be longer than in training, as the paper evaluates;
# the vanilla model: a window of C characters sliding one character at a time, each character
# predicted by the last position, as Al-Rfou et al. evaluate), and evaluation speed: predicting each
# character from a context of C characters by re-running a sliding window of C characters per
# prediction (what a vanilla model must do) against XL, which reads a segment at a time and
# reuses the memory.
#
# ```
# python examples/char_transformer_xl.py            # the full run: minutes on 2 CPU cores
# python examples/char_transformer_xl.py --smoke    # seconds
# ```
#
# Outputs go to `--out` (default `runs/char_transformer_xl`): `metrics.json`, `loss.png`,
# `bpc_by_context.png`, `eval_speed.png`. In a notebook each figure also shows below the cell
# that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import functional as F  # noqa: E402
from minitorch_nlp import optim, plots, scripting  # noqa: E402
from minitorch_nlp.data import load_text  # noqa: E402
from minitorch_nlp.data.tokenizers import CharTokenizer  # noqa: E402
from minitorch_nlp.models.char_transformer import (CharTransformerConfig,  # noqa: E402
                                                   CharTransformerLMHeadModel)
from minitorch_nlp.models.transformer_xl import (TransfoXLConfig,  # noqa: E402
                                                 TransfoXLLMHeadModel)

SETTINGS = {
    "full": dict(corpus_chars=200_000, batch=8, segment=32, mem_len=32, d_model=32, n_head=4,
                 n_layer=2, lr=3e-3, steps=300, val_chars=8_000, eval_memories=(0, 32, 64, 128),
                 vanilla_contexts=(8, 16, 32), speed_contexts=(32, 64, 128, 256),
                 speed_predictions=64),
    "smoke": dict(corpus_chars=30_000, batch=4, segment=8, mem_len=8, d_model=16, n_head=2,
                  n_layer=2, lr=5e-3, steps=6, val_chars=600, eval_memories=(0, 8, 16),
                  vanilla_contexts=(4, 8), speed_contexts=(8, 16), speed_predictions=8),
}
parser = scripting.example_parser(
    "char_transformer_xl", "Transformer-XL against the deep character Transformer (VIII-A, B)",
    steps="training steps (300; smoke: 6)",
    text="a UTF-8 text file to use instead of the stdlib corpus")
args = scripting.arguments(parser, smoke=SMOKE)
settings, out = scripting.start(args, SETTINGS)
steps = args.steps or settings["steps"]
plt = plots.pyplot()


# %% [markdown]
# ## Segments of one long text
#
# The text is cut into `batch` parallel streams; step k reads characters
# [k L, (k + 1) L) of every stream and predicts each next character, so that the memory a step
# keeps is exactly the text before its segment.

# %%
def streams(ids, batch):
    """``ids`` cut into ``batch`` rows of equal length (the tail dropped)."""
    length = len(ids) // batch
    return ids[:length * batch].reshape(batch, length)


text = load_text(args.text)[:settings["corpus_chars"]]
tokenizer = CharTokenizer.train(text)
ids = np.asarray(tokenizer.encode(text, add_special_tokens=False), dtype=np.int64)
split = len(ids) - settings["val_chars"]
train_rows, val_rows = streams(ids[:split], settings["batch"]), streams(ids[split:], 2)
d, segment = settings["d_model"], settings["segment"]
print(f"{len(ids)} characters, {len(tokenizer)} symbols; {train_rows.shape[0]} training streams "
      f"of {train_rows.shape[1]} characters, read {segment} at a time")


def segment_loss(model, rows, start, length, mems):
    """Mean -log P of the characters after [start, start + length) of every row, and the new
    memories."""
    inputs, targets = rows[:, start:start + length], rows[:, start + 1:start + length + 1]
    out = model(inputs, mems=mems)
    return F.nll_loss(out.logits, targets), out.mems


def train_xl(model, rows):
    optimizer = optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.0)
    segment, mems, losses, start = settings["segment"], None, [], 0
    model.train()
    for _ in scripting.progress(range(steps), desc="XL"):
        if start + segment + 1 > rows.shape[1]:
            start, mems = 0, None
        loss, mems = segment_loss(model, rows, start, segment, mems)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        start += segment
    return losses


# %% [markdown]
# ## The vanilla model: random segments, auxiliary losses
#
# Each step draws `batch` segments of L + 1 characters at random places of the text (L
# predictions each, as XL's steps; nothing passes from one step to the next), and the model is
# told how far training is, so that the intermediate layers' losses stop on the paper's
# schedule (eq 85's conditionals at every position, from every layer, for the next two
# characters).

# %%
def train_vanilla(model, ids, rng):
    optimizer = optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.0)
    length, losses = settings["segment"] + 1, []
    model.train()
    for step in scripting.progress(range(steps), desc="vanilla"):
        starts = rng.integers(0, len(ids) - length, settings["batch"])
        segments = np.stack([ids[s:s + length] for s in starts])
        model.set_training_progress(step / steps)
        out = model(segments, labels=segments)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    return losses


mt.manual_seed(args.seed)
xl = TransfoXLLMHeadModel(TransfoXLConfig(
    vocab_size=len(tokenizer), cutoffs=[], d_model=d, d_embed=d, n_head=settings["n_head"],
    d_head=d // settings["n_head"], d_inner=4 * d, div_val=1, n_layer=settings["n_layer"],
    mem_len=settings["mem_len"], clamp_len=0, dropout=0.0))
mt.manual_seed(args.seed)
vanilla = CharTransformerLMHeadModel(CharTransformerConfig(
    vocab_size=len(tokenizer), n_positions=segment + 1, n_embd=d, n_layer=settings["n_layer"],
    n_head=settings["n_head"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
losses = {"XL": train_xl(xl, train_rows),
          "vanilla + auxiliary losses": train_vanilla(vanilla, ids[:split],
                                                      np.random.default_rng(args.seed))}
fig, ax = plt.subplots(figsize=(6, 4))
plots.loss_curves(ax, range(1, steps + 1), losses,
                  title="training loss (the vanilla one sums its auxiliary losses)")
plots.show(fig, out / "loss.png")


# %% [markdown]
# ## Bits per character against the context
#
# XL reads the held-out text segment by segment with an evaluation memory of M characters per
# layer (`eval_mem_len`): a prediction sees up to M + L characters (M = 0: the fragmented
# context of a segment). The vanilla model predicts each character from exactly the C
# characters before it (a window sliding by one character, its last position).

# %%
def vanilla_bits_per_character(model, ids, context, first, chunk=256):
    """Bits per character of ids[first:], each predicted from the ``context`` before it."""
    model.eval()
    total = 0.0
    with mt.no_grad():
        for begin in range(first, len(ids), chunk):
            targets = np.arange(begin, min(begin + chunk, len(ids)))
            windows = np.stack([ids[t - context:t] for t in targets])
            last = F.log_softmax(model(windows).logits[:, -1], axis=-1).numpy()
            total -= last[np.arange(len(targets)), ids[targets]].sum()
    return float(total) / (len(ids) - first) / math.log(2)


def bits_per_character(model, rows, segment, memory):
    model.config.eval_mem_len = memory
    model.eval()
    total, count, mems = 0.0, 0, None
    with mt.no_grad():
        for start in range(0, rows.shape[1] - segment - 1, segment):
            loss, mems = segment_loss(model, rows, start, segment, mems if memory else None)
            total += loss.item() * rows.shape[0] * segment
            count += rows.shape[0] * segment
    return total / count / math.log(2)


bpc_xl = {m: bits_per_character(xl, val_rows, segment, m) for m in settings["eval_memories"]}
first = max(settings["vanilla_contexts"])
bpc_vanilla = {c: vanilla_bits_per_character(vanilla, ids[split:], c, first)
               for c in settings["vanilla_contexts"]}
print("XL: bits per character by evaluation memory "
      + ", ".join(f"M={m}: {b:.3f}" for m, b in bpc_xl.items()))
print("vanilla + auxiliary losses: bits per character by context "
      + ", ".join(f"C={c}: {b:.3f}" for c, b in bpc_vanilla.items()))
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot([m + segment for m in bpc_xl], list(bpc_xl.values()), "o-",
        label="XL (memory M + segment L)")
ax.plot(list(bpc_vanilla), list(bpc_vanilla.values()), "s-",
        label="vanilla + auxiliary losses (window C)")
ax.set(xlabel="most characters of context a prediction sees", ylabel="bits per character",
       title="held-out bits per character")
ax.legend()
ax.grid(alpha=0.3)
plots.show(fig, out / "bpc_by_context.png")


# %% [markdown]
# ## Evaluation speed: memory against a sliding window
#
# To predict every character from C characters of context, a model without memory runs a window
# of C characters for each prediction (C^2 work per character, attention aside). XL reads L
# characters at a time with a memory of C, so each prediction costs about one position.

# %%
def seconds_per_prediction(model, ids, context, predictions, segment):
    model.eval()
    model.config.eval_mem_len = context
    with mt.no_grad():
        began = time.perf_counter()
        for t in range(predictions):
            model(ids[None, t:t + context])
        sliding = (time.perf_counter() - began) / predictions
        mems = model(ids[None, :context]).mems               # the memory of the first C characters
        began = time.perf_counter()
        for start in range(context, context + predictions, segment):
            mems = model(ids[None, start:start + segment], mems=mems).mems
        memory = (time.perf_counter() - began) / predictions
    return sliding, memory


# %%
speed = {}
for context in settings["speed_contexts"]:
    sliding, memory = seconds_per_prediction(xl, ids[split:], context,
                                             settings["speed_predictions"], segment)
    speed[context] = {"sliding_window_ms": 1e3 * sliding, "memory_ms": 1e3 * memory,
                      "speed_up": sliding / memory}
    print(f"context {context:4d}: sliding window {1e3 * sliding:7.2f} ms/char, memory "
          f"{1e3 * memory:6.2f} ms/char, {sliding / memory:5.1f}x faster")
fig, ax = plt.subplots(figsize=(6, 4))
contexts = list(speed)
ax.plot(contexts, [speed[c]["sliding_window_ms"] for c in contexts], "o-",
        label="sliding window (recompute)")
ax.plot(contexts, [speed[c]["memory_ms"] for c in contexts], "o-", label="XL memory")
ax.set(xlabel="context C (characters)", ylabel="ms per predicted character",
       title="evaluation speed", yscale="log")
ax.legend()
ax.grid(alpha=0.3)
plots.show(fig, out / "eval_speed.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "steps": steps, "config": settings,
    "final_training_loss": {name: curve[-1] for name, curve in losses.items()},
    "bits_per_character": {
        "XL by evaluation memory": {str(m): b for m, b in bpc_xl.items()},
        "vanilla + auxiliary losses by context": {str(c): b for c, b in bpc_vanilla.items()}},
    "eval_speed": {str(c): v for c, v in speed.items()}})
