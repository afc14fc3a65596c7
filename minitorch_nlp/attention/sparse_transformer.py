"""The Sparse Transformer's factorised attention (Child et al., 2019; the survey's section IX-A,
eq 92-95) as an attention core for ``nn.MultiHeadAttention(core=...)``.

Two factors A^(1), A^(2) split full causal attention so that each query sees O(sqrt(n)) keys
when the stride l ~ sqrt(n):

* strided: A^(1)_i = {max(0, i - l), ..., i} (the previous l positions),
           A^(2)_i = {j <= i : (i - j) mod l = 0} (every l-th position before);
* fixed:   A^(1)_i = {j <= i : floor(j / l) = floor(i / l)} (its own block),
           A^(2)_i = {j <= i : j mod l >= l - c} (the last c "summary" positions of each block).

Each factor is computed as groups of dense products (``grouped_attention``), never an n x n
matrix: the strided A^(1) as query blocks of l against the current and previous key blocks, A^(2)
as the l residue classes (a column of the sequence folded into an (n / l) x l grid), the fixed
A^(1) as l x l diagonal blocks and A^(2) as query blocks against the summary positions. The
merged pattern (eq 94) attends A^(1) and A^(2) \\ A^(1) separately and combines them by their
log-sum-exps, which is exactly one softmax over the union.
"""
from __future__ import annotations

import numpy as np

from .. import checks, cookbook
from ..autograd import Tensor, concatenate, pad
from ..nn.transformer import FullAttention
from . import masks
from .grouped import grouped_attention, merge_attentions, self_attention_inputs, ungroup

__all__ = ["PATTERNS", "SparseTransformerAttention", "alternating_sparse_cores"]

PATTERNS = ("strided", "fixed")
COMBINATIONS = ("merged", "heads", 1, 2)


def _groups(index):
    """Index arrays get the two leading (batch, heads) axes of size 1."""
    return index[None, None]


def _strided_local(blocks, stride):
    """A^(1) strided: query block b against key blocks b - 1 and b, i - l <= j <= i."""
    queries = np.arange(blocks * stride).reshape(blocks, stride)
    keys = (np.arange(blocks)[:, None] - 1) * stride + np.arange(2 * stride)[None, :]
    behind = queries[:, :, None] - keys[:, None, :]
    allowed = (behind >= 0) & (behind <= stride) & (keys[:, None, :] >= 0)
    return queries, np.maximum(keys, 0), allowed


def _strided_columns(blocks, stride, skip_local):
    """A^(2) strided: the residue class r = i mod l, (i - j) mod l = 0 and j <= i; without the
    key one stride back when ``skip_local`` (it is in A^(1))."""
    columns = np.arange(blocks * stride).reshape(blocks, stride).T      # (stride, blocks)
    rows_back = np.arange(blocks)[:, None] - np.arange(blocks)[None, :]  # m_q - m_k
    allowed = rows_back >= (2 if skip_local else 0)
    return columns, columns, allowed[None]


def _fixed_local(blocks, stride):
    """A^(1) fixed: its own block, j <= i."""
    queries = np.arange(blocks * stride).reshape(blocks, stride)
    return queries, queries, np.tril(np.ones((stride, stride), dtype=bool))[None]


def _fixed_summary(blocks, stride, summary, skip_local):
    """A^(2) fixed: every block's last ``summary`` positions with j <= i; only earlier blocks'
    when ``skip_local`` (its own block is in A^(1))."""
    queries = np.arange(blocks * stride).reshape(blocks, stride)
    keys = np.flatnonzero(np.arange(blocks * stride) % stride >= stride - summary)
    if skip_local:
        allowed = (keys[None, None, :] // stride) < (queries[:, :, None] // stride)
    else:
        allowed = keys[None, None, :] <= queries[:, :, None]
    return queries, np.broadcast_to(keys, (blocks, keys.size)), allowed


@cookbook.equation(92)
class SparseTransformerAttention(FullAttention):
    """attend(X, S) of the Sparse Transformer (Child et al., 2019; the survey's eq 92): causal
    attention of each query i over its index set S_i only,

        attend(X, S)_i = softmax_{j in S_i}(q_i k_j^T / sqrt(d_k)) v_j

    (``MultiHeadAttention``'s output projection is W_p). ``pattern`` is "strided" or "fixed"
    (see the module docstring), ``stride`` is l (about sqrt(n)), ``summary`` is the fixed
    pattern's c. ``combine`` picks how the two factors make S:

    * ``"merged"``: S = A^(1) u A^(2) in every head (eq 94);
    * ``"heads"``: even heads attend A^(1), odd heads A^(2) (eq 95, needs at least two heads);
    * ``1`` or ``2``: only A^(1) or A^(2); ``alternating_sparse_cores`` gives residual block r
      the factor A^(r mod 2 + 1) (eq 93).

    The patterns are causal by definition, so the core needs ``causal=True``. Self-attention
    without a general mask, bias or weights runs in groups of dense products (memory
    O(n sqrt(n)) for l ~ sqrt(n)); a sequence that is not a multiple of l is padded inside and
    the padding dropped. Anything else (``mask``, ``bias``, ``need_weights``, a key/value cache)
    takes the full core with the pattern as an n x n mask.
    """

    def __init__(self, stride: int, pattern: str = "strided", *, summary: int = 1,
                 combine: str | int = "merged", dropout: float = 0.0) -> None:
        super().__init__(dropout)
        name = "SparseTransformerAttention"
        self.stride = checks.positive_int(stride, "stride", name)
        if pattern not in PATTERNS:
            raise ValueError(f"{name}: pattern must be one of {PATTERNS}, got {pattern!r}")
        self.summary = checks.positive_int(summary, "summary", name)
        if pattern == "fixed" and self.summary > self.stride:
            raise ValueError(f"{name}: summary c={summary} must be at most stride={stride} (c "
                             "summary positions per block)")
        if combine not in COMBINATIONS:
            raise ValueError(f"{name}: combine must be one of {COMBINATIONS}, got {combine!r}")
        self.pattern, self.combine = pattern, combine

    def pattern_mask(self, time: int, heads: int = 1) -> np.ndarray:
        """The index sets as a bool mask: (time, time), or (heads, time, time) when
        ``combine="heads"`` (head h gets A^(h mod 2 + 1))."""
        if self.pattern == "strided":
            factors = masks.strided_mask(time, self.stride, factorized=True)
        else:
            factors = masks.fixed_mask(time, self.stride, self.summary, factorized=True)
        if self.combine == "merged":
            return factors[0] | factors[1]
        if self.combine == "heads":
            return factors[np.arange(heads) % 2]
        return factors[self.combine - 1]

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        name = "SparseTransformerAttention"
        if not causal:
            raise ValueError(f"{name}: the strided and fixed patterns are causal (Child et al., "
                             "2019); call with causal=True (a decoder layer, or "
                             "TransformerLayer(..., causal=True))")
        if self.combine == "heads" and q.shape[1] < 2:
            raise ValueError(f"{name}: combine='heads' gives the two factors to alternate heads "
                             f"and needs at least 2 heads, got {q.shape[1]}")
        if mask is not None or bias is not None or need_weights or q.shape[2] != k.shape[2]:
            pattern = self.pattern_mask(k.shape[2], q.shape[1])[..., -q.shape[2]:, :]
            pattern = q.backend.asarray(pattern)
            if mask is not None:
                pattern = pattern & (mask.data if isinstance(mask, Tensor) else
                                     q.backend.asarray(mask))
            return super().forward(q, k, v, mask=pattern, bias=bias, causal=True,
                                   key_mask=key_mask, need_weights=need_weights)
        return self.sparse(q, k, v, key_mask), None

    def sparse(self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | np.ndarray | None
               ) -> Tensor:
        """The grouped computation of ``forward`` (self-attention, no extra mask)."""
        q, k, v, key_mask = self_attention_inputs(q, k, v, key_mask, "SparseTransformerAttention")
        time = q.shape[2]
        blocks = -(-time // self.stride)
        extra = blocks * self.stride - time
        if extra:
            q, k, v = (pad(x, [(0, 0), (0, 0), (0, extra), (0, 0)]) for x in (q, k, v))
            if key_mask is not None:
                key_mask = q.backend.xp.pad(key_mask, [(0, 0), (0, extra)])
        scale = 1.0 / float(np.sqrt(q.shape[-1]))
        if self.combine == "merged":
            out = self.attend_merged(q, k, v, blocks, key_mask, scale)
        elif self.combine == "heads":
            out = self.attend_per_head(q, k, v, blocks, key_mask, scale)
        else:
            out = self.attend_factor(q, k, v, self.combine, blocks, key_mask, scale)
        return out[:, :, :time] if extra else out

    def _factor_groups(self, factor, blocks, skip_local=False):
        if self.pattern == "strided":
            return (_strided_local(blocks, self.stride) if factor == 1
                    else _strided_columns(blocks, self.stride, skip_local))
        return (_fixed_local(blocks, self.stride) if factor == 1
                else _fixed_summary(blocks, self.stride, self.summary, skip_local))

    def _attend(self, q, k, v, groups, key_mask, scale):
        queries, keys, allowed = groups
        return grouped_attention(q, k, v, _groups(queries), _groups(keys), allowed, scale=scale,
                                 key_mask=key_mask, dropout=self.dropout), queries

    def attend_factor(self, q: Tensor, k: Tensor, v: Tensor, factor: int, blocks: int, key_mask,
                      scale: float) -> Tensor:
        """attend(X, A^(factor)) (one term of eq 93)."""
        (out, _), queries = self._attend(q, k, v, self._factor_groups(factor, blocks), key_mask,
                                         scale)
        return ungroup(out, _groups(queries), q.shape[2])

    @cookbook.equation(94)
    def attend_merged(self, q: Tensor, k: Tensor, v: Tensor, blocks: int, key_mask,
                      scale: float) -> Tensor:
        """attend(X, A^(1) u A^(2)) (eq 94): A^(1) and A^(2) \\ A^(1) attended apart, their
        outputs weighted by their log-sum-exps."""
        (local, local_lse), queries = self._attend(q, k, v, self._factor_groups(1, blocks),
                                                   key_mask, scale)
        (far, far_lse), far_queries = self._attend(q, k, v,
                                                   self._factor_groups(2, blocks, True),
                                                   key_mask, scale)
        time = q.shape[2]
        local = ungroup(local, _groups(queries), time)
        local_lse = ungroup(local_lse[..., None], _groups(queries), time)[..., 0]
        far = ungroup(far, _groups(far_queries), time)
        far_lse = ungroup(far_lse[..., None], _groups(far_queries), time)[..., 0]
        return merge_attentions([(local, local_lse), (far, far_lse)])[0]

    @cookbook.equation(95)
    def attend_per_head(self, q: Tensor, k: Tensor, v: Tensor, blocks: int, key_mask,
                        scale: float) -> Tensor:
        """attend(X, A^(h mod 2 + 1)) for head h, the heads concatenated (eq 95)."""
        heads = q.shape[1]
        even = self.attend_factor(q[:, 0::2], k[:, 0::2], v[:, 0::2], 1, blocks, key_mask, scale)
        odd = self.attend_factor(q[:, 1::2], k[:, 1::2], v[:, 1::2], 2, blocks, key_mask, scale)
        order = np.concatenate([np.arange(0, heads, 2), np.arange(1, heads, 2)])
        return concatenate([even, odd], axis=1)[:, np.argsort(order)]

    def extra_repr(self):
        return (f"stride={self.stride}, pattern={self.pattern!r}, summary={self.summary}, "
                f"combine={self.combine!r}")


@cookbook.equation(93)
def alternating_sparse_cores(num_layers: int, stride: int, pattern: str = "strided", *,
                             summary: int = 1,
                             dropout: float = 0.0) -> list[SparseTransformerAttention]:
    """One core per residual block r = 0, 1, ..., attending A^(r mod 2 + 1) (the survey's eq 93,
    Child et al.'s interleaved factorised attention): pass them to the layers in order."""
    checks.positive_int(num_layers, "num_layers", "alternating_sparse_cores")
    return [SparseTransformerAttention(stride, pattern, summary=summary, combine=r % 2 + 1,
                                       dropout=dropout) for r in range(num_layers)]
