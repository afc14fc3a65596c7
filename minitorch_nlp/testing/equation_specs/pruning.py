"""Specs of pruning (the survey's section VI-B): FLOP's gated factorised layer (eq 49-50), the
L0 norm of gates (eq 51), the relaxed L0 norm of Voita et al.'s hard-concrete gates (eq 52),
Michel et al.'s head-masked multi-head attention (eq 53) and its heads' importance (eq 54-55).

Eq 49-50 are computed by ``FactorizedLinear`` and eq 53 by ``nn.MultiHeadAttention``; their
specs take the weights as arguments, and the library's side is the module run with them
(``nn.replaced_tensors``). Eq 51 and 54-55 are checked on values only (a count; importance
scores that are themselves absolute gradients)."""
from __future__ import annotations

import functools

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minitorch_nlp as mt
from minitorch_nlp import nn
from minitorch_nlp.compress.hard_concrete import FactorizedLinear
from minitorch_nlp.compress.pruning import head_importance, head_importance_from_outputs

from .. import strategies as S
from ..reference import pruning as reference
from ..spec import Spec

# Louizos et al.'s (2018) stretch of the hard-concrete gates, written out here rather than read
# from the library, so that a wrong constant there shows.
GAMMA, ZETA = -0.1, 1.1

# The reference's names of the attention weights -> MultiHeadAttention's.
_ATTENTION = {"q_w": "q_proj.weight", "q_b": "q_proj.bias", "k_w": "k_proj.weight",
              "k_b": "k_proj.bias", "v_w": "v_proj.weight", "v_b": "v_proj.bias",
              "out_w": "out_proj.weight", "out_b": "out_proj.bias"}


def masked_multi_head_attention(x, xi, *, params, num_heads):
    """MH(x) = sum_h xi_h Att_h(x) W^O_h + b^O (eq 53): self-attention over ``x`` (batch, n, d)
    with each head's output scaled by its mask ``xi`` (heads,) before the output projection.
    ``params`` holds float64 arrays in ``Linear``'s layout: ``q_w``, ``k_w``, ``v_w``, ``out_w``
    (d, d) and ``q_b``, ``k_b``, ``v_b``, ``out_b`` (d,); head h owns rows h d_k .. (h+1) d_k of
    W^Q, W^K, W^V and those columns of W^O. Returns (batch, n, d).

    The library's ``nn.MultiHeadAttention`` (``head_mask=xi``) computes it with these weights."""
    attention = nn.MultiHeadAttention(x.shape[-1], num_heads)
    weights = {_ATTENTION[name]: mt.tensor(array, dtype=x.dtype) for name, array in params.items()}
    with nn.replaced_tensors(attention, weights):
        return attention(x, head_mask=xi)


def _factorized(P, Q, bias, log_alpha):
    """A FactorizedLinear in eval mode (test-time gates) and its tensors."""
    layer = FactorizedLinear(Q.shape[1], P.shape[0], P.shape[1]).eval()
    tensors = {"P": P, "Q": Q, "gate.log_alpha": log_alpha}
    return layer, tensors if bias is None else dict(tensors, bias=bias)


def gated_linear(x, P, Q, bias, log_alpha):
    """y = x W~^T + b (eq 49) for ``x`` (..., in): the pruned parameters W~ = theta * z of W = P G
    Q (eq 50), ``P`` (out, r), ``Q`` (r, in), ``bias`` (out,), G = diag(z) of the test-time
    hard-concrete gates z_k = min(1, max(0, sigmoid(log_alpha_k) (zeta - gamma) + gamma)),
    gamma = -0.1, zeta = 1.1, ``log_alpha`` (r,). Returns (..., out).

    The library's ``FactorizedLinear`` (eval mode) computes it with these weights."""
    layer, tensors = _factorized(P, Q, bias, log_alpha)
    return nn.functional_call(layer, tensors, x)


def factorized_weight(P, Q, log_alpha):
    """W = P G Q = sum_k z_k p_k q_k^T (eq 50): ``P`` (out, r), ``Q`` (r, in), the test-time
    gates z of ``log_alpha`` (r,) as ``gated_linear``'s. Returns (out, in).

    The library's ``FactorizedLinear.weight()`` (eval mode) computes it with these weights."""
    layer, tensors = _factorized(P, Q, None, log_alpha)
    with nn.replaced_tensors(layer, tensors):
        return layer.weight()


def _attention_model(params, num_heads):
    """One transformer layer whose attention has ``params`` (a stack: what head importance
    walks), and the attention's tensors."""
    d = params["q_w"].shape[0]
    attention = nn.MultiHeadAttention(d, num_heads)
    stack = nn.TransformerStack([nn.TransformerLayer(
        attention, nn.FeedForward(d, 1), functools.partial(nn.LayerNorm, d))]).to(mt.float64)
    weights = {f"layers.0.self_attn.{_ATTENTION[name]}": mt.tensor(   # trainable, as a model's
        array, dtype=mt.float64, requires_grad=True) for name, array in params.items()}
    return stack, weights


def _importance(scores, batches, params, num_heads, head_mask):
    stack, weights = _attention_model(params, num_heads)

    def loss(model, batch):
        x, target = batch
        output = model.layers[0].self_attn(mt.tensor(x, dtype=mt.float64))
        return ((output - mt.tensor(target, dtype=mt.float64)) ** 2).sum() * 0.5

    with nn.replaced_tensors(stack, weights):
        return scores(stack, batches, loss, None if head_mask is None else [head_mask])[0]


def attention_head_importance(*, batches, params, num_heads, head_mask):
    """I_h = E_x |dL(x) / d xi_h| (eq 54) of one self-attention layer MH (eq 53's, weights
    ``params``) under the loss L(x) = ||MH(x) - target||^2 / 2, the expectation over
    ``batches``, a list of (x (B, n, d), target (B, n, d)) pairs; the gradient at xi =
    ``head_mask`` ((heads,) of 0 and 1; None: ones). Returns (heads,).

    The library's ``head_importance`` computes it (its loss_fn calls the layer's attention)."""
    return _importance(head_importance, batches, params, num_heads, head_mask)


def output_head_importance(*, batches, params, num_heads, head_mask):
    """I_h = E_x |Att_h(x)^T dL(x) / d Att_h(x)| (eq 55): each head's output (B, n, d_k) before
    the output projection, times the loss's gradient with respect to it, summed over all its
    entries; arguments as ``attention_head_importance``. Returns (heads,).

    The library's ``head_importance_from_outputs`` computes it."""
    return _importance(head_importance_from_outputs, batches, params, num_heads, head_mask)


@st.composite
def _factorized_cases(draw, with_input=True):
    out, rank, inputs = (draw(st.integers(1, 3)) for _ in range(3))
    # log_alpha up to ±30: gates clamped shut and fully open, beside the ones in between
    case = {"P": draw(S.arrays((out, rank))), "Q": draw(S.arrays((rank, inputs))),
            "log_alpha": draw(S.stress_arrays((rank,), kinds=("large",), large=30.0))}
    if with_input:
        leading = draw(S.shapes(0, 1))
        case.update(x=draw(S.arrays(leading + (inputs,))), bias=draw(S.arrays((out,))))
    return case


@st.composite
def _gate_cases(draw):
    # closed gates are common; -0.0 is closed too; 1e-300 and -1e-12 are (barely) open
    gates = st.sampled_from([0.0, 0.0, -0.0, 0.25, 1.0, -0.5, 1e-300, -1e-12])
    shape = draw(S.shapes(1, 2))
    return {"gates": np.array(draw(st.lists(gates, min_size=int(np.prod(shape)),
                                            max_size=int(np.prod(shape))))).reshape(shape)}


@st.composite
def _importance_cases(draw):
    heads, d_k = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    d, time, batch = heads * d_k, draw(st.integers(1, 3)), draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(S.seeds()))
    params = {name: rng.uniform(-1.0, 1.0, (d, d) if name.endswith("_w") else (d,))
              for name in _ATTENTION}
    batches = [(draw(S.arrays((batch, time, d))), draw(S.arrays((batch, time, d))))
               for _ in range(draw(st.integers(1, 2)))]
    mask = draw(st.none() | S.arrays((heads,), 0, 1).map(np.rint))
    return {"batches": batches, "params": params, "num_heads": heads, "head_mask": mask}


def _ones_unless(head_mask, num_heads):
    return np.ones(num_heads) if head_mask is None else head_mask


@st.composite
def _masked_attention_cases(draw):
    heads, d_k = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    batch, time, d = draw(st.integers(1, 2)), draw(st.integers(1, 3) | st.just(8)), heads * d_k
    params = {name: draw(S.arrays((d, d) if name.endswith("_w") else (d,))) for name in _ATTENTION}
    # inputs of up to 10 (scores of about 1e3-1e4), tiny ones; masks that are 0, 1 or anything
    shape = draw(st.sampled_from(((heads,), (batch, heads))))    # one mask per sequence too
    xi = draw(S.arrays(shape) | hnp.arrays(np.float64, shape,
                                          elements=st.sampled_from((0.0, 1.0))))
    return {"x": draw(S.stress_arrays((batch, time, d), kinds=("large", "tiny"), large=10.0)),
            "xi": xi, "params": params, "num_heads": heads}


@st.composite
def _expected_l0_cases(draw):
    return {"log_alpha": draw(S.stress_arrays((draw(st.integers(1, 6)),), -4.0, 4.0,
                                              kinds=("large",), large=30.0)),
            "beta": draw(st.floats(0.2, 2.0)),
            "gamma": draw(st.floats(-0.5, -0.01)),
            "zeta": draw(st.floats(1.01, 1.5))}


_IMPORTANCE_ARGS = (
    ("batches", "a list of (x, target) pairs, each float64 (B, n, d): the draws of x"),
    ("params", "dict of float64 arrays: q_w, k_w, v_w, out_w (d, d), q_b, k_b, v_b, out_b (d,), "
               "in Linear's layout"),
    ("num_heads", "int, the number of heads (d divisible by it)"),
    ("head_mask", "None or float64 (heads,) of 0 and 1: the masks xi at which to score"))

SPECS = (
    Spec(49, "gated_linear",
         (("x", "float64 (..., in), the layer's input"),
          ("P", "float64 (out, r)"), ("Q", "float64 (r, in)"), ("bias", "float64 (out,)"),
          ("log_alpha", "float64 (r,), the gates' location parameters")),
         "float64 (..., out): x (P diag(z) Q)^T + b, z the test-time hard-concrete gates",
         ("x", "P", "Q", "bias", "log_alpha"),
         _factorized_cases,
         lambda x, P, Q, bias, log_alpha: reference.eq49_gated_linear(x, P, Q, bias, log_alpha,
                                                                      GAMMA, ZETA),
         "minitorch_nlp.testing.equation_specs.pruning:gated_linear",
         "Wang et al. (2020): the pruned parameters theta * z are FLOP's rank components p_k "
         "q_k^T, each times its gate; gamma = -0.1, zeta = 1.1 (Louizos et al.). The library's "
         "side is FactorizedLinear in eval mode with these weights."),
    Spec(50, "factorized_weight",
         (("P", "float64 (out, r)"), ("Q", "float64 (r, in)"),
          ("log_alpha", "float64 (r,), the gates' location parameters")),
         "float64 (out, in): W = P G Q, G = diag(z) of the test-time gates",
         ("P", "Q", "log_alpha"),
         lambda: _factorized_cases(with_input=False),
         lambda P, Q, log_alpha: reference.eq50_factorized_weight(P, Q, log_alpha, GAMMA, ZETA),
         "minitorch_nlp.testing.equation_specs.pruning:factorized_weight",
         "The library's side is FactorizedLinear.weight() in eval mode with these weights."),
    Spec(51, "l0_norm",
         (("gates", "float64 array of any shape, the gates g_i"),),
         "int: sum_i (1 - [g_i = 0]), the number of open gates",
         (),
         _gate_cases,
         lambda gates: reference.eq51_l0_norm(gates),
         "minitorch_nlp.compress.hard_concrete:l0_norm",
         "Values only: a count has no gradient (eq 52 is its differentiable relaxation)."),
    Spec(52, "expected_l0",
         (("log_alpha", "float64 (gates,): each gate's location parameter"),
          ("beta", "temperature > 0"),
          ("gamma", "the stretch's lower end, < 0"),
          ("zeta", "the stretch's upper end, > 1")),
         "float64 scalar: L_C = sum_i (1 - P(z_i = 0 | log_alpha_i)) for hard-concrete gates",
         ("log_alpha",),
         _expected_l0_cases,
         lambda log_alpha, beta, gamma, zeta: reference.eq52_expected_l0(log_alpha, beta, gamma,
                                                                         zeta),
         "minitorch_nlp.compress.hard_concrete:expected_l0",
         "Louizos et al. (2018) eq. 12: P(z != 0) = sigmoid(log_alpha - beta log(-gamma / zeta))."),
    Spec(53, "masked_multi_head_attention",
         (("x", "float64 (batch, n, d), the layer's input"),
          ("xi", "float64 (heads,), the head masks xi_h, or (batch, heads): each sequence's"),
          ("params", "dict of float64 arrays: q_w, k_w, v_w, out_w (d, d), q_b, k_b, v_b, out_b "
                     "(d,), in Linear's layout"),
          ("num_heads", "int, the number of heads (d divisible by it)")),
         "float64 (batch, n, d): sum_h xi_h Att_h(x) W^O_h + b^O",
         ("x", "xi"),
         _masked_attention_cases,
         lambda x, xi, params, num_heads: reference.eq53_masked_multi_head_attention(
             x, xi, params, num_heads),
         "minitorch_nlp.testing.equation_specs.pruning:masked_multi_head_attention",
         "Michel et al. (2019, eq 1-2 and section 2.2). The gradient with respect to xi is what "
         "head importance (eq 54) averages. The library's side is nn.MultiHeadAttention with "
         "these weights and head_mask=xi."),
    Spec(54, "attention_head_importance", _IMPORTANCE_ARGS,
         "float64 (heads,): the mean over batches of |dL/dxi_h|",
         (),
         _importance_cases,
         lambda batches, params, num_heads, head_mask: reference.eq54_head_importance(
             batches, params, num_heads, _ones_unless(head_mask, num_heads)),
         "minitorch_nlp.testing.equation_specs.pruning:attention_head_importance",
         "Values only: the scores are absolute values of gradients (their own gradient would "
         "be a second derivative through |.|). Michel et al. (2019) eq. 2; a masked head scores "
         "0. The library's side is head_importance with a loss that calls the layer."),
    Spec(55, "output_head_importance", _IMPORTANCE_ARGS,
         "float64 (heads,): the mean over batches of |Att_h(x)^T dL/dAtt_h(x)|",
         (),
         _importance_cases,
         lambda batches, params, num_heads, head_mask: reference.eq55_head_importance_from_outputs(
             batches, params, num_heads, _ones_unless(head_mask, num_heads)),
         "minitorch_nlp.testing.equation_specs.pruning:output_head_importance",
         "Values only, as eq 54's; at unmasked heads it equals eq 54 (dL/dxi_h = Att_h^T "
         "dL/d(xi_h Att_h)). The library's side is head_importance_from_outputs."),
)
