"""RoBERTa: A Robustly Optimized BERT Pretraining Approach (Liu et al., 2019), the survey's
section IV-E.

RoBERTa keeps BERT's architecture (``models.bert``) and changes how it is pretrained (Liu section
4): dynamic masking, a fresh mask every time a sequence is fed to the model (section 4.1); no
next-sentence prediction, inputs packed with FULL-SENTENCES up to 512 tokens across document
boundaries (section 4.2; both in ``minitorch_nlp.data.masking``); larger batches, more data, a
byte-level BPE vocabulary of 50K units (sections 4.3-4.4).

What differs in the model itself are details of the released checkpoints (fairseq, and
HuggingFace's port): a single segment type, LayerNorm eps 1e-5, and position ids that start at
``pad_token_id + 1`` and skip padding (``create_position_ids_from_input_ids``), so a table of
514 positions holds 512 tokens. ``RobertaForMaskedLM`` is ``BertForMaskedLM`` on this encoder;
HuggingFace calls its head ``lm_head`` with the same layers.
"""
from __future__ import annotations


import numpy as np

from ..autograd import Tensor
from .bert import (BertEmbeddings, BertForMaskedLM, BertModel)
from .configs.roberta import RobertaConfig

__all__ = ["RobertaConfig", "RobertaEmbeddings", "RobertaForMaskedLM", "RobertaModel",
           "create_position_ids_from_input_ids"]


def create_position_ids_from_input_ids(input_ids, padding_idx):
    """RoBERTa's position ids (fairseq's ``make_positions``): real tokens are numbered
    padding_idx + 1, padding_idx + 2, ... in order, padding gets padding_idx itself, so a
    sequence's positions do not depend on padding before or after it."""
    real = input_ids != padding_idx
    return np.cumsum(real, axis=1) * real + padding_idx


class RobertaEmbeddings(BertEmbeddings):
    """BERT's embeddings with RoBERTa's position ids: at most max_position_embeddings -
    pad_token_id - 1 tokens."""

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.max_length = config.max_position_embeddings - config.pad_token_id - 1

    def forward(self, input_ids: Tensor | np.ndarray, token_type_ids: Tensor | np.ndarray,
                position_ids: Tensor | np.ndarray | None = None):
        if position_ids is None:
            position_ids = create_position_ids_from_input_ids(input_ids, self.padding_idx)
        return super().forward(input_ids, token_type_ids, position_ids)


class RobertaModel(BertModel):
    """The RoBERTa encoder: ``BertModel`` with ``RobertaEmbeddings``."""

    config_class = RobertaConfig
    embeddings_class = RobertaEmbeddings


class RobertaForMaskedLM(BertForMaskedLM):
    """RoBERTa with its masked-LM head (BERT's head: dense, GELU, LayerNorm, tied decoder and an
    output bias)."""

    base_model_class = RobertaModel
