"""The configuration of T5."""
from __future__ import annotations

from dataclasses import dataclass, fields

from ... import checks

FEED_FORWARD = ("relu", "gated-gelu")


# ---- configuration -------------------------------------------------------------------------------
@dataclass
class T5Config:
    """T5's sizes, with HuggingFace's field names; the defaults are T5-small (60M parameters).

    ``d_kv``: each head's width (need not be d_model / num_heads). ``num_decoder_layers``: None
    for as many as the encoder. ``relative_attention_num_buckets`` / ``_max_distance``: the
    position-bias table (32 buckets up to 128 in the paper). ``feed_forward_proj``: ``"relu"``
    (T5) or ``"gated-gelu"`` (v1.1). ``tie_word_embeddings``: the output layer is the embedding
    matrix (T5) or its own (v1.1); ``scale_decoder_outputs``: multiply the decoder's output by
    d_model^-0.5 before the output layer (None: when tied, as in the paper).
    ``decoder_start_token_id``: the decoder's first input (T5 starts from <pad>).
    """

    vocab_size: int = 32128
    d_model: int = 512
    d_kv: int = 64
    d_ff: int = 2048
    num_layers: int = 6
    num_decoder_layers: int | None = None
    num_heads: int = 8
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6
    initializer_factor: float = 1.0
    feed_forward_proj: str = "relu"
    tie_word_embeddings: bool = True
    scale_decoder_outputs: bool | None = None
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0

    RULES = (
        checks.positive("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads",
                        "relative_attention_max_distance"),
        checks.positive("num_decoder_layers", optional=True),
        # the encoder's table is halved (one half per direction) and needs 2 buckets per half
        checks.ints_at_least(4, "relative_attention_num_buckets"),
        checks.one_of("feed_forward_proj", FEED_FORWARD),
        checks.probabilities("dropout_rate"),
        checks.special_token_ids("pad_token_id", "eos_token_id", "decoder_start_token_id"),
    )

    def __post_init__(self):
        checks.validate(self)
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers
        if self.scale_decoder_outputs is None:
            self.scale_decoder_outputs = self.tie_word_embeddings

    @classmethod
    def tiny(cls, **overrides):
        """A test-sized T5: 2 + 2 layers, 16 wide, 4 heads of 4, 8 buckets, 40 tokens."""
        return cls(**{"vocab_size": 40, "d_model": 16, "d_kv": 4, "d_ff": 24, "num_layers": 2,
                      "num_heads": 4, "relative_attention_num_buckets": 8,
                      "relative_attention_max_distance": 20, "dropout_rate": 0.0, **overrides})

    @classmethod
    def v1_1(cls, **overrides):
        """T5 v1.1: gated-GELU feed-forward, an output layer of its own, no rescaling."""
        return cls(**{"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False,
                      **overrides})

    @classmethod
    def from_hf(cls, hf):
        """A config from a HuggingFace ``config.json`` dict (``model_type`` "t5"). transformers
        5 always ties the output layer and records the rescaling as ``scale_decoder_outputs``;
        4.x wrote ``tie_word_embeddings`` and rescaled exactly when tied."""
        if hf.get("model_type") != "t5":
            raise ValueError(f"T5Config.from_hf: model_type must be 't5', got "
                             f"{hf.get('model_type')!r}")
        names = {f.name for f in fields(cls)}
        kwargs = {name: hf[name] for name in names if hf.get(name) is not None}
        if isinstance(kwargs.get("eos_token_id"), list):
            kwargs["eos_token_id"] = kwargs["eos_token_id"][0]
        return cls(**kwargs)

    def to_hf(self):
        """The HuggingFace ``config.json`` fields (``T5Config``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
