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
# A small BERT learns *is this sequence of letters sorted?*
# (`minitorch_nlp.data.sorted_or_not_task`). Its Linear weights are then quantised to fewer and
# fewer bits (one range per matrix, or one per group of output neurons), with Q-BERT's
# Hessian-aware mixed precision, and with LQ-Nets' learned levels; last, Q8BERT fine-tunes it
# with fake quantisation and runs it with true int8 weights and activations.
#
# ```
# python examples/quantisation.py            # 7 minutes on 2 busy CPU cores (shared machine)
# python examples/quantisation.py --smoke    # seconds
# ```
#
# Outputs go to `--out` (default `runs/quantisation`): `metrics.json`, `bits.png` and
# `qbert.png`.

# %%
from __future__ import annotations

import copy
import os
import tempfile
import time
from pathlib import Path

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import plots, scripting  # noqa: E402
from minitorch_nlp.compress import hessian, lq_nets, quantization  # noqa: E402
from minitorch_nlp.data import sorted_or_not_task  # noqa: E402
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


def parse_args(argv=None):
    parser = scripting.example_parser(
        "quantisation", "Quantising a BERT: bits, Q-BERT, LQ-Nets, int8 (VI-C)",
        steps="training steps (600; smoke: 10)")
    return parser.parse_args(argv)


# %% [markdown]
# ## The model and the task
#
# [CLS] followed by `length` letters, label 1 when they are in alphabetical order.

# %%
def classifier(cfg):
    config = BertConfig(vocab_size=len(ALPHABET) + 2, max_position_embeddings=cfg["length"] + 1,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **cfg["model"])
    return BertForSequenceClassification(config)


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


# %% [markdown]
# ## Fewer bits: one range per matrix, or per group of output neurons (eq 61)
#
# Every Linear weight becomes Clamp(round(W S), -M, M) / S, S = M / max|W| for the whole matrix,
# or, in the encoder, for each of 4 groups of consecutive output neurons (Q-BERT's group-wise
# quantisation; the pooler and the 2-class classifier keep one range).

# %%
def bit_width_study(model, valid):
    results = []
    for bits in BITS:
        row = dict(bits=bits, bytes=size_in_bytes(model, bits))
        for groups in (1, 4):
            quantised = copy.deepcopy(model)
            hessian.quantize_weights_(quantised.bert.encoder, bits, groups)
            hessian.quantize_weights_(quantised.bert.pooler, bits)
            hessian.quantize_weights_(quantised.classifier, bits)
            row[f"accuracy_groups_{groups}"] = evaluate(quantised, valid)
        results.append(row)
        print(f"  {bits} bits: {row['bytes'] / 1024:.1f} KiB, accuracy "
              f"{row['accuracy_groups_1']:.3f} (one range), {row['accuracy_groups_4']:.3f} "
              "(4 groups)")
    return results


# %% [markdown]
# ## Q-BERT: bits by Hessian sensitivity (eq 59-60)
#
# The top eigenvalue of the Hessian of the loss (eq 59) in each encoder layer's weights, by power
# iteration on Hessian-vector products (eq 60, second-order autograd), on each of a few
# mini-batches; a layer's sensitivity is Q-BERT's |mean| + std of its eigenvalues over the
# batches (a layer whose curvature varies from batch to batch counts as sensitive too); the more
# sensitive half
# of the layers keeps 4 bits, the rest get 2 (4 groups per matrix; embeddings, pooler and
# classifier stay float). Compared with the reverse assignment, which uses as many bits.

# %%
def qbert_study(model, train_data, valid, cfg):
    size = cfg["hessian_batch"]
    batches = [(train_data[0][i:i + size], train_data[1][i:i + size])
               for i in range(0, cfg["hessian_batches"] * size, size)]
    eigenvalues = hessian.layer_eigenvalues(model, batches, iterations=cfg["power_iterations"],
                                            tol=1e-3)
    sensitivities = hessian.sensitivities_from_eigenvalues(eigenvalues)
    bits = hessian.allocate_bits(sensitivities, (2, 4))
    results = dict(eigenvalues=eigenvalues.tolist(), sensitivities=sensitivities.tolist(),
                   bits=bits)
    for name, assignment in (("hessian", bits), ("reversed", [6 - b for b in bits])):
        quantised = copy.deepcopy(model)
        for layer, b in zip(quantised.bert.encoder.layers, assignment):
            hessian.quantize_weights_(layer, b, groups=4)
        results[f"accuracy_{name}"] = evaluate(quantised, valid)
    print(f"  sensitivities |mean| + std {np.round(sensitivities, 4).tolist()} -> bits {bits}: "
          "accuracy "
          f"{results['accuracy_hessian']:.3f} (reversed: {results['accuracy_reversed']:.3f})")
    return results


# %% [markdown]
# ## LQ-Nets: learned levels (eq 56-57)
#
# At K bits, LQ-Nets' levels are the 2^K values v^T e, e in {-1, 1}^K, with the basis v fitted
# to each weight matrix by QEM (alternating encodings and least squares); uniform symmetric
# quantisation at the same K is the baseline.

# %%
def lq_study(model, valid):
    results = []
    for bits in (2, 3):
        learned = copy.deepcopy(model)
        with mt.no_grad():
            for weight in linear_weights(learned):
                basis = lq_nets.fit_basis(weight.numpy(), bits)
                weight.data[...] = lq_nets.lq_encode(weight.numpy(), basis)[1]
        uniform = hessian.quantize_weights_(copy.deepcopy(model), bits)
        results.append(dict(bits=bits, accuracy_lq=evaluate(learned, valid),
                            accuracy_uniform=evaluate(uniform, valid)))
        print(f"  {bits} bits: LQ-Nets {results[-1]['accuracy_lq']:.3f}, uniform "
              f"{results[-1]['accuracy_uniform']:.3f}")
    return results


# %% [markdown]
# ## Q8BERT: fake quantisation while fine-tuning, then int8 inference (eq 61)
#
# `prepare_qat` swaps each Linear for a fake-quantised one (straight-through gradient, EMA input
# ranges); after a short fine-tuning `convert_to_int8` gives int8 weights whose products run on
# the backend's int8 GEMM kernel. The saved model and its time per batch on the numba backend
# are compared with float32.

# %%
def q8bert_study(model, train_data, valid, cfg, rng):
    qat = quantization.prepare_qat(copy.deepcopy(model), decay=0.9)
    scripting.fit_classifier(qat, *train_data, cfg["qat_steps"], batch=cfg["batch"],
                             lr=cfg["lr"] / 3, rng=rng)
    fake = evaluate(qat, valid)
    int8 = quantization.convert_to_int8(qat)
    results = dict(accuracy_float32=evaluate(model, valid), accuracy_fake_quantised=fake,
                   accuracy_int8=evaluate(int8, valid))
    with tempfile.TemporaryDirectory() as folder:
        for name, m in (("float32", model), ("int8", int8)):
            mt.save(m.state_dict(), Path(folder) / f"{name}.npz")
            results[f"file_bytes_{name}"] = (Path(folder) / f"{name}.npz").stat().st_size
    ids = valid[0][:cfg["timing_batch"]]
    for name, m in (("float32", model), ("int8", int8)):
        m.to("numba")
        with mt.no_grad():
            m(ids)
            start = time.perf_counter()
            for _ in range(5):
                m(ids)
        results[f"ms_per_batch_{name}"] = (time.perf_counter() - start) / 5 * 1e3
    print(f"  accuracy float32 {results['accuracy_float32']:.3f}, fake-quantised {fake:.3f}, "
          f"int8 {results['accuracy_int8']:.3f}; file {results['file_bytes_float32']} -> "
          f"{results['file_bytes_int8']} bytes; numba {results['ms_per_batch_float32']:.1f} -> "
          f"{results['ms_per_batch_int8']:.1f} ms per batch of {len(ids)}")
    return results


# %% [markdown]
# ## Pictures

# %%
def plot(bit_widths, qbert, out):
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for groups in (1, 4):
        ax.plot([r["bits"] for r in bit_widths], [r[f"accuracy_groups_{groups}"]
                                                   for r in bit_widths],
                marker="o", label=f"{groups} range{'s' if groups > 1 else ''} per matrix")
    ax.set(xlabel="bits per Linear weight", ylabel="validation accuracy",
           title="Accuracy per bit width (eq 61)")
    size = ax.twinx()
    size.plot([r["bits"] for r in bit_widths], [r["bytes"] / 1024 for r in bit_widths],
              color="grey", linestyle="--")
    size.set_ylabel("model size, KiB (dashed)")
    ax.legend()
    plots.save(fig, out / "bits.png")
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
    plots.save(fig, out / "qbert.png")


# %% [markdown]
# ## The run

# %%
def main(argv=None):
    args = parse_args(argv)
    cfg, out = scripting.start(args, SETTINGS)
    train_data, valid = (sorted_or_not_task(cfg[part], cfg["length"], ALPHABET, args.seed + i)
                         for i, part in enumerate(("train", "valid")))
    model, rng = classifier(cfg), np.random.default_rng(args.seed)
    steps = args.steps or cfg["steps"]
    losses = scripting.fit_classifier(model, *train_data, steps, batch=cfg["batch"],
                                      lr=cfg["lr"], rng=rng)
    print(f"trained {steps} steps: validation accuracy {evaluate(model, valid):.3f}")
    bit_widths = bit_width_study(model, valid)
    qbert = qbert_study(model, train_data, valid, cfg)
    lq = lq_study(model, valid)
    q8 = q8bert_study(model, train_data, valid, cfg, rng)
    plot(bit_widths, qbert, out)
    return scripting.write_metrics(out, dict(smoke=args.smoke, steps=steps, train_losses=losses,
                                             bit_widths=bit_widths, qbert=qbert, lq_nets=lq,
                                             q8bert=q8, config=cfg))


if __name__ == "__main__":
    main()
