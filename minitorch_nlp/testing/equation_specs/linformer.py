"""Spec of Linformer's attention (eq 111), with a projection pair per head (the paper's
unshared level).

The projections are ``LinformerAttention``'s parameters; the spec takes them as arguments, and
the library's side is the core run with them (``nn.replaced_tensors``)."""
from __future__ import annotations

import autograd.numpy as anp
from hypothesis import strategies as st

from minitorch_nlp import nn
from minitorch_nlp.attention.linformer import LinformerAttention

from .. import strategies as S
from ..reference import linformer as reference
from ..spec import Spec


def linformer_attention(q, k, v, E, F, *, key_mask):
    """head_i = softmax(Q_i (E_i K_i)^T / sqrt(d_k)) (F_i V_i) (eq 111) for every (batch, head):
    ``q``, ``k``, ``v`` (batch, heads, n, d_k), ``E``, ``F`` (heads, rank, N), N >= n, whose
    first n columns project the n keys and values to ``rank`` rows (a core made for sequences of
    up to N); ``key_mask`` None or bool (batch, n), False on padded keys, which the projections
    leave out. Returns (batch, heads, n, d_k).

    The library's ``LinformerAttention(N, rank, sharing="none")`` computes it with these E, F."""
    heads, rank, longest = E.shape
    core = LinformerAttention(longest, rank, sharing="none", num_heads=heads)
    with nn.replaced_tensors(core, {"E": E, "F": F}):
        output, _ = core(q, k, v, key_mask=key_mask)   # a core returns (output, weights)
    return output


@st.composite
def _linformer_cases(draw):
    """Sequences of 1 to 9 positions, as long as the projections or shorter (their first n
    columns), scores from flat to +-1e3."""
    batch, heads, time, d_k, rank = (draw(st.integers(1, 3)) for _ in range(5))
    time = draw(st.integers(6, 9)) if draw(st.integers(0, 4)) == 0 else time   # a long one
    longest = time + draw(st.sampled_from([0, 0, 1, 2]))
    case = {name: draw(S.arrays((batch, heads, time, d_k))) for name in "qkv"}
    case["q"] = case["q"] * draw(S.magnitudes((1.0, 1e-3, 1e3)))
    case.update(E=draw(S.arrays((heads, rank, longest))), F=draw(S.arrays((heads, rank, longest))))
    case["key_mask"] = draw(st.none() | S.bool_masks((batch, time), all_false_row=False))
    return case


def _per_head(q, k, v, E, F, key_mask):
    return anp.stack([
        anp.stack([reference.eq111_linformer_head(q[b, h], k[b, h], v[b, h], E[h], F[h],
                                                  None if key_mask is None else key_mask[b])
                   for h in range(q.shape[1])])
        for b in range(q.shape[0])])


SPECS = (
    Spec(111, "linformer_attention",
         (("q", "queries, float64 (batch, heads, n, d_k)"),
          ("k", "keys, float64 (batch, heads, n, d_k)"),
          ("v", "values, float64 (batch, heads, n, d_k)"),
          ("E", "float64 (heads, rank, N), N >= n, the keys' projections E_i (first n columns "
                "used)"),
          ("F", "float64 (heads, rank, N), the values' projections F_i (first n columns used)"),
          ("key_mask", "None or bool (batch, n), False on padded keys (at least one real key "
                       "per row)")),
         "float64 (batch, heads, n, d_k): softmax(Q_i (E_i K_i)^T / sqrt(d_k)) (F_i V_i)",
         ("q", "k", "v", "E", "F"),
         _linformer_cases,
         _per_head,
         "minitorch_nlp.testing.equation_specs.linformer:linformer_attention",
         "Wang et al. (2020, eq 7); the survey's eq 111. The library's side is "
         "LinformerAttention(sharing='none') with these projections."),
)
