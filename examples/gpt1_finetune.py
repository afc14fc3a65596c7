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
# (the LM loss) and `finetuning.png` (task loss and held-out accuracy of the three runs). In a
# notebook each figure also shows below the cell that makes it.
#
# The model is the paper's, much smaller (3 layers, 64 wide, 4 heads, 64 positions, 0.16M
# parameters), and trained without dropout: at this size it underfits the corpus, and dropout
# (0.1 in the paper) only slows pre-training down. The classifier keeps the paper's dropout of
# 0.1 on h_l^m. The full run is one seed: read a gap between the first two runs as a tendency,
# as in the paper (whose ablation finds the auxiliary loss helps the larger datasets), not as a
# measurement.

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
parser = scripting.example_parser(
    "gpt1_finetune", "GPT-1 pre-training and fine-tuning with and without the auxiliary LM loss "
    "(eq 18-24)", text="a text file to use instead of the built-in corpus")
parser.add_argument("--lm-coef", type=float, default=0.5,
                    help="lambda of eq 24 in the auxiliary-loss runs (0.5, the paper's)")
args = scripting.arguments(parser, smoke=SMOKE)
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)
rng = np.random.default_rng(args.seed)


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


def make_task(ids, count):
    """``count`` snippets, half genuine (label 1) and half corrupted (label 0)."""
    examples, labels = [], []
    for k in range(count):
        start = rng.integers(0, len(ids) - cfg["snippet"])
        snippet = ids[start:start + cfg["snippet"]].tolist()
        genuine = k % 2 == 0
        examples.append(snippet if genuine else corrupt(snippet, cfg["typos"], tokenizer, rng))
        labels.append(int(genuine))
    return examples, np.array(labels)


text = load_text(args.text) if args.text else stdlib_corpus(cfg["corpus_chars"])
tokenizer, pretrain_ids, held_out = build_data(text)
half = len(held_out) // 2
train = make_task(held_out[:half], cfg["train_examples"])
test = make_task(held_out[half:], cfg["test_examples"])
start, delimiter, extract = tokenizer.convert_tokens_to_ids(list(TASK_TOKENS))
formatter = TaskFormatter("classification", start, delimiter, extract, pad=tokenizer.pad_token_id)
print(f"{len(text)} characters, vocabulary {len(tokenizer)}; task: {len(train[1])} training and "
      f"{len(test[1])} test snippets of {cfg['snippet']} characters, {cfg['typos']} letters "
      "replaced in the corrupted ones")
print(f"  genuine: {tokenizer.decode(train[0][0])!r}")
print(f"  corrupted: {tokenizer.decode(train[0][1])!r}")


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
config = GPTConfig.gpt1(vocab_size=len(tokenizer), n_positions=cfg["n_positions"],
                        n_embd=cfg["n_embd"], n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
lm = GPTLMHeadModel(config)
scratch = GPTModel(config)                  # random weights, before pre-training
scratch.load_state_dict(lm.transformer.state_dict())
print(f"{lm.num_parameters()} parameters")

optimizer = optim.AdamW(lm.parameters(), lr=cfg["pretrain_lr"], weight_decay=0.01)
steps = cfg["pretrain_steps"]
schedule = optim.CosineWarmupDecayLR(optimizer, warmup_steps=max(1, steps // 20),
                                     total_steps=steps)
width, pretrain_losses = cfg["n_positions"], []
began = time.perf_counter()
bar = scripting.progress(range(steps), desc="pre-training", unit="step")
for _ in bar:
    starts = rng.integers(0, len(pretrain_ids) - width, cfg["batch"])
    batch = np.stack([pretrain_ids[s:s + width] for s in starts])
    loss = lm(batch, labels=batch).loss
    optimizer.zero_grad()
    loss.backward()
    optim.clip_grad_norm_(lm.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    pretrain_losses.append(loss.item())
    bar.set_postfix(loss=f"{np.mean(pretrain_losses[-50:]):.3f}")
pretrain_seconds = time.perf_counter() - began
prompt = np.array([tokenizer.encode("Return the ")])
sample = tokenizer.decode(lm.generate(prompt, min(40, cfg["n_positions"] - prompt.shape[1]))[0])
print(f"pre-trained in {pretrain_seconds:.0f} s, final loss "
      f"{np.mean(pretrain_losses[-50:]):.3f}; greedy sample: {sample!r}")

figure, axis = plots.pyplot().subplots(figsize=(6, 3.5))
plots.loss_curves(axis, range(1, len(pretrain_losses) + 1), {"training batch": pretrain_losses},
                  title="GPT-1 pre-training", ylabel="-L_1 per character (nats)")
plots.show(figure, out / "pretraining.png")


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
def accuracy(model, examples, labels):
    model.eval()
    with mt.no_grad():
        predictions = model(**formatter(examples)).logits.numpy().argmax(axis=-1)
    model.train()
    return float((predictions == labels).mean())


def finetune(transformer, lm_coef, seed, name):
    mt.manual_seed(seed)                       # the same W_y in every run
    model = GPTForFineTuning(transformer, "classification", num_labels=2, lm_coef=lm_coef)
    optimizer = optim.AdamW(model.parameters(), lr=cfg["finetune_lr"], weight_decay=0.01)
    steps = cfg["finetune_steps"]
    schedule = optim.LinearWarmupDecayLR(optimizer, warmup_steps=max(1, steps // 10),
                                         total_steps=steps)
    rng = np.random.default_rng(seed)          # the same batches in every run
    curve = {"step": [], "task_loss": [], "lm_loss": [], "test_accuracy": []}
    task_losses, lm_losses = [], []
    for step in scripting.progress(range(1, steps + 1), desc=name, unit="step"):
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
            curve["test_accuracy"].append(accuracy(model, *test))
    return curve


def copy_of(transformer):
    clone = GPTModel(transformer.config)
    clone.load_state_dict(transformer.state_dict())
    return clone


runs = {f"pre-trained, L2 + {args.lm_coef:g} L1": (copy_of(lm.transformer), args.lm_coef),
        "pre-trained, L2 only": (copy_of(lm.transformer), 0.0),
        f"random init, L2 + {args.lm_coef:g} L1": (scratch, args.lm_coef)}
curves = {name: finetune(transformer, coef, args.seed + 1, name)
          for name, (transformer, coef) in runs.items()}
for name, curve in curves.items():
    print(f"{name:>28}: held-out accuracy {curve['test_accuracy'][-1]:.3f} "
          f"(best {max(curve['test_accuracy']):.3f})")

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
plots.show(figure, out / "finetuning.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "backend": args.backend, "config": cfg,
    "parameters": lm.num_parameters(), "vocab_size": len(tokenizer),
    "pretrain_seconds": pretrain_seconds,
    "pretrain_final_loss": float(np.mean(pretrain_losses[-50:])), "sample": sample,
    "final_accuracy": {name: curve["test_accuracy"][-1] for name, curve in curves.items()},
    "curves": curves, "total_seconds": time.perf_counter() - run_start,
})
