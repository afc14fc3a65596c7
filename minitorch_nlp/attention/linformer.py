"""Linformer's low-rank attention (Wang et al., 2020; the survey's section IX-E, eq 111) as an
attention core for ``nn.MultiHeadAttention(core=...)``.

Keys and values are projected along the sequence, from n positions to k, before attention:

    head_i = softmax(Q W_i^Q (E_i K W_i^K)^T / sqrt(d_k)) (F_i V W_i^V)        E_i, F_i: (k, n)

so the score matrix is n x k and time and memory grow linearly in n. The paper shares the
projections at three levels, which ``sharing`` picks: ``"headwise"`` (E_i = E, F_i = F in a
layer), ``"key_value"`` (E_i = F_i = E in a layer) and ``"layerwise"`` (one E for every layer,
head, key and value; ``linformer_cores`` makes the layers' cores around one shared parameter);
``"none"`` gives every head its own E_i and F_i.
"""
from __future__ import annotations

import math

import numpy as np

from .. import checks, cookbook
from ..autograd import Tensor, empty
from ..nn import init
from ..nn.parameter import Parameter
from ..nn.transformer import FullAttention
from .grouped import self_attention_inputs

__all__ = ["LinformerAttention", "SHARING", "linformer_cores"]

SHARING = ("none", "headwise", "key_value", "layerwise")


def linformer_projection(seq_len: int, rank: int, heads: int | None = None) -> Parameter:
    """A (heads, rank, seq_len) or (rank, seq_len) projection drawn N(0, 1/rank), the
    Johnson-Lindenstrauss scaling of Wang et al. (2020, theorem 1)."""
    shape = (rank, seq_len) if heads is None else (heads, rank, seq_len)
    return Parameter(init.normal_(empty(*shape), std=1.0 / math.sqrt(rank)))


@cookbook.equation(111)
class LinformerAttention(FullAttention):
    """head_i = softmax(Q_i (E_i K_i)^T / sqrt(d_k)) (F_i V_i) (eq 111), the keys and values of
    each head projected from ``seq_len`` positions to ``rank`` (the paper's k).

    ``sharing`` is one of ``SHARING`` (see the module docstring); "none" needs ``num_heads``.
    "layerwise" takes the one ``projection`` (a (rank, seq_len) ``Parameter``) that every layer
    shares. A sequence shorter than ``seq_len`` uses the first columns of the projections; the
    projection mixes all positions, so Linformer is bidirectional only (``causal=True`` is an
    error), and a ``mask`` or ``bias`` over the n keys has nothing to apply to. Padded keys
    (``key_mask``) are zeroed before the projection. ``need_weights`` gives the (q_time, rank)
    weights over the projected keys.
    """

    def __init__(self, seq_len: int, rank: int, *, sharing: str = "headwise",
                 num_heads: int | None = None, projection: Parameter | None = None,
                 dropout: float = 0.0) -> None:
        super().__init__(dropout)
        name = "LinformerAttention"
        self.seq_len = checks.positive_int(seq_len, "seq_len", name)
        self.rank = checks.positive_int(rank, "rank", name)
        if sharing not in SHARING:
            raise ValueError(f"{name}: sharing must be one of {SHARING}, got {sharing!r}")
        self.sharing = sharing
        if (sharing == "layerwise") != (projection is not None):
            raise ValueError(f"{name}: sharing='layerwise' takes the shared projection "
                             "(a (rank, seq_len) Parameter, see linformer_cores), and only it does")
        if sharing == "layerwise":
            if tuple(projection.shape) != (self.rank, self.seq_len):
                raise ValueError(f"{name}: the shared projection must have shape (rank, seq_len) "
                                 f"= {(self.rank, self.seq_len)}, got {projection.shape}")
            self.E = projection
        elif sharing == "none":
            heads = checks.positive_int(num_heads, "num_heads", name)
            self.E = linformer_projection(seq_len, rank, heads)
            self.F = linformer_projection(seq_len, rank, heads)
        else:
            self.E = linformer_projection(seq_len, rank)
            if sharing == "headwise":
                self.F = linformer_projection(seq_len, rank)

    def projections(self) -> tuple[Parameter, Parameter]:
        """(E, F): F is E itself under key-value and layerwise sharing."""
        return self.E, (self.F if self.sharing in ("none", "headwise") else self.E)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        name = "LinformerAttention"
        if causal:
            raise ValueError(f"{name}: the projection along the sequence mixes every position, "
                             "so Linformer attention cannot be causal; use it in an encoder "
                             "(causal=False)")
        if mask is not None or bias is not None:
            raise ValueError(f"{name}: a mask or bias over the keys does not apply after the "
                             "keys are projected to rank positions; pass key_mask for padding")
        q, k, v, key_mask = self_attention_inputs(q, k, v, key_mask, name)
        time = k.shape[2]
        if time > self.seq_len:
            raise ValueError(f"{name}: the sequence has {time} positions, more than seq_len="
                             f"{self.seq_len} the projections were made for; build the core "
                             "with a larger seq_len")
        if self.sharing == "none" and q.shape[1] != self.E.shape[0]:
            raise ValueError(f"{name}: the core has projections for {self.E.shape[0]} heads, "
                             f"the attention {q.shape[1]}")
        if key_mask is not None:
            real = key_mask[:, None, :, None]
            k, v = k.masked_fill(~real, 0.0), v.masked_fill(~real, 0.0)
        e, f = (p[..., :time].astype(q.dtype) for p in self.projections())
        return super().forward(q, e @ k, f @ v, need_weights=need_weights)

    def extra_repr(self):
        return f"seq_len={self.seq_len}, rank={self.rank}, sharing={self.sharing!r}"


def linformer_cores(num_layers: int, seq_len: int, rank: int, *, sharing: str = "headwise",
                    num_heads: int | None = None,
                    dropout: float = 0.0) -> list[LinformerAttention]:
    """One ``LinformerAttention`` per layer; with ``sharing="layerwise"`` all of them hold the
    same (rank, seq_len) projection, so the stack has one projection matrix in all (the paper's
    level (iii))."""
    checks.positive_int(num_layers, "num_layers", "linformer_cores")
    shared = linformer_projection(seq_len, rank) if sharing == "layerwise" else None
    return [LinformerAttention(seq_len, rank, sharing=sharing, num_heads=num_heads,
                               projection=shared, dropout=dropout) for _ in range(num_layers)]
