# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # GPT-1: generative pre-training, then fine-tuning with an auxiliary LM loss
#
# *The NLP Cookbook*, section IV-B, equations 18-24 (Radford et al., 2018, "Improving Language
# Understanding by Generative Pre-Training").
#
# 1. **Pre-training.** A small GPT-1 (post-LN decoder blocks, learned positions, output layer
#    tied to the embeddings) learns to predict the next character of the built-in corpus, the
#    Python standard library's docstrings (eq 18-21).
# 2. **Fine-tuning.** The same network then learns a classification task: *is this snippet of
#    text genuine, or have four of its letters been replaced by random ones?* The snippet is
#    wrapped in a start and an extract token, `<s> snippet <e>`, and a linear layer reads the
#    extract token's final state (eq 22). Three runs start from the same classifier weights and
#    see the same batches:
#    - pre-trained, loss L_2 + 0.5 L_1 (eq 23-24, the paper's recipe, lambda = 0.5);
#    - pre-trained, loss L_2 alone (no auxiliary LM loss);
#    - not pre-trained (random weights), L_2 + 0.5 L_1: what pre-training is worth.
#
# ```
# python examples/gpt1_finetune.py            # full run, a few minutes on 2 CPU cores
# python examples/gpt1_finetune.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/gpt1_finetune`): `metrics.json`, `pretraining.png`
# (the LM loss) and `finetuning.png` (task loss and held-out accuracy of the three runs).
#
# The model is the paper's, much smaller (3 layers, 64 wide, 4 heads, 64 positions, 0.16M
# parameters), and trained without dropout: at this size it underfits the corpus, and dropout
# (0.1 in the paper) only slowed pre-training down (1.99 against 1.59 nats per character after
# 2000 steps). The classifier keeps the paper's dropout of 0.1 on h_l^m.
#
# One run of the full setting (seed 0, 5.5 minutes on a busy 2-core machine: pre-training to
# 1.59 nats per character in 193 s) reached a held-out accuracy of 0.822 with the auxiliary
# loss, 0.791 without it, and 0.678 without pre-training: one seed, so read the gap between the
# first two as a tendency, as in the paper (whose ablation finds the auxiliary loss helps the
# larger datasets), not as a measurement.

# %%
from __future__ import annotations

import os
import time

# One BLAS thread: the matrices here are small, and on a busy machine two BLAS threads per
# process spin against each other and run many times slower than one. Set OPENBLAS_NUM_THREADS
# yourself to override.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import optim, plots, scripting  # noqa: E402
from minitorch_nlp.data import load_text, stdlib_corpus  # noqa: E402
from minitorch_nlp.data.tokenizers import CharTokenizer  # noqa: E402
from minitorch_nlp.models.gpt import (GPTConfig, GPTForFineTuning, GPTLMHeadModel,  # noqa: E402
                                      GPTModel, TaskFormatter)

SETTINGS = {
    "full": dict(corpus_chars=None, n_embd=64, n_layer=3, n_head=4, n_positions=64,
                 pretrain_steps=2000, pretrain_lr=2e-3, batch=32, finetune_steps=600,
                 finetune_lr=1e-3, train_examples=5000, test_examples=1000, snippet=40, typos=4,
                 eval_every=50),
    "smoke": dict(corpus_chars=20_000, n_embd=16, n_layer=1, n_head=2, n_positions=32,
                  pretrain_steps=10, pretrain_lr=2e-3, batch=8, finetune_steps=6,
                  finetune_lr=1e-3, train_examples=32, test_examples=32, snippet=16, typos=2,
                  eval_every=3),
}
TASK_TOKENS = ("<s>", "<$>", "<e>")    # start, delimiter, extract (the delimiter is unused here)
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def parse_args(argv=None):
    parser = scripting.example_parser(
        "gpt1_finetune", "GPT-1 pre-training and fine-tuning with and without the auxiliary LM "
        "loss (eq 18-24)", text="a text file to use instead of the built-in corpus")
    parser.add_argument("--lm-coef", type=float, default=0.5,
                        help="lambda of eq 24 in the auxiliary-loss runs (0.5, the paper's)")
    return parser.parse_args(argv)


# %% [markdown]
# ## Data: characters of the standard library's docstrings
#
# A character-level vocabulary keeps the model tiny. The task's three special tokens are added
# to it; pre-training never sees them, so their embeddings stay random until fine-tuning, as the
# paper's newly added start, delimiter and extract tokens. The last 10% of the text is held out
# of pre-training: the task's snippets come from it, the training snippets from its first half
# and the test snippets from its second half.

# %%
def build_data(text):
    tokenizer = CharTokenizer(["<pad>", "<unk>", *TASK_TOKENS, *sorted(set(text))],
                              special_tokens={"pad": "<pad>", "unk": "<unk>"},
                              extra_special_tokens=TASK_TOKENS)
    ids = np.array(tokenizer.encode(text), dtype=np.int64)
    cut = int(0.9 * len(ids))
    return tokenizer, ids[:cut], ids[cut:]


def corrupt(snippet, typos, tokenizer, rng):
    """``snippet`` with ``typos`` of its letters replaced by other random lowercase letters."""
    chars = list(tokenizer.decode(snippet))
    letters = [i for i, c in enumerate(chars) if c.isalpha()]
    for i in rng.choice(letters, size=min(typos, len(letters)), replace=False):
        chars[i] = rng.choice([c for c in LETTERS if c != chars[i].lower()])
    return tokenizer.encode("".join(chars))


def make_task(ids, count, cfg, tokenizer, rng):
    """``count`` snippets, half genuine (label 1) and half corrupted (label 0)."""
    examples, labels = [], []
    for k in range(count):
        start = rng.integers(0, len(ids) - cfg["snippet"])
        snippet = ids[start:start + cfg["snippet"]].tolist()
        genuine = k % 2 == 0
        examples.append(snippet if genuine else corrupt(snippet, cfg["typos"], tokenizer, rng))
        labels.append(int(genuine))
    return examples, np.array(labels)


# %% [markdown]
# ## Pre-training: the language-modelling objective
#
# $$L_1(\mathcal{U}) = \sum_i \log P(u_i | u_{i-k}, \dots, u_{i-1}; \theta) \quad (18)$$
#
# $$h_0 = UW_e + W_p \quad (20) \qquad h_l = \text{transformer\_block}(h_{l-1})\ \forall l \in
# [1, n] \quad (19) \qquad P(u) = \text{softmax}(h_n W_e^T) \quad (21)$$
#
# (the survey writes eq 19's index as $i$; the paper has one block per layer $l$). Each batch is
# `batch` random windows of `n_positions` characters; `model(ids, labels=ids)` shifts the labels
# inside and returns the mean of $-\log P(u_i | \dots)$, i.e. $-L_1$ per character.

# %%
def pretrain(model, ids, cfg, rng):
    optimizer = optim.AdamW(model.parameters(), lr=cfg["pretrain_lr"], weight_decay=0.01)
    steps = cfg["pretrain_steps"]
    schedule = optim.CosineWarmupDecayLR(optimizer, warmup_steps=max(1, steps // 20),
                                         total_steps=steps)
    width, losses = cfg["n_positions"], []
    bar = tqdm(range(steps), desc="pre-training", unit="step")
    for _ in bar:
        starts = rng.integers(0, len(ids) - width, cfg["batch"])
        batch = np.stack([ids[s:s + width] for s in starts])
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
    return losses


# %% [markdown]
# ## Fine-tuning: eq 22-24
#
# $$P(y | x^1, \dots, x^m) = \text{softmax}(h_l^m W_y) \quad (22) \qquad
# L_2(\mathcal{C}) = \sum_{(x,y)} \log P(y | x^1, \dots, x^m) \quad (23)$$
#
# $$L_3(\mathcal{C}) = L_2(\mathcal{C}) + \lambda L_1(\mathcal{C}) \quad (24)$$
#
# `TaskFormatter("classification", ...)` turns each snippet into `<s> snippet <e>`;
# `GPTForFineTuning` returns `task_loss` ($-L_2$ per example), `lm_loss` ($-L_1$ per character
# of the task's inputs) and `loss` = task_loss + lm_coef * lm_loss ($-L_3$).

# %%
def accuracy(model, formatter, examples, labels):
    model.eval()
    with mt.no_grad():
        predictions = model(**formatter(examples)).logits.numpy().argmax(axis=-1)
    model.train()
    return float((predictions == labels).mean())


def finetune(transformer, lm_coef, train, test, formatter, cfg, seed, name):
    mt.manual_seed(seed)                       # the same W_y in every run
    model = GPTForFineTuning(transformer, "classification", num_labels=2, lm_coef=lm_coef)
    optimizer = optim.AdamW(model.parameters(), lr=cfg["finetune_lr"], weight_decay=0.01)
    steps = cfg["finetune_steps"]
    schedule = optim.LinearWarmupDecayLR(optimizer, warmup_steps=max(1, steps // 10),
                                         total_steps=steps)
    rng = np.random.default_rng(seed)          # the same batches in every run
    curve = {"step": [], "task_loss": [], "lm_loss": [], "test_accuracy": []}
    task_losses, lm_losses = [], []
    for step in tqdm(range(1, steps + 1), desc=name, unit="step"):
        pick = rng.choice(len(train[0]), cfg["batch"], replace=False)
        out = model(**formatter([train[0][i] for i in pick]), labels=train[1][pick])
        optimizer.zero_grad()
        out.loss.backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        task_losses.append(out.task_loss.item())
        lm_losses.append(out.lm_loss.item())
        if step % cfg["eval_every"] == 0 or step == steps:
            curve["step"].append(step)
            curve["task_loss"].append(float(np.mean(task_losses[-cfg["eval_every"]:])))
            curve["lm_loss"].append(float(np.mean(lm_losses[-cfg["eval_every"]:])))
            curve["test_accuracy"].append(accuracy(model, formatter, *test))
    return curve


def copy_of(transformer):
    clone = GPTModel(transformer.config)
    clone.load_state_dict(transformer.state_dict())
    return clone


# %% [markdown]
# ## Pictures

# %%
def plot_pretraining(losses, path):
    figure, axis = plots.pyplot().subplots(figsize=(6, 3.5))
    plots.loss_curves(axis, range(1, len(losses) + 1), {"training batch": losses},
                      title="GPT-1 pre-training", ylabel="-L_1 per character (nats)")
    plots.save(figure, path)


def plot_finetuning(curves, path):
    figure, (left, right) = plots.pyplot().subplots(1, 2, figsize=(11, 4))
    for name, curve in curves.items():
        left.plot(curve["step"], curve["task_loss"], "o-", markersize=3, label=name)
        right.plot(curve["step"], curve["test_accuracy"], "o-", markersize=3, label=name)
    left.set(xlabel="fine-tuning step", ylabel="-L_2 per example (training batches)",
             title="task loss (eq 23)")
    right.set(xlabel="fine-tuning step", ylabel="held-out accuracy", ylim=(0.4, 1.01),
              title="genuine vs corrupted snippets")
    right.axhline(0.5, color="grey", linewidth=0.8, linestyle=":", label="chance")
    left.legend()
    right.legend()
    plots.save(figure, path)


# %% [markdown]
# ## Putting it together

# %%
def main(argv=None):
    args = parse_args(argv)
    run_start = time.perf_counter()
    cfg, out = scripting.start(args, SETTINGS)
    rng = np.random.default_rng(args.seed)

    text = load_text(args.text) if args.text else stdlib_corpus(cfg["corpus_chars"])
    tokenizer, pretrain_ids, held_out = build_data(text)
    half = len(held_out) // 2
    train = make_task(held_out[:half], cfg["train_examples"], cfg, tokenizer, rng)
    test = make_task(held_out[half:], cfg["test_examples"], cfg, tokenizer, rng)
    start, delimiter, extract = tokenizer.convert_tokens_to_ids(list(TASK_TOKENS))
    formatter = TaskFormatter("classification", start, delimiter, extract,
                              pad=tokenizer.pad_token_id)

    config = GPTConfig.gpt1(vocab_size=len(tokenizer), n_positions=cfg["n_positions"],
                            n_embd=cfg["n_embd"], n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    lm = GPTLMHeadModel(config)
    print(f"{len(text)} characters, vocabulary {len(tokenizer)}, {lm.num_parameters()} "
          f"parameters; task: {len(train[1])} training and {len(test[1])} test snippets of "
          f"{cfg['snippet']} characters, {cfg['typos']} letters replaced in the corrupted ones")
    example = train[0][1]
    print(f"  corrupted: {tokenizer.decode(example)!r}")

    scratch = copy_of(lm.transformer)           # random weights, before pre-training
    start_time = time.perf_counter()
    pretrain_losses = pretrain(lm, pretrain_ids, cfg, rng)
    pretrain_seconds = time.perf_counter() - start_time
    prompt = np.array([tokenizer.encode("Return the ")])
    sample = tokenizer.decode(lm.generate(prompt, min(40, cfg["n_positions"] - prompt.shape[1]))[0])
    print(f"pre-trained in {pretrain_seconds:.0f} s, final loss "
          f"{np.mean(pretrain_losses[-50:]):.3f}; greedy sample: {sample!r}")

    runs = {f"pre-trained, L2 + {args.lm_coef:g} L1": (copy_of(lm.transformer), args.lm_coef),
            "pre-trained, L2 only": (copy_of(lm.transformer), 0.0),
            f"random init, L2 + {args.lm_coef:g} L1": (scratch, args.lm_coef)}
    curves = {name: finetune(transformer, coef, train, test, formatter, cfg, args.seed + 1, name)
              for name, (transformer, coef) in runs.items()}
    for name, curve in curves.items():
        print(f"{name:>28}: held-out accuracy {curve['test_accuracy'][-1]:.3f} "
              f"(best {max(curve['test_accuracy']):.3f})")

    plot_pretraining(pretrain_losses, out / "pretraining.png")
    plot_finetuning(curves, out / "finetuning.png")
    metrics = {
        "smoke": args.smoke, "seed": args.seed, "backend": args.backend, "config": cfg,
        "parameters": lm.num_parameters(), "vocab_size": len(tokenizer),
        "pretrain_seconds": pretrain_seconds,
        "pretrain_final_loss": float(np.mean(pretrain_losses[-50:])), "sample": sample,
        "final_accuracy": {name: curve["test_accuracy"][-1] for name, curve in curves.items()},
        "curves": curves, "total_seconds": time.perf_counter() - run_start,
    }
    return scripting.write_metrics(out, metrics)


if __name__ == "__main__":
    main()
