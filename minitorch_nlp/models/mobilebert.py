"""MobileBERT (Sun, Yu, Song, Liu, Yang and Zhou, 2020, "MobileBERT: a Compact Task-Agnostic BERT
for Resource-Limited Devices"), the survey's section VI-A.3, eq 45.

MobileBERT is as deep as BERT-large (24 layers) but thin: each layer works at a narrow width B
(128) inside a wider inter-block width H (512), through bottlenecks (Sun et al. section 3.1,
Figure 1c):

* ``NoNorm`` (eq 45): NoNorm(h) = gamma o h + beta, an element-wise affine map in place of
  LayerNorm (section 3.4: normalisation and GELU cost most of the latency on a phone; MobileBERT
  uses ReLU);
* ``MobileBertEmbeddings``: word embeddings of a small size E (128), the embeddings of each token
  and its two neighbours concatenated (a kernel-3 convolution, the "3-gram" embedding) and mapped
  to H, plus position and segment embeddings, then NoNorm;
* ``MobileBertLayer``: the input bottleneck maps H -> B for the layer's residual stream, a
  second (shared) bottleneck gives the queries and keys, the values come from the H-wide input;
  multi-head attention at width B; F feed-forward networks stacked one after another (4 in
  MobileBERT, section 3.2: they restore the ratio of attention to feed-forward parameters that
  the bottleneck upset); the output bottleneck maps B -> H, added to the layer's input;
* ``MobileBertLMHead``: the masked-LM head's decoder is the E-wide word embeddings extended by
  H - E rows of its own, so that the H-wide states can be decoded.

The models mirror HuggingFace's (``MobileBertModel``, ``MobileBertForMaskedLM``,
``MobileBertForPreTraining``, ``MobileBertForSequenceClassification``) with its configuration
switches (``trigram_input``, ``use_bottleneck``, ``use_bottleneck_attention``,
``key_query_shared_bottleneck``, ``num_feedforward_networks``, ``normalization_type``,
``classifier_activation``); the key map in ``models/families/mobilebert.py`` loads their
checkpoints.
"""
from __future__ import annotations


import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import concatenate, empty, ones, Tensor, zeros
from ..nn import (Dropout, Embedding, FeedForward, LayerNorm, LearnedPositionalEmbedding, Linear,
                  Module, ModuleList, MultiHeadAttention, Parameter, TransformerStack, init)
from .bert import (BertForMaskedLM, BertForPreTraining,
                   BertForSequenceClassification, BertModel)
from .configs.mobilebert import MobileBertConfig

__all__ = ["MobileBertConfig", "MobileBertEmbeddings", "MobileBertForMaskedLM",
           "MobileBertForPreTraining", "MobileBertForSequenceClassification", "MobileBertLMHead",
           "MobileBertLayer", "MobileBertModel", "NoNorm", "no_norm"]


# HuggingFace builds the LayerNorms of the embeddings and of the last feed-forward network with
# torch's default eps, not layer_norm_eps
TORCH_LAYER_NORM_EPS = 1e-5


def normalization(config, features, eps=None):
    """The normalisation ``config.normalization_type`` names over ``features``: ``NoNorm``
    (eq 45, MobileBERT) or ``LayerNorm`` with ``eps`` (default ``config.layer_norm_eps``; the
    IB-BERT teacher)."""
    if config.normalization_type == "no_norm":
        return NoNorm(features)
    return LayerNorm(features, eps=config.layer_norm_eps if eps is None else eps)


@cookbook.equation(45)
def no_norm(h, weight, bias):
    r"""MobileBERT's replacement for LayerNorm (Sun et al. eq 2)::

        NoNorm(h) = gamma o h + beta,      gamma, beta in R^n

    an element-wise affine map (o the Hadamard product) over the last axis of ``h``: no
    statistics, so no reductions at inference time. Unlike LayerNorm it does not bound the
    activations, which therefore grow with depth."""
    return h * weight + bias


class NoNorm(Module):
    """``no_norm`` with learnt gamma (``weight``, 1 at first) and beta (``bias``, 0 at first)."""

    def __init__(self, features) -> None:
        super().__init__()
        self.weight = Parameter(ones(checks.positive_int(features, "features", "NoNorm")))
        self.bias = Parameter(zeros(features))

    def forward(self, h: Tensor):
        return no_norm(h, self.weight, self.bias)


class MobileBertEmbeddings(Module):
    """Word embeddings of size E; each token's with its right and left neighbours' concatenated
    (zeros past the ends: a kernel-3 convolution over the sequence, ``trigram_input``) and
    mapped to H by ``embedding_transformation`` (without the 3-gram, only when E differs from
    H); plus position and segment embeddings; NoNorm (or LayerNorm) and dropout (Sun et al.
    section 3.3, "embedding factorization")."""

    segments = True

    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        self.trigram_input = config.trigram_input
        self.word_embeddings = Embedding(config.vocab_size, config.embedding_size,
                                         padding_idx=config.pad_token_id)
        self.embedding_transformation = Linear(
            (3 if config.trigram_input else 1) * config.embedding_size, config.hidden_size)
        self.position_embeddings = LearnedPositionalEmbedding(config.max_position_embeddings,
                                                              config.hidden_size)
        self.token_type_embeddings = Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = normalization(config, config.hidden_size, eps=TORCH_LAYER_NORM_EPS)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.max_length = config.max_position_embeddings

    def forward(self, input_ids: Tensor | np.ndarray, token_type_ids: Tensor | np.ndarray,
                position_ids: Tensor | np.ndarray | None = None):
        x = self.word_embeddings(input_ids)                                 # (batch, time, E)
        if self.trigram_input:
            edge = x[:, :1] * 0.0
            following = concatenate([x[:, 1:], edge], axis=1)
            preceding = concatenate([edge, x[:, :-1]], axis=1)
            x = concatenate([following, x, preceding], axis=-1)
        x = self.embedding_transformation(x)
        x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(self.position_embeddings(x, position_ids=position_ids)))


class Bottleneck(Module):
    """A linear map from the inter-block to the intra-block width, then NoNorm (or LayerNorm)."""

    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intra_bottleneck_size)
        self.norm = normalization(config, config.intra_bottleneck_size)

    def forward(self, x: Tensor):
        return self.norm(self.dense(x))


class BottleneckAttention(MultiHeadAttention):
    """Multi-head attention at the bottleneck width B whose values may come from an input of
    another width (MobileBERT: the H-wide layer input, the queries and keys from the shared
    bottleneck): ``MultiHeadAttention`` with its own value projection."""

    def __init__(self, width: int, num_heads: int, value_width: int, dropout: float = 0.0) -> None:
        super().__init__(width, num_heads, dropout=dropout)
        self.value_width = value_width
        self.v_proj = Linear(value_width, width)

    def project(self, query, key, value, cache):
        name = "MobileBertLayer"
        checks.features(query, self.d_model, "query", name)
        checks.features(value, self.value_width, "value", name)
        return (self.split_heads(self.q_proj(query)), self.split_heads(self.k_proj(key)),
                self.split_heads(self.v_proj(value)))


class MobileBertLayer(Module):
    """One MobileBERT block (Sun et al. Figure 1c, HuggingFace's layout), on x (batch, time, H);
    Norm is NoNorm (eq 45) or LayerNorm (``normalization_type``)::

        r = Norm(W_i x)                    the input bottleneck: the residual stream (B)
        s = Norm(W_a x)                    the shared bottleneck: queries and keys   (B)
        r = Norm(MultiHead(s, s, x) + r)
        r = Norm(FFN_k(r) + r)             k = 1 .. F, the stacked feed-forward networks
        out = Norm(Dropout(W_o r) + x)     the output bottleneck                     (H)

    HuggingFace's switches change the first lines: ``use_bottleneck_attention`` takes queries,
    keys and values from r; neither it nor ``key_query_shared_bottleneck`` takes queries and
    keys from x; ``use_bottleneck=False`` has no bottlenecks at all (B = H, r = x, no W_o: a
    BERT layer with stacked feed-forward networks, dropout on the attention's and the last
    feed-forward network's outputs).

    Takes the keyword arguments of a ``TransformerLayer`` (``key_mask``, ``head_mask``,
    ``attentions``), so ``TransformerStack`` runs a list of them."""

    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        wide, narrow = config.hidden_size, config.true_hidden_size
        self.use_bottleneck = config.use_bottleneck
        self.use_bottleneck_attention = config.use_bottleneck and config.use_bottleneck_attention
        self.shared_query_key = config.use_bottleneck and config.key_query_shared_bottleneck
        if config.use_bottleneck:
            self.input_bottleneck = Bottleneck(config)
        if self.shared_query_key:
            self.attention_bottleneck = Bottleneck(config)
        values_wide = config.use_bottleneck and not config.use_bottleneck_attention
        self.self_attn = BottleneckAttention(narrow, config.num_attention_heads,
                                             wide if values_wide else narrow,
                                             dropout=config.attention_probs_dropout_prob)
        self.attention_norm = normalization(config, narrow)
        activation = self.activation = config.activations[config.hidden_act]
        self.stacked_ffns = ModuleList(
            [FeedForward(narrow, config.intermediate_size, activation=activation)
             for _ in range(config.num_feedforward_networks - 1)])
        self.stacked_norms = ModuleList([normalization(config, narrow)
                                         for _ in range(config.num_feedforward_networks - 1)])
        self.feed_forward = FeedForward(narrow, config.intermediate_size, activation=activation)
        self.ffn_norm = normalization(config, narrow, eps=TORCH_LAYER_NORM_EPS)
        self.dropout = Dropout(config.hidden_dropout_prob)
        # HuggingFace drops the attention's and the last feed-forward network's outputs only in
        # a layer without bottlenecks (with them, the output bottleneck's output is dropped)
        self.sublayer_dropout = Dropout(0.0 if config.use_bottleneck
                                        else config.hidden_dropout_prob)
        if config.use_bottleneck:
            self.output_bottleneck = Linear(narrow, wide)
            self.output_norm = normalization(config, wide)

    def forward(self, x: Tensor, memory=None, *, key_mask: Tensor | np.ndarray | None = None,
                cache=None, attentions=None, head_mask: Tensor | np.ndarray | None = None):
        residual = self.input_bottleneck(x) if self.use_bottleneck else x
        if self.use_bottleneck_attention:
            queries = values = residual
        elif self.shared_query_key:
            queries, values = self.attention_bottleneck(x), x
        else:
            queries = values = x
        attended = self.self_attn(queries, queries, values, key_mask=key_mask,
                                  head_mask=head_mask, need_weights=attentions is not None)
        if attentions is not None:
            attended, attentions["self"] = attended
        residual = self.attention_norm(self.sublayer_dropout(attended) + residual)
        for feed_forward, norm in zip(self.stacked_ffns, self.stacked_norms):
            residual = norm(feed_forward(residual) + residual)
        residual = self.ffn_norm(self.sublayer_dropout(self.feed_forward(residual)) + residual)
        if not self.use_bottleneck:
            return residual
        return self.output_norm(self.dropout(self.output_bottleneck(residual)) + x)


class MobileBertPooler(Module):
    """BERT's pooler, tanh of a dense layer on the first token's hidden state, or with
    ``classifier_activation=False`` (HuggingFace's switch) that hidden state as it is."""

    def __init__(self, config: MobileBertConfig) -> None:
        super().__init__()
        self.activate = config.classifier_activation
        if self.activate:
            self.dense = Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: Tensor):
        first = hidden[:, 0]
        return F.tanh(self.dense(first)) if self.activate else first


class MobileBertModel(BertModel):
    """The MobileBERT encoder: ``BertModel`` with ``MobileBertEmbeddings``, a stack of
    ``MobileBertLayer``s and ``MobileBertPooler``."""

    config_class = MobileBertConfig
    embeddings_class = MobileBertEmbeddings
    pooler_class = MobileBertPooler

    @staticmethod
    def build_encoder(config):
        return TransformerStack([MobileBertLayer(config)
                                 for _ in range(config.num_hidden_layers)])


class MobileBertLMHead(Module):
    """The masked-LM head: dense, activation, LayerNorm (HuggingFace keeps a LayerNorm here),
    then the decoder [word embeddings (V, E) | its own (V, H - E) columns] plus a bias;
    ``embedding_size`` is E, the word embeddings' width."""

    def __init__(self, config: MobileBertConfig, embedding_size: int) -> None:
        super().__init__()
        self.activation = config.activations[config.hidden_act]
        self.dense = Linear(config.hidden_size, config.hidden_size)
        self.norm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.extra_columns = Parameter(init.normal_(
            empty(config.hidden_size - embedding_size, config.vocab_size),
            std=config.initializer_range))
        self.bias = Parameter(zeros(config.vocab_size))

    def forward(self, hidden: Tensor, word_embeddings: Tensor):
        x = self.dense(hidden)
        x = self.norm(F.relu(x) if self.activation == "relu" else F.gelu(x))
        decoder = concatenate([word_embeddings, self.extra_columns.T], axis=1)   # (V, H)
        return F.linear(x, decoder, self.bias)


class MobileBertForMaskedLM(BertForMaskedLM):
    """MobileBERT with the masked-LM head (no pooler). ``labels``: the original ids at masked
    positions, -100 elsewhere."""

    base_model_class = MobileBertModel
    lm_head_class = MobileBertLMHead


class MobileBertForPreTraining(BertForPreTraining):
    """MobileBERT with both of BERT's pretraining heads: masked LM on every token
    (``prediction_logits``) and next-sentence prediction on the pooled [CLS]
    (``seq_relationship_logits``); ``loss`` is the sum of the two mean losses."""

    base_model_class = MobileBertModel
    lm_head_class = MobileBertLMHead


class MobileBertForSequenceClassification(BertForSequenceClassification):
    """A label per sequence: dropout and a linear layer on the pooled [CLS], as
    ``BertForSequenceClassification`` (and HuggingFace's MobileBERT head)."""

    base_model_class = MobileBertModel
