"""Specs of the Sparse Transformer's factorised attention (Child et al., 2019; the survey's
section IX-A, eq 92-95).

The patterns are causal and fixed by ``pattern`` ("strided" or "fixed"), the stride l and the
fixed pattern's c summary positions, all given to the candidate; queries, keys and values are per
head, (batch, heads, n, d_k). W_p of eq 92-95 is ``MultiHeadAttention``'s output projection
(``tests/test_sec9_sparse_transformer.py`` checks it); a candidate implements attend(X, S). The
library's side is ``SparseTransformerAttention``, the core those layers take."""
from __future__ import annotations

import autograd.numpy as anp
from hypothesis import strategies as st

from minitorch_nlp.attention.sparse_transformer import (SparseTransformerAttention,
                                                        alternating_sparse_cores)

from .. import strategies as S
from ..reference import sparse_transformer as reference
from ..spec import Spec


def sparse_attention(q, k, v, *, pattern, stride, summary, factor, key_mask):
    """attend(X, A^(factor))_i = softmax_{j in A_i}(q_i k_j^T / sqrt(d_k)) v_j (eq 92) for every
    (batch, head): ``k``, ``v`` (batch, heads, n, d_k), ``q`` (batch, heads, n_q, d_k) the
    queries of the last n_q <= n positions (query i at position n - n_q + i); the index sets
    A^(1), A^(2) of the ``pattern``:

    * "strided": A^(1)_i = {max(0, i - l), ..., i}, A^(2)_i = {j <= i : (i - j) mod l = 0};
    * "fixed":   A^(1)_i = {j <= i : floor(j / l) = floor(i / l)},
                 A^(2)_i = {j <= i : j mod l >= l - c};

    with l = ``stride`` and c = ``summary``; ``key_mask`` None or bool (batch, n), False on padded
    keys, which leave every set (a query left with none outputs zeros). Returns (batch, heads, n,
    d_k).

    The library's ``SparseTransformerAttention(stride, pattern, summary=c, combine=factor)``
    computes it."""
    core = SparseTransformerAttention(stride, pattern, summary=summary, combine=factor)
    return core(q, k, v, causal=True, key_mask=key_mask)[0]   # a core returns (output, weights)


def interleaved_sparse_attention(q, k, v, *, block, pattern, stride, summary, key_mask):
    """attend(X, A^(r mod 2 + 1)) for residual block r = ``block`` (eq 93, the blocks counted
    from 0, the factors from 1): the factors alternate from block to block. The other arguments
    and the result are ``sparse_attention``'s.

    The library's ``alternating_sparse_cores(...)[block]`` computes it."""
    core = alternating_sparse_cores(block + 1, stride, pattern, summary=summary)[block]
    return core(q, k, v, causal=True, key_mask=key_mask)[0]


def merged_sparse_attention(q, k, v, *, pattern, stride, summary, key_mask):
    """attend(X, A^(1) u A^(2)) (eq 94): one softmax over the union of the two factors. The
    arguments and the result are ``sparse_attention``'s.

    The library's ``SparseTransformerAttention(stride, pattern, summary=c)`` (``combine=
    "merged"``) computes it."""
    core = SparseTransformerAttention(stride, pattern, summary=summary, combine="merged")
    return core(q, k, v, causal=True, key_mask=key_mask)[0]


def multi_head_sparse_attention(q, k, v, *, pattern, stride, summary, key_mask):
    """Head h attends A^(h mod 2 + 1) (eq 95, heads counted from 0): even heads the first factor,
    odd heads the second; ``q`` has at least 2 heads. The arguments and the result are
    ``sparse_attention``'s.

    The library's ``SparseTransformerAttention(stride, pattern, summary=c, combine="heads")``
    computes it."""
    core = SparseTransformerAttention(stride, pattern, summary=summary, combine="heads")
    return core(q, k, v, causal=True, key_mask=key_mask)[0]


def _factors(pattern, time, stride, summary):
    if pattern == "strided":
        return reference.strided_sets(time, stride)
    return reference.fixed_sets(time, stride, summary)


def _per_head(one_head, q, k, v, key_mask):
    """``one_head(q, k, v, head, key_mask_row)`` for every (batch, head), stacked."""
    return anp.stack([
        anp.stack([one_head(q[b, h], k[b, h], v[b, h], h,
                            None if key_mask is None else key_mask[b])
                   for h in range(q.shape[1])])
        for b in range(q.shape[0])])


@st.composite
def _sparse_cases(draw, min_heads=1, with_factor=False, with_block=False):
    time, stride = draw(st.integers(1, 9)), draw(st.integers(1, 4))
    batch, heads, d_k = draw(st.integers(1, 2)), draw(st.integers(min_heads, 3)), \
        draw(st.integers(1, 3))
    case = {name: draw(S.arrays((batch, heads, time, d_k))) for name in "qkv"}
    case["q"] = case["q"] * draw(S.magnitudes((1.0, 1e-3, 1e2)))    # flat to saturated
    if draw(st.integers(0, 3)) == 0:      # decoding with a cache: the newest queries only
        case["q"] = case["q"][:, :, time - draw(st.integers(1, time)):]
    case.update(pattern=draw(st.sampled_from(["strided", "fixed"])), stride=stride,
                summary=draw(st.integers(1, stride)))
    if with_factor:
        case["factor"] = draw(st.sampled_from([1, 2]))
    if with_block:
        case["block"] = draw(st.integers(0, 3))
    case["key_mask"] = draw(st.none() | S.bool_masks((batch, time)))
    return case


def _factor_reference(q, k, v, pattern, stride, summary, factor, key_mask):
    sets = _factors(pattern, k.shape[2], stride, summary)[factor - 1]
    return _per_head(lambda *a: reference.eq92_attend(*a[:3], sets, a[4]), q, k, v, key_mask)


def _interleaved_reference(q, k, v, block, pattern, stride, summary, key_mask):
    factors = _factors(pattern, k.shape[2], stride, summary)
    return _per_head(lambda *a: reference.eq93_alternating(*a[:3], factors, block, a[4]),
                     q, k, v, key_mask)


def _merged_reference(q, k, v, pattern, stride, summary, key_mask):
    factors = _factors(pattern, k.shape[2], stride, summary)
    return _per_head(lambda *a: reference.eq94_merged(*a[:3], factors, a[4]), q, k, v, key_mask)


def _heads_reference(q, k, v, pattern, stride, summary, key_mask):
    factors = _factors(pattern, k.shape[2], stride, summary)
    return anp.stack([reference.eq95_heads(q[b], k[b], v[b], factors,
                                           None if key_mask is None else key_mask[b])
                      for b in range(q.shape[0])])


_QKV = (("q", "queries, float64 (batch, heads, n_q, d_k), n_q <= n: those of the last n_q "
              "positions (n_q < n: decoding with a key/value cache)"),
        ("k", "keys, float64 (batch, heads, n, d_k)"),
        ("v", "values, float64 (batch, heads, n, d_k)"))
_PATTERN = (("pattern", '"strided" or "fixed"'),
            ("stride", "int l >= 1"),
            ("summary", "int c, 1 <= c <= l (the fixed pattern's summary positions per block)"))
_KEY_MASK = (("key_mask", "None or bool (batch, n), False on padded keys"),)
_RETURNS = "float64 (batch, heads, n, d_k)"
_LIBRARY = "minitorch_nlp.testing.equation_specs.sparse_transformer:"
_PAPER = "Child et al. (2019), section 4; the survey writes the sets without j <= i for A^(2)."

SPECS = (
    Spec(92, "sparse_attention",
         _QKV + _PATTERN + (("factor", "1 or 2: which factor A^(factor) is S"),) + _KEY_MASK,
         _RETURNS + ": softmax_{j in A^(factor)_i}(q_i k_j^T / sqrt(d_k)) v_j",
         ("q", "k", "v"),
         lambda: _sparse_cases(with_factor=True),
         _factor_reference,
         _LIBRARY + "sparse_attention",
         _PAPER + " The library's side is SparseTransformerAttention(combine=factor)."),
    Spec(93, "interleaved_sparse_attention",
         _QKV + (("block", "int r >= 0, the residual block's index"),) + _PATTERN + _KEY_MASK,
         _RETURNS + ": attend(X, A^(r mod 2 + 1))",
         ("q", "k", "v"),
         lambda: _sparse_cases(with_block=True),
         _interleaved_reference,
         _LIBRARY + "interleaved_sparse_attention",
         _PAPER + " The library's side is alternating_sparse_cores(...)[block]."),
    Spec(94, "merged_sparse_attention",
         _QKV + _PATTERN + _KEY_MASK,
         _RETURNS + ": attend(X, A^(1) u A^(2))",
         ("q", "k", "v"),
         _sparse_cases,
         _merged_reference,
         _LIBRARY + "merged_sparse_attention",
         _PAPER + " The library's side is SparseTransformerAttention(combine='merged'), which "
         "attends A^(1) and A^(2) \\ A^(1) apart and merges them by their log-sum-exps."),
    Spec(95, "multi_head_sparse_attention",
         _QKV + _PATTERN + _KEY_MASK,
         _RETURNS + ": head h attends A^(h mod 2 + 1)",
         ("q", "k", "v"),
         lambda: _sparse_cases(min_heads=2),
         _heads_reference,
         _LIBRARY + "multi_head_sparse_attention",
         _PAPER + " The library's side is SparseTransformerAttention(combine='heads')."),
)
