"""Megatron-BERT (Shoeybi et al., 2019, "Megatron-LM: Training Multi-Billion Parameter Language
Models Using Model Parallelism"), the survey's section IV-E.

The survey credits Megatron's scaling of BERT to "layer normalization and residual connection
re-ordering within the transformer layers": Shoeybi et al. (section 4.3, Figure 7) found that
BERT's post-LN layers, x = LayerNorm(x + Sublayer(x)), degrade as the model grows beyond
BERT-large, while layers that normalise each sub-layer's input, x = x + Sublayer(LayerNorm(x)),
with one LayerNorm after the last layer, keep improving up to 3.9B parameters.

``MegatronBertModel`` is ``BertModel`` with ``norm_first=True`` (pre-LN layers and the final
LayerNorm of ``nn.TransformerEncoder``) and embeddings that are not normalised (the first layer
normalises its input). The model parallelism that split it across GPUs is not part of this module.
Names, calls and checkpoints follow HuggingFace (``MegatronBertModel``,
``MegatronBertForPreTraining``).
"""
from __future__ import annotations


from ..nn import Identity
from .bert import (BertEmbeddings, BertForPreTraining, BertModel)
from .configs.megatron_bert import MegatronBertConfig

__all__ = ["MegatronBertConfig", "MegatronBertEmbeddings", "MegatronBertForPreTraining",
           "MegatronBertModel"]


class MegatronBertEmbeddings(BertEmbeddings):
    """BERT's token + segment + position embeddings without their LayerNorm: in the re-ordered
    layers the first sub-layer normalises its own input."""

    def __init__(self, config: MegatronBertConfig) -> None:
        super().__init__(config)
        self.norm = Identity()


class MegatronBertModel(BertModel):
    """BERT re-ordered (Shoeybi et al. Figure 7b): pre-LN encoder layers, a final LayerNorm, no
    LayerNorm on the embeddings. Returns ``ModelOutput(last_hidden_state, pooler_output)``."""

    config_class = MegatronBertConfig
    embeddings_class = MegatronBertEmbeddings
    norm_first = True


class MegatronBertForPreTraining(BertForPreTraining):
    """Megatron-BERT with BERT's masked-LM and next-sentence heads (``prediction_logits``,
    ``seq_relationship_logits``)."""

    base_model_class = MegatronBertModel
