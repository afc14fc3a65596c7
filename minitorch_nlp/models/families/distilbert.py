"""DistilBERT as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.distilbert``."""
from __future__ import annotations

import functools

from ...io.huggingface import Rule
from ..distilbert import (DistilBertForMaskedLM, DistilBertForQuestionAnswering,
                          DistilBertForSequenceClassification, DistilBertForTokenClassification,
                          DistilBertModel)
from ..registry import MASKED_LM, ModelFamily, register_family
from .bert import (_NO_SPECIAL_TOKENS, _build_for_training, register_bert_architecture,
                   weight_and_bias)


# ---- HuggingFace checkpoints (minitorch_nlp.io.huggingface) --------------------------------------
def distilbert_rules(hf_prefix, prefix):
    """The key map of ``DistilBertModel`` under HuggingFace's ``hf_prefix`` (``"distilbert."`` or
    ``""``) and our ``prefix``. Nothing is transposed."""
    hf_embed, embed = f"{hf_prefix}embeddings.", f"{prefix}embeddings."
    rules = [Rule(f"{hf_embed}word_embeddings.weight", f"{embed}word_embeddings.weight"),
             Rule(f"{hf_embed}position_embeddings.weight", f"{embed}position_embeddings.table"),
             *weight_and_bias(f"{hf_embed}LayerNorm", f"{embed}norm")]
    hf_layer, layer = f"{hf_prefix}transformer.layer.{{i}}.", f"{prefix}encoder.layers.{{i}}."
    for hf, ours in (("attention.q_lin", "self_attn.q_proj"),
                     ("attention.k_lin", "self_attn.k_proj"),
                     ("attention.v_lin", "self_attn.v_proj"),
                     ("attention.out_lin", "self_attn.out_proj"), ("sa_layer_norm", "norm1"),
                     ("ffn.lin1", "feed_forward.linear1"), ("ffn.lin2", "feed_forward.linear2"),
                     ("output_layer_norm", "norm2")):
        rules += weight_and_bias(hf_layer + hf, layer + ours)
    return rules


register_bert_architecture(DistilBertModel, distilbert_rules("", ""), default_for_type=True)
register_bert_architecture(DistilBertForMaskedLM, distilbert_rules("distilbert.", "bert.")
                           + weight_and_bias("vocab_transform", "mlm.dense")
                           + weight_and_bias("vocab_layer_norm", "mlm.norm")
                           + [Rule("vocab_projector.bias", "mlm.bias")])
register_bert_architecture(DistilBertForSequenceClassification,
                           distilbert_rules("distilbert.", "bert.")
                           + weight_and_bias("pre_classifier", "pre_classifier")
                           + weight_and_bias("classifier", "classifier"))
register_bert_architecture(DistilBertForTokenClassification,
                           distilbert_rules("distilbert.", "bert.")
                           + weight_and_bias("classifier", "classifier"))
register_bert_architecture(DistilBertForQuestionAnswering,
                           distilbert_rules("distilbert.", "bert.")
                           + weight_and_bias("qa_outputs", "qa_outputs"))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------

register_family(ModelFamily(
    name="distilbert", summary="a DistilBERT encoder (BERT without segments or pooler), masked LM",
    objective=MASKED_LM, default_tokenizer="wordpiece", bpe_style="roberta",
    build=functools.partial(_build_for_training, model_class=DistilBertForMaskedLM),
    refused_tokenizers={"char": _NO_SPECIAL_TOKENS}, hf_architectures=("DistilBertForMaskedLM",)))
