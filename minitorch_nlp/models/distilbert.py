"""DistilBERT (Sanh, Debut, Chaumond and Wolf, 2019, "DistilBERT, a distilled version of BERT:
smaller, faster, cheaper and lighter"), the survey's section VI-A.1.

DistilBERT is BERT (``models.bert``) with half the layers, trained by distillation from a BERT
teacher (section 2-3 of the paper):

* the same hidden size and layers (post-LN Transformer encoder layers, GELU feed-forward
  networks) but ``num_hidden_layers`` halved; no segment (token-type) embeddings and no pooler,
  since next-sentence prediction is dropped (``DistilBertEmbeddings``, ``DistilBertModel``);
* the student is initialised from the teacher by taking one layer out of two
  (``distilbert_from_teacher``: the teacher's layers 0, 2, 4 ... by default);
* the training loss is a triple loss: distillation on the masked-LM logits (eq 37 with T^2),
  the masked-LM loss and a cosine loss aligning the hidden states
  (``compress.distillation.TripleLoss``), on dynamically masked text without NSP.

``DistilBertConfig`` keeps BERT's field names inside and reads / writes HuggingFace's DistilBERT
names (``dim``, ``n_layers``, ``n_heads``, ``hidden_dim`` ...); the HuggingFace checkpoints of
``DistilBertModel``, ``DistilBertForMaskedLM``, ``DistilBertForSequenceClassification``,
``DistilBertForTokenClassification`` and ``DistilBertForQuestionAnswering`` load through the key
map in ``models/families/distilbert.py``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import functional as F
from ..autograd import Tensor
from ..nn import Dropout, Linear
from .bert import (BertConfig, BertEmbeddings, BertForMaskedLM, BertForQuestionAnswering,
                   BertForSequenceClassification, BertForTokenClassification, BertModel)
from .configs.distilbert import DistilBertConfig

__all__ = ["DistilBertConfig", "DistilBertEmbeddings", "DistilBertForMaskedLM",
           "DistilBertForQuestionAnswering", "DistilBertForSequenceClassification",
           "DistilBertForTokenClassification", "DistilBertModel", "distilbert_from_teacher"]


class DistilBertEmbeddings(BertEmbeddings):
    """Token + position embeddings, LayerNorm and dropout: BERT's without the segments."""

    segments = False


class DistilBertModel(BertModel):
    """The DistilBERT encoder: ``BertModel`` with ``DistilBertEmbeddings`` and no pooler. Takes no
    ``token_type_ids``."""

    config_class = DistilBertConfig
    embeddings_class = DistilBertEmbeddings

    def __init__(self, config: DistilBertConfig, add_pooling_layer: bool = False) -> None:
        if add_pooling_layer:
            raise ValueError("DistilBertModel: DistilBERT has no pooler (Sanh et al. removed it "
                             "with next-sentence prediction)")
        super().__init__(config, add_pooling_layer=False)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False):
        """As ``BertModel.forward``; ``token_type_ids`` must be None (no segment embeddings)."""
        if token_type_ids is not None:
            raise ValueError(f"{type(self).__name__}: DistilBERT has no token types (Sanh et al. "
                             "removed the segment embeddings); leave token_type_ids out")
        return super().forward(input_ids, attention_mask, None, position_ids, head_mask,
                               output_hidden_states, output_attentions)


class DistilBertForMaskedLM(BertForMaskedLM):
    """DistilBERT with BERT's masked-LM head (dense, GELU, LayerNorm, decoder tied to the word
    embeddings plus its own bias; HuggingFace's ``vocab_transform``, ``vocab_layer_norm``,
    ``vocab_projector``)."""

    base_model_class = DistilBertModel


class DistilBertForSequenceClassification(BertForSequenceClassification):
    """A label per sequence from the first token's final hidden state: ``pre_classifier`` (a
    dense layer), ReLU, dropout (``classifier_dropout``, HuggingFace's ``seq_classif_dropout``)
    and the classifier, as HuggingFace's DistilBERT; the loss is BERT's (cross-entropy, or mean
    squared error with ``num_labels == 1``)."""

    base_model_class = DistilBertModel
    add_pooling_layer = False

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.pre_classifier = Linear(config.hidden_size, config.hidden_size)
        self._init_head(self.pre_classifier)

    def sequence_representation(self, encoded):
        return F.relu(self.pre_classifier(encoded.last_hidden_state[:, 0]))


class DistilBertForTokenClassification(BertForTokenClassification):
    """A label per token: dropout and a linear layer on every final hidden state, as
    ``BertForTokenClassification``; the dropout is the encoder's (``hidden_dropout_prob``,
    HuggingFace's ``dropout``), not the sequence classifier's, as in HuggingFace's DistilBERT."""

    base_model_class = DistilBertModel

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.dropout = Dropout(config.hidden_dropout_prob)


class DistilBertForQuestionAnswering(BertForQuestionAnswering):
    """Extractive question answering as ``BertForQuestionAnswering`` (start and end logits per
    token), with HuggingFace DistilBERT's dropout (``qa_dropout``) on the hidden states before
    the span scores; the question and the passage are told apart by [SEP] alone (no segments)."""

    base_model_class = DistilBertModel

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__(config)
        self.dropout = Dropout(config.qa_dropout)

    def token_representation(self, hidden):
        return self.dropout(hidden)


def distilbert_from_teacher(teacher, layers=None):
    """A DistilBERT student initialised from a BERT ``teacher`` (Sanh et al. section 3, "Student
    initialization": the student takes one layer out of two from the teacher).

    ``teacher``: a ``BertForMaskedLM`` (gives a ``DistilBertForMaskedLM``, the masked-LM head
    copied too) or a ``BertModel`` (gives a ``DistilBertModel``), or a DistilBERT of those.
    ``layers``: the teacher layers the student copies, in order (default: 0, 2, 4 ..., half the
    teacher's depth rounded up; the released DistilBERT took 0, 2, 4, 7, 9, 11 of BERT-base's
    12). More layers than the teacher has, or an index outside it, is an error.

    The embeddings are copied, with the teacher's segment-0 embedding added to every position
    row: the student has no segments, and its embeddings then equal the teacher's for
    single-segment input (Sanh et al.'s extraction script drops that row instead)."""
    if isinstance(teacher, BertForMaskedLM):
        encoder, student_class = teacher.bert, DistilBertForMaskedLM
    elif isinstance(teacher, BertModel):
        encoder, student_class = teacher, DistilBertModel
    else:
        raise TypeError(f"distilbert_from_teacher: the teacher must be a BertModel or "
                        f"BertForMaskedLM, got {type(teacher).__name__}")
    depth = teacher.config.num_hidden_layers
    layers = list(range(0, depth, 2)) if layers is None else [int(i) for i in layers]
    if not layers or len(layers) > depth or not all(0 <= i < depth for i in layers):
        raise ValueError(f"distilbert_from_teacher: layers {layers} must be 1 to {depth} indices "
                         f"of the teacher's {depth} layers (0 .. {depth - 1})")
    fields = {f.name: getattr(teacher.config, f.name) for f in dataclasses.fields(BertConfig)}
    config = DistilBertConfig(**{**fields, "num_hidden_layers": len(layers)})
    student = student_class(config)
    prefix = "bert." if student_class is DistilBertForMaskedLM else ""
    not_copied = tuple(prefix + part for part in ("encoder.layers.", "pooler.",
                                                  "embeddings.token_type_embeddings."))
    state = {name: value for name, value in teacher.state_dict().items()
             if not name.startswith(not_copied)}
    for ours, theirs in enumerate(layers):
        for name, value in encoder.encoder.layers[theirs].state_dict().items():
            state[f"{prefix}encoder.layers.{ours}.{name}"] = value
    if encoder.embeddings.segments:
        segment_a = encoder.embeddings.token_type_embeddings.weight.numpy()[0]
        positions = encoder.embeddings.position_embeddings.table.numpy()
        state[f"{prefix}embeddings.position_embeddings.table"] = positions + segment_a
    student.load_state_dict(state)
    return student.train(teacher.training)
