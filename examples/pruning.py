# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Pruning a BERT: layers, heads and low-rank components
#
# *The NLP Cookbook*, section VI-B: LayerDrop (Fan et al., 2020), Poor Man's BERT (Sajjad et
# al., 2020), head importance (Michel et al., 2019; eq 53-55) and FLOP (Wang et al., 2020;
# eq 49-50), all from `minitorch_nlp.compress`.
#
# A small BERT learns a synthetic task, *is this sequence of letters sorted?*
# (`minitorch_nlp.data.sorted_or_not_task`). Then, without retraining, we drop layers by each
# strategy of the survey's figure 16 and prune heads by importance (eq 54) or at random, and
# measure the accuracy each time; last, FLOP factorises the feed-forward matrices and an L0
# penalty prunes their rank-one components towards a target sparsity.
#
# ```
# python examples/pruning.py            # the full run: minutes on 2 CPU cores
# python examples/pruning.py --smoke    # seconds
# ```
#
# Outputs go to `--out` (default `runs/pruning`): `metrics.json`, `layers.png`, `heads.png`
# and `flop.png`. In a notebook each figure also shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import copy  # noqa: E402
import os  # noqa: E402

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import plots, scripting  # noqa: E402
from minitorch_nlp.compress import hard_concrete, pruning  # noqa: E402
from minitorch_nlp.data import sorted_or_not_task  # noqa: E402
from minitorch_nlp.models.bert import BertConfig, BertForSequenceClassification  # noqa: E402

SETTINGS = {
    "full": dict(length=8, model=dict(num_hidden_layers=6, hidden_size=32, num_attention_heads=4,
                                      intermediate_size=64), train=4000, valid=1000,
                 batch=64, steps=600, lr=3e-3, layerdrop=0.2, finetune=100, flop_steps=150,
                 head_step=2),
    "smoke": dict(length=6, model=dict(num_hidden_layers=3, hidden_size=16, num_attention_heads=2,
                                       intermediate_size=32), train=256, valid=128,
                  batch=32, steps=12, lr=3e-3, layerdrop=0.2, finetune=3, flop_steps=4,
                  head_step=1),
}
ALPHABET = "abcdef"
parser = scripting.example_parser("pruning", "Pruning a BERT: layers, heads, FLOP (VI-B)",
                                  steps="training steps (600; smoke: 12)")
args = scripting.arguments(parser, smoke=SMOKE)
cfg, out = scripting.start(args, SETTINGS)
steps = args.steps or cfg["steps"]
rng = np.random.default_rng(args.seed)

# %% [markdown]
# ## The task and the model
#
# Each example is [CLS] followed by `length` letters; the label is 1 when the letters are in
# alphabetical order. Deciding it means comparing neighbours, which attention must learn. The
# model trains with LayerDrop (each layer skipped with probability p, Fan et al.), so that it
# later works without any one of them.

# %%
train_data = sorted_or_not_task(cfg["train"], cfg["length"], ALPHABET, args.seed)
valid = sorted_or_not_task(cfg["valid"], cfg["length"], ALPHABET, args.seed + 1)
print("first training example:", train_data[0][0], "label", train_data[1][0])


def build():
    return BertForSequenceClassification(BertConfig(
        vocab_size=len(ALPHABET) + 2, max_position_embeddings=cfg["length"] + 1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **cfg["model"]))


def train(model, steps, extra_loss=None):
    return scripting.fit_classifier(model, *train_data, steps, batch=cfg["batch"], lr=cfg["lr"],
                                    rng=rng, extra_loss=extra_loss)


def accuracy(model, head_mask=None):
    """Validation accuracy; ``head_mask`` (layers, heads) masks heads (eq 53)."""
    ids, labels = valid
    model.eval()
    with mt.no_grad():
        pooled = model.bert(ids, head_mask=head_mask).pooler_output
        logits = model.classifier(pooled)
    return float(np.mean(logits.numpy().argmax(-1) == labels))


model = build()
layer_drop = pruning.LayerDrop(model, cfg["layerdrop"], seed=args.seed)
losses = train(model, steps)
layer_drop.remove()
full = accuracy(model)
print(f"trained {steps} steps with LayerDrop p={cfg['layerdrop']}: validation accuracy "
      f"{full:.3f} (always guessing 'not sorted': {1 - valid[1].mean():.3f})")

# %% [markdown]
# ## Dropping layers (Poor Man's BERT, LayerDrop's rule)
#
# Each Poor Man's BERT strategy removes k of the N layers from the trained model, without
# retraining; `contribution` drops the layers whose output is most like their input. LayerDrop's
# own rule drops every other layer; last, the top half is dropped and the rest fine-tuned.

# %%
n_layers = model.config.num_hidden_layers
contributions = pruning.layer_contributions(
    model, [valid[0]], lambda m, ids: m.bert(ids, output_hidden_states=True).hidden_states)
by_strategy = {}
for strategy in pruning.POOR_MANS_STRATEGIES:
    curve = []
    for k in range(n_layers):
        try:
            dropped = pruning.poor_mans_layers_to_drop(strategy, n_layers, k, contributions)
        except ValueError:             # an alternate strategy has run out of layers
            break
        curve.append(accuracy(pruning.drop_layers(copy.deepcopy(model), dropped)))
    by_strategy[strategy] = curve
    print(f"  {strategy:15s} accuracy, 0, 1 ... layers dropped: "
          + " ".join(f"{a:.3f}" for a in curve))
every_other = pruning.layerdrop_layers_to_drop(n_layers, p=0.5)
layerdrop = accuracy(pruning.drop_layers(copy.deepcopy(model), every_other))
top = pruning.drop_layers(copy.deepcopy(model),
                          pruning.poor_mans_layers_to_drop("top", n_layers, n_layers // 2))
before = accuracy(top)
train(top, cfg["finetune"])
after = accuracy(top)
print(f"  LayerDrop's every other layer ({len(every_other)} dropped): {layerdrop:.3f}; "
      f"top {n_layers // 2} dropped: {before:.3f}, then fine-tuned: {after:.3f}")
layers = dict(by_strategy=by_strategy, contributions=contributions.tolist(),
              layerdrop_every_other=layerdrop, top_half=before, top_half_fine_tuned=after)

plt = plots.pyplot()
fig, ax = plt.subplots(figsize=(6, 4))
for strategy, curve in by_strategy.items():
    ax.plot(range(len(curve)), curve, marker="o", label=strategy)
ax.axhline(1 - valid[1].mean(), color="grey", linestyle=":", label="majority class")
ax.set(xlabel="layers dropped", ylabel="validation accuracy",
       title=f"Dropping layers of a {n_layers}-layer BERT (no retraining)")
ax.legend(fontsize="small")
plots.show(fig, out / "layers.png")

# %% [markdown]
# ## Pruning heads by importance (eq 54) or at random
#
# Michel et al. score each head by I_h = E|dL/dxi_h| (computed through forward hooks) and prune
# the least important first, recomputing the scores after each step, until each layer keeps one
# head; the accuracy is measured with the head mask (eq 53). In importance order the accuracy
# holds longer than in a random order. Then half the heads are removed from the weights.

# %%
n_heads = model.config.num_attention_heads


def loss_fn(m, batch):
    return m(batch[0], labels=batch[1]).loss


curves = {}
for order in ("importance", "random"):
    mask = np.ones((n_layers, n_heads))
    curve, pruned = [accuracy(model, mask)], [0]
    while pruned[-1] + cfg["head_step"] <= n_layers * n_heads - n_layers:
        if order == "importance":
            scores = pruning.head_importance(model, [valid], loss_fn, head_mask=mask)
        else:
            scores = [rng.random(n_heads) for _ in range(n_layers)]
        for layer, chosen in pruning.least_important_heads(scores, cfg["head_step"],
                                                           mask).items():
            mask[layer, chosen] = 0
        pruned.append(pruned[-1] + cfg["head_step"])
        curve.append(accuracy(model, mask))
    curves[order] = dict(pruned=pruned, accuracy=curve)
    print(f"  heads pruned in {order} order: " + " ".join(f"{a:.3f}" for a in curve))
scores = pruning.head_importance(model, [valid], loss_fn)
smaller = pruning.prune_heads(copy.deepcopy(model),
                              pruning.least_important_heads(scores, n_layers * n_heads // 2))
removed = dict(parameters_before=model.num_parameters(),
               parameters_after=smaller.num_parameters(), accuracy=accuracy(smaller))
print(f"  half the heads removed from the weights: {removed['parameters_before']} -> "
      f"{removed['parameters_after']} parameters, accuracy {removed['accuracy']:.3f}")
heads = dict(curves=curves, half_removed=removed)

fig, ax = plt.subplots(figsize=(6, 4))
for order, curve in curves.items():
    ax.plot(curve["pruned"], curve["accuracy"], marker="o", label=f"{order} order")
ax.axhline(1 - valid[1].mean(), color="grey", linestyle=":", label="majority class")
ax.set(xlabel="heads pruned", ylabel="validation accuracy",
       title=f"Head pruning of {n_layers * n_heads} heads (eq 54 vs random)")
ax.legend()
plots.show(fig, out / "heads.png")

# %% [markdown]
# ## FLOP: factorised feed-forward matrices pruned by an L0 penalty (eq 49-50)
#
# Each feed-forward matrix W becomes P G Q (from its SVD), G = diag(z) with hard-concrete gates,
# and the Lagrangian lambda_1 (s - t) + lambda_2 (s - t)^2 (the multipliers by gradient ascent)
# pushes the expected sparsity s towards each target t while the task loss keeps the accuracy;
# the gates' log_alpha learn faster (0.05) than the weights, as in Wang et al. On this task the
# accuracy holds even when almost every rank is pruned: comparing neighbours is attention's
# work, and the feed-forward layers need few ranks for it.

# %%
def flop(target):
    factored = copy.deepcopy(model)
    factorised = []
    for layer in factored.bert.encoder.layers:
        for name in ("linear1", "linear2"):
            gated = hard_concrete.FactorizedLinear.from_linear(
                getattr(layer.feed_forward, name), generator=mt.Generator().manual_seed(0))
            setattr(layer.feed_forward, name, gated)
            factorised.append(gated)
    total_rank = sum(f.rank for f in factorised)
    lambdas = [mt.nn.Parameter(mt.tensor(0.0)), mt.nn.Parameter(mt.tensor(0.0))]

    def sparsity():
        open_ranks = [f.gate.penalty() for f in factorised]
        return 1 - sum(open_ranks[1:], open_ranks[0]) / total_rank

    def penalty_after_ascent():
        for lam in lambdas:                       # the multipliers climb the penalty's gradient
            if lam.grad is not None:
                lam.data += 0.2 * lam.grad.data
                lam.grad = None
        return hard_concrete.flop_lagrangian(sparsity(), target, *lambdas)

    gates = [f.gate.log_alpha for f in factorised]
    others = [p for p in factored.parameters() if all(p is not g for g in gates)]
    scripting.fit_classifier(factored, *train_data, cfg["flop_steps"], batch=cfg["batch"],
                             lr=cfg["lr"], rng=rng, extra_loss=penalty_after_ascent,
                             param_groups=[{"params": others},
                                           {"params": gates, "lr": 0.05, "weight_decay": 0.0}])
    kept = sum(len(f.eval().export()[0].weight) for f in factorised)
    result = dict(target=target, expected_sparsity=float(sparsity().item()), kept_rank=kept,
                  total_rank=total_rank, accuracy=accuracy(factored))
    print(f"  FLOP target {target}: expected sparsity {result['expected_sparsity']:.2f}, rank "
          f"kept {kept} of {total_rank}, accuracy {result['accuracy']:.3f}")
    return result


flops = [flop(target) for target in (0.25, 0.5, 0.75)]
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot([r["expected_sparsity"] for r in flops], [r["accuracy"] for r in flops], marker="o")
ax.axhline(full, color="grey", linestyle="--", label="unpruned")
ax.axhline(1 - valid[1].mean(), color="grey", linestyle=":", label="majority class")
ax.set(xlabel="expected sparsity of the feed-forward ranks", ylabel="validation accuracy",
       title="FLOP (eq 49-50)", ylim=(0.45, 1.02))
ax.legend()
plots.show(fig, out / "flop.png")

# %%
scripting.write_metrics(out, dict(smoke=args.smoke, steps=steps, accuracy=full,
                                  train_losses=losses, layers=layers, heads=heads, flop=flops,
                                  config=cfg))
