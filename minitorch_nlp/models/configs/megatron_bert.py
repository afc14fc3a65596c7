"""The configuration of Megatron-BERT."""
from __future__ import annotations

from dataclasses import dataclass

from .bert import BertConfig


@dataclass
class MegatronBertConfig(BertConfig):
    """``BertConfig`` with the defaults of NVIDIA's released Megatron-BERT 345M (24 layers,
    hidden 1024, 16 heads, feed-forward 4096, a 29 056-token vocabulary)."""

    vocab_size: int = 29056
    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    intermediate_size: int = 4096

    model_type = "megatron-bert"
