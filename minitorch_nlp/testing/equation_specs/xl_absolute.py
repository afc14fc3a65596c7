"""The spec of Transformer-XL's absolute-position attention score (Dai et al., 2019, section
3.3; the survey's section VIII-B): eq 90, the four terms of a standard Transformer's score that
the relative form, eq 91, replaces."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import strategies as S
from ..reference import xl_absolute as reference
from ..spec import Spec


@st.composite
def _score_cases(draw):
    """E with no, one or two leading axes (a single sequence, a batch, batch and heads)."""
    lead = tuple(draw(st.lists(st.integers(1, 2), max_size=2)))
    time, d, d_k = (draw(st.integers(1, 3)) for _ in range(3))
    return {"E": draw(S.arrays(lead + (time, d))), "U": draw(S.arrays((time, d))),
            "W_q": draw(S.arrays((d_k, d))), "W_k": draw(S.arrays((d_k, d)))}


SPECS = (
    Spec(90, "absolute_position_scores",
         (("E", "float64 (..., T, d): the token embeddings E_x (any leading axes)"),
          ("U", "float64 (T, d): the absolute position encodings U_0 .. U_{T-1}"),
          ("W_q", "float64 (d_k, d): the query projection (a Linear's weight)"),
          ("W_k", "float64 (d_k, d): the key projection")),
         "float64 (..., T, T): A^abs_ij = E_xi^T W_q^T W_k E_xj + E_xi^T W_q^T W_k U_j + "
         "U_i^T W_q^T W_k E_xj + U_i^T W_q^T W_k U_j (no 1/sqrt(d_k) scale)",
         ("E", "U", "W_q", "W_k"),
         _score_cases,
         reference.eq90_absolute_scores,
         "minitorch_nlp.models.transformer_xl:absolute_position_scores",
         "The score of query i and key j in a Transformer whose first layer reads E + U."),
)
