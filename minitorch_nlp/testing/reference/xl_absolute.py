"""Reference maths for Transformer-XL's absolute-position attention score (Dai et al., 2019,
section 3.3), the survey's eq 90, in ``autograd.numpy``: the reference of eq 90's ``check``
spec and of ``tests/test_sec8_xl_absolute.py``.

Written from the equation, one (query, key) pair at a time: the four terms are four
bilinear forms x^T W_q^T W_k y summed over the features with explicit loops."""
from __future__ import annotations

import autograd.numpy as anp


def bilinear(x, W_q, W_k, y):
    """x^T W_q^T W_k y = sum_c (W_q x)_c (W_k y)_c."""
    return sum(anp.sum(W_q[c] * x) * anp.sum(W_k[c] * y) for c in range(W_q.shape[0]))


def eq90_absolute_terms(E, U, W_q, W_k):
    """The four terms of eq 90, (a) E_xi^T W_q^T W_k E_xj, (b) E_xi^T W_q^T W_k U_j, (c)
    U_i^T W_q^T W_k E_xj, (d) U_i^T W_q^T W_k U_j, for every sequence of ``E`` (..., T, d)
    (any number of leading axes, none included), positions ``U`` (T, d), ``W_q``, ``W_k``
    (d_k, d): four arrays (..., T, T)."""
    time = E.shape[-2]
    sequences = anp.reshape(E, (-1,) + E.shape[-2:])
    pairs = ((lambda e, i: e[i], lambda e, j: e[j]), (lambda e, i: e[i], lambda e, j: U[j]),
             (lambda e, i: U[i], lambda e, j: e[j]), (lambda e, i: U[i], lambda e, j: U[j]))
    return tuple(anp.reshape(anp.stack([anp.stack([anp.stack([
        bilinear(query(e, i), W_q, W_k, key(e, j)) for j in range(time)])
        for i in range(time)]) for e in sequences]), E.shape[:-2] + (time, time))
        for query, key in pairs)


def eq90_absolute_scores(E, U, W_q, W_k):
    """A^abs_ij = E_xi^T W_q^T W_k E_xj + E_xi^T W_q^T W_k U_j + U_i^T W_q^T W_k E_xj
    + U_i^T W_q^T W_k U_j (eq 90) for every sequence of ``E`` (..., T, d), positions ``U``
    (T, d), ``W_q``, ``W_k`` (d_k, d): (..., T, T)."""
    a, b, c, d = eq90_absolute_terms(E, U, W_q, W_k)
    return a + b + c + d
