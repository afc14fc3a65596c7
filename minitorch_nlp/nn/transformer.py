"""The Transformer toolkit (Vaswani et al., 2017, "Attention Is All You Need"): section IV-A of the
survey, equations 11-12, and the parts every later architecture is assembled from.

One class per component, in the order the paper builds them:

* ``FullAttention``: the attention core, z = softmax(q k^T / sqrt(d_k) + bias) v per head
  (eq 11-12) through the one ``F.scaled_dot_product_attention``, with any mask and an additive,
  differentiable score bias; ``SlidingWindowAttention`` is the banded core (Longformer). A new
  attention variant (relative, block-sparse, LSH, low-rank, random-feature) is a new core;
* ``MultiHeadAttention``: projections, heads split and merged, the key/value cache, around a
  core; self- or cross-attention, grouped-query heads, a head mask;
* ``SinusoidalPositionalEncoding`` (Vaswani) and ``LearnedPositionalEmbedding`` (GPT, BERT);
* ``FeedForward``: max(0, x W1 + b1) W2 + b2, or GELU in place of ReLU;
* ``TransformerLayer``: residual sub-layers assembled from injected parts (self-attention,
  optional cross-attention, a feed-forward network or anything of its shape, a norm), LayerNorm
  after the residual sum (post-LN, the original) or before the sub-layer (pre-LN, GPT-2).
  ``TransformerEncoderLayer``, ``TransformerDecoderLayer`` and ``DecoderOnlyLayer`` (a GPT block)
  are its three classic assemblies;
* ``TransformerStack``: any list of layers (the same layer object repeated is ALBERT's sharing),
  an optional final norm, every hidden state and attention map on request.
  ``TransformerEncoder`` / ``TransformerDecoder`` build the classic stacks.

Shapes are batch-first: ``(batch, time, d_model)``. Key masks are bool, True for real tokens and
False for padding, of shape ``(batch, key_time)``; a general ``mask`` is bool and broadcastable to
``(batch, heads, query_time, key_time)``, True where the query may attend the key
(``minitorch_nlp.attention`` builds the patterns). A query that sees no key at all gets zeros,
never NaN.

The key/value cache is plain data so that beam search can reorder it like any other decoding
state (``minitorch_nlp.decoding.reorder_state``): one ``{"self": {}, "cross": {}}`` per layer,
that the attention layers fill with their keys and values ``{"k": (B, H, T, d_k), "v": ...}``.
Self-attention appends each new step's keys and values; cross-attention projects the encoder's
memory once and reuses it. ``TransformerStack.new_cache()`` makes the empty caches of a stack.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import Generator, Tensor, concatenate, empty, get_default_dtype, tensor
from . import init
from .containers import ModuleList
from .layers import Dropout, LayerNorm, Linear
from .module import Module
from .outputs import ModelOutput
from .parameter import Parameter

__all__ = ["DecoderOnlyLayer", "DecoderOnlyStack", "FeedForward", "FullAttention",
           "LearnedPositionalEmbedding", "MultiHeadAttention", "SinusoidalPositionalEncoding",
           "SlidingWindowAttention", "TransformerDecoder", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerEncoderLayer", "TransformerLayer",
           "TransformerStack", "attention_weights"]

ACTIVATIONS = ("relu", "gelu", "gelu_tanh")

attention_weights = F.attention_weights


def _check_activation(activation, layer):
    if activation not in ACTIVATIONS:
        raise ValueError(f"{layer}: activation must be one of {ACTIVATIONS}, got {activation!r}")
    return activation


# ---- attention cores -----------------------------------------------------------------------------
class FullAttention(Module):
    r"""The core of multi-head attention, per head (eq 11-12, Vaswani et al. eq. 1)::

        z = Dropout(softmax(q k^T / sqrt(d_k) + bias)) v

    on (batch, heads, time, d_k) tensors, with the masks and the bias of
    ``F.scaled_dot_product_attention`` (which picks the fused kernel or the composite). ``dropout``
    drops attention weights while training (GPT and BERT use 0.1). ``scale`` replaces
    1/sqrt(d_k) (T5 uses 1: its initialisation holds the scale).

    A variant of attention overrides ``forward`` (or computes a bias and calls it): its signature
    ``forward(q, k, v, *, mask, bias, causal, key_mask, need_weights)`` returns ``(z, weights)``,
    the weights (batch, heads, q_time, k_time) when ``need_weights`` and None otherwise.
    """

    def __init__(self, dropout: float = 0.0, scale: float | None = None) -> None:
        super().__init__()
        self.dropout = Dropout(dropout)
        self.scale = scale

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        dropout_p = self.dropout.p if self.training else 0.0
        if not need_weights:
            return F.scaled_dot_product_attention(q, k, v, mask=mask, bias=bias, causal=causal,
                                                  key_mask=key_mask, scale=self.scale,
                                                  dropout_p=dropout_p), None
        weights = F.attention_weights(q, k, mask=mask, bias=bias, causal=causal,
                                      key_mask=key_mask, scale=self.scale)     # eq 11
        v = F.repeat_kv_heads(v, weights.shape[1])
        return self.dropout(weights) @ v, weights                               # eq 12


class SlidingWindowAttention(FullAttention):
    """Each query attends the keys within ``window`` positions on each side, every
    ``dilation``-th (Longformer's local pattern, Beltagy et al., 2020; only earlier keys when
    causal). Self-attention without a general mask, bias, dropout or weights runs the banded
    kernel, whose memory grows as time * (2 window + 1); anything else takes the full core with
    the band as a mask. With window >= time it equals full attention."""

    def __init__(self, window: int, dilation: int = 1, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        self.window = checks.positive_int(window, "window", "SlidingWindowAttention")
        self.dilation = checks.positive_int(dilation, "dilation", "SlidingWindowAttention")

    def band(self, q: Tensor, k: Tensor, causal: bool):
        """The band as a bool (q_time, k_time) mask, queries aligned with the last keys."""
        xp = q.backend.xp
        q_time, k_time = q.shape[2], k.shape[2]
        offsets = xp.asarray(q.backend.band_offsets(self.window, self.dilation, causal))
        query_position = xp.arange(q_time)[:, None] + (k_time - q_time)
        return ((xp.arange(k_time)[None, :] - query_position)[..., None] == offsets).any(-1)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        banded_kernel = (mask is None and bias is None and not need_weights
                         and q.shape[2] == k.shape[2]
                         and (not self.training or self.dropout.p == 0))
        if banded_kernel:
            return F.banded_attention(q, k, v, window=self.window, dilation=self.dilation,
                                      causal=causal, key_mask=key_mask), None
        band = self.band(q, k, causal)
        mask = band if mask is None else band & (mask.data if isinstance(mask, Tensor) else
                                                  q.backend.asarray(mask))
        return super().forward(q, k, v, mask=mask, bias=bias, causal=causal, key_mask=key_mask,
                               need_weights=need_weights)

    def extra_repr(self):
        return f"window={self.window}, dilation={self.dilation}"


# ---- multi-head attention ------------------------------------------------------------------------
@cookbook.equation(12, 53)
class MultiHeadAttention(Module):
    r"""Multi-head scaled dot-product attention (Vaswani et al., 2017, section 3.2)::

        Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
        MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O            (d_k = d_model / h)

    The survey's eq 12, Z_Att = softmax(Q . K^T) . V = W_SM . V, leaves out the 1/sqrt(d_k) scale;
    this layer implements the original, scaled attention. The h projections of each of Q, K and
    V are one ``Linear`` whose output is split into h heads of size d_k.

    The layer owns the projections, the heads and the cache; ``Attention(...)`` itself is the
    replaceable ``core`` (default ``FullAttention(dropout)``; ``SlidingWindowAttention`` ...).
    ``head_dim`` sets d_k apart from d_model / h (T5); ``num_kv_heads`` < ``num_heads`` shares
    each key/value head among a group of query heads (grouped-query attention); ``bias=False``
    drops the projections' biases (T5).

    ``forward(query)`` is self-attention; ``forward(query, key, value)`` attends from ``query``
    to another sequence (cross-attention; ``value`` defaults to ``key``). See ``forward`` for the
    masks and the cache.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0, *,
                 core: Module | None = None, head_dim: int | None = None,
                 num_kv_heads: int | None = None) -> None:
        super().__init__()
        name = "MultiHeadAttention"
        checks.positive_int(d_model, "d_model", name)
        checks.positive_int(num_heads, "num_heads", name)
        if head_dim is None and d_model % num_heads:
            raise ValueError(f"{name}: num_heads={num_heads} does not divide "
                             f"d_model={d_model}; pick a number of heads that divides d_model "
                             "(each head gets d_model / num_heads features), or set head_dim")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        checks.positive_int(num_kv_heads, "num_kv_heads", name)
        if num_heads % num_kv_heads:
            raise ValueError(f"{name}: num_kv_heads={num_kv_heads} must divide "
                             f"num_heads={num_heads} (each key/value head serves a group of "
                             "query heads)")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.head_dim = (d_model // num_heads if head_dim is None
                         else checks.positive_int(head_dim, "head_dim", name))
        self.q_proj = Linear(d_model, num_heads * self.head_dim, bias=bias)
        self.k_proj = Linear(d_model, num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = Linear(d_model, num_kv_heads * self.head_dim, bias=bias)
        self.out_proj = Linear(num_heads * self.head_dim, d_model, bias=bias)
        self.core = FullAttention(dropout) if core is None else core
        self.reset_parameters()

    def reset_parameters(self, generator: Generator | None = None) -> None:
        """Glorot-uniform projections and zero biases, as PyTorch's ``nn.MultiheadAttention``."""
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            init.xavier_uniform_(proj.weight, generator=generator)
            if proj.bias is not None:
                init.zeros_(proj.bias)

    def split_heads(self, x: Tensor, heads: int | None = None) -> Tensor:
        """(batch, time, heads * d_k) -> (batch, heads, time, d_k); ``heads`` defaults to
        ``num_heads``."""
        batch, time, _ = x.shape
        heads = self.num_heads if heads is None else heads
        if time == 1:  # one position (a decoding step): the same values, one operation less
            return x.reshape(batch, heads, 1, self.head_dim)
        return x.reshape(batch, time, heads, self.head_dim).permute(0, 2, 1, 3)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(batch, heads, time, d_k) -> (batch, time, heads * d_k): Concat(head_1, ..., head_h)."""
        batch, heads, time, head_dim = x.shape
        if time == 1:
            return x.reshape(batch, 1, heads * head_dim)
        return x.permute(0, 2, 1, 3).reshape(batch, time, heads * head_dim)

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
                key_mask: Tensor | np.ndarray | None = None, causal: bool = False,
                cache: dict | None = None,
                mask: Tensor | np.ndarray | None = None, bias: Tensor | None = None,
                head_mask: Tensor | np.ndarray | None = None, need_weights: bool = False,
                **core_kwargs) -> Tensor | tuple[Tensor, Tensor | None]:
        """Attend from ``query`` (batch, query_time, d_model) to ``key``/``value`` (batch,
        key_time, d_model); self-attention when ``key`` is None.

        ``key_mask`` (batch, key_time), bool, False on padded keys. With a ``cache`` it covers
        every cached key, not just the new ones. ``causal=True`` hides later keys from each query.
        ``mask`` (bool, broadcastable to (batch, heads, query_time, key_time), True = may attend)
        and ``bias`` (added to the scores, differentiable) go to the core as they are.
        ``head_mask`` (heads,) or (batch, heads) multiplies each head's output (0 switches a head
        off: head pruning, eq 54-55). ``core_kwargs`` go to the core as they are (a core's own
        inputs: Transformer-XL's relative position encodings).

        ``cache`` (a dict, see the module docstring) is updated in place: in self-attention the
        new keys and values are appended to the cached ones, so decoding one token at a time
        costs one row of attention per step; in cross-attention the projected ``key`` and
        ``value`` are stored on the first call and reused afterwards.

        Returns the output (batch, query_time, d_model), and with ``need_weights=True`` the pair
        (output, weights (batch, heads, query_time, key_time)), the weights from eq 11.
        """
        q, k, v = self.project(query, key, value, cache)
        z, weights = self.core(q, k, v, mask=mask, bias=bias, causal=causal, key_mask=key_mask,
                               need_weights=need_weights, **core_kwargs)        # eq 11-12
        if head_mask is not None:
            z, weights = self.mask_heads(z, weights, head_mask)
        out = self.out_proj(self.merge_heads(z))
        return (out, weights) if need_weights else out

    def project(self, query: Tensor, key: Tensor | None, value: Tensor | None,
                cache: dict | None) -> tuple[Tensor, Tensor, Tensor]:
        """Q W^Q, K W^K, V W^V split into heads, through the cache (see ``forward``)."""
        name = "MultiHeadAttention"
        self_attention = key is None
        checks.features(query, self.d_model, "query", name)
        if self_attention:
            key = value = query
        else:
            value = key if value is None else value
            checks.features(key, self.d_model, "key", name)
            checks.features(value, self.d_model, "value", name)
            if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
                raise ValueError(f"{name}: query {query.shape}, key {key.shape} and value "
                                 f"{value.shape} need the same batch, and key and value the "
                                 "same time")
        q = self.split_heads(self.q_proj(query))
        if cache is not None and not self_attention and "k" in cache:
            return q, cache["k"], cache["v"]
        k = self.split_heads(self.k_proj(key), self.num_kv_heads)
        v = self.split_heads(self.v_proj(value), self.num_kv_heads)
        if cache is not None:
            if self_attention and "k" in cache:
                k = concatenate([cache["k"], k], axis=2)
                v = concatenate([cache["v"], v], axis=2)
            cache["k"], cache["v"] = k, v
        return q, k, v

    def mask_heads(self, z: Tensor, weights: Tensor | None, head_mask: Tensor | np.ndarray
                   ) -> tuple[Tensor, Tensor | None]:
        """Each head's output (and weights) times its entry of ``head_mask``."""
        factors = head_mask if isinstance(head_mask, Tensor) else tensor(
            np.asarray(head_mask), dtype=z.dtype, backend=z.backend.name)
        if factors.shape not in ((self.num_heads,), (z.shape[0], self.num_heads)):
            raise ValueError(f"MultiHeadAttention: head_mask must have shape (heads,) = "
                             f"({self.num_heads},) or (batch, heads) = "
                             f"{(z.shape[0], self.num_heads)}, got {factors.shape}")
        factors = factors.reshape(-1 if factors.ndim == 2 else 1, self.num_heads, 1, 1)
        return z * factors, None if weights is None else weights * factors

    def extra_repr(self):
        kv = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        return f"d_model={self.d_model}, num_heads={self.num_heads}{kv}"


class _PositionTable(Module):
    """Adds one row of a (max_len, d_model) table to each position of its input."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = checks.positive_int(max_len, "max_len", type(self).__name__)
        self.d_model = checks.positive_int(d_model, "d_model", type(self).__name__)

    def forward(self, x: Tensor, start: int = 0,
                position_ids: Tensor | np.ndarray | None = None) -> Tensor:
        """``x`` (batch, time, d_model) plus the rows for positions ``start .. start + time - 1``
        (``start`` > 0 when decoding with a cache), or for ``position_ids`` (batch, time) ints
        when given."""
        name = type(self).__name__
        checks.features(x, self.d_model, "x", name)
        if position_ids is None:
            if start + x.shape[1] > self.max_len:
                raise ValueError(f"{name}: positions {start} .. {start + x.shape[1] - 1} do not "
                                 f"fit max_len={self.max_len}; use shorter sequences or a "
                                 "larger max_len")
            return x + self.table[start:start + x.shape[1]]
        ids = (position_ids.numpy() if isinstance(position_ids, Tensor)
               else np.asarray(position_ids))
        if tuple(ids.shape) != x.shape[:2]:
            raise ValueError(f"{name}: position_ids of shape {tuple(ids.shape)} must be "
                             f"(batch, time) = {x.shape[:2]}")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.max_len):
            raise ValueError(f"{name}: position ids must lie in [0, {self.max_len}), got "
                             f"{int(ids.min())} .. {int(ids.max())}")
        return x + self.table[tensor(ids, dtype=np.int64, backend=self.table.backend)]

    def extra_repr(self):
        return f"max_len={self.max_len}, d_model={self.d_model}"


class SinusoidalPositionalEncoding(_PositionTable):
    r"""The fixed encodings of Vaswani et al. (2017, section 3.5)::

        PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

    Each pair of features is a sinusoid of its own wavelength (2 pi to 10000 * 2 pi), so PE(pos + k)
    is a linear function of PE(pos). Kept as a non-persistent buffer: nothing to learn or save.
    """

    def __init__(self, d_model: int, max_len: int = 1024) -> None:
        super().__init__(max_len, d_model)
        position = np.arange(max_len, dtype=np.float64)[:, None]
        frequency = 10000.0 ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)
        table = np.zeros((max_len, d_model))
        table[:, 0::2] = np.sin(position * frequency)
        table[:, 1::2] = np.cos(position * frequency[:d_model // 2])
        self.register_buffer("table", tensor(table, dtype=get_default_dtype()), persistent=False)


class LearnedPositionalEmbedding(_PositionTable):
    """A trained table of position vectors, one per position (GPT's W_p, eq 20; BERT), N(0, 0.02^2)
    at first as in GPT and BERT."""

    def __init__(self, max_len: int, d_model: int, std: float = 0.02) -> None:
        super().__init__(max_len, d_model)
        self.table = Parameter(init.normal_(empty(max_len, d_model), std=std))


class FeedForward(Module):
    """The position-wise feed-forward network (Vaswani et al., 2017, eq. 2)::

        FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

    with ``activation="gelu"`` (BERT, GPT) or ``"gelu_tanh"`` (GPT-2's tanh approximation) in
    place of ReLU; the GELU and the first bias run as one fused kernel. Dropout acts on the hidden
    activations.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu") -> None:
        super().__init__()
        self.activation = _check_activation(activation, "FeedForward")
        self.linear1 = Linear(d_model, d_ff)
        self.linear2 = Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        if self.activation == "relu":
            hidden = F.relu(self.linear1(x))
        else:
            approximate = "tanh" if self.activation == "gelu_tanh" else "none"
            if type(self.linear1) is Linear:       # the fused bias + GELU reads its weight
                hidden = F.bias_gelu(F.linear(x, self.linear1.weight), self.linear1.bias,
                                     approximate=approximate)
            else:                                   # a replacement (quantised) runs its forward
                hidden = F.gelu(self.linear1(x), approximate=approximate)
        return self.linear2(self.dropout(hidden))

    def extra_repr(self):
        return f"activation={self.activation!r}"


# ---- layers --------------------------------------------------------------------------------------
class TransformerLayer(Module):
    """Sub-layers in residual connections (Vaswani et al., 2017, section 3.1), assembled from
    parts: ``self_attn`` (a ``MultiHeadAttention``), an optional ``cross_attn`` over the encoder's
    output, and ``feed_forward`` (a ``FeedForward``, a mixture of experts, anything that maps
    (batch, time, d_model) to itself). ``norm`` makes one normalisation module per sub-layer
    (``functools.partial(LayerNorm, d_model)``, an RMSNorm ...).

    Post-LN (the original): x = Norm(x + Dropout(Sublayer(x))). Pre-LN (``norm_first=True``,
    Xiong et al., 2020; GPT-2): x = x + Dropout(Sublayer(Norm(x))), which trains without a
    warm-up. Dropout acts on each sub-layer's output before it is added (Vaswani section 5.4).
    ``causal=True`` makes the self-attention masked by default (decoder layers, GPT blocks).
    """

    def __init__(self, self_attn: Module, feed_forward: Module, norm: Callable[[], Module], *,
                 cross_attn: Module | None = None, dropout: float = 0.0, norm_first: bool = False,
                 causal: bool = False) -> None:
        super().__init__()
        self.norm_first, self.causal = bool(norm_first), bool(causal)
        self.self_attn = self_attn
        self.norm1 = norm()
        self.cross_attn = cross_attn
        self.norm2 = norm()
        self.feed_forward = feed_forward
        self.norm3 = norm() if cross_attn is not None else None
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor | None = None, *,
                key_mask: Tensor | np.ndarray | None = None,
                causal: bool | None = None, memory_key_mask: Tensor | np.ndarray | None = None,
                cache: dict | None = None, attentions: dict | None = None,
                **attention_kwargs) -> Tensor:
        """``x`` (batch, time, d_model) -> same shape. ``memory`` (batch, src_time, d_model) is
        what ``cross_attn`` reads, with ``memory_key_mask``. ``key_mask``, ``causal`` (default:
        the layer's) and ``attention_kwargs`` (``mask``, ``bias``, ``head_mask`` ...) go to the
        self-attention. ``cache`` is ``{"self": {}, "cross": {}}``. A dict ``attentions``
        receives the attention weights under "self" and "cross"."""
        cache = {} if cache is None else cache
        causal = self.causal if causal is None else causal
        x = self.residual(x, self.norm1, self.self_attn, attentions, "self", key_mask=key_mask,
                          causal=causal, cache=cache.get("self"), **attention_kwargs)
        if self.cross_attn is not None:
            x = self.residual(x, self.norm2, self.cross_attn, attentions, "cross", key=memory,
                              key_mask=memory_key_mask, cache=cache.get("cross"))
        return self.residual(x, self.feed_forward_norm, self.feed_forward)

    @property
    def feed_forward_norm(self):
        return self.norm2 if self.cross_attn is None else self.norm3

    def residual(self, x: Tensor, norm: Module, sublayer: Module, attentions: dict | None = None,
                 name: str | None = None, **kwargs) -> Tensor:
        """One sub-layer in its residual connection, pre- or post-LN; an attention sub-layer
        records its weights in ``attentions[name]`` when ``attentions`` is a dict."""
        h = norm(x) if self.norm_first else x
        if attentions is None:
            out = sublayer(h, **kwargs)
        else:
            out, attentions[name] = sublayer(h, need_weights=True, **kwargs)
        x = x + self.dropout(out)
        return x if self.norm_first else norm(x)

    def extra_repr(self):
        return f"norm_first={self.norm_first}, causal={self.causal}"


def _classic_parts(d_model, num_heads, d_ff, dropout, activation, layer_norm_eps,
                   attention_dropout, activation_dropout, layer):
    """The attention, feed-forward and norm of Vaswani et al.'s layers. ``activation_dropout``
    (default: ``dropout``, as PyTorch's layers) drops the feed-forward hidden units; GPT and
    BERT use 0."""
    checks.positive_int(d_model, "d_model", layer)
    checks.positive_int(d_ff, "d_ff", layer)
    _check_activation(activation, layer)
    hidden_dropout = dropout if activation_dropout is None else activation_dropout
    return (MultiHeadAttention(d_model, num_heads, dropout=attention_dropout),
            FeedForward(d_model, d_ff, hidden_dropout, activation),
            functools.partial(LayerNorm, d_model, eps=layer_norm_eps))


class TransformerEncoderLayer(TransformerLayer):
    """Self-attention then the feed-forward network (Vaswani et al., 2017, section 3.1)."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, layer_norm_eps: float = 1e-5,
                 attention_dropout: float = 0.0, activation_dropout: float | None = None) -> None:
        attention, feed_forward, norm = _classic_parts(
            d_model, num_heads, d_ff, dropout, activation, layer_norm_eps, attention_dropout,
            activation_dropout, type(self).__name__)
        super().__init__(attention, feed_forward, norm, dropout=dropout, norm_first=norm_first)


class DecoderOnlyLayer(TransformerLayer):
    """A GPT block: masked (causal) self-attention then the feed-forward network, no
    cross-attention (Radford et al., 2018; Liu et al., 2018's decoder-only Transformer)."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, layer_norm_eps: float = 1e-5,
                 attention_dropout: float = 0.0, activation_dropout: float | None = None) -> None:
        attention, feed_forward, norm = _classic_parts(
            d_model, num_heads, d_ff, dropout, activation, layer_norm_eps, attention_dropout,
            activation_dropout, type(self).__name__)
        super().__init__(attention, feed_forward, norm, dropout=dropout, norm_first=norm_first,
                         causal=True)


class TransformerDecoderLayer(TransformerLayer):
    """Masked (causal) self-attention, attention over the encoder's output ("encoder-decoder
    attention"), then the feed-forward network (Vaswani et al., 2017, section 3.1)."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, layer_norm_eps: float = 1e-5,
                 attention_dropout: float = 0.0, activation_dropout: float | None = None) -> None:
        attention, feed_forward, norm = _classic_parts(
            d_model, num_heads, d_ff, dropout, activation, layer_norm_eps, attention_dropout,
            activation_dropout, type(self).__name__)
        super().__init__(attention, feed_forward, norm, dropout=dropout, norm_first=norm_first,
                         causal=True, cross_attn=MultiHeadAttention(d_model, num_heads,
                                                                    dropout=attention_dropout))


# ---- stacks --------------------------------------------------------------------------------------
class TransformerStack(Module):
    """Layers applied in turn, then ``norm`` (needed in pre-LN, where the last layer's output is
    an un-normalised residual sum). ``layers`` is any list of layers; the same layer object
    listed n times shares its parameters across the n depths (ALBERT, Lan et al., 2020).

    ``skip_layer``, when set, is asked ``skip_layer(index)`` before each layer: a layer it skips
    is not evaluated and passes its input on unchanged (LayerDrop sets it while training)."""

    skip_layer = None

    def __init__(self, layers: list[Module], norm: Module | None = None) -> None:
        super().__init__()
        self.layers = ModuleList(layers)
        self.norm = norm

    def new_cache(self) -> list[dict]:
        """Empty key/value caches, one ``{"self": {}, "cross": {}}`` per layer."""
        return [{"self": {}, "cross": {}} for _ in self.layers]

    @staticmethod
    def cache_length(cache: list[dict]) -> int:
        """How many positions ``cache`` holds (0 when empty): the next step's position."""
        keys = cache[0]["self"].get("k")
        return 0 if keys is None else keys.shape[2]

    def forward(self, x: Tensor, memory: Tensor | None = None, *, cache: list[dict] | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False, **layer_kwargs) -> ModelOutput:
        """``x`` (batch, time, d_model) through every layer; ``memory``, ``cache`` (from
        ``new_cache``) and ``layer_kwargs`` (``key_mask``, ``causal``, ``memory_key_mask``,
        ``mask``, ``bias`` ...) go to each layer. ``head_mask`` (layers, heads) gives each
        layer's self-attention its row.

        Returns a ``ModelOutput``: ``last_hidden_state``; with ``output_hidden_states`` also
        ``hidden_states``, the input and each layer's output (the last one after ``norm``); with
        ``output_attentions`` also ``attentions`` (each layer's self-attention weights) and, for
        layers with cross-attention, ``cross_attentions``.
        """
        head_mask = self._head_mask_rows(head_mask)
        hidden, attentions = [x], []
        for i, layer in enumerate(self.layers):
            record = {} if output_attentions else None
            if self.skip_layer is not None and self.skip_layer(i):
                hidden.append(x)
                attentions.append(record)
                continue
            if head_mask is not None:
                layer_kwargs["head_mask"] = head_mask[i]
            x = layer(x, memory, cache=None if cache is None else cache[i], attentions=record,
                      **layer_kwargs)
            hidden.append(x)
            attentions.append(record)
        if self.norm is not None:
            x = hidden[-1] = self.norm(x)
        cross = [a["cross"] for a in attentions if a and "cross" in a]
        return ModelOutput(
            last_hidden_state=x,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(a["self"] for a in attentions) if output_attentions else None,
            cross_attentions=tuple(cross) if cross else None)

    def _head_mask_rows(self, head_mask):
        if head_mask is None:
            return None
        rows = head_mask.numpy() if isinstance(head_mask, Tensor) else np.asarray(head_mask)
        if rows.ndim != 2 or rows.shape[0] != len(self.layers):
            raise ValueError(f"{type(self).__name__}: head_mask must have shape (layers, heads) "
                             f"with {len(self.layers)} layers, got {rows.shape}")
        return rows


class _ClassicStack(TransformerStack):
    """``num_layers`` fresh layers of ``layer_class`` and, optionally, a final LayerNorm
    (default: on for pre-LN, off for post-LN)."""

    layer_class = None

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, activation: str = "relu", norm_first: bool = False,
                 final_norm: bool | None = None, layer_norm_eps: float = 1e-5,
                 attention_dropout: float = 0.0, activation_dropout: float | None = None) -> None:
        checks.positive_int(num_layers, "num_layers", type(self).__name__)
        layers = [self.layer_class(d_model, num_heads, d_ff, dropout=dropout,
                                   activation=activation, norm_first=norm_first,
                                   layer_norm_eps=layer_norm_eps,
                                   attention_dropout=attention_dropout,
                                   activation_dropout=activation_dropout)
                  for _ in range(num_layers)]
        final_norm = norm_first if final_norm is None else final_norm
        super().__init__(layers, LayerNorm(d_model, eps=layer_norm_eps) if final_norm else None)


class TransformerEncoder(_ClassicStack):
    """A stack of ``num_layers`` ``TransformerEncoderLayer``s."""

    layer_class = TransformerEncoderLayer


class DecoderOnlyStack(_ClassicStack):
    """A stack of ``num_layers`` ``DecoderOnlyLayer``s (GPT)."""

    layer_class = DecoderOnlyLayer


class TransformerDecoder(_ClassicStack):
    """A stack of ``num_layers`` ``TransformerDecoderLayer``s."""

    layer_class = TransformerDecoderLayer
