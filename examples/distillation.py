# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Knowledge distillation: DistilBERT-, TinyBERT- and MobileBERT-style students of one teacher
#
# *The NLP Cookbook*, section VI-A (eq 35-48): Hinton et al.'s soft targets (eq 36-39),
# DistilBERT's initialisation from every other teacher layer, TinyBERT's layer-wise losses
# (eq 40-44) and MobileBERT's feature-map and attention transfer (eq 45-47).
#
# A BERT teacher is trained on a synthetic classification task made from
# `minitorch_nlp.data.sort_task`: *is this sequence of letters in alphabetical order?* (half the
# sequences are sorted, half are random). Four students then learn from it:
#
# * **DistilBERT**: half the teacher's layers, the same width, initialised from the teacher's
#   layers 0, 2, ...; trained on eq 39 (soft targets at T = 2 and the labels);
# * the same **DistilBERT from random weights**, to show what the initialisation gives;
# * **TinyBERT**: half the layers *and* half the width; first the layer-wise losses (embeddings,
#   attention scores, hidden states through W_e, W_h), then the prediction layer (eq 44);
# * **MobileBERT**: as deep as the teacher, as wide between layers, but with bottlenecks inside
#   each layer (a quarter of the width) and NoNorm; first feature-map and attention transfer
#   layer by layer (eq 46-47), then eq 39 on the predictions.
#
# ```
# python examples/distillation.py            # the full run: minutes on 2 CPU cores
# python examples/distillation.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/distillation`): `metrics.json` (the table below) and
# `distillation.png` (each student's training loss), which a notebook also shows below the cell
# that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import os  # noqa: E402
import time  # noqa: E402

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

from minitorch_nlp import optim, plots, scripting  # noqa: E402
from minitorch_nlp.compress import (Distiller, KnowledgeDistillationLoss,  # noqa: E402
                                    MobileBertTransferLoss, TinyBertLoss)
from minitorch_nlp.data import sort_task  # noqa: E402
from minitorch_nlp.models.bert import BertConfig, BertForSequenceClassification  # noqa: E402
from minitorch_nlp.models.distilbert import (DistilBertConfig,  # noqa: E402
                                             DistilBertForSequenceClassification,
                                             distilbert_from_teacher)
from minitorch_nlp.models.mobilebert import (MobileBertConfig,  # noqa: E402
                                             MobileBertForSequenceClassification)

SETTINGS = {
    "full": dict(examples=3000, min_len=5, max_len=10, hidden=64, layers=4, heads=4,
                 teacher_steps=800, student_steps=600, batch=32, lr=2e-3, timing_batch=64,
                 timing_backend="numba"),
    "smoke": dict(examples=200, min_len=4, max_len=6, hidden=16, layers=2, heads=2,
                  teacher_steps=15, student_steps=10, batch=16, lr=2e-3, timing_batch=16,
                  timing_backend="numpy"),
}
PAD, CLS = 0, 1
ALPHABET = "abcdefghij"
parser = scripting.example_parser(
    "distillation", "Knowledge distillation of a BERT classifier into DistilBERT-, TinyBERT- and "
    "MobileBERT-style students (VI-A)", backend=False)
args = scripting.arguments(parser, smoke=SMOKE)
settings, out = scripting.start(args, SETTINGS)
rng = np.random.default_rng(args.seed)


# %% [markdown]
# ## Data: sorted or not
#
# `sort_task` gives random letter sequences and their sorted versions; each sorted version is a
# positive example and each random one a negative (labelled by checking, since a short random
# sequence is sometimes sorted). The ids are [CLS] = 1, then the letters 2 .. 11, padded with 0.

# %%
def make_data(settings, seed):
    pairs = sort_task(settings["examples"], settings["min_len"], settings["max_len"], ALPHABET,
                      seed=seed)
    rng = np.random.default_rng(seed)
    sequences = [target if rng.random() < 0.5 else source for source, target in pairs]
    time_steps = settings["max_len"] + 1
    ids = np.full((len(sequences), time_steps), PAD, dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, :len(sequence) + 1] = [CLS] + [2 + ALPHABET.index(c) for c in sequence]
    labels = np.array([int(s == sorted(s)) for s in sequences])
    split = len(ids) * 4 // 5
    return (ids[:split], labels[:split]), (ids[split:], labels[split:])


def batches(data, size, rng):
    ids, labels = data
    while True:
        chosen = rng.integers(0, len(ids), size)
        yield dict(input_ids=ids[chosen], attention_mask=ids[chosen] != PAD,
                   labels=labels[chosen])


train, test = make_data(settings, args.seed)
print(f"{len(train[0])} training and {len(test[0])} test sequences; {train[1].mean():.0%} sorted")


# %% [markdown]
# ## The teacher: a 4-layer BERT classifier
#
# Trained on the labels alone (cross-entropy), as any fine-tuned BERT.

# %%
def bert_config(settings, layers, hidden, heads):
    return dict(vocab_size=2 + len(ALPHABET), hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=4 * hidden,
                max_position_embeddings=settings["max_len"] + 1, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, classifier_dropout=0.0)


def fit(loss_of_batch, parameters, data, settings, steps, rng, lr=None):
    """AdamW on ``loss_of_batch(batch)`` for ``steps`` random batches; the loss curve."""
    optimizer = optim.AdamW([p for p in parameters if p.requires_grad],
                            lr=lr or settings["lr"])
    stream, losses = batches(data, settings["batch"], rng), []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_of_batch(next(stream))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def accuracy(model, data):
    ids, labels = data
    with model.inference():
        logits = model(ids, attention_mask=ids != PAD).logits.numpy()
    return float((logits.argmax(-1) == labels).mean())


teacher = BertForSequenceClassification(BertConfig(**bert_config(
    settings, settings["layers"], settings["hidden"], settings["heads"])))
curves = {"teacher": fit(lambda batch: teacher(**batch).loss, teacher.parameters(), train,
                         settings, settings["teacher_steps"], rng)}
models = {"teacher": teacher}
print(f"teacher: test accuracy {accuracy(teacher, test):.3f}")


# %% [markdown]
# ## The students
#
# Each student gets the same number of distillation steps. TinyBERT and MobileBERT spend half of
# them on the intermediate layers and half on the predictions, as in their papers' two stages.

# %%
def distil(teacher, student, objective, data, settings, steps, rng):
    distiller = Distiller(teacher, student, objective)
    return fit(lambda batch: distiller(batch).loss, distiller.parameters(), data, settings,
               steps, rng)


def predictions_objective():
    return KnowledgeDistillationLoss(temperature=2.0, alpha=0.5)                  # eq 39


def make_students(teacher, settings):
    hidden, layers, heads = settings["hidden"], settings["layers"], settings["heads"]
    distil_config = DistilBertConfig(**bert_config(settings, layers // 2, hidden, heads))
    from_teacher = DistilBertForSequenceClassification(distil_config)
    from_teacher.bert.load_state_dict(distilbert_from_teacher(teacher.bert).state_dict())
    tiny = BertForSequenceClassification(BertConfig(**bert_config(settings, layers // 2,
                                                                  hidden // 2, heads)))
    mobile = MobileBertForSequenceClassification(MobileBertConfig(
        **{**bert_config(settings, layers, hidden, heads), "intermediate_size": hidden // 2},
        embedding_size=hidden // 4, intra_bottleneck_size=hidden // 4,
        num_feedforward_networks=2))
    return {"DistilBERT": from_teacher,
            "DistilBERT, random init": DistilBertForSequenceClassification(distil_config),
            "TinyBERT": tiny, "MobileBERT": mobile}


def train_student(name, teacher, student, data, settings, rng):
    steps = settings["student_steps"]
    if name.startswith("DistilBERT"):
        return distil(teacher, student, predictions_objective(), data, settings, steps, rng)
    if name == "TinyBERT":
        layerwise = TinyBertLoss(student.config, teacher.config,
                                 objectives=("embedding", "attention", "hidden"))
    else:
        layerwise = MobileBertTransferLoss(objectives=("feature_map", "attention"))
    return (distil(teacher, student, layerwise, data, settings, steps // 2, rng)
            + distil(teacher, student, predictions_objective(), data, settings, steps // 2, rng))


for name, student in make_students(teacher, settings).items():
    curves[name] = train_student(name, teacher, student, train, settings, rng)
    models[name] = student
    print(f"{name}: test accuracy {accuracy(student, test):.3f}")


# %% [markdown]
# ## The table: size, speed, accuracy, each relative to the teacher
#
# Inference time is the median of 5 forward passes on one batch, on the numba backend (numpy in
# `--smoke`, where compiling the kernels would take longer than the run).

# %%
def milliseconds_per_batch(model, data, settings):
    ids = data[0][:settings["timing_batch"]]
    model = model.to(settings["timing_backend"])
    times = []
    with model.inference():
        for _ in range(6):
            start = time.perf_counter()
            model(ids, attention_mask=ids != PAD)
            times.append(time.perf_counter() - start)
    model.to("numpy")
    return 1000 * float(np.median(times[1:]))


rows = {}
for name, model in models.items():
    rows[name] = dict(parameters=model.num_parameters(), accuracy=accuracy(model, test),
                      ms_per_batch=milliseconds_per_batch(model, test, settings))
base = rows["teacher"]
for row in rows.values():
    row.update(size=row["parameters"] / base["parameters"],
               speed=base["ms_per_batch"] / row["ms_per_batch"],
               relative_accuracy=row["accuracy"] / max(base["accuracy"], 1e-9))
print(f"{'model':<24}{'parameters':>11}{'size':>7}{'ms/batch':>10}{'speedup':>9}"
      f"{'accuracy':>10}{'of teacher':>12}")
for name, row in rows.items():
    print(f"{name:<24}{row['parameters']:>11}{row['size']:>7.0%}{row['ms_per_batch']:>10.2f}"
          f"{row['speed']:>8.1f}x{row['accuracy']:>10.3f}{row['relative_accuracy']:>12.0%}")

# %% [markdown]
# ## The training losses

# %%
fig, ax = plots.pyplot().subplots(figsize=(7, 4))
for name, curve in curves.items():
    ax.plot(np.arange(1, len(curve) + 1), curve, label=name)
ax.set(xlabel="step", ylabel="training loss", yscale="log",
       title="teacher (cross-entropy) and students (their distillation losses)")
ax.legend()
plots.show(fig, out / "distillation.png")

# %%
scripting.write_metrics(out, dict(smoke=args.smoke, settings=settings, table=rows, curves=curves))
