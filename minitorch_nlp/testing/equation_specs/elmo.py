"""Spec of ELMo's task-specific mix of the biLM's layers (eq 17).

The mix is the ``ScalarMix`` module; its spec takes the scalars and gamma as arguments, and the
library's side is the module run with them (``nn.functional_call``)."""
from __future__ import annotations

from hypothesis import strategies as st

from minitorch_nlp import nn
from minitorch_nlp.models.elmo import ScalarMix

from .. import strategies as S
from ..reference import elmo as reference
from ..spec import Spec


def scalar_mix(layers, scalars, gamma):
    """ELMo_k^task = gamma * sum_j s_j h_kj with s = softmax(scalars) (eq 17), for the biLM's
    layers stacked on axis 0, ``layers`` (L + 1, ..., dim): (..., dim).

    The library's ``ScalarMix`` computes it with these scalars and gamma."""
    mix = ScalarMix(layers.shape[0])
    return nn.functional_call(mix, {"scalars": scalars, "gamma": gamma}, layers)


@st.composite
def _mix_cases(draw):
    depth, batch, time, dim = (draw(st.integers(1, 3)) for _ in range(4))
    return {"layers": draw(S.arrays((depth, batch, time, dim))),
            "scalars": draw(S.arrays((depth,))), "gamma": draw(S.arrays((1,)))}


SPECS = (
    Spec(17, "scalar_mix",
         (("layers", "float64 (L + 1, batch, T, dim), the layer representations h_kj, j = 0..L"),
          ("scalars", "float64 (L + 1,), the unnormalised weights w (s = softmax(w))"),
          ("gamma", "float64 (1,), the task scale")),
         "float64 (batch, T, dim): gamma * sum_j softmax(w)_j h_kj",
         ("layers", "scalars", "gamma"),
         _mix_cases,
         lambda layers, scalars, gamma: reference.eq17_scalar_mix(layers, scalars, gamma[0]),
         "minitorch_nlp.testing.equation_specs.elmo:scalar_mix",
         "The library's side is ScalarMix (layer_norm=False) with these scalars and gamma."),
)
