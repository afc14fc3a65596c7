"""The configuration of BigBird."""
from __future__ import annotations

from dataclasses import dataclass

from ... import checks
from .bert import BertConfig

ATTENTION_TYPES = ("block_sparse", "original_full")


@dataclass
class BigBirdConfig(BertConfig):
    """``BertConfig`` with BigBird's fields under HuggingFace's names and
    google/bigbird-roberta-base's defaults: ``attention_type`` ("block_sparse" or
    "original_full"), ``block_size`` (64 positions), ``num_random_blocks`` (r = 3),
    ``rescale_embeddings`` (the word embeddings times sqrt(hidden_size)), ``use_bias`` (biases
    of the query, key and value projections; only True is implemented), 50 358 tokens, 4096
    positions, the tanh GELU."""

    vocab_size: int = 50358
    hidden_act: str = "gelu_new"
    max_position_embeddings: int = 4096
    attention_type: str = "block_sparse"
    block_size: int = 64
    num_random_blocks: int = 3
    rescale_embeddings: bool = False
    use_bias: bool = True
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    sep_token_id: int | None = 66

    model_type = "big_bird"

    RULES = BertConfig.RULES + (
        checks.one_of("attention_type", ATTENTION_TYPES),
        checks.positive("block_size"),
        checks.ints_at_least(0, "num_random_blocks"),
        checks.special_token_ids("bos_token_id", "eos_token_id", "sep_token_id"),
    )

    def __post_init__(self):
        super().__post_init__()
        if not self.use_bias:
            raise ValueError(f"{type(self).__name__}: use_bias=False (query, key and value "
                             "projections without biases) is not implemented")

    def to_hf(self):
        hf_config = super().to_hf()
        del hf_config["position_embedding_type"]      # BigBird's config has no such field
        return hf_config
