"""The configuration of ELMo's biLM."""
from __future__ import annotations

from dataclasses import dataclass


# ---- the biLM ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class BiLMConfig:
    """Sizes of a ``BiLM``. ``vocab_size`` is the word vocabulary of the softmax; ``dim`` the
    size of x_k and of every LSTM state (so that all L + 1 layers of eq 15 have size 2 * dim)."""

    vocab_size: int
    dim: int = 32
    num_layers: int = 2
    char_dim: int = 8
    filters: tuple = ((1, 16), (2, 16), (3, 32), (4, 32))
    highway_layers: int = 1
    residual: bool = True
    dropout: float = 0.0
