"""the Longformer as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.longformer``."""
from __future__ import annotations

from ..longformer import LongformerForMaskedLM, LongformerModel
from ..registry import MASKED_LM, ModelFamily, register_family
from .bert import bert_rules, register_bert_architecture, weight_and_bias
from .roberta import LM_HEAD_RULES, ROBERTA_TOKENIZERS
from .roberta import _build_for_training as build_roberta_for_training


# ---- HuggingFace checkpoints: RoBERTa's key map under "longformer.", and the global projections -
def global_projection_rules(hf_prefix, prefix):
    """Each layer's query_global, key_global and value_global."""
    return [rule for projection in ("query_global", "key_global", "value_global")
            for rule in weight_and_bias(
                f"{hf_prefix}encoder.layer.{{i}}.attention.self.{projection}",
                f"{prefix}encoder.layers.{{i}}.self_attn.{projection}")]


# older checkpoints keep the position-id buffer; the decoder is a tied copy of the embeddings
LONGFORMER_IGNORE = (r"(longformer\.)?embeddings\.position_ids",
                     r"lm_head\.decoder\.(weight|bias)")
register_bert_architecture(LongformerModel, bert_rules("", "", pooler=True)
                           + global_projection_rules("", ""), default_for_type=True,
                           ignore=LONGFORMER_IGNORE)
register_bert_architecture(LongformerForMaskedLM, bert_rules("longformer.", "bert.", pooler=False)
                           + global_projection_rules("longformer.", "bert.") + LM_HEAD_RULES,
                           ignore=LONGFORMER_IGNORE)


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer):
    """A Longformer with its masked-LM head for a run's ``settings``: RoBERTa's (see
    ``models.roberta``, with the released checkpoint's one segment and LayerNorm eps), with a
    window of block_size / 4 tokens on each side (at least one), so that at training sizes the
    window, not the block, limits what a layer sees. No token is global: the masked-LM
    objective has no token that must see the whole input."""
    return build_roberta_for_training(
        settings, tokenizer, LongformerForMaskedLM, type_vocab_size=1, layer_norm_eps=1e-5,
        attention_window=2 * max(1, settings.block_size // 4),
        sep_token_id=tokenizer.sep_token_id)


register_family(ModelFamily(
    name="longformer",
    summary="a Longformer encoder: RoBERTa's masked LM with sliding-window attention "
            "(Beltagy 3.1)",
    objective=MASKED_LM, build=_build_for_training, default_tokenizer="bpe", bpe_style="roberta",
    refused_tokenizers=ROBERTA_TOKENIZERS, hf_architectures=("LongformerForMaskedLM",)))
