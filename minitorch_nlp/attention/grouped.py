"""Sparse attention as dense products over groups: the engine under every sparse attention core.

A sparse pattern is cut into *groups*: a group is a few queries and the few keys they may see
(a block of queries and its neighbouring key blocks, the queries and keys of one residue class,
the queries of one LSH chunk and the keys of that chunk and the previous one). Each group is a
small dense attention, ``(queries per group) x (keys per group)``, so all of them together are
one batched matrix product and the memory is O(n * keys per group), never n x n.

``grouped_attention`` attends every group and returns, beside the output, each query's
log-sum-exp of its scores. Attentions of one query over *disjoint* key sets then combine exactly
(``merge_attentions``):

    softmax over S1 u S2 = (e^{lse1} out1 + e^{lse2} out2) / (e^{lse1} + e^{lse2})

which is how the Sparse Transformer's merged pattern (eq 94) is assembled from its two factors
and how the Reformer combines its hashing rounds (eq 100-103). ``ungroup`` puts the grouped
outputs back in sequence order.

Index arrays are NumPy ints with two leading axes broadcastable to (batch, heads) (size 1 when
the pattern is the same for every sequence and head), then the group axes.

``grouped_attention`` is one fused operation (``GroupedAttention``): the backend takes the groups
a block at a time, gathers the block's query and key rows into contiguous arrays and makes every
score, output and gradient of the block a batched BLAS product, with the masked softmax and the
score gradients between them (NumPy passes, or Numba kernels); the row gradients are added back
into the positions they came from. Its composite, made of the engine's differentiable
operations (a gather's backward being the backend's scatter-add of rows), gives the second
derivatives.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import functional as F
from ..autograd import Tensor, concatenate, stack
from ..autograd.ops_fused import FusedFunction
from ..backends.numpy_backend import pair_rows

if TYPE_CHECKING:
    from ..nn.module import Module

__all__ = ["GroupedAttention", "grouped_attention", "merge_attentions", "self_attention_inputs",
           "ungroup"]


def self_attention_inputs(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | np.ndarray | None,
                          op: str):
    """q, k, v and ``key_mask`` checked as ``F.scaled_dot_product_attention`` checks them (errors
    name ``op``), k/v heads shared among q's, and q and k of the same length (a sparse pattern is
    defined over one sequence). The key mask comes back as a backend bool array or None."""
    q, k, v, key_mask = F._attention_inputs(q, k, v, key_mask, op)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"{op}: the sparse pattern is self-attention; q has {q.shape[2]} "
                         f"positions, k {k.shape[2]}")
    return q, F.repeat_kv_heads(k, q.shape[1]), F.repeat_kv_heads(v, q.shape[1]), key_mask


def _flat_rows(x, index):
    """``x`` (batch, heads, time, d) gathered at positions ``index`` (b|1, h|1, ...) ->
    (batch, heads, ..., d): one integer index on the first axis of (batch*heads*time, d)."""
    batch, heads, time, width = x.shape
    rows = pair_rows(batch, heads, time, index)
    return x.reshape(batch * heads * time, width)[x.backend.asarray(rows)]


class GroupedAttention(FusedFunction):
    """Each group's queries against its keys as one kernel (``backend.grouped_attention``): the
    output with each query's log-sum-exp as an extra last column, (B, H, G, Q, d_v + 1), so that
    both are one differentiable result (the rounds and factors are merged by their
    log-sum-exps). ``composite`` is the same attention from the engine's primitives."""

    @staticmethod
    def forward(ctx, q, k, v, *, query_index, key_index, allowed, key_mask, bias, scale):
        ctx.save_inputs(0, 1, 2)
        ctx.static = {"query_index": query_index, "key_index": key_index, "allowed": allowed,
                      "key_mask": key_mask, "bias": bias, "scale": scale}
        out, ctx.kernel_state = ctx.backend.grouped_attention(
            q, k, v, query_index, key_index, allowed, key_mask, bias, scale)
        return out

    @staticmethod
    def fast_backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        st = ctx.static
        return ctx.backend.grouped_attention_backward(grad, q.data, k.data, v.data,
                                                      ctx.kernel_state, st["query_index"],
                                                      st["key_index"], st["scale"])

    @staticmethod
    def composite(q, k, v, *, query_index, key_index, allowed, key_mask, bias, scale):
        out, lse = _grouped_composite(q, k, v, query_index, key_index, allowed, scale=scale,
                                      key_mask=key_mask, bias=bias)
        return concatenate([out, lse[..., None]], axis=-1)


def _group_indices(query_index, key_index, q, k):
    """The two index arrays as NumPy ints of one number of groups, after checking that they fit
    (b|1, h|1, groups, slots) and hold positions of the sequence."""
    batch, heads, time = q.shape[0], q.shape[1], k.shape[2]
    indices = []
    for name, index in (("query_index", query_index), ("key_index", key_index)):
        index = np.asarray(index)
        if (index.ndim != 4 or index.shape[0] not in (1, batch)
                or index.shape[1] not in (1, heads)):
            raise ValueError(f"grouped_attention: {name} has shape {index.shape}; it must be "
                             f"(1 or {batch}, 1 or {heads}, groups, slots)")
        if index.size and (index.min() < 0 or index.max() >= time):
            raise ValueError(f"grouped_attention: {name} holds positions from {index.min()} to "
                             f"{index.max()}; the sequence has positions 0 to {time - 1}")
        indices.append(index)
    query_index, key_index = indices
    if query_index.shape[2] != key_index.shape[2] and 1 not in (query_index.shape[2],
                                                                 key_index.shape[2]):
        raise ValueError(f"grouped_attention: query_index has {query_index.shape[2]} groups, "
                         f"key_index {key_index.shape[2]}")
    groups = max(query_index.shape[2], key_index.shape[2])
    return tuple(np.broadcast_to(index, index.shape[:2] + (groups, index.shape[3]))
                 for index in indices)


def grouped_attention(q: Tensor, k: Tensor, v: Tensor, query_index: np.ndarray,
                      key_index: np.ndarray, allowed: np.ndarray, *, scale: float,
                      key_mask=None, bias: Tensor | np.ndarray | None = None,
                      dropout: Module | None = None) -> tuple[Tensor, Tensor]:
    """Softmax attention of each group of queries over its group of keys.

    ``q``, ``k``, ``v`` are (batch, heads, time, d) tensors; ``query_index`` (b|1, h|1, groups,
    queries) and ``key_index`` (b|1, h|1, groups, keys) are positions; ``allowed`` is a bool
    array broadcastable to (batch, heads, groups, queries, keys), True where the query may attend
    the key; ``key_mask`` (batch, time), False on padding, is gathered with the keys. ``bias``
    (a constant array or a Tensor, broadcastable to the scores, or None) is added to the scaled
    scores.
    ``dropout`` (a module or None) drops attention weights after the log-sum-exp is taken.

    Returns ``(out, lse)``: out (batch, heads, groups, queries, d) and lse (batch, heads, groups,
    queries), the log of the sum of exp(scores) over the allowed keys (-inf where a query has
    none; its output is zero).

    Without dropout (or in ``eval()``) and with a constant bias, this is one fused operation
    (``GroupedAttention``: blocks of groups as batched products, see the module docstring); a
    Tensor bias (ETC's relative labels) or active dropout runs the composite.
    """
    query_index, key_index = _group_indices(query_index, key_index, q, k)
    dropping = dropout is not None and dropout.training and dropout.p > 0
    if dropping or isinstance(bias, Tensor):
        return _grouped_composite(q, k, v, query_index, key_index, allowed, scale=scale,
                                  key_mask=key_mask, bias=bias, dropout=dropout)
    both = GroupedAttention.apply(q, k, v, query_index=query_index, key_index=key_index,
                                  allowed=allowed, key_mask=key_mask, bias=bias, scale=scale)
    return both[..., :-1], both[..., -1]


def _grouped_composite(q, k, v, query_index, key_index, allowed, *, scale, key_mask=None,
                       bias=None, dropout=None):
    """``grouped_attention`` from the engine's differentiable operations (gathers, products,
    masked log-sum-exp), the readable reference of the fused kernel."""
    xp = q.backend.xp
    allowed = xp.asarray(allowed)
    if key_mask is not None:
        keys = np.broadcast_to(key_index, (k.shape[0],) + key_index.shape[1:])
        real = xp.asarray(key_mask)[xp.arange(k.shape[0]).reshape((-1,) + (1,) * (keys.ndim - 1)),
                                    xp.asarray(keys)]
        allowed = allowed & real[..., None, :]
    qg, kg, vg = _flat_rows(q, query_index), _flat_rows(k, key_index), _flat_rows(v, key_index)
    scores = (qg @ kg.mT) * scale
    if isinstance(bias, Tensor):
        scores = scores + bias
    elif bias is not None:
        scores = scores + xp.asarray(bias, dtype=scores.dtype)
    allowed = xp.broadcast_to(allowed, scores.shape)
    seen = allowed.any(axis=-1)
    # a query with no key keeps finite scores (no log(0)) and gets its weights zeroed after
    scores = scores.masked_fill(~allowed & seen[..., None], -np.inf)
    lse = scores.logsumexp(axis=-1)
    probs = (scores - lse[..., None]).exp()
    if not seen.all():
        probs = probs.masked_fill(~seen[..., None], 0.0)
    if dropout is not None:
        probs = dropout(probs)
    return probs @ vg, lse.masked_fill(~seen, -np.inf)


def merge_attentions(parts: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """One attention over the union of disjoint key sets from its parts ``[(out, lse), ...]``:
    out = sum_r exp(lse_r - lse) out_r with lse = log sum_r exp(lse_r). A query no part lets see
    a key keeps output zero and lse -inf. One part is the whole attention already."""
    if len(parts) == 1:
        return tuple(parts[0])
    outs, lses = zip(*parts)
    stacked = stack(list(lses))
    seen = (stacked.data > -np.inf).any(axis=0)
    total = stacked.masked_fill(~seen[None], 0.0).logsumexp(axis=0)
    out = 0.0
    for part, lse in zip(outs, lses):
        out = out + part * (lse - total).exp()[..., None]
    return out, total.masked_fill(~seen, -np.inf)


def ungroup(out: Tensor, query_index: np.ndarray, time: int,
            valid: np.ndarray | None = None) -> Tensor:
    """Grouped outputs (batch, heads, groups, queries, d) back to (batch, heads, time, d): every
    position of ``range(time)`` must sit in exactly one query slot whose ``valid`` entry (a bool
    array broadcastable to ``query_index``'s group axes; all slots when None) is True. Invalid
    slots (padding groups to one size) are dropped."""
    batch, heads = out.shape[:2]
    flat = np.broadcast_to(query_index, (batch, heads) + query_index.shape[2:]).reshape(
        batch, heads, -1)
    if valid is not None:
        valid = np.broadcast_to(valid, query_index.shape[2:]).reshape(-1)
        flat = np.where(valid, flat, time + np.arange(valid.size))     # invalid slots sort last
    elif flat.shape[-1] != time:
        raise ValueError(f"ungroup: the groups hold {flat.shape[-1]} queries, the sequence {time}")
    inverse = np.argsort(flat, axis=-1, kind="stable")[..., :time]
    return _flat_rows(out.reshape(batch, heads, -1, out.shape[-1]), inverse)
