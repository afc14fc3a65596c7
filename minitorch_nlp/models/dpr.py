"""DPR's encoders: Dense Passage Retrieval (Karpukhin et al., 2020, "Dense Passage Retrieval for
Open-Domain Question Answering"), the survey's section VII-D.

Two independent BERT encoders map a question and a passage to d-dimensional vectors, the
representation of [CLS] (Karpukhin section 3.1: "we use the representation at the [CLS] token as
the output, so d = 768"), and sim(q, p) = E_Q(q)^T E_P(p). HuggingFace's DPR adds an optional
linear projection of that vector (``projection_dim > 0``); the released checkpoints have none.

``DPRQuestionEncoder`` is E_Q, ``DPRContextEncoder`` is E_P; their calls and output
(``pooler_output`` (batch, d)) mirror HuggingFace's, and HuggingFace checkpoints load through
the key map in ``models/families/dpr.py``. The training loss (eq 84) and the retriever built on an
index are in :mod:`minitorch_nlp.retrieval.dpr`.
"""
from __future__ import annotations


import numpy as np

from .. import cookbook
from ..autograd import Tensor
from ..nn import Linear, Module
from ..nn.outputs import ModelOutput
from .bert import BertModel, init_bert_weights
from .configs.dpr import DPRConfig

__all__ = ["DPRConfig", "DPRContextEncoder", "DPREncoder", "DPRQuestionEncoder"]


@cookbook.equation(64, 65)
class DPREncoder(Module):
    """BERT (no pooler) and the representation of [CLS], projected to ``projection_dim`` when
    it is > 0: ``ModelOutput(last_hidden_state, pooler_output (batch, d))``. With
    ``projection_dim=128`` these are ORQA's h_q = W_q BERT_Q(q)[CLS] (eq 64, the question
    encoder) and h_b = W_b BERT_B(b)[CLS] (eq 65, the block encoder)."""

    def __init__(self, config: DPRConfig) -> None:
        super().__init__()
        self.bert_model = BertModel(config, add_pooling_layer=False)
        self.encode_proj = (Linear(config.hidden_size, config.projection_dim)
                            if config.projection_dim else None)
        if self.encode_proj is not None:
            init_bert_weights(self.encode_proj, config.initializer_range)

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None):
        hidden = self.bert_model(input_ids, attention_mask, token_type_ids).last_hidden_state
        pooled = hidden[:, 0]
        if self.encode_proj is not None:
            pooled = self.encode_proj(pooled)
        return ModelOutput(last_hidden_state=hidden, pooler_output=pooled)


class _DPRModel(Module):
    """One DPR encoder under HuggingFace's attribute name ``encoder_name``."""

    encoder_name = ""

    def __init__(self, config):
        super().__init__()
        if not isinstance(config, DPRConfig):
            raise TypeError(f"{type(self).__name__}: config must be a DPRConfig, got "
                            f"{type(config).__name__}")
        self.config = config
        setattr(self, self.encoder_name, DPREncoder(config))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        """``input_ids``, ``attention_mask``, ``token_type_ids`` (batch, time) as for BERT;
        returns ``ModelOutput(last_hidden_state, pooler_output)``, the vectors in
        ``pooler_output`` (batch, d)."""
        return getattr(self, self.encoder_name)(input_ids, attention_mask, token_type_ids)


class DPRQuestionEncoder(_DPRModel):
    """E_Q: the question encoder."""

    encoder_name = "question_encoder"


class DPRContextEncoder(_DPRModel):
    """E_P: the passage (context) encoder."""

    encoder_name = "ctx_encoder"
