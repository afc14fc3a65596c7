"""Reference maths of quantisation (the survey's section VI-C): Q8BERT's symmetric linear
quantisation (eq 61) and its fake-quantised training form, element by element."""
from __future__ import annotations

import numpy as np
from autograd.tracer import getval


def eq61_symmetric_quantize(x, scale, bits):
    """Quantize(x | S, M) = Clamp(round(x S), -M, M), M = 2^(b-1) - 1 (Zafrir et al. 2019,
    eq. 1; the survey's eq 61 writes a floor where the paper rounds to nearest), one entry at a
    time, ties to even. Plain NumPy: rounding has no gradient."""
    highest = 2 ** (bits - 1) - 1
    values = np.asarray(x, dtype=np.float64) * scale
    out = np.empty(values.shape)
    for index, value in np.ndenumerate(values):
        nearest = float(np.round(value))
        out[index] = min(max(nearest, -highest), highest)
    return out


def eq61_fake_quantize(x, scale, bits):
    """x^q = Quantize(x) / S in the forward pass, with the straight-through estimator
    dx^q/dx = 1 (Q8BERT section 3): x plus the constant x^q - x."""
    constant = eq61_symmetric_quantize(getval(x), scale, bits) / scale - getval(x)
    return x + constant
