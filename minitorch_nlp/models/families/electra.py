"""ELECTRA as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.electra``."""
from __future__ import annotations

from ...io.huggingface import Rule
from ..configs.electra import ElectraConfig
from ..electra import ElectraForMaskedLM, ElectraForPreTraining, ElectraModel, ElectraPretraining
from ..registry import MASKED_LM, ModelFamily, register_family
from .bert import (_NO_SPECIAL_TOKENS, embedding_rules, encoder_layer_rules,
                   register_bert_architecture, weight_and_bias)

# ---- HuggingFace checkpoints (minitorch_nlp.io.huggingface) --------------------------------------
# BERT's names under "electra.", no pooler; ``embeddings_project`` exists only when
# embedding_size != hidden_size, so its rules are optional. The generator's decoder weight is the
# tied word-embedding matrix.
ELECTRA_IGNORE = (r"(electra\.)?embeddings\.(position_ids|token_type_ids)",
                  r"generator_lm_head\.weight")


def electra_rules(hf_prefix, prefix):
    """The key map of ``ElectraModel`` under HuggingFace's ``hf_prefix`` and our ``prefix``."""
    projection = [Rule(f"{hf_prefix}embeddings_project.{kind}",
                       f"{prefix}embeddings.project.{kind}", optional=True)
                  for kind in ("weight", "bias")]
    return (embedding_rules(hf_prefix, prefix) + projection
            + encoder_layer_rules(hf_prefix, prefix))


register_bert_architecture(ElectraModel, electra_rules("", ""), default_for_type=True,
                           ignore=ELECTRA_IGNORE)
register_bert_architecture(ElectraForPreTraining, electra_rules("electra.", "bert.")
                           + weight_and_bias("discriminator_predictions.dense",
                                             "discriminator.dense")
                           + weight_and_bias("discriminator_predictions.dense_prediction",
                                             "discriminator.dense_prediction"),
                           ignore=ELECTRA_IGNORE)
register_bert_architecture(ElectraForMaskedLM, electra_rules("electra.", "bert.")
                           + weight_and_bias("generator_predictions.dense", "mlm.dense")
                           + weight_and_bias("generator_predictions.LayerNorm", "mlm.norm")
                           + [Rule("generator_lm_head.bias", "mlm.bias")], ignore=ELECTRA_IGNORE)


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer):
    """ELECTRA's generator and discriminator for a run's ``settings``: the discriminator of the
    run's size (embeddings as wide as it, feed-forward 4 H, ``block_size`` positions), the
    generator a quarter of its width (``ElectraConfig.generator``), trained together with eq
    110. ``generate`` fills masks with the generator."""
    return ElectraPretraining(ElectraConfig(
        vocab_size=len(tokenizer), embedding_size=settings.n_embd, hidden_size=settings.n_embd,
        num_hidden_layers=settings.n_layer, num_attention_heads=settings.n_head,
        intermediate_size=4 * settings.n_embd, max_position_embeddings=settings.block_size,
        hidden_dropout_prob=settings.dropout, attention_probs_dropout_prob=settings.dropout,
        pad_token_id=tokenizer.pad_token_id))


register_family(ModelFamily(
    name="electra", summary="ELECTRA: a small masked-LM generator and a discriminator that "
                            "detects its replacements, trained together (eq 107-110)",
    objective=MASKED_LM, build=_build_for_training, default_tokenizer="wordpiece",
    bpe_style="roberta", refused_tokenizers={"char": _NO_SPECIAL_TOKENS},
    hf_architectures=("ElectraForMaskedLM",)))
