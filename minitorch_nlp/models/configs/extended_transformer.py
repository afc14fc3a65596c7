"""The configuration of ETC, the Extended Transformer Construction."""
from __future__ import annotations

from dataclasses import dataclass

from ... import checks


@dataclass
class ETCConfig:
    """ETC's hyper-parameters. The defaults are ETC-base (Ainslie et al., section 4: 12 layers,
    hidden size 768, 12 heads, local radius 84, relative positions clipped at 12); ``vocab_size``
    is the long input's vocabulary, ``global_vocab_size`` the global tokens'."""

    vocab_size: int = 30522
    global_vocab_size: int = 2
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    local_radius: int = 84
    max_distance: int = 12
    long_per_global: int = 16
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    RULES = (
        checks.positive("vocab_size", "global_vocab_size", "hidden_size", "num_hidden_layers",
                        "num_attention_heads", "intermediate_size", "local_radius",
                        "long_per_global"),
        checks.ints_at_least(0, "max_distance"),
        checks.divides("num_attention_heads", "hidden_size"),
        checks.one_of("hidden_act", ("gelu",)),
        checks.probabilities("hidden_dropout_prob", "attention_probs_dropout_prob"),
        checks.special_token_ids("pad_token_id"),
    )

    def __post_init__(self):
        checks.validate(self)
