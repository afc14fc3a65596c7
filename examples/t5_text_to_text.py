# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # T5: several tasks, one model, text in and text out
#
# *The NLP Cookbook*, section V-D (Raffel et al., 2020, "Exploring the Limits of Transfer
# Learning with a Unified Text-to-Text Transformer").
#
# T5 casts every task as text to text: the task is named by a prefix of the input, and the
# answer is written by the decoder. One small T5 learns four synthetic tasks at once:
#
# ```
# copy: c a f        ->  c a f
# reverse: c a f     ->  f a c
# sort: c a f        ->  a c f
# add: 4 7 + 5 8     ->  1 0 5
# ```
#
# and is scored on held-out inputs of each task by exact match of its greedy answer.
#
# Then the survey's comparison of architectures (Raffel et al., section 3.2): the same tasks,
# steps and data for an encoder-decoder, a prefix LM (one stack, fully visible over the input,
# causal over the answer) and a decoder-only language model (one stack, causal everywhere), at
# the same parameter count. Raffel et al. found the encoder-decoder best and the prefix LM
# ahead of the causal LM.
#
# `accuracy.png` gives each architecture's exact match per task on 200 held-out inputs per task
# (the full run: the three models at 166 k parameters each, 1200 steps). Which one leads
# depends on the task: an encoder-decoder reads the input once and writes from it, a prefix LM
# reads the input and the answer together in every layer.
#
# ```
# python examples/t5_text_to_text.py            # full run: three models, 1200 steps each
# python examples/t5_text_to_text.py --architectures encoder-decoder   # one of them
# python examples/t5_text_to_text.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/t5_text_to_text`): `metrics.json` (accuracy per task and
# architecture, parameter counts), `accuracy.png` and `loss.png`. In a notebook each figure also
# shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import os  # noqa: E402
import time  # noqa: E402

# One BLAS thread: the matrices are small, and on a busy machine two BLAS threads per process
# spin against each other.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

from minitorch_nlp import optim, plots, scripting  # noqa: E402
from minitorch_nlp.data import (Vocab, addition_task, copy_task, pad_sequences,  # noqa: E402
                                reverse_task, sort_task)
from minitorch_nlp.models.t5 import (ARCHITECTURES, T5Config, T5DecoderOnly,  # noqa: E402
                                     T5ForConditionalGeneration)

SETTINGS = {
    "full": dict(d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2, train=4000, test=200,
                 batch=64, steps=1200, lr=3e-3),
    "smoke": dict(d_model=16, d_kv=4, num_heads=2, d_ff=32, num_layers=1, train=32, test=8,
                  batch=8, steps=10, lr=3e-3),
}
ALPHABET = "abcdefgh"
parser = scripting.example_parser(
    "t5_text_to_text", "One T5 learns copy, reverse, sort and addition by task prefix "
    "(section V-D)", steps="training steps (1200; smoke: 10)")
parser.add_argument("--architectures", nargs="+", choices=ARCHITECTURES,
                    default=list(ARCHITECTURES), help="which architectures to train "
                    "(default: all three)")
args = scripting.arguments(parser, smoke=SMOKE)
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)
steps = args.steps if args.steps is not None else cfg["steps"]


# %% [markdown]
# ## Text to text
#
# Each task gives (input, answer) pairs of tokens; the input is prefixed with the task's name,
# and the answer ends with `</s>`. All four tasks share one vocabulary: the prefixes, the letters,
# the digits and `+`.

# %%
def tasks(n, seed):
    return {"copy": copy_task(n, 2, 6, ALPHABET, seed=seed),
            "reverse": reverse_task(n, 2, 6, ALPHABET, seed=seed + 1),
            "sort": sort_task(n, 2, 6, ALPHABET, seed=seed + 2),
            "add": addition_task(n, 2, seed=seed + 3)}


def encode(pairs, task):
    sources = [vocab.encode([f"{task}:"] + source) for source, _ in pairs]
    targets = [vocab.encode(target) + [vocab.eos_id] for _, target in pairs]
    return sources, targets


train_sets, test_sets = tasks(cfg["train"], args.seed), tasks(cfg["test"], args.seed + 100)
vocab = Vocab([f"{task}:" for task in train_sets] + list(ALPHABET) + list("0123456789+"))
sources, targets = [], []
for task, pairs in train_sets.items():
    task_sources, task_targets = encode(pairs, task)
    sources += task_sources
    targets += task_targets
    print(f"{task}: {' '.join(pairs[0][0])}  ->  {' '.join(pairs[0][1])}")


# %% [markdown]
# ## The model and its training
#
# `T5ForConditionalGeneration` is T5's encoder-decoder: RMS norms before each sub-layer,
# relative position buckets instead of positions, no biases, and the output layer tied to the
# embeddings. With `labels` it shifts the answer right after the decoder's start token (the
# padding id, as in T5) and returns the cross-entropy; padded label positions are -100. A batch
# mixes the four tasks.
#
# `T5DecoderOnly` is the same layers without cross-attention in one stack over
# [input; start; answer], with `prefix_lm_mask` choosing the architecture: the prefix LM sees
# the whole input (and the start token) from every position, the decoder-only LM only what comes
# before. Equal parameter count: the one stack has as many layers as the encoder and the decoder
# together, and what the decoder's cross-attentions held (4 d_model (heads d_kv) per layer)
# goes into wider feed-forward layers (d_ff + heads d_kv), so the counts differ only by a few
# norm gains and one position-bias table.

# %%
def build_model(architecture):
    joined = architecture != "encoder-decoder"
    config = T5Config(
        vocab_size=len(vocab), d_model=cfg["d_model"], d_kv=cfg["d_kv"],
        d_ff=cfg["d_ff"] + (cfg["num_heads"] * cfg["d_kv"] if joined else 0),
        num_layers=cfg["num_layers"] * (2 if joined else 1), num_heads=cfg["num_heads"],
        dropout_rate=0.0, relative_attention_num_buckets=16, relative_attention_max_distance=32,
        pad_token_id=vocab.pad_id, eos_token_id=vocab.eos_id,
        decoder_start_token_id=vocab.pad_id)
    return T5DecoderOnly(config, architecture) if joined else T5ForConditionalGeneration(config)


def batch(sources, targets):
    input_ids, mask = pad_sequences(sources, vocab.pad_id)
    labels, label_mask = pad_sequences(targets, vocab.pad_id)
    return input_ids, mask, np.where(label_mask, labels, -100)


def train(model, name):
    optimizer = optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    rng, losses = np.random.default_rng(args.seed), []
    for _ in scripting.progress(range(steps), desc=f"training the {name}"):
        chosen = rng.integers(len(sources), size=cfg["batch"])
        input_ids, mask, labels = batch([sources[i] for i in chosen],
                                        [targets[i] for i in chosen])
        loss = model(input_ids, mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


models = {name: build_model(name) for name in args.architectures}
parameters = {name: model.num_parameters() for name, model in models.items()}
print(f"{len(sources)} training pairs of 4 tasks; parameters: {parameters}")


# %% [markdown]
# ## Scoring: exact match per task
#
# `generate` runs the encoder once per input and the decoder one token at a time, reusing its
# keys and values; an answer counts only if every token and the `</s>` are right.

# %%
def accuracy(model, sources, targets):
    input_ids, mask = pad_sequences(sources, vocab.pad_id)
    longest = max(len(t) for t in targets)
    generated = model.generate(input_ids, mask, max_new_tokens=longest)[:, 1:]
    right = [list(row[:len(target)]) == target for row, target in zip(generated, targets)]
    return float(np.mean(right))


# %% [markdown]
# ## Training and scoring each architecture

# %%
losses, scores, train_seconds = {}, {}, {}
for name, model in models.items():
    began = time.perf_counter()
    losses[name] = train(model, name)
    train_seconds[name] = time.perf_counter() - began
    model.eval()
    scores[name] = {task: accuracy(model, *encode(pairs, task))
                    for task, pairs in test_sets.items()}
print(f"held-out exact match ({cfg['test']} inputs per task):")
print(f"  {'architecture':16s} {'parameters':>10s} " + " ".join(f"{t:>8s}" for t in test_sets))
for name, by_task in scores.items():
    print(f"  {name:16s} {parameters[name]:10d} "
          + " ".join(f"{by_task[t]:8.3f}" for t in test_sets))

# %% [markdown]
# ## The pictures: exact match per task, then the training losses

# %%
figure, ax = plots.pyplot().subplots(figsize=(7, 4))
width = 0.8 / len(scores)
for i, (name, by_task) in enumerate(scores.items()):
    ax.bar(np.arange(len(test_sets)) + (i - (len(scores) - 1) / 2) * width,
           [by_task[task] for task in test_sets], width, label=name)
ax.set_xticks(np.arange(len(test_sets)), list(test_sets))
ax.set_ylim(0, 1)
ax.set_ylabel("held-out exact match")
ax.set_title("T5's architectures at equal parameter count")
ax.legend()
plots.show(figure, out / "accuracy.png")

figure, ax = plots.pyplot().subplots(figsize=(6, 4))
plots.loss_curves(ax, range(1, steps + 1), {f"{name} (training batch)": values
                                            for name, values in losses.items()},
                  title="T5's architectures on four tasks at once")
plots.show(figure, out / "loss.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "backend": args.backend, "steps": steps,
    "parameters": parameters, "train_seconds": train_seconds,
    "final_loss": {name: float(np.mean(values[-20:])) for name, values in losses.items()},
    "accuracy": scores, "test_pairs_per_task": cfg["test"], "config": cfg,
    "total_seconds": time.perf_counter() - run_start})
