"""LQ-Nets (Zhang et al., 2018, "LQ-Nets: Learned Quantization for Highly Accurate and Compact
Deep Neural Networks"; the survey's section VI-C.1, eq 56-58).

* ``quantize_to_levels`` is eq 56, Q(x) = q_l for x in (t_l, t_{l+1}], the thresholds halfway
  between neighbouring levels (so each x goes to its nearest level);
* ``lq_levels`` lists the 2^K levels v^T e_l of a basis v in R^K, one per binary encoding
  e_l in {-1, 1}^K, and ``lq_quantize`` is eq 57, Q_LQ(x, v) = v^T e_l, with the
  straight-through gradient; ``lq_encode`` gives the encodings themselves (K sign planes);
* ``fit_basis`` trains v by the paper's quantisation error minimisation (QEM, Algorithm 1):
  alternately the encodings of each x for the current v, then v by least squares,
  v = (B^T B)^-1 B^T x, which never increases the quantisation error;
* ``lq_matmul`` is eq 58: Q(w)^T Q(a) = sum_i sum_j v^w_i v^a_j (b^w_i (.) b^a_j), each bit-plane
  product a {-1, 1} inner product computed by the backend's xnor-popcount kernel
  (b . b' = N - 2 popcount(b xor b')), a K_w x K_a grid of 1-bit GEMMs.

The survey writes both encodings in {-1, 1}, as here; the paper encodes the (non-negative, after
ReLU) activations in {0, 1} instead.
"""
from __future__ import annotations

import itertools

import numpy as np

from .. import cookbook
from ..autograd import Tensor, tensor
from ..backends import get_backend
from .quantization import check_bits

__all__ = ["fit_basis", "initial_basis", "lq_encode", "lq_levels", "lq_matmul", "lq_quantize",
           "quantization_error", "quantize_to_levels"]


def _basis(basis, op):
    v = np.asarray(basis.numpy() if isinstance(basis, Tensor) else basis, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"{op}: the basis v must be a 1-D array of K coefficients, got shape "
                         f"{v.shape}")
    check_bits(len(v), op, low=1)
    return v


def lq_levels(basis):
    """The 2^K levels v^T e_l of basis ``v`` (K,) and their encodings e_l in {-1, 1}^K, sorted by
    level: (levels (2^K,), encodings (2^K, K))."""
    v = _basis(basis, "lq_levels")
    encodings = np.array(list(itertools.product((-1.0, 1.0), repeat=len(v))))
    levels = encodings @ v
    order = np.argsort(levels, kind="stable")
    return levels[order], encodings[order]


@cookbook.equation(56)
def quantize_to_levels(x, levels):
    """Q(x) = q_l if x in (t_l, t_{l+1}] (eq 56), for sorted ``levels`` q_1 <= ... <= q_L and
    thresholds t_l = (q_{l-1} + q_l) / 2 (t_1 = -inf, t_{L+1} = +inf): every x goes to its
    nearest level (a tie to the lower one). Returns (values, level indices) as arrays."""
    q = np.asarray(levels, dtype=np.float64)
    if q.ndim != 1 or not len(q) or np.any(np.diff(q) < 0):
        raise ValueError(f"quantize_to_levels: levels must be a non-empty sorted 1-D array, got "
                         f"{q}")
    values = np.asarray(x.numpy() if isinstance(x, Tensor) else x, dtype=np.float64)
    thresholds = (q[:-1] + q[1:]) / 2
    index = np.searchsorted(thresholds, values, side="left")
    return q[index], index


def lq_encode(x, basis):
    """The encodings of each entry of ``x`` under basis ``v``: sign planes (K, *x.shape) in
    {-1, 1} with v^T e = Q_LQ(x, v), and the quantised values."""
    levels, encodings = lq_levels(basis)
    values, index = quantize_to_levels(x, levels)
    return np.moveaxis(encodings[index], -1, 0), values


@cookbook.equation(57)
def lq_quantize(x, basis):
    """Q_LQ(x, v) = v^T e_l if x in (t_l, t_{l+1}] (eq 57): ``x`` (a Tensor) to the nearest of
    the 2^K levels of basis v, with the straight-through gradient dQ/dx = 1 (the paper trains
    the network this way and the basis by ``fit_basis``)."""
    levels, _ = lq_levels(basis)
    values, _ = quantize_to_levels(x, levels)
    return x + (tensor(values, dtype=x.dtype, backend=x.backend) - x).detach()


def quantization_error(x, basis):
    """sum (x - Q_LQ(x, v))^2, the error ``fit_basis`` minimises."""
    _, values = lq_encode(x, basis)
    return float(np.sum((np.asarray(x, dtype=np.float64) - values) ** 2))


def initial_basis(x, bits):
    """A basis whose levels are uniform over [-max|x|, max|x|]: v_i = 2^(i-1) max|x| / (2^K - 1)
    (the levels are the odd multiples of v_1), the start of QEM."""
    bits = check_bits(bits, "initial_basis", low=1)
    peak = float(np.max(np.abs(x))) or 1.0
    return peak / (2 ** bits - 1) * 2.0 ** np.arange(bits)


def fit_basis(x, bits=None, basis=None, iterations=10):
    """LQ-Nets' QEM (Algorithm 1): from ``basis`` (default ``initial_basis(x, bits)``), repeat
    ``iterations`` times: encode x with the current v (B (N, K) in {-1, 1}), then solve the
    least-squares problem min_v ||B v - x||^2, v = (B^T B)^-1 B^T x. Each step lowers (or keeps)
    the quantisation error. Returns v (K,)."""
    values = np.asarray(x.numpy() if isinstance(x, Tensor) else x, dtype=np.float64).ravel()
    if basis is None:
        if bits is None:
            raise ValueError("fit_basis: give bits (to start from initial_basis) or a basis")
        basis = initial_basis(values, bits)
    v = _basis(basis, "fit_basis")
    for _ in range(iterations):
        planes, _ = lq_encode(values, v)
        encodings = planes.T                                   # (N, K)
        v, *_ = np.linalg.lstsq(encodings, values, rcond=None)
    return v


@cookbook.equation(58)
def lq_matmul(a, a_basis, w, w_basis, backend=None):
    r"""Q_LQ(a, v^a) Q_LQ(w, v^w)^T for activations ``a`` (M, N) and weights ``w`` (P, N), by
    eq 58::

        Q(w)^T Q(a) = sum_{i=1}^{K_w} sum_{j=1}^{K_a} v^w_i v^a_j (b^w_i (.) b^a_j)

    each b^w_i (.) b^a_j a {-1, 1} inner product from packed sign bits by the backend's
    ``binary_matmul`` (xnor and popcount; the ``backend`` name, default the current one).
    Equal to the float product of the quantised values. Returns float64 (M, P)."""
    a, w = (np.asarray(t.numpy() if isinstance(t, Tensor) else t, dtype=np.float64)
            for t in (a, w))
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[1]:
        raise ValueError(f"lq_matmul: activations (M, N) and weights (P, N) must share N, got "
                         f"{a.shape} and {w.shape}")
    kernels = get_backend(backend)
    v_a, v_w = _basis(a_basis, "lq_matmul"), _basis(w_basis, "lq_matmul")
    a_planes, _ = lq_encode(a, v_a)
    w_planes, _ = lq_encode(w, v_w)
    a_bits = [kernels.pack_signs(kernels.asarray(plane)) for plane in a_planes]
    w_bits = [kernels.pack_signs(kernels.asarray(plane)) for plane in w_planes]
    out = np.zeros((a.shape[0], w.shape[0]))
    for i, w_plane in enumerate(w_bits):
        for j, a_plane in enumerate(a_bits):
            products = kernels.to_numpy(kernels.binary_matmul(a_plane, w_plane, a.shape[1]))
            out += v_w[i] * v_a[j] * products
    return out
