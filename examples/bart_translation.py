# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # BART's translation recipe: a new encoder in front of a pretrained BART, in two stages
#
# *The NLP Cookbook*, section V-B and its figure 12 (Lewis et al., 2020, "BART: Denoising
# Sequence-to-Sequence Pre-training for Natural Language Generation, Translation, and
# Comprehension", section 3.4).
#
# BART is pretrained on one language only, to reconstruct noised text. To translate into that
# language, the paper puts a new, randomly initialised encoder in front of the pretrained model:
# it maps the foreign words to vectors that BART's encoder reads in place of its own token
# embeddings, so that BART can "de-noise" them into its language. It is trained in two stages:
#
# 1. only the new encoder, BART's (encoder) positions and the input projections of the
#    self-attention of BART's first encoder layer learn; the rest of BART stays frozen;
# 2. every parameter learns, for a few steps.
#
# Here BART's language is English number words (`minitorch_nlp.data.numbers`), pretrained by
# text infilling; the foreign language is German. Three runs with the same translation budget
# (stage 1 + stage 2 steps of the same German -> English pairs):
#
# * **two stages**: pretrained BART, the recipe;
# * **pretrained, one stage**: pretrained BART, every parameter from the first step;
# * **from scratch**: the same model, not pretrained, every parameter from the first step.
#
# The table and `exact_match.png` give the exact match on held-out numbers (numbers in no
# training text) after stage 1 and at the end; `loss.png` shows how much sooner the pretrained
# runs learn. Pretraining pays off most when translation steps are few: given enough steps this
# easy task is learnt from scratch too (compare the full run with `--stages 60 20`).
#
# ```
# python examples/bart_translation.py            # the full run: minutes on 2 CPU cores
# python examples/bart_translation.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/bart_translation`): `metrics.json`, `loss.png` and
# `exact_match.png`. In a notebook each figure also shows below the cell that makes it.

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
from minitorch_nlp.data import (Vocab, number_tokens, pad_sequences,  # noqa: E402
                                train_test_split_numbers)
from minitorch_nlp.data.bart_noising import TextInfilling  # noqa: E402
from minitorch_nlp.models.bart import (BartConfig, BartForConditionalGeneration,  # noqa: E402
                                       BartForTranslation)

SETTINGS = {
    "full": dict(d_model=64, heads=4, ffn=128, layers=2, numbers=1000, texts=600, pairs=300,
                 batch=32, pretrain=800, stage1=150, stage2=50, test=100, lr=2e-3),
    "smoke": dict(d_model=16, heads=2, ffn=32, layers=1, numbers=200, texts=40, pairs=20,
                  batch=8, pretrain=6, stage1=3, stage2=2, test=6, lr=2e-3),
}
SOURCE, TARGET = "de", "en"
CONDITIONS = ("two stages", "pretrained, one stage", "from scratch")
parser = scripting.example_parser(
    "bart_translation", "BART's translation recipe: a new source encoder in front of a "
    "pretrained BART, trained in two stages (section V-B, figure 12)")
parser.add_argument("--stages", type=int, nargs=2, metavar=("STAGE1", "STAGE2"),
                    help="translation steps in stage 1 and stage 2 (150 50; smoke: 3 2)")
args = scripting.arguments(parser, smoke=SMOKE)
if args.stages is not None and min(args.stages) < 1:
    parser.error(f"--stages must be two positive step counts, got {args.stages}")
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)
if args.stages is not None:
    cfg = {**cfg, "stage1": args.stages[0], "stage2": args.stages[1]}


# %% [markdown]
# ## Two languages, two vocabularies
#
# BART's vocabulary holds the English words and a `<mask>`; the new encoder has a vocabulary of
# its own, the German words. The held-out numbers appear neither in the pretraining texts nor
# in the translation pairs.

# %%
train_numbers, test_numbers = train_test_split_numbers(0, cfg["numbers"], 0.2, seed=args.seed)
words = {lang: {n: number_tokens(n, lang) for n in range(cfg["numbers"])}
         for lang in (SOURCE, TARGET)}
vocabs = {lang: Vocab(sorted({w for ws in table.values() for w in ws})
                      + (["<mask>"] if lang == TARGET else []))
          for lang, table in words.items()}
test = np.random.default_rng(args.seed + 1).choice(test_numbers, cfg["test"], replace=False)
example = int(test[0])
print(f"{SOURCE} {words[SOURCE][example]} -> {TARGET} {words[TARGET][example]}; vocabularies "
      f"of {len(vocabs[SOURCE])} and {len(vocabs[TARGET])} words")


def encode(words, vocab):
    return np.array(vocab.encode(words) + [vocab.eos_id])


def build_bart(vocab):
    return BartForConditionalGeneration(BartConfig(
        vocab_size=len(vocab), d_model=cfg["d_model"], encoder_layers=cfg["layers"],
        decoder_layers=cfg["layers"], encoder_attention_heads=cfg["heads"],
        decoder_attention_heads=cfg["heads"], encoder_ffn_dim=cfg["ffn"],
        decoder_ffn_dim=cfg["ffn"], dropout=0.0, max_position_embeddings=64,
        pad_token_id=vocab.pad_id, bos_token_id=vocab.bos_id, eos_token_id=vocab.eos_id,
        decoder_start_token_id=vocab.eos_id, forced_eos_token_id=None))


def train_steps(model, parameters, steps, batches, desc):
    """``steps`` AdamW steps on ``parameters``; ``batches()`` gives (sources, labels) lists."""
    optimizer = optim.AdamW(parameters, lr=cfg["lr"], weight_decay=0.0)
    losses = []
    for _ in scripting.progress(range(steps), desc=desc):
        sources, labels = batches()
        input_ids, mask = pad_sequences(sources, 0)
        targets, label_mask = pad_sequences(labels, 0)
        loss = model(input_ids, mask, labels=np.where(label_mask, targets, -100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# %% [markdown]
# ## Pretraining BART on English: text infilling
#
# Spans of Poisson(3) lengths covering 35 % of the words are each replaced by one `<mask>`;
# BART reconstructs the original text (its cross-entropy).

# %%
manual_seed(args.seed)
rng = np.random.default_rng(args.seed)
pretrained = build_bart(vocabs[TARGET])
texts = [encode(words[TARGET][int(n)], vocabs[TARGET])
         for n in rng.choice(train_numbers, cfg["texts"], replace=False)]
noise = TextInfilling(vocabs[TARGET].stoi["<mask>"], mask_ratio=0.35)


def infilling_batches():
    chosen = [texts[i] for i in rng.integers(len(texts), size=cfg["batch"])]
    return [np.append(noise(text[:-1], rng), vocabs[TARGET].eos_id) for text in chosen], chosen


print("a noised text:", " ".join(vocabs[TARGET].decode(infilling_batches()[0][0].tolist())))
pretraining_losses = train_steps(pretrained, pretrained.parameters(), cfg["pretrain"],
                                 infilling_batches, "pretraining")
pretrained_state = pretrained.state_dict()


# %% [markdown]
# ## Translation: stage 1, then stage 2
#
# `BartForTranslation(bart, source_vocab_size)` puts a `SourceEncoder` (German embeddings,
# positions and one Transformer layer) in front of BART's encoder. `set_stage(1)` leaves only the
# recipe's first-stage parameters learning and returns them for the optimizer; `set_stage(2)`
# all of them. The one-stage runs train everything for the same total number of steps.

# %%
def translate(model, rng, stages):
    pairs = rng.choice(train_numbers, cfg["pairs"], replace=False)

    def batches():
        chosen = rng.choice(pairs, cfg["batch"])
        return ([encode(words[SOURCE][int(n)], vocabs[SOURCE]) for n in chosen],
                [encode(words[TARGET][int(n)], vocabs[TARGET]) for n in chosen])
    losses, after_stage = [], []
    for stage, steps in stages:
        model.train()
        losses += train_steps(model, model.set_stage(stage), steps, batches,
                              f"translation, stage {stage}")
        after_stage.append(exact_match(model, test))
    return losses, after_stage


def exact_match(model, numbers):
    model.eval()
    input_ids, mask = pad_sequences([encode(words[SOURCE][int(n)], vocabs[SOURCE])
                                     for n in numbers], 0)
    wanted = [list(encode(words[TARGET][int(n)], vocabs[TARGET])) for n in numbers]
    out = model.generate(input_ids, mask, max_new_tokens=max(map(len, wanted)))[:, 1:]
    return float(np.mean([list(row[:len(w)]) == w for row, w in zip(out, wanted)]))


budget = [(1, cfg["stage1"]), (2, cfg["stage2"])]
one_stage = [(2, cfg["stage1"] + cfg["stage2"])]
results, curves = {}, {}
for name in CONDITIONS:
    manual_seed(args.seed + 1)
    bart = build_bart(vocabs[TARGET])
    if name != "from scratch":
        bart.load_state_dict(pretrained_state)
    model = BartForTranslation(bart, len(vocabs[SOURCE]), num_layers=1, num_heads=cfg["heads"],
                               pad_token_id=vocabs[SOURCE].pad_id)
    curves[name], scores = translate(model, np.random.default_rng(args.seed + 2),
                                     budget if name == "two stages" else one_stage)
    results[name] = {"after stage 1": scores[0] if len(scores) == 2 else None,
                     "final": scores[-1]}

print(f"\nexact match on {cfg['test']} held-out numbers, {SOURCE} -> {TARGET}, "
      f"{cfg['stage1'] + cfg['stage2']} translation steps:")
for name, row in results.items():
    stage1 = "-" if row["after stage 1"] is None else f"{row['after stage 1']:.3f}"
    print(f"  {name:22s} after stage 1 {stage1:>6s}   final {row['final']:.3f}")

# %% [markdown]
# ## The pictures: losses, then exact match

# %%
figure, (left, right) = plots.pyplot().subplots(1, 2, figsize=(11, 4))
steps = range(1, cfg["stage1"] + cfg["stage2"] + 1)
plots.loss_curves(left, steps, curves, title="translation, de -> en")
left.axvline(cfg["stage1"] + 0.5, color="grey", linestyle=":", label="stage 2 starts")
left.legend()
plots.loss_curves(right, range(1, len(pretraining_losses) + 1),
                  {"text infilling": pretraining_losses}, title="pretraining BART (en)")
plots.show(figure, out / "loss.png")

figure, ax = plots.pyplot().subplots(figsize=(6, 4))
ax.bar(list(results), [row["final"] for row in results.values()])
for position, row in enumerate(results.values()):
    ax.annotate(f"{row['final']:.2f}", (position, row["final"]), ha="center", va="bottom")
ax.set_ylim(0, 1.05)
ax.set_ylabel("held-out exact match")
ax.set_title(f"BART's two-stage recipe, {cfg['stage1']} + {cfg['stage2']} translation steps")
plots.show(figure, out / "exact_match.png")

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "backend": args.backend, "results": results,
    "parameters": model.num_parameters(), "test_numbers": int(cfg["test"]), "config": cfg,
    "total_seconds": time.perf_counter() - run_start})
