"""RoBERTa as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.roberta``."""
from __future__ import annotations

from ...io.huggingface import Rule
from ..registry import MASKED_LM, ModelFamily, register_family
from ..roberta import RobertaForMaskedLM, RobertaModel
from .bert import _NO_SPECIAL_TOKENS, bert_rules, register_bert_architecture, weight_and_bias
from .bert import _build_for_training as build_bert_for_training

# ---- HuggingFace checkpoints: BERT's key map under "roberta.", the MLM head as "lm_head" ---------
register_bert_architecture(RobertaModel, bert_rules("", "", pooler=True), default_for_type=True)
LM_HEAD_RULES = [*weight_and_bias("lm_head.dense", "mlm.dense"),
                 *weight_and_bias("lm_head.layer_norm", "mlm.norm"),
                 Rule("lm_head.bias", "mlm.bias")]
register_bert_architecture(RobertaForMaskedLM, bert_rules("roberta.", "bert.", pooler=False)
                           + LM_HEAD_RULES)


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer, model_class=None, **fields):
    """A RoBERTa encoder with its masked-LM head (``model_class``, default
    ``RobertaForMaskedLM``) for a run's ``settings``: BERT's (``models.bert``) with
    ``block_size`` tokens (<s> and </s> included) after RoBERTa's padding offset of
    pad_token_id + 1 rows, and the tokenizer's <s> and </s>; ``fields`` set other config
    fields."""
    return build_bert_for_training(
        settings, tokenizer, RobertaForMaskedLM if model_class is None else model_class,
        max_position_embeddings=settings.block_size + tokenizer.pad_token_id + 1,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **fields)


# the tokenizers a RoBERTa-style family cannot train with, and why
ROBERTA_TOKENIZERS = {"char": _NO_SPECIAL_TOKENS,
                      "wordpiece": "RoBERTa's vocabulary is byte-level BPE (Liu et al. 4.4); "
                                   "for WordPiece train a bert"}
register_family(ModelFamily(
    name="roberta", summary="a RoBERTa encoder: BERT's masked LM on byte-level BPE (Liu 4.4)",
    objective=MASKED_LM, build=_build_for_training, default_tokenizer="bpe", bpe_style="roberta",
    refused_tokenizers=ROBERTA_TOKENIZERS, hf_architectures=("RobertaForMaskedLM",)))
