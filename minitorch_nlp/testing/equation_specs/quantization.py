"""Specs of quantisation (the survey's section VI-C): LQ-Nets' quantiser to levels, learnable
quantiser and bitwise inner product (eq 56-58), Q-BERT's loss and Hessian-vector product (eq
59-60) and Q8BERT's fake quantisation (eq 61).

A quantiser's derivative is zero almost everywhere, so eq 56 and 58 are checked on values only,
on inputs drawn from a grid of binary fractions (exact arithmetic: ties between two levels
happen, and are decided the same way on both sides). Eq 57 and 61 are trained through the
straight-through estimator, which is what their gradient checks. Eq 60 is checked on values:
H v is itself a second derivative, returned without a graph."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.compress.hessian import classification_loss as _classification_loss
from minitorch_nlp.compress.hessian import hessian_vector_product as _hessian_vector_product

from .. import strategies as S
from ..reference import quantization as reference
from ..spec import Spec


@st.composite
def _fake_quantize_cases(draw):
    """x on a grid, on exact .5 ties of x S (a power-of-two S keeps x S exact), or huge (+-1e4,
    clamped); S a float, a power of two, tiny or huge, or one scale per row or per column (an
    array broadcastable to x); every bit width 2-16."""
    shape = draw(S.shapes(min_dims=1, max_dims=2))
    kind = draw(st.sampled_from(("plain", "ties", "huge")))
    scale_kind = draw(st.sampled_from(("float", "power of two", "extreme", "per row",
                                       "per column")))
    if scale_kind == "float":
        scale = draw(st.floats(0.25, 16.0, allow_nan=False, allow_infinity=False))
    elif scale_kind == "extreme":
        scale = draw(st.sampled_from((1e-3, 1e3)))
    else:
        scale = 2.0 ** draw(st.integers(-3, 4))
        if scale_kind != "power of two":
            axis_shape = (shape[0],) + (1,) * (len(shape) - 1) if scale_kind == "per row" \
                else shape[-1:]
            scale = scale * 2.0 ** draw(_grid(axis_shape, -2, 2, 1))
    bits = draw(st.integers(2, 16))
    if kind == "ties":
        halves = draw(_grid(shape, -40, 40, 1)) + 0.5
        x = halves / scale * np.ones(shape)
    elif kind == "huge":
        x = draw(S.arrays(shape, -1e4, 1e4))
        x.flat[0] = draw(st.sampled_from((-1e4, 1e4)))
    else:
        x = draw(S.arrays(shape))
    return {"x": x, "scale": scale, "bits": bits}


def _grid(shape, low, high, step):
    """Arrays of multiples of ``step`` in [low, high] (exact in binary floating point)."""
    count = int(round((high - low) / step))
    return S.arrays(shape, 0, count).map(lambda a: low + np.rint(a) * step)


def _ties_and_extremes(draw, x, levels):
    """``x`` with some entries put exactly on a threshold between two levels (ties go to the
    lower level) and sometimes one far outside every level (+-1e4)."""
    if len(levels) > 1 and draw(st.booleans()):
        for position in draw(st.lists(st.integers(0, x.size - 1), min_size=1, max_size=3)):
            low = draw(st.integers(0, len(levels) - 2))
            x.flat[position] = (levels[low] + levels[low + 1]) / 2
    if draw(st.booleans()):
        x.flat[draw(st.integers(0, x.size - 1))] = draw(st.sampled_from((-1e4, 1e4)))
    return x


@st.composite
def _level_cases(draw):
    levels = np.sort(draw(_grid((draw(st.integers(1, 4)),), -2.0, 2.0, 0.25)))
    x = draw(_grid(draw(S.shapes(1, 2)), -3.0, 3.0, 0.125))
    return {"x": _ties_and_extremes(draw, x, levels), "levels": levels}


@st.composite
def _basis(draw):
    return draw(_grid((draw(st.integers(1, 3)),), 0.25, 1.5, 0.25))


@st.composite
def _lq_cases(draw):
    basis = draw(_basis())
    x = draw(_grid(draw(S.shapes(1, 2)), -3.0, 3.0, 0.125))
    return {"x": _ties_and_extremes(draw, x, reference.lq_levels(basis)), "basis": basis}


@st.composite
def _lq_matmul_cases(draw):
    rows, columns, inner = (draw(st.integers(1, 3)) for _ in range(3))
    a_basis, w_basis = draw(_basis()), draw(_basis())
    a = _ties_and_extremes(draw, draw(_grid((rows, inner), -3.0, 3.0, 0.125)),
                           reference.lq_levels(a_basis))
    w = _ties_and_extremes(draw, draw(_grid((columns, inner), -3.0, 3.0, 0.125)),
                           reference.lq_levels(w_basis))
    return {"a": a, "a_basis": a_basis, "w": w, "w_basis": w_basis}


class _BagOfEmbeddings(nn.Module):
    """The smallest sequence classifier: logits = W_c mean_t W_e[x_t] + b_c."""

    def __init__(self, vocab_size, dim, classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        self.classifier = nn.Linear(dim, classes)

    def forward(self, input_ids):
        return nn.outputs.ModelOutput(
            logits=self.classifier(self.embedding(input_ids).mean(axis=1)))


def classification_loss(W_e, W_c, b_c, *, batches):
    """L(theta) = sum_i CE(softmax(W_c(W_e(x_i))), y_i) (eq 59) over every example of
    ``batches``, a list of (input_ids int64 (B, T), labels int64 (B,)) pairs, for the
    classifier logits = W_c mean_t W_e[x_t] + b_c: ``W_e`` (vocab, dim), ``W_c`` (classes, dim),
    ``b_c`` (classes,). Returns a float64 scalar, a sum (not a mean).

    The library's ``compress.hessian.classification_loss`` computes it for a model of these
    weights."""
    model = _BagOfEmbeddings(W_e.shape[0], W_e.shape[1], W_c.shape[0])
    with nn.replaced_tensors(model, {"embedding.weight": W_e, "classifier.weight": W_c,
                                     "classifier.bias": b_c}):
        return _classification_loss(model, batches)


def hessian_vector_product(*, W, v, x, y):
    """H v for the Hessian H of L(W) = sum_i CE(softmax(W x_i), y_i) in ``W`` (classes,
    features) (eq 60), the examples ``x`` (N, features) with labels ``y`` (N,), the direction
    ``v`` (classes, features). Returns (classes, features).

    The library's ``compress.hessian.hessian_vector_product`` computes it by differentiating
    g^T v."""
    weight = mt.tensor(W, dtype=mt.float64, requires_grad=True)
    loss = F.cross_entropy(mt.tensor(x, dtype=mt.float64) @ weight.T, y, reduction="sum")
    return _hessian_vector_product(loss, [weight], [mt.tensor(v, dtype=mt.float64)])[0]


@st.composite
def _classification_cases(draw):
    vocab, dim, classes = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(2, 3))
    batches = []
    for _ in range(draw(st.integers(1, 2))):
        batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        batches.append((draw(_grid((batch, time), 0, vocab - 1, 1)).astype(np.int64),
                        draw(_grid((batch,), 0, classes - 1, 1)).astype(np.int64)))
    magnitude = draw(st.sampled_from((1.0, 1.0, 1e2)))     # 1e2: logits of order +-1e4
    return {"W_e": draw(S.arrays((vocab, dim))) * magnitude,
            "W_c": draw(S.arrays((classes, dim))) * magnitude,
            "b_c": draw(S.arrays((classes,))), "batches": batches}


@st.composite
def _hessian_cases(draw):
    classes, features, examples = draw(st.integers(2, 3)), draw(st.integers(1, 3)), draw(
        st.integers(1, 3))
    magnitude = draw(st.sampled_from((1.0, 1.0, 1e-3, 30.0)))   # near-uniform to saturated
    return {"W": draw(S.arrays((classes, features))) * magnitude,
            "v": draw(S.arrays((classes, features))),
            "x": draw(S.arrays((examples, features))),
            "y": draw(_grid((examples,), 0, classes - 1, 1)).astype(np.int64)}


SPECS = (
    Spec(56, "quantize_to_levels",
         (("x", "float64 array of any shape"),
          ("levels", "float64 (L,), sorted: q_1 <= ... <= q_L")),
         "(values float64, the shape of x: Q(x) = q_l for x in (t_l, t_{l+1}], t_l = (q_{l-1} "
         "+ q_l) / 2; indices int64: each l)",
         (),
         _level_cases,
         reference.eq56_quantize_to_levels,
         "minitorch_nlp.compress.lq_nets:quantize_to_levels",
         "Values only: Q is a step function (zero gradient almost everywhere). Each x goes to "
         "its nearest level, a tie to the lower one (x = t_l belongs to (t_{l-1}, t_l])."),
    Spec(57, "lq_quantize",
         (("x", "float64 array of any shape"),
          ("basis", "float64 (K,), the basis v; the levels are v^T e for e in {-1, 1}^K")),
         "float64, the shape of x: the nearest level (a tie to the lower), with gradient "
         "exactly the incoming one (straight-through estimator)",
         ("x",),
         _lq_cases,
         reference.eq57_lq_quantize,
         "minitorch_nlp.compress.lq_nets:lq_quantize",
         "Zhang et al. (2018) train through the quantiser with the straight-through estimator; "
         "the basis is fitted by QEM (fit_basis), not by gradients, so it is not differentiated "
         "here."),
    Spec(58, "lq_matmul",
         (("a", "float64 (M, N), the activations"), ("a_basis", "float64 (K_a,)"),
          ("w", "float64 (P, N), the weights"), ("w_basis", "float64 (K_w,)")),
         "float64 (M, P): Q_LQ(a, v^a) Q_LQ(w, v^w)^T",
         (),
         _lq_matmul_cases,
         reference.eq58_lq_matmul,
         "minitorch_nlp.compress.lq_nets:lq_matmul",
         "Values only: the library computes it bit plane by bit plane (xnor and popcount), the "
         "reference as the float product of the quantised values; the two must be equal."),
    Spec(59, "classification_loss",
         (("W_e", "float64 (vocab, dim), the embeddings"),
          ("W_c", "float64 (classes, dim), the classifier"), ("b_c", "float64 (classes,)"),
          ("batches", "a list of (input_ids int64 (B, T), labels int64 (B,)) pairs")),
         "float64 (): the sum over every example of -log softmax(logits)_y",
         ("W_e", "W_c", "b_c"),
         _classification_cases,
         lambda W_e, W_c, b_c, batches: reference.eq59_classification_loss(W_e, W_c, b_c,
                                                                           batches),
         "minitorch_nlp.testing.equation_specs.quantization:classification_loss",
         "Shen et al. (2020) eq. 1: the model is any classifier; the spec's is a bag of "
         "embeddings (the survey's W_n ... W_1 are the identity)."),
    Spec(60, "hessian_vector_product",
         (("W", "float64 (classes, features), the point where H is taken"),
          ("v", "float64 (classes, features), the direction"),
          ("x", "float64 (N, features), the examples"), ("y", "int64 (N,), their labels")),
         "float64 (classes, features): H v",
         (),
         _hessian_cases,
         lambda W, v, x, y: reference.eq60_hessian_vector_product(W, v, x),
         "minitorch_nlp.testing.equation_specs.quantization:hessian_vector_product",
         "Values only: H v is a second derivative, returned without a graph. The reference is "
         "the closed-form Hessian of softmax regression, not automatic differentiation."),
    Spec(61, "fake_quantize",
         (("x", "float64 array of any shape"),
          ("scale", "S > 0, a float or an array broadcastable to x (one scale per group)"),
          ("bits", "b in [2, 16]; M = 2^(b-1) - 1")),
         "float64, the shape of x: Clamp(round(x S), -M, M) / S, with gradient exactly the "
         "incoming one (straight-through estimator)",
         ("x",),
         _fake_quantize_cases,
         lambda x, scale, bits: reference.eq61_fake_quantize(x, scale, bits),
         "minitorch_nlp.compress.quantization:fake_quantize",
         "The survey writes a floor; Q8BERT rounds to the nearest integer (ties to even here). "
         "The library registers symmetric_quantize (the integers) for eq 61; the candidate "
         "returns the dequantised values that training computes with."),
)
