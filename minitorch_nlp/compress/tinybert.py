r"""TinyBERT's layer-wise distillation (Jiao et al., 2020, "TinyBERT: Distilling BERT for Natural
Language Understanding"), the survey's section VI-A.2, eq 40-44.

A TinyBERT student is a smaller BERT (fewer and narrower layers, e.g. 4 x 312 against BERT-base's
12 x 768). It learns from the teacher layer by layer, not only from the output:

* ``uniform_layer_mapping``: student layer m learns from teacher layer g(m) = m N / M (M student,
  N teacher layers); g(0) = 0 is the embedding layer and g(M + 1) = N + 1 the prediction layer;
* ``attention_loss`` (eq 41): the MSE between each head's attention scores, averaged over heads;
* ``hidden_state_loss`` (eq 42): the MSE between the student's layer output, mapped by a learned
  W_h into the teacher's width, and the teacher's; ``embedding_loss`` (eq 43) the same on the
  embedding layer's output with W_e;
* ``prediction_loss`` (eq 44): soft cross-entropy between the two models' logits at temperature t;
* ``TinyBertLoss`` (eq 40): L_model = sum_{m=0}^{M+1} lambda_m L_layer(S_m, T_g(m)), an objective
  for ``compress.Distiller`` that owns W_e and W_h (so the optimiser must see its parameters:
  ``Distiller.parameters()`` includes them). Leave ``"prediction"`` out of ``objectives`` for
  the general distillation stage (on unlabelled text, intermediate layers only); the task stage
  distils the intermediate layers, then the prediction layer (``objectives=("prediction",)``).

``recorded_attention_scores(model)`` collects the unnormalised scores q k^T / sqrt(d_k) of every
layer, which eq 41 compares (Jiao et al. section 3.1: the unnormalised scores converge faster
than the softmax outputs).
"""
from __future__ import annotations

import contextlib
import math
import numbers

import numpy as np

from .. import cookbook
from ..autograd import Tensor, as_tensor, empty, tensor
from ..nn import Module, Parameter, init
from ..nn.outputs import ModelOutput
from .distillation import check_temperature, soft_target_loss, transformer_stack

__all__ = ["OBJECTIVES", "TinyBertLoss", "attention_loss", "check_layer_mapping",
           "embedding_loss", "hidden_state_loss", "prediction_loss", "recorded_attention_scores",
           "uniform_layer_mapping"]

OBJECTIVES = ("embedding", "attention", "hidden", "prediction")


def uniform_layer_mapping(student_layers, teacher_layers):
    """g(m) = m N / M for the student's layers m = 1 .. M (Jiao et al. section 4.2, "uniform
    strategy": with M = 4 and N = 12, layers 3, 6, 9, 12), rounded down where M does not divide
    N. Returns the tuple (g(1), ..., g(M)) of teacher layers, counted from 1."""
    if student_layers > teacher_layers:
        raise ValueError(f"uniform_layer_mapping: the student has {student_layers} layers and the "
                         f"teacher {teacher_layers}; a layer mapping g(m) cannot be longer than "
                         "the teacher")
    return tuple(m * teacher_layers // student_layers for m in range(1, student_layers + 1))


def check_layer_mapping(mapping, student_layers, teacher_layers):
    """``mapping`` as a tuple of teacher layers g(1) .. g(M), each in 1 .. N, or a ``ValueError``
    that names what does not fit."""
    mapping = tuple(int(n) for n in mapping)
    if len(mapping) > teacher_layers:
        raise ValueError(f"layer mapping {list(mapping)} is longer than the teacher's "
                         f"{teacher_layers} layers")
    if len(mapping) != student_layers:
        raise ValueError(f"layer mapping {list(mapping)} has {len(mapping)} entries for the "
                         f"student's {student_layers} layers; give one teacher layer per "
                         "student layer")
    if not all(1 <= n <= teacher_layers for n in mapping):
        raise ValueError(f"layer mapping {list(mapping)}: teacher layers are counted 1 .. "
                         f"{teacher_layers} (0 is the embedding layer, mapped on its own)")
    return mapping


def _real_token_weights(mask, shape, where):
    """The bool (batch, time) ``mask`` checked against ``shape``, or None."""
    if mask is None:
        return None
    keep = np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask, dtype=bool)
    if keep.shape != shape:
        raise ValueError(f"{where}: the mask of shape {keep.shape} must be (batch, time) = "
                         f"{shape}")
    return keep


def _weighted_mean(squares, weights):
    """The mean of ``squares`` where the 0/1 ``weights`` (broadcast) are 1."""
    weights = np.broadcast_to(weights, squares.shape)
    count = float(weights.sum())
    total = (squares * tensor(weights, dtype=squares.dtype, backend=squares.backend)).sum()
    return total * (1.0 / count) if count else total * 0.0


@cookbook.equation(41)
def attention_loss(student_scores, teacher_scores, *, key_mask=None):
    r"""Attention-based distillation (Jiao et al. eq 7)::

        L_attn = (1 / h) sum_{i=1}^{h} MSE(A_i^S, A_i^T),      A_i in R^{l x l}

    on (batch, heads, l, l) attention matrices of one student layer and its teacher layer, with
    the same number of heads h. TinyBERT compares the *unnormalised* scores q k^T / sqrt(d_k)
    (``recorded_attention_scores``), not the softmax weights. ``key_mask`` (batch, l), True on
    real tokens: only pairs of two real tokens count (TinyBERT's code zeroes the masked scores
    instead, which adds only zeros to the sum but counts them in the mean)."""
    where = "attention_loss"
    student_scores, teacher_scores = as_tensor(student_scores), as_tensor(teacher_scores)
    if student_scores.shape != teacher_scores.shape or student_scores.ndim != 4:
        raise ValueError(f"{where}: the student's attention {student_scores.shape} and the "
                         f"teacher's {teacher_scores.shape} must both be (batch, heads, l, l) "
                         "with the same number of heads")
    # scores masked alike in both models (-inf above a causal diagonal) agree: difference 0,
    # not -inf - -inf = nan
    diff = (student_scores - teacher_scores).masked_fill(student_scores == teacher_scores, 0.0)
    batch, _, time, _ = student_scores.shape
    keep = _real_token_weights(key_mask, (batch, time), where)
    if keep is None:
        return (diff * diff).mean()
    pairs = (keep[:, :, None] & keep[:, None, :])[:, None]
    # the masked pairs are left out with a select, not a product with 0: their scores may be
    # -inf or -1e9 (masked before recording), whose differences are nan or 1e18
    pairs_mask = tensor(np.broadcast_to(pairs, diff.shape), dtype=bool, backend=diff.backend)
    diff = diff.masked_fill(~pairs_mask, 0.0)
    return _weighted_mean(diff * diff, pairs)


@cookbook.equation(42)
def hidden_state_loss(student_hidden, teacher_hidden, projection, *, mask=None):
    r"""Hidden-state distillation (Jiao et al. eq 8)::

        L_hidn = MSE(H^S W_h, H^T),   H^S (l, d'), W_h (d', d), H^T (l, d)

    W_h (``projection``) is learnt with the student: it maps the student's narrower hidden states
    into the teacher's space. ``student_hidden`` (batch, l, d'), ``teacher_hidden`` (batch, l, d);
    ``mask`` (batch, l), True on the positions that count (every position when None)."""
    where = "hidden_state_loss"
    student_hidden, teacher_hidden = as_tensor(student_hidden), as_tensor(teacher_hidden)
    projection = as_tensor(projection)
    expected = (student_hidden.shape[-1], teacher_hidden.shape[-1])
    if projection.shape != expected or student_hidden.shape[:-1] != teacher_hidden.shape[:-1]:
        raise ValueError(f"{where}: student states {student_hidden.shape}, teacher states "
                         f"{teacher_hidden.shape} and W {projection.shape} do not fit: W must be "
                         f"(student width, teacher width) = {expected}, the states share "
                         "(batch, time)")
    diff = student_hidden @ projection - teacher_hidden
    keep = _real_token_weights(mask, tuple(student_hidden.shape[:-1]), where)
    if keep is None:
        return (diff * diff).mean()
    return _weighted_mean(diff * diff, keep[..., None])


@cookbook.equation(43)
def embedding_loss(student_embeddings, teacher_embeddings, projection, *, mask=None):
    r"""Embedding-layer distillation (Jiao et al. eq 9)::

        L_embd = MSE(E^S W_e, E^T)

    eq 42 on the embedding layer's outputs, with its own learnt W_e (``projection``)."""
    return hidden_state_loss(student_embeddings, teacher_embeddings, projection, mask=mask)


@cookbook.equation(44)
def prediction_loss(student_logits, teacher_logits, *, temperature=1.0):
    r"""Prediction-layer distillation (Jiao et al. eq 10)::

        L_pred = CE(z^T / t, z^S / t) = -softmax(z^T / t) . log softmax(z^S / t)

    averaged over the rows. The survey's eq 44 writes softmax(z^T) without the t; Jiao et al.
    divide both logits by t, and use t = 1 (where the two agree). This is eq 37
    (``soft_target_loss``) without the T^2 of eq 39."""
    return soft_target_loss(student_logits, teacher_logits, temperature=temperature)


@contextlib.contextmanager
def recorded_attention_scores(model):
    """``with recorded_attention_scores(model) as record: model(...)``: afterwards
    ``record["attention_scores"]`` holds each layer's unnormalised scores q k^T / sqrt(d_k)
    (batch, heads, q_time, k_time), in layer order, with their graph (no mask or bias added)."""
    scores, record = [], {}

    def keep_scores(core, args, kwargs):
        q, k = args[0], args[1]
        scores.append((q @ k.swapaxes(-1, -2)) * (1.0 / math.sqrt(q.shape[-1])))

    handles = [layer.self_attn.core.register_forward_pre_hook(keep_scores, with_kwargs=True)
               for layer in transformer_stack(model).layers]
    try:
        yield record
    finally:
        for handle in handles:
            handle.remove()
        record["attention_scores"] = tuple(scores)


def _depth(config, where, who):
    layers = getattr(config, "num_hidden_layers", None)
    width = getattr(config, "hidden_size", None)
    if layers is None or width is None:
        raise TypeError(f"{where}: the {who}'s config needs num_hidden_layers and hidden_size, "
                        f"got {type(config).__name__}")
    return layers, width


@cookbook.equation(40)
class TinyBertLoss(Module):
    r"""TinyBERT's layer-wise objective (Jiao et al. eq 11), an objective for ``Distiller``::

        L_model = sum_{m=0}^{M+1} lambda_m L_layer(S_m, T_g(m))

        L_layer = L_embd (eq 43)               for m = 0
                  L_attn + L_hidn (eq 41, 42)  for 0 < m <= M
                  L_pred (eq 44)                for m = M + 1

    ``student_config``, ``teacher_config``: configs with ``num_hidden_layers`` and
    ``hidden_size`` (M, d' and N, d). ``layer_mapping``: g(1) .. g(M), teacher layers counted
    from 1 (default ``uniform_layer_mapping``); ``layer_weights``: lambda_0 .. lambda_{M+1}
    (default all 1); ``objectives``: which of ``OBJECTIVES`` to use (general distillation leaves
    out ``"prediction"``); ``temperature``: t of eq 44. W_e and W_h (``embedding_projection``,
    ``hidden_projection``, (d', d), one W_h shared by every layer as in the paper) are
    parameters of this module.

    Both models run with ``output_hidden_states=True``; the attention scores are recorded by
    ``capture`` (``Distiller`` calls it). Returns ``ModelOutput(loss, embedding_loss,
    attention_loss, hidden_loss, prediction_loss)``, each part summed over its layers with its
    lambdas (the parts not in ``objectives`` left out).
    """

    model_kwargs = {"output_hidden_states": True}

    def __init__(self, student_config, teacher_config, *, layer_mapping=None, layer_weights=None,
                 objectives=OBJECTIVES, temperature=1.0):
        super().__init__()
        where = type(self).__name__
        student_layers, student_width = _depth(student_config, where, "student")
        teacher_layers, teacher_width = _depth(teacher_config, where, "teacher")
        self.layer_mapping = (uniform_layer_mapping(student_layers, teacher_layers)
                              if layer_mapping is None else
                              check_layer_mapping(layer_mapping, student_layers, teacher_layers))
        weights = [1.0] * (student_layers + 2) if layer_weights is None else list(layer_weights)
        if len(weights) != student_layers + 2 or not all(
                isinstance(w, numbers.Real) and w >= 0 for w in weights):
            raise ValueError(f"{where}: layer_weights must be {student_layers + 2} numbers >= 0 "
                             f"(lambda_0 .. lambda_M+1 for M = {student_layers}), got "
                             f"{layer_weights!r}")
        self.layer_weights = tuple(float(w) for w in weights)
        unknown = set(objectives) - set(OBJECTIVES)
        if unknown or not objectives:
            raise ValueError(f"{where}: objectives must be some of {OBJECTIVES}, got "
                             f"{tuple(objectives)!r}")
        self.objectives = tuple(name for name in OBJECTIVES if name in objectives)
        self.temperature = check_temperature(temperature, where)
        self.embedding_projection = Parameter(init.xavier_uniform_(
            empty(student_width, teacher_width)))
        self.hidden_projection = Parameter(init.xavier_uniform_(
            empty(student_width, teacher_width)))

    def capture(self, model):
        """What a forward pass must record beside the outputs: the attention scores."""
        return (recorded_attention_scores(model) if "attention" in self.objectives
                else contextlib.nullcontext({}))

    def forward(self, student, teacher, batch):
        mask = batch.get("attention_mask")
        weights, mapping = self.layer_weights, self.layer_mapping
        parts = {}
        if "embedding" in self.objectives:                                      # m = 0
            parts["embedding_loss"] = weights[0] * embedding_loss(
                student.hidden_states[0], teacher.hidden_states[0], self.embedding_projection,
                mask=mask)
        for m, n in enumerate(mapping, start=1):                                # 0 < m <= M
            if "attention" in self.objectives:
                layer = weights[m] * attention_loss(student.attention_scores[m - 1],
                                                    teacher.attention_scores[n - 1],
                                                    key_mask=mask)
                parts["attention_loss"] = parts.get("attention_loss", 0.0) + layer
            if "hidden" in self.objectives:
                layer = weights[m] * hidden_state_loss(student.hidden_states[m],
                                                       teacher.hidden_states[n],
                                                       self.hidden_projection, mask=mask)
                parts["hidden_loss"] = parts.get("hidden_loss", 0.0) + layer
        if "prediction" in self.objectives:                                     # m = M + 1
            parts["prediction_loss"] = weights[-1] * prediction_loss(
                student.logits, teacher.logits, temperature=self.temperature)
        return ModelOutput(loss=sum(parts.values()), **parts)

    def extra_repr(self):
        return f"layer_mapping={self.layer_mapping}, objectives={self.objectives}"
