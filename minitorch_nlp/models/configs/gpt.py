"""The configuration of the GPT family (GPT-1 and GPT-2): ``GPTConfig``, its presets and its
HuggingFace fields."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ... import checks

VARIANTS = ("gpt1", "gpt2")


# HuggingFace's activation names -> ours. Both OpenAI GPT ("afn") and GPT-2
# ("activation_function") call the tanh approximation something else.
_HF_ACTIVATIONS = {"openai-gpt": {"gelu": "gelu_tanh", "relu": "relu"},
                   "gpt2": {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                            "gelu": "gelu", "relu": "relu"}}


_HF_MODEL_TYPES = {"gpt1": "openai-gpt", "gpt2": "gpt2"}


# ---- configuration -------------------------------------------------------------------------------
@dataclass
class GPTConfig:
    """The sizes and switches of a GPT, with HuggingFace's field names. The defaults are GPT-2
    small (124M parameters); ``GPTConfig.gpt1()``, ``GPTConfig.gpt2()`` and ``GPTConfig.tiny()``
    are presets.

    ``variant``: ``"gpt1"`` (post-LN blocks, no final LayerNorm, N(0, 0.02^2) weights) or
    ``"gpt2"`` (pre-LN blocks, a final LayerNorm, residual projections initialised with std
    0.02 / sqrt(2 * n_layer)). ``n_inner``: the feed-forward width, None for 4 * n_embd.
    ``activation``: ``"gelu_tanh"`` (both papers' code), ``"gelu"`` (erf) or ``"relu"``.
    Dropout: ``embd_pdrop`` on h_0, ``resid_pdrop`` on each sub-block's output before the
    residual sum, ``attn_pdrop`` on the attention weights, ``summary_first_dropout`` before a
    classifier head (0.1 in GPT-1). ``bos_token_id`` / ``eos_token_id``: what ``generate`` stops
    on by default.
    """

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation: str = "gelu_tanh"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    summary_first_dropout: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    variant: str = "gpt2"
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    RULES = (
        checks.positive("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"),
        checks.positive("n_inner", optional=True),
        checks.divides("n_head", "n_embd"),
        checks.one_of("variant", VARIANTS),
        checks.one_of("activation", ("gelu_tanh", "gelu", "relu")),
        checks.probabilities("resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"),
        checks.positive_numbers("layer_norm_epsilon", "initializer_range"),
        checks.special_token_ids("bos_token_id", "eos_token_id"),
    )

    def __post_init__(self):
        checks.validate(self)

    @property
    def d_ff(self):
        """The feed-forward width: ``n_inner`` or 4 * n_embd."""
        return 4 * self.n_embd if self.n_inner is None else self.n_inner

    @property
    def pre_ln(self):
        """GPT-2's layout: LayerNorm before each sub-block and after the last block."""
        return self.variant == "gpt2"

    @classmethod
    def gpt1(cls, **overrides):
        """GPT-1 as in the paper: 12 layers, 768 wide, 12 heads, 512 positions, a 40 478-token
        BPE vocabulary (117M parameters)."""
        return cls(**{"variant": "gpt1", "vocab_size": 40478, "n_positions": 512, **overrides})

    @classmethod
    def gpt2(cls, **overrides):
        """GPT-2 small: 12 layers, 768 wide, 12 heads, 1024 positions, 50 257 tokens, <|endoftext|>
        (50256) as bos and eos (124M parameters)."""
        return cls(**{"variant": "gpt2", "bos_token_id": 50256, "eos_token_id": 50256,
                      **overrides})

    @classmethod
    def tiny(cls, variant="gpt2", **overrides):
        """A test-sized model: 2 layers, 32 wide, 4 heads, 32 positions, 100 tokens, no dropout."""
        if variant not in VARIANTS:
            raise ValueError(f"GPTConfig.tiny: variant must be one of {VARIANTS}, got {variant!r}")
        return cls(**{"variant": variant, "vocab_size": 100, "n_positions": 32, "n_embd": 32,
                      "n_layer": 2, "n_head": 4, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                      "attn_pdrop": 0.0, "summary_first_dropout": 0.0, **overrides})

    # ---- HuggingFace's config.json ----
    @classmethod
    def from_hf(cls, hf):
        """A config from a HuggingFace ``config.json`` dict (``model_type`` "openai-gpt" or
        "gpt2"). Settings we do not implement are an error, not silently dropped."""
        model_type = hf.get("model_type")
        variant = {v: k for k, v in _HF_MODEL_TYPES.items()}.get(model_type)
        if variant is None:
            raise ValueError(f"GPTConfig.from_hf: model_type must be 'openai-gpt' or 'gpt2', got "
                             f"{model_type!r}")
        activation_key = "afn" if variant == "gpt1" else "activation_function"
        hf_activation = hf.get(activation_key, "gelu" if variant == "gpt1" else "gelu_new")
        activation = _HF_ACTIVATIONS[model_type].get(hf_activation)
        if activation is None:
            raise ValueError(f"GPTConfig.from_hf: {activation_key}={hf_activation!r} is not "
                             f"supported; supported: {sorted(_HF_ACTIVATIONS[model_type])}")
        unsupported = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                       "add_cross_attention": False, "tie_word_embeddings": True}
        for key, supported in unsupported.items():
            if hf.get(key, supported) != supported:
                raise ValueError(f"GPTConfig.from_hf: {key}={hf[key]!r} is not supported "
                                 f"(only {supported})")
        names = {f.name for f in fields(cls)} - {"activation", "variant", "n_inner"}
        kwargs = {name: hf[name] for name in names if hf.get(name) is not None}
        if variant == "gpt2":
            kwargs["n_inner"] = hf.get("n_inner")
        return cls(**kwargs, activation=activation, variant=variant)

    def to_hf(self):
        """The HuggingFace ``config.json`` fields (``OpenAIGPTConfig`` or ``GPT2Config``)."""
        model_type = _HF_MODEL_TYPES[self.variant]
        hf_activation = {v: k for k, v in _HF_ACTIVATIONS[model_type].items()
                         if k != "gelu_pytorch_tanh"}.get(self.activation)
        if hf_activation is None:
            raise ValueError(f"GPTConfig.to_hf: HuggingFace's {model_type} has no "
                             f"{self.activation!r} activation")
        hf = {k: v for k, v in asdict(self).items() if k not in ("activation", "variant")}
        hf["model_type"] = model_type
        if self.variant == "gpt1":
            if self.n_inner not in (None, 4 * self.n_embd):
                raise ValueError(f"GPTConfig.to_hf: HuggingFace's openai-gpt has a fixed "
                                 f"feed-forward width 4 * n_embd, got n_inner={self.n_inner}")
            del hf["n_inner"]
            hf.update(afn=hf_activation, summary_type="cls_index", summary_use_proj=True,
                      summary_activation=None, summary_proj_to_labels=True)
        else:
            hf.update(activation_function=hf_activation, scale_attn_weights=True,
                      tie_word_embeddings=True)
        return hf
