"""MobileBERT as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.mobilebert``."""
from __future__ import annotations

from ... import checks
from ...io.huggingface import Rule
from ..mobilebert import (MobileBertForMaskedLM, MobileBertForPreTraining,
                          MobileBertForSequenceClassification, MobileBertModel)
from ..registry import MASKED_LM, ModelFamily, register_family
from .bert import _NO_SPECIAL_TOKENS, register_bert_architecture, weight_and_bias
from .bert import _build_for_training as _bert_build_for_training

# ---- HuggingFace checkpoints (minitorch_nlp.io.huggingface) --------------------------------------
MAX_STACKED_FFNS = 16     # key-map rules for stacked feed-forward networks 0 .. 15


def mobilebert_rules(hf_prefix, prefix, pooler):
    """The key map of ``MobileBertModel`` under HuggingFace's ``hf_prefix`` (``"mobilebert."`` or
    ``""``) and our ``prefix``. Nothing is transposed; NoNorm keeps HuggingFace's ``LayerNorm``
    names."""
    hf_embed, embed = f"{hf_prefix}embeddings.", f"{prefix}embeddings."
    rules = [Rule(f"{hf_embed}word_embeddings.weight", f"{embed}word_embeddings.weight"),
             Rule(f"{hf_embed}position_embeddings.weight", f"{embed}position_embeddings.table"),
             Rule(f"{hf_embed}token_type_embeddings.weight",
                  f"{embed}token_type_embeddings.weight"),
             *weight_and_bias(f"{hf_embed}embedding_transformation",
                              f"{embed}embedding_transformation"),
             *weight_and_bias(f"{hf_embed}LayerNorm", f"{embed}norm")]
    hf_layer, layer = f"{hf_prefix}encoder.layer.{{i}}.", f"{prefix}encoder.layers.{{i}}."
    pairs = [("attention.self.query", "self_attn.q_proj"),
             ("attention.self.key", "self_attn.k_proj"),
             ("attention.self.value", "self_attn.v_proj"),
             ("attention.output.dense", "self_attn.out_proj"),
             ("attention.output.LayerNorm", "attention_norm"),
             ("intermediate.dense", "feed_forward.linear1"),
             ("output.dense", "feed_forward.linear2"),
             ("output.LayerNorm", "ffn_norm")]
    # present in some configurations only (use_bottleneck, key_query_shared_bottleneck)
    optional = [("output.bottleneck.dense", "output_bottleneck"),
                ("output.bottleneck.LayerNorm", "output_norm"),
                ("bottleneck.input.dense", "input_bottleneck.dense"),
                ("bottleneck.input.LayerNorm", "input_bottleneck.norm"),
                ("bottleneck.attention.dense", "attention_bottleneck.dense"),
                ("bottleneck.attention.LayerNorm", "attention_bottleneck.norm")]
    for j in range(MAX_STACKED_FFNS):
        pairs += [(f"ffn.{j}.intermediate.dense", f"stacked_ffns.{j}.linear1"),
                  (f"ffn.{j}.output.dense", f"stacked_ffns.{j}.linear2"),
                  (f"ffn.{j}.output.LayerNorm", f"stacked_norms.{j}")]
    for hf, ours in pairs:
        rules += weight_and_bias(hf_layer + hf, layer + ours)
    for hf, ours in optional:
        rules += weight_and_bias(hf_layer + hf, layer + ours, optional=True)
    if pooler:   # classifier_activation=False has no dense layer
        rules += weight_and_bias(f"{hf_prefix}pooler.dense", f"{prefix}pooler.dense",
                                 optional=True)
    return rules


MOBILEBERT_LM_HEAD_RULES = [*weight_and_bias("cls.predictions.transform.dense", "mlm.dense"),
                            *weight_and_bias("cls.predictions.transform.LayerNorm", "mlm.norm"),
                            Rule("cls.predictions.dense.weight", "mlm.extra_columns"),
                            Rule("cls.predictions.bias", "mlm.bias")]
register_bert_architecture(MobileBertModel, mobilebert_rules("", "", pooler=True),
                           default_for_type=True)
register_bert_architecture(MobileBertForMaskedLM, mobilebert_rules("mobilebert.", "bert.", False)
                           + MOBILEBERT_LM_HEAD_RULES)
register_bert_architecture(MobileBertForSequenceClassification,
                           mobilebert_rules("mobilebert.", "bert.", True)
                           + weight_and_bias("classifier", "classifier"))
register_bert_architecture(MobileBertForPreTraining,
                           mobilebert_rules("mobilebert.", "bert.", True)
                           + MOBILEBERT_LM_HEAD_RULES
                           + weight_and_bias("cls.seq_relationship", "nsp"))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer):
    """A ``MobileBertForMaskedLM`` for a run's ``settings`` (``training.TrainConfig``) in
    MobileBERT's proportions (Sun et al. Table 1, H = 512, B = E = 128, feed-forward width 512,
    4 stacked feed-forward networks): inter-block width H = ``n_embd``, intra-block width and
    embedding size B = E = H / 4, feed-forward width H; ``block_size`` positions, [CLS] and [SEP]
    included. Attention works at width B, so ``n_head`` must divide H / 4."""
    bottleneck = settings.n_embd // 4
    if bottleneck < 1 or bottleneck % settings.n_head:
        raise checks.SettingError(
            "n_head", f"={settings.n_head} must divide a mobilebert's bottleneck width n_embd / 4 "
            f"= {settings.n_embd} // 4 = {bottleneck} (its attention works at that width); give "
            f"a multiple of {4 * settings.n_head} as --n-embd")
    return _bert_build_for_training(settings, tokenizer, MobileBertForMaskedLM,
                                    intermediate_size=settings.n_embd, embedding_size=bottleneck,
                                    intra_bottleneck_size=bottleneck)


register_family(ModelFamily(
    name="mobilebert", summary="a MobileBERT encoder (bottlenecks, NoNorm, stacked feed-forward "
    "networks, 3-gram embedding), masked LM",
    objective=MASKED_LM, build=_build_for_training, default_tokenizer="wordpiece",
    bpe_style="roberta", refused_tokenizers={"char": _NO_SPECIAL_TOKENS},
    hf_architectures=("MobileBertForMaskedLM",)))
