"""The configuration of BERT: ``BertConfig`` and its HuggingFace fields."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ... import checks

# HuggingFace's hidden_act -> the activation name of nn.FeedForward: BERT uses the exact (erf)
# GELU (Devlin section 3.1: "we use a gelu activation ... rather than the standard relu").
HIDDEN_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh"}


@dataclass
class BertConfig:
    """BERT's hyper-parameters under HuggingFace's names. The defaults are BERT-base (Devlin
    section 3: L = 12 layers, H = 768, A = 12 heads, feed-forward size 4H, 110M parameters,
    30 522 WordPiece tokens, 512 positions, two segments, dropout 0.1).

    ``num_labels`` and ``classifier_dropout`` (None: ``hidden_dropout_prob``) are for the
    fine-tuning heads. ``initializer_range`` is the standard deviation of the initial weights.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    num_labels: int = 2
    classifier_dropout: float | None = None

    model_type = "bert"
    activations = HIDDEN_ACT     # the hidden_act values the model implements

    RULES = (
        checks.positive("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                        "intermediate_size", "max_position_embeddings", "type_vocab_size",
                        "num_labels"),
        checks.divides("num_attention_heads", "hidden_size"),
        checks.one_of("hidden_act", lambda config: config.activations),
        checks.probabilities("hidden_dropout_prob", "attention_probs_dropout_prob",
                             "classifier_dropout"),
        checks.positive_numbers("layer_norm_eps", "initializer_range"),
        checks.special_token_ids("pad_token_id"),
    )

    def __post_init__(self):
        checks.validate(self)

    @classmethod
    def from_hf(cls, hf_config):
        """The config of a HuggingFace ``config.json`` (a dict). Fields we do not model
        (``transformers_version``, ``use_cache`` ...) are skipped; settings that change the
        maths and that we do not implement (relative positions, a decoder, an MLM decoder not
        tied to the word embeddings) are errors."""
        name = cls.__name__
        if not hf_config.get("tie_word_embeddings", True):
            raise ValueError(f"{name}: tie_word_embeddings=False is not implemented: the MLM "
                             "decoder is the word-embedding matrix")
        if hf_config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{name}: only absolute position embeddings are implemented, got "
                             f"position_embedding_type={hf_config['position_embedding_type']!r}")
        if hf_config.get("is_decoder") or hf_config.get("add_cross_attention"):
            raise ValueError(f"{name}: BERT as a decoder (is_decoder / add_cross_attention) is "
                             "not implemented")
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in hf_config.items() if key in fields}
        if "num_labels" not in hf_config and "id2label" in hf_config:
            values["num_labels"] = len(hf_config["id2label"])
        return cls(**values)

    def to_hf(self):
        """The fields of a HuggingFace ``config.json`` (without ``architectures`` and
        ``model_type``); the labels as HuggingFace writes them, ``id2label`` / ``label2id``."""
        hf_config = dataclasses.asdict(self)
        labels = [f"LABEL_{i}" for i in range(hf_config.pop("num_labels"))]
        hf_config.update(id2label={str(i): label for i, label in enumerate(labels)},
                         label2id={label: i for i, label in enumerate(labels)},
                         position_embedding_type="absolute")
        return hf_config
