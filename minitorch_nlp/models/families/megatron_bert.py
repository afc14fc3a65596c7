"""Megatron-BERT as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.megatron_bert``."""
from __future__ import annotations

from ..megatron_bert import MegatronBertForPreTraining, MegatronBertModel
from .bert import (MLM_HEAD_RULES, embedding_rules, encoder_layer_rules, register_bert_architecture,
                   weight_and_bias)


# ---- HuggingFace checkpoints (minitorch_nlp.io.huggingface) --------------------------------------
# BERT's key map with Megatron's LayerNorm names: ``attention.ln`` before the attention, ``ln``
# before the feed-forward network, ``encoder.ln`` after the last layer; none on the embeddings.
def megatron_bert_rules(hf_prefix, prefix):
    return (embedding_rules(hf_prefix, prefix, norm=False)
            + encoder_layer_rules(hf_prefix, prefix, norms=("attention.ln", "ln"))
            + weight_and_bias(f"{hf_prefix}encoder.ln", f"{prefix}encoder.norm")
            + weight_and_bias(f"{hf_prefix}pooler.dense", f"{prefix}pooler.dense"))


register_bert_architecture(MegatronBertModel, megatron_bert_rules("", ""), default_for_type=True)
register_bert_architecture(MegatronBertForPreTraining, megatron_bert_rules("bert.", "bert.")
                           + MLM_HEAD_RULES + weight_and_bias("cls.seq_relationship", "nsp"))
