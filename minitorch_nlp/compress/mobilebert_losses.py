r"""MobileBERT's knowledge transfer (Sun et al., 2020, section 3.5-3.6), the survey's section
VI-A.3, eq 46-48: a thin student (``models.mobilebert``) learns from a wide teacher with the same
number of layers, the same inter-block width H and the same number of heads, layer by layer:

* ``feature_map_transfer_loss`` (eq 46): the MSE between the two models' layer outputs;
* ``attention_transfer_loss`` (eq 47): the KL divergence from the teacher's attention
  distribution to the student's, per head and query position;
* ``pretraining_distillation_loss`` (eq 48): alpha L_MLM + (1 - alpha) L_KD + L_NSP, the masked-LM
  loss, the distillation of the teacher's masked-LM distribution and next-sentence prediction;
* ``MobileBertTransferLoss``: an objective for ``compress.Distiller`` combining them. Sun et al.'s
  three strategies (section 3.6) are three ways to use it: *auxiliary knowledge transfer* (all
  three parts at once), *joint knowledge transfer* (the layer-wise parts over every layer, then
  ``objectives=("pretraining",)``), *progressive knowledge transfer* (``layers=[l]`` for
  l = 1 .. L in turn, each stage with the student's layers below l frozen:
  ``freeze_layers_below``).
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import cookbook
from ..autograd import Tensor, as_tensor, tensor, where, xlogy
from ..nn.outputs import ModelOutput
from .distillation import hard_target_loss, soft_target_loss, transformer_stack

__all__ = ["MobileBertTransferLoss", "TRANSFER_OBJECTIVES", "attention_transfer_loss",
           "feature_map_transfer_loss", "freeze_layers_below", "pretraining_distillation_loss"]

TRANSFER_OBJECTIVES = ("feature_map", "attention", "pretraining")


def _real_tokens(mask, shape, where_):
    if mask is None:
        return np.ones(shape, dtype=bool)
    keep = np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask, dtype=bool)
    if keep.shape != shape:
        raise ValueError(f"{where_}: the mask of shape {keep.shape} must be (batch, time) = "
                         f"{shape}")
    return keep


def _same_shapes(teacher, student, where_, what):
    if teacher.shape != student.shape:
        raise ValueError(f"{where_}: the teacher's {what} {teacher.shape} and the student's "
                         f"{student.shape} differ; MobileBERT's teacher and student share the "
                         "number of layers, the inter-block width and the number of heads")


@cookbook.equation(46)
def feature_map_transfer_loss(teacher_hidden, student_hidden, *, mask=None):
    r"""Feature map transfer for one layer l (Sun et al. eq 3)::

        L_FMT^l = 1/(T N) sum_{t=1}^{T} sum_{n=1}^{N} (H^tr_{t,l,n} - H^st_{t,l,n})^2

    on (batch, T, N) layer outputs of the teacher and the student, averaged over the sequences;
    ``mask`` (batch, T), True on real tokens: only they count. Gradients flow into both
    arguments (the Distiller gives the teacher's no graph)."""
    where_ = "feature_map_transfer_loss"
    teacher_hidden, student_hidden = as_tensor(teacher_hidden), as_tensor(student_hidden)
    _same_shapes(teacher_hidden, student_hidden, where_, "feature maps")
    keep = _real_tokens(mask, tuple(student_hidden.shape[:2]), where_)
    diff = teacher_hidden - student_hidden
    weights = tensor(keep[..., None], dtype=diff.dtype, backend=diff.backend)
    count = float(keep.sum()) * diff.shape[-1]
    total = (diff * diff * weights).sum()
    return total * (1.0 / count) if count else total * 0.0


@cookbook.equation(47)
def attention_transfer_loss(teacher_attention, student_attention, *, mask=None):
    r"""Attention transfer for one layer l (Sun et al. eq 4)::

        L_AT^l = 1/(T A) sum_{t=1}^{T} sum_{a=1}^{A} D_KL(a^tr_{t,l,a} || a^st_{t,l,a})

    on (batch, A, T, T) attention distributions (the softmax weights, rows summing to 1),
    averaged over the sequences; with ``mask`` (batch, T) only real query positions count and
    the KL sums run over real keys (where padding has weight 0 in both)."""
    where_ = "attention_transfer_loss"
    teacher_attention = as_tensor(teacher_attention)
    student_attention = as_tensor(student_attention)
    _same_shapes(teacher_attention, student_attention, where_, "attention")
    if student_attention.ndim != 4:
        raise ValueError(f"{where_}: attention must be (batch, heads, T, T), got "
                         f"{student_attention.shape}")
    batch, _, time, _ = student_attention.shape
    keep = _real_tokens(mask, (batch, time), where_)
    keys = np.broadcast_to(keep[:, None, None, :], student_attention.shape)
    keys_mask = tensor(keys, dtype=bool, backend=student_attention.backend)
    # sum_k a^tr log a^tr - a^tr log a^st over the real keys, with 0 log 0 = 0 where a teacher
    # weight is 0 (a causal or padded teacher, an underflow): xlogy is 0 there, and so are
    # its gradients, whatever the student's weight
    teacher_on_keys = where(keys_mask, teacher_attention, 0.0)
    kl = (xlogy(teacher_on_keys, teacher_on_keys) -
          xlogy(teacher_on_keys, student_attention)).sum(axis=-1)
    weights = tensor(keep[:, None, :], dtype=kl.dtype, backend=kl.backend)
    count = float(keep.sum()) * student_attention.shape[1]
    total = (kl * weights).sum()
    return total * (1.0 / count) if count else total * 0.0


@cookbook.equation(48)
def pretraining_distillation_loss(mlm_loss, kd_loss, nsp_loss, *, alpha):
    r"""MobileBERT's pre-training distillation loss (Sun et al. eq 5)::

        L_PD = alpha L_MLM + (1 - alpha) L_KD + L_NSP,      alpha in (0, 1)

    L_KD distils the teacher's masked-LM distribution (``MobileBertTransferLoss`` computes it
    with eq 37 at T = 1 on the masked positions)."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= alpha <= 1:
        raise ValueError(f"pretraining_distillation_loss: alpha must be in [0, 1], got {alpha!r}")
    return as_tensor(mlm_loss) * alpha + as_tensor(kd_loss) * (1.0 - alpha) + nsp_loss


def freeze_layers_below(model, layer):
    """Progressive knowledge transfer: freeze ``model``'s embeddings and its layers 1 ..
    ``layer`` - 1 (counted from 1), unfreeze every other parameter. ``model`` is a BERT-style
    model (``MobileBertModel``, or a model with one under ``.bert``). Returns ``model``."""
    base = getattr(model, "bert", model)
    model.requires_grad_(True)
    base.embeddings.requires_grad_(False)
    for frozen in list(transformer_stack(base).layers)[:layer - 1]:
        frozen.requires_grad_(False)
    return model


class MobileBertTransferLoss:
    """The objective of MobileBERT's knowledge transfer for ``Distiller``: the sum of eq 46 and
    eq 47 over ``layers`` (1-based, default every layer) and eq 48 on the masked-LM and NSP
    logits of two ``MobileBertForPreTraining``-like models (``prediction_logits``,
    ``seq_relationship_logits``) with the batch's ``labels`` and ``next_sentence_label``, or of
    two masked-LM models (``logits``; no NSP head, so eq 48 without L_NSP).
    ``objectives``: which of ``TRANSFER_OBJECTIVES`` to use. Returns ``ModelOutput(loss,
    feature_map_loss, attention_loss, pretraining_loss)`` (the parts used)."""

    model_kwargs = {"output_hidden_states": True, "output_attentions": True}

    def __init__(self, objectives=TRANSFER_OBJECTIVES, layers=None, alpha=0.5):
        where_ = type(self).__name__
        unknown = set(objectives) - set(TRANSFER_OBJECTIVES)
        if unknown or not objectives:
            raise ValueError(f"{where_}: objectives must be some of {TRANSFER_OBJECTIVES}, got "
                             f"{tuple(objectives)!r}")
        self.objectives = tuple(name for name in TRANSFER_OBJECTIVES if name in objectives)
        self.layers = None if layers is None else tuple(int(layer) for layer in layers)
        if self.layers is not None and (not self.layers or min(self.layers) < 1):
            raise ValueError(f"{where_}: layers are counted from 1, got {layers!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= alpha <= 1:
            raise ValueError(f"{where_}: alpha must be in [0, 1], got {alpha!r}")
        self.alpha = float(alpha)

    def __call__(self, student, teacher, batch):
        mask = batch.get("attention_mask")
        depth = len(student.attentions)
        if len(teacher.attentions) != depth:
            raise ValueError(f"{type(self).__name__}: the teacher has {len(teacher.attentions)} "
                             f"layers and the student {depth}; MobileBERT transfers layer l to "
                             "layer l")
        layers = range(1, depth + 1) if self.layers is None else self.layers
        if max(layers) > depth:
            raise ValueError(f"{type(self).__name__}: layers {list(layers)} go past the "
                             f"{depth} layers of the models")
        parts = {}
        if "feature_map" in self.objectives:
            parts["feature_map_loss"] = sum(feature_map_transfer_loss(
                teacher.hidden_states[layer], student.hidden_states[layer], mask=mask)
                for layer in layers)
        if "attention" in self.objectives:
            parts["attention_loss"] = sum(attention_transfer_loss(
                teacher.attentions[layer - 1], student.attentions[layer - 1], mask=mask)
                for layer in layers)
        if "pretraining" in self.objectives:
            labels = np.asarray(batch["labels"])
            masked = labels != -100
            logits = "prediction_logits" if "prediction_logits" in student else "logits"
            kd = soft_target_loss(student[logits], teacher[logits], temperature=1.0,
                                  mask=masked)
            nsp = (hard_target_loss(student.seq_relationship_logits,
                                    batch["next_sentence_label"])
                   if "seq_relationship_logits" in student else 0.0)
            parts["pretraining_loss"] = pretraining_distillation_loss(
                hard_target_loss(student[logits], labels), kd, nsp, alpha=self.alpha)
        return ModelOutput(loss=sum(parts.values()), **parts)
