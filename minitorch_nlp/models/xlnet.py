"""XLNet (Yang et al., 2019, "XLNet: Generalized Autoregressive Pretraining for Language
Understanding"): the survey's section IV-D, eq 25-29.

BERT predicts the masked tokens independently of each other (eq 25, ``bert.masked_lm_loss``).
XLNet keeps an autoregressive objective (eq 26) but over every factorisation order z of the
sequence (eq 27)::

    max_theta  E_{z ~ Z_T} [ sum_t log p_theta(x_{z_t} | x_{z_<t}) ]

so each token learns from context on both sides, without a [MASK] token. Only the order changes,
not the sequence: positions keep their places, and attention masks hide what comes later in z.
With partial prediction only the last 1/K of each order is predicted (the rest is context).

Predicting x_{z_t} needs to know *which position* is asked for but not *its token*: the standard
softmax over h(x_{z_<t}) (eq 28) cannot tell two targets apart, so XLNet predicts from a
target-aware g(x_{z_<t}, z_t) (eq 29), computed by **two-stream self-attention**:

* the content stream h_{z_t} attends to x_{z_<=t} (its own token included), as a Transformer;
* the query stream g_{z_t} attends to the content x_{z_<t} but not x_{z_t}; it starts from one
  trained vector w (``mask_emb``) at the target's position, and makes the prediction.

Both streams share the layers' weights. Attention is Transformer-XL's relative attention
(``transformer_xl.RelativePositionAttention``) with distances in both directions, plus relative
segment encodings: a learnt term for "same segment or not" (``XLNetRelativeAttention``); a
memory of the previous segment (``mems``) is read as in Transformer-XL.

Masks and targets are given exactly as HuggingFace's ``XLNetModel`` takes them:
``perm_mask`` (batch, T, T), 1 where query i may *not* attend key j (the query stream's mask; the
content stream may also see itself), and ``target_mapping`` (batch, num_predict, T), one-hot
rows naming the position each query-stream row predicts. ``permutation_inputs`` builds both from
orders as the paper's code does; ``sample_orders`` draws the orders.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import Tensor, concatenate, stack, tensor, zeros
from ..autograd.random import rng
from ..nn import (Dropout, Embedding, FeedForward, LayerNorm, Module, ModuleList,
                  MultiHeadAttention, Parameter, TransformerLayer, init)
from ..nn.outputs import ModelOutput
from .transformer_xl import (RelativePositionAttention, decode, extended_context,
                             relative_position_encoding)
from .configs.xlnet import XLNetConfig, _HF_ACTIVATIONS

__all__ = ["XLNetConfig", "XLNetLMHeadModel", "XLNetLayer", "XLNetModel",
           "XLNetRelativeAttention", "permutation_inputs", "permutation_lm_loss",
           "sample_orders", "span_mask", "span_orders"]


# ---- two-stream relative attention (eq 28-29) ----------------------------------------------------
class XLNetRelativeAttention(RelativePositionAttention):
    r"""Transformer-XL's relative attention (``RelativePositionAttention``: content, position and
    the global biases u, v) with XLNet's relative segment encoding added to the scores::

        A_ij += (q_i + b) . s_ij,   s_ij = s_+ if i and j are in one segment, s_- otherwise

    ``segment_bias`` is b (HuggingFace's r_s_bias, (heads, d_k)), ``segment_embedding`` holds s_+
    and s_- ((2, heads, d_k), seg_embed). ``different_segments`` (batch, 1, q_time, k_time), 1.0
    where query and key lie in different segments; None: no segment term."""

    def __init__(self, d_model: int, num_heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, num_heads, head_dim, dropout)
        self.segment_bias = Parameter(zeros(num_heads, head_dim))
        self.segment_embedding = Parameter(zeros(2, num_heads, head_dim))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None, need_weights: bool = False,
                relative_positions: Tensor | None = None,
                different_segments: Tensor | np.ndarray | None = None):
        if different_segments is not None:
            both = (q + self.segment_bias.unsqueeze(1)) @ self.segment_embedding.permute(1, 2, 0)
            same, other = both[..., :1], both[..., 1:]
            segment = (same + (other - same) * different_segments) * (1.0 / math.sqrt(
                self.head_dim))
            bias = segment if bias is None else bias + segment
        return super().forward(q, k, v, mask=mask, bias=bias, causal=causal, key_mask=key_mask,
                               need_weights=need_weights, relative_positions=relative_positions)


@cookbook.equation(29)
class XLNetLayer(TransformerLayer):
    """One XLNet layer, both streams through the same weights (post-LN, as the paper)::

        h_{z_t} <- Attention(Q = h_{z_t}, KV = h_{z_<=t})                  content stream
        g_{z_t} <- Attention(Q = g_{z_t}, KV = h_{z_<t})                   query stream (eq 29)

    each followed by the feed-forward network, in residual connections. Keys and values are the
    content stream h over the memory and the segment (``[SG(memory), h]``). The query stream's
    rows sit at the positions ``target_mapping`` names (one-hot (batch, num_predict, time)):
    they are placed there, attend, and are read back; without it there is one per position."""

    def __init__(self, d_model: int, n_head: int, d_head: int, d_inner: int, dropout: float = 0.0,
                 activation: str = "gelu", layer_norm_eps: float = 1e-12) -> None:
        attention = MultiHeadAttention(
            d_model, n_head, bias=False, head_dim=d_head,
            core=XLNetRelativeAttention(d_model, n_head, d_head, dropout))
        super().__init__(attention, FeedForward(d_model, d_inner, dropout, activation),
                         functools.partial(LayerNorm, d_model, eps=layer_norm_eps),
                         dropout=dropout)

    def forward(self, h: Tensor, g: Tensor | None = None, memory=None, *,
                relative_positions: Tensor, content_mask: Tensor | np.ndarray | None = None,
                query_mask: Tensor | np.ndarray | None = None,
                different_segments: Tensor | np.ndarray | None = None,
                target_mapping: Tensor | np.ndarray | None = None):
        """(h, g) -> (h', g'); ``g`` None skips the query stream. Masks are bool (batch, 1,
        time, mem_time + time), True where the query may attend."""
        context = extended_context(memory, h)
        attend = dict(key=context, relative_positions=relative_positions,
                      different_segments=different_segments)
        h_next = self.residual(h, self.norm1, self.self_attn, mask=content_mask, **attend)
        h_next = self.residual(h_next, self.norm2, self.feed_forward)
        if g is None:
            return h_next, None
        g_next = self.residual(g, self.norm1, self.query_stream, mask=query_mask,
                               target_mapping=target_mapping, **attend)
        return h_next, self.residual(g_next, self.norm2, self.feed_forward)

    def query_stream(self, g, *, target_mapping, **attention_kwargs):
        """The query stream's attention: each row of ``g`` moved to the position it predicts
        (target_mapping^T g), attending from there, moved back (target_mapping z). The
        projections have no bias, so this is the attention of each target at its position."""
        if target_mapping is None:
            return self.self_attn(g, **attention_kwargs)
        placed = target_mapping.permute(0, 2, 1) @ g
        return target_mapping @ self.self_attn(placed, **attention_kwargs)


# ---- masks and targets of the permutation language model (eq 26-27) ------------------------------
def sample_orders(batch, time, generator=None):
    """One factorisation order z per sequence, uniform over the permutations of range(time)
    (eq 27's z ~ Z_T), (batch, time) int64, drawn from ``generator`` (default: the library's,
    which training checkpoints save)."""
    keys = rng(generator).random((checks.positive_int(batch, "batch", "sample_orders"),
                                  checks.positive_int(time, "time", "sample_orders")))
    return np.argsort(keys, axis=-1)


def span_mask(time, num_predict, max_span=5, context_ratio=6, generator=None):
    """Which of ``time`` positions to predict, as the XLNet paper's pretraining picks them
    (span-based prediction, its code's ``_sample_mask``): spans of n consecutive tokens, n drawn
    from 1 .. ``max_span`` with probability proportional to 1/n, each inside a stretch of
    ``context_ratio`` * n unpredicted tokens (a random part of it before the span, the rest
    after), from left to right until ``num_predict`` tokens are chosen or the text ends; single
    tokens drawn uniformly make up any shortfall. Bool (time,), ``num_predict`` of them True."""
    where = "span_mask"
    time = checks.positive_int(time, "time", where)
    num_predict = checks.positive_int(num_predict, "num_predict", where)
    max_span = checks.positive_int(max_span, "max_span", where)
    context_ratio = checks.int_at_least(context_ratio, 0, "context_ratio", where)
    if num_predict > time:
        raise ValueError(f"{where}: num_predict={num_predict} is more than the {time} positions")
    draw = rng(generator)
    lengths = np.arange(1, max_span + 1)
    mask, chosen, cursor = np.zeros(time, dtype=bool), 0, 0
    while cursor < time and chosen < num_predict:
        n = min(int(draw.choice(lengths, p=(1 / lengths) / (1 / lengths).sum())),
                num_predict - chosen)
        context = n * context_ratio
        before = int(draw.integers(context)) if context else 0
        start = cursor + before
        if start + n > time:
            break
        mask[start:start + n] = True
        chosen += n
        cursor = start + n + context - before
    if chosen < num_predict:
        mask[draw.choice(np.flatnonzero(~mask), num_predict - chosen, replace=False)] = True
    return mask


def span_orders(batch, time, num_predict, max_span=5, context_ratio=6, generator=None):
    """Factorisation orders for span-based prediction (batch, time) int64: the positions of a
    ``span_mask`` per sequence last, in a random order, after the others (the context, which
    every target sees), so that ``permutation_inputs(orders, num_predict)`` predicts the spans:
    a span's tokens together, each seeing the context and the targets before it in the order."""
    draw = rng(generator)
    orders = []
    for _ in range(checks.positive_int(batch, "batch", "span_orders")):
        mask = span_mask(time, num_predict, max_span, context_ratio, generator)
        orders.append(np.concatenate([draw.permutation(np.flatnonzero(~mask)),
                                      draw.permutation(np.flatnonzero(mask))]))
    return np.stack(orders).astype(np.int64)


@cookbook.equation(27)
def permutation_inputs(orders, num_predict):
    """``perm_mask`` (batch, T, T) and ``target_mapping`` (batch, num_predict, T), float32 as
    HuggingFace's XLNet takes them, and ``targets`` (batch, num_predict) positions, for the
    factorisation ``orders`` (batch, T), each a permutation of range(T).

    Partial prediction (section 2.3): the last ``num_predict`` positions of each order are the
    targets (K = T / num_predict), predicted in order; the rest is context. As in the paper's
    code, a target sees the context and the targets before it in z (query stream: not itself;
    ``perm_mask[b, i, j] = 1`` where query i may not see key j), and context positions see each
    other and no target. ``target_mapping[b, n]`` is one-hot at the n-th target."""
    orders = np.asarray(orders)
    if orders.ndim != 2 or orders.shape[1] == 0 or orders.dtype.kind not in "iu":
        raise ValueError(f"permutation_inputs: orders must be integer (batch, time), got shape "
                         f"{orders.shape}")
    batch, time = orders.shape
    bad = np.flatnonzero((np.sort(orders, axis=1) != np.arange(time)).any(axis=1))
    if bad.size:
        raise ValueError(f"permutation_inputs: each order must be a permutation of "
                         f"range({time}) (every position once), got {orders[bad[0]].tolist()}")
    num_predict = checks.positive_int(num_predict, "num_predict", "permutation_inputs")
    if num_predict > time:
        raise ValueError(f"permutation_inputs: num_predict={num_predict} is more than the "
                         f"{time} positions")
    targets = orders[:, time - num_predict:]
    rank = np.full((batch, time), -1)                  # context: before every target
    np.put_along_axis(rank, targets, np.arange(num_predict)[None].repeat(batch, 0), axis=1)
    is_target = rank >= 0
    own = np.where(is_target, rank, 0)                 # a context query sees no target
    hidden = is_target[:, None, :] & (rank[:, None, :] >= own[:, :, None])
    target_mapping = np.zeros((batch, num_predict, time), dtype=np.float32)
    np.put_along_axis(target_mapping, targets[:, :, None], 1.0, axis=2)
    return hidden.astype(np.float32), target_mapping, targets


# ---- the model -----------------------------------------------------------------------------------
def _float_array(values, name, shape, where):
    array = values.numpy() if isinstance(values, Tensor) else np.asarray(values)
    if array.shape != shape:
        raise ValueError(f"{where}: {name} must have shape {shape}, got {array.shape}")
    if array.size and not np.isin(array, (0, 1)).all():
        raise ValueError(f"{where}: {name} must hold only 0 and 1")
    return array.astype(bool)


class XLNetModel(Module):
    """The XLNet body (HuggingFace's ``XLNetModel``): word embeddings, ``n_layer``
    ``XLNetLayer``s over both streams, relative positions in both directions shared by all
    layers.

    ``forward(input_ids, attention_mask=None, mems=None, perm_mask=None, target_mapping=None,
    token_type_ids=None, use_mems=None)``: ``attention_mask`` (batch, T) 1 on tokens, 0 on
    padding; ``perm_mask`` (batch, T, T) 1 where query i may not see key j (the query stream;
    the content stream also sees itself); no mask at all: full bidirectional attention.
    ``target_mapping`` (batch, num_predict, T) one-hot: with it the query stream runs and
    ``last_hidden_state`` is g (batch, num_predict, d_model), otherwise h (batch, T, d_model).
    ``token_type_ids`` (batch, T) segment ids (memory counts as segment 0). ``mems`` from the
    previous segment; ``use_mems`` (default: in eval mode ``use_mems_eval``, in training
    ``use_mems_train``) returns the next ones as ``mems``."""

    def __init__(self, config: XLNetConfig) -> None:
        super().__init__()
        self.config = config
        self.word_embedding = Embedding(config.vocab_size, config.d_model)
        self.mask_emb = Parameter(zeros(1, 1, config.d_model))
        self.layers = ModuleList([
            XLNetLayer(config.d_model, config.n_head, config.d_head, config.d_inner,
                       config.dropout, _HF_ACTIVATIONS[config.ff_activation],
                       config.layer_norm_eps) for _ in range(config.n_layer)])
        self.dropout = Dropout(config.dropout)
        self.reset_parameters()

    def reset_parameters(self):
        """N(0, initializer_range^2) for every weight, bias vector and w; zero biases of the
        feed-forward layers; unit LayerNorm gains (HuggingFace's initialisation)."""
        std = self.config.initializer_range
        init.normal_(self.word_embedding.weight, std=std)
        init.normal_(self.mask_emb, std=std)
        for layer in self.layers:
            attention, core = layer.self_attn, layer.self_attn.core
            for weight in (attention.q_proj.weight, attention.k_proj.weight,
                           attention.v_proj.weight, attention.out_proj.weight,
                           core.position_proj.weight, core.content_bias, core.position_bias,
                           core.segment_bias, core.segment_embedding,
                           layer.feed_forward.linear1.weight, layer.feed_forward.linear2.weight):
                init.normal_(weight, std=std)
            init.zeros_(layer.feed_forward.linear1.bias)
            init.zeros_(layer.feed_forward.linear2.bias)

    def masks(self, batch, time, memory_time, attention_mask, perm_mask, where):
        """(content mask, query mask), bool (batch, 1, time, memory_time + time), True where the
        query may attend; (None, None) for full attention. Memory is visible, except to
        ``attn_type="uni"`` with ``same_length``."""
        uni = self.config.attn_type == "uni"
        if attention_mask is None and perm_mask is None and not uni:
            return None, None
        hidden = np.zeros((batch, time, time), dtype=bool)
        if attention_mask is not None:
            hidden |= ~_float_array(attention_mask, "attention_mask", (batch, time),
                                    where)[:, None, :]
        if perm_mask is not None:
            hidden |= _float_array(perm_mask, "perm_mask", (batch, time, time), where)
        query = np.concatenate([np.ones((batch, time, memory_time), dtype=bool), ~hidden], -1)
        if uni:
            query &= self.one_way_mask(time, memory_time)
        itself = np.arange(time)[:, None] + memory_time == np.arange(memory_time + time)
        return (query | itself)[:, None], query[:, None]

    def one_way_mask(self, time, memory_time):
        """``attn_type="uni"``: query i (at key position memory_time + i) sees keys j <=
        memory_time + i; with ``same_length`` also only j >= i, so that every query sees
        memory_time + 1 keys. Bool (time, memory_time + time), True where it may attend."""
        query, key = np.arange(time)[:, None], np.arange(memory_time + time)[None, :]
        visible = key <= query + memory_time
        return visible & (key >= query) if self.config.same_length else visible

    def positions(self, batch, time, memory_time, like):
        """R for the distances the queries need: k_time .. 1 - time (``"bi"``) or k_time .. 0
        (``"uni"``), clamped to ``clamp_len``; with ``bi_data`` (batch, rows, d_model), the
        second half of the batch reading every distance negated."""
        config = self.config
        table = relative_position_encoding(
            memory_time + time, config.d_model, max(config.clamp_len, 0), like.dtype,
            like.backend, q_time=time if config.attn_type == "bi" else 1)
        if not config.bi_data:
            return table
        if batch % 2:
            raise ValueError(f"{type(self).__name__}: bi_data reads half of the batch forwards "
                             f"and half backwards, so the batch must be even, got {batch}")
        half = config.d_model // 2
        backwards = table * tensor(np.r_[-np.ones(half), np.ones(config.d_model - half)],
                                   dtype=like.dtype, backend=like.backend)   # sin(-x) = -sin x
        return stack([table] * (batch // 2) + [backwards] * (batch // 2))

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None, mems: list[Tensor] | None = None,
                perm_mask: Tensor | np.ndarray | None = None,
                target_mapping: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None, use_mems: bool | None = None):
        name, config = type(self).__name__, self.config
        ids = checks.token_ids(input_ids, config.vocab_size, name)
        batch, time = ids.shape
        like = self.mask_emb
        memory_time = checks.memories(mems, config.n_layer, batch, config.d_model, like.dtype,
                                      name)
        content_mask, query_mask = self.masks(batch, time, memory_time, attention_mask,
                                              perm_mask, name)
        h = self.dropout(self.word_embedding(ids))
        g = mapping = None
        if target_mapping is not None:
            mapping = target_mapping.numpy() if isinstance(target_mapping, Tensor) \
                else np.asarray(target_mapping)
            if mapping.ndim != 3 or mapping.shape[0] != batch or mapping.shape[2] != time:
                raise ValueError(f"{name}: target_mapping must have shape (batch, num_predict, "
                                 f"time) = ({batch}, num_predict, {time}), got {mapping.shape}")
            mapping = tensor(mapping, dtype=like.dtype, backend=like.backend)
            g = self.dropout(self.mask_emb.expand(batch, mapping.shape[1], config.d_model))
        different = None
        if token_type_ids is not None:
            types = checks.ids_array(token_type_ids, "token_type_ids", name, shape=(batch, time))
            keys = np.concatenate([np.zeros((batch, memory_time), dtype=types.dtype), types], 1)
            different = tensor((types[:, None, :, None] != keys[:, None, None, :]),
                               dtype=like.dtype, backend=like.backend)
        positions = self.dropout(self.positions(batch, time, memory_time, like))
        use_mems = (config.use_mems_train if self.training else config.use_mems_eval) \
            if use_mems is None else use_mems
        new_mems = []
        for i, layer in enumerate(self.layers):
            memory = None if mems is None else mems[i]
            if use_mems:
                new_mems.append(self.next_memory(h, memory))
            h, g = layer(h, g, memory, relative_positions=positions, content_mask=content_mask,
                         query_mask=query_mask, different_segments=different,
                         target_mapping=mapping)
        return ModelOutput(last_hidden_state=self.dropout(h if g is None else g),
                           mems=new_mems if use_mems else None)

    def next_memory(self, h, memory):
        """A layer's input states (the first ``reuse_len`` positions, when set) appended to its
        memory, cut from the graph, the last ``mem_len`` positions (all of them when ``mem_len``
        is None or 0)."""
        if self.config.reuse_len:
            h = h[:, :self.config.reuse_len]
        states = h if memory is None else concatenate([memory, h], axis=1)
        length = self.config.mem_len
        return states.detach()[:, -length:] if length else states.detach()


class XLNetLMHeadModel(Module):
    """XLNet's language model (HuggingFace's ``XLNetLMHeadModel``): ``XLNetModel`` and an output
    layer tied to the word embeddings plus a bias: p(x | g) = softmax(e(x)^T g + b) (eq 29) from
    the query stream when ``target_mapping`` is given, from the content stream h otherwise (the
    position-blind form of eq 28).

    ``forward`` takes ``XLNetModel``'s arguments and ``labels`` (batch, num_predict) with
    ``target_mapping`` (the predicted tokens), or (batch, T) without; -100 is ignored. Returns
    ``logits``, ``mems`` and, with labels, ``loss`` (the mean cross-entropy, as HuggingFace; with
    ``config.permutation_k`` and neither mask, the permutation objective)."""

    def __init__(self, config: XLNetConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = XLNetModel(config)
        self.lm_bias = Parameter(zeros(config.vocab_size))

    @cookbook.equation(28, 29)
    def lm_logits(self, hidden):
        """e(x)^T h + b for every token x: the softmax's logits (eq 28 on h, eq 29 on g)."""
        return F.linear(hidden, self.transformer.word_embedding.weight, self.lm_bias)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None, mems: list[Tensor] | None = None,
                perm_mask: Tensor | np.ndarray | None = None,
                target_mapping: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None, use_mems: bool | None = None):
        if labels is not None and perm_mask is None and target_mapping is None \
                and self.config.permutation_k is not None:
            num_predict = max(1, np.shape(input_ids)[-1] // self.config.permutation_k)
            return permutation_lm_loss(self, input_ids, num_predict, token_type_ids=token_type_ids,
                                       mems=mems)
        out = self.transformer(input_ids, attention_mask, mems, perm_mask, target_mapping,
                               token_type_ids, use_mems)
        logits = self.lm_logits(out.last_hidden_state)
        loss = None
        if labels is not None:
            labels = checks.ids_array(labels, "labels", type(self).__name__,
                                      shape=logits.shape[:2])
            loss = F.cross_entropy(logits, labels)
        return ModelOutput(loss=loss, logits=logits, mems=out.mems)

    def generate(self, input_ids, max_new_tokens=20, *, do_sample=False, temperature=1.0,
                 top_k=None, top_p=None, repetition_penalty=1.0, eos_token_id=None,
                 generator=None, streamer=None):
        """Continue ``input_ids`` (batch, time) left to right, as HuggingFace does: each step
        appends a placeholder that no position may see (``perm_mask``) and predicts it through
        the query stream (``target_mapping``), then ``decoding.next_tokens`` picks the token.
        Rows stop after ``eos_token_id`` (default ``config.eos_token_id``) and are padded
        with it."""
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        checks.int_at_least(max_new_tokens, 0, "max_new_tokens", f"{name}.generate")

        def next_logits(ids):
            batch, time = ids.shape[0], ids.shape[1] + 1
            perm_mask = np.zeros((batch, time, time), dtype=np.float32)
            perm_mask[:, :, -1] = 1.0                          # nobody sees the placeholder
            target_mapping = np.zeros((batch, 1, time), dtype=np.float32)
            target_mapping[:, 0, -1] = 1.0                     # which is predicted
            placeholder = np.zeros((batch, 1), dtype=np.int64)
            return self(np.concatenate([ids, placeholder], 1), perm_mask=perm_mask,
                        target_mapping=target_mapping, use_mems=False).logits[:, 0].numpy()

        with self.inference():
            return decode(next_logits, ids, max_new_tokens,
                          self.config.eos_token_id if eos_token_id is None else eos_token_id,
                          streamer, do_sample=do_sample, temperature=temperature, top_k=top_k,
                          top_p=top_p, repetition_penalty=repetition_penalty,
                          generator=generator)


@cookbook.equation(26, 27)
def permutation_lm_loss(model, input_ids, num_predict, orders=None, generator=None,
                        token_type_ids=None, mems=None):
    """XLNet's pretraining loss (eq 26-27), one sampled order per sequence as the paper's
    Monte-Carlo estimate of E_z: -1/(batch num_predict) sum_b sum_t log p(x_{z_t} | x_{z_<t})
    over the last ``num_predict`` steps of each order (partial prediction). ``orders``
    (batch, T) default to ``sample_orders(batch, T, generator)``, or to ``span_orders`` (spans
    of up to ``config.span_max_len`` tokens predicted together) when that is set;
    ``token_type_ids`` and
    ``mems`` (the previous segment's, visible to every position) go to the model. Returns the
    ``ModelOutput`` of ``model`` (an ``XLNetLMHeadModel``) with ``loss``."""
    ids = checks.token_ids(input_ids, model.config.vocab_size, "permutation_lm_loss")
    if orders is None and model.config.span_max_len:
        orders = span_orders(*ids.shape, num_predict, model.config.span_max_len,
                             generator=generator)
    elif orders is None:
        orders = sample_orders(*ids.shape, generator)
    perm_mask, target_mapping, targets = permutation_inputs(orders, num_predict)
    if np.shape(orders) != ids.shape:
        raise ValueError(f"permutation_lm_loss: orders of shape {np.shape(orders)} must match "
                         f"input_ids {ids.shape}")
    labels = np.take_along_axis(ids, targets, axis=1)
    return model(ids, mems=mems, perm_mask=perm_mask, target_mapping=target_mapping,
                 labels=labels, token_type_ids=token_type_ids, use_mems=False)
