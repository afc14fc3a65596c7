# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # XLNet: permutation language modelling with two-stream attention
#
# *The NLP Cookbook*, section IV-D, equations 25-29 (Yang et al., 2019, "XLNet: Generalized
# Autoregressive Pretraining for Language Understanding").
#
# BERT learns by filling in masked tokens, each independently of the others (eq 25). XLNet
# learns by predicting tokens in a random factorisation order z (eq 26-27): position z_t sees the
# tokens before it in z, wherever they sit in the sentence, so each token is predicted from
# context on both sides and no [MASK] token is ever read. The query stream g (eq 29) predicts
# x_{z_t} knowing its position but not its content; the content stream h carries the content.
#
# We pretrain a small XLNet (permutation LM, K = 6) and a BERT of the same size (masked LM) on
# the docstrings of the Python standard library for the same number of steps, draw the two
# streams' masks for one sampled order, then fine-tune both on a synthetic task from
# `minitorch_nlp.data` that needs both directions: **reverse a string** (each position outputs
# the character at the mirrored position), read as token classification by each model's
# language-model head.
#
# ```
# python examples/xlnet_permutation.py           # the full run: minutes on 2 CPU cores
# python examples/xlnet_permutation.py --smoke   # seconds
# ```
#
# Outputs go to `--out` (default `runs/xlnet_permutation`): `metrics.json`,
# `permutation_masks.png`, `pretraining.png`, `finetuning.png`. In a notebook each figure also
# shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import functional as F  # noqa: E402
from minitorch_nlp import optim, plots, scripting  # noqa: E402
from minitorch_nlp.attention import draw_masks  # noqa: E402
from minitorch_nlp.data import load_text, reverse_task  # noqa: E402
from minitorch_nlp.data.masking import MaskedLMCollator  # noqa: E402
from minitorch_nlp.data.tokenizers import CharTokenizer  # noqa: E402
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM  # noqa: E402
from minitorch_nlp.models.xlnet import (XLNetConfig, XLNetLMHeadModel,  # noqa: E402
                                        permutation_inputs, permutation_lm_loss, sample_orders)

SETTINGS = {
    "full": dict(corpus_chars=200_000, d_model=32, n_layer=2, n_head=4, window=24, batch=16,
                 pretrain_steps=300, lr=3e-3, num_predict=4, task_length=8, task_train=512,
                 task_test=256, finetune_steps=150),
    "smoke": dict(corpus_chars=20_000, d_model=16, n_layer=1, n_head=2, window=12, batch=4,
                  pretrain_steps=4, lr=5e-3, num_predict=2, task_length=6, task_train=32,
                  task_test=16, finetune_steps=4),
}
parser = scripting.example_parser(
    "xlnet_permutation", "XLNet's permutation LM against BERT's masked LM (IV-D)",
    steps="pretraining steps of each model (300; smoke: 4)",
    text="a UTF-8 text file to use instead of the stdlib corpus")
args = scripting.arguments(parser, smoke=SMOKE)
settings, out = scripting.start(args, SETTINGS)
steps = args.steps or settings["pretrain_steps"]
text = load_text(args.text)[:settings["corpus_chars"]]
alphabet = "abcdefghij"
tokenizer = CharTokenizer.train(text + alphabet, special_tokens={
    "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"})   # BERT needs a [MASK]
ids = np.asarray(tokenizer.encode(text, add_special_tokens=False), dtype=np.int64)


# %% [markdown]
# ## Two streams, one order
#
# For an order z of 8 positions whose last 3 steps are predicted: the query stream of a target
# sees the context and the targets before it in z (not itself); the content stream sees itself
# too. (`perm_mask` is 1 where the query stream may *not* look, as HuggingFace takes it.)

# %%
order = sample_orders(1, 8, mt.Generator(args.seed))
perm_mask, _, targets = permutation_inputs(order, 3)
query = perm_mask[0] == 0
content = query | np.eye(8, dtype=bool)
order, targets = order[0].tolist(), targets[0].tolist()
print(f"sampled order {order}, predicted positions {targets}")
plots.show(draw_masks({f"query stream g, z = {order}": query,
                       f"content stream h, targets {targets}": content}, columns=2),
           out / "permutation_masks.png")


# %% [markdown]
# ## Pretraining: permutation LM against masked LM
#
# Both read random windows of the corpus; XLNet predicts the last `num_predict` positions of a
# fresh random order per window (eq 26-27), BERT 15% of the characters, masked (eq 25).

# %%
def build(kind, vocab_size):
    d, layers, heads = settings["d_model"], settings["n_layer"], settings["n_head"]
    if kind == "XLNet":
        return XLNetLMHeadModel(XLNetConfig(vocab_size=vocab_size, d_model=d, n_layer=layers,
                                            n_head=heads, d_inner=4 * d, dropout=0.0,
                                            mem_len=None, pad_token_id=0))
    return BertForMaskedLM(BertConfig(vocab_size=vocab_size, hidden_size=d,
                                      num_hidden_layers=layers, num_attention_heads=heads,
                                      intermediate_size=4 * d, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0,
                                      max_position_embeddings=64))


def pretrain(model, kind, rng):
    optimizer = optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.0)
    collator = MaskedLMCollator.from_tokenizer(tokenizer, seed=int(rng.integers(1e9)))
    losses = []
    for _ in scripting.progress(range(steps), desc=f"pretrain {kind}"):
        starts = rng.integers(0, len(ids) - settings["window"], settings["batch"])
        windows = np.stack([ids[s:s + settings["window"]] for s in starts])
        if kind == "XLNet":
            loss = permutation_lm_loss(model, windows, settings["num_predict"]).loss
        else:
            batch = collator(windows)
            loss = model(batch["input_ids"], labels=batch["labels"]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# %% [markdown]
# ## Fine-tuning: reverse a string
#
# Each position's output is the character at the mirrored position, predicted by the model's
# language-model head from the whole input (XLNet's content stream with no mask).

# %%
def encode_pairs(pairs):
    sources = np.array([tokenizer.encode("".join(s), add_special_tokens=False) for s, _ in pairs])
    targets = np.array([tokenizer.encode("".join(t), add_special_tokens=False) for _, t in pairs])
    return sources, targets


def finetune(model, kind, rng):
    optimizer = optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.0)
    losses = []
    model.train()
    for _ in scripting.progress(range(settings["finetune_steps"]), desc=f"fine-tune {kind}"):
        rows = rng.integers(0, len(train[0]), settings["batch"])
        loss = F.cross_entropy(model(train[0][rows]).logits, train[1][rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with mt.no_grad():
        predicted = model(test[0]).logits.numpy().argmax(-1)
    return losses, float((predicted == test[1]).mean())


length = settings["task_length"]
pairs = reverse_task(settings["task_train"] + settings["task_test"], length, length, alphabet,
                     seed=args.seed)
sources, task_targets = encode_pairs(pairs)
split = settings["task_train"]
train, test = (sources[:split], task_targets[:split]), (sources[split:], task_targets[split:])
print("reverse:", "".join(pairs[0][0]), "->", "".join(pairs[0][1]))

# %% [markdown]
# ## Each model pretrained, or not, then fine-tuned
#
# The same seed, data and steps for every run: the pretrained models against the same
# architectures fine-tuned from random weights.

# %%
pretraining, finetuning, accuracy = {}, {}, {}
for kind in ("XLNet", "BERT"):
    for pretrained in (True, False):
        mt.manual_seed(args.seed)
        rng = np.random.default_rng(args.seed)
        model = build(kind, len(tokenizer))
        name = f"{kind}{'' if pretrained else ' (no pretraining)'}"
        if pretrained:
            pretraining[kind] = pretrain(model, kind, rng)
        finetuning[name], accuracy[name] = finetune(model, name, rng)
        print(f"{name:>24}: reverse-task accuracy {accuracy[name]:.3f}")

plt = plots.pyplot()
fig, ax = plt.subplots(figsize=(6, 4))
plots.loss_curves(ax, range(1, steps + 1), pretraining,
                  title="pretraining: permutation LM (XLNet) and masked LM (BERT)")
plots.show(fig, out / "pretraining.png")
fig, ax = plt.subplots(figsize=(6, 4))
plots.loss_curves(ax, range(1, settings["finetune_steps"] + 1), finetuning,
                  title="fine-tuning on string reversal")
plots.show(fig, out / "finetuning.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "pretrain_steps": steps, "config": settings,
    "order": order, "targets": targets,
    "final_pretraining_loss": {k: v[-1] for k, v in pretraining.items()},
    "reverse_accuracy": accuracy})
