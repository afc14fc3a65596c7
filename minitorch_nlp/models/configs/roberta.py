"""The configuration of RoBERTa."""
from __future__ import annotations

from dataclasses import dataclass

from ... import checks
from .bert import BertConfig


@dataclass
class RobertaConfig(BertConfig):
    """``BertConfig`` with RoBERTa-base's defaults: the 50 265-unit byte-level BPE vocabulary,
    514 position rows (512 tokens after the padding offset), one segment type, LayerNorm eps
    1e-5, <pad> = 1, <s> = 0, </s> = 2."""

    vocab_size: int = 50265
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1
    bos_token_id: int = 0
    eos_token_id: int = 2

    model_type = "roberta"

    RULES = BertConfig.RULES + (checks.special_token_ids("bos_token_id", "eos_token_id"),)

    def __post_init__(self):
        super().__post_init__()
        if self.max_position_embeddings <= self.pad_token_id + 1:
            raise ValueError(f"RobertaConfig: max_position_embeddings="
                             f"{self.max_position_embeddings} leaves no position after the "
                             f"padding offset pad_token_id + 1 = {self.pad_token_id + 1}")
