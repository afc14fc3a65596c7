"""Specs of pruning (the survey's section VI-B): the relaxed L0 norm of Voita et al.'s
hard-concrete gates (eq 52) and Michel et al.'s head-masked multi-head attention (eq 53).

Eq 53 is computed by ``nn.MultiHeadAttention``; its spec takes the weights as a keyword, and the
library's side is the module run with them (``nn.replaced_tensors``)."""
from __future__ import annotations

from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp import nn

from .. import strategies as S
from ..reference import pruning as reference
from ..spec import Spec

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


@st.composite
def _masked_attention_cases(draw):
    heads, d_k = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    batch, time, d = draw(st.integers(1, 2)), draw(st.integers(1, 3)), heads * d_k
    params = {name: draw(S.arrays((d, d) if name.endswith("_w") else (d,))) for name in _ATTENTION}
    return {"x": draw(S.arrays((batch, time, d))), "xi": draw(S.arrays((heads,))),
            "params": params, "num_heads": heads}


@st.composite
def _expected_l0_cases(draw):
    return {"log_alpha": draw(S.arrays((draw(st.integers(1, 6)),), -4.0, 4.0)),
            "beta": draw(st.floats(0.2, 2.0)),
            "gamma": draw(st.floats(-0.5, -0.01)),
            "zeta": draw(st.floats(1.01, 1.5))}


SPECS = (
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
          ("xi", "float64 (heads,), the head masks xi_h"),
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
)
