r"""Knowledge distillation (Hinton, Vinyals and Dean, 2015, "Distilling the Knowledge in a Neural
Network"), the survey's section VI-A, eq 35-39, and the ``Distiller`` that trains a student
beside a frozen teacher.

A teacher's output distribution carries more than its top class: which wrong classes it finds
plausible ("dark knowledge"). Softening both models' distributions with a temperature T > 1 and
training the student to match the teacher's (the soft targets), alongside the usual loss on the
true labels (the hard targets), transfers that knowledge to a smaller model:

* ``temperature_softmax``: p_i = exp(z_i / T) / sum_j exp(z_j / T) (eq 36; T = 1 is the plain
  softmax of eq 35, ``functional.softmax``);
* ``soft_target_loss``: L_D = sum_i -p_i(z_t, T) log p_i(z_s, T), the cross-entropy of the
  student's softened distribution against the teacher's (eq 37);
* ``hard_target_loss``: L_s = sum_i -y_i log p_i(z_s, 1), cross-entropy on the labels (eq 38);
* ``distillation_loss``: L = alpha T^2 L_D + beta L_s (eq 39, with Hinton's T^2; see there);
* ``cosine_hidden_loss``: 1 - cos(h_s, h_t) per token, the third term of DistilBERT's triple loss
  (Sanh et al., 2019), which ``TripleLoss`` combines with eq 37 on the masked-LM logits and the
  masked-LM loss;
* ``Distiller``: runs the teacher in evaluation mode with no graph recorded (its parameters are
  frozen too), the student beside it, and an objective on both outputs; it can keep the
  teacher's outputs on disk, so a multi-epoch run computes them once.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import os
from pathlib import Path

import numpy as np

from .. import cookbook
from .. import functional as F
from ..autograd import Tensor, as_tensor, tensor
from ..io import load, save
from ..nn import Module, TransformerStack
from ..nn.outputs import ModelOutput

__all__ = ["Distiller", "KnowledgeDistillationLoss", "TripleLoss", "check_temperature",
           "cosine_hidden_loss", "distillation_loss", "hard_target_loss", "soft_target_loss",
           "temperature_softmax", "transformer_stack"]

IGNORE_INDEX = -100


def check_temperature(temperature, where):
    """``temperature`` as a float, or a ``ValueError`` naming ``where`` unless it is a finite
    number > 0 (T -> 0 is the argmax, which has no gradient; T <= 0 reverses or breaks it)."""
    if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
            or not math.isfinite(temperature) or temperature <= 0):
        raise ValueError(f"{where}: temperature must be a finite number > 0, got "
                         f"{temperature!r}; T = 1 is the plain softmax, T > 1 softens it")
    return float(temperature)


def _check_pair(student_logits, teacher_logits, where):
    if student_logits.shape == teacher_logits.shape:
        return
    if student_logits.shape[:-1] == teacher_logits.shape[:-1]:
        raise ValueError(f"{where}: the student's logits have {student_logits.shape[-1]} classes "
                         f"and the teacher's {teacher_logits.shape[-1]}: distillation needs "
                         "the same vocabulary (classes) in both models")
    raise ValueError(f"{where}: student logits {student_logits.shape} and teacher logits "
                     f"{teacher_logits.shape} must have the same shape (..., classes)")


def _mean_over(per_position, mask, where):
    """The mean of ``per_position`` (...) over the positions where ``mask`` is True (all when
    None; 0 when none is)."""
    if mask is None:
        return per_position.mean()
    keep = np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask, dtype=bool)
    if keep.shape != per_position.shape:
        raise ValueError(f"{where}: mask of shape {keep.shape} must have the logits' shape "
                         f"without the class axis, {per_position.shape}")
    count = int(keep.sum())
    weights = tensor(keep, dtype=per_position.dtype, backend=per_position.backend)
    total = (per_position * weights).sum()
    return total * (1.0 / count) if count else total * 0.0


@cookbook.equation(36)
def temperature_softmax(logits, temperature=1.0, axis=-1):
    r"""The softmax with a temperature T (Hinton et al., 2015, section 2)::

        p_i = exp(z_i / T) / sum_j exp(z_j / T)                     (eq 36; T = 1 is eq 35)

    A higher T gives a softer distribution (T -> infinity: uniform); T -> 0 approaches the
    argmax. ``logits`` (..., classes) Tensor; ``temperature`` a number > 0."""
    temperature = check_temperature(temperature, "temperature_softmax")
    return F.softmax(as_tensor(logits) * (1.0 / temperature), axis=axis)


@cookbook.equation(37)
def soft_target_loss(student_logits, teacher_logits, *, temperature=1.0, mask=None):
    r"""The soft-target (distillation) loss of the survey's eq 37, the cross-entropy of the
    student's softened distribution against the teacher's::

        L_D(p(z_t, T), p(z_s, T)) = sum_i -p_i(z_t, T) log p_i(z_s, T)

    averaged over the positions (every row of ``(..., classes)`` logits, or those where the
    bool ``mask`` (...) is True: the real tokens of a padded batch).

    Its gradient with respect to the student's logit z_si is (p_i(z_s, T) - p_i(z_t, T)) / T: it
    vanishes when the student's logits equal the teacher's, and it shrinks as 1 / T^2 when the
    logits are small against T (Hinton et al., section 2.1). The survey's eq 37 has no factor
    for that; Hinton et al. multiply the soft loss by T^2 so that its share of the gradient does
    not change with T, and ``distillation_loss`` (eq 39) does so. The KL divergence
    KL(p_t || p_s) that DistilBERT's code minimises is this loss minus the teacher's entropy, a
    constant: same gradients, 0 at the minimum.

    Gradients flow into both arguments; ``Distiller`` computes the teacher's logits with no graph,
    so nothing reaches the teacher.
    """
    where = "soft_target_loss"
    temperature = check_temperature(temperature, where)
    student_logits, teacher_logits = as_tensor(student_logits), as_tensor(teacher_logits)
    _check_pair(student_logits, teacher_logits, where)
    soft_targets = temperature_softmax(teacher_logits, temperature)
    # F.cross_entropy with probability targets: 0 log 0 = 0 where a teacher probability is 0
    # and the student's logit is -inf (a masked vocabulary entry)
    per_position = F.cross_entropy(student_logits * (1.0 / temperature), soft_targets,
                                   reduction="none")
    return _mean_over(per_position, mask, where)


@cookbook.equation(38)
def hard_target_loss(student_logits, labels, *, ignore_index=IGNORE_INDEX):
    r"""The student loss of eq 38, the cross-entropy with the ground truth at T = 1::

        L_s(y, p(z_s, 1)) = sum_i -y_i log p_i(z_s, 1)

    The survey writes p(z_s, T) in eq 38 and then says T = 1 for L_s, as Hinton et al. do (the
    hard targets are matched by the student's ordinary softmax). ``labels``: class ids (...)
    (positions equal to ``ignore_index`` count for nothing: the unmasked tokens of masked LM), or
    class probabilities y of the logits' shape. Averaged over the counted positions."""
    return F.cross_entropy(student_logits, labels, ignore_index=ignore_index)


def _check_weight(value, name, where):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
        raise ValueError(f"{where}: {name} must be a number >= 0, got {value!r}")
    return float(value)


def _soft_and_hard_weights(alpha, beta, where):
    """(alpha, beta) of eq 39, beta = 1 - alpha when None."""
    alpha = _check_weight(alpha, "alpha", where)
    if beta is None and alpha > 1:
        raise ValueError(f"{where}: alpha={alpha} > 1 leaves beta = 1 - alpha < 0; give beta")
    return alpha, 1.0 - alpha if beta is None else _check_weight(beta, "beta", where)


@cookbook.equation(39)
def distillation_loss(student_logits, teacher_logits, labels, *, temperature, alpha=0.5,
                      beta=None, mask=None, ignore_index=IGNORE_INDEX):
    r"""Vanilla knowledge distillation, eq 39, soft and hard targets combined::

        L(x, W) = alpha T^2 L_D(p(z_t, T), p(z_s, T)) + beta L_s(y, p(z_s, 1))

    ``beta`` defaults to 1 - ``alpha`` (Hinton et al.'s weighted average; they found alpha >> beta
    best). The factor T^2 is Hinton et al.'s, not in the survey's eq 39: the soft loss's
    gradients scale as 1 / T^2 (``soft_target_loss``), so without it changing T would also change
    how much the soft targets weigh against the hard ones. ``mask`` selects the positions of the
    soft loss, ``labels`` / ``ignore_index`` those of the hard loss (eq 38)."""
    where = "distillation_loss"
    temperature = check_temperature(temperature, where)
    alpha, beta = _soft_and_hard_weights(alpha, beta, where)
    soft = soft_target_loss(student_logits, teacher_logits, temperature=temperature, mask=mask)
    hard = hard_target_loss(student_logits, labels, ignore_index=ignore_index)
    return soft * (alpha * temperature * temperature) + hard * beta


def cosine_hidden_loss(student_hidden, teacher_hidden, *, mask=None):
    """1 - cos(h_s, h_t) between the student's and the teacher's hidden state of each token,
    averaged over the tokens where ``mask`` (batch, time) is True (DistilBERT's cosine embedding
    loss, Sanh et al., 2019, section 3: it aligns the directions of the two models' hidden
    states). Both (..., hidden) of the same width."""
    where = "cosine_hidden_loss"
    student_hidden, teacher_hidden = as_tensor(student_hidden), as_tensor(teacher_hidden)
    if student_hidden.shape != teacher_hidden.shape:
        raise ValueError(f"{where}: the student's hidden states {student_hidden.shape} and the "
                         f"teacher's {teacher_hidden.shape} must have the same shape (the same "
                         "width: DistilBERT keeps the teacher's hidden size)")
    return _mean_over(1.0 - F.cosine_similarity(student_hidden, teacher_hidden, axis=-1), mask,
                      where)


# ---- objectives: what a Distiller minimises ------------------------------------------------------
class KnowledgeDistillationLoss:
    """Eq 39 (``distillation_loss``) on the two models' ``logits`` and the batch's ``labels``:
    Hinton et al.'s vanilla distillation. Returns ``ModelOutput(loss)``."""

    model_kwargs = {}

    def __init__(self, temperature=2.0, alpha=0.5, beta=None):
        where = type(self).__name__
        self.temperature = check_temperature(temperature, where)
        self.alpha, self.beta = _soft_and_hard_weights(alpha, beta, where)

    def __call__(self, student, teacher, batch):
        return ModelOutput(loss=distillation_loss(
            student.logits, teacher.logits, batch["labels"], temperature=self.temperature,
            alpha=self.alpha, beta=self.beta))


class TripleLoss:
    """DistilBERT's training loss (Sanh et al., 2019, section 3; their released defaults)::

        L = alpha_ce T^2 L_D + alpha_mlm L_mlm + alpha_cos L_cos

    L_D is eq 37 on the masked-LM logits of every real token (``attention_mask``), L_mlm the
    masked-LM loss on the batch's ``labels`` (eq 38 on the masked positions), L_cos
    ``cosine_hidden_loss`` on the last hidden states of the real tokens. Both models are run with
    ``output_hidden_states=True``. Returns ``ModelOutput(loss, soft_loss, mlm_loss,
    cosine_loss)``."""

    model_kwargs = {"output_hidden_states": True}

    def __init__(self, temperature=2.0, alpha_ce=5.0, alpha_mlm=2.0, alpha_cos=1.0):
        where = type(self).__name__
        self.temperature = check_temperature(temperature, where)
        self.alpha_ce = _check_weight(alpha_ce, "alpha_ce", where)
        self.alpha_mlm = _check_weight(alpha_mlm, "alpha_mlm", where)
        self.alpha_cos = _check_weight(alpha_cos, "alpha_cos", where)

    def __call__(self, student, teacher, batch):
        mask = batch.get("attention_mask")
        if mask is None:
            mask = np.ones(np.shape(batch["input_ids"]), dtype=bool)
        mask = np.asarray(mask, dtype=bool)
        soft = soft_target_loss(student.logits, teacher.logits, temperature=self.temperature,
                                mask=mask)
        mlm = hard_target_loss(student.logits, batch["labels"])
        cosine = cosine_hidden_loss(student.hidden_states[-1], teacher.hidden_states[-1],
                                    mask=mask)
        loss = (soft * (self.alpha_ce * self.temperature ** 2) + mlm * self.alpha_mlm
                + cosine * self.alpha_cos)
        return ModelOutput(loss=loss, soft_loss=soft, mlm_loss=mlm, cosine_loss=cosine)


# ---- the teacher-student loop --------------------------------------------------------------------
def transformer_stack(model):
    """The first ``nn.TransformerStack`` inside ``model``: its layers are what layer-wise
    distillation (TinyBERT, MobileBERT) reads and freezes."""
    for module in model.modules():
        if isinstance(module, TransformerStack):
            return module
    raise TypeError(f"{type(model).__name__} has no TransformerStack (a stack of Transformer "
                    "layers), which layer-wise distillation needs")


def _vocab_size(model):
    config = getattr(model, "config", None)
    return getattr(config, "vocab_size", None)


class Distiller:
    """A frozen ``teacher`` beside a ``student``, and the ``objective`` that compares them.

    ``distiller(batch, key=None)`` runs both models on the batch's model inputs (``inputs``:
    the keys passed to both, those present in ``batch``) and returns the objective's
    ``ModelOutput`` (``loss`` and its parts) for ``objective(student_output, teacher_output,
    batch)``. The teacher runs in evaluation mode with no graph recorded, and its parameters are
    frozen (``requires_grad=False``), so a backward pass reaches the student only. An objective
    may ask for extra outputs of both models with a ``model_kwargs`` dict
    (``{"output_hidden_states": True}``), and record more during their forward passes with a
    ``capture(model)`` context manager whose dict is added to the outputs (TinyBERT's attention
    scores).

    ``cache_dir``: the teacher's outputs for the batch called ``key`` are written there on the
    first call and read back afterwards (``teacher-<key>.npz`` with the inputs they belong to:
    reading them for other inputs is an error), so an epoch after the first runs the student
    only. A cache directory belongs to one teacher.

    Teacher and student must share the vocabulary (``config.vocab_size``, where both have one).
    ``parameters()`` are the student's, for the optimiser::

        distiller = Distiller(teacher, student, KnowledgeDistillationLoss(temperature=2.0))
        optimizer = optim.AdamW(distiller.parameters(), lr=1e-3)
        for step, batch in enumerate(batches):
            optimizer.zero_grad()
            distiller(batch, key=step).loss.backward()
            optimizer.step()
    """

    def __init__(self, teacher, student, objective, *, inputs=("input_ids", "attention_mask",
                                                                "token_type_ids"),
                 cache_dir=None):
        teacher_vocab, student_vocab = _vocab_size(teacher), _vocab_size(student)
        if None not in (teacher_vocab, student_vocab) and teacher_vocab != student_vocab:
            raise ValueError(f"Distiller: the teacher's vocabulary has {teacher_vocab} tokens and "
                             f"the student's {student_vocab}: distillation compares their "
                             "outputs token by token, so both must use the same tokenizer")
        if teacher is student:
            raise ValueError("Distiller: the teacher and the student are the same model")
        self.teacher = teacher.eval().requires_grad_(False)
        self.student = student
        self.objective = objective
        self.inputs = tuple(inputs)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)

    def parameters(self):
        """The student's parameters, and the objective's when it has some (TinyBERT's W_h);
        the teacher is frozen."""
        yield from self.student.parameters()
        if isinstance(self.objective, Module):
            yield from self.objective.parameters()

    def model_inputs(self, batch):
        """The entries of ``batch`` both models take."""
        return {name: batch[name] for name in self.inputs if batch.get(name) is not None}

    def teacher_outputs(self, batch, key=None):
        """The teacher's output on ``batch``: computed with no graph, or read from the cache."""
        if self.cache_dir is None:
            return self._run_teacher(batch)
        if key is None:
            raise ValueError("Distiller: with a cache_dir every batch needs a key (its index in "
                             "the epoch, say) to find its cached teacher outputs")
        path = self.cache_dir / f"teacher-{key}.npz"
        ids = np.asarray(batch["input_ids"])
        if path.exists():
            cached = load(path)
            if not np.array_equal(cached["input_ids"], ids):
                raise ValueError(f"Distiller: the cached teacher outputs {str(path)!r} belong to "
                                 f"other inputs than batch {key!r}; use one key per batch, or "
                                 "clear the cache directory")
            return ModelOutput(**cached["outputs"])
        outputs = self._run_teacher(batch)
        os.makedirs(self.cache_dir, exist_ok=True)
        save({"input_ids": ids, "outputs": dict(outputs)}, path)
        return outputs

    def _run(self, model, batch):
        """``model``'s output on ``batch`` with what the objective's ``capture(model)`` (when it
        has one) recorded during the pass added to it."""
        capture = getattr(self.objective, "capture", None)
        with capture(model) if capture else contextlib.nullcontext({}) as recorded:
            out = model(**self.model_inputs(batch), **getattr(self.objective, "model_kwargs", {}))
        return ModelOutput(**out, **recorded)

    def _run_teacher(self, batch):
        with self.teacher.inference():
            return self._run(self.teacher, batch)

    def __call__(self, batch, key=None):
        teacher = self.teacher_outputs(batch, key)
        return self.objective(self._run(self.student, batch), teacher, batch)
