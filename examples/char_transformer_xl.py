# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Transformer-XL: a character language model with a memory
#
# *The NLP Cookbook*, section VIII-B, equations 86-91 (Dai et al., 2019, "Transformer-XL:
# Attentive Language Models Beyond a Fixed-Length Context").
#
# A vanilla Transformer language model reads text in fixed-length segments and forgets
# everything before the current one ("context fragmentation"). Transformer-XL keeps each layer's
# hidden states of the previous segment as a memory, with no gradient through it (eq 87), lets
# the segment attend to the memory (eq 88-89), and scores attention by relative position
# (eq 91) so the memory's positions make sense.
#
# We train two character models of the same size for the same number of steps on the docstrings
# of the Python standard library, reading the text as consecutive segments:
#
# * **XL**: the memory of the previous segment carried from step to step;
# * **no memory**: the same model with `mem_len=0`, a causal Transformer with relative attention
#   that sees only its own segment.
#
# Then: bits per character on held-out text at several evaluation memory lengths (the paper
# evaluates with a longer memory than it trains with), and evaluation speed: predicting each
# character from a context of C characters by re-running a sliding window of C characters per
# prediction (what a vanilla model must do) against XL, which reads a segment at a time and
# reuses the memory.
#
# ```
# python examples/char_transformer_xl.py            # a few minutes on a laptop CPU
# python examples/char_transformer_xl.py --smoke    # seconds
# ```
#
# Outputs go to `--out` (default `runs/char_transformer_xl`): `metrics.json`, `loss.png`,
# `bpc_by_memory.png`, `eval_speed.png`.

# %%
from __future__ import annotations

import math
import time

import numpy as np
from tqdm.auto import tqdm

import minitorch_nlp as mt
from minitorch_nlp import functional as F
from minitorch_nlp import optim, plots, scripting
from minitorch_nlp.data import load_text
from minitorch_nlp.data.tokenizers import CharTokenizer
from minitorch_nlp.models.transformer_xl import TransfoXLConfig, TransfoXLLMHeadModel

SETTINGS = {
    "full": dict(corpus_chars=200_000, batch=8, segment=32, mem_len=32, d_model=32, n_head=4,
                 n_layer=2, lr=3e-3, steps=300, val_chars=8_000, eval_memories=(0, 32, 64, 128),
                 speed_contexts=(32, 64, 128, 256), speed_predictions=64),
    "smoke": dict(corpus_chars=30_000, batch=4, segment=8, mem_len=8, d_model=16, n_head=2,
                  n_layer=1, lr=5e-3, steps=6, val_chars=600, eval_memories=(0, 8, 16),
                  speed_contexts=(8, 16), speed_predictions=8),
}


def parse_args(argv=None):
    parser = scripting.example_parser(
        "char_transformer_xl", __doc__ or "Transformer-XL on the stdlib corpus",
        steps="training steps (300; smoke: 6)",
        text="a UTF-8 text file to use instead of the stdlib corpus")
    return parser.parse_args(argv)


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


def segment_loss(model, rows, start, length, mems):
    """Mean -log P of the characters after [start, start + length) of every row, and the new
    memories."""
    inputs, targets = rows[:, start:start + length], rows[:, start + 1:start + length + 1]
    out = model(inputs, mems=mems)
    return F.nll_loss(out.logits, targets), out.mems


def train(model, rows, settings, steps, label):
    optimizer = optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.0)
    segment, mems, losses, start = settings["segment"], None, [], 0
    model.train()
    for _ in tqdm(range(steps), desc=label, leave=False):
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
# ## Bits per character against the evaluation memory
#
# The held-out text is read segment by segment with an evaluation memory of M characters per
# layer (`eval_mem_len`); M = 0 is the vanilla, fragmented context.

# %%
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
def main(argv=None):
    args = parse_args(argv)
    settings, out = scripting.start(args, SETTINGS)
    steps = args.steps or settings["steps"]
    text = load_text(args.text)[:settings["corpus_chars"]]
    tokenizer = CharTokenizer.train(text)
    ids = np.asarray(tokenizer.encode(text, add_special_tokens=False), dtype=np.int64)
    split = len(ids) - settings["val_chars"]
    train_rows, val_rows = streams(ids[:split], settings["batch"]), streams(ids[split:], 2)

    def build(mem_len):
        mt.manual_seed(args.seed)
        d = settings["d_model"]
        return TransfoXLLMHeadModel(TransfoXLConfig(
            vocab_size=len(tokenizer), cutoffs=[], d_model=d, d_embed=d,
            n_head=settings["n_head"], d_head=d // settings["n_head"], d_inner=4 * d, div_val=1,
            n_layer=settings["n_layer"], mem_len=mem_len, clamp_len=0, dropout=0.0))

    models = {"XL": build(settings["mem_len"]), "no memory": build(0)}
    losses = {name: train(model, train_rows, settings, steps, name)
              for name, model in models.items()}
    bpc = {name: {m: bits_per_character(model, val_rows, settings["segment"], m)
                  for m in settings["eval_memories"]}
           for name, model in models.items()}
    for name, row in bpc.items():
        print(f"{name:>9}: bits per character by evaluation memory "
              + ", ".join(f"M={m}: {b:.3f}" for m, b in row.items()))

    speed = {}
    for context in settings["speed_contexts"]:
        sliding, memory = seconds_per_prediction(models["XL"], ids[split:], context,
                                                 settings["speed_predictions"],
                                                 settings["segment"])
        speed[context] = {"sliding_window_ms": 1e3 * sliding, "memory_ms": 1e3 * memory,
                          "speed_up": sliding / memory}
        print(f"context {context:4d}: sliding window {1e3 * sliding:7.2f} ms/char, memory "
              f"{1e3 * memory:6.2f} ms/char, {sliding / memory:5.1f}x faster")

    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    plots.loss_curves(ax, range(1, steps + 1), losses, title="training on consecutive segments")
    plots.save(fig, out / "loss.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, row in bpc.items():
        ax.plot(list(row), list(row.values()), "o-", label=name)
    ax.set(xlabel="evaluation memory M (characters per layer)", ylabel="bits per character",
           title="held-out bits per character")
    ax.legend()
    ax.grid(alpha=0.3)
    plots.save(fig, out / "bpc_by_memory.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    contexts = list(speed)
    ax.plot(contexts, [speed[c]["sliding_window_ms"] for c in contexts], "o-",
            label="sliding window (recompute)")
    ax.plot(contexts, [speed[c]["memory_ms"] for c in contexts], "o-", label="XL memory")
    ax.set(xlabel="context C (characters)", ylabel="ms per predicted character",
           title="evaluation speed", yscale="log")
    ax.legend()
    ax.grid(alpha=0.3)
    plots.save(fig, out / "eval_speed.png")
    return scripting.write_metrics(out, {
        "smoke": args.smoke, "seed": args.seed, "steps": steps, "config": settings,
        "final_training_loss": {name: l[-1] for name, l in losses.items()},
        "bits_per_character": {name: {str(m): b for m, b in row.items()}
                               for name, row in bpc.items()},
        "eval_speed": {str(c): v for c, v in speed.items()}})


if __name__ == "__main__":
    main()
