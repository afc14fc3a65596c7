"""Specs of quantisation (the survey's section VI-C): Q8BERT's fake quantisation (eq 61)."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import strategies as S
from ..reference import quantization as reference
from ..spec import Spec


@st.composite
def _fake_quantize_cases(draw):
    shape = draw(S.shapes(min_dims=1, max_dims=2))
    return {"x": draw(S.arrays(shape)),
            "scale": draw(st.floats(0.25, 16.0, allow_nan=False, allow_infinity=False)),
            "bits": draw(st.integers(2, 8))}


SPECS = (
    Spec(61, "fake_quantize",
         (("x", "float64 array of any shape"),
          ("scale", "S > 0, a float"),
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
