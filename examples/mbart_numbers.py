# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # mBART on number words: multilingual denoising, then translation
#
# *The NLP Cookbook*, section V-C (Liu et al., 2020, "Multilingual Denoising Pre-training for
# Neural Machine Translation"), equations 30 and 31.
#
# mBART pretrains one encoder-decoder to reconstruct noised text in many languages at once
# (eq 31), drawing the languages with smoothed probabilities (eq 30) so that a small language is
# seen more often than its share of the data. It is then fine-tuned to translate one language
# pair. The survey reports that such a model also translates, unseen, from languages it was
# never fine-tuned on.
#
# Here the languages are the number words of `minitorch_nlp.data.numbers`: English, French,
# German and Spanish, Spanish deliberately small. Three runs, each fine-tuned to translate
# German into English:
#
# * **eq 30**: pretrained with the languages drawn by eq 30 (alpha = 0.7);
# * **as the data**: pretrained with the languages drawn in proportion to their data (alpha = 1);
# * **none**: not pretrained.
#
# The table gives, on held-out numbers, the exact match of the reconstruction of noised Spanish
# (the small language) after pretraining, of German -> English (the fine-tuned pair), and of
# French -> English and Spanish -> English (pairs never fine-tuned: the transfer claim).
#
# `scores.png` draws that table for the full run (186 k parameters, 400 texts in each big
# language and 40 in Spanish, 500 pretraining steps and 250 fine-tuning steps of 32 texts, 100
# held-out numbers, one seed): whether pretraining helps the fine-tuned pair, how much eq 30
# raises Spanish's share of the pretraining batches, and whether anything transfers to the pairs
# never fine-tuned.
#
# ```
# python examples/mbart_numbers.py            # the full run: minutes on 2 CPU cores
# python examples/mbart_numbers.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/mbart_numbers`): `metrics.json`, `loss.png` and
# `scores.png`. In a notebook each figure also shows below the cell that makes it.

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

from minitorch_nlp import manual_seed, optim, plots, scripting  # noqa: E402
from minitorch_nlp.data import (LANGUAGES, Vocab, number_tokens, pad_sequences,  # noqa: E402
                                train_test_split_numbers)
from minitorch_nlp.data.bart_noising import TextInfilling  # noqa: E402
from minitorch_nlp.data.multilingual import (LanguageCodes, LanguageSampler,  # noqa: E402
                                             multilingual_denoising_log_likelihood)
from minitorch_nlp.models.bart import MBartConfig, MBartForConditionalGeneration  # noqa: E402

SETTINGS = {
    "full": dict(d_model=64, heads=4, ffn=128, layers=2, numbers=1000, big=400, small=40,
                 batch=32, pretrain=500, finetune=250, pairs=300, test=100, lr=2e-3),
    "smoke": dict(d_model=16, heads=2, ffn=32, layers=1, numbers=200, big=30, small=6,
                  batch=8, pretrain=6, finetune=4, pairs=20, test=6, lr=2e-3),
}
SMALL = "es"
CONDITIONS = {"eq 30": 0.7, "as the data": 1.0, "none": None}
parser = scripting.example_parser(
    "mbart_numbers", "mBART: multilingual denoising on number words, fine-tuning on one pair, "
    "transfer to the others (section V-C, eq 30-31)")
args = scripting.arguments(parser, smoke=SMOKE)
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)


# %% [markdown]
# ## The languages and the sequences mBART reads
#
# Each language's corpus is the number words of some numbers (Spanish gets few of them); the
# held-out numbers appear in no corpus. One word-level vocabulary covers the four languages, a
# `<mask>` token and one language-id token per language. mBART reads the source `X </s> <lang>`
# and predicts `Y </s> <lang>`; its decoder reads the labels rotated, `<lang> Y </s>`, so the
# target language's id is the decoder's start token (`LanguageCodes`).

# %%
train_numbers, test_numbers = train_test_split_numbers(0, cfg["numbers"], 0.2, seed=args.seed)
rng = np.random.default_rng(args.seed)
words = {lang: {n: number_tokens(int(n), lang) for n in range(cfg["numbers"])}
         for lang in LANGUAGES}
vocab = Vocab(sorted({t for table in words.values() for ws in table.values() for t in ws})
              + ["<mask>"] + [f"<{lang}>" for lang in LANGUAGES])
codes = LanguageCodes({lang: vocab.stoi[f"<{lang}>"] for lang in LANGUAGES}, vocab.eos_id)
corpora = {lang: [np.array(vocab.encode(words[lang][int(n)]))
                  for n in rng.choice(train_numbers, cfg["small" if lang == SMALL else "big"],
                                      replace=False)]
           for lang in LANGUAGES}
test = np.random.default_rng(args.seed + 1).choice(test_numbers, cfg["test"], replace=False)
print("texts per language:", {lang: len(texts) for lang, texts in corpora.items()})
print({lang: " ".join(words[lang][int(test[0])]) for lang in LANGUAGES})


def build_model():
    return MBartForConditionalGeneration(MBartConfig(
        vocab_size=len(vocab), d_model=cfg["d_model"], encoder_layers=cfg["layers"],
        decoder_layers=cfg["layers"], encoder_attention_heads=cfg["heads"],
        decoder_attention_heads=cfg["heads"], encoder_ffn_dim=cfg["ffn"],
        decoder_ffn_dim=cfg["ffn"], dropout=0.0, max_position_embeddings=64,
        pad_token_id=vocab.pad_id, bos_token_id=vocab.bos_id, eos_token_id=vocab.eos_id,
        decoder_start_token_id=vocab.eos_id, forced_eos_token_id=None))


# %% [markdown]
# ## Pretraining: multilingual denoising (eq 30 and 31)
#
# Each batch draws its texts' languages with `LanguageSampler` (eq 30's q_i = p_i^alpha /
# sum_j p_j^alpha), noises each text by BART's text infilling (spans of Poisson(3) lengths
# covering 35 % of the words, each replaced by one `<mask>`), and maximises eq 31, the summed
# log-likelihood of the original texts given their noised versions
# (`multilingual_denoising_log_likelihood`); the loss is its negative mean per token.

# %%
def step(model, optimizer, sources, labels, pad_id):
    input_ids, mask = pad_sequences(sources, pad_id)
    targets, _ = pad_sequences(labels, pad_id)
    logits = model(input_ids, mask, labels=targets).logits
    loss = -multilingual_denoising_log_likelihood(logits, targets, pad_id=pad_id) \
        / int((targets != pad_id).sum())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def pretrain(model, alpha, rng):
    sampler = LanguageSampler(corpora, alpha=alpha)
    noise = TextInfilling(vocab.stoi["<mask>"], mask_ratio=0.35)
    optimizer = optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    losses, drawn = [], []
    for _ in scripting.progress(range(cfg["pretrain"]), desc=f"pretraining, alpha {alpha}"):
        batch = sampler.sample(rng, cfg["batch"])
        drawn += [lang for lang, _ in batch]
        losses.append(step(model, optimizer, [codes.wrap(noise(ids, rng), lang) for lang, ids
                                              in batch],
                           [codes.wrap(ids, lang) for lang, ids in batch], vocab.pad_id))
    return losses, float(np.mean([lang == SMALL for lang in drawn]))


# %% [markdown]
# ## Fine-tuning on one pair, German -> English, and scoring
#
# Fine-tuning trains every parameter on (German words, English words) pairs. `generate` starts
# the decoder from the target language's id and writes greedily until `</s>`; an answer counts
# when every word is right.

# %%
def finetune(model, numbers, rng):
    optimizer = optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    pairs = rng.choice(numbers, cfg["pairs"], replace=False)
    losses = []
    for _ in scripting.progress(range(cfg["finetune"]), desc="fine-tuning de -> en"):
        chosen = rng.choice(pairs, cfg["batch"])
        losses.append(step(model, optimizer,
                           [codes.wrap(vocab.encode(words["de"][int(n)]), "de") for n in chosen],
                           [codes.wrap(vocab.encode(words["en"][int(n)]), "en") for n in chosen],
                           vocab.pad_id))
    return losses


def exact_match(model, sources, targets, target_language):
    input_ids, mask = pad_sequences([codes.wrap(s, lang) for s, lang in sources], vocab.pad_id)
    wanted = [list(t) + [vocab.eos_id] for t in targets]
    out = model.generate(input_ids, mask, max_new_tokens=max(map(len, wanted)),
                         decoder_start_token_id=codes.id(target_language))[:, 1:]
    return float(np.mean([list(row[:len(w)]) == w for row, w in zip(out, wanted)]))


def translation_scores(model, numbers):
    english = [vocab.encode(words["en"][int(n)]) for n in numbers]
    return {f"{src} -> en": exact_match(model, [(vocab.encode(words[src][int(n)]), src)
                                                for n in numbers], english, "en")
            for src in ("de", "fr", SMALL)}


def denoising_score(model, numbers, rng):
    noise = TextInfilling(vocab.stoi["<mask>"], mask_ratio=0.35)
    originals = [np.array(vocab.encode(words[SMALL][int(n)])) for n in numbers]
    return exact_match(model, [(noise(ids, rng), SMALL) for ids in originals], originals, SMALL)


# %% [markdown]
# ## The three runs

# %%
results, curves = {}, {}
for name, alpha in CONDITIONS.items():
    manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = build_model()
    row = {}
    if alpha is not None:
        losses, row[f"{SMALL} share of pretraining"] = pretrain(model, alpha, rng)
        curves[f"pretraining ({name})"] = losses
        model.eval()
        row[f"{SMALL} denoising"] = denoising_score(model, test, rng)
        model.train()
    curves[f"fine-tuning ({name})"] = finetune(model, train_numbers, rng)
    model.eval()
    row.update(translation_scores(model, test))
    results[name] = row

columns = [f"{SMALL} share of pretraining", f"{SMALL} denoising", "de -> en", "fr -> en",
           f"{SMALL} -> en"]
print(f"\n{'pretraining':12s}" + "".join(f"{c:>{len(c) + 2}s}" for c in columns))
for name, row in results.items():
    print(f"{name:12s}" + "".join(f"{row[c]:{len(c) + 2}.3f}" if c in row
                                  else f"{'-':>{len(c) + 2}s}" for c in columns))

# %% [markdown]
# ## The pictures: the losses, then the exact matches of the table

# %%
figure, ax = plots.pyplot().subplots(figsize=(7, 4))
for label, losses in curves.items():
    plots.loss_curves(ax, range(1, len(losses) + 1), {label: losses}, title="mBART on number words")
plots.show(figure, out / "loss.png")

scored = columns[1:]
figure, ax = plots.pyplot().subplots(figsize=(7.5, 4))
width = 0.8 / len(results)
for i, (name, row) in enumerate(results.items()):
    ax.bar(np.arange(len(scored)) + (i - (len(results) - 1) / 2) * width,
           [row.get(column, 0.0) for column in scored], width, label=f"pretraining: {name}")
ax.set_xticks(np.arange(len(scored)), scored)
ax.set(ylim=(0, 1.05), ylabel=f"exact match, {len(test)} held-out numbers",
       title="mBART: fine-tuned on de -> en only")
ax.legend(fontsize="small")
plots.show(figure, out / "scores.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "backend": args.backend, "results": results,
    "texts_per_language": {lang: len(texts) for lang, texts in corpora.items()},
    "test_numbers": int(len(test)), "parameters": model.num_parameters(),
    "config": cfg, "total_seconds": time.perf_counter() - run_start})
