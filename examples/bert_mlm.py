# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # BERT: masked-LM and next-sentence pretraining, then fine-tuning
#
# *The NLP Cookbook*, section IV-C (Devlin et al., 2019, "BERT: Pre-training of Deep
# Bidirectional Transformers for Language Understanding"); the masked-LM objective is the
# survey's eq 25.
#
# A tiny BERT is pretrained on the built-in corpus (the Python standard library's docstrings)
# with a WordPiece vocabulary learned from the same text, on BERT's two tasks: **masked LM**
# (predict the 15% of tokens that were hidden) and **next sentence prediction** (does sentence B
# follow sentence A?). It is then fine-tuned on a small synthetic task, *is this sentence as
# written, or are its words shuffled?*, next to the same model trained from scratch on the same
# few labelled examples. The task needs knowledge of English word order that the pretrained model
# got from unlabelled text.
#
# ```
# python examples/bert_mlm.py            # 2500 pretraining steps: minutes on 2 CPU cores
# python examples/bert_mlm.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/bert_mlm`): `metrics.json`, `pretraining.png` (losses)
# and `fine_tuning.png` (accuracy of pretrained vs from-scratch). In a notebook each figure also
# shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import os  # noqa: E402
import re  # noqa: E402
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
from minitorch_nlp.data.masking import MaskedLMCollator, next_sentence_pairs  # noqa: E402
from minitorch_nlp.data.tokenizers import WordPieceTokenizer  # noqa: E402
from minitorch_nlp.models.bert import (BertConfig, BertForPreTraining,  # noqa: E402
                                       BertForSequenceClassification)

SETTINGS = {
    "full": dict(max_chars=None, vocab_size=1000, hidden=64, layers=2, heads=4, ffn=256,
                 max_length=48, batch=32, steps=2500, warmup=100, lr=2e-3, eval_every=250,
                 eval_pairs=512, task_lr=1e-3, task_epochs=10),
    "smoke": dict(max_chars=60_000, vocab_size=300, hidden=16, layers=1, heads=2, ffn=32,
                  max_length=32, batch=8, steps=12, warmup=2, lr=1e-3, eval_every=6,
                  eval_pairs=16, task_lr=1e-3, task_epochs=2),
}
parser = scripting.example_parser(
    "bert_mlm", "BERT: masked-LM + NSP pretraining on the built-in corpus, then fine-tuning "
    "(IV-C)", steps="pretraining steps (2500; smoke: 12)",
    text="a UTF-8 text file to use instead of the built-in corpus (paragraphs separated by "
         "blank lines)")
args = scripting.arguments(parser, smoke=SMOKE)
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)
steps = args.steps if args.steps is not None else cfg["steps"]


# %% [markdown]
# ## Data: documents of segments, a WordPiece vocabulary
#
# The corpus's paragraphs (separated by blank lines) are the documents; their lines are the
# segments that NSP pairs up. Devlin et al. (section 3) allow this: "a 'sentence' can be an
# arbitrary span of contiguous text, rather than an actual linguistic sentence". A sixth of the
# documents is held out: it gives the validation pairs of pretraining and the sentences of the
# fine-tuning task, text the model never pretrained on.
#
# The WordPiece vocabulary (BERT's basic tokenization: lower case, punctuation split, then
# greedy longest-match pieces with `##` continuations) is learned from the training documents.

# %%
def documents_of(text):
    """Paragraphs (blank-line separated) -> lists of their lines of at least two words."""
    documents = [[line.strip() for line in paragraph.split("\n") if len(line.split()) >= 2]
                 for paragraph in text.split("\n\n")]
    return [document for document in documents if document]


text = load_text(args.text) if args.text else stdlib_corpus(cfg["max_chars"])
documents = documents_of(text)
order = np.random.default_rng(args.seed).permutation(len(documents))
held_out = max(2, len(documents) // 6)
train_docs = [documents[i] for i in order[held_out:]]
test_docs = [documents[i] for i in order[:held_out]]
tokenizer = WordPieceTokenizer.train((s for doc in train_docs for s in doc), cfg["vocab_size"])
print(f"{len(train_docs)} training documents, {len(test_docs)} held out; WordPiece vocabulary "
      f"{len(tokenizer)}; a segment: {tokenizer.tokenize(train_docs[0][0])[:12]}")


# %% [markdown]
# ## The model
#
# `BertForPreTraining` is BERT-base made small: 2 layers instead of 12, hidden size 64 instead
# of 768, 4 heads, feed-forward size 256, 48 positions, a vocabulary of 1000 word pieces. As in
# the paper: post-LN encoder layers, GELU, token + segment + position embeddings, the MLM
# decoder tied to the word embeddings, AdamW (weight decay 0.01) with linear warm-up and decay.
# One departure: no dropout. A model this small, trained for a few thousand steps, underfits
# the corpus; dropout would only slow it down.

# %%
config = BertConfig(vocab_size=len(tokenizer), hidden_size=cfg["hidden"],
                    num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
                    intermediate_size=cfg["ffn"], max_position_embeddings=cfg["max_length"],
                    pad_token_id=tokenizer.pad_token_id, num_labels=2,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
model = BertForPreTraining(config)
print(f"{model.num_parameters()} parameters")

# %% [markdown]
# ## Pretraining data: segment pairs, masked
#
# Each training input is `[CLS] A [SEP] B [SEP]`, segment A with segment id 0 and B with
# segment id 1. Half of the time B is the segment that follows A in its document (label 0,
# *IsNext*), otherwise a random segment of another document (label 1, *NotNext*):
# `next_sentence_pairs`.
#
# The masked LM (`MaskedLMCollator`) picks 15% of the tokens of each input, never [CLS], [SEP]
# or padding. A picked token becomes [MASK] 80% of the time, a random token 10% of the time and
# stays itself 10% of the time; the model has to predict the original token at all picked
# positions. The survey writes the objective as
#
# $$\mathcal{L}_{BERT} = \sum_{x \in \mathcal{T}} \log p(x | \mathcal{N}) \quad (25)$$
#
# with $\mathcal{T}$ the picked tokens and $\mathcal{N}$ the input the model sees: each picked
# token is predicted from the visible ones, independently of the other picked tokens. The
# training loss is the mean of $-\log p$ over picked tokens plus the NSP cross-entropy
# (Devlin et al., appendix A.2). Masks are drawn anew for every batch.

# %%
def encode_pairs(tokenizer, documents, max_length, seed):
    first, second, labels = next_sentence_pairs(documents, seed=seed)
    batch = tokenizer(first, text_pair=second, truncation=True, max_length=max_length,
                      padding=True, return_tensors="np", return_special_tokens_mask=True)
    return dict(batch, next_sentence_label=labels)


def take(data, rows):
    """Rows of every field, cut to the longest real sequence among them."""
    width = int(data["attention_mask"][rows].sum(1).max())
    return {key: value[rows][:, :width] if value.ndim == 2 else value[rows]
            for key, value in data.items()}


def unigram_loss(pairs, validation, vocab_size):
    """The validation MLM loss of a model that ignores the context and predicts every picked
    token with its frequency in the training pairs (add-one smoothed): the bar to beat."""
    counts = np.bincount(pairs["input_ids"][pairs["special_tokens_mask"] == 0],
                         minlength=vocab_size) + 1.0
    picked = validation["labels"][validation["labels"] != -100]
    return float(-np.log(counts[picked] / counts.sum()).mean())


def evaluate_pretraining(model, validation, chunk=128):
    """Masked-LM loss (mean over picked tokens) and NSP accuracy on the fixed validation pairs."""
    model.eval()
    nll, picked, correct = 0.0, 0, 0
    with mt.no_grad():
        for start in range(0, len(validation["input_ids"]), chunk):
            batch = take(validation, np.arange(start, min(start + chunk,
                                                          len(validation["input_ids"]))))
            out = model(**{k: v for k, v in batch.items() if k != "next_sentence_label"})
            logits = out.prediction_logits.numpy()
            chosen = batch["labels"] != -100
            log_probs = logits[chosen] - np.log(np.exp(logits[chosen]).sum(-1, keepdims=True))
            nll -= log_probs[np.arange(chosen.sum()), batch["labels"][chosen]].sum()
            picked += int(chosen.sum())
            correct += int((out.seq_relationship_logits.numpy().argmax(-1)
                            == batch["next_sentence_label"]).sum())
    model.train()
    return float(nll / picked), correct / len(validation["input_ids"])


pairs = encode_pairs(tokenizer, train_docs, cfg["max_length"], args.seed)
collator = MaskedLMCollator.from_tokenizer(tokenizer, seed=args.seed)
validation_pairs = encode_pairs(tokenizer, test_docs, cfg["max_length"], args.seed + 1)
keep = np.arange(min(cfg["eval_pairs"], len(validation_pairs["input_ids"])))
validation = MaskedLMCollator.from_tokenizer(tokenizer, seed=args.seed + 1)(
    {key: value[keep] for key, value in validation_pairs.items()})
print(f"{len(pairs['input_ids'])} training segment pairs")

# %% [markdown]
# ## Pretraining
#
# The validation masked-LM loss is compared with a model that ignores the context and guesses
# each picked token by its frequency (the bar to beat); NSP against chance.

# %%
optimizer = optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
schedule = optim.LinearWarmupDecayLR(optimizer, cfg["warmup"], steps)
rng = np.random.default_rng(args.seed)
history = {"step": [], "loss": [], "val_step": [], "val_mlm": [], "val_nsp_accuracy": []}
began = time.perf_counter()
bar = scripting.progress(range(1, steps + 1), desc="pretraining", unit="step")
for step in bar:
    batch = collator(take(pairs, rng.integers(0, len(pairs["input_ids"]), cfg["batch"])))
    loss = model(**batch).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    schedule.step()
    history["step"].append(step)
    history["loss"].append(loss.item())
    if step % cfg["eval_every"] == 0 or step == steps:
        mlm, nsp = evaluate_pretraining(model, validation)
        history["val_step"].append(step)
        history["val_mlm"].append(mlm)
        history["val_nsp_accuracy"].append(nsp)
        bar.set_postfix(loss=f"{np.mean(history['loss'][-50:]):.3f}", val_mlm=f"{mlm:.3f}",
                        val_nsp=f"{nsp:.2f}")
pretrain_seconds = time.perf_counter() - began
unigram = unigram_loss(pairs, validation, len(tokenizer))
print(f"pretrained {steps} steps in {pretrain_seconds:.0f} s: validation MLM loss "
      f"{history['val_mlm'][-1]:.3f} (token frequencies alone: {unigram:.3f}), NSP "
      f"accuracy {history['val_nsp_accuracy'][-1]:.2f}")

figure, (left, right) = plots.pyplot().subplots(1, 2, figsize=(10, 4))
plots.loss_curves(left, history["step"], {"training MLM + NSP": history["loss"]},
                  validation=(history["val_step"], history["val_mlm"]),
                  validation_label="validation MLM", title="pretraining loss")
left.axhline(unigram, color="grey", linestyle=":", label="validation MLM, unigram guess")
left.legend()
right.plot(history["val_step"], history["val_nsp_accuracy"], "o-", color="tab:green",
           label="validation NSP")
right.axhline(0.5, color="grey", linestyle=":", label="chance")
right.set(xlabel="step", ylabel="accuracy", ylim=(0.0, 1.0),
          title="next sentence prediction (validation)")
right.legend()
plots.show(figure, out / "pretraining.png")


# %% [markdown]
# ## What the masked LM learned
#
# The pretrained model fills in masked words of held-out sentences: the top three guesses for
# each [MASK].

# %%
def fill_in(model, tokenizer, sentence, max_length, rng, count=2):
    ids = np.array([tokenizer.encode(sentence, truncation=True, max_length=max_length)])
    maskable = np.flatnonzero(~np.isin(ids[0], tokenizer.all_special_ids))
    positions = np.sort(rng.choice(maskable, min(count, len(maskable)), replace=False))
    masked = ids.copy()
    masked[0, positions] = tokenizer.mask_token_id
    model.eval()
    with mt.no_grad():
        logits = model(masked).prediction_logits.numpy()[0]
    model.train()
    guesses = {tokenizer.convert_ids_to_tokens(int(ids[0, p])):
               tokenizer.convert_ids_to_tokens(np.argsort(-logits[p])[:3].tolist())
               for p in positions}
    return tokenizer.decode(masked[0], skip_special_tokens=False), guesses


rng = np.random.default_rng(args.seed)
examples = [fill_in(model, tokenizer, doc[0], cfg["max_length"], rng) for doc in test_docs[:4]]
for masked, guesses in examples:
    print(f"  {masked}\n    {guesses}")


# %% [markdown]
# ## Fine-tuning: original or shuffled?
#
# The held-out documents' sentences of 10 to 40 words, half of them with their words shuffled;
# half of the sentences train, half test. BERT fine-tunes by putting one linear layer on the
# pooled [CLS] vector and training everything (Devlin section 4,
# `BertForSequenceClassification`). The same model is also trained from scratch, with the same
# data, steps and learning rate; only the initial weights differ. Telling a shuffled sentence
# from a real one takes knowledge of English word order, which a few hundred labelled examples
# cannot teach but the unlabelled pretraining text can.

# %%
def shuffle_task(tokenizer, documents, max_length, rng):
    sentences = [s for doc in documents
                 for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(doc))
                 if 10 <= len(s.split()) <= 40]
    sentences = [sentences[i] for i in rng.permutation(len(sentences))]
    labels = rng.integers(0, 2, len(sentences))          # 1: as written, 0: words shuffled
    texts = []
    for sentence, label in zip(sentences, labels):
        words = sentence.split()
        while not label and words == sentence.split():
            words = [words[i] for i in rng.permutation(len(words))]
        texts.append(" ".join(words))
    batch = tokenizer(texts, truncation=True, max_length=max_length, padding=True,
                      return_tensors="np")
    return dict(batch, labels=labels)


def fine_tune(model, train, test, seed, name):
    optimizer = optim.AdamW(model.parameters(), lr=cfg["task_lr"], weight_decay=0.01)
    rng = np.random.default_rng(seed)
    curve = [evaluate_task(model, test)]
    for _ in scripting.progress(range(cfg["task_epochs"]), desc=f"fine-tuning ({name})",
                                unit="epoch"):
        order = rng.permutation(len(train["labels"]))
        for start in range(0, len(order), 16):
            loss = model(**take(train, order[start:start + 16])).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        curve.append(evaluate_task(model, test))
    return curve


def evaluate_task(model, test):
    model.eval()
    with mt.no_grad():
        logits = model(**{k: v for k, v in test.items() if k != "labels"}).logits.numpy()
    model.train()
    return float((logits.argmax(-1) == test["labels"]).mean())


task = shuffle_task(tokenizer, test_docs, cfg["max_length"], np.random.default_rng(args.seed + 2))
half = len(task["labels"]) // 2
task_train = {key: value[:half] for key, value in task.items()}
task_test = {key: value[half:] for key, value in task.items()}
curves = {}
for name in ("pretrained", "from scratch"):
    mt.manual_seed(args.seed + 3)
    classifier = BertForSequenceClassification(config)
    if name == "pretrained":
        classifier.bert.load_state_dict(model.bert.state_dict())
    curves[name] = fine_tune(classifier, task_train, task_test, args.seed + 4, name)
    print(f"{name}: held-out accuracy {curves[name][-1]:.3f}")

figure, axis = plots.pyplot().subplots(figsize=(6, 4))
for name, curve in curves.items():
    axis.plot(range(len(curve)), curve, "o-", label=name)
axis.axhline(0.5, color="grey", linestyle=":", label="chance")
axis.set(xlabel="epoch", ylabel="held-out accuracy", ylim=(0.0, 1.0),
         title="original or shuffled? (fine-tuning)")
axis.legend()
plots.show(figure, out / "fine_tuning.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "backend": args.backend, "steps": steps,
    "pretrain_seconds": pretrain_seconds, "parameters": model.num_parameters(),
    "vocab_size": len(tokenizer), "training_pairs": int(len(pairs["input_ids"])),
    "val_mlm_loss_unigram": unigram,
    "final_val_mlm_loss": history["val_mlm"][-1],
    "final_val_nsp_accuracy": history["val_nsp_accuracy"][-1],
    "fine_tuning_accuracy": {name: curve[-1] for name, curve in curves.items()},
    "fine_tuning_curves": curves, "history": history,
    "fill_in": [{"masked": masked, "guesses": guesses} for masked, guesses in examples],
    "task_examples": {"train": half, "test": len(task["labels"]) - half}, "config": cfg,
    "total_seconds": time.perf_counter() - run_start,
})
