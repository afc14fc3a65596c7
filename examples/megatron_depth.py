# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Megatron-BERT: post-LN vs pre-LN as BERT gets deeper
#
# *The NLP Cookbook*, section IV-E (Shoeybi et al., 2019, "Megatron-LM", section 4.3 and
# Figure 7).
#
# BERT's layers normalise *after* each residual sum, x = LayerNorm(x + Sublayer(x)) (post-LN).
# Megatron-LM moved the LayerNorm to each sub-layer's *input*, x = x + Sublayer(LayerNorm(x))
# (pre-LN), with one LayerNorm after the last layer. Shoeybi et al. report that with the original
# order BERT's loss got worse as the model grew past BERT-large (336M parameters), while the
# re-ordered model kept improving up to 3.9B.
#
# Those sizes are far beyond this machine. Here the same question is asked at a size it can
# train: BERT (`BertForPreTraining`, post-LN) and Megatron-BERT (`MegatronBertForPreTraining`,
# pre-LN) of the same width, at growing depth, trained with the same learning rate, no warm-up,
# the same batches and the same number of steps on the built-in corpus; we report the held-out
# masked-LM loss at each depth, whichever way it goes.
#
# ```
# python examples/megatron_depth.py            # depths 1, 2, 4, 8: a few minutes on 2 CPU cores
# python examples/megatron_depth.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/megatron_depth`): `metrics.json` and `depth.png`, which
# a notebook also shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import os  # noqa: E402
import time  # noqa: E402

# One BLAS thread: the matrices here are small, and on a busy machine two BLAS threads per
# process spin against each other and run many times slower than one.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import optim, plots, scripting  # noqa: E402
from minitorch_nlp.data import load_text, stdlib_corpus  # noqa: E402
from minitorch_nlp.data.masking import MaskedLMCollator  # noqa: E402
from minitorch_nlp.data.tokenizers import WordPieceTokenizer  # noqa: E402
from minitorch_nlp.models.bert import BertConfig, BertForPreTraining, masked_lm_loss  # noqa: E402
from minitorch_nlp.models.megatron_bert import (MegatronBertConfig,  # noqa: E402
                                                MegatronBertForPreTraining)

SETTINGS = {
    "full": dict(max_chars=120_000, vocab_size=800, hidden=48, heads=4, depths=(1, 2, 4, 8),
                 length=32, batch=16, steps=300, lr=2e-3, validation_batches=8),
    "smoke": dict(max_chars=15_000, vocab_size=200, hidden=16, heads=2, depths=(1, 2),
                  length=16, batch=8, steps=6, lr=2e-3, validation_batches=2),
}
ORDERS = {"post-LN (BERT)": (BertConfig, BertForPreTraining),
          "pre-LN (Megatron-BERT)": (MegatronBertConfig, MegatronBertForPreTraining)}
parser = scripting.example_parser(
    "megatron_depth", "BERT (post-LN) vs Megatron-BERT (pre-LN) at growing depth (IV-E)",
    steps="training steps per model (300; smoke: 6)",
    text="a UTF-8 text file to use instead of the built-in corpus")
args = scripting.arguments(parser, smoke=SMOKE)
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)
if args.steps is not None:
    cfg = dict(cfg, steps=args.steps)


# %% [markdown]
# ## Data
#
# A WordPiece vocabulary learned from the first 90% of the text; windows of `length - 2` tokens
# between [CLS] and [SEP], masked as BERT masks them (15%, 80/10/10). Every model sees the same
# training windows and masks in the same order (drawn from one seed), and the validation windows
# come from the held-out 10%, masked once.

# %%
text = load_text(args.text) if args.text else stdlib_corpus(cfg["max_chars"])
split = int(len(text) * 0.9)
tokenizer = WordPieceTokenizer.train(text[:split], cfg["vocab_size"])
streams = [np.asarray(tokenizer.encode(part, add_special_tokens=False), dtype=np.int64)
           for part in (text[:split], text[split:])]
collator = MaskedLMCollator.from_tokenizer(tokenizer)
window = cfg["length"] - 2


def batches(stream, count, rng):
    masked = []
    for _ in range(count):
        starts = rng.integers(0, len(stream) - window, cfg["batch"])
        ids = np.stack([stream[s:s + window] for s in starts])
        column = np.ones((len(ids), 1), dtype=np.int64)
        ids = np.concatenate([column * tokenizer.cls_token_id, ids,
                              column * tokenizer.sep_token_id], axis=1)
        masked.append(collator(ids, rng=rng))
    return masked


train_batches = batches(streams[0], cfg["steps"], np.random.default_rng([args.seed, 1]))
validation = batches(streams[1], cfg["validation_batches"], np.random.default_rng([args.seed, 2]))
print(f"{len(tokenizer)} word pieces; {len(train_batches)} training batches of {cfg['batch']}")


# %% [markdown]
# ## Training one model
#
# AdamW at a constant learning rate (no warm-up: the setting in which Xiong et al., 2020, found
# post-LN fragile); the loss is the masked-LM loss (eq 25) on the prediction head, so both
# models have exactly the same parameters apart from where their LayerNorms sit (BERT's
# embedding LayerNorm against Megatron's final one).

# %%
def train(order, depth):
    config_class, model_class = ORDERS[order]
    mt.manual_seed(args.seed)
    model = model_class(config_class(
        vocab_size=len(tokenizer), hidden_size=cfg["hidden"], num_hidden_layers=depth,
        num_attention_heads=cfg["heads"], intermediate_size=4 * cfg["hidden"],
        max_position_embeddings=cfg["length"], pad_token_id=tokenizer.pad_token_id))
    optimizer = optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    for batch in scripting.progress(train_batches, desc=f"{order}, {depth} layers"):
        loss = masked_lm_loss(model(batch["input_ids"]).prediction_logits, batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with mt.no_grad():
        losses = [masked_lm_loss(model(batch["input_ids"]).prediction_logits,
                                 batch["labels"]).item() for batch in validation]
    return float(np.mean(losses)), model.num_parameters()


results, sizes = {order: {} for order in ORDERS}, {order: {} for order in ORDERS}
for depth in cfg["depths"]:
    for order in ORDERS:
        loss, size = train(order, depth)
        results[order][str(depth)], sizes[order][str(depth)] = loss, size
        print(f"{order:24s} {depth} layers ({size} parameters): held-out MLM loss {loss:.3f}")


# %% [markdown]
# ## The picture
#
# Held-out masked-LM loss against depth for the two orders. Shoeybi et al.'s claim, at their
# scale, is that the post-LN curve turns up with size while the pre-LN one keeps going down.
# After a few hundred steps both models are far from trained, so read the gap between the two
# orders at each depth and how it changes, not the level.

# %%
figure, axis = plots.pyplot().subplots(figsize=(6.5, 4))
for (order, by_depth), color in zip(results.items(), ("tab:red", "tab:blue")):
    depths = sorted(int(d) for d in by_depth)
    axis.plot(depths, [by_depth[str(d)] for d in depths], "o-", color=color, label=order)
axis.set(xscale="log", xlabel="layers", ylabel="held-out masked-LM loss (nats)",
         title="post-LN vs pre-LN at growing depth")
axis.set_xticks(depths, [str(d) for d in depths])
axis.minorticks_off()
axis.grid(alpha=0.3)
axis.legend()
plots.show(figure, out / "depth.png")

# %%
scripting.write_metrics(out, {"smoke": args.smoke, "seed": args.seed, "backend": args.backend,
                              "steps": cfg["steps"], "vocab_size": len(tokenizer),
                              "validation_loss": results, "parameters": sizes, "config": cfg,
                              "total_seconds": time.perf_counter() - run_start})
