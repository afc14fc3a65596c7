"""Specs of pruning with hard-concrete gates (the survey's section VI-B): the relaxed L0 norm of
Voita et al. (eq 52)."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import strategies as S
from ..reference import pruning as reference
from ..spec import Spec


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
)
