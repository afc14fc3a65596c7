"""Transformer layers (Vaswani et al., 2017, "Attention Is All You Need"): section IV-A of the
survey, equations 11-12.

One class per component, in the order the paper builds them:

* ``attention_weights``: W_SM = softmax(Q K^T / sqrt(d_k)) (eq 11), the explicit path that
  returns the weights for pictures and tests;
* ``MultiHeadAttention``: heads split, Z = W_SM V per head (eq 12) through the one fused
  ``F.scaled_dot_product_attention``, heads merged; self- or cross-attention, key padding masks,
  causal masking and a key/value cache for incremental decoding;
* ``SinusoidalPositionalEncoding`` (Vaswani) and ``LearnedPositionalEmbedding`` (GPT, BERT);
* ``FeedForward``: max(0, x W1 + b1) W2 + b2, or GELU in place of ReLU;
* ``TransformerEncoderLayer`` / ``TransformerDecoderLayer``: residual sub-layers with LayerNorm
  after the residual sum (post-LN, the original) or before the sub-layer (pre-LN,
  ``norm_first=True``, as in GPT-2);
* ``TransformerEncoder`` / ``TransformerDecoder``: stacks of layers with an optional final
  LayerNorm.

Shapes are batch-first: ``(batch, time, d_model)``. Masks are bool, True for real tokens and False
for padding, of shape ``(batch, key_time)``; a query that sees no key at all (a fully padded row)
gets zeros, never NaN.

The key/value cache is plain data so that beam search can reorder it like any other decoding
state (``minitorch_nlp.decoding.reorder_state``): one dict per attention layer, empty at first,
that the layer fills with its keys and values ``{"k": (B, H, T, d_k), "v": (B, H, T, d_k)}``.
Self-attention appends each new step's keys and values; cross-attention projects the encoder's
memory once and reuses it. ``TransformerEncoder.new_cache()`` / ``TransformerDecoder.new_cache()``
make the empty caches of a whole stack.
"""
from __future__ import annotations

import math

import numpy as np

from .. import cookbook
from .. import functional as F
from ..autograd import Tensor, concatenate, empty, get_default_dtype, tensor
from . import init
from .containers import ModuleList
from .layers import Dropout, LayerNorm, Linear
from .module import Module
from .parameter import Parameter

__all__ = ["FeedForward", "LearnedPositionalEmbedding", "MultiHeadAttention",
           "SinusoidalPositionalEncoding", "TransformerDecoder", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerEncoderLayer", "attention_weights"]

ACTIVATIONS = ("relu", "gelu", "gelu_tanh")


def _check_positive(value, name, layer):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{layer}: {name} must be a positive int, got {value!r}")
    return value


def _check_activation(activation, layer):
    if activation not in ACTIVATIONS:
        raise ValueError(f"{layer}: activation must be one of {ACTIVATIONS}, got {activation!r}")
    return activation


def _check_features(x, d_model, name, layer):
    if not isinstance(x, Tensor) or x.ndim != 3 or x.shape[-1] != d_model:
        shape = x.shape if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{layer}: {name} must be a Tensor of shape (batch, time, d_model="
                         f"{d_model}), got {shape}")


def _check_key_mask(key_mask, batch, key_time, layer):
    """``key_mask`` as a bool array of shape (batch, key_time), or None."""
    if key_mask is None:
        return None
    mask = key_mask.data if isinstance(key_mask, Tensor) else key_mask
    mask_dtype, mask_shape = getattr(mask, "dtype", None), tuple(getattr(mask, "shape", ()))
    if mask_dtype is None or mask_dtype.kind != "b" or mask_shape != (batch, key_time):
        raise ValueError(f"{layer}: key_mask must be a bool array of shape (batch, key_time) = "
                         f"{(batch, key_time)}, True for real tokens and False for padding; got "
                         f"{mask_dtype} {mask_shape}")
    return mask


@cookbook.equation(11)
def attention_weights(q, k, *, causal=False, key_mask=None, scale=None):
    r"""The attention weights W_SM = softmax(Q K^T / sqrt(d_k)) of each head (eq 11).

    The survey writes eq 11 as softmax(Q . K^T); Vaswani et al. (2017, eq. 1) divide the scores
    by sqrt(d_k) so that their variance does not grow with the head size and push the softmax
    into regions of tiny gradients. This is the original, scaled form (``scale`` overrides
    1/sqrt(d_k)).

    ``q`` is ``(batch, heads, query_time, d_k)``, ``k`` ``(batch, heads, key_time, d_k)``; the
    result is ``(batch, heads, query_time, key_time)``, each row a distribution over the keys the
    query may see. The masks are those of ``F.scaled_dot_product_attention``: ``causal`` lets
    query t see keys up to t (queries aligned with the *last* keys when there are fewer of them,
    as when decoding with a cache), ``key_mask`` ``(batch, key_time)`` is False on padding. A
    query that sees no key gets a row of zeros.

    This explicit path exists to *look at* the weights (attention maps, tests); the attention
    output itself is always computed by the fused ``F.scaled_dot_product_attention``.
    """
    q, k, _, mask = F._attention_inputs(q, k, k, key_mask, "attention_weights")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    xp = q.backend.xp
    query_time, key_time = q.shape[2], k.shape[2]
    allowed = xp.ones((1, 1, query_time, key_time), dtype=bool)
    if causal:
        allowed = allowed & xp.tri(query_time, key_time, k=key_time - query_time, dtype=bool)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    scores = (q @ k.mT) * scale
    return scores.masked_fill(~allowed, -math.inf).softmax(axis=-1)


@cookbook.equation(12)
class MultiHeadAttention(Module):
    r"""Multi-head scaled dot-product attention (Vaswani et al., 2017, section 3.2)::

        Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
        MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O            (d_k = d_model / h)

    The survey's eq 12, Z_Att = softmax(Q . K^T) . V = W_SM . V, leaves out the 1/sqrt(d_k) scale;
    this layer implements the original, scaled attention. The h projections of each of Q, K and
    V are one ``Linear(d_model, d_model)`` whose output is split into h heads of size d_k.

    ``dropout`` drops attention weights while training (GPT and BERT use 0.1; Vaswani et al. drop
    only the sub-layer outputs). It needs the weights themselves, so a training step with it takes
    the explicit path ``dropout(attention_weights(q, k)) @ v`` instead of the fused kernel.

    ``forward(query)`` is self-attention; ``forward(query, key, value)`` attends from ``query``
    to another sequence (cross-attention; ``value`` defaults to ``key``). See ``forward`` for the
    masks and the cache.
    """

    def __init__(self, d_model, num_heads, bias=True, dropout=0.0):
        super().__init__()
        _check_positive(d_model, "d_model", "MultiHeadAttention")
        _check_positive(num_heads, "num_heads", "MultiHeadAttention")
        if d_model % num_heads:
            raise ValueError(f"MultiHeadAttention: num_heads={num_heads} does not divide "
                             f"d_model={d_model}; pick a number of heads that divides d_model "
                             "(each head gets d_model / num_heads features)")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.q_proj = Linear(d_model, d_model, bias=bias)
        self.k_proj = Linear(d_model, d_model, bias=bias)
        self.v_proj = Linear(d_model, d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)
        self.attn_dropout = Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self, generator=None):
        """Glorot-uniform projections and zero biases, as PyTorch's ``nn.MultiheadAttention``."""
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            init.xavier_uniform_(proj.weight, generator=generator)
            if proj.bias is not None:
                init.zeros_(proj.bias)

    def split_heads(self, x):
        """(batch, time, d_model) -> (batch, heads, time, d_k)."""
        batch, time, _ = x.shape
        return x.reshape(batch, time, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def merge_heads(self, x):
        """(batch, heads, time, d_k) -> (batch, time, d_model): Concat(head_1, ..., head_h)."""
        batch, heads, time, head_dim = x.shape
        return x.permute(0, 2, 1, 3).reshape(batch, time, heads * head_dim)

    def forward(self, query, key=None, value=None, *, key_mask=None, causal=False, cache=None,
                need_weights=False):
        """Attend from ``query`` (batch, query_time, d_model) to ``key``/``value`` (batch,
        key_time, d_model); self-attention when ``key`` is None.

        ``key_mask`` (batch, key_time), bool, False on padded keys. With a ``cache`` it covers
        every cached key, not just the new ones. ``causal=True`` hides later keys from each query.

        ``cache`` (a dict, see the module docstring) is updated in place: in self-attention the
        new keys and values are appended to the cached ones, so decoding one token at a time
        costs one row of attention per step; in cross-attention the projected ``key`` and
        ``value`` are stored on the first call and reused afterwards.

        Returns the output (batch, query_time, d_model), and with ``need_weights=True`` the pair
        (output, weights (batch, heads, query_time, key_time)), the weights from eq 11.
        """
        layer = "MultiHeadAttention"
        self_attention = key is None
        _check_features(query, self.d_model, "query", layer)
        if self_attention:
            key = value = query
        else:
            value = key if value is None else value
            _check_features(key, self.d_model, "key", layer)
            _check_features(value, self.d_model, "value", layer)
            if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
                raise ValueError(f"{layer}: query {query.shape}, key {key.shape} and value "
                                 f"{value.shape} need the same batch, and key and value the "
                                 "same time")
        q = self.split_heads(self.q_proj(query))
        if cache is not None and not self_attention and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k = self.split_heads(self.k_proj(key))
            v = self.split_heads(self.v_proj(value))
            if cache is not None:
                if self_attention and "k" in cache:
                    k = concatenate([cache["k"], k], axis=2)
                    v = concatenate([cache["v"], v], axis=2)
                cache["k"], cache["v"] = k, v
        mask = _check_key_mask(key_mask, k.shape[0], k.shape[2], layer)
        weights = None
        if need_weights or (self.training and self.attn_dropout.p > 0):
            weights = attention_weights(q, k, causal=causal, key_mask=mask)  # eq 11
        if self.training and self.attn_dropout.p > 0:
            z = self.attn_dropout(weights) @ v                                # eq 12, per head
        else:
            z = F.scaled_dot_product_attention(q, k, v, causal=causal, key_mask=mask)  # eq 12
        out = self.out_proj(self.merge_heads(z))
        return (out, weights) if need_weights else out

    def extra_repr(self):
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, "
                f"dropout={self.attn_dropout.p}")


class _PositionTable(Module):
    """Adds one row of a (max_len, d_model) table to each position of its input."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = _check_positive(max_len, "max_len", type(self).__name__)
        self.d_model = _check_positive(d_model, "d_model", type(self).__name__)

    def forward(self, x, start=0, position_ids=None):
        """``x`` (batch, time, d_model) plus the rows for positions ``start .. start + time - 1``
        (``start`` > 0 when decoding with a cache), or for ``position_ids`` (batch, time) ints
        when given."""
        name = type(self).__name__
        _check_features(x, self.d_model, "x", name)
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

    def __init__(self, d_model, max_len=1024):
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

    def __init__(self, max_len, d_model, std=0.02):
        super().__init__(max_len, d_model)
        self.table = Parameter(init.normal_(empty(max_len, d_model), std=std))


class FeedForward(Module):
    """The position-wise feed-forward network (Vaswani et al., 2017, eq. 2)::

        FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

    with ``activation="gelu"`` (BERT, GPT) or ``"gelu_tanh"`` (GPT-2's tanh approximation) in
    place of ReLU; the GELU and the first bias run as one fused kernel. Dropout acts on the hidden
    activations.
    """

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        self.activation = _check_activation(activation, "FeedForward")
        self.linear1 = Linear(d_model, d_ff)
        self.linear2 = Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x):
        if self.activation == "relu":
            hidden = F.relu(self.linear1(x))
        else:
            approximate = "tanh" if self.activation == "gelu_tanh" else "none"
            hidden = F.bias_gelu(F.linear(x, self.linear1.weight), self.linear1.bias,
                                 approximate=approximate)
        return self.linear2(self.dropout(hidden))

    def extra_repr(self):
        return f"activation={self.activation!r}"


class _ResidualLayer(Module):
    """What encoder and decoder layers share: residual connections around sub-layers, with
    LayerNorm after the sum (post-LN, Vaswani et al. section 3.1: LayerNorm(x + Sublayer(x))) or
    before the sub-layer (pre-LN, ``norm_first=True``: x + Sublayer(LayerNorm(x)), Xiong et al.,
    2020, which trains without a warm-up and is GPT-2's layout). Dropout acts on each sub-layer's
    output before it is added (Vaswani section 5.4), on the attention weights with
    ``attention_dropout`` and on the feed-forward hidden units with ``activation_dropout``
    (default: ``dropout``, as PyTorch's layers; GPT and BERT use 0)."""

    def __init__(self, d_model, num_heads, d_ff, dropout, activation, norm_first, layer_norm_eps,
                 attention_dropout, activation_dropout, num_sublayers):
        super().__init__()
        name = type(self).__name__
        _check_positive(d_model, "d_model", name)
        _check_positive(d_ff, "d_ff", name)
        _check_activation(activation, name)
        self.norm_first = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout)
        self.feed_forward = FeedForward(d_model, d_ff,
                                        dropout if activation_dropout is None else
                                        activation_dropout, activation)
        for i in range(1, num_sublayers + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps))
        self.dropout = Dropout(dropout)

    def _enter(self, x, norm):
        """The sub-layer's input: LayerNorm(x) in pre-LN, x in post-LN."""
        return norm(x) if self.norm_first else x

    def _residual(self, x, sublayer_output, norm):
        """x + Dropout(Sublayer), normalised afterwards in post-LN."""
        x = x + self.dropout(sublayer_output)
        return x if self.norm_first else norm(x)

    def _attend(self, attention, x, norm, need_weights, **kwargs):
        """One attention sub-layer with its residual; returns (x, weights or None)."""
        out = attention(self._enter(x, norm), need_weights=need_weights, **kwargs)
        out, weights = out if need_weights else (out, None)
        return self._residual(x, out, norm), weights

    def extra_repr(self):
        return f"norm_first={self.norm_first}"


class TransformerEncoderLayer(_ResidualLayer):
    """Self-attention then the feed-forward network, each in a residual connection
    (Vaswani et al., 2017, section 3.1).

    ``causal=True`` with a ``cache`` makes it a decoder-only block (GPT): masked self-attention
    and a feed-forward network, no cross-attention.
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, activation="relu",
                 norm_first=False, layer_norm_eps=1e-5, attention_dropout=0.0,
                 activation_dropout=None):
        super().__init__(d_model, num_heads, d_ff, dropout, activation, norm_first,
                         layer_norm_eps, attention_dropout, activation_dropout, num_sublayers=2)

    def forward(self, x, *, key_mask=None, causal=False, cache=None, need_weights=False):
        """``x`` (batch, time, d_model) -> same shape; with ``need_weights=True`` also the
        self-attention weights (batch, heads, time, key_time)."""
        x, weights = self._attend(self.self_attn, x, self.norm1, need_weights,
                                  key_mask=key_mask, causal=causal, cache=cache)
        x = self._residual(x, self.feed_forward(self._enter(x, self.norm2)), self.norm2)
        return (x, weights) if need_weights else x


class TransformerDecoderLayer(_ResidualLayer):
    """Masked (causal) self-attention, attention over the encoder's output ("encoder-decoder
    attention"), then the feed-forward network, each in a residual connection (Vaswani et al.,
    2017, section 3.1)."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, activation="relu",
                 norm_first=False, layer_norm_eps=1e-5, attention_dropout=0.0,
                 activation_dropout=None):
        super().__init__(d_model, num_heads, d_ff, dropout, activation, norm_first,
                         layer_norm_eps, attention_dropout, activation_dropout, num_sublayers=3)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=attention_dropout)

    def forward(self, x, memory, *, tgt_key_mask=None, memory_key_mask=None, cache=None,
                need_weights=False):
        """``x`` (batch, tgt_time, d_model) attends causally to itself and to ``memory`` (batch,
        src_time, d_model), the encoder's output. ``cache`` is ``{"self": {}, "cross": {}}``
        (see the module docstring). With ``need_weights=True`` also returns
        ``{"self": weights, "cross": weights}``."""
        cache = {} if cache is None else cache
        x, self_weights = self._attend(self.self_attn, x, self.norm1, need_weights,
                                       key_mask=tgt_key_mask, causal=True,
                                       cache=cache.get("self"))
        x, cross_weights = self._attend(self.cross_attn, x, self.norm2, need_weights,
                                        key=memory, key_mask=memory_key_mask,
                                        cache=cache.get("cross"))
        x = self._residual(x, self.feed_forward(self._enter(x, self.norm3)), self.norm3)
        if need_weights:
            return x, {"self": self_weights, "cross": cross_weights}
        return x


class _Stack(Module):
    """N identical layers and, optionally, a final LayerNorm (needed in pre-LN, where the last
    layer's output is an un-normalised residual sum). Subclasses name their ``layer_class``."""

    layer_class = None

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.1, activation="relu",
                 norm_first=False, final_norm=None, layer_norm_eps=1e-5, attention_dropout=0.0,
                 activation_dropout=None):
        super().__init__()
        _check_positive(num_layers, "num_layers", type(self).__name__)
        self.layers = ModuleList([
            self.layer_class(d_model, num_heads, d_ff, dropout, activation, norm_first,
                             layer_norm_eps, attention_dropout, activation_dropout)
            for _ in range(num_layers)])
        final_norm = norm_first if final_norm is None else final_norm
        self.norm = LayerNorm(d_model, eps=layer_norm_eps) if final_norm else None

    def _finish(self, x, weights, need_weights):
        if self.norm is not None:
            x = self.norm(x)
        return (x, weights) if need_weights else x


class TransformerEncoder(_Stack):
    """A stack of ``num_layers`` ``TransformerEncoderLayer``s. ``final_norm`` (default: on for
    pre-LN, off for post-LN) adds a LayerNorm after the last layer."""

    layer_class = TransformerEncoderLayer

    def new_cache(self):
        """Empty key/value caches, one per layer, for ``forward(..., causal=True, cache=...)``."""
        return [{} for _ in self.layers]

    @staticmethod
    def cache_length(cache):
        """How many positions ``cache`` holds (0 when empty): the next step's position."""
        keys = cache[0].get("k")
        return 0 if keys is None else keys.shape[2]

    def forward(self, x, *, key_mask=None, causal=False, cache=None, need_weights=False):
        """``x`` (batch, time, d_model) -> same shape; with ``need_weights=True`` also the list
        of each layer's self-attention weights."""
        weights = []
        for i, layer in enumerate(self.layers):
            x = layer(x, key_mask=key_mask, causal=causal,
                      cache=None if cache is None else cache[i], need_weights=need_weights)
            if need_weights:
                x, layer_weights = x
                weights.append(layer_weights)
        return self._finish(x, weights, need_weights)


class TransformerDecoder(_Stack):
    """A stack of ``num_layers`` ``TransformerDecoderLayer``s. ``final_norm`` (default: on for
    pre-LN, off for post-LN) adds a LayerNorm after the last layer."""

    layer_class = TransformerDecoderLayer

    def new_cache(self):
        """Empty key/value caches, one ``{"self": {}, "cross": {}}`` per layer."""
        return [{"self": {}, "cross": {}} for _ in self.layers]

    @staticmethod
    def cache_length(cache):
        """How many target positions ``cache`` holds (0 when empty): the next step's position."""
        keys = cache[0]["self"].get("k")
        return 0 if keys is None else keys.shape[2]

    def forward(self, x, memory, *, tgt_key_mask=None, memory_key_mask=None, cache=None,
                need_weights=False):
        """``x`` (batch, tgt_time, d_model) and the encoder's ``memory`` (batch, src_time,
        d_model) -> (batch, tgt_time, d_model); with ``need_weights=True`` also the list of each
        layer's ``{"self": weights, "cross": weights}``."""
        weights = []
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_key_mask=tgt_key_mask, memory_key_mask=memory_key_mask,
                      cache=None if cache is None else cache[i], need_weights=need_weights)
            if need_weights:
                x, layer_weights = x
                weights.append(layer_weights)
        return self._finish(x, weights, need_weights)
