# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Quantising a BERT: bit widths, Q-BERT, LQ-Nets and int8 inference
#
# *The NLP Cookbook*, section VI-C: LQ-Nets (Zhang et al., 2018; eq 56-58), Q-BERT (Shen et al.,
# 2020; eq 59-60) and Q8BERT (Zafrir et al., 2019; eq 61), from `minitorch_nlp.compress`.
#
# A small BERT learns *is this sequence of letters sorted, or is one neighbouring pair
# swapped?* Its Linear weights are then quantised to fewer and
# fewer bits (one range per matrix, or one per group of output neurons), with Q-BERT's
# Hessian-aware mixed precision, and with LQ-Nets' learned levels; last, Q8BERT fine-tunes it
# with fake quantisation and runs it with true int8 weights and activations.
#
# ```
# python examples/quantisation.py            # the full run: minutes on 2 CPU cores
# python examples/quantisation.py --smoke    # seconds
# ```
#
# Outputs go to `--out` (default `runs/quantisation`): `metrics.json`, `bits.png` and
# `qbert.png`. In a notebook each figure also shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import copy  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import plots, scripting  # noqa: E402
from minitorch_nlp.compress import hessian, lq_nets, quantization  # noqa: E402
from minitorch_nlp.models.bert import BertConfig, BertForSequenceClassification  # noqa: E402
from minitorch_nlp.nn import Linear  # noqa: E402

SETTINGS = {
    "full": dict(length=8, model=dict(num_hidden_layers=4, hidden_size=32, num_attention_heads=4,
                                      intermediate_size=64), train=4000, valid=1000,
                 batch=64, steps=600, lr=3e-3, qat_steps=100, hessian_batch=64, hessian_batches=4,
                 power_iterations=20, timing_batch=64),
    "smoke": dict(length=6, model=dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=2,
                                       intermediate_size=32), train=256, valid=128,
                  batch=32, steps=10, lr=3e-3, qat_steps=3, hessian_batch=8, hessian_batches=2,
                  power_iterations=3, timing_batch=8),
}
ALPHABET = "abcdef"
BITS = (8, 6, 4, 3, 2)
parser = scripting.example_parser(
    "quantisation", "Quantising a BERT: bits, Q-BERT, LQ-Nets, int8 (VI-C)",
    steps="training steps (600; smoke: 10)")
args = scripting.arguments(parser, smoke=SMOKE)
cfg, out = scripting.start(args, SETTINGS)
steps = args.steps or cfg["steps"]
rng = np.random.default_rng(args.seed)
plt = plots.pyplot()

# %% [markdown]
# ## The model and the task
#
# [CLS] followed by `length` letters in alphabetical order (label 1) or the same with one
# neighbouring pair swapped (label 0): a single inversion anywhere, so every pair of neighbours
# has to be compared precisely, and rounding the weights shows. A small BERT learns it in
# float32; everything after quantises that one trained model.

# %%
def near_sorted_task(n, seed):
    """(ids (n, 1 + length), labels (n,)): [CLS] (id 1), then letters as ids 2, 3, ...; label 0
    rows have one ascending neighbouring pair swapped."""
    rng = np.random.default_rng(seed)
    letters = np.sort(rng.integers(0, len(ALPHABET), (n, cfg["length"])), axis=1)
    flat = letters[:, 0] == letters[:, -1]                  # no ascent to swap: make one
    letters[flat & (letters[:, 0] > 0), 0] -= 1
    letters[flat & (letters[:, -1] == 0), -1] += 1
    labels = rng.integers(0, 2, n)
    for row in np.flatnonzero(labels == 0):
        j = rng.choice(np.flatnonzero(np.diff(letters[row]) > 0))
        letters[row, [j, j + 1]] = letters[row, [j + 1, j]]
    return np.concatenate([np.ones((n, 1), dtype=np.int64), letters + 2], axis=1), labels


train_data = near_sorted_task(cfg["train"], args.seed)
valid = near_sorted_task(cfg["valid"], args.seed + 1)
print("a sorted example:", "".join(ALPHABET[i - 2] for i in valid[0][valid[1] == 1][0][1:]),
      "  an unsorted one:", "".join(ALPHABET[i - 2] for i in valid[0][valid[1] == 0][0][1:]))
model = BertForSequenceClassification(BertConfig(
    vocab_size=len(ALPHABET) + 2, max_position_embeddings=cfg["length"] + 1,
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **cfg["model"]))


def evaluate(model, data):
    model.eval()
    with mt.no_grad():
        predictions = model(data[0]).logits.numpy().argmax(-1)
    return float(np.mean(predictions == data[1]))


def linear_weights(model):
    return [m.weight for m in model.modules() if isinstance(m, Linear)]


def size_in_bytes(model, bits):
    """The parameters' storage with every Linear weight at ``bits`` bits and the rest float32."""
    quantised = sum(w.size for w in linear_weights(model))
    return (model.num_parameters() - quantised) * 4 + quantised * bits / 8


losses = scripting.fit_classifier(model, *train_data, steps, batch=cfg["batch"], lr=cfg["lr"],
                                  rng=rng)
float_accuracy = evaluate(model, valid)
majority = float(1 - valid[1].mean())
print(f"trained {steps} steps: validation accuracy {float_accuracy:.3f} "
      f"(always guessing 'not sorted': {majority:.3f})")

# %% [markdown]
# ## Fewer bits: one range per matrix, or per group of output neurons (eq 61)
#
# Every Linear weight becomes Clamp(round(W S), -M, M) / S, S = M / max|W| for the whole matrix,
# or, in the encoder, for each of 4 groups of consecutive output neurons (Q-BERT's group-wise
# quantisation; the pooler and the 2-class classifier keep one range).

# %%
bit_widths = []
for bits in BITS:
    row = dict(bits=bits, bytes=size_in_bytes(model, bits))
    for groups in (1, 4):
        quantised = copy.deepcopy(model)
        hessian.quantize_weights_(quantised.bert.encoder, bits, groups)
        hessian.quantize_weights_(quantised.bert.pooler, bits)
        hessian.quantize_weights_(quantised.classifier, bits)
        row[f"accuracy_groups_{groups}"] = evaluate(quantised, valid)
    bit_widths.append(row)
    print(f"  {bits} bits: {row['bytes'] / 1024:.1f} KiB, accuracy "
          f"{row['accuracy_groups_1']:.3f} (one range), {row['accuracy_groups_4']:.3f} "
          "(4 groups)")

fig, ax = plt.subplots(figsize=(6, 4))
for groups in (1, 4):
    ax.plot([r["bits"] for r in bit_widths], [r[f"accuracy_groups_{groups}"] for r in bit_widths],
            marker="o", label=f"{groups} range{'s' if groups > 1 else ''} per matrix")
ax.axhline(float_accuracy, color="black", linewidth=0.8, label="float32")
ax.axhline(majority, color="grey", linestyle=":", label="majority class")
ax.set(xlabel="bits per Linear weight", ylabel="validation accuracy",
       title="Accuracy per bit width (eq 61)")
size = ax.twinx()
size.plot([r["bits"] for r in bit_widths], [r["bytes"] / 1024 for r in bit_widths],
          color="grey", linestyle="--")
size.set_ylabel("model size, KiB (dashed)")
ax.legend(fontsize="small")
plots.show(fig, out / "bits.png")

# %% [markdown]
# ## Q-BERT: bits by Hessian sensitivity (eq 59-60)
#
# The top eigenvalue of the Hessian of the loss (eq 59) in each encoder layer's weights, by power
# iteration on Hessian-vector products (eq 60, second-order autograd), on each of a few
# mini-batches; a layer's sensitivity is Q-BERT's |mean| + std of its eigenvalues over the
# batches (a layer whose curvature varies from batch to batch counts as sensitive too); the more
# sensitive half of the layers keeps 4 bits, the rest get 2 (4 groups per matrix; embeddings,
# pooler and classifier stay float). Compared with the reverse assignment, which uses as many
# bits.

# %%
size = cfg["hessian_batch"]
batches = [(train_data[0][i:i + size], train_data[1][i:i + size])
           for i in range(0, cfg["hessian_batches"] * size, size)]
eigenvalues = hessian.layer_eigenvalues(model, batches, iterations=cfg["power_iterations"],
                                        tol=1e-3)
sensitivities = hessian.sensitivities_from_eigenvalues(eigenvalues)
layer_bits = hessian.allocate_bits(sensitivities, (2, 4))
qbert = dict(eigenvalues=eigenvalues.tolist(), sensitivities=sensitivities.tolist(),
             bits=layer_bits)
for name, assignment in (("hessian", layer_bits), ("reversed", [6 - b for b in layer_bits])):
    quantised = copy.deepcopy(model)
    for layer, b in zip(quantised.bert.encoder.layers, assignment):
        hessian.quantize_weights_(layer, b, groups=4)
    qbert[f"accuracy_{name}"] = evaluate(quantised, valid)
print(f"  sensitivities |mean| + std {np.round(sensitivities, 4).tolist()} -> bits {layer_bits}: "
      f"accuracy {qbert['accuracy_hessian']:.3f} (reversed: {qbert['accuracy_reversed']:.3f})")

fig, ax = plt.subplots(figsize=(6, 4))
layers = np.arange(len(qbert["sensitivities"]))
ax.bar(layers, qbert["sensitivities"], color="lightsteelblue", label="|mean| + std")
for layer, row in enumerate(qbert["eigenvalues"]):
    ax.plot([layer] * len(row), row, "k.", label="one batch" if layer == 0 else None)
for layer, (value, bits) in enumerate(zip(qbert["sensitivities"], qbert["bits"])):
    ax.annotate(f"{bits} bits", (layer, value), ha="center", va="bottom")
ax.set(xlabel="encoder layer", ylabel="top Hessian eigenvalue",
       title="Q-BERT: sensitivity per layer (eq 60) and the bits it gets")
ax.legend()
plots.show(fig, out / "qbert.png")

# %% [markdown]
# ## LQ-Nets: learned levels (eq 56-57)
#
# At K bits, LQ-Nets' levels are the 2^K values v^T e, e in {-1, 1}^K, with the basis v fitted
# to each weight matrix by QEM (alternating encodings and least squares); uniform symmetric
# quantisation at the same K is the baseline.

# %%
lq = []
for bits in (2, 3):
    learned = copy.deepcopy(model)
    with mt.no_grad():
        for weight in linear_weights(learned):
            basis = lq_nets.fit_basis(weight.numpy(), bits)
            weight.data[...] = lq_nets.lq_encode(weight.numpy(), basis)[1]
    uniform = hessian.quantize_weights_(copy.deepcopy(model), bits)
    lq.append(dict(bits=bits, accuracy_lq=evaluate(learned, valid),
                   accuracy_uniform=evaluate(uniform, valid)))
    print(f"  {bits} bits: LQ-Nets {lq[-1]['accuracy_lq']:.3f}, uniform "
          f"{lq[-1]['accuracy_uniform']:.3f}")

# %% [markdown]
# ## Q8BERT: fake quantisation while fine-tuning, then int8 inference (eq 61)
#
# `prepare_qat` swaps each Linear for a fake-quantised one (straight-through gradient, EMA input
# ranges); after a short fine-tuning `convert_to_int8` gives int8 weights whose products run on
# the backend's int8 GEMM kernel. The saved model and its time per batch on the numba backend
# are compared with float32.

# %%
qat = quantization.prepare_qat(copy.deepcopy(model), decay=0.9)
scripting.fit_classifier(qat, *train_data, cfg["qat_steps"], batch=cfg["batch"],
                         lr=cfg["lr"] / 3, rng=rng)
fake = evaluate(qat, valid)
int8 = quantization.convert_to_int8(qat)
q8 = dict(accuracy_float32=evaluate(model, valid), accuracy_fake_quantised=fake,
          accuracy_int8=evaluate(int8, valid))
with tempfile.TemporaryDirectory() as folder:
    for name, m in (("float32", model), ("int8", int8)):
        mt.save(m.state_dict(), Path(folder) / f"{name}.npz")
        q8[f"file_bytes_{name}"] = (Path(folder) / f"{name}.npz").stat().st_size
ids = valid[0][:cfg["timing_batch"]]
for name, m in (("float32", model), ("int8", int8)):
    m.to("numba")
    with mt.no_grad():
        m(ids)
        began = time.perf_counter()
        for _ in range(5):
            m(ids)
    q8[f"ms_per_batch_{name}"] = (time.perf_counter() - began) / 5 * 1e3
print(f"  accuracy float32 {q8['accuracy_float32']:.3f}, fake-quantised {fake:.3f}, "
      f"int8 {q8['accuracy_int8']:.3f}; file {q8['file_bytes_float32']} -> "
      f"{q8['file_bytes_int8']} bytes; numba {q8['ms_per_batch_float32']:.1f} -> "
      f"{q8['ms_per_batch_int8']:.1f} ms per batch of {len(ids)}")

# %%
scripting.write_metrics(out, dict(smoke=args.smoke, steps=steps, train_losses=losses,
                                  bit_widths=bit_widths, qbert=qbert, lq_nets=lq, q8bert=q8,
                                  config=cfg))
