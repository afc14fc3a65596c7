"""The configuration of XLNet."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ... import checks

_HF_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh"}


# ---- configuration -------------------------------------------------------------------------------
@dataclass
class XLNetConfig:
    """The sizes and switches of an XLNet, with HuggingFace's ``XLNetConfig`` field names; the
    defaults are XLNet-large. ``d_head`` None is d_model / n_head. ``ff_activation``: ``"gelu"``,
    ``"relu"`` or ``"gelu_new"`` (the tanh approximation). ``mem_len``: how many positions
    ``mems`` keep (None or 0: all of them, as HuggingFace); memories are returned in eval mode
    (``use_mems_eval``) and not in training (``use_mems_train``) unless asked. ``clamp_len`` > 0
    clamps relative distances to +-clamp_len. ``attn_type``: ``"bi"`` (every position sees every
    other, subject to the masks) or ``"uni"`` (position i sees the memory and positions <= i,
    relative distances from k_time down to 0 only); ``same_length`` (with ``"uni"``): query i
    sees exactly mem_time + 1 keys, i - mem_time of the oldest memory positions hidden, so every
    position has the same context length. ``reuse_len``: only the first ``reuse_len`` positions
    of a segment go into the next memory (the paper's pretraining reuses the first half of each
    segment as the next one's context). ``bi_data``: the first half of the batch reads the
    distances forwards, the second half backwards (the sines negated), the paper's pretraining
    on both directions of the text (the batch must be even). ``permutation_k`` (ours, not
    HuggingFace's): when
    set, ``model(ids, labels=ids)`` without ``perm_mask`` and ``target_mapping`` is the
    permutation objective (``permutation_lm_loss``, one order per sequence from the library's
    generator, num_predict = T // K, at least 1), as ``minitorch-nlp train xlnet`` uses it (K =
    6 in the paper); ``span_max_len`` (ours too): its targets are then spans of up to that many
    tokens (``span_orders``; the paper's pretraining: 5). ``XLNetConfig.tiny()`` is
    test-sized."""

    vocab_size: int = 32000
    d_model: int = 1024
    n_layer: int = 24
    n_head: int = 16
    d_inner: int = 4096
    d_head: int | None = None
    ff_activation: str = "gelu"
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1
    mem_len: int | None = 512
    clamp_len: int = -1
    use_mems_eval: bool = True
    use_mems_train: bool = False
    pad_token_id: int | None = 5
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    permutation_k: int | None = None
    span_max_len: int | None = None
    attn_type: str = "bi"
    bi_data: bool = False
    same_length: bool = False
    reuse_len: int | None = None

    RULES = (
        checks.positive("vocab_size", "d_model", "n_layer", "n_head", "d_inner"),
        checks.positive("d_head", "permutation_k", "span_max_len", optional=True),
        checks.one_of("ff_activation", _HF_ACTIVATIONS),
        checks.ints_at_least(0, "mem_len", "reuse_len", optional=True),
        checks.probabilities("dropout"),
        checks.one_of("attn_type", ("bi", "uni")),
        checks.special_token_ids("pad_token_id", "bos_token_id", "eos_token_id"),
    )

    def __post_init__(self):
        checks.validate(self)
        if self.d_head is None:      # HuggingFace's default: the width shared out over the heads
            checks.divides("n_head", "d_model")(self, "XLNetConfig")
            self.d_head = self.d_model // self.n_head

    @property
    def n_positions(self):
        """The context ``decoding.generate_text`` keeps (XLNet has no position table):
        ``mem_len``, or 512 when every position is kept."""
        return self.mem_len or 512

    @classmethod
    def tiny(cls, **overrides):
        """A test-sized model: 2 layers, 16 wide, 2 heads, 32 tokens, no dropout."""
        return cls(**{"vocab_size": 32, "d_model": 16, "n_layer": 2, "n_head": 2, "d_inner": 24,
                      "dropout": 0.0, "mem_len": None, "pad_token_id": 0, **overrides})

    @classmethod
    def from_hf(cls, hf):
        """A config from a HuggingFace ``config.json`` dict (``model_type`` "xlnet"); settings
        we do not implement are an error, not silently dropped."""
        if hf.get("model_type") != "xlnet":
            raise ValueError(f"XLNetConfig.from_hf: model_type must be 'xlnet', got "
                             f"{hf.get('model_type')!r}")
        if not hf.get("tie_word_embeddings", True):
            raise ValueError("XLNetConfig.from_hf: tie_word_embeddings=False is not supported "
                             "(only True)")
        nullable = ("mem_len", "d_head", "pad_token_id", "bos_token_id", "eos_token_id",
                    "reuse_len")
        names = {f.name for f in fields(cls)} - set(nullable)
        return cls(**{key: hf[key] for key in names if key in hf},
                   **{key: hf.get(key) for key in nullable})

    def to_hf(self):
        """The HuggingFace ``config.json`` fields (``XLNetConfig``)."""
        return {**asdict(self), "tie_word_embeddings": True}
