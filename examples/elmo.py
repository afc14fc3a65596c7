# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # ELMo: embeddings from language models
#
# *The NLP Cookbook*, section IV-B, equations 13-17 (Peters et al., 2018, "Deep contextualized
# word representations").
#
# We pretrain a small bidirectional language model (biLM) on the docstrings of the Python
# standard library, freeze it, and use its layers as features for a task that needs context:
# **pseudo-word disambiguation** (Gale, Church & Yarowsky, 1992; Schütze, 1998). Pairs of
# frequent words, say *object* and *string*, are merged everywhere into one token
# `object|string`; the task is to say, for each occurrence, which word stood there. A static
# embedding gives every occurrence of `object|string` the same vector, so it can do no better
# than always guessing the more frequent word; ELMo's vector depends on the sentence. (Both
# classifiers see only the token's own vector. A task model that reads the neighbouring words
# itself has context too; the paper adds ELMo to such task models rather than replacing them.)
#
# ```
# python examples/elmo.py             # the full run: minutes on 2 CPU cores
# python examples/elmo.py --smoke     # seconds: the pipeline end to end on a sliver of text
# ```
#
# Outputs go to `--out` (default `runs/elmo`): `metrics.json`, `loss.png`, `scalar_mix.png`. In
# a notebook each figure also shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import re  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import functional as F  # noqa: E402
from minitorch_nlp import nn, optim, plots, scripting  # noqa: E402
from minitorch_nlp.data import Vocab, load_text, pad_sequences  # noqa: E402
from minitorch_nlp.models.elmo import BiLM, BiLMConfig, ELMo, encode_characters  # noqa: E402

SETTINGS = {
    # corpus characters, longest sentence, biLM size, pairs of merged words, labelled examples
    "full": dict(corpus_chars=None, max_len=24, batch=32, dim=64, num_layers=2, max_chars=20,
                 filters=((1, 16), (2, 32), (3, 64), (4, 64), (5, 64)), min_count=5, lr=3e-3,
                 steps=1000, pairs=8, labelled=3000, max_test=4000, task_steps=300),
    "smoke": dict(corpus_chars=60_000, max_len=12, batch=8, dim=16, num_layers=2, max_chars=20,
                  filters=((1, 8), (2, 8), (3, 16)), min_count=2, lr=1e-2, steps=8, pairs=3,
                  labelled=200, max_test=200, task_steps=20),
}
parser = scripting.example_parser(
    "elmo", "ELMo: a biLM's layers as features for pseudo-word disambiguation (IV-B)",
    steps="biLM pretraining steps (1000; smoke: 8)", backend=False,
    text="a UTF-8 text file to use instead of the stdlib corpus")
args = scripting.arguments(parser, smoke=SMOKE)
cfg, out = scripting.start(args, SETTINGS)
steps = cfg["steps"] if args.steps is None else args.steps
rng = np.random.default_rng(args.seed)
started = time.perf_counter()


# %% [markdown]
# ## The corpus and the pseudo-word task
#
# Word tokens (lower-cased words, numbers and single punctuation marks), sentences cut at
# full stops and blank lines and into chunks of at most `max_len` tokens. Every tenth sentence
# is held out: the biLM never reads it, and the task is scored on it.
#
# The merged pairs are the `2 * pairs` most frequent words of at least five letters, paired by
# frequency rank (1st with 2nd, 3rd with 4th ...), so that both readings of a pseudo-word are
# common.

# %%
TOKEN = re.compile(r"[a-z_][a-z0-9_]*|\d+|[^\sa-z0-9_]")


def sentences_of(text, max_len):
    pieces = re.split(r"(?<=[.!?])\s+|\n\s*\n", text.lower())
    sentences = []
    for piece in pieces:
        tokens = TOKEN.findall(piece)
        for start in range(0, len(tokens), max_len):
            chunk = tokens[start:start + max_len]
            if len(chunk) >= 3:
                sentences.append(chunk)
    return sentences


def choose_pairs(sentences, num_pairs):
    counts = Counter(t for s in sentences for t in s if t.isalpha() and len(t) >= 5)
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:2 * num_pairs]
    return [(ranked[2 * i], ranked[2 * i + 1]) for i in range(len(ranked) // 2)]


def merge_pairs(sentences, pairs):
    """The sentences with each pair's words replaced by one pseudo-word ``a|b``, and the labelled
    occurrences: (sentence, position, pair, 0 for a / 1 for b)."""
    reading = {word: (p, side) for p, pair in enumerate(pairs) for side, word in enumerate(pair)}
    merged, occurrences = [], []
    for i, sentence in enumerate(sentences):
        out = []
        for k, token in enumerate(sentence):
            if token in reading:
                p, side = reading[token]
                occurrences.append((i, k, p, side))
                token = "|".join(pairs[p])
            out.append(token)
        merged.append(out)
    return merged, np.array(occurrences, dtype=np.int64).reshape(-1, 4)


text = load_text(args.text)
if cfg["corpus_chars"] is not None:
    text = text[:cfg["corpus_chars"]]
sentences = sentences_of(text, cfg["max_len"])
train_part = [s for i, s in enumerate(sentences) if i % 10]
test_part = [s for i, s in enumerate(sentences) if not i % 10]
pairs = choose_pairs(train_part, cfg["pairs"])
train_part, train_occ = merge_pairs(train_part, pairs)
test_part, test_occ = merge_pairs(test_part, pairs)
vocab = Vocab.build(train_part, min_count=cfg["min_count"])
print(f"{len(sentences)} sentences, {sum(map(len, sentences))} tokens, vocabulary "
      f"{len(vocab)}; pseudo-words: {', '.join('|'.join(p) for p in pairs)}")
print("a merged sentence:", " ".join(train_part[int(train_occ[0, 0])]))


# %% [markdown]
# ## The biLM (eq 13-14)
#
# A forward LM factorises the probability of a sentence left to right, a backward LM right to
# left:
#
# $$p(t_1, \dots, t_N) = \prod_{k=1}^N p(t_k \mid t_1, \dots, t_{k-1}) \qquad (13)$$
#
# $$p(t_1, \dots, t_N) = \prod_{k=1}^N p(t_k \mid t_{k+1}, \dots, t_N) \qquad (14)$$
#
# Both read the same token vectors $x_k$ (a character CNN with highway layers, so that every
# spelling gets a vector) and share the softmax; they are trained together to maximise the sum
# of both log-likelihoods (`BiLM.loss` returns its negated mean). Batches hold sentences of
# similar length, so that the LSTMs run few padded steps. AdamW's weight decay keeps the
# character CNN's token vectors small: with plain Adam their entries grow to a mean size of
# about 40 within 800 steps (8 with the decay), far beyond the LSTM states' range of about 1.

# %%
def batch_arrays(sentences, vocab, max_chars):
    """Character ids, word ids and lengths of sentences wrapped in <bos> ... <eos>."""
    wrapped = [["<bos>"] + s + ["<eos>"] for s in sentences]
    ids, _ = pad_sequences([vocab.encode(s) for s in wrapped], vocab.pad_id)
    return encode_characters(wrapped, max_chars), ids, np.array([len(s) for s in wrapped])


def length_batches(sentences, batch, rng):
    """Endless batches of sentences of similar length (little padding, so the LSTMs take fewer
    steps), in a random order that changes after each pass over the corpus."""
    while True:
        order = rng.permutation(len(sentences))
        order = order[np.argsort([len(sentences[i]) for i in order], kind="stable")]
        batches = [order[i:i + batch] for i in range(0, len(order) - batch + 1, batch)]
        for b in rng.permutation(len(batches)):
            yield [sentences[i] for i in batches[b]]


def heldout_loss(bilm, sentences):
    """The biLM's mean cross-entropy (nats per prediction, both directions) on ``sentences``."""
    bilm.eval()
    total = count = 0.0
    with mt.no_grad():
        for start in range(0, len(sentences), 64):
            chars, ids, lengths = batch_arrays(sentences[start:start + 64], vocab,
                                               cfg["max_chars"])
            n = 2 * float((lengths - 1).sum())
            total += bilm.loss(chars, ids, lengths).item() * n
            count += n
    return total / count


bilm = BiLM(BiLMConfig(vocab_size=len(vocab), dim=cfg["dim"], num_layers=cfg["num_layers"],
                       filters=cfg["filters"]))
optimizer = optim.AdamW(bilm.parameters(), lr=cfg["lr"], weight_decay=0.1)
batches = length_batches(train_part, cfg["batch"], rng)
pretrain_losses = []
bar = scripting.progress(range(steps), desc="biLM pretraining", unit="step")
for _ in bar:
    loss = bilm.loss(*batch_arrays(next(batches), vocab, cfg["max_chars"]))
    optimizer.zero_grad()
    loss.backward()
    optim.clip_grad_norm_(bilm.parameters(), max_norm=5.0)
    optimizer.step()
    pretrain_losses.append(loss.item())
    bar.set_postfix(loss=f"{np.mean(pretrain_losses[-20:]):.3f}")
heldout = heldout_loss(bilm, test_part[:500])
print(f"biLM held-out cross-entropy {heldout:.3f} nats (perplexity {np.exp(heldout):.1f})")


# %% [markdown]
# ## ELMo features (eq 15-17)
#
# Token $k$ has $L + 1$ representations, the token vector and each biLM layer:
#
# $$R_k = \{x_k^{LM}, \overrightarrow{h}_{k,j}^{LM}, \overleftarrow{h}_{k,j}^{LM}
#         \mid j = 1, \dots, L\} = \{h_{k,j}^{LM} \mid j = 0, \dots, L\} \qquad (15)$$
#
# $$h_{k,j}^{LM} = [\overrightarrow{h}_{k,j}^{LM}; \overleftarrow{h}_{k,j}^{LM}], \qquad
#   h_{k,0}^{LM} = [x_k; x_k] \qquad (16)$$
#
# and a task learns how much of each layer it wants:
#
# $$\text{ELMo}_k^{task} = \gamma^{task} \sum_{j=0}^L s_j^{task} h_{k,j}^{LM},
#   \quad s^{task} = \text{softmax}(w) \qquad (17)$$
#
# The biLM stays frozen, so its layers are computed once per labelled occurrence; the
# classifier trains the scalar mix ($w$, $\gamma$) and a linear layer on top. Each layer is
# layer-normalised before mixing (the paper's option): the token vectors of layer 0 and the
# LSTM states live on different scales, and without it the largest layer drowns the others.

# %%
def layers_at(sentences, occurrences):
    """The L + 1 layer representations (eq 15-16) of each occurrence: (L + 1, n, 2 * dim)."""
    bilm.eval()
    pieces = []
    with mt.no_grad():
        for start in range(0, len(occurrences), 256):
            rows = occurrences[start:start + 256]
            index = {s: b for b, s in enumerate(dict.fromkeys(rows[:, 0].tolist()))}
            chars, _, lengths = batch_arrays([sentences[s] for s in index], vocab,
                                             cfg["max_chars"])
            layers = bilm.layer_representations(chars, lengths).numpy()
            batch_rows = np.array([index[s] for s in rows[:, 0]])
            pieces.append(layers[:, batch_rows, rows[:, 1] + 1])   # + 1: after <bos>
    return np.concatenate(pieces, axis=1)


def pick_pair(logits, pair):
    """The two logits of each example's pair (one output per original word: 2p and 2p + 1)."""
    rows = np.arange(len(pair))[:, None]
    return logits[rows, np.stack([2 * pair, 2 * pair + 1], axis=1)]


def fit_classifier(features_of, head_params, train, test, steps, desc):
    """Full-batch Adam on the 2-way cross-entropy; returns (losses, test accuracy)."""
    optimizer = optim.Adam(head_params, lr=1e-2)
    losses = []
    for _ in scripting.progress(range(steps), desc=desc, unit="step"):
        logits = pick_pair(features_of(train["x"]), train["pair"])
        loss = F.cross_entropy(logits, train["side"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with mt.no_grad():
        predicted = pick_pair(features_of(test["x"]), test["pair"]).numpy().argmax(axis=1)
    return losses, float((predicted == test["side"]).mean())


class PlainClassifier(nn.Module):
    """A learned embedding of the token, trained on the task alone, and a linear layer."""

    def __init__(self, vocab_size, dim, outputs):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        self.out = nn.Linear(dim, outputs)

    def forward(self, ids):
        return self.out(self.embedding(ids))


class ELMoClassifier(nn.Module):
    """ELMo_k^task (eq 17) of the frozen biLM's layers and a linear layer."""

    def __init__(self, elmo, dim, outputs):
        super().__init__()
        self.elmo = elmo
        self.out = nn.Linear(dim, outputs)

    def forward(self, layers):
        return self.out(self.elmo.mix(layers))


# %% [markdown]
# ## The task: which word did the pseudo-word replace?
#
# The labelled occurrences come from the training sentences, the scored ones from the held-out
# sentences. Both classifiers see only the token's own vector: a plain embedding learned on the
# task, or ELMo's mix of the frozen biLM's layers.

# %%
labelled = train_occ[rng.permutation(len(train_occ))[:cfg["labelled"]]]
scored = test_occ[:cfg["max_test"]]
task = {}
for name, rows, part in (("train", labelled, train_part), ("test", scored, test_part)):
    task[name] = {"pair": rows[:, 2], "side": rows[:, 3],
                  "ids": np.array([vocab.encode([part[s][k]])[0] for s, k in rows[:, :2]]),
                  "layers": layers_at(part, rows)}
outputs = 2 * len(pairs)

plain = PlainClassifier(len(vocab), 2 * cfg["dim"], outputs)
plain_losses, plain_acc = fit_classifier(
    plain, list(plain.parameters()), {**task["train"], "x": task["train"]["ids"]},
    {**task["test"], "x": task["test"]["ids"]}, cfg["task_steps"], "plain embeddings")

elmo = ELMo(bilm, layer_norm=True)
classifier = ELMoClassifier(elmo, 2 * cfg["dim"], outputs)
trainable = [p for p in classifier.parameters() if p.requires_grad]
elmo_losses, elmo_acc = fit_classifier(
    classifier, trainable, {**task["train"], "x": mt.tensor(task["train"]["layers"])},
    {**task["test"], "x": mt.tensor(task["test"]["layers"])}, cfg["task_steps"], "ELMo features")

majority = np.array([np.bincount(labelled[labelled[:, 2] == p, 3], minlength=2).argmax()
                     for p in range(len(pairs))])
majority_acc = float((majority[scored[:, 2]] == scored[:, 3]).mean())
weights = elmo.mix.weights().numpy().tolist()
gamma = float(elmo.mix.gamma.item())
print(f"test accuracy on {len(scored)} held-out occurrences: plain embeddings "
      f"{plain_acc:.3f}, ELMo {elmo_acc:.3f} (always the more frequent word: "
      f"{majority_acc:.3f})")
print("scalar mix s_j: " + ", ".join(f"layer {j} {w:.3f}" for j, w in enumerate(weights))
      + f"; gamma {gamma:.3f}")

# %% [markdown]
# ## The pictures: the losses, then the learned scalar mix

# %%
plt = plots.pyplot()
figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
plots.loss_curves(left, range(1, len(pretrain_losses) + 1), {"per step": pretrain_losses},
                  title="biLM pretraining (eq 13 + 14)")
plots.loss_curves(right, range(1, len(plain_losses) + 1),
                  {f"plain embeddings (test acc {plain_acc:.3f})": plain_losses,
                   f"ELMo features (test acc {elmo_acc:.3f})": elmo_losses},
                  title="pseudo-word disambiguation")
plots.show(figure, out / "loss.png")

figure, axis = plt.subplots(figsize=(5, 3.5))
names = ["0: [x; x]"] + [f"{j}: biLSTM {j}" for j in range(1, len(weights))]
axis.bar(names, weights, color="tab:green")
axis.axhline(1 / len(weights), color="grey", linestyle="--", linewidth=1, label="even mix")
axis.set(title=f"learned scalar mix (eq 17), gamma = {gamma:.2f}", ylabel="s_j = softmax(w)_j")
axis.legend()
plots.show(figure, out / "scalar_mix.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "pretrain_steps": steps,
    "pretrain_final_loss": float(np.mean(pretrain_losses[-20:])),
    "heldout_loss": heldout, "heldout_perplexity": float(np.exp(heldout)),
    "vocab_size": len(vocab), "pairs": ["|".join(p) for p in pairs],
    "train_examples": len(labelled), "test_examples": len(scored),
    "accuracy_plain_embeddings": plain_acc, "accuracy_elmo": elmo_acc,
    "accuracy_majority_word": majority_acc,
    "scalar_mix_weights": weights, "gamma": gamma, "seconds": time.perf_counter() - started,
    "config": {key: value for key, value in cfg.items()},
})
