"""Transformer-XL (Dai et al., 2019, "Transformer-XL: Attentive Language Models Beyond a
Fixed-Length Context"): the survey's section VIII-B, eq 86-91.

A causal language model (eq 86, P(x) = prod_t P(x_t | x_<t)) that reads a long text one segment at
a time and carries each layer's hidden states over from one segment to the next:

* h~_{tau+1}^{n-1} = [SG(h_tau^{n-1}) o h_{tau+1}^{n-1}]          (eq 87: the memory, no gradient)
* q, k, v = h_{tau+1}^{n-1} W_q^T, h~_{tau+1}^{n-1} W_k^T, h~ W_v^T (eq 88: queries from the
                                                                  segment, keys from both)
* h_{tau+1}^n = Transformer-Layer(q, k, v)                          (eq 89)

The survey's eq 88 writes all three from the extended context h~; the paper (and this code) takes
the queries from the current segment only. Absolute positions cannot say where a memory sits
(both segments would start at 0), so attention scores use relative positions (eq 91, against the
absolute form eq 90)::

    A^rel_ij = q_i . k_j + q_i . W_R R_{i-j} + u . k_j + v . W_R R_{i-j}
               (a)         (b)                 (c)       (d)

with q_i = W_q E_{x_i}, k_j = W_{k,E} E_{x_j}, R the sinusoid table of the distance i - j (not
learnt), u and v two learnt vectors per head (the global content and position biases). Terms (a)
and (c) are (q_i + u) . k_j; terms (b) and (d) are (q_i + v) . W_R R_{i-j}, computed for every
query against every distance as one matrix product and moved into place by the "relative shift"
(``relative_shift``), so the whole score matrix costs O(n^2) as for absolute attention.

The pieces, each an addition to the Transformer toolkit rather than a copy of it:

* ``RelativePositionAttention``: an attention core (``nn.FullAttention`` overriding ``forward``)
  that turns (b) + (d) into the additive score bias of ``F.scaled_dot_product_attention``;
* ``TransformerXLLayer``: an ``nn.TransformerLayer`` whose self-attention reads the memory too;
* ``AdaptiveEmbedding`` and ``AdaptiveLogSoftmax``: the adaptive input (Baevski & Auli, 2019) and
  adaptive softmax (Grave et al., 2017) of the paper's large-vocabulary runs: the vocabulary is
  cut into a frequent head and rarer clusters with narrower vectors (``cutoffs``, ``div_val``);
  with no cutoffs they are a plain embedding and a plain softmax;
* ``TransfoXLModel`` and ``TransfoXLLMHeadModel``, HuggingFace's names, so that transformers 4.x
  ``TransfoXLLMHeadModel`` checkpoints load (the key map is in
  ``models/families/transformer_xl.py``).

Memories: ``model(ids, mems=mems)`` returns ``.mems`` to feed with the next segment, each layer's
input hidden states over the last ``mem_len`` positions (``eval_mem_len`` in eval mode: the paper
evaluates with a longer memory than it trains with). ``mems=None`` is an empty memory (HuggingFace
starts from ``mem_len`` zero vectors instead; pass those to reproduce it).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import checks, cookbook, decoding
from .. import functional as F
from ..autograd import Tensor, concatenate, pad, tensor, zeros
from ..autograd.ops_fused import FusedFunction
from ..nn import (Dropout, Embedding, FeedForward, FullAttention, LayerNorm, Linear, Module,
                  ModuleDict, ModuleList, MultiHeadAttention, Parameter, TransformerLayer, init)
from ..nn.outputs import ModelOutput
from .configs.transformer_xl import TransfoXLConfig

__all__ = ["AdaptiveEmbedding", "AdaptiveLogSoftmax", "RelativePositionAttention",
           "TransfoXLConfig", "TransfoXLLMHeadModel", "TransfoXLModel", "TransformerXLLayer",
           "absolute_position_scores", "decode", "extended_context", "relative_position_encoding",
           "relative_shift"]


# ---- relative positions (eq 91) ------------------------------------------------------------------
def relative_position_encoding(k_time, d_model, clamp_len=0, dtype=None, backend=None, *,
                               q_time=None):
    """R: row m holds the sinusoid of a distance, the largest first, [sin(dist / 10000^(2i/d))
    ..., cos(dist / 10000^(2i/d)) ...] (sines then cosines, not interleaved, as the papers' code).
    Transformer-XL's distances are k_time - 1 .. 0 (k_time rows); with ``q_time`` (XLNet, whose
    queries also see later keys) k_time .. 1 - q_time (k_time + q_time rows). Distances beyond
    +-``clamp_len`` > 0 are clamped."""
    lowest = 0 if q_time is None else 1 - q_time
    top = k_time - 1 if q_time is None else k_time
    distance = np.arange(top, lowest - 1, -1, dtype=np.float64)
    if clamp_len > 0:
        distance = np.clip(distance, -clamp_len, clamp_len)
    inverse_frequency = 1.0 / 10000 ** (np.arange(0.0, d_model, 2.0) / d_model)
    angles = distance[:, None] * inverse_frequency[None, :]
    return tensor(np.concatenate([np.sin(angles), np.cos(angles)], axis=-1), dtype=dtype,
                  backend=backend)


def relative_shift(scores, k_time):
    """Move scores by distance into scores by key, the paper's O(n^2) trick with no gather.

    ``scores`` (..., q_time, width): column m holds distance k_time - m (k_time, k_time - 1, ...).
    The result (..., q_time, k_time): column j holds the distance (k_time - q_time) + i - j from
    query i (the last q_time of the k_time positions) to key j, i.e. row i is the window of row i
    of ``scores`` that starts at column q_time - i. The trick: read the (q_time, width) block as
    (width, q_time), drop the first row, read the rest as (q_time, width - 1) and keep the first
    k_time columns. Transformer-XL's distances k_time - 1 .. 0 get a zero column in front
    (``pad``) first; XLNet's k_time .. 1 - q_time cover every (i, j). Entries whose distance
    ``scores`` does not hold (keys after the query, for Transformer-XL, masked by causality) hold
    other values.

    The result is a view of ``scores`` (nothing is copied); its gradient is written into the
    windows of a zero array in one pass (``_RelativeShift``)."""
    return _RelativeShift.apply(scores, k_time=k_time)


def _shifted(scores, k_time):
    """The reshapes and slices of ``relative_shift``, on an array (views) or on a tensor."""
    *lead, q_time, width = scores.shape
    rows = scores.reshape(*lead, width, q_time)[..., 1:, :]
    return rows.reshape(*lead, q_time, width - 1)[..., :k_time]


class _RelativeShift(FusedFunction):
    """``relative_shift`` as one node: the forward is a view, the backward one pass that writes
    the gradient of row i into the window of row i it came from (the chain of reshapes and
    slices, ``composite``, would scatter it into zeros twice)."""

    @staticmethod
    def forward(ctx, scores, *, k_time):
        ctx.save_inputs(0)
        ctx.static = {"k_time": k_time}
        return _shifted(ctx.backend.xp.ascontiguousarray(scores), k_time)

    @staticmethod
    def fast_backward(ctx, grad):
        (scores,) = ctx.saved_tensors
        out = ctx.backend.xp.zeros(scores.shape, dtype=grad.dtype)
        _shifted(out, ctx.static["k_time"])[...] = grad   # views of ``out``: written in place
        return (out,)

    @staticmethod
    def composite(scores, *, k_time):
        return _shifted(scores, k_time)


@cookbook.equation(90)
def absolute_position_scores(E, U, W_q, W_k, *, terms=False):
    """The attention scores of a Transformer with absolute positions, split into the four terms
    that eq 91 replaces (Dai et al., section 3.3)::

        A^abs_ij = E_xi^T W_q^T W_k E_xj + E_xi^T W_q^T W_k U_j + U_i^T W_q^T W_k E_xj
                   + U_i^T W_q^T W_k U_j                                        (eq 90)
                   (a) content-content, (b) content-position, (c) position-content,
                   (d) position-position

    i.e. (W_q (E_xi + U_i)) . (W_k (E_xj + U_j)) for the inputs E + U of the first layer.
    ``E`` (..., T, d) the token embeddings, ``U`` (T, d) the position encodings of positions
    0 .. T-1, ``W_q`` and ``W_k`` (d_k, d) as a ``Linear`` stores them. Returns A^abs (..., T, T)
    (before the 1/sqrt(d_k) scale and the softmax), or with ``terms=True`` the four terms.

    Eq 91 keeps (a), turns U_j into the sinusoid R_{i-j} of the distance with its own W_{k,R}
    in (b) and (d), and U_i^T W_q^T, which would give the query's absolute position, into the
    learnt vectors u in (c) and v in (d)."""
    if E.ndim < 2 or U.ndim != 2 or tuple(U.shape) != tuple(E.shape[-2:]):
        raise ValueError(f"absolute_position_scores: U must be (T, d) = {tuple(E.shape[-2:])} "
                         f"for E of shape {tuple(E.shape)}, got {tuple(U.shape)}")
    if W_q.ndim != 2 or tuple(W_q.shape) != tuple(W_k.shape) or W_q.shape[1] != E.shape[-1]:
        raise ValueError(f"absolute_position_scores: W_q {tuple(W_q.shape)} and W_k "
                         f"{tuple(W_k.shape)} must both be (d_k, d) with d = {E.shape[-1]}")
    query_content, query_position = F.linear(E, W_q), F.linear(U, W_q)      # W_q E_xi, W_q U_i
    key_content, key_position = F.linear(E, W_k), F.linear(U, W_k)          # W_k E_xj, W_k U_j
    four = (query_content @ key_content.swapaxes(-1, -2),                  # (a)
            query_content @ key_position.swapaxes(-1, -2),                 # (b)
            query_position @ key_content.swapaxes(-1, -2),                 # (c)
            query_position @ key_position.swapaxes(-1, -2))                # (d)
    return four if terms else four[0] + four[1] + four[2] + four[3]


@cookbook.equation(91)
class RelativePositionAttention(FullAttention):
    r"""The attention core of Transformer-XL: scores by relative position (eq 91)::

        A_ij = (q_i + u) . k_j + shift((q_i + v) . W_R R)_ij,   z = softmax(A / sqrt(d_k)) V

    terms (a) + (c) as the content scores of ``FullAttention`` (queries moved by u), terms (b) +
    (d) as its additive score bias. ``forward`` takes ``relative_positions`` R (k_time + 1 or
    k_time rows, d_model) from ``relative_position_encoding``; queries are the last q_time of
    the k_time keys.
    ``content_bias`` is u and ``position_bias`` v (HuggingFace's r_w_bias and r_r_bias), both
    (heads, d_k); ``position_proj`` is W_R.
    """

    def __init__(self, d_model: int, num_heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__(dropout, scale=1.0)   # the queries carry 1/sqrt(d_k) (see forward)
        self.num_heads, self.head_dim = num_heads, head_dim
        self.position_proj = Linear(d_model, num_heads * head_dim, bias=False)
        self.content_bias = Parameter(zeros(num_heads, head_dim))
        self.position_bias = Parameter(zeros(num_heads, head_dim))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None, need_weights: bool = False,
                relative_positions: Tensor | None = None):
        positional = self.position_scores(q, k.shape[2], relative_positions)    # (b) + (d)
        # 1/sqrt(d_k) on the (q_time, d_k) queries rather than on the (q_time, k_time) scores:
        # a pass over the score matrix fewer, forwards and backwards
        content_queries = (q + self.content_bias.unsqueeze(1)) * (1.0 / math.sqrt(self.head_dim))
        return super().forward(content_queries, k, v, mask=mask,                   # (a) + (c)
                               bias=positional if bias is None else bias + positional,
                               causal=causal, key_mask=key_mask, need_weights=need_weights)

    def position_scores(self, q, k_time, relative_positions):
        """(q_i + v) . W_R R_{i-j} / sqrt(d_k), (batch, heads, q_time, k_time), from R of
        ``relative_position_encoding``: (k_time, d_model) for distances k_time - 1 .. 0,
        (k_time + 1, d_model) for k_time .. 0 (XLNet's one-way attention), or (k_time + q_time,
        d_model) for k_time .. 1 - q_time (XLNet); (batch, rows, d_model) gives each sequence
        its own table (XLNet's ``bi_data``)."""
        q_time, d_model = q.shape[2], self.position_proj.in_features
        rows = (k_time, k_time + 1, k_time + q_time)
        if relative_positions is None or relative_positions.ndim not in (2, 3) \
                or relative_positions.shape[-2] not in rows \
                or relative_positions.shape[-1] != d_model \
                or relative_positions.ndim == 3 and relative_positions.shape[0] != q.shape[0]:
            shape = None if relative_positions is None else tuple(relative_positions.shape)
            raise ValueError(f"{type(self).__name__}: relative_positions must have shape "
                             f"([batch,] rows, d_model), rows k_time = {k_time}, k_time + 1 or "
                             f"k_time + q_time = {k_time + q_time}, d_model = {d_model}, batch "
                             f"= {q.shape[0]}; got {shape}")
        *lead, width, _ = relative_positions.shape
        r = self.position_proj(relative_positions).reshape(*lead, width, self.num_heads,
                                                           self.head_dim)
        r = r.permute(0, 2, 3, 1) if lead else r.permute(1, 2, 0)   # ([batch,] heads, d_k, width)
        scaled = (q + self.position_bias.unsqueeze(1)) * (1.0 / math.sqrt(self.head_dim))
        by_distance = scaled @ r                                                  # (.., width)
        if width == k_time:                          # distances from k_time - 1: add k_time
            by_distance = pad(by_distance, [(0, 0)] * 3 + [(1, 0)])
        return relative_shift(by_distance, k_time)

    def extra_repr(self):
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}"


# ---- the layer (eq 87-89) ------------------------------------------------------------------------
@cookbook.equation(87)
def extended_context(memory, x):
    """h~ = [SG(memory) o x] (eq 87): the memory (batch, mem_time, d_model), cut from the graph
    (no gradient reaches the previous segment), before the segment ``x`` (batch, time, d_model)
    on the time axis; ``x`` itself when ``memory`` is None."""
    return x if memory is None else concatenate([memory.detach(), x], axis=1)


@cookbook.equation(87, 88, 89)
class TransformerXLLayer(TransformerLayer):
    """One Transformer-XL layer: causal relative-position self-attention whose keys and values
    come from the memory and the segment, then the feed-forward network, each in a residual
    connection (post-LN, or pre-LN with ``pre_lnorm``)::

        h~ = [SG(memory) o h]                                        (eq 87)
        q, k, v = h W_q^T, h~ W_k^T, h~ W_v^T                       (eq 88)
        h' = LayerNorm(h + RelAttn(q, k, v)); out = LayerNorm(h' + FFN(h'))   (eq 89)

    The projections have no biases (u and v play their part), as in the paper's code."""

    def __init__(self, d_model: int, n_head: int, d_head: int, d_inner: int, dropout: float = 0.0,
                 dropatt: float = 0.0, pre_lnorm: bool = False,
                 layer_norm_eps: float = 1e-5) -> None:
        attention = MultiHeadAttention(
            d_model, n_head, bias=False, head_dim=d_head,
            core=RelativePositionAttention(d_model, n_head, d_head, dropatt))
        super().__init__(attention, FeedForward(d_model, d_inner, dropout, "relu"),
                         functools.partial(LayerNorm, d_model, eps=layer_norm_eps),
                         dropout=dropout, norm_first=pre_lnorm, causal=True)

    def forward(self, x: Tensor, memory=None, *, relative_positions: Tensor,
                head_mask: Tensor | np.ndarray | None = None, attentions=None):
        """``x`` (batch, time, d_model), ``memory`` (batch, mem_time, d_model) or None,
        ``relative_positions`` R (mem_time + time, d_model)."""
        context = extended_context(memory, x)                                        # eq 87
        keys = self.norm1(context) if self.norm_first else context
        x = self.residual(x, self.norm1, self.self_attn, attentions, "self", key=keys,  # eq 88
                          causal=True, head_mask=head_mask, relative_positions=relative_positions)
        return self.residual(x, self.feed_forward_norm, self.feed_forward)             # eq 89


# ---- adaptive input and softmax ------------------------------------------------------------------
def _cluster_bounds(vocab_size, cutoffs):
    bounds = [0, *cutoffs, vocab_size]
    return list(zip(bounds, bounds[1:]))


def _cluster_widths(d_embed, div_val, clusters):
    return [d_embed // div_val ** i if div_val > 1 else d_embed for i in range(clusters)]


class AdaptiveEmbedding(Module):
    """Adaptive input representations (Baevski & Auli, 2019): token ids in cluster i, [l_i, r_i),
    get a vector of width d_embed / div_val^i from their cluster's table, projected to ``d_proj``
    (``projections[i]``, weight (d_proj, width)); every vector is then scaled by sqrt(d_proj).
    ``div_val=1`` is one table of width d_embed (projected only if d_embed != d_proj)."""

    def __init__(self, vocab_size: int, d_embed: int, d_proj: int, cutoffs=(), div_val: int = 1,
                 proj_init_std: float = 0.01) -> None:
        super().__init__()
        self.bounds = _cluster_bounds(vocab_size, cutoffs)
        self.div_val, self.d_proj, self.scale = div_val, d_proj, math.sqrt(d_proj)
        if div_val == 1:
            self.embeddings = ModuleList([Embedding(vocab_size, d_embed)])
            widths = [d_embed] if d_embed != d_proj else []
        else:
            widths = _cluster_widths(d_embed, div_val, len(self.bounds))
            self.embeddings = ModuleList([Embedding(high - low, w)
                                          for (low, high), w in zip(self.bounds, widths)])
        self.projections = ModuleList([Linear(w, d_proj, bias=False) for w in widths])
        for projection in self.projections:
            init.normal_(projection.weight, std=proj_init_std)

    def forward(self, ids: Tensor | np.ndarray):
        if self.div_val == 1:
            out = self.embeddings[0](ids)
            if len(self.projections):
                out = self.projections[0](out)
            return out * self.scale
        out = None
        for (low, high), table, projection in zip(self.bounds, self.embeddings, self.projections):
            inside = (ids >= low) & (ids < high)
            vectors = projection(table(np.where(inside, ids - low, 0)))
            vectors = vectors * tensor(inside[..., None], dtype=vectors.dtype,
                                       backend=vectors.backend)
            out = vectors if out is None else out + vectors
        return out * self.scale

    def output_weights(self):
        """Each cluster's (vocabulary rows, width) weights and (d_proj, width) projection or None,
        for a softmax tied to this embedding."""
        if self.div_val == 1:
            table = self.embeddings[0].weight
            projection = self.projections[0].weight if len(self.projections) else None
            return [(table[low:high], projection) for low, high in self.bounds]
        return [(table.weight, projection.weight)
                for table, projection in zip(self.embeddings, self.projections)]


class AdaptiveLogSoftmax(Module):
    """The adaptive softmax (Grave et al., 2017) with the output weights of an
    ``AdaptiveEmbedding`` (tied, as in Transformer-XL): the head softmax scores the tokens of
    cluster 0 and one entry per other cluster; log P(token in cluster i) = log P_head(cluster i) +
    log P_i(token), P_i a softmax over the cluster with its own (narrower) vectors. With no cutoffs
    this is log softmax(h W^T + b).

    Owns the biases (one per cluster), the head's cluster vectors and biases, and the projections
    d_proj -> width of the clusters whose ``tie_projs`` entry is False (weight (width, d_proj)); the
    others use the embedding's projection. ``forward(hidden, embedding)`` returns log-probabilities
    over the whole vocabulary (..., vocab_size); ``target_log_probs(hidden, embedding, targets)``
    only those of the targets, computing each tail cluster at the positions whose target lies in it
    (the adaptive softmax's saving: the rare clusters are scored for few positions)."""

    def __init__(self, vocab_size: int, d_embed: int, d_proj: int, cutoffs=(), div_val: int = 1,
                 tie_projs=None, proj_init_std: float = 0.01) -> None:
        super().__init__()
        self.bounds = _cluster_bounds(vocab_size, cutoffs)
        clusters = len(self.bounds)
        tie_projs = [False] + [True] * (clusters - 1) if tie_projs is None else tie_projs
        self.div_val = div_val
        widths = _cluster_widths(d_embed, div_val, clusters)
        projected = div_val > 1 or d_embed != d_proj
        if div_val == 1:
            self.bias = Parameter(zeros(vocab_size))
        else:
            self.biases = ModuleList([_Bias(high - low) for low, high in self.bounds])
        if clusters > 1:
            self.cluster_weight = Parameter(zeros(clusters - 1, widths[0]))
            self.cluster_bias = Parameter(zeros(clusters - 1))
        self.projections = ModuleDict({
            str(i): Linear(d_proj, widths[i], bias=False)
            for i in range(clusters) if projected and not tie_projs[i]})
        for projection in self.projections.values():
            init.normal_(projection.weight, std=proj_init_std)

    def cluster_logits(self, hidden, i, weight, tied_projection):
        """h P_i W_i^T + b_i of cluster i (the head gets the cluster entries appended)."""
        bias = (self.bias[self.bounds[i][0]:self.bounds[i][1]] if self.div_val == 1
                else self.biases[i].bias)
        if i == 0 and len(self.bounds) > 1:
            weight = concatenate([weight, self.cluster_weight], axis=0)
            bias = concatenate([bias, self.cluster_bias], axis=0)
        if str(i) in self.projections:
            hidden = self.projections[str(i)](hidden)
        elif tied_projection is not None:
            hidden = hidden @ tied_projection
        return F.linear(hidden, weight, bias)

    def target_log_probs(self, hidden, embedding, targets):
        """log P(target) at each position (..., ) for ``hidden`` (..., d_proj) and ``targets``
        (...) token ids, 0 where the target is -100. The head cluster is scored at every
        position; tail cluster i only at the positions whose target it holds."""
        targets = np.asarray(targets.numpy() if isinstance(targets, Tensor) else targets)
        if targets.shape != tuple(hidden.shape[:-1]):
            raise ValueError(f"{type(self).__name__}.target_log_probs: targets of shape "
                             f"{targets.shape} must be {tuple(hidden.shape[:-1])}")
        flat, ids = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
        counted = ids != -100
        vocab_size = self.bounds[-1][1]
        if ids[counted].size and (ids[counted].min() < 0 or ids[counted].max() >= vocab_size):
            raise ValueError(f"{type(self).__name__}.target_log_probs: target ids must lie in "
                             f"[0, {vocab_size}) or be -100")
        ids = np.where(counted, ids, 0)
        cluster = np.searchsorted([high for _, high in self.bounds], ids, side="right")
        weights = embedding.output_weights()
        head = F.log_softmax(self.cluster_logits(flat, 0, *weights[0]), axis=-1)
        head_size, rows = self.bounds[0][1], np.arange(len(ids))
        column = np.where(cluster == 0, ids, head_size + cluster - 1)   # the token or its cluster
        log_probs = head[rows, column]
        order, tails = [np.flatnonzero(cluster == 0)], []
        for i in range(1, len(self.bounds)):
            at = np.flatnonzero(cluster == i)
            if at.size:
                tail = F.log_softmax(self.cluster_logits(flat[at], i, *weights[i]), axis=-1)
                tails.append(tail[np.arange(at.size), ids[at] - self.bounds[i][0]])
                order.append(at)
        if tails:                        # put each tail's values back at its positions
            placed = concatenate([zeros(order[0].size, dtype=head.dtype, backend=head.backend),
                                  *tails])
            log_probs = log_probs + placed[np.argsort(np.concatenate(order))]
        mask = tensor(counted.astype(np.float64), dtype=head.dtype, backend=head.backend)
        return (log_probs * mask).reshape(targets.shape)

    def forward(self, hidden: Tensor, embedding: Tensor):
        weights = embedding.output_weights()
        head = F.log_softmax(self.cluster_logits(hidden, 0, *weights[0]), axis=-1)
        head_size = self.bounds[0][1]
        pieces = [head[..., :head_size]]
        for i in range(1, len(self.bounds)):
            tail = F.log_softmax(self.cluster_logits(hidden, i, *weights[i]), axis=-1)
            pieces.append(head[..., head_size + i - 1:head_size + i] + tail)
        return pieces[0] if len(pieces) == 1 else concatenate(pieces, axis=-1)


class _Bias(Module):
    """One cluster's output bias (its own module, so that it has a name per cluster)."""

    def __init__(self, size):
        super().__init__()
        self.bias = Parameter(zeros(size))


# ---- the model -----------------------------------------------------------------------------------
@cookbook.equation(86)
class TransfoXLModel(Module):
    """The Transformer-XL body: adaptive input embeddings, then ``n_layer`` ``TransformerXLLayer``s
    over the segment and each layer's memory, sharing one table R of relative positions.

    ``forward(input_ids, mems=None)`` returns ``last_hidden_state`` (batch, time, d_model) and
    ``mems``, the memories for the next segment (None when the memory length is 0)."""

    def __init__(self, config: TransfoXLConfig) -> None:
        super().__init__()
        self.config = config
        self.word_emb = AdaptiveEmbedding(config.vocab_size, config.d_embed, config.d_model,
                                          config.cutoffs, config.div_val, config.proj_init_std)
        self.drop = Dropout(config.dropout)
        self.layers = ModuleList([
            TransformerXLLayer(config.d_model, config.n_head, config.d_head, config.d_inner,
                               config.dropout, config.dropatt, config.pre_lnorm,
                               config.layer_norm_epsilon) for _ in range(config.n_layer)])
        self.reset_parameters()

    def reset_parameters(self):
        """N(0, init_std^2) weights and u, v; zero biases; unit LayerNorm gains."""
        std = self.config.init_std
        for table in self.word_emb.embeddings:
            init.normal_(table.weight, std=std)
        for layer in self.layers:
            attention = layer.self_attn
            for linear in (attention.q_proj, attention.k_proj, attention.v_proj,
                           attention.out_proj, attention.core.position_proj,
                           layer.feed_forward.linear1, layer.feed_forward.linear2):
                init.normal_(linear.weight, std=std)
            init.normal_(attention.core.content_bias, std=std)
            init.normal_(attention.core.position_bias, std=std)
            init.zeros_(layer.feed_forward.linear1.bias)
            init.zeros_(layer.feed_forward.linear2.bias)

    def forward(self, input_ids: Tensor | np.ndarray, mems: list[Tensor] | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False):
        name, config = type(self).__name__, self.config
        ids = checks.token_ids(input_ids, config.vocab_size, name)
        reference = self.layers[0].norm1.weight
        memory_time = checks.memories(mems, config.n_layer, ids.shape[0], config.d_model,
                                      reference.dtype, name)
        heads = (None if head_mask is None
                 else np.broadcast_to(np.asarray(head_mask), (config.n_layer, config.n_head)))
        x = self.drop(self.word_emb(ids))
        # distances k_time .. 0 (q_time=1): one row more than causal queries use, so that the
        # relative shift needs no padding of the scores
        positions = self.drop(relative_position_encoding(
            memory_time + ids.shape[1], config.d_model, config.clamp_len, reference.dtype,
            reference.backend, q_time=1))
        inputs, attentions = [], []
        for i, layer in enumerate(self.layers):
            inputs.append(x)
            record = {} if output_attentions else None
            x = layer(x, None if mems is None else mems[i], relative_positions=positions,
                      head_mask=None if heads is None else heads[i], attentions=record)
            attentions.append(record)
        x = self.drop(x)
        return ModelOutput(
            last_hidden_state=x, mems=self.next_memory(inputs, mems),
            hidden_states=tuple(inputs) + (x,) if output_hidden_states else None,
            attentions=tuple(a["self"] for a in attentions) if output_attentions else None)

    def next_memory(self, inputs, mems):
        """Each layer's input states, appended to its memory, cut from the graph (eq 87's SG),
        the last ``mem_len`` positions (``eval_mem_len`` in eval mode); None when that is 0."""
        length = self.config.memory_length[0 if self.training else 1]
        if length == 0:
            return None
        if mems is not None:
            inputs = [concatenate([memory, h], axis=1) for memory, h in zip(mems, inputs)]
        return [h.detach()[:, -length:] for h in inputs]


class TransfoXLLMHeadModel(Module):
    """Transformer-XL's language model (HuggingFace's ``TransfoXLLMHeadModel``): ``TransfoXLModel``
    and the adaptive softmax tied to its adaptive input (eq 86).

    ``model(input_ids, mems=None, labels=None)`` returns ``logits`` (batch, time, vocab_size),
    which are log-probabilities (HuggingFace's ``prediction_scores``), ``mems`` for the next
    segment and, with ``labels``, ``loss``: the mean of -log P(x_t+1 | x_<=t, memory) over the
    labels not -100 (shifted inside, as ``gpt.causal_lm_loss``). The loss scores only the
    targets (``AdaptiveLogSoftmax.target_log_probs``); the whole distribution is computed when
    ``output_logits`` is True, by default only without labels (as HuggingFace, whose
    ``prediction_scores`` are empty when labels are given)."""

    def __init__(self, config: TransfoXLConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = TransfoXLModel(config)
        self.crit = AdaptiveLogSoftmax(config.vocab_size, config.d_embed, config.d_model,
                                       config.cutoffs, config.div_val, config.tie_projs,
                                       config.proj_init_std)
        if len(config.cutoffs):
            init.normal_(self.crit.cluster_weight, std=config.init_std)

    def forward(self, input_ids: Tensor | np.ndarray, mems: list[Tensor] | None = None,
                labels: Tensor | np.ndarray | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False, output_logits=None):
        out = self.transformer(input_ids, mems, head_mask, output_hidden_states,
                               output_attentions)
        hidden, loss = out.last_hidden_state, None
        if labels is not None:
            labels = checks.ids_array(labels, "labels", type(self).__name__,
                                      shape=tuple(hidden.shape[:2]))
            targets = labels[:, 1:]                       # position t predicts token t + 1
            log_probs = self.crit.target_log_probs(hidden[:, :-1], self.transformer.word_emb,
                                                   targets)
            loss = log_probs.sum() * (-1.0 / max(1, int((targets != -100).sum())))
        if output_logits is None:
            output_logits = labels is None
        logits = self.crit(hidden, self.transformer.word_emb) if output_logits else None
        return ModelOutput(loss=loss, logits=logits, mems=out.mems,
                           hidden_states=out.hidden_states, attentions=out.attentions)

    def generate(self, input_ids, max_new_tokens=20, *, do_sample=False, temperature=1.0,
                 top_k=None, top_p=None, repetition_penalty=1.0, eos_token_id=None,
                 generator=None, streamer=None, use_cache=True):
        """Continue the prompts ``input_ids`` (batch, time) by ``max_new_tokens`` tokens (fewer
        when every row has emitted ``eos_token_id``, default ``config.eos_token_id``; finished
        rows are padded with it). Each step picks the next token with ``decoding.next_tokens``
        (greedy, or sampled with the temperature, top-k, top-p and repetition penalty).

        ``use_cache`` feeds each new token alone with the memories of everything before it (the
        paper's fast evaluation), keeping the last ``eval_mem_len`` positions; without it each step
        runs the whole sequence again. The two agree while the sequence fits in the memory."""
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        checks.int_at_least(max_new_tokens, 0, "max_new_tokens", f"{name}.generate")
        state = {"mems": None, "fed": 0}

        def next_logits(ids):
            if not use_cache:
                return self(ids).logits[:, -1].numpy()
            out = self(ids[:, state["fed"]:], mems=state["mems"])
            state["mems"], state["fed"] = out.mems, ids.shape[1]
            return out.logits[:, -1].numpy()

        with self.inference():
            return decode(next_logits, ids, max_new_tokens,
                          self.config.eos_token_id if eos_token_id is None else eos_token_id,
                          streamer, do_sample=do_sample, temperature=temperature, top_k=top_k,
                          top_p=top_p, repetition_penalty=repetition_penalty,
                          generator=generator)


def decode(next_logits, ids, max_new_tokens, eos, streamer, **sampling):
    """The decoding loop of the models that continue a prompt one token per step (Transformer-XL,
    XLNet): ``next_logits(ids)`` gives the logits (batch, vocab) of the token after ``ids``
    (batch, time); ``decoding.next_tokens(**sampling)`` picks it (greedy or sampled). A row stops
    after emitting ``eos`` and is padded with it; ``streamer(new)`` sees each step's tokens."""
    finished = np.zeros(len(ids), dtype=bool)
    for _ in range(max_new_tokens):
        new = decoding.next_tokens(next_logits(ids), ids, **sampling)
        if eos is not None:
            new = np.where(finished, eos, new)
            finished |= new == eos
        ids = np.concatenate([ids, new[:, None]], axis=1)
        if streamer is not None:
            streamer(new)
        if finished.all():
            break
    return ids
