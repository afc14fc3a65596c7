# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # The Transformer: translating numbers from English to French
#
# *The NLP Cookbook*, section IV-A, equations 11-12 (Vaswani et al., 2017, "Attention Is All
# You Need").
#
# A small encoder-decoder Transformer learns to translate numbers written in English words into
# French words, for every number from 0 to 999 999:
#
# ```
# seven hundred seventy - seven thousand eighty - one
#   -> sept cent soixante - dix - sept mille quatre - vingt - un
# ```
#
# French is not English word by word: 70 is "sixty-ten", 80 "four-twenties", "et" appears in 21,
# 31 ... 71 but not in 81, "vingt" and "cent" take an "s" only at the very end of the number.
# Ten per cent of the numbers are **held out**: the model never sees them in training, and it
# is scored on them by exact match of the whole sentence, so it has to learn the rules, not the
# table.
#
# ```
# python examples/transformer_translation.py            # the full run: minutes on 2 CPU cores
# python examples/transformer_translation.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/transformer_translation`): `metrics.json`, `loss.png`
# and the per-head attention maps `attention_encoder.png`, `attention_decoder.png`,
# `attention_cross.png`. In a notebook each figure also shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import os  # noqa: E402
import time  # noqa: E402

# One BLAS thread: the matrices here are small, and on a busy machine two BLAS threads per
# process spin against each other and run many times slower than one. Set OPENBLAS_NUM_THREADS
# yourself to override.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import optim, plots, scripting  # noqa: E402
from minitorch_nlp.data import (LANGUAGES, MAX_NUMBER, Vocab, make_batches,  # noqa: E402
                                number_tokens, number_translation_pairs,
                                train_test_split_numbers)
from minitorch_nlp.models.transformer import Transformer  # noqa: E402

SETTINGS = {
    "full": dict(high=MAX_NUMBER + 1, d_model=64, num_heads=4, num_layers=2, d_ff=256,
                 dropout=0.0, batch=64, steps=3000, warmup=1000, lr_factor=0.5, eval_every=500,
                 validation=500, test=2000, beam_test=500),
    "smoke": dict(high=MAX_NUMBER + 1, d_model=16, num_heads=2, num_layers=1, d_ff=32,
                  dropout=0.1, batch=16, steps=20, warmup=10, lr_factor=1.0, eval_every=10,
                  validation=20, test=50, beam_test=10),
}
parser = scripting.example_parser(
    "transformer_translation",
    "A Transformer translates numbers between languages (section IV-A, eq 11-12)",
    steps="training steps (3000; smoke: 20)")
parser.add_argument("--src", default="en", choices=("digits",) + LANGUAGES,
                    help="source language (en)")
parser.add_argument("--tgt", default="fr", choices=("digits",) + LANGUAGES,
                    help="target language (fr)")
parser.add_argument("--norm-first", action="store_true",
                    help="pre-LN layers instead of the paper's post-LN")
args = scripting.arguments(parser, smoke=SMOKE)
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)
steps = args.steps if args.steps is not None else cfg["steps"]
src, tgt = args.src, args.tgt


# %% [markdown]
# ## Data: held-out numbers
#
# `train_test_split_numbers` puts 10% of 0 .. 999 999 aside for the test; a further few hundred
# numbers are kept for validation while training. Training batches are drawn afresh at every
# step from the remaining numbers. Source and target share one vocabulary (English and French
# words, and the hyphen "-" that the tokenizer keeps as a token of its own), because the model
# shares one embedding matrix between encoder, decoder and output, as the paper does with its
# joint byte-pair vocabulary.

# %%
def build_data(cfg, src, tgt, seed):
    train, test = train_test_split_numbers(0, cfg["high"], test_fraction=0.1, seed=seed)
    rng = np.random.default_rng(seed)
    validation = rng.choice(train, cfg["validation"], replace=False)
    kept = np.ones(cfg["high"], dtype=bool)
    kept[validation] = False
    train = train[kept[train]]
    test = rng.choice(test, min(cfg["test"], test.size), replace=False)
    # every word of 0 .. 999 999 occurs in some n, n * 1000 or n * 1001 with n < 1000
    covering = [m for n in range(1000) for m in (n, n * 1000, n * 1001) if m < cfg["high"]]
    vocab = Vocab(sorted({token for number in covering for lang in (src, tgt)
                          for token in number_tokens(number, lang)}))
    return train, validation, test, vocab


train_numbers, validation, test, vocab = build_data(cfg, src, tgt, args.seed)


def batch_of(numbers):
    pairs = number_translation_pairs(numbers.tolist(), src, tgt)
    return make_batches(pairs, vocab, vocab, len(pairs), shuffle=False)[0]


# %% [markdown]
# ## The model
#
# Inside every attention layer, each head compares its queries with its keys and mixes the
# values with the resulting weights. The survey writes it as
#
# $$W_{SM} = \text{softmax}(Q \cdot K^T) \quad (11)$$
#
# $$Z_{Att} = \text{Attention}(Q, K, V) = \text{softmax}(Q \cdot K^T) \cdot V = W_{SM} \cdot V
# \quad (12)$$
#
# and the paper divides the scores by $\sqrt{d_k}$, the size of a head, which is what
# `minitorch_nlp` computes: $\text{softmax}(Q K^T / \sqrt{d_k})\, V$. The encoder's heads attend
# over the English words (self-attention), the decoder's heads over the French words written so
# far (causal self-attention) and over the English words (cross-attention).
#
# `Transformer` is the paper's model, smaller (d_model = 64, 4 heads, 2 + 2 layers, d_ff = 256,
# 0.24 M parameters): post-LN layers, sinusoidal positions, embeddings scaled by
# $\sqrt{d_{model}}$ and tied to the output layer, label smoothing 0.1, and Adam with the
# paper's warm-up then inverse-square-root learning rate ("Noam" schedule). One departure: no
# dropout. 3000 steps of 64 numbers see 192 000 examples drawn from 900 000 training numbers, so
# the model meets most numbers once or never: there is nothing to overfit, and dropout only
# slows learning down.

# %%
model = Transformer(len(vocab), d_model=cfg["d_model"], num_heads=cfg["num_heads"],
                    num_encoder_layers=cfg["num_layers"], num_decoder_layers=cfg["num_layers"],
                    d_ff=cfg["d_ff"], dropout=cfg["dropout"], max_len=64,
                    norm_first=args.norm_first, label_smoothing=0.1, pad_id=vocab.pad_id,
                    bos_id=vocab.bos_id, eos_id=vocab.eos_id)
print(f"{src} -> {tgt}: {len(train_numbers)} training numbers, {len(test)} held-out test "
      f"numbers, vocabulary {len(vocab)}, {model.num_parameters()} parameters")


# %% [markdown]
# ## Exact match on held-out numbers
#
# Greedy decoding (and beam search, beam 4, length penalty 0.6 as in the paper) one token at a
# time with the key/value cache. A translation counts only if every word is right.

# %%
def translate(numbers, beam_size=1, chunk=500):
    """The model's translations (lists of tokens) of ``numbers``."""
    translations = []
    for start in range(0, len(numbers), chunk):
        batch = batch_of(numbers[start:start + chunk])
        max_len = batch.tgt_out.shape[1] + 2
        if beam_size == 1:
            ids = model.greedy_decode(batch.src, batch.src_mask, max_len=max_len)
        else:
            ids, _ = model.beam_decode(batch.src, batch.src_mask, beam_size=beam_size,
                                       max_len=max_len)
        translations += [vocab.decode(row) for row in ids.tolist()]
    return translations


def exact_match(numbers, beam_size=1):
    predictions = translate(numbers, beam_size)
    wrong = [(int(n), " ".join(p)) for n, p in zip(numbers, predictions)
             if p != number_tokens(int(n), tgt)]
    return 1.0 - len(wrong) / len(numbers), wrong


# %% [markdown]
# ## Training

# %%
optimizer = optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
schedule = optim.NoamLR(optimizer, d_model=cfg["d_model"], warmup_steps=cfg["warmup"],
                        factor=cfg["lr_factor"])
rng = np.random.default_rng(args.seed + 1)
losses, curve = [], []
began, began_cpu = time.perf_counter(), time.process_time()
bar = scripting.progress(range(1, steps + 1), desc="training", unit="step")
for step in bar:
    batch = batch_of(rng.choice(train_numbers, cfg["batch"]))
    loss = model.loss(batch.src, batch.tgt_in, batch.tgt_out, batch.src_mask, batch.tgt_mask)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    schedule.step()
    losses.append(loss.item())
    if step % cfg["eval_every"] == 0 or step == steps:
        accuracy, _ = exact_match(validation)
        curve.append((step, accuracy))
        bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}", val_exact=f"{accuracy:.3f}")
train_seconds = time.perf_counter() - began
train_cpu_seconds = time.process_time() - began_cpu
print(f"trained {steps} steps in {train_seconds:.0f} s ({steps / train_seconds:.1f} steps/s, "
      f"{train_cpu_seconds:.0f} s of CPU time)")

figure, (left, right) = plots.pyplot().subplots(1, 2, figsize=(11, 4))
plots.loss_curves(left, range(1, len(losses) + 1), {"training batch": losses},
                  title=f"Transformer, numbers from {src} to {tgt}: training loss",
                  ylabel="label-smoothed cross-entropy (nats)")
curve_steps, curve_accuracy = zip(*curve)
right.plot(curve_steps, curve_accuracy, "o-", color="tab:orange", label="validation exact match")
right.set(xlabel="step", ylabel="exact match", ylim=(0, 1.02), title="held-out validation numbers")
right.grid(alpha=0.3)
right.legend()
plots.show(figure, out / "loss.png")

# %% [markdown]
# ## The held-out test
#
# Greedy decoding on every test number, beam search (beam 4) on the first few hundred; the first
# errors are printed.

# %%
began = time.perf_counter()
greedy, wrong = exact_match(test)
beam_numbers = test[:cfg["beam_test"]]
beam, _ = exact_match(beam_numbers, beam_size=4)
greedy_on_beam_numbers, _ = exact_match(beam_numbers)
eval_seconds = time.perf_counter() - began
print(f"held-out exact match: greedy {greedy:.4f} on {len(test)} numbers; on the first "
      f"{len(beam_numbers)}: beam 4 {beam:.4f}, greedy {greedy_on_beam_numbers:.4f}")
for number, prediction in wrong[:10]:
    print(f"  {number}: {' '.join(number_tokens(number, tgt))!r} <- got {prediction!r}")


# %% [markdown]
# ## Each head's attention
#
# The maps come from the explicit path `need_weights=True` (eq 11: the softmax weights of every
# head); the model itself always runs the fused attention kernel. The cross-attention heads of
# the last decoder layer show which English words each French word was read from.

# %%
def plot_heads(maps, rows, cols, title, path, xlabel, ylabel):
    """One heat map per (layer, head): ``maps[layer]`` is (heads, queries, keys)."""
    layers, heads = len(maps), maps[0].shape[0]
    figure, axes = plots.heatmap_panels((layers, heads), panel_size=(2.8, 2.8))
    for layer in range(layers):
        for head in range(heads):
            image = plots.heatmap(axes[layer, head], maps[layer][head], columns=cols, rows=rows,
                                  title=f"layer {layer + 1}, head {head + 1}", vmax=1.0,
                                  xlabel=xlabel if layer == layers - 1 else "",
                                  ylabel=ylabel if head == 0 else "", colorbar=False)
    plots.shared_colorbar(figure, image, axes)
    figure.suptitle(title)
    plots.show(figure, path)


example = int(test[np.argmax([len(number_tokens(int(n), tgt)) for n in test[:200]])])
source = number_tokens(example, src)
output = translate(np.array([example]))[0]
model.eval()
with mt.no_grad():
    _, weights = model(np.array([vocab.encode(source)]),
                       np.array([[vocab.bos_id] + vocab.encode(output)]), need_weights=True)
rows = ["<bos>"] + output
plot_heads([w.numpy()[0] for w in weights["encoder"]], source, source,
           f"encoder self-attention: {example}", out / "attention_encoder.png",
           "key: source word", "query: source word")
plot_heads([w["self"].numpy()[0] for w in weights["decoder"]], rows, rows,
           "decoder causal self-attention", out / "attention_decoder.png",
           "key: output word so far", "query: output word")
plot_heads([w["cross"].numpy()[0] for w in weights["decoder"]], rows, source,
           "decoder cross-attention (row: predicting the next output word)",
           out / "attention_cross.png", "key: source word", "query: output word")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "backend": args.backend,
    "task": f"{src} -> {tgt}, numbers 0..{cfg['high'] - 1}",
    "steps": steps, "train_seconds": train_seconds,
    "steps_per_second": steps / train_seconds, "train_cpu_seconds": train_cpu_seconds,
    "eval_seconds": eval_seconds,
    "parameters": model.num_parameters(), "vocab_size": len(vocab),
    "train_numbers": int(len(train_numbers)), "test_numbers": int(len(test)),
    "final_loss": float(np.mean(losses[-50:])),
    "test_exact_match_greedy": greedy,
    "test_exact_match_beam4": beam, "beam_test_numbers": int(len(beam_numbers)),
    "test_exact_match_greedy_same_numbers": greedy_on_beam_numbers,
    "validation_curve": curve, "errors": wrong[:50],
    "attention_example": example, "norm_first": args.norm_first, "config": cfg,
    "total_seconds": time.perf_counter() - run_start,
})
