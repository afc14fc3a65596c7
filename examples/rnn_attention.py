# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # RNN encoder-decoder with attention: Bahdanau vs Luong (section III, eq 1-10)
#
# We teach two attentional RNN encoder-decoders to write numbers in words,
# `4 0 7 1 -> four thousand seventy - one` (or between any two languages of
# `minitorch_nlp.data`), and look at where they attend.
#
# The decoder is a conditional language model trained on the chain rule (eq 2),
#
# $$P(y_t | y_1, \dots, y_{t-1}) = P(y_t | y_1^{t-1}) \quad (2)$$
#
# with teacher forcing, and at test time we search for (eq 1)
#
# $$y^* = \operatorname{argmax} P(y_t | y_1, y_2, \dots, y_{t-1}) \quad (1)$$
#
# greedily and with a beam. The encoder is a bidirectional RNN (eq 3),
# $H_{t+1} = \sigma(U X_{t+1} + W H_t + b)$, whose final states give the summary
# $E = \tanh(V H + b)$ (eq 4) that starts the decoder (eq 5, with the softmax of eq 6 on top).
#
# **Bahdanau et al. (2015)** score each source state $h_j$ with the decoder's *previous* state:
#
# $$e_{ij} = v^\top \tanh(W s_{i-1} + U h_j) \quad (7, 8) \qquad
#   \alpha_{ij} = \frac{\exp(e_{ij})}{\sum_k \exp(e_{ik})} \quad (9) \qquad
#   c_i = \sum_j \alpha_{ij} h_j \quad (10)$$
#
# (the survey's eq 7 writes $e_{tj} = \tanh(h_{i-1}, h_j)$: shorthand for this alignment model).
#
# **Luong et al. (2015)** score with the *current* state $h_t$ (dot, general $h_t^\top W_a h_s$ or
# concat), predict from the attentional state $\tilde h_t = \tanh(W_c [c_t; h_t])$ and feed it
# back at the next step (input feeding); `--window D` switches to local-p attention.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import data, optim, plots, scripting  # noqa: E402
from minitorch_nlp.models.seq2seq import (BahdanauDecoder, LuongDecoder,  # noqa: E402
                                          RNNEncoder, Seq2Seq)

parser = scripting.example_parser(
    "rnn_attention",
    "RNN encoder-decoders with Bahdanau and Luong attention on number translation",
    steps="training steps per model (600; smoke: 40)", backend=False)
parser.add_argument("--src", default="digits", help="source language: digits, en, fr, de, es")
parser.add_argument("--tgt", default="en", help="target language: digits, en, fr, de, es")
parser.add_argument("--high", type=int, default=None, help="numbers 0 .. high-1 (10000)")
parser.add_argument("--batch-size", type=int, default=None, help="pairs per step (64)")
parser.add_argument("--hidden", type=int, default=None, help="RNN size (64)")
parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
parser.add_argument("--luong-score", default="general", choices=["dot", "general", "concat"])
parser.add_argument("--window", type=int, default=None,
                    help="local-p attention with this half-width D (default: global)")
parser.add_argument("--beam", type=int, default=4, help="beam size for the beam-search score")
args = scripting.arguments(parser, smoke=SMOKE)
SETTINGS = {"full": dict(steps=600, high=10_000, batch_size=64, hidden=64, test_limit=None),
            "smoke": dict(steps=40, high=300, batch_size=16, hidden=16, test_limit=60)}
for name, value in SETTINGS["smoke" if args.smoke else "full"].items():
    if getattr(args, name, None) is None:     # an option given on the command line wins
        setattr(args, name, value)
_, out = scripting.start(args)


# %% [markdown]
# ## Data
# Numbers 0 .. high-1 are split once: the held-out numbers never appear in training, so the
# exact-match score measures generalisation to unseen numbers.

# %%
train_numbers, test_numbers = data.train_test_split_numbers(0, args.high, 0.1, seed=args.seed)
if args.test_limit:
    test_numbers = test_numbers[:args.test_limit]
train_pairs = data.number_translation_pairs(train_numbers, args.src, args.tgt)
test_pairs = data.number_translation_pairs(test_numbers, args.src, args.tgt)
src_vocab = data.Vocab.build(source for source, _ in train_pairs)
tgt_vocab = data.Vocab.build(target for _, target in train_pairs)
max_len = max(len(target) for _, target in train_pairs) + 2
print(f"{len(train_pairs)} training pairs, {len(test_pairs)} held out; for example",
      " ".join(train_pairs[0][0]), "->", " ".join(train_pairs[0][1]))


def training_batches(pairs, src_vocab, tgt_vocab, batch_size, seed):
    """An endless stream of shuffled mini-batches, a new order every epoch."""
    epoch = 0
    while True:
        yield from data.make_batches(pairs, src_vocab, tgt_vocab, batch_size, shuffle=True,
                                     seed=seed + epoch)
        epoch += 1


# %% [markdown]
# ## The two models
# Both read the source with a bidirectional encoder (eq 3-4). Bahdanau's decoder is a GRU that
# attends with its previous state before it steps (eq 7-10); Luong's is an LSTM that steps,
# then attends with its new state and feeds $\tilde h_t$ forward.

# %%
def build_model(kind):
    hidden, embed = args.hidden, max(8, args.hidden // 2)
    pad = tgt_vocab.pad_id
    if kind == "bahdanau":
        encoder = RNNEncoder(len(src_vocab), embed, hidden, cell="gru", bidirectional=True,
                             pad_id=src_vocab.pad_id)
        decoder = BahdanauDecoder(len(tgt_vocab), embed, hidden, 2 * hidden, cell="gru",
                                  pad_id=pad)
    else:
        # the dot score needs decoder and encoder states of one size: halve each direction
        per_direction = hidden // 2 if args.luong_score == "dot" else hidden
        encoder = RNNEncoder(len(src_vocab), embed, per_direction, cell="lstm",
                             bidirectional=True, summary_size=hidden, pad_id=src_vocab.pad_id)
        decoder = LuongDecoder(len(tgt_vocab), embed, hidden, 2 * per_direction,
                               score=args.luong_score, window=args.window, cell="lstm",
                               pad_id=pad)
    return Seq2Seq(encoder, decoder, pad_id=pad)


# %% [markdown]
# ## Training: maximise log P(y | x) (eq 2) with teacher forcing

# %%
def train(model, name, batches):
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    losses = []
    model.train()
    progress = scripting.progress(range(args.steps), desc=f"train {name}", mininterval=1.0)
    for _ in progress:
        batch = next(batches)
        loss = model.loss(batch.src, batch.tgt_in, batch.tgt_out, batch.src_lengths)
        optimizer.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        progress.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    return losses


# %% [markdown]
# ## Evaluation: exact match on held-out numbers, greedy and beam search (eq 1)

# %%
def translate(model, pairs, beam_size):
    outputs = []
    for batch in data.make_batches(pairs, src_vocab, tgt_vocab, 256, shuffle=False):
        ids = model.translate(batch.src, batch.src_lengths, bos_id=tgt_vocab.bos_id,
                              eos_id=tgt_vocab.eos_id, max_len=max_len, beam_size=beam_size)
        outputs.extend(tgt_vocab.decode(row.tolist()) for row in ids)
    return outputs


def exact_match(outputs, pairs):
    return float(np.mean([out == list(target) for out, (_, target) in zip(outputs, pairs)]))


# %% [markdown]
# ## Alignments
# Feed each model its own translation of a few held-out numbers and draw the attention weights
# alpha (eq 9): one row per generated word, one column per source token.

# %%
def plot_alignments(model, name, pairs, outputs, path):
    candidates = list(zip(pairs, outputs))
    longest = max(len(source) for (source, _), _ in candidates)
    candidates = [item for item in candidates if len(item[0][0]) == longest]
    shown = candidates[::max(1, len(candidates) // 4)][:4]  # spread over the held-out numbers
    fig, axes = plots.heatmap_panels((1, len(shown)))
    for ax, ((source, _), out) in zip(axes[0], shown):
        batch = data.make_batches([(source, out)], src_vocab, tgt_vocab, 1, shuffle=False)[0]
        with mt.no_grad():
            _, weights = model(batch.src, batch.tgt_in, batch.src_lengths, need_weights=True)
        image = plots.heatmap(ax, weights.numpy()[0], columns=source, rows=out + ["<eos>"],
                              title=" ".join(source), xlabel="source tokens (keys)",
                              ylabel="generated words (queries)", vmax=1.0, colorbar=False)
    plots.shared_colorbar(fig, image, axes)
    fig.suptitle(f"{name}: attention weights alpha (eq 9)")
    plots.show(fig, path)


# %% [markdown]
# ## Run both models

# %%
metrics = {"config": {k: v for k, v in vars(args).items()},
           "train_pairs": len(train_pairs), "test_pairs": len(test_pairs), "models": {}}
histories = {}
for kind in ("bahdanau", "luong"):
    mt.manual_seed(args.seed)
    name = kind if kind == "bahdanau" else f"luong-{args.luong_score}" + (
        f"-local{args.window}" if args.window else "")
    model = build_model(kind)
    batches = training_batches(train_pairs, src_vocab, tgt_vocab, args.batch_size, args.seed)
    began = time.perf_counter()
    histories[name] = train(model, name, batches)
    train_seconds = time.perf_counter() - began
    model.eval()
    greedy = translate(model, test_pairs, 1)
    beam = translate(model, test_pairs, args.beam)
    plot_alignments(model, name, test_pairs, greedy, out / f"alignments_{name}.png")
    tail = histories[name][-max(1, args.steps // 20):]
    metrics["models"][name] = {
        "parameters": model.num_parameters(),
        "train_seconds": round(train_seconds, 2),
        "first_loss": histories[name][0],
        "final_loss": float(np.mean(tail)),
        "exact_match_greedy": exact_match(greedy, test_pairs),
        f"exact_match_beam{args.beam}": exact_match(beam, test_pairs),
        "examples": [{"source": " ".join(s), "target": " ".join(t), "output": " ".join(o)}
                     for (s, t), o in list(zip(test_pairs, greedy))[:5]],
        "loss_history": histories[name],
    }
    summary = {k: v for k, v in metrics["models"][name].items()
               if k not in ("loss_history", "examples")}
    print(name, json.dumps(summary))

# %% [markdown]
# ## Both training losses

# %%
fig, ax = plots.pyplot().subplots(figsize=(6, 3.5))
plots.loss_curves(ax, range(1, args.steps + 1), histories,
                  title="number translation: training loss",
                  ylabel="cross-entropy per token (nats)")
plots.show(fig, out / "losses.png")

# %%
scripting.write_metrics(out, metrics)
