"""ALBERT: A Lite BERT (Lan et al., 2020, "ALBERT: A Lite BERT for Self-supervised Learning of
Language Representations"), the survey's section IX-C.

ALBERT is BERT's encoder (``models.bert``) with two ways to spend fewer parameters and one new
pretraining task:

* factorised embedding parametrisation (Lan section 3.1): tokens are embedded in E dimensions
  and projected to the hidden size H, so the embeddings cost V x E + E x H instead of V x H
  (``AlbertEmbeddings``: ``BertEmbeddings`` of width E, then a linear map to H);
* cross-layer parameter sharing (section 3.1, Table 4): one layer applied L times
  (``share_layers="all"``, ALBERT's default), or only the attention (``"attention"``) or only
  the feed-forward network (``"ffn"``) shared, or nothing (``"none"``). The stack is
  ``nn.TransformerStack`` holding the same layer (or the same part) at every depth, so its
  gradient is the sum of the gradients every depth sends it;
* sentence-order prediction (SOP) instead of next-sentence prediction, and masked-LM targets
  that are n-grams (eq 106): ``minitorch_nlp.data.albert``.

``parameter_count`` counts a configuration's parameters from its shapes without building it,
for the paper's Table 1 (``PAPER_CONFIGS``). Names, calls and checkpoints follow HuggingFace
(``AlbertModel``, ``AlbertForMaskedLM``, ``AlbertForPreTraining``).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import functional as F
from ..autograd import Tensor
from ..nn import (Dropout, FeedForward, LayerNorm, Linear, MultiHeadAttention, TransformerLayer,
                  TransformerStack)
from ..nn.outputs import ModelOutput
from .bert import (HIDDEN_ACT, BertEmbeddings, BertForMaskedLM, BertLMHead,
                   BertModel, _BertWithHead, masked_lm_loss)
from .configs.albert import AlbertConfig, PAPER_CONFIGS, SHARING_MODES

__all__ = ["PAPER_CONFIGS", "SHARING_MODES", "AlbertConfig", "AlbertEmbeddings",
           "AlbertForMaskedLM", "AlbertForPreTraining", "AlbertModel", "parameter_count"]


class AlbertEmbeddings(BertEmbeddings):
    """Factorised embeddings (Lan section 3.1): token, segment and position embeddings of
    ``embedding_size`` E, summed, LayerNorm and dropout as in BERT, then ``project``, a linear
    map E -> H (HuggingFace's ``embedding_hidden_mapping_in``). With ``always_project`` False
    (ELECTRA) the map exists only when E != H."""

    always_project = True

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__(config, size=config.embedding_size)
        needed = self.always_project or config.embedding_size != config.hidden_size
        self.project = Linear(config.embedding_size, config.hidden_size) if needed else None

    def forward(self, input_ids: Tensor | np.ndarray, token_type_ids: Tensor | np.ndarray,
                position_ids: Tensor | np.ndarray | None = None):
        x = super().forward(input_ids, token_type_ids, position_ids)
        return x if self.project is None else self.project(x)


def shared_encoder(config):
    """``num_hidden_layers`` post-LN BERT layers sharing what ``config.share_layers`` says: the
    same ``TransformerLayer`` at every depth ("all"), one attention ("attention") or one
    feed-forward network ("ffn") in otherwise separate layers, or nothing ("none"). In the
    partial modes each layer keeps its own LayerNorms."""
    def attention():
        return MultiHeadAttention(config.hidden_size, config.num_attention_heads,
                                  dropout=config.attention_probs_dropout_prob)

    def feed_forward():
        return FeedForward(config.hidden_size, config.intermediate_size, 0.0,
                           HIDDEN_ACT[config.hidden_act])

    def layer(self_attn, ffn):
        return TransformerLayer(self_attn, ffn, functools.partial(
            LayerNorm, config.hidden_size, eps=config.layer_norm_eps),
            dropout=config.hidden_dropout_prob)

    depth, share = config.num_hidden_layers, config.share_layers
    if share == "all":
        return TransformerStack([layer(attention(), feed_forward())] * depth)
    shared_attention = attention() if share == "attention" else None
    shared_ffn = feed_forward() if share == "ffn" else None
    return TransformerStack([
        layer(attention() if shared_attention is None else shared_attention,
              feed_forward() if shared_ffn is None else shared_ffn)
        for _ in range(depth)])


class AlbertModel(BertModel):
    """The ALBERT encoder: ``BertModel`` with factorised embeddings and shared layers. Returns
    ``ModelOutput(last_hidden_state, pooler_output)`` as ``BertModel``."""

    config_class = AlbertConfig
    embeddings_class = AlbertEmbeddings
    build_encoder = staticmethod(shared_encoder)


class AlbertForMaskedLM(BertForMaskedLM):
    """ALBERT with the masked-LM head: BERT's head with its dense layer mapping H -> E, so that
    the decoder is the tied V x E word-embedding matrix (HuggingFace's ``predictions``)."""

    base_model_class = AlbertModel


class AlbertForPreTraining(_BertWithHead):
    """ALBERT with both pretraining heads (Lan section 3.1): the masked-LM head on every token
    (``prediction_logits``) and sentence-order prediction, dropout and a linear layer on the
    pooled [CLS] (``sop_logits`` (batch, 2): 0 the segments in order, 1 swapped; data:
    ``data.albert.sentence_order_pairs``). With ``labels`` and ``sentence_order_label`` both
    given, ``loss`` is the sum of the two mean losses."""

    base_model_class = AlbertModel
    add_pooling_layer = True

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__(config)
        self.mlm = BertLMHead(config, config.embedding_size)
        self.sop_dropout = Dropout(config.classifier_dropout_prob)
        self.sop = Linear(config.hidden_size, 2)
        self._init_head(self.mlm, self.sop)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None,
                sentence_order_label: Tensor | np.ndarray | None = None):
        out = self._encode(input_ids, attention_mask, token_type_ids, position_ids)
        prediction_logits = self.mlm(out.last_hidden_state, self.word_embeddings)
        sop_logits = self.sop(self.sop_dropout(out.pooler_output))
        loss = None
        if labels is not None and sentence_order_label is not None:
            loss = (masked_lm_loss(prediction_logits, labels)
                    + F.cross_entropy(sop_logits, sentence_order_label))
        return ModelOutput(loss=loss, prediction_logits=prediction_logits, sop_logits=sop_logits)


# ---- parameter counts from shapes (Lan Table 1) -------------------------------------------------
def parameter_count(config, add_pooling_layer=True):
    """How many parameters ``BertModel(config)`` or ``AlbertModel(config)`` holds, counted from
    the shapes of its layers without allocating them (ALBERT-xxlarge's would take 0.9 GB).
    Shared tensors count once, as in ``Module.num_parameters``; ``tests/test_sec9_albert.py``
    checks the two agree on models small enough to build."""
    hidden, ff = config.hidden_size, config.intermediate_size
    albert = isinstance(config, AlbertConfig)
    width = config.embedding_size if albert else hidden
    embeddings = ((config.vocab_size + config.max_position_embeddings + config.type_vocab_size)
                  * width + 2 * width)                      # three tables and the LayerNorm
    projection = (width * hidden + hidden) if albert else 0
    attention = 4 * (hidden * hidden + hidden)
    feed_forward = (hidden * ff + ff) + (ff * hidden + hidden)
    norms = 2 * 2 * hidden
    depth = config.num_hidden_layers
    share = config.share_layers if albert else "none"
    layers = {"all": attention + feed_forward + norms,
              "attention": attention + depth * (feed_forward + norms),
              "ffn": feed_forward + depth * (attention + norms),
              "none": depth * (attention + feed_forward + norms)}[share]
    pooler = (hidden * hidden + hidden) if add_pooling_layer else 0
    return embeddings + projection + layers + pooler
