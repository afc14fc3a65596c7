"""ALBERT as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.albert``."""
from __future__ import annotations

from ...io.huggingface import Rule
from ..albert import AlbertForMaskedLM, AlbertForPreTraining, AlbertModel
from ..configs.albert import AlbertConfig
from ..registry import MASKED_LM, ModelFamily, register_family
from .bert import _NO_SPECIAL_TOKENS, embedding_rules, register_bert_architecture, weight_and_bias

# ---- HuggingFace checkpoints (minitorch_nlp.io.huggingface) --------------------------------------
# HuggingFace's ALBERT holds one layer, ``albert_layer_groups.0.albert_layers.0``, that every depth
# applies: each of its tensors maps to that tensor of all our layers (a rule with {i} in ``ours``
# only), which are one object in a model with share_layers="all".
ALBERT_IGNORE = (r"(albert\.)?embeddings\.(position_ids|token_type_ids)",
                 r"predictions\.decoder\.(weight|bias)")


def albert_rules(hf_prefix, prefix, pooler):
    """The key map of ``AlbertModel`` under HuggingFace's ``hf_prefix`` (``"albert."`` or
    ``""``) and our ``prefix``."""
    rules = embedding_rules(hf_prefix, prefix) + weight_and_bias(
        f"{hf_prefix}encoder.embedding_hidden_mapping_in", f"{prefix}embeddings.project")
    hf_layer = f"{hf_prefix}encoder.albert_layer_groups.0.albert_layers.0."
    layer = f"{prefix}encoder.layers.{{i}}."
    for hf, ours in (("attention.query", "self_attn.q_proj"),
                     ("attention.key", "self_attn.k_proj"),
                     ("attention.value", "self_attn.v_proj"),
                     ("attention.dense", "self_attn.out_proj"),
                     ("attention.LayerNorm", "norm1"),
                     ("ffn", "feed_forward.linear1"),
                     ("ffn_output", "feed_forward.linear2"),
                     ("full_layer_layer_norm", "norm2")):
        rules += weight_and_bias(hf_layer + hf, layer + ours)
    if pooler:
        rules += weight_and_bias(f"{hf_prefix}pooler", f"{prefix}pooler.dense")
    return rules


ALBERT_MLM_HEAD_RULES = [*weight_and_bias("predictions.dense", "mlm.dense"),
                         *weight_and_bias("predictions.LayerNorm", "mlm.norm"),
                         Rule("predictions.bias", "mlm.bias")]
register_bert_architecture(AlbertModel, albert_rules("", "", pooler=True), default_for_type=True,
                           ignore=ALBERT_IGNORE)
register_bert_architecture(AlbertForMaskedLM, albert_rules("albert.", "bert.", pooler=False)
                           + ALBERT_MLM_HEAD_RULES, ignore=ALBERT_IGNORE)
register_bert_architecture(AlbertForPreTraining, albert_rules("albert.", "bert.", pooler=True)
                           + ALBERT_MLM_HEAD_RULES
                           + weight_and_bias("sop_classifier.classifier", "sop"),
                           ignore=ALBERT_IGNORE)


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer):
    """An ALBERT encoder (all layers shared) with its masked-LM head for a run's ``settings``:
    E = H / 4 at least 8 (ALBERT-base's 128 / 768 is 1 / 6), feed-forward width 4 H,
    ``block_size`` positions, [CLS] and [SEP] included."""
    return AlbertForMaskedLM(AlbertConfig(
        vocab_size=len(tokenizer),
        embedding_size=min(settings.n_embd, max(8, settings.n_embd // 4)),
        hidden_size=settings.n_embd, num_hidden_layers=settings.n_layer,
        num_attention_heads=settings.n_head, intermediate_size=4 * settings.n_embd,
        max_position_embeddings=settings.block_size, hidden_dropout_prob=settings.dropout,
        attention_probs_dropout_prob=settings.dropout, pad_token_id=tokenizer.pad_token_id))


register_family(ModelFamily(
    name="albert", summary="an ALBERT encoder (factorised embeddings, one shared layer) trained "
                           "with the masked-LM objective",
    objective=MASKED_LM, build=_build_for_training, default_tokenizer="wordpiece",
    bpe_style="roberta", refused_tokenizers={"char": _NO_SPECIAL_TOKENS},
    hf_architectures=("AlbertForMaskedLM",)))
