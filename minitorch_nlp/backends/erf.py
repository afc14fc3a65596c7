"""The error function in the precision of its input, as polynomials that vectorise.

``math.erf`` is a scalar C call: a loop of it neither vectorises in Numba nor runs as a NumPy
expression. Here erf is split into two ranges in the manner of the numerical libraries (fdlibm,
Cephes), with |x| below ``split`` (0.84375 in float64, 1 in float32) taking one form and the rest
another:

* |x| < split: erf(x) = x P(x^2). The odd form keeps the relative accuracy down to the
  subnormals (erf(x) = 2x / sqrt(pi) when x^2 underflows).
* split <= |x|: erf(x) = 1 - exp(-x^2) Q(x - c), where Q approximates the scaled complement
  erfcx(x) = erfc(x) exp(x^2) on [split, end]. An error in Q is damped by exp(-x^2), so the
  result stays within a few ulp of 1 even though Q itself is less accurate than that. Beyond
  ``end`` (6 in float64, 3.92 in float32) erf rounds to 1; |x| is clamped there, which also sends
  infinities to +-1 while NaN stays NaN.

Both forms are computed for every element and one is selected, so the loops have no branches.

The coefficients interpolate erf(x) / x and erfcx at Chebyshev nodes of each range, computed with
60-digit decimal arithmetic (erf by its Taylor series) and then rounded to the target precision
(float32 coefficients are float32 numbers). The degrees (5 and 9 in float32, 10 and 28 in
float64) keep erf within 3 ulp of ``math.erf`` over the whole float range in both precisions
(a float32 P of degree 4 gives over 5 ulp); ``tests/test_backend_numba.py`` checks it, and
``tests/backend_checks.py`` checks every GPU backend's erf the same way.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np



class ErfCoefficients(NamedTuple):
    small: tuple      # erf(x) = x * P(x^2) below split, P's coefficients from the constant term up
    tail: tuple       # erfc(x) * exp(x^2) = Q(x - centre), Q's coefficients from the constant up
    split: float
    centre: float
    end: float        # erf rounds to 1 beyond this


FLOAT64 = ErfCoefficients(
    small=tuple(np.float64(c) for c in (
        1.1283791670955126, -0.376126389031834, 0.11283791670935311, -0.02686617064077985,
        0.005223977576377844, -0.000854832379116413, 0.00012055199941321885,
        -1.4922121574443055e-05, 1.640162967934702e-06, -1.571446067260244e-07,
        1.0726571432176348e-08)),
    tail=tuple(np.float64(c) for c in (
        0.1579186869907276, -0.04268819403426003, 0.011178019997957693, -0.0028425001941913127,
        0.0007034627902240739, -0.00016973874109107878, 3.999528919135953e-05,
        -9.215695650607562e-06, 2.0790839606849917e-06, -4.5974309652373595e-07,
        9.974325994774447e-08, -2.125025587815186e-08, 4.449387199663751e-09,
        -9.161317221616407e-10, 1.8565755617313264e-10, -3.71047095259966e-11,
        7.299523928590798e-12, -1.3972510502317335e-12, 2.6634149383878687e-13,
        -5.4595182661250927e-14, 1.0323789466583377e-14, -1.1502172398602396e-15,
        1.8895009735874945e-16, -1.2322729037589632e-16, 2.3580035710143356e-17,
        2.863938808282197e-18, -5.823651204887799e-19, -2.2499375574739955e-19,
        4.016390134921728e-20)),
    split=np.float64(0.84375),
    centre=np.float64(3.4375),
    end=np.float64(6.0),
)

FLOAT32 = ErfCoefficients(
    small=tuple(np.float32(c) for c in (
        1.1283791065216064, -0.37612342834472656, 0.11280316859483719, -0.026715055108070374,
        0.004921761807054281, -0.0005648059886880219)),
    tail=tuple(np.float32(c) for c in (
        0.21315446496009827, -0.07592981308698654, 0.02569940872490406, -0.008315939456224442,
        0.0025974134914577007, -0.0007784247864037752, 0.0002083582221530378,
        -5.838314245920628e-05, 2.516803942853585e-05, -6.714046321576461e-06)),
    split=np.float32(1.0),
    centre=np.float32(2.46875),
    end=np.float32(3.92),
)


def _horner(coefficients, u):
    result = u * coefficients[-1]
    result += coefficients[-2]
    for c in coefficients[-3::-1]:
        result *= u
        result += c
    return result


# Elements per block: a block's dozens of passes stay in the L2 cache, and each pass is long
# enough that NumPy's cost per call (under the GIL) does not dominate. (1280, 1536) float32 on a
# 1 MB L2, one thread: erf 25.7 / 19.8 / 16.1 / 14.4 / 13.7 / 13.9 ms at 2^12 ... 2^17; the NumPy
# backend's bias + erf-GELU at two threads 37.3 / 24.9 / 18.2 / 17.1 / 14.4 / 13.7 ms.
BLOCK = 1 << 16


def _erf_block(x, c, out):
    ax = np.abs(x)
    near = np.minimum(ax, c.split)  # each form's range is clamped: no overflow
    small = near * _horner(c.small, near * near)
    u = np.clip(ax, c.split, c.end)
    exp_term = np.negative(u * u)
    np.exp(exp_term, out=exp_term)
    u -= c.centre
    tail = _horner(c.tail, u)
    tail *= exp_term
    np.subtract(1, tail, out=tail)
    np.copysign(np.where(ax < c.split, small, tail), x, out=out)


def erf(x):
    """erf of a NumPy array (or scalar) as whole-array passes over blocks of ``BLOCK`` elements,
    float32 kept float32; other dtypes are computed in float64."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        x = x.astype(np.float64, copy=False)
    c = FLOAT32 if x.dtype == np.float32 else FLOAT64
    flat = x.reshape(-1)  # also makes 0-d arithmetic give arrays (scalars take no out=)
    out = np.empty_like(flat)
    for start in range(0, flat.size, BLOCK):
        _erf_block(flat[start:start + BLOCK], c, out[start:start + BLOCK])
    return out.reshape(x.shape)
