"""The Reformer (Kitaev et al., 2020, "Reformer: The Efficient Transformer"; the survey's section
IX-B, eq 96-105) as HuggingFace's ``ReformerModel`` and ``ReformerModelWithLMHead`` have it, so
that their checkpoints load and save.

Built from the library's pieces:

* token embeddings plus ``nn.AxialPositionEmbedding`` (or a plain learned table);
* a ``nn.ReversibleStack`` of ``nn.ReversibleBlock(f, g)`` (eq 104-105): Y1 = X1 + F(X2),
  Y2 = X2 + G(Y1), both streams starting as the embeddings; F is a LayerNorm and self-attention,
  G a LayerNorm and the feed-forward network, run ``chunk_size_feed_forward`` positions at a
  time (``nn.ChunkedFeedForward``);
* each layer's attention is ``"lsh"`` or ``"local"`` (``attn_layers``, alternating in the
  pretrained models): ``ReformerLSHAttention`` (an ``attention.LSHAttention`` in HuggingFace's
  form, shared query-key projection, ``SharedQKAttention``) or ``ChunkedLocalAttention``
  (chunks that see ``chunks_before`` chunks back and ``chunks_after`` ahead);
* the output is the two streams side by side, [Y1; Y2] (2 * hidden_size wide), through a
  LayerNorm; ``ReformerModelWithLMHead`` maps it to the vocabulary.

``is_decoder=True`` makes every layer causal. A sequence longer than the shortest chunk length
that is not a multiple of the chunk lengths' least common multiple is padded at the end (with
``pad_token_id`` and a padding mask) and the output cut back, as HuggingFace does in
evaluation (it refuses such a sequence in training; we pad then too). A sequence no longer than a
layer's chunk length gets full attention in that layer (HuggingFace's rule).

HuggingFace's LSH attention differs from the paper's (and from ``LSHAttention``) in ways the
checkpoints depend on, so ``ReformerLSHAttention`` follows it: the hashing rounds are sorted one
after another into one long sequence whose chunks look back across round boundaries (the first
chunk at the last, wrapping round); a chunk attends *every* key of its own and the previous
chunk, whatever their buckets; a pair found in several rounds is not discounted (eq 101's log
N_ij is not applied); the rounds combine by their log-sum-exps (eq 100, 102); padded positions
hash to an extra bucket of their own. Keys are the queries scaled to unit root-mean-square
(with HuggingFace's epsilon 1e-6), so a score is q . k / sqrt(d) with |k| = sqrt(d) * rms
normalised, i.e. q . (q_j / |q_j|) as in the paper. Local attention wraps round too: the first
chunk looks back at the last (masked when causal).

**The hash rotations.** HuggingFace draws them with torch's generator, (heads, head_dim,
num_hashes, num_buckets / 2) at every call (for a factorised hash, the factors' sum / 2), after
``torch.manual_seed(hash_seed)`` when a seed is set. Our generator is not torch's, so with the same
``hash_seed`` we draw other rotations (fixed by that seed, the same in every layer, as in
HuggingFace) and find other buckets: a loaded checkpoint computes a Reformer, not HuggingFace's
numbers. To reproduce HuggingFace exactly, give the model its rotations:
``model.set_hash_rotations(rotations)`` (the fixture script
``tests/fixtures/hf/make_reformer_fixtures.py`` draws and stores them the way HuggingFace does);
``set_hash_rotations(None)`` goes back to drawing.
"""
from __future__ import annotations

import math

import numpy as np

from .. import checks, cookbook
from ..attention.grouped import grouped_attention, self_attention_inputs, ungroup
from ..attention.lsh import SELF_PENALTY, LSHAttention, restrict_pairs
from ..autograd import Tensor, concatenate
from ..autograd import random as mt_random
from ..nn import (AxialPositionEmbedding, ChunkedFeedForward, Dropout, Embedding, FeedForward,
                  LayerNorm, LearnedPositionalEmbedding, Linear, Module, MultiHeadAttention,
                  ReversibleBlock, ReversibleStack, init)
from ..nn.outputs import ModelOutput
from ..nn.transformer import FullAttention
from .gpt import causal_lm_loss
from .transformer_xl import decode
from .configs.reformer import (ATTENTION_TYPES, NORM_EPSILON, ReformerConfig, _HF_ACTIVATIONS,
                               _bucket_factors)

__all__ = ["ChunkedLocalAttention", "PreNorm", "ReformerConfig", "ReformerLSHAttention",
           "ReformerModel", "ReformerModelWithLMHead", "SharedQKAttention"]

"""HuggingFace's epsilon in the keys' root-mean-square normalisation."""


def _adjacent_chunks(chunks, before, after):
    """(..., chunks, m) positions -> (..., chunks, (before + 1 + after) m): each chunk's own
    positions with those of ``before`` chunks back and ``after`` ahead, wrapping round at the
    ends (HuggingFace's ``_look_adjacent``)."""
    return np.concatenate([np.roll(chunks, -shift, axis=-2)
                           for shift in range(-before, after + 1)], axis=-1)


def _refuse_mask_and_weights(name, mask, bias, need_weights):
    if mask is not None or bias is not None:
        raise ValueError(f"{name}: a general mask or score bias needs the n x n scores that "
                         "chunked attention never forms; use causal and key_mask")
    if need_weights:
        raise ValueError(f"{name}: need_weights (output_attentions) is not available: the "
                         "chunked attention never forms the (time, time) weights")


def _attend_groups(core, q, keys, v, query_index, key_index, causal, key_mask, penalise_self):
    """``grouped_attention`` of the (batch|1, heads|1, groups, m) queries over their keys,
    causal by position if asked, a query's own position lowered by ``SELF_PENALTY`` if
    ``penalise_self``; returns (out, lse) still grouped."""
    allowed = np.ones(np.broadcast_shapes(query_index.shape[:-1] + (query_index.shape[-1], 1),
                                          key_index.shape[:-1] + (1, key_index.shape[-1])),
                      dtype=bool)
    if causal:
        allowed &= key_index[..., None, :] <= query_index[..., :, None]
    bias = None
    if penalise_self:
        bias = -SELF_PENALTY * (key_index[..., None, :] == query_index[..., :, None])
    return grouped_attention(q, keys, v, query_index, key_index, allowed,
                             scale=1.0 / math.sqrt(q.shape[-1]), key_mask=key_mask, bias=bias,
                             dropout=core.dropout)


class ChunkedLocalAttention(FullAttention):
    """HuggingFace's Reformer local attention, an attention core: the sequence is cut into
    chunks of ``chunk_length``; a query attends every key of its chunk, of ``chunks_before``
    chunks back and ``chunks_after`` ahead (wrapping round at the ends, as HuggingFace does),
    only earlier ones when causal. A sequence no longer than a chunk gets full attention; a
    longer one must be a multiple of ``chunk_length``. Memory O(n * chunk_length)."""

    def __init__(self, chunk_length: int, chunks_before: int = 1, chunks_after: int = 0,
                 dropout: float = 0.0) -> None:
        super().__init__(dropout)
        name = type(self).__name__
        self.chunk_length = checks.positive_int(chunk_length, "chunk_length", name)
        self.chunks_before = checks.int_at_least(chunks_before, 0, "chunks_before", name)
        self.chunks_after = checks.int_at_least(chunks_after, 0, "chunks_after", name)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None, need_weights: bool = False):
        name = type(self).__name__
        _refuse_mask_and_weights(name, mask, bias, need_weights)
        q, k, v, key_mask = self_attention_inputs(q, k, v, key_mask, name)
        time = q.shape[2]
        if time <= self.chunk_length:
            return super().forward(q, k, v, causal=causal, key_mask=key_mask)
        _check_chunks(name, time, self.chunk_length)
        query_index = np.arange(time).reshape(1, 1, time // self.chunk_length, self.chunk_length)
        key_index = _adjacent_chunks(query_index, self.chunks_before, self.chunks_after)
        out, _ = _attend_groups(self, q, k, v, query_index, key_index, causal, key_mask,
                                penalise_self=False)
        return ungroup(out, query_index, time), None

    def extra_repr(self):
        return (f"chunk_length={self.chunk_length}, chunks_before={self.chunks_before}, "
                f"chunks_after={self.chunks_after}")


def _check_chunks(name, time, chunk_length):
    if time % chunk_length:
        raise ValueError(f"{name}: the sequence length {time} is not a multiple of "
                         f"chunk_length={chunk_length}; pad the sequence (with a key_mask) or "
                         "pick a chunk length that divides it (ReformerModel pads by itself)")


@cookbook.equation(96, 98, 99)
class ReformerLSHAttention(LSHAttention):
    """HuggingFace's LSH attention (see the module docstring for how it differs from the paper's
    ``LSHAttention``): ``num_rounds`` hashing rounds with per-head rotations (heads, head_dim,
    rounds, num_buckets / 2, or the bucket factors' sum / 2), the rounds' sorted sequences one
    after another in chunks of ``chunk_length``, each chunk attending all keys of itself,
    ``chunks_before`` chunks back and ``chunks_after`` ahead, a query its own position only when
    it has nothing else. ``num_buckets``: an even int, or a list of them (a factorised hash, see
    ``hash``). Keys are the queries (use it in a ``SharedQKAttention``).

    ``given_rotations`` (set by ``ReformerModel.set_hash_rotations``): rotations to use at every
    call instead of drawing them; otherwise they are drawn as ``LSHAttention`` draws them, from
    ``seed`` or the default generator."""

    def __init__(self, num_heads: int, num_buckets, chunk_length: int, num_rounds: int = 1, *,
                 chunks_before: int = 1, chunks_after: int = 0, seed: int | None = None,
                 dropout: float = 0.0) -> None:
        name = type(self).__name__
        factors = _bucket_factors(num_buckets, name)
        super().__init__(math.prod(factors), chunk_length, num_rounds, seed=seed,
                         dropout=dropout)
        self.bucket_factors = factors
        self.num_heads = checks.positive_int(num_heads, "num_heads", name)
        self.chunks_before = checks.int_at_least(chunks_before, 0, "chunks_before", name)
        self.chunks_after = checks.int_at_least(chunks_after, 0, "chunks_after", name)
        self.given_rotations = None

    def rotations(self, head_dim):
        """(heads, head_dim, rounds, sum of the bucket factors / 2): ``given_rotations``, or
        fresh draws."""
        shape = (self.num_heads, head_dim, self.num_rounds, sum(self.bucket_factors) // 2)
        if self.given_rotations is not None:
            if self.given_rotations.shape != shape:
                raise ValueError(f"{type(self).__name__}: the given rotations have shape "
                                 f"{self.given_rotations.shape}, this layer needs {shape} "
                                 "(heads, head_dim, num_hashes, sum of the bucket factors / 2)")
            return self.given_rotations
        rng = np.random.default_rng(self.seed) if self.seed is not None else mt_random.rng(
            self.generator)
        return rng.standard_normal(shape)

    def hash(self, x, rotations, key_mask=None):
        """h^(r)(x) = argmax([x R_hr; -x R_hr]) per head h and round r (eq 98): (batch, heads,
        rounds, time) bucket ids. With factors b_1, b_2 ... the rotation's columns are cut in
        pieces of b_f / 2, each piece hashes into b_f buckets, and the bucket is the mixed-radix
        number h_1 + b_1 h_2 + b_1 b_2 h_3 ... Padded positions (``key_mask`` False) get the
        extra bucket ``num_buckets`` (the product)."""
        rotated = np.einsum("bhtd,hdrc->bhrtc", x, rotations)
        buckets, radix, start = 0, 1, 0
        for factor in self.bucket_factors:
            piece = rotated[..., start:start + factor // 2]
            buckets = buckets + radix * np.concatenate([piece, -piece], axis=-1).argmax(axis=-1)
            radix, start = radix * factor, start + factor // 2
        if key_mask is not None:
            buckets = np.where(np.asarray(key_mask, dtype=bool)[:, None, None, :], buckets,
                               self.num_buckets)
        return buckets

    def groups(self, x, rotations=None, key_mask=None):
        """(query_index (b|1, h|1, groups, m), key_index (b|1, h|1, groups, keys)) for ``x``
        (batch, heads, time, d), a NumPy array: a sequence that fits one chunk is one group of
        every position; a longer one is hashed (with ``rotations``, drawn when None; padding,
        ``key_mask`` False, in its own bucket), each round sorted by (bucket, position), the
        rounds laid end to end in chunks (round r's are groups r * time / m onwards), each with
        the keys of ``chunks_before`` chunks back and ``chunks_after`` ahead."""
        batch, heads, time, head_dim = x.shape
        if time <= self.chunk_length:
            index = np.arange(time).reshape(1, 1, 1, time)
            return index, index
        _check_chunks(type(self).__name__, time, self.chunk_length)
        rotations = self.rotations(head_dim) if rotations is None else rotations
        order, _ = self.chunks(self.hash(x, rotations, key_mask))        # (B, H, rounds, time)
        query_index = order.reshape(batch, heads, -1, self.chunk_length)
        return query_index, _adjacent_chunks(query_index, self.chunks_before, self.chunks_after)

    def pairs(self, q, causal=False, rotations=None, key_mask=None):
        """The attended pairs as a bool (batch, heads, time, time) array (n x n: for pictures
        and tests): j among the keys of i's chunk in some round, earlier only when causal, real
        only, and not i itself unless it has no other key. (A key seen twice, once from each of
        two chunks, is weighed twice by the attention; a picture shows it once.)"""
        x = q.numpy() if isinstance(q, Tensor) else np.asarray(q)
        query_index, key_index = self.groups(x, rotations, key_mask)
        batch, heads, time = x.shape[:3]
        shape = (batch, heads) + query_index.shape[2:] + key_index.shape[-1:]
        found = np.zeros((batch, heads, time, time), dtype=bool)
        found[np.arange(batch)[:, None, None, None, None], np.arange(heads)[:, None, None, None],
              np.broadcast_to(query_index[..., :, None], shape),
              np.broadcast_to(key_index[..., None, :], shape)] = True
        return restrict_pairs(found, causal, key_mask)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | np.ndarray | None = None,
                bias: Tensor | None = None, causal: bool = False,
                key_mask: Tensor | np.ndarray | None = None, need_weights: bool = False):
        name = type(self).__name__
        _refuse_mask_and_weights(name, mask, bias, need_weights)
        q, _, v, key_mask = self_attention_inputs(q, k, v, key_mask, name)
        if q.shape[2] > self.chunk_length:
            _check_chunks(name, q.shape[2], self.chunk_length)
        return self.combine_rounds(self.rounds(q, v, None, causal, key_mask)), None

    def rounds(self, q, v, rotations, causal, key_mask):
        """[(o^(r), z(i, P_i^(r))) for every round r] (eq 103 without eq 101's log N_ij) of
        self-attention over ``q``, ``v`` (batch, heads, time, d) in ``groups``, the keys the
        queries scaled to unit root-mean-square; one part when the sequence fits a chunk."""
        time = q.shape[2]
        keys = q / ((q * q).mean(axis=-1, keepdims=True) + NORM_EPSILON).sqrt()
        query_index, key_index = self.groups(
            q.numpy(), rotations, None if key_mask is None else q.backend.to_numpy(key_mask))
        out, lse = _attend_groups(self, q, keys, v, query_index, key_index, causal, key_mask,
                                  penalise_self=True)
        per_round = 1 if time <= self.chunk_length else time // self.chunk_length
        parts = []
        for start in range(0, query_index.shape[2], per_round):
            part = slice(start, start + per_round)
            index = query_index[:, :, part]
            parts.append((ungroup(out[:, :, part], index, time),
                          ungroup(lse[:, :, part, :, None], index, time)[..., 0]))
        return parts

    def extra_repr(self):
        return (super().extra_repr() + f", num_heads={self.num_heads}, chunks_before="
                f"{self.chunks_before}, chunks_after={self.chunks_after}")


class SharedQKAttention(MultiHeadAttention):
    """Multi-head self-attention whose keys come from the query projection (the Reformer's
    shared-QK attention, section 3): ``q_proj`` is HuggingFace's ``query_key``, there is no
    ``k_proj``, and the core (a ``ReformerLSHAttention``) receives the queries as keys. No
    cache and no cross-attention."""

    def __init__(self, d_model: int, num_heads: int, head_dim: int, core) -> None:
        super().__init__(d_model, num_heads, bias=False, core=core, head_dim=head_dim)
        del self.k_proj

    def reset_parameters(self, generator=None):
        for proj in (self.q_proj, self.v_proj, self.out_proj):
            init.xavier_uniform_(proj.weight, generator=generator)

    def project(self, query, key, value, cache):
        name = type(self).__name__
        if key is not None or value is not None or cache is not None:
            raise ValueError(f"{name}: shared query-key attention is self-attention without a "
                             "cache; call it with the query alone")
        checks.features(query, self.d_model, "query", name)
        q = self.split_heads(self.q_proj(query))
        return q, q, self.split_heads(self.v_proj(query))


class PreNorm(Module):
    """``sublayer(norm(x), **kwargs)``: a residual function of a Reformer block, F or G."""

    def __init__(self, norm, sublayer) -> None:
        super().__init__()
        self.norm, self.sublayer = norm, sublayer

    def forward(self, x: Tensor, **kwargs):
        return self.sublayer(self.norm(x), **kwargs)


# ---- the model -----------------------------------------------------------------------------------
def _attention(config, kind):
    """Layer attention of ``kind`` ("lsh" or "local") for ``config``."""
    d, heads, head_dim = config.hidden_size, config.num_attention_heads, config.attention_head_size
    if kind == "lsh":
        core = ReformerLSHAttention(heads, config.num_buckets, config.lsh_attn_chunk_length,
                                    config.num_hashes, chunks_before=config.lsh_num_chunks_before,
                                    chunks_after=config.lsh_num_chunks_after,
                                    seed=config.hash_seed,
                                    dropout=config.lsh_attention_probs_dropout_prob)
        return SharedQKAttention(d, heads, head_dim, core)
    core = ChunkedLocalAttention(config.local_attn_chunk_length, config.local_num_chunks_before,
                                 config.local_num_chunks_after,
                                 config.local_attention_probs_dropout_prob)
    return MultiHeadAttention(d, heads, bias=False, core=core, head_dim=head_dim)


@cookbook.equation(104)
class ReformerModel(Module):
    """The Reformer body: embeddings (tokens, axial positions), a reversible stack of
    attention / feed-forward blocks (eq 104-105) and the LayerNorm of the two output streams
    side by side. ``forward(input_ids, attention_mask=None)`` returns ``last_hidden_state``
    (batch, time, 2 * hidden_size).

    Dropout (training only) acts on the token embeddings, the attention weights, the
    feed-forward hidden units and the output; HuggingFace also drops each attention block's and
    feed-forward network's output and whole axial position vectors, so training noise differs
    while evaluation is the same."""

    def __init__(self, config: ReformerConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, d)
        if config.axial_pos_embds:
            self.position_embeddings = AxialPositionEmbedding(
                config.axial_pos_shape, config.axial_pos_embds_dim, std=config.axial_norm_std)
        else:
            self.position_embeddings = LearnedPositionalEmbedding(
                config.max_position_embeddings, d)
        self.dropout = Dropout(config.hidden_dropout_prob)
        feed_forward_chunk = config.chunk_size_feed_forward or config.max_position_embeddings
        self.encoder = ReversibleStack([
            ReversibleBlock(
                PreNorm(LayerNorm(d, eps=config.layer_norm_eps), _attention(config, kind)),
                ChunkedFeedForward(PreNorm(LayerNorm(d, eps=config.layer_norm_eps), FeedForward(
                    d, config.feed_forward_size, config.hidden_dropout_prob,
                    _HF_ACTIVATIONS[config.hidden_act])), feed_forward_chunk))
            for kind in config.attn_layers])
        self.norm = LayerNorm(2 * d, eps=config.layer_norm_eps)
        self.reset_parameters()

    def reset_parameters(self):
        """HuggingFace's initialisation: N(0, initializer_range^2) weights and embeddings, zero
        biases; the axial vectors N(0, axial_norm_std^2) (set at construction)."""
        std = self.config.initializer_range
        init.normal_(self.word_embeddings.weight, std=std)
        if not self.config.axial_pos_embds:
            init.normal_(self.position_embeddings.table, std=std)
        for module in self.encoder.modules():
            if isinstance(module, Linear):
                init.normal_(module.weight, std=std)
                if module.bias is not None:
                    init.zeros_(module.bias)

    def set_hash_rotations(self, rotations):
        """Use ``rotations`` (heads, attention_head_size, num_hashes, num_buckets / 2, or the
        bucket factors' sum / 2), a NumPy
        array, in every LSH layer at every call (None: draw them again). This is how the tests
        reproduce HuggingFace's buckets, which come from torch's generator."""
        for module in self.encoder.modules():
            if isinstance(module, ReformerLSHAttention):
                module.given_rotations = None if rotations is None else np.asarray(rotations)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None):
        name = type(self).__name__
        config = self.config
        ids = checks.token_ids(input_ids, config.vocab_size, name)
        batch, time = ids.shape
        mask = checks.attention_mask(attention_mask, ids.shape, name)
        chunk_lengths = config.chunk_lengths()
        multiple = math.lcm(*chunk_lengths)
        padding = (-time) % multiple if time > min(chunk_lengths) else 0
        if time + padding > config.max_position_embeddings:
            raise ValueError(f"{name}: a sequence of {time} tokens (padded to {time + padding}, "
                             f"a multiple of the chunk lengths' {multiple}) is longer than "
                             f"max_position_embeddings={config.max_position_embeddings}")
        if padding:
            ids = np.concatenate([ids, np.full((batch, padding), config.pad_token_id)], axis=1)
            real = np.ones((batch, time), dtype=bool) if mask is None else mask
            mask = np.concatenate([real, np.zeros((batch, padding), dtype=bool)], axis=1)
        x = self.position_embeddings(self.dropout(self.word_embeddings(ids)))
        y1, y2 = self.encoder(x, x, key_mask=mask, causal=config.is_decoder)       # eq 104
        hidden = self.dropout(self.norm(concatenate([y1, y2], axis=-1)))
        return ModelOutput(last_hidden_state=hidden[:, :time])


class ReformerModelWithLMHead(Module):
    """HuggingFace's ``ReformerModelWithLMHead``: a causal ``ReformerModel`` (``is_decoder``
    must be True) and a linear layer from both streams (2 * hidden_size) to the vocabulary.
    ``model(input_ids, labels=input_ids)`` gives ``.loss`` (labels shifted inside, -100
    ignored) and ``.logits``; ``generate`` continues prompts."""

    def __init__(self, config: ReformerConfig) -> None:
        super().__init__()
        if not config.is_decoder:
            raise ValueError("ReformerModelWithLMHead: a language model is causal; set "
                             "is_decoder=True in its ReformerConfig")
        for kind in ATTENTION_TYPES:
            if kind in config.attn_layers and getattr(config, f"{kind}_num_chunks_after"):
                raise ValueError(f"ReformerModelWithLMHead: causal attention sees no chunk "
                                 f"ahead; set {kind}_num_chunks_after=0")
        self.config = config
        self.reformer = ReformerModel(config)
        self.lm_head = Linear(2 * config.hidden_size, config.vocab_size)
        init.normal_(self.lm_head.weight, std=config.initializer_range)
        init.zeros_(self.lm_head.bias)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None):
        out = self.reformer(input_ids, attention_mask)
        chunk = self.config.chunk_size_lm_head
        hidden = out.last_hidden_state
        if chunk and hidden.shape[1] > chunk:
            logits = concatenate([self.lm_head(hidden[:, start:start + chunk])
                                  for start in range(0, hidden.shape[1], chunk)], axis=1)
        else:
            logits = self.lm_head(hidden)
        loss = None if labels is None else causal_lm_loss(logits, labels)
        return ModelOutput(loss=loss, logits=logits)

    def generate(self, input_ids, max_new_tokens=20, *, do_sample=False, temperature=1.0,
                 top_k=None, top_p=None, repetition_penalty=1.0, eos_token_id=None,
                 generator=None, streamer=None):
        """Continue the prompts ``input_ids`` (batch, time) by up to ``max_new_tokens`` tokens,
        greedy or sampled (``decoding.next_tokens``); each step runs the whole sequence again
        (no cache). A row stops after ``eos_token_id`` (default ``config.eos_token_id``)."""
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        checks.int_at_least(max_new_tokens, 0, "max_new_tokens", f"{name}.generate")
        if ids.shape[1] + max_new_tokens > self.config.max_position_embeddings:
            raise ValueError(f"{name}.generate: the prompt ({ids.shape[1]} tokens) plus "
                             f"max_new_tokens={max_new_tokens} is longer than "
                             f"max_position_embeddings={self.config.max_position_embeddings}")
        with self.inference():
            return decode(lambda seen: self(seen).logits[:, -1].numpy(), ids, max_new_tokens,
                          self.config.eos_token_id if eos_token_id is None else eos_token_id,
                          streamer, do_sample=do_sample, temperature=temperature, top_k=top_k,
                          top_p=top_p, repetition_penalty=repetition_penalty,
                          generator=generator)
