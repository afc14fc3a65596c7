"""BERT as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.bert``."""
from __future__ import annotations

from ...io.huggingface import HFArchitecture, Rule, register_architecture
from ..bert import (BertForMaskedLM, BertForPreTraining, BertForQuestionAnswering,
                    BertForSequenceClassification, BertForTokenClassification, BertModel)
from ..registry import MASKED_LM, ModelFamily, register_family

# ---- HuggingFace checkpoints (minitorch_nlp.io.huggingface) --------------------------------------
# HuggingFace's names -> ours. Linear weights are (out, in) in both: nothing is transposed. The
# ``embeddings.position_ids`` buffer and the decoder (a tied copy of the word embeddings and of
# the output bias) hold nothing of their own.
BERT_IGNORE = (r"(bert\.|roberta\.)?embeddings\.(position_ids|token_type_ids)",
               r"(cls\.predictions|lm_head)\.decoder\.(weight|bias)")


def weight_and_bias(hf, ours, optional=False):
    """The rules of a Linear or LayerNorm: ``{hf}.weight`` -> ``{ours}.weight``, and the bias
    (``optional``: for a layer only some configurations have)."""
    return [Rule(f"{hf}.{kind}", f"{ours}.{kind}", optional=optional)
            for kind in ("weight", "bias")]


def embedding_rules(hf_prefix, prefix, norm=True):
    """The key map of ``BertEmbeddings`` under ``{hf_prefix}embeddings.`` and
    ``{prefix}embeddings.``; ``norm=False`` for embeddings without LayerNorm (Megatron-BERT)."""
    hf_embed, embed = f"{hf_prefix}embeddings.", f"{prefix}embeddings."
    rules = [Rule(f"{hf_embed}word_embeddings.weight", f"{embed}word_embeddings.weight"),
             Rule(f"{hf_embed}position_embeddings.weight", f"{embed}position_embeddings.table"),
             Rule(f"{hf_embed}token_type_embeddings.weight",
                  f"{embed}token_type_embeddings.weight")]
    return rules + (weight_and_bias(f"{hf_embed}LayerNorm", f"{embed}norm") if norm else [])


def bert_rules(hf_prefix, prefix, pooler):
    """The key map of ``BertModel`` (and ``RobertaModel``) under HuggingFace's ``hf_prefix``
    (``"bert."``, ``"roberta."``, ``""``) and our ``prefix``."""
    rules = embedding_rules(hf_prefix, prefix) + encoder_layer_rules(hf_prefix, prefix)
    if pooler:
        rules += weight_and_bias(f"{hf_prefix}pooler.dense", f"{prefix}pooler.dense")
    return rules


def encoder_layer_rules(hf_prefix, prefix, norms=("attention.output.LayerNorm",
                                                   "output.LayerNorm")):
    """The key map of the encoder layers of ``BertModel`` (and ELECTRA's, Megatron-BERT's with
    its own ``norms``: HuggingFace's names of each layer's two LayerNorms)."""
    hf_layer, layer = f"{hf_prefix}encoder.layer.{{i}}.", f"{prefix}encoder.layers.{{i}}."
    rules = []
    for hf, ours in (("attention.self.query", "self_attn.q_proj"),
                     ("attention.self.key", "self_attn.k_proj"),
                     ("attention.self.value", "self_attn.v_proj"),
                     ("attention.output.dense", "self_attn.out_proj"),
                     (norms[0], "norm1"),
                     ("intermediate.dense", "feed_forward.linear1"),
                     ("output.dense", "feed_forward.linear2"),
                     (norms[1], "norm2")):
        rules += weight_and_bias(hf_layer + hf, layer + ours)
    return rules


def register_bert_architecture(model_class, rules, default_for_type=False, ignore=BERT_IGNORE):
    """Register ``model_class`` (named as its HuggingFace counterpart) with ``rules``; ``ignore``:
    the HuggingFace keys that hold nothing of ours."""
    config_class = getattr(model_class, "base_model_class", model_class).config_class
    register_architecture(HFArchitecture(
        name=model_class.__name__, model_type=config_class.model_type, model_class=model_class,
        from_config=lambda hf_config: model_class(config_class.from_hf(hf_config)),
        to_config=lambda model: model.config.to_hf(), rules=tuple(rules), ignore=ignore,
        default_for_type=default_for_type))


MLM_HEAD_RULES = [*weight_and_bias("cls.predictions.transform.dense", "mlm.dense"),
                  *weight_and_bias("cls.predictions.transform.LayerNorm", "mlm.norm"),
                  Rule("cls.predictions.bias", "mlm.bias")]
register_bert_architecture(BertModel, bert_rules("", "", pooler=True), default_for_type=True)
register_bert_architecture(BertForMaskedLM, bert_rules("bert.", "bert.", False) + MLM_HEAD_RULES)
register_bert_architecture(BertForPreTraining, bert_rules("bert.", "bert.", True) + MLM_HEAD_RULES
                           + weight_and_bias("cls.seq_relationship", "nsp"))
register_bert_architecture(BertForSequenceClassification, bert_rules("bert.", "bert.", True)
                           + weight_and_bias("classifier", "classifier"))
register_bert_architecture(BertForTokenClassification, bert_rules("bert.", "bert.", False)
                           + weight_and_bias("classifier", "classifier"))
register_bert_architecture(BertForQuestionAnswering, bert_rules("bert.", "bert.", False)
                           + weight_and_bias("qa_outputs", "qa_outputs"))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer, model_class=None, **fields):
    """A BERT encoder with its masked-LM head (``model_class``, default ``BertForMaskedLM``) for
    a run's ``settings`` (``training.TrainConfig``): feed-forward width 4 d, ``block_size``
    positions, [CLS] and [SEP] included; ``fields`` set other config fields, or replace these."""
    model_class = BertForMaskedLM if model_class is None else model_class
    return model_class(model_class.base_model_class.config_class(**{
        **dict(vocab_size=len(tokenizer), hidden_size=settings.n_embd,
               num_hidden_layers=settings.n_layer, num_attention_heads=settings.n_head,
               intermediate_size=4 * settings.n_embd, max_position_embeddings=settings.block_size,
               hidden_dropout_prob=settings.dropout, attention_probs_dropout_prob=settings.dropout,
               pad_token_id=tokenizer.pad_token_id),
        **fields}))


_NO_SPECIAL_TOKENS = ("it has no [CLS], [SEP] or [MASK] token, which masked-LM training needs; "
                      "use wordpiece or bpe")
register_family(ModelFamily(
    name="bert", summary="a BERT encoder trained with the masked-LM objective (dynamic masking)",
    objective=MASKED_LM, build=_build_for_training, default_tokenizer="wordpiece",
    bpe_style="roberta", refused_tokenizers={"char": _NO_SPECIAL_TOKENS},
    hf_architectures=("BertForMaskedLM",)))
