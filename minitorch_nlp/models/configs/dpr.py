"""The configuration of DPR's encoders."""
from __future__ import annotations

from dataclasses import dataclass

from ... import checks
from .bert import BertConfig


@dataclass
class DPRConfig(BertConfig):
    """BERT's fields plus ``projection_dim``: the width of a linear projection of the [CLS]
    vector (0: none, the vector is BERT's hidden state)."""

    projection_dim: int = 0

    model_type = "dpr"

    RULES = BertConfig.RULES + (checks.ints_at_least(0, "projection_dim"),)

    @classmethod
    def tiny(cls, vocab_size, **changes):
        """A small DPR encoder for tests and examples (32 wide, 2 layers, no dropout)."""
        values = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return cls(**{**values, **changes})
