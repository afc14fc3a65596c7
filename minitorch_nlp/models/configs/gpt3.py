"""The configuration of GPT-3: ``GPT3Config`` and the paper's model sizes."""
from __future__ import annotations

from dataclasses import dataclass

from ... import checks
from .gpt import GPTConfig


@dataclass(frozen=True)
class GPT3Size:
    """One row of Table 2.1: the parameter count the paper reports, n_layers, d_model, n_heads
    and d_head as printed, the batch size in tokens and the learning rate."""

    reported_parameters: float
    n_layer: int
    d_model: int
    n_head: int
    d_head: int
    batch_tokens: float
    learning_rate: float


GPT3_SIZES = {
    "gpt3-small": GPT3Size(125e6, 12, 768, 12, 64, 0.5e6, 6.0e-4),
    "gpt3-medium": GPT3Size(350e6, 24, 1024, 16, 64, 0.5e6, 3.0e-4),
    "gpt3-large": GPT3Size(760e6, 24, 1536, 16, 96, 0.5e6, 2.5e-4),
    "gpt3-xl": GPT3Size(1.3e9, 24, 2048, 24, 128, 1e6, 2.0e-4),
    "gpt3-2.7b": GPT3Size(2.7e9, 32, 2560, 32, 80, 1e6, 1.6e-4),
    "gpt3-6.7b": GPT3Size(6.7e9, 32, 4096, 32, 128, 2e6, 1.2e-4),
    "gpt3-13b": GPT3Size(13.0e9, 40, 5140, 40, 128, 2e6, 1.0e-4),
    "gpt3-175b": GPT3Size(175.0e9, 96, 12288, 96, 128, 3.2e6, 0.6e-4),
}


@dataclass
class GPT3Config(GPTConfig):
    """``GPTConfig`` (GPT-2's layout) with GPT-3's context of 2048 tokens and the width of the
    banded attention of the odd-numbered blocks, ``attention_window`` (earlier positions each
    query sees besides itself)."""

    n_positions: int = 2048
    attention_window: int = 256

    RULES = GPTConfig.RULES + (checks.positive("attention_window"),)

    def __post_init__(self):
        super().__post_init__()
        if self.variant != "gpt2":
            raise ValueError(f"GPT3Config: GPT-3 has GPT-2's pre-LN layout; variant must be "
                             f"'gpt2', got {self.variant!r}")

    @classmethod
    def preset(cls, name, **overrides):
        """One of Table 2.1's sizes (``GPT3_SIZES``: ``"gpt3-small"`` ... ``"gpt3-175b"``), with
        GPT-2's 50 257-token vocabulary. Building the model allocates every weight; use
        ``count_parameters`` for the large ones."""
        if name not in GPT3_SIZES:
            raise ValueError(f"GPT3Config.preset: unknown size {name!r}; sizes: "
                             f"{', '.join(GPT3_SIZES)}")
        size = GPT3_SIZES[name]
        d_model = size.n_head * size.d_head if name == "gpt3-13b" else size.d_model
        return cls(**{"n_layer": size.n_layer, "n_embd": d_model,
                      "n_head": d_model // size.d_head, "bos_token_id": 50256,
                      "eos_token_id": 50256, **overrides})

    @classmethod
    def tiny(cls, variant="gpt2", **overrides):
        """GPT-2's tiny test config with a band of 4 positions, so that the banded blocks differ
        from the dense ones on its 32 positions."""
        return super().tiny(variant, **{"attention_window": 4, **overrides})
