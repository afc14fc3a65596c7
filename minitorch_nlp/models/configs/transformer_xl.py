"""The configuration of Transformer-XL."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from ... import checks


# ---- configuration -------------------------------------------------------------------------------
@dataclass
class TransfoXLConfig:
    """The sizes and switches of a Transformer-XL, with HuggingFace's ``TransfoXLConfig`` field
    names. The defaults are the paper's WikiText-103 model; ``TransfoXLConfig.tiny()`` is a
    test-sized one.

    ``d_model`` is the hidden width, ``n_head`` heads of ``d_head`` features each, ``d_inner`` the
    feed-forward width. ``cutoffs`` split the vocabulary into a head [0, cutoffs[0]) and clusters
    [cutoffs[i], cutoffs[i+1]) for the adaptive input and softmax; cluster i's vectors are
    ``d_embed // div_val**i`` wide, projected to ``d_model``. No cutoffs: one softmax over the
    whole vocabulary. ``tie_projs[i]``: the softmax's projection of cluster i is the embedding's
    (weights themselves are always tied, as in the paper).

    ``mem_len``: memory kept while training; ``eval_mem_len`` (None: ``mem_len``) in eval mode.
    ``clamp_len``: distances beyond it use R_clamp_len (0: never clamped). ``pre_lnorm``: LayerNorm
    before each sub-layer instead of after the residual sum. ``dropout`` on embeddings, position
    encodings and sub-layer outputs; ``dropatt`` on attention weights. ``init_std`` /
    ``proj_init_std``: N(0, std^2) for weights and for the adaptive projections.
    """

    vocab_size: int = 267735
    cutoffs: list = field(default_factory=lambda: [20000, 40000, 200000])
    d_model: int = 1024
    d_embed: int = 1024
    n_head: int = 16
    d_head: int = 64
    d_inner: int = 4096
    div_val: int = 4
    pre_lnorm: bool = False
    n_layer: int = 18
    mem_len: int = 1600
    eval_mem_len: int | None = None
    clamp_len: int = 1000
    dropout: float = 0.1
    dropatt: float = 0.0
    layer_norm_epsilon: float = 1e-5
    init_std: float = 0.02
    proj_init_std: float = 0.01
    tie_projs: list | None = None
    eos_token_id: int | None = None

    RULES = (
        checks.positive("vocab_size", "d_model", "d_embed", "n_head", "d_head", "d_inner",
                        "div_val", "n_layer"),
        checks.ints_at_least(0, "mem_len", "clamp_len"),
        checks.ints_at_least(0, "eval_mem_len", optional=True),
        checks.probabilities("dropout", "dropatt"),
        checks.special_token_ids("eos_token_id"),
    )

    def __post_init__(self):
        name = "TransfoXLConfig"
        checks.validate(self)
        self.cutoffs = [int(c) for c in self.cutoffs]
        bounds = [0, *self.cutoffs, self.vocab_size]
        if any(a >= b for a, b in zip(bounds, bounds[1:])):
            raise ValueError(f"{name}: cutoffs {self.cutoffs} must increase strictly inside "
                             f"(0, vocab_size={self.vocab_size})")
        if self.d_embed // self.div_val ** len(self.cutoffs) < 1:
            raise ValueError(f"{name}: d_embed={self.d_embed} // div_val={self.div_val}^"
                             f"{len(self.cutoffs)} leaves the last cluster no features; use a "
                             "smaller div_val or fewer cutoffs")
        if self.tie_projs is None:
            self.tie_projs = [False] + [True] * len(self.cutoffs)
        self.tie_projs = [bool(t) for t in self.tie_projs]
        if len(self.tie_projs) != len(self.cutoffs) + 1:
            raise ValueError(f"{name}: tie_projs needs one entry per cluster, "
                             f"{len(self.cutoffs) + 1}, got {len(self.tie_projs)}")

    @property
    def memory_length(self):
        """(training, evaluation) memory lengths."""
        return self.mem_len, self.mem_len if self.eval_mem_len is None else self.eval_mem_len

    @property
    def n_positions(self):
        """The context ``decoding.generate_text`` keeps: the evaluation memory (at least 1)."""
        return max(self.memory_length[1], 1)

    @classmethod
    def tiny(cls, **overrides):
        """A test-sized model: 2 layers, 16 wide, 2 heads of 8, 30 tokens in a head of 10 and two
        clusters (10-20, 20-30), memory 8, no dropout."""
        return cls(**{"vocab_size": 30, "cutoffs": [10, 20], "d_model": 16, "d_embed": 16,
                      "n_head": 2, "d_head": 8, "d_inner": 32, "div_val": 2, "n_layer": 2,
                      "mem_len": 8, "clamp_len": 0, "dropout": 0.0, "dropatt": 0.0, **overrides})

    # ---- HuggingFace's config.json ----
    @classmethod
    def from_hf(cls, hf):
        """A config from a HuggingFace ``config.json`` dict (``model_type`` "transfo-xl").
        Settings we do not implement are an error, not silently dropped."""
        if hf.get("model_type") != "transfo-xl":
            raise ValueError(f"TransfoXLConfig.from_hf: model_type must be 'transfo-xl', got "
                             f"{hf.get('model_type')!r}")
        supported = {"same_length": False, "attn_type": 0, "untie_r": True, "adaptive": True,
                     "sample_softmax": -1, "tie_word_embeddings": True}
        for key, value in supported.items():
            if hf.get(key, value) != value:
                raise ValueError(f"TransfoXLConfig.from_hf: {key}={hf[key]!r} is not supported "
                                 f"(only {value!r})")
        names = {f.name for f in fields(cls)} - {"eval_mem_len"}
        return cls(**{key: hf[key] for key in names if hf.get(key) is not None},
                   eval_mem_len=hf.get("eval_mem_len"))

    def to_hf(self):
        """The HuggingFace ``config.json`` fields (``TransfoXLConfig``)."""
        hf = asdict(self)
        hf.update(model_type="transfo-xl", same_length=False, attn_type=0, untie_r=True,
                  adaptive=True, sample_softmax=-1, tie_word_embeddings=True)
        return hf
