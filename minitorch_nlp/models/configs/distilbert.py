"""The configuration of DistilBERT."""
from __future__ import annotations

from dataclasses import dataclass

from .bert import BertConfig

# HuggingFace's DistilBERT names -> BertConfig's
HF_NAMES = {"dim": "hidden_size", "n_layers": "num_hidden_layers",
            "n_heads": "num_attention_heads", "hidden_dim": "intermediate_size",
            "dropout": "hidden_dropout_prob", "attention_dropout": "attention_probs_dropout_prob",
            "activation": "hidden_act", "seq_classif_dropout": "classifier_dropout"}


@dataclass
class DistilBertConfig(BertConfig):
    """``BertConfig`` with DistilBERT-base's defaults: 6 layers (BERT-base's 12 halved), the
    sequence classifier's dropout 0.2 (HuggingFace's ``seq_classif_dropout``), the
    question-answering head's 0.1 (``qa_dropout``); LayerNorm eps 1e-12. ``type_vocab_size`` is
    unused (no segment embeddings)."""

    num_hidden_layers: int = 6
    classifier_dropout: float | None = 0.2
    qa_dropout: float = 0.1

    model_type = "distilbert"

    @classmethod
    def from_hf(cls, hf_config):
        """The config of a HuggingFace DistilBERT ``config.json`` (a dict); sinusoidal position
        embeddings (``sinusoidal_pos_embds``) are not implemented and are an error."""
        if hf_config.get("sinusoidal_pos_embds"):
            raise ValueError(f"{cls.__name__}: sinusoidal_pos_embds=True is not implemented; "
                             "DistilBERT's checkpoints use learned position embeddings")
        return super().from_hf({HF_NAMES.get(key, key): value
                                for key, value in hf_config.items()})

    def to_hf(self):
        """HuggingFace's DistilBERT fields (``dim``, ``n_layers`` ...)."""
        ours_to_hf = {ours: hf for hf, ours in HF_NAMES.items()}
        hf_config = {ours_to_hf.get(key, key): value for key, value in super().to_hf().items()
                     if key not in ("type_vocab_size", "layer_norm_eps",
                                    "position_embedding_type")}
        hf_config.update(sinusoidal_pos_embds=False, tie_word_embeddings=True)
        return hf_config
