"""Specs of GShard's mixture of experts (eq 32-34)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import moe as reference
from ..spec import Spec


@st.composite
def _routings(draw):
    """Gate logits (no ties in a row; sometimes shifted by ±1e4, spread 1000 times wider or
    squeezed 1000 times narrower) with the gating's static arguments."""
    tokens, experts = draw(st.integers(1, 6)), draw(st.integers(1, 4) | st.just(8))
    k = 1 if experts == 1 else draw(st.sampled_from((2, 1, 2)))
    # random routing's uniform numbers, mostly given (None uses every second expert)
    draws = draw(st.sampled_from((True, True, False)).flatmap(lambda given: st.lists(
        st.floats(0.0, 1.0, exclude_max=True), min_size=tokens, max_size=tokens)
        if given else st.none()))
    logits = draw(S.distinct_arrays((tokens, experts))) * draw(st.sampled_from((1.0, 1e3, 1e-3)))
    logits = logits + draw(st.sampled_from((0.0, 1e4, -1e4)))
    return {"logits": logits, "k": k,
            "capacity": draw(st.integers(1, tokens)),
            "draws": None if draws is None or k == 1 else np.asarray(draws)}


@st.composite
def _expert_buffers(draw):
    experts, capacity = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    d_model, d_ff = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    return {"x": draw(S.arrays((experts, capacity, d_model))),
            "wi": draw(S.arrays((experts, d_model, d_ff))),
            "wo": draw(S.arrays((experts, d_ff, d_model)))}


@st.composite
def _mixtures(draw):
    """Tokens, experts' weights and a combine tensor made by GShard's gating (each slot holds at
    most one token, as the gate guarantees)."""
    routing = draw(_routings())
    combine = reference.eq32_gshard_gating(routing["logits"], k=routing["k"],
                                           capacity=routing["capacity"], draws=routing["draws"])
    tokens, experts = routing["logits"].shape
    d_model, d_ff = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    return {"x": draw(S.arrays((tokens, d_model))),
            "wi": draw(S.arrays((experts, d_model, d_ff))),
            "wo": draw(S.arrays((experts, d_ff, d_model))),
            "combine": combine}


SPECS = (
    Spec(32, "gshard_gating",
         (("logits", "gate logits x_s W_g, float64 (tokens, num_experts)"),
          ("k", "1 (Switch: the top expert, raw gate) or 2 (GShard: top two, renormalised)"),
          ("capacity", "int: slots per expert; first choices fill them in token order, then "
                       "second choices"),
          ("draws", "None, or float64 (tokens,) uniform numbers: the second expert is used only "
                    "when 2 g2 > draws[s]")),
         "float64 (tokens, num_experts, capacity): each token's gate weight in the slot it takes",
         ("logits",),
         _routings,
         reference.eq32_gshard_gating,
         "minitorch_nlp.nn.moe:gshard_gating",
         "The survey writes eq 32 as G = GATE(x); the capacity, the second expert's random "
         "routing and the renormalisation of the top two gates are GShard's Algorithm 1."),
    Spec(33, "expert_ffn",
         (("x", "each expert's buffer, float64 (num_experts, capacity, d_model)"),
          ("wi", "float64 (num_experts, d_model, d_ff)"),
          ("wo", "float64 (num_experts, d_ff, d_model)")),
         "float64 (num_experts, capacity, d_model): wo_e . ReLU(wi_e . x) per expert",
         ("x", "wi", "wo"),
         _expert_buffers,
         reference.eq33_expert_ffn,
         "minitorch_nlp.nn.moe:expert_ffn",
         "No biases, as in GShard."),
    Spec(34, "mixture_of_experts",
         (("x", "tokens, float64 (tokens, d_model)"),
          ("wi", "float64 (num_experts, d_model, d_ff)"),
          ("wo", "float64 (num_experts, d_ff, d_model)"),
          ("combine", "float64 (tokens, num_experts, capacity): the gate weights of eq 32, one "
                      "token per slot at most")),
         "float64 (tokens, d_model): y_s = sum_e G_{s,e} FFN_e(x_s)",
         ("x", "wi", "wo"),
         _mixtures,
         reference.eq34_mixture_of_experts,
         "minitorch_nlp.nn.moe:mixture_of_experts",
         "The candidate may dispatch tokens to per-expert buffers (as GShard does) or apply "
         "each expert to each token; a token in no slot gets zeros."),
)
