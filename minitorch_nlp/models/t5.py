"""T5 (Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer"): the survey's section V-D. Every task is text in, text out, and one
encoder-decoder Transformer learns them all, pretrained by span corruption
(``minitorch_nlp.data.span_corruption``).

The model is the Transformer of Vaswani et al. with the changes of the paper's section 2.1:

* a simplified layer norm, RMS norm: x / sqrt(mean(x^2) + eps) * g, no mean subtracted, no bias
  (``RMSNorm``), placed before each sub-layer (pre-LN) with a final norm after each stack;
* no absolute positions: a scalar bias per head added to each attention score, looked up from
  the key's offset to the query, in 32 buckets, exact for small offsets and log-spaced up to 128
  (``relative_position_bucket``), bidirectional in the encoder and causal in the decoder. Only the
  first layer of each stack owns the table; the bias it computes is shared by every layer;
* no 1/sqrt(d_k) in the attention scores: the initialisation of W^Q holds it
  (std (d_model * d_kv)^-0.5);
* no biases in any projection; ReLU feed-forward;
* one embedding matrix for the encoder, the decoder and the output, the decoder's output
  multiplied by d_model^-0.5 before the tied output layer.

T5 v1.1 (``feed_forward_proj="gated-gelu"``, ``tie_word_embeddings=False``) replaces the
feed-forward network with a gated GELU one, (GELU(x W_0) * x W_1) W_o (Shazeer, 2020), and gives
the output layer its own matrix without the rescaling.

Classes mirror HuggingFace's (``T5Model``, ``T5ForConditionalGeneration``, ``T5EncoderModel``;
key maps at the end of the file), and ``generate`` is ``decoding.generate_seq2seq``. The layers
are the toolkit's ``TransformerLayer`` and ``TransformerStack`` with T5's parts.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import checks, decoding
from .. import functional as F
from ..autograd import ones, tensor, Tensor
from ..nn import (Dropout, Embedding, FullAttention, Linear, Module, MultiHeadAttention,
                  TransformerLayer, TransformerStack, init)
from ..nn.parameter import Parameter
from ..attention.masks import prefix_lm_mask
from ..nn.outputs import ModelOutput
from .encoder_decoder import (IGNORE_INDEX, conditional_generation_output, encode_and_decode,
                              seq2seq_output, shift_right)
from .configs.t5 import T5Config

__all__ = ["ARCHITECTURES", "RMSNorm", "RelativePositionBias", "T5Config", "T5DecoderOnly",
           "T5EncoderModel", "T5FeedForward", "T5ForConditionalGeneration", "T5Model", "T5Stack",
           "relative_position_bucket"]


# ---- the parts -----------------------------------------------------------------------------------
class RMSNorm(Module):
    """T5's layer norm (Zhang & Sennrich, 2019, root mean square layer normalisation)::

        RMSNorm(x) = x / sqrt(mean_i(x_i^2) + eps) * g

    over the last axis: no mean subtracted and no bias, only a gain g (ones at first)."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.d_model = checks.positive_int(d_model, "d_model", "RMSNorm")
        self.eps = eps
        self.weight = Parameter(ones(d_model))

    def forward(self, x: Tensor):
        if x.shape[-1] != self.d_model:
            raise ValueError(f"RMSNorm: the input's last axis has {x.shape[-1]} features, "
                             f"expected d_model={self.d_model}")
        return x * ((x * x).mean(axis=-1, keepdims=True) + self.eps).rsqrt() * self.weight

    def extra_repr(self):
        return f"{self.d_model}, eps={self.eps}"


def relative_position_bucket(relative_position, *, bidirectional, num_buckets, max_distance):
    """The bucket of each key-minus-query offset (Raffel et al., 2020, section 2.1; Mesh
    TensorFlow's function), int64 of the offsets' shape.

    Bidirectional (the encoder): half the buckets for keys after the query, half for the others.
    Causal (the decoder): only keys at or before the query count; later ones share bucket 0.
    Within a half of n buckets the first n/2 hold the distances 0 .. n/2 - 1 exactly, the rest
    spread log-uniformly over n/2 .. ``max_distance``; farther keys share the last bucket."""
    offsets = np.asarray(relative_position, dtype=np.int64)
    buckets = np.zeros(offsets.shape, dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        buckets += (offsets > 0) * num_buckets
        distance = np.abs(offsets)
    else:
        distance = np.maximum(-offsets, 0)
    exact = num_buckets // 2
    if exact < 1:
        raise ValueError(f"relative_position_bucket: {num_buckets} bucket(s) per direction "
                         "leave none for exact distances; use relative_attention_num_buckets "
                         ">= 4 (bidirectional) or >= 2 (causal)")
    if max_distance <= exact:
        raise ValueError(f"relative_position_bucket: max_distance={max_distance} must exceed the "
                         f"{exact} exact distances")
    # log-spaced buckets for the far distances (the near ones take the exact branch below)
    log_ratio = np.log(np.maximum(distance, exact) / exact) / math.log(max_distance / exact)
    far = np.minimum(exact + (log_ratio * (num_buckets - exact)).astype(np.int64),
                     num_buckets - 1)
    return buckets + np.where(distance < exact, distance, far)


class RelativePositionBias(Module):
    """T5's learned attention bias: one scalar per head for each bucket of key-minus-query offsets
    (``relative_position_bucket``), added to the attention scores of every layer of a stack."""

    def __init__(self, num_heads: int, num_buckets, max_distance: int, bidirectional: bool) -> None:
        super().__init__()
        self.num_buckets = checks.int_at_least(num_buckets, 2, "num_buckets",
                                               "RelativePositionBias")
        self.max_distance, self.bidirectional = max_distance, bool(bidirectional)
        self.relative_attention_bias = Embedding(num_buckets, num_heads)

    def forward(self, query_length: int, key_length: int, start: int = 0):
        """The bias (1, heads, query_length, key_length) for queries at positions ``start`` ..
        ``start + query_length - 1`` (> 0 when decoding through a cache) and keys 0 .. key_length
        - 1."""
        queries = np.arange(start, start + query_length)[:, None]
        keys = np.arange(key_length)[None, :]
        buckets = relative_position_bucket(keys - queries, bidirectional=self.bidirectional,
                                           num_buckets=self.num_buckets,
                                           max_distance=self.max_distance)
        table = self.relative_attention_bias.weight
        values = self.relative_attention_bias(tensor(buckets, backend=table.backend.name))
        return values.permute(2, 0, 1).reshape(1, -1, query_length, key_length)

    def extra_repr(self):
        return f"bidirectional={self.bidirectional}, max_distance={self.max_distance}"


class T5FeedForward(Module):
    """The feed-forward network without biases: ReLU(x W_i) W_o (T5), or with ``gated=True``
    (GELU(x W_i0) * x W_i1) W_o (T5 v1.1, GELU's tanh approximation); dropout on the hidden
    units."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, gated: bool = False) -> None:
        super().__init__()
        self.gated = bool(gated)
        if self.gated:
            self.wi_0 = Linear(d_model, d_ff, bias=False)
            self.wi_1 = Linear(d_model, d_ff, bias=False)
        else:
            self.wi = Linear(d_model, d_ff, bias=False)
        self.wo = Linear(d_ff, d_model, bias=False)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor):
        hidden = (F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x) if self.gated
                  else F.relu(self.wi(x)))
        return self.wo(self.dropout(hidden))

    def extra_repr(self):
        return f"gated={self.gated}"


class T5Stack(TransformerStack):
    """The encoder (bidirectional) or the decoder (causal, with cross-attention) of T5: pre-LN
    ``TransformerLayer``s of unscaled, bias-free attention, the feed-forward network and RMS
    norms, a final RMS norm, and the relative position bias computed once per call and given to
    every layer's self-attention. Dropout acts on the input embeddings, on each sub-layer's output,
    on the attention weights and on the final output."""

    def __init__(self, config: T5Config, is_decoder: bool) -> None:
        def attention():
            return MultiHeadAttention(config.d_model, config.num_heads, bias=False,
                                      head_dim=config.d_kv,
                                      core=FullAttention(config.dropout_rate, scale=1.0))
        norm = functools.partial(RMSNorm, config.d_model, eps=config.layer_norm_epsilon)
        gated = config.feed_forward_proj == "gated-gelu"
        depth = config.num_decoder_layers if is_decoder else config.num_layers
        layers = [TransformerLayer(attention(), T5FeedForward(config.d_model, config.d_ff,
                                                              config.dropout_rate, gated),
                                   norm, cross_attn=attention() if is_decoder else None,
                                   dropout=config.dropout_rate, norm_first=True,
                                   causal=is_decoder)
                  for _ in range(depth)]
        super().__init__(layers, norm=norm())
        self.is_decoder = bool(is_decoder)
        self.position_bias = RelativePositionBias(
            config.num_heads, config.relative_attention_num_buckets,
            config.relative_attention_max_distance, bidirectional=not is_decoder)
        self.dropout = Dropout(config.dropout_rate)

    def forward(self, x: Tensor, memory=None, *, cache=None, output_hidden_states: bool = False,
                output_attentions: bool = False, **layer_kwargs):
        """``x``: the embedded tokens (batch, time, d_model); the rest as
        ``TransformerStack.forward`` (``key_mask``, ``memory_key_mask`` ...)."""
        start = 0 if cache is None else self.cache_length(cache)
        bias = self.position_bias(x.shape[1], start + x.shape[1], start)
        out = super().forward(self.dropout(x), memory, cache=cache, bias=bias,
                              output_hidden_states=output_hidden_states,
                              output_attentions=output_attentions, **layer_kwargs)
        hidden = out.last_hidden_state = self.dropout(out.last_hidden_state)
        if output_hidden_states:
            out.hidden_states = out.hidden_states[:-1] + (hidden,)
        return out


# ---- the models ----------------------------------------------------------------------------------
def _reset_t5_parameters(model):
    """HuggingFace's T5 initialisation (Mesh TensorFlow's): N(0, 1) embeddings, W^Q with std
    (d_model d_kv)^-0.5 (the 1/sqrt(d_k) of attention folded in), W^K, W^V std d_model^-0.5,
    W^O (heads d_kv)^-0.5, W_i d_model^-0.5, W_o d_ff^-0.5, the bias tables d_model^-0.5, unit
    norm gains."""
    config, factor = model.config, model.config.initializer_factor
    d_model, d_kv, heads = config.d_model, config.d_kv, config.num_heads
    init.normal_(model.shared.weight, std=factor)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            init.normal_(module.q_proj.weight, std=factor * (d_model * d_kv) ** -0.5)
            init.normal_(module.k_proj.weight, std=factor * d_model ** -0.5)
            init.normal_(module.v_proj.weight, std=factor * d_model ** -0.5)
            init.normal_(module.out_proj.weight, std=factor * (heads * d_kv) ** -0.5)
        elif isinstance(module, T5FeedForward):
            for linear in (module.wi_0, module.wi_1) if module.gated else (module.wi,):
                init.normal_(linear.weight, std=factor * d_model ** -0.5)
            init.normal_(module.wo.weight, std=factor * config.d_ff ** -0.5)
        elif isinstance(module, RelativePositionBias):
            init.normal_(module.relative_attention_bias.weight, std=factor * d_model ** -0.5)
        elif isinstance(module, RMSNorm):
            init.constant_(module.weight, factor)
    if getattr(model, "lm_head", None) is not None:
        init.normal_(model.lm_head.weight, std=factor)


class T5EncoderModel(Module):
    """T5's embedding and encoder (HuggingFace's ``T5EncoderModel``): ``last_hidden_state``
    (batch, time, d_model) of the source."""

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.config = config
        self.shared = Embedding(config.vocab_size, config.d_model)
        self.encoder = T5Stack(config, is_decoder=False)
        if type(self) is T5EncoderModel:
            _reset_t5_parameters(self)

    def encode(self, input_ids, attention_mask=None, output_hidden_states=False,
               output_attentions=False):
        """The encoder's output and, on request, its hidden states and attention maps.
        ``attention_mask`` (batch, time): 1 on tokens, 0 on padding."""
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        mask = checks.attention_mask(attention_mask, ids.shape, name)
        return self.encoder(self.shared(ids), key_mask=mask,
                            output_hidden_states=output_hidden_states,
                            output_attentions=output_attentions)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False):
        return self.encode(input_ids, attention_mask, output_hidden_states, output_attentions)


class T5Model(T5EncoderModel):
    """The bare encoder-decoder (HuggingFace's ``T5Model``): the decoder's ``last_hidden_state``
    (batch, target_time, d_model) and the encoder's ``encoder_last_hidden_state``."""

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.decoder = T5Stack(config, is_decoder=True)
        if type(self) is T5Model:
            _reset_t5_parameters(self)

    def new_cache(self):
        """Empty key/value caches for the decoder, one per layer."""
        return self.decoder.new_cache()

    def decode(self, decoder_input_ids, encoder_hidden_states, attention_mask=None,
               decoder_attention_mask=None, cache=None, output_hidden_states=False,
               output_attentions=False):
        """The decoder's output for ``decoder_input_ids`` (batch, target_time) reading
        ``encoder_hidden_states`` (its padding marked by ``attention_mask``, 1 on tokens). With
        a ``cache`` (``new_cache()``) only the new positions are fed, and
        ``decoder_attention_mask`` covers the cached ones too."""
        name = type(self).__name__
        ids = checks.token_ids(decoder_input_ids, self.config.vocab_size, name,
                               name="decoder_input_ids")
        start = 0 if cache is None else self.decoder.cache_length(cache)
        memory_mask = checks.attention_mask(attention_mask, encoder_hidden_states.shape[:2], name)
        mask = checks.attention_mask(decoder_attention_mask, (ids.shape[0], start + ids.shape[1]),
                                     name)
        return self.decoder(self.shared(ids), encoder_hidden_states, key_mask=mask,
                            memory_key_mask=memory_mask, cache=cache,
                            output_hidden_states=output_hidden_states,
                            output_attentions=output_attentions)

    def forward(self, input_ids: Tensor | np.ndarray | None = None,
                attention_mask: Tensor | np.ndarray | None = None,
                decoder_input_ids: Tensor | np.ndarray | None = None,
                decoder_attention_mask: Tensor | np.ndarray | None = None, encoder_outputs=None,
                cache=None, output_hidden_states: bool = False, output_attentions: bool = False):
        """HuggingFace's fields: ``last_hidden_state`` (the decoder's),
        ``encoder_last_hidden_state``, and on request ``decoder_hidden_states``,
        ``encoder_hidden_states``, ``decoder_attentions``, ``cross_attentions``,
        ``encoder_attentions``. ``encoder_outputs`` reuses an encoding already computed."""
        encoder, decoder = encode_and_decode(self, input_ids, attention_mask, decoder_input_ids,
                                             decoder_attention_mask, encoder_outputs, cache,
                                             output_hidden_states, output_attentions)
        return seq2seq_output(encoder, decoder, last_hidden_state=decoder.last_hidden_state)


class T5ForConditionalGeneration(decoding.Seq2SeqGeneration, T5Model):
    """T5 with its output layer (HuggingFace's ``T5ForConditionalGeneration``): ``logits``
    (batch, target_time, vocab_size); with ``labels`` the decoder's inputs are the labels
    shifted right after ``decoder_start_token_id`` and ``loss`` is their mean cross-entropy
    (-100 ignored). ``generate`` is ``decoding.generate_seq2seq`` with the config's ids."""

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        self.lm_head = None if config.tie_word_embeddings else \
            Linear(config.d_model, config.vocab_size, bias=False)
        _reset_t5_parameters(self)

    def logits(self, hidden):
        """The output layer: h d_model^-0.5 E^T when tied (T5), h W_lm^T otherwise (v1.1)."""
        if self.config.scale_decoder_outputs:
            hidden = hidden * self.config.d_model ** -0.5
        weight = self.shared.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight)

    def forward(self, input_ids: Tensor | np.ndarray | None = None,
                attention_mask: Tensor | np.ndarray | None = None,
                decoder_input_ids: Tensor | np.ndarray | None = None,
                decoder_attention_mask: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None, encoder_outputs=None, cache=None,
                output_hidden_states: bool = False, output_attentions: bool = False):
        checks.same_batch(type(self).__name__, input_ids=input_ids, labels=labels,
                          decoder_input_ids=decoder_input_ids)
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError(f"{type(self).__name__}: give decoder_input_ids (starting with "
                                 f"decoder_start_token_id={self.config.decoder_start_token_id}) "
                                 "or labels (shifted right into them)")
            decoder_input_ids = shift_right(labels, self.config.decoder_start_token_id,
                                            self.config.pad_token_id)
        encoder, decoder = encode_and_decode(self, input_ids, attention_mask, decoder_input_ids,
                                             decoder_attention_mask, encoder_outputs, cache,
                                             output_hidden_states, output_attentions)
        return conditional_generation_output(encoder, decoder,
                                             self.logits(decoder.last_hidden_state), labels,
                                             type(self).__name__)

    @property
    def encoder_decoder(self):
        """What ``decoding.Seq2SeqGeneration`` encodes and decodes with: this model itself."""
        return self


ARCHITECTURES = ("encoder-decoder", "prefix-lm", "decoder-only")


class T5DecoderOnly(decoding.Seq2SeqGeneration, T5EncoderModel):
    """The survey's other two T5 architectures (Raffel et al., 2020, section 3.2, figures 3 and
    4) on the same parts: one stack of T5 layers without cross-attention (the encoder's) reads
    the input and the target joined, [input; decoder_start; target], and predicts each target
    token from the position before it through T5's output layer. The attention mask is the one
    difference (``attention.prefix_lm_mask``, one code path for both):

    * ``architecture="prefix-lm"``: fully visible over the input and the start token, causal
      over the target;
    * ``architecture="decoder-only"``: a language model, causal everywhere (the prefix is empty).

    The relative position buckets are bidirectional in both (the causal mask leaves the future
    ones unused). Padded inputs are moved to the left before joining, so that every row's
    offsets are the ones it has alone. ``forward(input_ids, attention_mask, labels)`` returns
    ``logits`` (batch, target_time, vocab_size) of the target positions and, with ``labels``
    (-100 on padding), ``loss``; ``generate`` is ``decoding.generate_seq2seq``, the input read in
    one pass at the first step, then one token at a time with the keys and values cached."""

    def __init__(self, config: T5Config, architecture: str = "prefix-lm") -> None:
        if architecture not in ARCHITECTURES[1:]:
            raise ValueError(f"T5DecoderOnly: architecture must be 'prefix-lm' or "
                             f"'decoder-only', got {architecture!r} (the encoder-decoder is "
                             "T5ForConditionalGeneration)")
        super().__init__(config)
        self.architecture = architecture
        self.lm_head = None if config.tie_word_embeddings else \
            Linear(config.d_model, config.vocab_size, bias=False)
        _reset_t5_parameters(self)

    logits = T5ForConditionalGeneration.logits

    def _left_aligned(self, input_ids, attention_mask):
        """``input_ids`` with each row's tokens moved to the right end, and their key mask."""
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        mask = checks.attention_mask(attention_mask, ids.shape, name)
        if mask is None:
            return ids, np.ones(ids.shape, dtype=bool)
        order = np.argsort(mask, axis=1, kind="stable")  # padding first, tokens in their order
        return (np.where(np.take_along_axis(mask, order, axis=1),
                         np.take_along_axis(ids, order, axis=1), self.config.pad_token_id),
                np.take_along_axis(mask, order, axis=1))

    def joined_hidden(self, ids, key_mask, prefix_length, cache=None):
        """The stack's output (batch, time, d_model) over joined ``ids`` (batch, time), padding
        marked False in ``key_mask``, whose first ``prefix_length`` positions are the prefix
        (fully visible in the prefix LM, causal like the rest in the decoder-only model). With
        a ``cache`` holding positions, ``ids`` are the next ones and see everything before."""
        visible = prefix_length if self.architecture == "prefix-lm" else 0
        start = 0 if cache is None else self.encoder.cache_length(cache)
        mask = prefix_lm_mask(visible, ids.shape[1]) if start == 0 else None
        return self.encoder(self.shared(ids), key_mask=key_mask, mask=mask, causal=False,
                            cache=cache).last_hidden_state

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None,
                decoder_input_ids: Tensor | np.ndarray | None = None):
        """``labels`` (batch, target_time), -100 on padding, are shifted right after
        ``decoder_start_token_id`` into the target's inputs (or give ``decoder_input_ids``)."""
        name = type(self).__name__
        checks.same_batch(name, input_ids=input_ids, labels=labels,
                          decoder_input_ids=decoder_input_ids)
        ids, mask = self._left_aligned(input_ids, attention_mask)
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError(f"{name}: give labels or decoder_input_ids (starting with "
                                 f"decoder_start_token_id={self.config.decoder_start_token_id})")
            decoder_input_ids = shift_right(labels, self.config.decoder_start_token_id,
                                            self.config.pad_token_id)
        target = checks.token_ids(decoder_input_ids, self.config.vocab_size, name,
                                  name="decoder_input_ids")
        joined = np.concatenate([ids, target], axis=1)
        key_mask = np.concatenate([mask, np.ones(target.shape, dtype=bool)], axis=1)
        hidden = self.joined_hidden(joined, key_mask, ids.shape[1] + 1)
        logits = self.logits(hidden[:, ids.shape[1]:])
        loss = None
        if labels is not None:
            targets = checks.ids_array(labels, "labels", name, shape=logits.shape[:2])
            loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
        return ModelOutput(loss=loss, logits=logits)

    def start_decoding(self, input_ids, attention_mask=None, use_cache=True):
        """The left-aligned input, its key mask and, with ``use_cache``, empty caches (the input
        is read at the first step, with the start token); without, the target so far."""
        ids, mask = self._left_aligned(input_ids, attention_mask)
        state = {"input_ids": ids, "key_mask": mask}
        if use_cache:
            state["cache"] = self.encoder.new_cache()
        else:
            state["target"] = np.zeros((len(ids), 0), dtype=np.int64)
        return state

    def step(self, tokens, state):
        """The log-probabilities (N, vocab) of the token after ``tokens`` (N,), and the state."""
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1, 1)
        ids, cache = state["input_ids"], state.get("cache")
        if cache is None:
            target = np.concatenate([state["target"], tokens], axis=1)
            state = {**state, "target": target}
            joined = np.concatenate([ids, target], axis=1)
            key_mask = np.concatenate([state["key_mask"], np.ones(target.shape, bool)], axis=1)
        else:
            first = self.encoder.cache_length(cache) == 0
            joined = np.concatenate([ids, tokens], axis=1) if first else tokens
            key_mask = np.concatenate([state["key_mask"], np.ones(tokens.shape, bool)], axis=1)
            state = {**state, "key_mask": key_mask}
        hidden = self.joined_hidden(joined, key_mask, ids.shape[1] + 1, cache)
        return self.logits(hidden[:, -1:])[:, 0].log_softmax(axis=-1), state
