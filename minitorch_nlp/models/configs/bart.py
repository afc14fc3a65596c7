"""The configuration of BART and mBART."""
from __future__ import annotations

from dataclasses import dataclass, fields

from ... import checks

_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "relu": "relu"}


# ---- configuration -------------------------------------------------------------------------------
@dataclass
class BartConfig:
    """BART's sizes, with HuggingFace's field names; the defaults are bart-large. The special
    ids are fairseq's: <s> 0, <pad> 1, </s> 2; the decoder starts from </s> and generation ends
    with </s> (``forced_eos_token_id``)."""

    vocab_size: int = 50265
    d_model: int = 1024
    encoder_layers: int = 12
    decoder_layers: int = 12
    encoder_attention_heads: int = 16
    decoder_attention_heads: int = 16
    encoder_ffn_dim: int = 4096
    decoder_ffn_dim: int = 4096
    activation_function: str = "gelu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    max_position_embeddings: int = 1024
    init_std: float = 0.02
    scale_embedding: bool = False
    pad_token_id: int = 1
    bos_token_id: int = 0
    eos_token_id: int = 2
    decoder_start_token_id: int = 2
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | None = 2

    RULES = (
        checks.positive("vocab_size", "d_model", "encoder_layers", "decoder_layers",
                        "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim",
                        "decoder_ffn_dim", "max_position_embeddings"),
        checks.divides("encoder_attention_heads", "d_model"),
        checks.divides("decoder_attention_heads", "d_model"),
        checks.one_of("activation_function", _HF_ACTIVATIONS),
        checks.probabilities("dropout", "attention_dropout", "activation_dropout"),
        checks.special_token_ids("pad_token_id", "bos_token_id", "eos_token_id",
                                 "decoder_start_token_id", "forced_bos_token_id",
                                 "forced_eos_token_id"),
    )

    def __post_init__(self):
        checks.validate(self)

    @classmethod
    def tiny(cls, **overrides):
        """A test-sized model: 2 + 2 layers, 16 wide, 4 heads, 32 positions, 40 tokens."""
        return cls(**{"vocab_size": 40, "d_model": 16, "encoder_layers": 2, "decoder_layers": 2,
                      "encoder_attention_heads": 4, "decoder_attention_heads": 4,
                      "encoder_ffn_dim": 24, "decoder_ffn_dim": 24, "dropout": 0.0,
                      "max_position_embeddings": 32, **overrides})

    @classmethod
    def from_hf(cls, hf):
        """A config from a HuggingFace ``config.json`` dict."""
        names = {f.name for f in fields(cls)}
        return cls(**{name: hf[name] for name in names if name in hf})

    def to_hf(self):
        """The HuggingFace ``config.json`` fields."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class MBartConfig(BartConfig):
    """mBART's config: BART's fields, ``scale_embedding`` on by default."""

    scale_embedding: bool = True
