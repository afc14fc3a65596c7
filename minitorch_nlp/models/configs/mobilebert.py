"""The configuration of MobileBERT."""
from __future__ import annotations

from dataclasses import dataclass

from ... import checks
from .bert import BertConfig


@dataclass
class MobileBertConfig(BertConfig):
    """MobileBERT's hyper-parameters under HuggingFace's names, MobileBERT's defaults (Sun et al.
    Table 1): 24 layers, inter-block width H = 512, intra-block width B = 128
    (``intra_bottleneck_size``), 4 heads, feed-forward width 512, 4 stacked feed-forward
    networks, embedding size E = 128, ReLU, NoNorm, no hidden dropout."""

    hidden_size: int = 512
    num_hidden_layers: int = 24
    num_attention_heads: int = 4
    intermediate_size: int = 512
    hidden_act: str = "relu"
    hidden_dropout_prob: float = 0.0
    embedding_size: int = 128
    intra_bottleneck_size: int = 128
    num_feedforward_networks: int = 4
    trigram_input: bool = True
    use_bottleneck: bool = True
    use_bottleneck_attention: bool = False
    key_query_shared_bottleneck: bool = True
    normalization_type: str = "no_norm"
    classifier_activation: bool = True

    model_type = "mobilebert"
    activations = {"relu": "relu", "gelu": "gelu"}
    NORMALIZATIONS = ("no_norm", "layer_norm")

    RULES = BertConfig.RULES + (
        checks.positive("embedding_size", "intra_bottleneck_size", "num_feedforward_networks"),
        checks.one_of("normalization_type", lambda config: config.NORMALIZATIONS),
    )

    def __post_init__(self):
        super().__post_init__()
        name = type(self).__name__
        if self.use_bottleneck and not self.use_bottleneck_attention \
                and not self.key_query_shared_bottleneck \
                and self.intra_bottleneck_size != self.hidden_size:
            raise ValueError(f"{name}: with use_bottleneck and neither "
                             "use_bottleneck_attention nor key_query_shared_bottleneck, the "
                             "queries and keys are the "
                             f"hidden_size={self.hidden_size} wide layer input, but the attention "
                             f"works at intra_bottleneck_size={self.intra_bottleneck_size} "
                             "(HuggingFace's model fails there too); make the two equal or set "
                             "one of the two switches")
        if self.use_bottleneck and self.use_bottleneck_attention \
                and self.key_query_shared_bottleneck:
            raise ValueError(f"{name}: use_bottleneck_attention=True and "
                             "key_query_shared_bottleneck=True is not implemented: the attention "
                             "then reads the input bottleneck, and HuggingFace keeps a shared "
                             "query/key bottleneck it never applies; set "
                             "key_query_shared_bottleneck=False")
        if not self.trigram_input and self.embedding_size == self.hidden_size:
            raise ValueError(f"{name}: trigram_input=False with embedding_size == hidden_size "
                             f"({self.hidden_size}) is not implemented: HuggingFace keeps an "
                             "embedding_transformation it never applies")
        if self.true_hidden_size % self.num_attention_heads:
            field = "intra_bottleneck_size" if self.use_bottleneck else "hidden_size"
            raise ValueError(f"{name}: the attention's width {self.true_hidden_size} ({field}) "
                             f"is not a multiple of num_attention_heads="
                             f"{self.num_attention_heads}")
        if self.embedding_size > self.hidden_size:
            raise ValueError(f"{name}: embedding_size={self.embedding_size} must not exceed "
                             f"hidden_size={self.hidden_size} (the decoder extends the "
                             "embeddings to hidden_size)")

    @classmethod
    def ib_bert(cls, **overrides):
        """The configuration of IB-BERT_LARGE, MobileBERT's teacher (Sun et al. section 3.1 and
        Table 1): BERT_LARGE inside each block (intra-block width 1024, one feed-forward network
        1024 -> 4096 -> 1024, LayerNorm, GELU), with *inverted* bottlenecks (512 -> 1024 into the
        block, 1024 -> 512 out of it), so that its feature maps between the blocks are 512 wide
        as MobileBERT's, and 4 heads as MobileBERT: eq 46 and eq 47 compare the two layer by
        layer. Queries, keys and values all come from the inverted bottleneck
        (``use_bottleneck_attention``). ``overrides`` change any field (a tiny teacher for
        tests: the same proportions at smaller widths)."""
        return cls(**{**dict(hidden_size=512, intra_bottleneck_size=1024, embedding_size=128,
                             num_hidden_layers=24, num_attention_heads=4,
                             intermediate_size=4096, num_feedforward_networks=1,
                             hidden_act="gelu", normalization_type="layer_norm",
                             use_bottleneck_attention=True, key_query_shared_bottleneck=False),
                      **overrides})

    @property
    def true_hidden_size(self):
        """The width the attention and the feed-forward networks work at (HuggingFace's name):
        the intra-block width with bottlenecks, the hidden size without."""
        return self.intra_bottleneck_size if self.use_bottleneck else self.hidden_size

    def to_hf(self):
        hf_config = super().to_hf()
        hf_config.pop("position_embedding_type")
        return hf_config
