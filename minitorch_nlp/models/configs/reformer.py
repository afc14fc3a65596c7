"""The configuration of the Reformer."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from ... import checks

ATTENTION_TYPES = ("lsh", "local")


NORM_EPSILON = 1e-6


# HuggingFace's activation names -> ours
_HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh"}


# ---- configuration -------------------------------------------------------------------------------
@dataclass
class ReformerConfig:
    """The sizes and switches of a Reformer, with HuggingFace's field names and defaults (except
    ``num_buckets``, which HuggingFace may leave None to pick at the first call; here it is an even
    int, or a list of even ints whose product is the number of buckets: HuggingFace's factorised
    hash, which the pretrained checkpoints use). ``attn_layers`` lists each layer's attention,
    ``"lsh"`` or ``"local"``; the number of layers is its length. ``attention_head_size`` is d_k,
    apart from hidden_size / heads. ``axial_pos_shape`` (n1, n2) and ``axial_pos_embds_dim`` (d1,
    d2, summing to hidden_size) shape the axial position table when ``axial_pos_embds``, else a
    learned table of ``max_position_embeddings`` rows. ``chunk_size_feed_forward`` /
    ``chunk_size_lm_head``: 0 runs the whole sequence at once. ``hash_seed`` fixes the LSH
    rotations (see the module docstring). ``is_decoder``: causal attention in every layer.
    """

    vocab_size: int = 320
    hidden_size: int = 256
    num_attention_heads: int = 12
    attention_head_size: int = 64
    attn_layers: tuple = ("local", "lsh", "local", "lsh", "local", "lsh")
    num_buckets: int | tuple = 32
    num_hashes: int = 1
    lsh_attn_chunk_length: int = 64
    local_attn_chunk_length: int = 64
    lsh_num_chunks_before: int = 1
    lsh_num_chunks_after: int = 0
    local_num_chunks_before: int = 1
    local_num_chunks_after: int = 0
    feed_forward_size: int = 512
    hidden_act: str = "relu"
    hidden_dropout_prob: float = 0.05
    lsh_attention_probs_dropout_prob: float = 0.0
    local_attention_probs_dropout_prob: float = 0.05
    max_position_embeddings: int = 4096
    axial_pos_embds: bool = True
    axial_pos_shape: tuple = (64, 64)
    axial_pos_embds_dim: tuple = (64, 192)
    axial_norm_std: float = 1.0
    chunk_size_feed_forward: int = 0
    chunk_size_lm_head: int = 0
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    is_decoder: bool = False
    hash_seed: int | None = None
    pad_token_id: int = 0
    eos_token_id: int | None = 2

    RULES = (
        checks.positive("vocab_size", "hidden_size", "num_attention_heads", "attention_head_size",
                        "num_hashes", "lsh_attn_chunk_length", "local_attn_chunk_length",
                        "feed_forward_size", "max_position_embeddings"),
        checks.ints_at_least(0, "lsh_num_chunks_before", "lsh_num_chunks_after",
                             "local_num_chunks_before", "local_num_chunks_after",
                             "chunk_size_feed_forward", "chunk_size_lm_head"),
        checks.one_of("hidden_act", _HF_ACTIVATIONS),
        checks.probabilities("hidden_dropout_prob", "lsh_attention_probs_dropout_prob",
                             "local_attention_probs_dropout_prob"),
        checks.special_token_ids("pad_token_id", "eos_token_id"),
    )

    def __post_init__(self):
        name = "ReformerConfig"
        self.attn_layers = tuple(self.attn_layers)
        self.axial_pos_shape = tuple(self.axial_pos_shape)
        self.axial_pos_embds_dim = tuple(self.axial_pos_embds_dim)
        checks.validate(self)
        if not self.attn_layers or any(kind not in ATTENTION_TYPES for kind in self.attn_layers):
            raise ValueError(f"{name}: attn_layers must list 'lsh' or 'local' for each layer, "
                             f"got {list(self.attn_layers)}")
        if isinstance(self.num_buckets, list):
            self.num_buckets = tuple(self.num_buckets)
        _bucket_factors(self.num_buckets, name)
        if self.axial_pos_embds:
            if len(self.axial_pos_shape) != 2 or len(self.axial_pos_embds_dim) != 2:
                raise ValueError(f"{name}: axial_pos_shape and axial_pos_embds_dim need two "
                                 f"entries each (two axes), got {list(self.axial_pos_shape)} and "
                                 f"{list(self.axial_pos_embds_dim)}")
            if sum(self.axial_pos_embds_dim) != self.hidden_size:
                raise ValueError(f"{name}: axial_pos_embds_dim {list(self.axial_pos_embds_dim)} "
                                 f"must sum to hidden_size={self.hidden_size}")
            if math.prod(self.axial_pos_shape) < self.max_position_embeddings:
                raise ValueError(f"{name}: axial_pos_shape {list(self.axial_pos_shape)} gives "
                                 f"{math.prod(self.axial_pos_shape)} positions, fewer than "
                                 f"max_position_embeddings={self.max_position_embeddings}")

    @property
    def num_hidden_layers(self):
        return len(self.attn_layers)

    @property
    def n_positions(self):
        """The longest sequence the model reads (what ``decoding.generate_text`` asks)."""
        return self.max_position_embeddings

    def chunk_lengths(self):
        """The chunk lengths of the attention types the layers use."""
        return [getattr(self, f"{kind}_attn_chunk_length") for kind in set(self.attn_layers)]

    @classmethod
    def tiny(cls, **overrides):
        """A test-sized causal model: layers lsh, local, 16 wide, 2 heads of 8, chunks of 4,
        4 buckets, 2 rounds, 32 positions (axial 4 x 8), 40 tokens, no dropout."""
        return cls(**{"vocab_size": 40, "hidden_size": 16, "num_attention_heads": 2,
                      "attention_head_size": 8, "attn_layers": ("lsh", "local"),
                      "num_buckets": 4, "num_hashes": 2, "lsh_attn_chunk_length": 4,
                      "local_attn_chunk_length": 4, "feed_forward_size": 32,
                      "hidden_dropout_prob": 0.0, "local_attention_probs_dropout_prob": 0.0,
                      "max_position_embeddings": 32, "axial_pos_shape": (4, 8),
                      "axial_pos_embds_dim": (6, 10), "is_decoder": True, **overrides})

    @classmethod
    def from_hf(cls, hf):
        """A config from a HuggingFace ``config.json`` dict (``model_type`` "reformer")."""
        if hf.get("model_type") != "reformer":
            raise ValueError(f"ReformerConfig.from_hf: model_type must be 'reformer', got "
                             f"{hf.get('model_type')!r}")
        if hf.get("tie_word_embeddings", False):
            raise ValueError("ReformerConfig.from_hf: tie_word_embeddings=True is not supported "
                             "(the Reformer's LM head reads both streams, 2 * hidden_size wide)")
        names = {f.name for f in fields(cls)}
        kwargs = {key: hf[key] for key in names if key in hf}
        if "num_hidden_layers" in hf and hf["num_hidden_layers"] != len(hf.get(
                "attn_layers", cls.attn_layers)):
            raise ValueError(f"ReformerConfig.from_hf: num_hidden_layers="
                             f"{hf['num_hidden_layers']} differs from the {len(hf['attn_layers'])} "
                             "entries of attn_layers")
        return cls(**kwargs)

    def to_hf(self):
        """The HuggingFace ``config.json`` fields (``ReformerConfig``)."""
        hf = {key: list(value) if isinstance(value, tuple) else value
              for key, value in asdict(self).items()}
        hf.update(num_hidden_layers=self.num_hidden_layers, tie_word_embeddings=False)
        return hf


# ---- attention -----------------------------------------------------------------------------------
def _bucket_factors(num_buckets, where):
    """``num_buckets`` (an even int, or a sequence of them: a factorised hash) as a tuple."""
    factors = (num_buckets,) if isinstance(num_buckets, int) else num_buckets
    if not isinstance(factors, (tuple, list)) or not factors or any(
            isinstance(f, bool) or not isinstance(f, int) or f < 2 or f % 2 for f in factors):
        raise ValueError(f"{where}: num_buckets must be an even int >= 2, or a list of them (a "
                         f"factorised hash); h(x) = argmax([xR; -xR]) gives two buckets per "
                         f"rotation column, and HuggingFace's None is not supported; got "
                         f"{num_buckets!r}")
    return tuple(factors)
