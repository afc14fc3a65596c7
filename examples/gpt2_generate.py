# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # GPT-2: generating text from a checkpoint in HuggingFace's format
#
# *The NLP Cookbook*, section V-A (Radford et al., 2019, "Language Models are Unsupervised
# Multitask Learners").
#
# GPT-2 is GPT-1's language model (eq 18-21) with LayerNorm moved to the input of each block, a
# final LayerNorm, and residual projections initialised smaller, N(0, (0.02 / sqrt(2 n_layer))^2),
# so that the residual stream does not grow with depth. This example
#
# 1. trains a small character-level GPT-2 on the standard library's docstrings for a few minutes
#    (or loads `--checkpoint DIR`, any HuggingFace-format `GPT2LMHeadModel` directory with its
#    tokenizer files, e.g. a real GPT-2 saved by `transformers`);
# 2. writes it with `save_pretrained` (HuggingFace's `config.json` + `model.safetensors`) and
#    reads it back with `from_pretrained`, checking that the logits are identical;
# 3. continues a prompt greedily, then by sampling with a temperature, top-k and top-p (nucleus)
#    filtering and CTRL's repetition penalty, streaming the tokens as they are produced;
# 4. measures what the key/value cache saves: each step feeds one token instead of the whole
#    sequence.
#
# ```
# python examples/gpt2_generate.py                          # train, then generate (minutes)
# python examples/gpt2_generate.py --checkpoint DIR         # generate from a saved model
# python examples/gpt2_generate.py --smoke                  # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/gpt2_generate`): the checkpoint in `model/`,
# `metrics.json`, `samples.txt`, `loss.png` (when training) and `sampling.png` (how each rule
# reshapes the next-token distribution). In a notebook each figure also shows below the cell that
# makes it. Greedy decoding tends to loop ("the set of the set of the ..."), which is what sampling
# and the repetition penalty are for; the cache's saving grows with the length generated.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

# One BLAS thread: the matrices here are small, and on a busy machine two BLAS threads per
# process spin against each other and run many times slower than one. Set OPENBLAS_NUM_THREADS
# yourself to override.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import decoding, plots, scripting, training  # noqa: E402
from minitorch_nlp.data import load_text, stdlib_corpus  # noqa: E402
from minitorch_nlp.data.tokenizers import load_tokenizer  # noqa: E402
from minitorch_nlp.models.gpt import GPT2LMHeadModel  # noqa: E402

SETTINGS = {
    "full": dict(corpus_chars=None, n_embd=128, n_layer=4, n_head=4, n_positions=128,
                 dropout=0.0, steps=1000, lr=2e-3, batch=16, new_tokens=100),
    "smoke": dict(corpus_chars=20_000, n_embd=16, n_layer=1, n_head=2, n_positions=32,
                  dropout=0.0, steps=10, lr=2e-3, batch=8, new_tokens=12),
}
parser = scripting.example_parser(
    "gpt2_generate", "GPT-2 generation from a HuggingFace-format checkpoint (section V-A)",
    steps="training steps (1000; smoke: 10)",
    text="a text file to train on instead of the built-in corpus")
parser.add_argument("--checkpoint", help="a HuggingFace GPT2LMHeadModel directory to load "
                                         "instead of training one")
parser.add_argument("--prompt", default="Return the ", help="the text to continue")
args = scripting.arguments(parser, smoke=SMOKE)
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)
metrics = {"smoke": args.smoke, "seed": args.seed, "backend": args.backend}


# %% [markdown]
# ## A small GPT-2, trained briefly
#
# The run behind `minitorch-nlp demo` (`minitorch_nlp.training.LanguageModelRun`): one token per
# character, so no word is ever out of the vocabulary; the model is
# `GPT2LMHeadModel(GPTConfig.gpt2(...))`, trained with AdamW on random windows of the text, and
# `model(ids, labels=ids)` returns the mean next-character cross-entropy, $-L_1$ per character
# (eq 18).

# %%
if args.checkpoint:
    model, tokenizer = mt.from_pretrained(args.checkpoint), load_tokenizer(args.checkpoint)
    if not isinstance(model, GPT2LMHeadModel):
        sys.exit(f"{args.checkpoint} holds a {type(model).__name__}, not a GPT2LMHeadModel")
else:
    steps = args.steps if args.steps is not None else cfg["steps"]
    text = load_text(args.text) if args.text else stdlib_corpus(cfg["corpus_chars"])
    began = time.perf_counter()
    run = training.LanguageModelRun(training.TrainConfig(
        max_chars=None, n_layer=cfg["n_layer"], n_head=cfg["n_head"], n_embd=cfg["n_embd"],
        block_size=cfg["n_positions"], dropout=cfg["dropout"], batch_size=cfg["batch"],
        steps=steps, lr=cfg["lr"], warmup_steps=max(1, steps // 20), eval_every=steps,
        eval_batches=2, seed=args.seed, backend=mt.get_backend().name), text=text)
    run.train()
    model, tokenizer, losses = run.model, run.tokenizer, run.history["loss"]
    metrics.update(steps=steps, train_seconds=time.perf_counter() - began,
                   final_loss=float(np.mean(losses[-50:])))
    print(f"trained {steps} steps in {metrics['train_seconds']:.0f} s, loss "
          f"{metrics['final_loss']:.3f}")
    figure, axis = plots.pyplot().subplots(figsize=(6, 3.5))
    plots.loss_curves(axis, range(1, len(losses) + 1), {"training batch": losses},
                      title="GPT-2 training", ylabel="cross-entropy per character (nats)")
    plots.show(figure, out / "loss.png")
model.eval()
prompt_ids = np.array([tokenizer.encode(args.prompt)])
new_tokens = min(cfg["new_tokens"], model.config.n_positions - prompt_ids.shape[1])


# %% [markdown]
# ## HuggingFace's format, both ways
#
# `mt.save_pretrained` writes GPT-2's keys and layouts: HuggingFace's `Conv1D` stores each
# weight as (in, out), the transpose of our `Linear`, and holds the query, key and value
# projections side by side in one `c_attn`; the key map in `minitorch_nlp/models/gpt.py` lists
# every tensor. `transformers.GPT2LMHeadModel.from_pretrained` reads the directory as it is.

# %%
mt.save_pretrained(model, out / "model")
tokenizer.save(out / "model")
loaded = mt.from_pretrained(out / "model")
metrics["round_trip_identical"] = bool(np.array_equal(loaded(prompt_ids).logits.numpy(),
                                                      model(prompt_ids).logits.numpy()))
model = loaded
print(f"save_pretrained -> from_pretrained: identical logits: "
      f"{metrics['round_trip_identical']} ({model.num_parameters()} parameters)")


# %% [markdown]
# ## Sampling rules
#
# At every step the model gives logits for the next token; `decoding.next_tokens` turns them
# into a choice: greedy takes the argmax; sampling divides the logits by a temperature T (T < 1
# sharpens), keeps the k most likely tokens (top-k) or the smallest set of most likely tokens
# whose probability reaches p (top-p, nucleus), and draws one. CTRL's repetition penalty first
# lowers the logits of tokens already in the text. The picture shows each rule's distribution
# for the prompt.

# %%
with mt.no_grad():
    logits = model(prompt_ids).logits.numpy()[:, -1]
rules = {"softmax(logits)": logits,
         "temperature 0.7": decoding.apply_temperature(logits, 0.7),
         "top-k, k = 5": decoding.top_k_filter(logits, 5),
         "top-p, p = 0.8": decoding.top_p_filter(logits, 0.8)}
shown = 20
order = np.argsort(-logits[0])[:shown]
labels = [plots.visible(tokenizer.decode([int(i)])) for i in order]   # " " drawn as "␣"
figure, axes = plots.pyplot().subplots(1, len(rules), figsize=(4 * len(rules), 3.2), sharey=True)
for axis, (title, values) in zip(axes, rules.items()):
    probabilities = np.exp(values[0] - values[0].max())
    probabilities /= probabilities.sum()
    axis.bar(range(shown), probabilities[order], color="tab:blue")
    axis.set_xticks(range(shown), labels, fontsize=8)
    axis.set_title(title, fontsize=9)
    axis.set_xlabel("next token (the likeliest first)", fontsize=8)
axes[0].set_ylabel(f"P(next token | {plots.visible(tokenizer.decode(prompt_ids[0]))})",
                   fontsize=8)
plots.show(figure, out / "sampling.png")

# %% [markdown]
# One continuation per decoding setting, each printed token by token as it is made.

# %%
decoding_settings = {
    "greedy": dict(),
    "temperature 0.8": dict(do_sample=True, temperature=0.8),
    "top-k 10": dict(do_sample=True, top_k=10),
    "top-p 0.9": dict(do_sample=True, top_p=0.9),
    "top-p 0.9, repetition penalty 1.3": dict(do_sample=True, top_p=0.9, repetition_penalty=1.3),
}
samples = {}
for name, options in decoding_settings.items():
    print(f"--- {name}\n{tokenizer.decode(prompt_ids[0])}", end="", flush=True)
    ids = model.generate(prompt_ids, new_tokens, generator=mt.Generator(args.seed),
                         streamer=lambda new: print(tokenizer.decode([int(new[0])]), end="",
                                                    flush=True),
                         **options)
    print()
    samples[name] = tokenizer.decode(ids[0])


# %% [markdown]
# ## The key/value cache
#
# Without a cache, step t runs the whole sequence of t tokens through every block again; with
# it, each block keeps the keys and values of the tokens it has seen, and a step feeds one token
# and attends from it to the cached keys. Both give the same tokens.

# %%
seconds, outputs = {}, {}
for use_cache in (True, False):
    began = time.perf_counter()
    outputs[use_cache] = model.generate(prompt_ids, new_tokens, use_cache=use_cache)
    seconds[use_cache] = time.perf_counter() - began
assert np.array_equal(outputs[True], outputs[False]), "the cache changed the tokens"
metrics["cache"] = {"cached_seconds": seconds[True], "uncached_seconds": seconds[False],
                    "speedup": seconds[False] / seconds[True], "new_tokens": new_tokens}
print(f"{new_tokens} tokens: {metrics['cache']['cached_seconds']:.3f} s with the cache, "
      f"{metrics['cache']['uncached_seconds']:.3f} s without ({metrics['cache']['speedup']:.1f}x)")

# %%
(out / "samples.txt").write_text("".join(f"--- {name}\n{text}\n" for name, text in samples.items()))
metrics.update(samples=samples, config=model.config.to_hf(),
               total_seconds=time.perf_counter() - run_start)
scripting.write_metrics(out, metrics)
