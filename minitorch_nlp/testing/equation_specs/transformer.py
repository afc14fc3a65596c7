"""Specs of the Transformer's attention (eq 11-12), batched over heads."""
from __future__ import annotations

import autograd.numpy as anp
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import transformer as reference
from ..spec import Spec


def _per_head(one_head, key_mask, causal, *arrays):
    """A one-head reference applied to every (batch, head) pair, stacked."""
    batch, heads = arrays[0].shape[:2]
    return anp.stack([
        anp.stack([one_head(*(a[b, h] for a in arrays),
                            key_mask_row=None if key_mask is None else key_mask[b],
                            causal=causal)
                   for h in range(heads)])
        for b in range(batch)])


@st.composite
def _attention_cases(draw, with_values):
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    n_q, n_k, d_k = draw(st.integers(1, 4)), draw(st.integers(1, 4) | st.just(12)), \
        draw(st.integers(1, 4))
    # queries and keys of up to 100 make scores of about ±1e4 (a softmax without the max
    # subtraction overflows); tiny ones make nearly uniform weights
    case = {"q": draw(S.stress_arrays((batch, heads, n_q, d_k), kinds=("large", "tiny"),
                                      large=100.0)),
            "k": draw(S.stress_arrays((batch, heads, n_k, d_k), kinds=("large", "tiny"),
                                      large=100.0))}
    if with_values:
        case["v"] = draw(S.arrays((batch, heads, n_k, d_k)))
    case["causal"] = draw(st.booleans())
    case["key_mask"] = draw(st.none() | S.bool_masks((batch, n_k)))
    return case


_ATTENTION_ARGS = (
    ("q", "queries, float64 (batch, heads, n_q, d_k)"),
    ("k", "keys, float64 (batch, heads, n_k, d_k)"),
)
_MASK_ARGS = (
    ("causal", "bool: query i sees only keys j <= i + (n_k - n_q)"),
    ("key_mask", "None or bool (batch, n_k), False on padded keys; a query that sees no key "
                 "gets a row of zeros"),
)

SPECS = (
    Spec(11, "attention_weights",
         _ATTENTION_ARGS + _MASK_ARGS,
         "float64 (batch, heads, n_q, n_k): W_SM = softmax(Q K^T / sqrt(d_k)) over the keys",
         ("q", "k"),
         lambda: _attention_cases(False),
         lambda q, k, causal, key_mask: _per_head(reference.eq11_attention_weights,
                                                  key_mask, causal, q, k),
         "minitorch_nlp.functional:attention_weights",
         "The survey's eq 11 omits the 1/sqrt(d_k) scale; Vaswani et al. (2017, eq. 1) have it, "
         "and so must the candidate."),
    Spec(12, "scaled_dot_product_attention",
         _ATTENTION_ARGS + (("v", "values, float64 (batch, heads, n_k, d_k)"),) + _MASK_ARGS,
         "float64 (batch, heads, n_q, d_k): Z = softmax(Q K^T / sqrt(d_k)) V",
         ("q", "k", "v"),
         lambda: _attention_cases(True),
         lambda q, k, v, causal, key_mask: _per_head(
             reference.eq12_scaled_dot_product_attention, key_mask, causal, q, k, v),
         "minitorch_nlp.functional:scaled_dot_product_attention",
         "The library registers MultiHeadAttention for eq 12; this is its core, one call for "
         "all heads. The survey omits the 1/sqrt(d_k) scale (see eq 11)."),
)
