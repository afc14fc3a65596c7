"""BERT: Bidirectional Encoder Representations from Transformers (Devlin et al., 2019, "BERT:
Pre-training of Deep Bidirectional Transformers for Language Understanding"), the survey's
section IV-C.

BERT is the Transformer's encoder (Vaswani et al., 2017) pretrained on unlabelled text with two
objectives, then fine-tuned with one small output layer per task:

* the input of every position is the sum of its WordPiece token embedding, its segment embedding
  (sentence A or B) and its learned position embedding, normalised by LayerNorm (Devlin section
  3.2, Figure 2: ``BertEmbeddings``);
* L post-LN encoder layers with GELU feed-forward networks (``nn.TransformerEncoder``, the one
  attention implementation of the package); the final hidden state of [CLS] goes through a dense
  layer and tanh, the "pooler", to give the sentence representation C (``BertPooler``);
* Masked LM: 15% of the tokens are chosen, of those 80% are replaced by [MASK], 10% by a random
  token and 10% left unchanged (``minitorch_nlp.data.masking``), and the model predicts the
  original token at every chosen position from both sides' context (section 3.1, Task #1;
  the survey's eq 25 writes this objective, ``masked_lm_loss``). The prediction head is a dense
  layer, GELU and LayerNorm, then the decoder tied to the input word embeddings with an output
  bias of its own (``BertLMHead``);
* Next Sentence Prediction: for a pair (A, B), B is the true next segment half of the time and a
  random one from another document otherwise; C predicts which (section 3.1, Task #2,
  ``BertForPreTraining``);
* fine-tuning (section 4, Figure 4): a linear layer on C for sequence classification, on every
  token for tagging, and start / end vectors over the tokens for extractive question answering
  (``BertForSequenceClassification``, ``BertForTokenClassification``,
  ``BertForQuestionAnswering`` with ``best_span``).

Names and calls mirror HuggingFace's ``transformers`` (``BertConfig`` fields,
``model(input_ids=..., attention_mask=..., token_type_ids=..., labels=...)`` returning a
``ModelOutput``), and the HuggingFace checkpoints load through an explicit key map in
``models/families/bert.py``. ``mean_pool`` turns the last hidden states into sentence embeddings
(Reimers and Gurevych, 2019, Sentence-BERT), as all-MiniLM-L6-v2 does.
"""
from __future__ import annotations


import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import Tensor, tensor, zeros
from ..nn import (Dropout, Embedding, LayerNorm, LearnedPositionalEmbedding, Linear, Module,
                  Parameter, TransformerEncoder, init)
from ..nn.outputs import ModelOutput
from .configs.bert import BertConfig, HIDDEN_ACT

__all__ = ["BertConfig", "BertEmbeddings", "BertForMaskedLM", "BertForPreTraining",
           "BertForQuestionAnswering", "BertForSequenceClassification",
           "BertForTokenClassification", "BertLMHead", "BertModel", "BertPooler", "best_span",
           "init_bert_weights", "masked_lm_loss", "mean_pool"]

IGNORE_INDEX = -100


def init_bert_weights(module, std):
    """BERT's initialisation (Devlin et al.'s released code): every weight matrix and embedding
    from a normal of standard deviation ``std`` (``initializer_range``, 0.02) truncated at two
    standard deviations, biases zero, LayerNorm gains one; padding rows of embeddings zero."""
    for layer in module.modules():
        if isinstance(layer, Linear):
            init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
            init.zeros_(layer.bias)
        elif isinstance(layer, Embedding):
            init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
            if layer.padding_idx is not None:
                layer.weight.data[layer.padding_idx] = 0
                layer.weight._bump_version()
        elif isinstance(layer, LearnedPositionalEmbedding):
            init.trunc_normal_(layer.table, std=std, a=-2 * std, b=2 * std)


class BertEmbeddings(Module):
    """The input representation (Devlin section 3.2, Figure 2): token + segment + position
    embeddings, summed, then LayerNorm and dropout. The vectors have ``size`` features (default
    ``hidden_size``; ALBERT and ELECTRA embed in fewer and project). A subclass with
    ``segments = False`` has no segment embeddings (DistilBERT) and ignores ``token_type_ids``."""

    segments = True

    def __init__(self, config: BertConfig, size: int | None = None) -> None:
        super().__init__()
        size = config.hidden_size if size is None else size
        self.word_embeddings = Embedding(config.vocab_size, size, padding_idx=config.pad_token_id)
        self.position_embeddings = LearnedPositionalEmbedding(config.max_position_embeddings,
                                                              size)
        if self.segments:
            self.token_type_embeddings = Embedding(config.type_vocab_size, size)
        self.norm = LayerNorm(size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.max_length = config.max_position_embeddings

    def forward(self, input_ids: Tensor | np.ndarray, token_type_ids: Tensor | np.ndarray,
                position_ids: Tensor | np.ndarray | None = None):
        """``input_ids`` and ``token_type_ids`` (batch, time) int arrays; positions 0 .. time-1
        unless ``position_ids`` (batch, time) are given."""
        x = self.word_embeddings(input_ids)
        if self.segments:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(self.position_embeddings(x, position_ids=position_ids)))


class BertPooler(Module):
    """C = tanh(W h_[CLS] + b): the final hidden state of the first token, [CLS], through a dense
    layer and tanh, the sequence's representation for NSP and classification."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: Tensor):
        return F.tanh(self.dense(hidden[:, 0]))


class BertModel(Module):
    """The BERT encoder: embeddings, ``num_hidden_layers`` post-LN Transformer encoder layers and
    (``add_pooling_layer=True``) the pooler. Returns ``ModelOutput(last_hidden_state (batch,
    time, hidden_size), pooler_output (batch, hidden_size) or None)``."""

    config_class = BertConfig
    embeddings_class = BertEmbeddings
    pooler_class = BertPooler
    norm_first = False      # True: pre-LN layers and a final LayerNorm (Megatron-BERT)

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__}: config must be a "
                            f"{self.config_class.__name__}, got {type(config).__name__}")
        self.config = config
        self.embeddings = self.embeddings_class(config)
        self.encoder = self.build_encoder(config)
        self.pooler = self.pooler_class(config) if add_pooling_layer else None
        init_bert_weights(self, config.initializer_range)

    def build_encoder(self, config):
        """The stack of ``num_hidden_layers`` encoder layers: post-LN, or with ``norm_first``
        pre-LN followed by a final LayerNorm (ALBERT overrides it to share layers across
        depth, MobileBERT to use its bottleneck layers)."""
        return TransformerEncoder(
            config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.intermediate_size, dropout=config.hidden_dropout_prob,
            activation=HIDDEN_ACT[config.hidden_act], norm_first=self.norm_first,
            layer_norm_eps=config.layer_norm_eps,
            attention_dropout=config.attention_probs_dropout_prob,
            activation_dropout=0.0)   # BERT drops the feed-forward output, not its hidden units

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False, *, layer_inputs=None):
        """``input_ids`` (batch, time) ints in [0, vocab_size); ``attention_mask`` (batch, time),
        1/True on real tokens and 0/False on padding (None: every token is real);
        ``token_type_ids`` (batch, time) segment ids, 0 for sentence A and 1 for B (None: all
        0); ``position_ids`` (batch, time), None for the model's own. ``head_mask`` (layers,
        heads) scales each head's output (0 prunes it); ``output_hidden_states`` and
        ``output_attentions`` add ``hidden_states`` (the embeddings and every layer's output)
        and ``attentions`` (every layer's weights) to the output, as in HuggingFace.
        ``layer_inputs``: a dict of further inputs every encoder layer's attention takes
        (``LongformerModel`` passes its global attention mask this way)."""
        name = type(self).__name__
        config = self.config
        ids = checks.token_ids(input_ids, config.vocab_size, name)
        if ids.shape[1] > self.embeddings.max_length:
            raise ValueError(f"{name}: the sequence length {ids.shape[1]} exceeds the "
                             f"{self.embeddings.max_length} positions the model has")
        if token_type_ids is None:
            types = np.zeros_like(ids)
        else:
            types = checks.token_ids(token_type_ids, config.type_vocab_size, name,
                                     name="token_type_ids", size_name="type_vocab_size",
                                     shape=ids.shape)
        key_mask = checks.attention_mask(attention_mask, ids.shape, name)
        out = self.encoder(self.embeddings(ids, types, position_ids), key_mask=key_mask,
                           head_mask=head_mask, output_hidden_states=output_hidden_states,
                           output_attentions=output_attentions, **(layer_inputs or {}))
        hidden = out.last_hidden_state
        pooled = None if self.pooler is None else self.pooler(hidden)
        return ModelOutput(last_hidden_state=hidden, pooler_output=pooled,
                           hidden_states=out.hidden_states, attentions=out.attentions)


@cookbook.equation(25)
def masked_lm_loss(logits, labels):
    r"""The masked-LM loss: the mean over the chosen positions T of -log p(x | N), where N is the
    input with those positions masked (Devlin section 3.1, Task #1)::

        L_BERT = sum_{x in T} log p(x | N)                                    (survey eq 25)

    is the log-likelihood this loss negates (and averages over |T|): each chosen token is
    predicted from the unmasked ones, independently of the other chosen tokens (which XLNet's
    eq 26-27 change). ``logits`` (batch, time, vocab), ``labels`` (batch, time): the original
    token at chosen positions and -100 elsewhere.
    """
    return F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)


class BertLMHead(Module):
    """The masked-LM prediction head: a dense layer, GELU and LayerNorm, then the decoder, which
    is the input word-embedding matrix itself (tied, so it costs no parameters) plus an output
    bias of its own (Devlin et al.'s released code; HuggingFace's ``cls.predictions``).
    ``embedding_size``: the word embeddings' width, which the dense layer maps to (default
    ``hidden_size``; ALBERT's factorised embeddings are narrower)."""

    def __init__(self, config: BertConfig, embedding_size: int | None = None) -> None:
        super().__init__()
        embedding_size = config.hidden_size if embedding_size is None else embedding_size
        self.approximate = "tanh" if HIDDEN_ACT[config.hidden_act] == "gelu_tanh" else "none"
        self.dense = Linear(config.hidden_size, embedding_size)
        self.norm = LayerNorm(embedding_size, eps=config.layer_norm_eps)
        self.bias = Parameter(zeros(config.vocab_size))

    def forward(self, hidden: Tensor, word_embeddings: Tensor):
        """``hidden`` (batch, time, hidden_size) and the (vocab_size, hidden_size) word-embedding
        Parameter -> logits (batch, time, vocab_size)."""
        x = self.norm(F.gelu(self.dense(hidden), approximate=self.approximate))
        return F.linear(x, word_embeddings, self.bias)


class _BertWithHead(Module):
    """A ``BertModel`` (or subclass, ``base_model_class``) under ``self.bert`` plus a task head;
    the head's new layers get BERT's initialisation."""

    base_model_class = BertModel
    add_pooling_layer = False
    lm_head_class = BertLMHead      # the masked-LM head of the heads that have one

    def __init__(self, config):
        super().__init__()
        self.bert = self.base_model_class(config, add_pooling_layer=self.add_pooling_layer)
        self.config = config

    def _init_head(self, *modules):
        for module in modules:
            init_bert_weights(module, self.config.initializer_range)

    def _add_classifier(self):
        """Dropout (``classifier_dropout``, else ``hidden_dropout_prob``) and a linear layer to
        ``num_labels``: the fine-tuning heads of Devlin et al. section 4."""
        p = self.config.classifier_dropout
        self.dropout = Dropout(self.config.hidden_dropout_prob if p is None else p)
        self.classifier = Linear(self.config.hidden_size, self.config.num_labels)
        self._init_head(self.classifier)

    def _encode(self, input_ids, attention_mask, token_type_ids, position_ids, head_mask=None,
                output_hidden_states=False, output_attentions=False, **base_inputs):
        return self.bert(input_ids, attention_mask, token_type_ids, position_ids, head_mask,
                         output_hidden_states, output_attentions, **base_inputs)

    @property
    def word_embeddings(self):
        """The (vocab_size, hidden_size) input word-embedding Parameter."""
        return self.bert.embeddings.word_embeddings.weight


class BertForMaskedLM(_BertWithHead):
    """BERT with the masked-LM head (no pooler, as in HuggingFace). With ``labels`` (the
    original ids at masked positions, -100 elsewhere; ``data.masking.MaskedLMCollator`` makes
    them) the output has ``loss``, ``masked_lm_loss``; ``logits`` (batch, time, vocab_size).
    Further keyword arguments go to the base model's ``forward`` (Longformer's
    ``global_attention_mask``)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.mlm = self.lm_head_class(config, self.word_embeddings.shape[1])
        self._init_head(self.mlm)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False, **base_inputs):
        out = self._encode(input_ids, attention_mask, token_type_ids, position_ids, head_mask,
                           output_hidden_states, output_attentions, **base_inputs)
        logits = self.mlm(out.last_hidden_state, self.word_embeddings)
        loss = None if labels is None else masked_lm_loss(logits, labels)
        return ModelOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                           attentions=out.attentions)


class BertForPreTraining(_BertWithHead):
    """BERT with both pretraining heads (Devlin section 3.1): the masked-LM head on every token
    (``prediction_logits``) and NSP, a linear layer on the pooled [CLS] (``seq_relationship_logits``
    (batch, 2): class 0 "B follows A", class 1 "B is random", HuggingFace's convention). With
    ``labels`` and ``next_sentence_label`` both given, ``loss`` is the sum of the two mean losses
    (the paper's "sum of the mean masked LM likelihood and the mean next sentence prediction
    likelihood", appendix A.2)."""

    add_pooling_layer = True

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.mlm = self.lm_head_class(config, self.word_embeddings.shape[1])
        self.nsp = Linear(config.hidden_size, 2)
        self._init_head(self.mlm, self.nsp)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None,
                next_sentence_label: Tensor | np.ndarray | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False):
        out = self._encode(input_ids, attention_mask, token_type_ids, position_ids, head_mask,
                           output_hidden_states, output_attentions)
        prediction_logits = self.mlm(out.last_hidden_state, self.word_embeddings)
        seq_relationship_logits = self.nsp(out.pooler_output)
        loss = None
        if labels is not None and next_sentence_label is not None:
            loss = (masked_lm_loss(prediction_logits, labels)
                    + F.cross_entropy(seq_relationship_logits, next_sentence_label))
        return ModelOutput(loss=loss, prediction_logits=prediction_logits,
                           seq_relationship_logits=seq_relationship_logits,
                           hidden_states=out.hidden_states, attentions=out.attentions)


class BertForSequenceClassification(_BertWithHead):
    """Fine-tuning for a label per sequence (or pair; Devlin section 4.1, GLUE): dropout and a
    linear layer on the pooled [CLS] C, ``logits`` (batch, num_labels). ``labels`` (batch,):
    class ids and cross-entropy, or with ``num_labels == 1`` real targets and mean squared error
    (regression, as STS-B), as HuggingFace does."""

    add_pooling_layer = True

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self._add_classifier()

    def sequence_representation(self, encoded):
        """What the classifier reads: the pooled [CLS], C (``pooler_output``)."""
        return encoded.pooler_output

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False):
        encoded = self._encode(input_ids, attention_mask, token_type_ids, position_ids,
                               head_mask, output_hidden_states, output_attentions)
        logits = self.classifier(self.dropout(self.sequence_representation(encoded)))
        loss = None
        if labels is not None:
            loss = (F.mse_loss(logits[:, 0], tensor(labels, dtype=logits.dtype,
                                                    backend=logits.backend))
                    if self.config.num_labels == 1 else F.cross_entropy(logits, labels))
        return ModelOutput(loss=loss, logits=logits, hidden_states=encoded.hidden_states,
                           attentions=encoded.attentions)


class BertForTokenClassification(_BertWithHead):
    """Fine-tuning for a label per token (Devlin section 5.3, named entities): dropout and a
    linear layer on every final hidden state, ``logits`` (batch, time, num_labels); ``labels``
    (batch, time) with -100 where no label counts (padding, continuation word pieces)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self._add_classifier()

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                labels: Tensor | np.ndarray | None = None):
        hidden = self._encode(input_ids, attention_mask, token_type_ids,
                              position_ids).last_hidden_state
        logits = self.classifier(self.dropout(hidden))
        loss = None if labels is None else F.cross_entropy(logits, labels,
                                                           ignore_index=IGNORE_INDEX)
        return ModelOutput(loss=loss, logits=logits)


class BertForQuestionAnswering(_BertWithHead):
    """Extractive question answering (Devlin section 4.2, SQuAD): question as sentence A, passage
    as sentence B; a start vector S and an end vector E (one ``Linear(hidden_size, 2)``) score
    every token, P(i is the start) = softmax_i(S . T_i), likewise for the end.

    ``start_logits``, ``end_logits`` (batch, time). With ``start_positions`` and
    ``end_positions`` (batch,), the loss is the mean of the two cross-entropies; positions
    outside the sequence are clamped to ``time`` and ignored, as in HuggingFace. ``best_span``
    decodes the answer."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.qa_outputs = Linear(config.hidden_size, 2)
        self._init_head(self.qa_outputs)

    def token_representation(self, hidden):
        """What S and E score: the final hidden states as they are (DistilBERT drops them)."""
        return hidden

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                start_positions: Tensor | np.ndarray | None = None,
                end_positions: Tensor | np.ndarray | None = None):
        hidden = self._encode(input_ids, attention_mask, token_type_ids,
                              position_ids).last_hidden_state
        logits = self.qa_outputs(self.token_representation(hidden))
        start_logits, end_logits = logits[..., 0], logits[..., 1]
        loss = None
        if start_positions is not None and end_positions is not None:
            time = start_logits.shape[1]
            losses = [F.cross_entropy(scores, np.clip(np.asarray(positions, dtype=np.int64),
                                                      0, time), ignore_index=time)
                      for scores, positions in ((start_logits, start_positions),
                                                (end_logits, end_positions))]
            loss = (losses[0] + losses[1]) / 2
        return ModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits)


def best_span(start_logits, end_logits, max_answer_length=30, allowed=None):
    """The answer span of extractive QA: the (i, j) with i <= j < i + ``max_answer_length`` that
    maximises S . T_i + E . T_j (Devlin section 4.2), i.e. ``start_logits[i] + end_logits[j]``.

    ``start_logits``, ``end_logits`` (batch, time) Tensors or arrays; ``allowed`` (batch, time)
    bool, True where an answer may start or end (the passage's tokens; None: everywhere).
    Returns int64 arrays ``starts``, ``ends`` (batch,) and the float ``scores`` (batch,).
    """
    start, end = (np.asarray(x.numpy() if isinstance(x, Tensor) else x, dtype=np.float64)
                  for x in (start_logits, end_logits))
    if start.ndim != 2 or start.shape != end.shape:
        raise ValueError(f"best_span: start_logits {start.shape} and end_logits {end.shape} "
                         "must both be (batch, time)")
    checks.positive_int(max_answer_length, "max_answer_length", "best_span")
    batch, time = start.shape
    offsets = np.arange(time)[None, :] - np.arange(time)[:, None]     # j - i
    valid = np.broadcast_to((offsets >= 0) & (offsets < max_answer_length), (batch, time, time))
    if allowed is not None:
        allowed = np.asarray(allowed, dtype=bool)
        valid = valid & allowed[:, :, None] & allowed[:, None, :]
    if not valid.reshape(batch, -1).any(axis=1).all():
        raise ValueError("best_span: some example has no allowed position for an answer")
    scores = np.where(valid, start[:, :, None] + end[:, None, :], -np.inf)
    best = scores.reshape(batch, -1).argmax(axis=1)
    starts, ends = np.divmod(best, time)
    return starts, ends, scores.reshape(batch, -1)[np.arange(batch), best]


def mean_pool(last_hidden_state, attention_mask, normalize=False):
    """Sentence embeddings: the mean of the token vectors over the real tokens (Reimers and
    Gurevych, 2019, Sentence-BERT's MEAN pooling), L2-normalised with ``normalize=True`` so that
    a dot product is the cosine similarity (all-MiniLM-L6-v2's ``Normalize`` module).

    ``last_hidden_state`` (batch, time, hidden) Tensor; ``attention_mask`` (batch, time), 1 on
    real tokens. Differentiable; returns (batch, hidden)::

        out = model(**tok(sentences, padding=True, return_tensors="np"))
        embeddings = mean_pool(out.last_hidden_state, batch["attention_mask"], normalize=True)
    """
    mask = np.asarray(attention_mask.numpy() if isinstance(attention_mask, Tensor)
                      else attention_mask)
    if mask.shape != last_hidden_state.shape[:2]:
        raise ValueError(f"mean_pool: attention_mask {mask.shape} must be (batch, time) = "
                         f"{last_hidden_state.shape[:2]}")
    weights = tensor(mask[:, :, None], dtype=last_hidden_state.dtype,
                     backend=last_hidden_state.backend)
    summed = (last_hidden_state * weights).sum(axis=1)
    pooled = summed / weights.sum(axis=1).clip(1e-9, None)
    if normalize:
        pooled = pooled / (pooled * pooled).sum(axis=-1, keepdims=True).sqrt().clip(1e-12, None)
    return pooled
