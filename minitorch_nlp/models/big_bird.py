"""BigBird: Transformers for Longer Sequences (Zaheer et al., 2020), the survey's section VIII-E,
as an encoder that reads HuggingFace's ``BigBirdModel`` / ``BigBirdForPreTraining`` checkpoints.

BigBird is BERT (RoBERTa's vocabulary, 4096 positions) whose self-attention is sparse: the
sequence is cut into blocks, and each query block attends a window of 3 blocks around it, the
first and the last block (global: they attend and are attended by everything) and r random
blocks (BigBird-ITC, ``attention_type="block_sparse"``). Each query then sees (5 + r) blocks,
so the cost grows linearly with the length. ``attention_type="original_full"`` is plain BERT
attention.

Everything but the attention core is BERT's (``models/bert.py``): the layers, the pooler and the
pretraining heads. The core is ``attention.BigBirdBlockSparseAttention``, which follows
HuggingFace's computation exactly: full attention up to (5 + 2 r) blocks, padding to a block
multiple, each head's random blocks from the released code's seeded numpy draw in training,
and block 0 in place of every random block in evaluation (HuggingFace draws nothing then).
"""
from __future__ import annotations


import numpy as np

from ..attention.big_bird import BigBirdBlockSparseAttention
from ..autograd import Tensor
from .bert import (BertEmbeddings, BertForMaskedLM,
                   BertForPreTraining, BertModel)
from .configs.big_bird import BigBirdConfig

__all__ = ["BigBirdConfig", "BigBirdEmbeddings", "BigBirdForMaskedLM", "BigBirdForPreTraining",
           "BigBirdModel"]


class BigBirdEmbeddings(BertEmbeddings):
    """BERT's embeddings as BigBird computes them: the word embeddings times sqrt(hidden_size)
    when ``rescale_embeddings``, and dropout before the LayerNorm (HuggingFace's order; the same
    in evaluation)."""

    def __init__(self, config: BigBirdConfig) -> None:
        super().__init__(config)
        self.scale = config.hidden_size ** 0.5 if config.rescale_embeddings else None

    def forward(self, input_ids: Tensor | np.ndarray, token_type_ids: Tensor | np.ndarray,
                position_ids: Tensor | np.ndarray | None = None):
        x = self.word_embeddings(input_ids)
        if self.scale is not None:
            x = x * self.scale
        x = x + self.token_type_embeddings(token_type_ids)
        return self.norm(self.dropout(self.position_embeddings(x, position_ids=position_ids)))


class BigBirdModel(BertModel):
    """The BigBird encoder: ``BertModel`` whose layers attend through
    ``BigBirdBlockSparseAttention`` (layer i seeds its random blocks with i, as HuggingFace)
    when ``attention_type="block_sparse"``, or as BERT with ``"original_full"``. Inputs and
    outputs are ``BertModel``'s; a sequence of at most (5 + 2 r) ``block_size`` positions is
    attended in full whatever the type."""

    config_class = BigBirdConfig
    embeddings_class = BigBirdEmbeddings

    def build_encoder(self, config):
        encoder = super().build_encoder(config)
        if config.attention_type == "block_sparse":
            for seed, layer in enumerate(encoder.layers):
                layer.self_attn.core = BigBirdBlockSparseAttention(
                    config.block_size, config.num_random_blocks, seed=seed,
                    max_positions=config.max_position_embeddings,
                    dropout=config.attention_probs_dropout_prob)
        return encoder


class BigBirdForMaskedLM(BertForMaskedLM):
    """BigBird with BERT's masked-LM head; its encoder keeps the pooler (HuggingFace's does,
    though the head does not read it)."""

    base_model_class = BigBirdModel
    add_pooling_layer = True


class BigBirdForPreTraining(BertForPreTraining):
    """BigBird with BERT's pretraining heads: masked LM (``prediction_logits``) and next
    sentence prediction on the pooled first token (``seq_relationship_logits``)."""

    base_model_class = BigBirdModel
