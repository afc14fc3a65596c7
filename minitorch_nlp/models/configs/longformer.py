"""The configuration of the Longformer."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ... import checks
from .roberta import RobertaConfig


@dataclass
class LongformerConfig(RobertaConfig):
    """RoBERTa's fields plus ``attention_window``: one even window for every layer, or a list
    of one per layer (the query sees ``attention_window / 2`` tokens on each side), and
    ``sep_token_id``. The defaults are HuggingFace's ``LongformerConfig``'s (BERT-base sizes, a
    window of 512, padding id 1); ``allenai/longformer-base-4096``'s ``config.json`` sets the
    RoBERTa vocabulary of 50 265, 4 098 positions, one segment and LayerNorm eps 1e-5."""

    vocab_size: int = 30522
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    attention_window: int | list = 512
    sep_token_id: int = 2

    model_type = "longformer"

    RULES = RobertaConfig.RULES + (checks.special_token_ids("sep_token_id"),)

    def __post_init__(self):
        super().__post_init__()
        name, layers = type(self).__name__, self.num_hidden_layers
        if not isinstance(self.attention_window, numbers.Integral):
            self.attention_window = list(self.attention_window)
            if len(self.attention_window) != layers:
                raise ValueError(f"{name}: attention_window has {len(self.attention_window)} "
                                 f"entries; give one per layer (num_hidden_layers={layers}) or "
                                 "one int for all")
        for layer, window in enumerate(self.layer_windows):
            if (isinstance(window, (bool, np.bool_)) or not isinstance(window, numbers.Integral)
                    or window <= 0 or window % 2):
                raise ValueError(f"{name}: attention_window for layer {layer} must be a "
                                 f"positive even int (the query sees attention_window / 2 "
                                 f"tokens on each side), got {window!r}")

    @property
    def layer_windows(self):
        """Each layer's ``attention_window``, a tuple of ``num_hidden_layers`` ints."""
        if isinstance(self.attention_window, numbers.Integral):
            return (self.attention_window,) * self.num_hidden_layers
        return tuple(self.attention_window)
