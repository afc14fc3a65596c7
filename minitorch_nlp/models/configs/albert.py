"""The configuration of ALBERT: ``AlbertConfig`` and the paper's sizes."""
from __future__ import annotations

from dataclasses import dataclass

from ... import checks
from .bert import BertConfig

SHARING_MODES = ("all", "attention", "ffn", "none")


@dataclass
class AlbertConfig(BertConfig):
    """``BertConfig`` plus ALBERT's ``embedding_size`` E and ``share_layers`` (one of
    ``SHARING_MODES``). The defaults are ALBERT-base (Lan Table 1: L = 12, H = 768, E = 128,
    all layers shared, 30 000 SentencePiece tokens; 12 heads, feed-forward 4H), with the tanh
    GELU and no dropout of the released v2 models; ``classifier_dropout_prob`` is the SOP
    head's dropout."""

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_act: str = "gelu_new"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    classifier_dropout_prob: float = 0.1
    share_layers: str = "all"
    bos_token_id: int = 2
    eos_token_id: int = 3

    model_type = "albert"

    RULES = BertConfig.RULES + (
        checks.positive("embedding_size"),
        checks.one_of("share_layers", SHARING_MODES),
        checks.probabilities("classifier_dropout_prob"),
        checks.special_token_ids("bos_token_id", "eos_token_id"),
    )

    def __post_init__(self):
        super().__post_init__()
        if self.embedding_size > self.hidden_size:
            raise ValueError(f"AlbertConfig: embedding_size={self.embedding_size} is larger than "
                             f"hidden_size={self.hidden_size}; ALBERT factorises the embeddings "
                             "as V x E + E x H to need fewer parameters than V x H, which takes "
                             "E <= H (Lan et al. 3.1: H >> E); lower embedding_size")

    @classmethod
    def from_hf(cls, hf_config):
        """``BertConfig.from_hf``; HuggingFace's ALBERT shares every layer (``share_layers`` is
        "all"), and only its released layout, one group of one layer, is implemented."""
        groups = (hf_config.get("num_hidden_groups", 1), hf_config.get("inner_group_num", 1))
        if groups != (1, 1):
            raise ValueError(f"AlbertConfig: num_hidden_groups={groups[0]} and inner_group_num="
                             f"{groups[1]} are not implemented; the released ALBERT models have "
                             "one group of one shared layer (1 and 1)")
        return super().from_hf({key: value for key, value in hf_config.items()
                                if key != "share_layers"})

    def to_hf(self):
        if self.share_layers != "all":
            raise ValueError(f"AlbertConfig: share_layers={self.share_layers!r} has no "
                             "HuggingFace format; HuggingFace's ALBERT shares all layers")
        hf_config = super().to_hf()
        del hf_config["share_layers"]
        hf_config.update(num_hidden_groups=1, inner_group_num=1)
        return hf_config


def _paper_config(config_class, layers, hidden, embedding=None):
    sizes = dict(vocab_size=30000, num_hidden_layers=layers, hidden_size=hidden,
                 num_attention_heads=hidden // 64, intermediate_size=4 * hidden)
    if embedding is not None:
        sizes["embedding_size"] = embedding
    return config_class(**sizes)


# Lan et al. Table 1: name -> (configuration, the parameter count the paper prints). The paper
# gives 12 heads for base, 16 for large, 32 xlarge and 64 xxlarge (H / 64); heads change no count.
PAPER_CONFIGS = {
    "BERT base": (_paper_config(BertConfig, 12, 768), "108M"),
    "BERT large": (_paper_config(BertConfig, 24, 1024), "334M"),
    "ALBERT base": (_paper_config(AlbertConfig, 12, 768, 128), "12M"),
    "ALBERT large": (_paper_config(AlbertConfig, 24, 1024, 128), "18M"),
    "ALBERT xlarge": (_paper_config(AlbertConfig, 24, 2048, 128), "60M"),
    "ALBERT xxlarge": (_paper_config(AlbertConfig, 12, 4096, 128), "235M"),
}
