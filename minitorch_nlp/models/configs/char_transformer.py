"""The configuration of the character Transformer (Al-Rfou et al.)."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

from ... import checks
from .gpt import GPTConfig


# ---- configuration -------------------------------------------------------------------------------
@dataclass
class CharTransformerConfig(GPTConfig):
    """A ``GPTConfig`` (GPT-2's pre-LN layout) plus the paper's auxiliary losses.

    ``per_layer_positions``: a learned position table added before every layer (the paper), not
    only before the first. ``all_positions``: every position predicts (auxiliary loss 1); False:
    only the last position of the segment. ``intermediate_losses``: every layer's output
    predicts (auxiliary loss 2), layer l of n dropped once ``l / n * intermediate_stop`` of the
    training is done (``intermediate_stop=0.5``: the paper's l/(2n); 1.0 keeps the top
    intermediate layer almost to the end). ``num_targets``: the characters predicted ahead
    (auxiliary loss 3; the paper: 2, 1 turns it off), the extra ones weighted by
    ``extra_target_weight`` (the paper: 0.5).
    """

    per_layer_positions: bool = True
    all_positions: bool = True
    intermediate_losses: bool = True
    intermediate_stop: float = 0.5
    num_targets: int = 2
    extra_target_weight: float = 0.5

    RULES = GPTConfig.RULES + (checks.positive("num_targets"),)

    def __post_init__(self):
        super().__post_init__()
        if self.variant != "gpt2":
            raise ValueError(f"CharTransformerConfig: variant must be 'gpt2' (pre-LN blocks, as "
                             f"the paper's Transformer), got {self.variant!r}")
        _check_fraction(self.intermediate_stop, "intermediate_stop", "CharTransformerConfig",
                        low_open=True)
        if not isinstance(self.extra_target_weight, numbers.Real) or self.extra_target_weight < 0:
            raise ValueError(f"CharTransformerConfig: extra_target_weight must be a number >= 0, "
                             f"got {self.extra_target_weight!r}")
        if self.num_targets >= self.n_positions:
            raise ValueError(f"CharTransformerConfig: num_targets={self.num_targets} must be less "
                             f"than n_positions={self.n_positions} (a segment must hold a "
                             "character and its last target)")


def _check_fraction(value, name, where, low_open=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not (0 < value <= 1 if low_open else 0 <= value <= 1):
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise ValueError(f"{where}: {name} must be a number in {interval}, got {value!r}")
