"""ETC, the Extended Transformer Construction, as a model (Ainslie et al., 2020, "ETC: Encoding
Long and Structured Inputs in Transformers"; the survey's section VIII-D): a BERT-style encoder
whose every layer attends with ``attention.ETCAttention`` (g2g, g2l, l2g, l2l within a radius,
relative position labels, the global-local mapping).

The input is two sequences. The *long* input is the text (``input_ids``, its own word
embeddings). The *global* input is a few tokens (``global_ids``, a small vocabulary of their own,
e.g. one id for "sentence" and one for "paragraph"), each standing for a segment of the long
input through ``segment_ids`` (the global token of each long token). ETC has no absolute
positions: order comes from the relative labels alone. When no global input is given, the model
makes the paper's choice for text without structure: one global token (id 0) per block of
``long_per_global`` long tokens, each the segment of its block.

* ``ETCLayer``: an ``nn.TransformerLayer`` (post-LN, as BERT) whose self-attention is
  ``ETCAttention`` over the joint sequence [global; long];
* ``ETCModel``: the two embeddings, then the layers; returns the long and the global hidden
  states;
* ``ETCForMaskedLM``: BERT's masked-LM head (``BertLMHead``, tied to the long word embeddings)
  and ``masked_lm_loss`` (eq 25), the paper's MLM pretraining objective;
* ``cpc_loss``: the paper's second pretraining loss, contrastive predictive coding: the global
  token of a masked-out segment predicts the encoding of that segment read alone.

Registered as the family ``etc``, so ``minitorch-nlp train etc`` trains it with masked-LM.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import checks
from .. import functional as F
from ..attention.extended_transformer import ETCAttention
from ..autograd import concatenate, Tensor
from ..nn import Dropout, Embedding, FeedForward, LayerNorm, Module, ModuleList, TransformerLayer
from ..nn.outputs import ModelOutput
from .bert import BertLMHead, init_bert_weights, masked_lm_loss
from .configs.extended_transformer import ETCConfig

__all__ = ["ETCConfig", "ETCForMaskedLM", "ETCLayer", "ETCModel", "blocks_as_global_input",
           "cpc_loss"]


def blocks_as_global_input(batch, n_long, long_per_global, attention_mask=None):
    """The global input of text without structure (the paper's fixed blocks): one global token
    (id 0) per block of ``long_per_global`` long tokens, standing for the tokens of its block.
    Returns (global_ids (batch, n_g), segment_ids (batch, n_l), global_mask (batch, n_g) or
    None): a global token is padding when every token of its block is (``attention_mask``,
    (batch, n_l), False on padding)."""
    n_global = math.ceil(n_long / long_per_global)
    segment_ids = np.broadcast_to(np.arange(n_long) // long_per_global, (batch, n_long))
    global_mask = None
    if attention_mask is not None:
        padded = np.zeros((batch, n_global * long_per_global), dtype=bool)
        padded[:, :n_long] = attention_mask
        global_mask = padded.reshape(batch, n_global, long_per_global).any(axis=-1)
    return np.zeros((batch, n_global), dtype=np.int64), segment_ids, global_mask


class ETCLayer(TransformerLayer):
    """One ETC layer: global-local self-attention (``ETCAttention``) over [global; long], then
    the feed-forward network, each in a post-LN residual connection (as BERT)."""

    def __init__(self, config: ETCConfig) -> None:
        attention = ETCAttention(config.hidden_size, config.num_attention_heads,
                                 config.local_radius, config.max_distance,
                                 dropout=config.attention_probs_dropout_prob)
        super().__init__(attention, FeedForward(config.hidden_size, config.intermediate_size,
                                                0.0, "gelu"),
                         functools.partial(LayerNorm, config.hidden_size,
                                           eps=config.layer_norm_eps),
                         dropout=config.hidden_dropout_prob)

    def forward(self, x: Tensor, *, n_global: int, segment_ids: Tensor | np.ndarray | None = None,
                global_mask: Tensor | np.ndarray | None = None,
                long_mask: Tensor | np.ndarray | None = None):
        """``x`` (batch, n_g + n_l, hidden): the global tokens first -> same shape."""
        def attend(h):
            return concatenate(self.self_attn(h[:, :n_global], h[:, n_global:],
                                              segment_ids=segment_ids, global_mask=global_mask,
                                              long_mask=long_mask), axis=1)

        x = self.residual(x, self.norm1, attend)
        return self.residual(x, self.feed_forward_norm, self.feed_forward)


class ETCModel(Module):
    """The ETC encoder. ``forward(input_ids, attention_mask=None, global_ids=None,
    segment_ids=None, global_mask=None)``: the long input (batch, n_l) with its padding mask
    (False on padding), and the global input (batch, n_g) with the global-local mapping
    (batch, n_l; the global token of each long token, -1 for none) and its padding mask; without
    ``global_ids``, ``blocks_as_global_input``. Returns ``last_hidden_state`` (batch, n_l,
    hidden) and ``global_hidden_state`` (batch, n_g, hidden)."""

    config_class = ETCConfig

    def __init__(self, config: ETCConfig) -> None:
        super().__init__()
        self.config = config
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size,
                                         padding_idx=config.pad_token_id)
        self.global_embeddings = Embedding(config.global_vocab_size, config.hidden_size)
        self.embedding_norm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.layers = ModuleList([ETCLayer(config) for _ in range(config.num_hidden_layers)])
        init_bert_weights(self, config.initializer_range)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                global_ids: Tensor | np.ndarray | None = None,
                segment_ids: Tensor | np.ndarray | None = None,
                global_mask: Tensor | np.ndarray | None = None):
        name = type(self).__name__
        ids = checks.token_ids(input_ids, self.config.vocab_size, name)
        long_mask = None if attention_mask is None else checks.attention_mask(
            attention_mask, ids.shape, name)
        if global_ids is None:
            if segment_ids is not None or global_mask is not None:
                raise ValueError(f"{name}: segment_ids and global_mask describe global_ids; "
                                 "give global_ids too (or none of them for one global token per "
                                 "block of long_per_global tokens)")
            global_ids, segment_ids, global_mask = blocks_as_global_input(
                ids.shape[0], ids.shape[1], self.config.long_per_global, long_mask)
        globals_ = checks.token_ids(global_ids, self.config.global_vocab_size, name,
                                    name="global_ids", size_name="global_vocab_size",
                                    shape=(ids.shape[0], np.shape(global_ids)[1]))
        n_global = globals_.shape[1]
        x = concatenate([self.global_embeddings(globals_), self.word_embeddings(ids)], axis=1)
        x = self.dropout(self.embedding_norm(x))
        for layer in self.layers:
            x = layer(x, n_global=n_global, segment_ids=segment_ids, global_mask=global_mask,
                      long_mask=long_mask)
        return ModelOutput(last_hidden_state=x[:, n_global:], global_hidden_state=x[:, :n_global])


class ETCForMaskedLM(Module):
    """ETC with the masked-LM head over the long input (tied to its word embeddings). With
    ``labels`` (the original ids at masked positions, -100 elsewhere) the output has ``loss``;
    ``logits`` (batch, n_l, vocab_size)."""

    base_model_class = ETCModel

    def __init__(self, config: ETCConfig) -> None:
        super().__init__()
        self.config = config
        self.etc = ETCModel(config)
        self.mlm = BertLMHead(config)
        init_bert_weights(self.mlm, config.initializer_range)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                global_ids: Tensor | np.ndarray | None = None,
                segment_ids: Tensor | np.ndarray | None = None,
                global_mask: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None):
        out = self.etc(input_ids, attention_mask, global_ids, segment_ids, global_mask)
        logits = self.mlm(out.last_hidden_state, self.etc.word_embeddings.weight)
        loss = None if labels is None else masked_lm_loss(logits, labels)
        return ModelOutput(loss=loss, logits=logits, global_hidden_state=out.global_hidden_state)


def cpc_loss(model, input_ids, global_ids, segment_ids, masked, mask_token_id,
             attention_mask=None):
    """ETC's contrastive predictive coding loss (Ainslie et al., section 3.4, after van den Oord
    et al., 2018): the long tokens of the segments chosen by ``masked`` (batch, n_g) bool are
    replaced by ``mask_token_id``, and the final state of each chosen segment's global token
    must pick out, among all chosen segments of the batch, the encoding of its own segment read
    alone: each segment's tokens with its global token and nothing else, in a second pass of the
    same ``model`` (an ``ETCModel``). With P (M, d) the predictions and T (M, d) the encodings
    of the M chosen segments, the loss is the InfoNCE mean_m -log softmax(P T^T)_mm (the other
    chosen segments are the negatives).

    ``input_ids``, ``attention_mask`` (batch, n_l); ``global_ids`` (batch, n_g);
    ``segment_ids`` (batch, n_l), the global token of each long token. Needs at least two chosen
    segments, each with at least one real token."""
    name = "cpc_loss"
    ids = checks.token_ids(input_ids, model.config.vocab_size, name)
    globals_ = checks.ids_array(global_ids, "global_ids", name, axes="(batch, n_g)")
    segments = checks.ids_array(segment_ids, "segment_ids", name, shape=ids.shape,
                                axes="(batch, n_l)")
    chosen = np.asarray(masked)
    if chosen.dtype != np.bool_ or chosen.shape != globals_.shape:
        raise ValueError(f"{name}: masked must be a bool array of shape (batch, n_g) = "
                         f"{globals_.shape}, True for the segments to predict; got {chosen.dtype} "
                         f"{chosen.shape}")
    real = np.ones(ids.shape, dtype=bool) if attention_mask is None else \
        checks.attention_mask(attention_mask, ids.shape, name)
    rows, columns = np.nonzero(chosen)
    members = [(segments[b] == g) & real[b] for b, g in zip(rows, columns)]
    if len(members) < 2 or not all(m.any() for m in members):
        raise ValueError(f"{name}: needs at least two chosen segments, each with a real long "
                         f"token (the other chosen segments are the negatives); got "
                         f"{len(members)} with token counts {[int(m.sum()) for m in members]}")
    hidden = np.zeros(ids.shape, dtype=bool)
    for b, m in zip(rows, members):
        hidden[b] |= m
    predicted = model(np.where(hidden, mask_token_id, ids), attention_mask, globals_, segments)
    predictions = predicted.global_hidden_state[rows, columns]                    # (M, d)
    width = max(int(m.sum()) for m in members)
    alone = np.full((len(members), width), model.config.pad_token_id, dtype=np.int64)
    alone_mask = np.zeros((len(members), width), dtype=bool)
    for r, (b, m) in enumerate(zip(rows, members)):
        alone[r, :m.sum()], alone_mask[r, :m.sum()] = ids[b, m], True
    encodings = model(alone, alone_mask, globals_[rows, columns][:, None],
                      np.zeros_like(alone), np.ones((len(members), 1), dtype=bool))
    targets = encodings.global_hidden_state[:, 0]                                 # (M, d)
    return F.cross_entropy(predictions @ targets.mT, np.arange(len(members)))
