"""Differentiable functions for building models: activations, linear maps, normalisation, dropout
and losses. Import it as ``import minitorch_nlp.functional as F``.

Names and semantics follow ``torch.nn.functional`` with two deliberate differences, both stated
where they apply: axes are ``axis=`` (``dim=`` is accepted too), and the class axis of the
classification losses is the *last* one -- logits ``(..., C)`` with targets ``(...)`` -- which is
how a language model's logits ``(batch, time, vocab)`` come out of its final linear layer.

Softmax, log-softmax, layer norm, GELU and (unweighted) cross-entropy run one backend kernel
each, and ``linear`` is one GEMM with the bias added in place; everything else is composed from
the engine's differentiable primitives. Gradients of gradients work throughout (the fused
operations fall back to their composite form when ``create_graph=True``).
"""
from __future__ import annotations

import numbers

import numpy as np

from .autograd import Tensor, as_tensor, dtypes, one_hot, pad, where
from .autograd import ops_elementwise as _ew
from . import checks, cookbook
from .autograd.ops_fused import Attention as _Attention
from .autograd.ops_fused import visible_keys as _visible_keys
from .autograd.ops_fused import BandedAttention as _BandedAttention
from .autograd.ops_fused import BiasGelu as _BiasGelu
from .autograd.ops_fused import CrossEntropy as _CrossEntropy
from .autograd.ops_fused import LayerNorm as _LayerNorm
from .autograd.ops_linalg import Linear as _Linear
from .autograd.random import rng

REDUCTIONS = ("mean", "sum", "none")

__all__ = [
    "attention_weights", "banded_attention", "bias_gelu", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "celu", "cosine_similarity", "cross_entropy", "dropout",
    "elu",
    "embedding", "geglu", "gelu", "glu", "hardsigmoid", "hardswish", "hardtanh", "kl_div",
    "layer_norm", "leaky_relu", "linear", "log_softmax", "logsigmoid", "mish", "mse_loss",
    "nll_loss", "normalize", "one_hot", "pad", "quick_gelu", "relu", "relu6", "repeat_kv_heads",
    "scaled_dot_product_attention", "selu", "sigmoid", "silu", "softmax", "softmin", "softplus",
    "softsign",
    "swiglu", "tanh",
]


def _tensor(x):
    return x if isinstance(x, Tensor) else as_tensor(x)


def _pick_axis(axis, dim):
    return dim if dim is not None else axis


# ---- activations -------------------------------------------------------------------------------
def relu(x):
    """max(x, 0)."""
    return _ew.relu(_tensor(x))


def gelu(x, approximate="none"):
    """x Phi(x) (Hendrycks & Gimpel, 2016): exact with erf (``"none"``), or BERT/GPT-2's tanh
    approximation (``"tanh"``)."""
    return _tensor(x).gelu(approximate=approximate)


def bias_gelu(x, bias, approximate="none"):
    """gelu(x + bias) in one kernel pass: the activation after a feed-forward layer's first
    linear map (compute that map without its bias and hand the bias here)."""
    x = _tensor(x)
    if approximate not in ("none", "tanh"):
        raise ValueError(f"bias_gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if bias.shape != x.shape[-1:]:
        raise ValueError(f"bias_gelu: bias of shape {bias.shape} does not match the last axis of "
                         f"x, shape {x.shape}")
    return _BiasGelu.apply(x, bias, approximate=approximate)


def tanh(x):
    return _ew.tanh(_tensor(x))


def sigmoid(x):
    """1 / (1 + e^-x), computed without overflow."""
    return _ew.sigmoid(_tensor(x))


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + e^(beta x)) / beta, computed without overflow; PyTorch's ``threshold`` returns x
    itself where beta x > threshold (the two differ by less than e^-threshold there)."""
    x = _tensor(x)
    if beta <= 0:
        raise ValueError(f"softplus: beta must be > 0, got {beta}")
    smooth = _ew.softplus(x) if beta == 1.0 else _ew.softplus(x * beta) * (1.0 / beta)
    if threshold is None:
        return smooth
    return where(x * beta > threshold, x, smooth)


def quick_gelu(x):
    """x sigmoid(1.702 x): the sigmoid approximation of GELU (Hendrycks & Gimpel, 2016, section
    2) that OpenAI's CLIP and GPT code use."""
    x = _tensor(x)
    return x * _ew.sigmoid(x * 1.702)


def silu(x):
    """x sigmoid(x) (Swish with beta = 1; Ramachandran et al., 2017)."""
    x = _tensor(x)
    return x * _ew.sigmoid(x)


def mish(x):
    """x tanh(softplus(x)) (Misra, 2019)."""
    x = _tensor(x)
    return x * _ew.tanh(_ew.softplus(x))


def logsigmoid(x):
    """log sigmoid(x) = -softplus(-x), without overflow."""
    return -_ew.softplus(-_tensor(x))


def leaky_relu(x, negative_slope=0.01):
    """x for x > 0, negative_slope x otherwise."""
    x = _tensor(x)
    return where(x > 0, x, x * negative_slope)


def elu(x, alpha=1.0):
    """x for x > 0, alpha (e^x - 1) otherwise (so the gradient at 0 is alpha, as PyTorch's)."""
    x = _tensor(x)
    positive = x > 0
    return where(positive, x, _ew.expm1(where(positive, 0.0, x)) * alpha)


def celu(x, alpha=1.0):
    """max(0, x) + min(0, alpha (e^(x / alpha) - 1)) (Barron, 2017): ELU made continuously
    differentiable in x for every alpha != 0."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or alpha == 0:
        raise ValueError(f"celu: alpha must be a non-zero number, got {alpha!r}")
    x = _tensor(x)
    positive = x > 0
    return where(positive, x, _ew.expm1(where(positive, 0.0, x) * (1.0 / alpha)) * alpha)


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def selu(x):
    """scale * elu(x, alpha) with the self-normalising constants of Klambauer et al. (2017)."""
    return elu(x, SELU_ALPHA) * SELU_SCALE


def hardtanh(x, min_val=-1.0, max_val=1.0):
    """x clipped to [min_val, max_val]."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} is above max_val {max_val}")
    return _ew.clip(_tensor(x), min_val, max_val)


def relu6(x):
    """min(max(x, 0), 6)."""
    return hardtanh(x, 0.0, 6.0)


def hardsigmoid(x):
    """relu6(x + 3) / 6: a piecewise-linear sigmoid."""
    return relu6(_tensor(x) + 3.0) * (1.0 / 6.0)


def hardswish(x):
    """x hardsigmoid(x) (MobileNetV3)."""
    x = _tensor(x)
    return x * hardsigmoid(x)


def softsign(x):
    """x / (1 + |x|)."""
    x = _tensor(x)
    return x / (_ew.abs(x) + 1.0)


def glu(x, axis=-1, dim=None):
    """a sigmoid(b) with a, b the two halves of ``x`` along ``axis`` (Dauphin et al., 2017)."""
    a, b = _halves(x, _pick_axis(axis, dim), "glu")
    return a * _ew.sigmoid(b)


def swiglu(x, axis=-1, dim=None):
    """silu(a) b with a, b the two halves of ``x`` along ``axis`` (Shazeer, 2020: the gate is the
    first half, as in LLaMA's w1 / w3 projections concatenated)."""
    a, b = _halves(x, _pick_axis(axis, dim), "swiglu")
    return silu(a) * b


def geglu(x, axis=-1, dim=None, approximate="none"):
    """gelu(a) b with a, b the two halves of ``x`` along ``axis`` (Shazeer, 2020; T5 v1.1)."""
    a, b = _halves(x, _pick_axis(axis, dim), "geglu")
    return gelu(a, approximate) * b


def _halves(x, axis, op):
    x = _tensor(x)
    if x.ndim == 0 or x.shape[axis] % 2:
        raise ValueError(f"{op}: axis {axis} of a tensor of shape {x.shape} must have an even "
                         "size (it is split into a value half and a gate half)")
    return x.chunk(2, axis=axis)


def normalize(x, p=2.0, axis=1, eps=1e-12, dim=None):
    """x / max(norm_p(x), eps) along ``axis`` (PyTorch's default axis 1)."""
    x = _tensor(x)
    return x / x.norm(p, axis=_pick_axis(axis, dim), keepdims=True).clip(low=eps)


@cookbook.equation(35)
def softmax(x, axis=-1, dim=None):
    """exp(x) / sum(exp(x)) along ``axis`` (the survey's eq 35); stable for any finite logits (the
    row maximum is subtracted first) and 0 on a row that is all ``-inf``."""
    return _tensor(x).softmax(axis=_pick_axis(axis, dim))


def softmin(x, axis=-1, dim=None):
    """softmax(-x) along ``axis``: weights that favour the smallest entries; stable for any
    finite x and 0 on a row that is all ``+inf``."""
    return (-_tensor(x)).softmax(axis=_pick_axis(axis, dim))


def log_softmax(x, axis=-1, dim=None):
    """x - logsumexp(x) along ``axis``; stable for logits of any size (1e4 included)."""
    return _tensor(x).log_softmax(axis=_pick_axis(axis, dim))


# ---- linear, embedding, normalisation, dropout ---------------------------------------------------
def linear(x, weight, bias=None):
    """y = x W^T + b, with ``weight`` of shape ``(out_features, in_features)`` (PyTorch's layout,
    so PyTorch and HuggingFace weights load without transposes) and ``bias`` ``(out_features,)``.
    ``x`` has shape ``(..., in_features)``."""
    x = _tensor(x)
    if weight.ndim != 2:
        raise ValueError(f"linear: the weight must be 2-D (out_features, in_features), got shape "
                         f"{weight.shape}")
    if x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input of shape {x.shape} does not end with in_features = "
                         f"{weight.shape[1]} of the weight of shape {weight.shape} "
                         "(out_features, in_features)")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"linear: bias of shape {bias.shape} does not match out_features = "
                         f"{weight.shape[0]} (weight of shape {weight.shape})")
    return _Linear.apply(x, weight, bias)


def _integer_ids(ids, backend, op):
    ids = ids if isinstance(ids, Tensor) else Tensor(np.asarray(ids), backend=backend)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{op}: ids must be an integer tensor, got dtype {ids.dtype}")
    return ids


def _padding_row(padding_idx, num_embeddings, op):
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"{op}: padding_idx {padding_idx} is outside [-{num_embeddings}, "
                         f"{num_embeddings})")
    return padding_idx % num_embeddings


def embedding(ids, weight, padding_idx=None):
    """Rows of ``weight`` (``(num_embeddings, dim)``) picked by the integer ``ids``: the output
    has shape ``ids.shape + (dim,)``. Its gradient is a scatter-add of rows (the backend's
    ``scatter_add_rows`` kernel). Positions holding ``padding_idx`` give the weight no gradient,
    so the padding row keeps the value it has (zero, as ``nn.Embedding`` initialises it).

    Ids outside [0, num_embeddings) raise ``ValueError`` naming the id.
    """
    if weight.ndim != 2:
        raise ValueError(f"embedding: the weight must be 2-D (num_embeddings, dim), got shape "
                         f"{weight.shape}")
    ids = _integer_ids(ids, weight.backend, "embedding")
    n = weight.shape[0]
    if ids.size:
        low, high = int(ids.data.min()), int(ids.data.max())
        if low < 0 or high >= n:
            raise ValueError(f"embedding: token id {low if low < 0 else high} is outside the "
                             f"vocabulary [0, {n})")
    out = weight[ids]
    if padding_idx is not None:
        at_padding = ids == _padding_row(padding_idx, n, "embedding")
        if out.requires_grad and bool(at_padding.data.any()):
            out = where(at_padding.unsqueeze(-1), out.detach(), out)
    return out


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias, with mean and (biased) variance taken over
    the trailing ``normalized_shape`` axes (Ba et al., 2016). One fused kernel."""
    x = _tensor(x)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or x.shape[x.ndim - len(shape):] != shape or len(shape) > x.ndim:
        raise ValueError(f"layer_norm: input of shape {x.shape} does not end with "
                         f"normalized_shape {shape}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != shape:
            raise ValueError(f"layer_norm: {name} of shape {p.shape} differs from "
                             f"normalized_shape {shape}")
    if eps < 0:
        raise ValueError(f"layer_norm: eps must be >= 0, got {eps}")
    if len(shape) == 1:
        return _LayerNorm.apply(x, weight, bias, eps=float(eps))
    flat = x.reshape(*x.shape[:x.ndim - len(shape)], -1)
    y = _LayerNorm.apply(flat, None if weight is None else weight.reshape(-1),
                         None if bias is None else bias.reshape(-1), eps=float(eps))
    return y.reshape(x.shape)


def _check_probability(p, op, name="p"):
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: the drop probability {name} must be a number in [0, 1], got "
                         f"{p!r}")


def dropout(x, p=0.5, training=True, generator=None):
    """Inverted dropout (Srivastava et al., 2014): zero each element with probability ``p`` and
    scale the survivors by 1/(1-p), so that the expected value is unchanged and evaluation
    (``training=False``) is the identity. The mask is drawn from ``generator`` (default: the
    global generator that ``manual_seed`` seeds)."""
    _check_probability(p, "dropout")
    x = _tensor(x)
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    keep = rng(generator).random(x.shape, dtype=np.float32) >= p
    scale = np.multiply(keep, 1.0 / (1.0 - p), dtype=x.dtype)
    return x * x.backend.asarray(scale)


# ---- losses --------------------------------------------------------------------------------------
def _check_reduction(reduction, op, allowed=REDUCTIONS):
    if reduction not in allowed:
        raise ValueError(f"{op}: reduction must be one of {allowed}, got {reduction!r}")


def _reduce(loss, reduction, denominator=None):
    """``loss`` summed, averaged (over ``denominator`` when given, 0 when that is 0) or as is."""
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    count = loss.size if denominator is None else denominator
    return total * (1.0 / count) if count else total * 0.0


def _same_shape(a, b, op, what=("input", "target")):
    if a.shape != b.shape:
        raise ValueError(f"{op}: {what[0]} of shape {a.shape} and {what[1]} of shape {b.shape} "
                         "differ")


def _class_weight(weight, num_classes, like, op):
    if weight is None:
        return None
    data = weight.data if isinstance(weight, Tensor) else like.backend.asarray(np.asarray(weight))
    if data.shape != (num_classes,):
        raise ValueError(f"{op}: weight of shape {tuple(data.shape)} must have one entry per "
                         f"class, ({num_classes},)")
    return data.astype(like.dtype, copy=False)


def _class_ids(target, scores, ignore_index, op):
    """The target ids as a backend array, checked against ``scores`` (..., C), and where they
    count (not ``ignore_index``)."""
    xp = scores.backend.xp
    ids = target.data if isinstance(target, Tensor) else xp.asarray(np.asarray(target))
    num_classes = scores.shape[-1]
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{op}: class targets must be integers, got dtype {ids.dtype}")
    if ids.shape != scores.shape[:-1]:
        raise ValueError(f"{op}: input of shape {scores.shape} (classes on the last axis) needs "
                         f"a target of shape {scores.shape[:-1]}, got {tuple(ids.shape)}")
    counted = ids != ignore_index
    outside = counted & ((ids < 0) | (ids >= num_classes))
    if bool(outside.any()):
        bad = int(ids[outside].reshape(-1)[0])
        raise ValueError(f"{op}: target holds class id {bad}, outside [0, {num_classes}) "
                         f"(ignore_index={ignore_index})")
    return ids, counted


def _negative_log_likelihood(log_probs, target, weight, ignore_index, reduction, smoothing, op):
    """The shared body of ``nll_loss`` and of ``cross_entropy`` with class-id targets and class
    weights (which the fused kernel does not take)."""
    if log_probs.ndim == 0:
        raise ValueError(f"{op}: the input needs a class axis, got a 0-d tensor")
    _check_reduction(reduction, op)
    xp = log_probs.backend.xp
    num_classes = log_probs.shape[-1]
    ids, counted = _class_ids(target, log_probs, ignore_index, op)
    w = _class_weight(weight, num_classes, log_probs, op)
    safe_ids = xp.where(counted, ids, 0)
    coef = counted.astype(log_probs.dtype)
    if w is not None:
        coef *= w[safe_ids]
    # log p(target) of every position: one integer index into the flattened log-probabilities,
    # whose backward is a scatter of one value per row (not a dense one-hot)
    flat = xp.arange(ids.size) * num_classes + safe_ids.reshape(-1)
    picked = log_probs.reshape(-1)[flat].reshape(ids.shape)
    loss = picked * -coef
    if smoothing:
        weighted = log_probs if w is None else log_probs * w
        loss = loss * (1.0 - smoothing) + weighted.sum(axis=-1) * (
            counted.astype(log_probs.dtype) * (-smoothing / num_classes))
    return _reduce(loss, reduction, denominator=float(coef.sum()))


def nll_loss(log_probs, target, *, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of class ids: ``-weight[t] * log_probs[..., t]`` per position.

    ``log_probs`` has shape ``(..., C)`` (classes on the last axis), ``target`` integer ids of
    shape ``(...)``; positions equal to ``ignore_index`` count for nothing. ``"mean"`` divides by
    the summed weights of the counted positions (their number, without ``weight``); when no
    position counts the loss is 0 (PyTorch gives NaN).
    """
    log_probs = _tensor(log_probs)
    return _negative_log_likelihood(log_probs, target, weight, ignore_index, reduction, 0.0,
                                    "nll_loss")


def cross_entropy(logits, target, *, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """Cross-entropy between ``softmax(logits)`` and the target, PyTorch's semantics with the
    class axis last: ``logits`` ``(..., C)``; ``target`` either integer class ids ``(...)`` or
    class probabilities of the same shape as ``logits``.

    With class ids, per counted position (target != ``ignore_index``)::

        loss = (1 - eps) * (-w[t] log p_t) + eps * mean_c(-w[c] log p_c)     (eps = label_smoothing)

    (label smoothing as in Szegedy et al., 2016: the one-hot target mixed with the uniform
    distribution). ``"mean"`` divides the sum by the summed ``w[t]`` of counted positions, their
    number without ``weight``; ignored positions give 0 in ``"none"``. When every position is
    ignored, ``"mean"`` gives 0 (PyTorch gives NaN), so a batch of padding cannot poison a run.

    With probabilities ``q``, ``loss = -sum_c w[c] q'_c log p_c`` with
    ``q' = (1 - eps) q + eps/C``, and ``"mean"`` divides by the number of positions; a class
    with q'_c = 0 adds 0 even where its logit is -inf (0 log 0 = 0), and sends back gradient 0.

    Class ids outside [0, C) raise ``ValueError``; so do shape mismatches.
    """
    op = "cross_entropy"
    logits = _tensor(logits)
    if not isinstance(label_smoothing, numbers.Real) or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    if logits.ndim == 0:
        raise ValueError(f"{op}: the logits need a class axis, got a 0-d tensor")
    target_dtype = target.dtype if isinstance(target, Tensor) else np.asarray(target).dtype
    if not dtypes.is_floating(target_dtype) and weight is None:
        # the common case runs the backend's fused kernel: one pass forward, one backward
        _check_reduction(reduction, op)
        ids, counted = _class_ids(target, logits, ignore_index, op)
        num_classes = logits.shape[-1]
        rows = _CrossEntropy.apply(logits.reshape(-1, num_classes), ids.reshape(-1),
                                   ignore_index=ignore_index,
                                   label_smoothing=float(label_smoothing))
        return _reduce(rows.reshape(ids.shape), reduction, denominator=float(counted.sum()))
    log_probs = logits.log_softmax(axis=-1)
    if not dtypes.is_floating(target_dtype):
        return _negative_log_likelihood(log_probs, target, weight, ignore_index, reduction,
                                        float(label_smoothing), op)
    _check_reduction(reduction, op)
    target = _tensor(target)
    if target.shape != logits.shape:
        raise ValueError(f"{op}: logits of shape {logits.shape} need class ids of shape "
                         f"{logits.shape[:-1]} or probabilities of shape {logits.shape}, got a "
                         f"float target of shape {target.shape}")
    num_classes = logits.shape[-1]
    if label_smoothing:
        target = target * (1.0 - label_smoothing) + label_smoothing / num_classes
    w = _class_weight(weight, num_classes, logits, op)
    if w is not None:
        target = target * w
    return _reduce(-_times_log(target, log_probs).sum(axis=-1), reduction)


def mse_loss(input, target, reduction="mean"):  # noqa: A002 - PyTorch's argument name
    """(input - target)^2, averaged, summed or per element; the shapes must be equal."""
    input, target = _tensor(input), _tensor(target)
    _check_reduction(reduction, "mse_loss")
    _same_shape(input, target, "mse_loss")
    diff = input - target
    return _reduce(diff * diff, reduction)


def _times_log(probs, log_probs):
    """probs * log_probs with 0 where probs is 0, also where log_probs is -inf (0 log 0 = 0, as
    in entropies and KL divergences); there the gradients are 0 too, never 0 * inf."""
    empty = (probs == 0) & (log_probs == -np.inf)
    return probs * log_probs.masked_fill(empty, 0.0)


def kl_div(input, target, reduction="batchmean", log_target=False):  # noqa: A002
    """KL(target || exp(input)) with ``input`` log-probabilities, PyTorch's argument order:
    pointwise ``target * (log target - input)``, or with ``log_target=True``
    ``exp(target) * (target - input)``; 0 where the target probability is 0, also where
    ``input`` is -inf there (0 log 0 = 0), with gradient 0 (PyTorch gives nan there).

    ``reduction``: ``"batchmean"`` (the default here, and the true KL divergence per example:
    the sum divided by ``input.shape[0]``), ``"sum"``, ``"mean"`` (over every element, PyTorch's
    default, which is not the KL divergence), or ``"none"``.
    """
    op = "kl_div"
    input, target = _tensor(input), _tensor(target)
    _check_reduction(reduction, op, REDUCTIONS + ("batchmean",))
    _same_shape(input, target, op)
    if log_target:
        probs = target.exp()
        pointwise = _times_log(probs, target) - _times_log(probs, input)
    else:
        pointwise = _ew.xlogy(target, target) - _times_log(target, input)
    if reduction == "batchmean":
        return pointwise.sum() * (1.0 / input.shape[0]) if input.ndim else pointwise.sum()
    return _reduce(pointwise, reduction)


def binary_cross_entropy_with_logits(logits, target, *, weight=None, pos_weight=None,
                                     reduction="mean"):
    """-[p t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))] from logits ``x``, computed stably as
    ``(1 - t) x + (1 + (p - 1) t) softplus(-x)`` (PyTorch's form), with ``p = pos_weight``
    (broadcast along the last axis, one per class; 1 when omitted) and each element scaled by
    ``weight`` (broadcast)."""
    op = "binary_cross_entropy_with_logits"
    logits, target = _tensor(logits), _tensor(target)
    _check_reduction(reduction, op)
    _same_shape(logits, target, op, ("logits", "target"))
    pos_weight = _broadcast_weight(pos_weight, "pos_weight", logits.shape, op)
    weight = _broadcast_weight(weight, "weight", logits.shape, op)
    softplus_neg = _ew.softplus(-logits)
    if pos_weight is None:
        loss = (1.0 - target) * logits + softplus_neg
    else:
        loss = (1.0 - target) * logits + (1.0 + (pos_weight - 1.0) * target) * softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy(probs, target, *, weight=None, reduction="mean"):
    """-[t log p + (1 - t) log(1 - p)] on probabilities ``p`` in [0, 1]; each log is clamped at
    -100 as PyTorch does, so p = 0 or 1 gives a finite loss. Prefer
    ``binary_cross_entropy_with_logits`` (stable for any logits)."""
    op = "binary_cross_entropy"
    probs, target = _tensor(probs), _tensor(target)
    _check_reduction(reduction, op)
    _same_shape(probs, target, op, ("probs", "target"))
    outside = (probs.data < 0) | (probs.data > 1)
    if bool(outside.any()):
        raise ValueError(f"{op}: probabilities must lie in [0, 1]; got "
                         f"{float(probs.data[outside][0])} (pass logits to "
                         "binary_cross_entropy_with_logits instead)")
    log_p = _ew.log(probs.clip(low=1e-300)).clip(low=-100.0)
    log_not_p = _ew.log((1.0 - probs).clip(low=1e-300)).clip(low=-100.0)
    loss = -(target * log_p + (1.0 - target) * log_not_p)
    weight = _broadcast_weight(weight, "weight", probs.shape, op)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _broadcast_weight(weight, name, shape, op):
    """``weight`` as a tensor that broadcasts to ``shape`` (or None)."""
    if weight is None:
        return None
    weight = _tensor(weight)
    try:
        if np.broadcast_shapes(weight.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"{op}: {name} of shape {weight.shape} does not broadcast to logits of "
                         f"shape {shape}") from None
    return weight


def cosine_similarity(a, b, axis=-1, eps=1e-8, dim=None):
    """a.b / (max(|a|, eps) max(|b|, eps)) along ``axis``; ``a`` and ``b`` broadcast. Each vector
    is normalised before the dot product (as PyTorch does), so the result stays in [-1, 1]."""
    a, b = _tensor(a), _tensor(b)
    axis = _pick_axis(axis, dim)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"cosine_similarity: shapes {a.shape} and {b.shape} do not "
                         "broadcast") from None
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"cosine_similarity: axis {axis} is out of range for shape {shape}")
    a, b = a.broadcast_to(shape), b.broadcast_to(shape)  # a norm is over the broadcast vector
    floor = eps * eps
    a_unit = a * (a * a).sum(axis=axis, keepdims=True).maximum(floor).rsqrt()
    b_unit = b * (b * b).sum(axis=axis, keepdims=True).maximum(floor).rsqrt()
    return (a_unit * b_unit).sum(axis=axis)



# ---- attention -----------------------------------------------------------------------------------
def _attention_inputs(q, k, v, key_mask, op):
    """q, k, v as (batch, heads, time, head_dim) tensors and ``key_mask`` as a (batch, key_time)
    bool array. k and v may have fewer heads than q when that number divides q's: grouped-query
    attention (Ainslie et al., 2023), every group of q heads sharing one k/v head."""
    q, k, v = _tensor(q), _tensor(k), _tensor(v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(f"{op}: {name} must have shape (batch, heads, time, head_dim), got "
                             f"{t.shape}")
    heads, kv_heads = q.shape[1], k.shape[1]
    if (q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]
            or heads % kv_heads):
        raise ValueError(f"{op}: shapes q {q.shape}, k {k.shape}, v {v.shape} do not fit: q and k "
                         "need the same batch and head_dim, k and v the same batch, heads and "
                         "time, and k's number of heads must divide q's")
    if key_mask is None:
        return q, k, v, None
    mask = key_mask.data if isinstance(key_mask, Tensor) else q.backend.asarray(key_mask)
    if mask.dtype.kind != "b" or mask.shape != (k.shape[0], k.shape[2]):
        raise ValueError(f"{op}: key_mask must be a bool array of shape (batch, key_time) = "
                         f"{(k.shape[0], k.shape[2])} with True for real tokens; got "
                         f"{mask.dtype} {tuple(mask.shape)}")
    return q, k, v, mask


def repeat_kv_heads(x, heads):
    """Grouped-query attention: (batch, kv_heads, time, d) -> (batch, heads, time, d), each k/v
    head repeated for the ``heads / kv_heads`` query heads of its group. An index, so the
    gradients of a group's heads add up on the shared head."""
    groups = heads // x.shape[1]
    if groups == 1:
        return x
    return x[:, np.arange(heads) // groups]


def _scores_shape(q, k):
    return (q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def _broadcastable(shape, target):
    return len(shape) <= len(target) and all(
        s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def _attention_mask(mask, q, k, op):
    """``mask`` as a bool backend array broadcastable to (batch, heads, q_time, k_time)."""
    if mask is None:
        return None
    array = mask.data if isinstance(mask, Tensor) else q.backend.asarray(mask)
    target = _scores_shape(q, k)
    if array.dtype.kind != "b" or not _broadcastable(array.shape, target):
        raise ValueError(f"{op}: mask must be a bool array broadcastable to (batch, heads, "
                         f"q_time, k_time) = {target}, True where the query may attend the key; "
                         f"got {array.dtype} {tuple(array.shape)}")
    return array


def _attention_bias(bias, q, k, op):
    """``bias`` as a float tensor broadcastable to (batch, heads, q_time, k_time)."""
    if bias is None:
        return None
    bias = bias if isinstance(bias, Tensor) else as_tensor(bias, dtype=q.dtype,
                                                          backend=q.backend.name)
    target = _scores_shape(q, k)
    if not dtypes.is_floating(bias.dtype) or not _broadcastable(bias.shape, target):
        raise ValueError(f"{op}: bias must be a float tensor broadcastable to (batch, heads, "
                         f"q_time, k_time) = {target}; got {bias.dtype} {bias.shape}")
    return bias


def _scale(q, scale):
    return 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)


def _attention_arguments(q, k, v, key_mask, mask, bias, op):
    """Every attention input checked (errors name ``op``) and k/v heads shared among q's."""
    q, k, v, key_mask = _attention_inputs(q, k, v, key_mask, op)
    k, v = repeat_kv_heads(k, q.shape[1]), repeat_kv_heads(v, q.shape[1])
    return q, k, v, key_mask, _attention_mask(mask, q, k, op), _attention_bias(bias, q, k, op)


def _attention_weights(q, k, mask, bias, causal, key_mask, scale):
    scores, factor = q @ k.mT, _scale(q, scale)
    if factor != 1.0:                 # a core that scales its queries (or T5) skips this pass
        scores = scores * factor
    if bias is not None:
        scores = scores + bias
    allowed = _visible_keys(q.backend.xp, q.shape[2], k.shape[2], causal, key_mask)
    if mask is not None:
        allowed = allowed & mask
    return scores.masked_fill(~allowed, -np.inf).softmax(axis=-1)


@cookbook.equation(11)
def attention_weights(q, k, *, mask=None, bias=None, causal=False, key_mask=None, scale=None):
    r"""The attention weights W_SM = softmax(Q K^T / sqrt(d_k) + bias) of each head (eq 11).

    The survey writes eq 11 as softmax(Q . K^T); Vaswani et al. (2017, eq. 1) divide the scores
    by sqrt(d_k) so that their variance does not grow with the head size and push the softmax
    into regions of tiny gradients. This is the original, scaled form (``scale`` overrides
    1/sqrt(d_k)).

    ``q`` is ``(batch, heads, query_time, d_k)``, ``k`` ``(batch, heads, key_time, d_k)``; the
    result is ``(batch, heads, query_time, key_time)``, each row a distribution over the keys the
    query may see. What a query may see is the intersection of: ``causal`` (query t sees keys up
    to t, queries aligned with the *last* keys when there are fewer of them, as when decoding
    with a cache), ``key_mask`` ``(batch, key_time)`` (False on padding) and ``mask`` (bool,
    broadcastable to the scores' shape, True = may attend; the builders are in
    ``minitorch_nlp.attention``). ``bias`` is added to the scaled scores (T5's relative position
    bias, Transformer-XL's positional terms) and receives a gradient. A query that sees no key
    gets a row of zeros.
    """
    q, k, _, key_mask, mask, bias = _attention_arguments(q, k, k, key_mask, mask, bias,
                                                         "attention_weights")
    return _attention_weights(q, k, mask, bias, causal, key_mask, scale)


def scaled_dot_product_attention(q, k, v, *, mask=None, bias=None, causal=False, key_mask=None,
                                 scale=None, dropout_p=0.0, generator=None):
    """softmax(q k^T / sqrt(d_k) + bias) v over (batch, heads, time, head_dim) tensors (Vaswani
    et al., 2017, eq. 1; the survey's eq. 11-12 leave out the 1/sqrt(d_k) scale): the one path
    every attention in the library takes.

    The masks and the bias are those of ``attention_weights``: ``causal``, ``key_mask`` (batch,
    key_time), ``mask`` (bool, broadcastable to (batch, heads, q_time, k_time), True = may
    attend) and ``bias`` (additive, differentiable). ``dropout_p`` drops attention weights
    (drawn from ``generator``); k and v may have fewer heads than q (grouped-query attention).
    A query with no visible key outputs zeros.

    The choice of path is made here, once: without dropout, the backend's fused kernel, which
    applies the causal and key masks inside without materialising an n x n mask, adds the bias
    inside (its gradient is the scores' gradient, summed over the axes the bias was broadcast
    along) and keeps no probabilities it can recompute; a general mask joins the bias as -inf
    entries. Dropout, or a bias of another dtype than q, take the composite
    ``dropout(attention_weights(...)) @ v``, differentiable in every input (bias included)."""
    op = "scaled_dot_product_attention"
    q, k, v, key_mask, mask, bias = _attention_arguments(q, k, v, key_mask, mask, bias, op)
    _check_probability(dropout_p, op, name="dropout_p")
    if dropout_p == 0 and (bias is None or bias.dtype == q.dtype):
        if mask is not None:
            hidden = as_tensor(q.backend.xp.where(mask, 0.0, -np.inf), dtype=q.dtype,
                               backend=q.backend.name)
            bias = hidden if bias is None else bias + hidden
        return _Attention.apply(q, k, v, key_mask, bias, scale=_scale(q, scale),
                                causal=bool(causal))
    weights = _attention_weights(q, k, mask, bias, causal, key_mask, scale)
    return dropout(weights, dropout_p, generator=generator) @ v


def banded_attention(q, k, v, *, window, dilation=1, causal=False, key_mask=None, scale=None):
    """Sliding-window self-attention (Longformer's local pattern, Beltagy et al., 2020): query i
    sees keys i + o * dilation for -window <= o <= window (o <= 0 when ``causal``). Memory grows
    as time * (2 * window + 1) (plus a block of 16-64 queries when the band is computed in
    blocks), not time^2; with window >= time it equals full attention."""
    q, k, v, mask = _attention_inputs(q, k, v, key_mask, "banded_attention")
    k, v = repeat_kv_heads(k, q.shape[1]), repeat_kv_heads(v, q.shape[1])
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"banded_attention: is self-attention; q has {q.shape[2]} positions, k "
                         f"{k.shape[2]}")
    for name, value in (("window", window), ("dilation", dilation)):
        checks.positive_int(value, name, "banded_attention")
    return _BandedAttention.apply(q, k, v, mask, scale=_scale(q, scale), window=int(window),
                                  dilation=int(dilation), causal=bool(causal))
