"""BigBird as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.big_bird``."""
from __future__ import annotations

from ..big_bird import BigBirdForMaskedLM, BigBirdForPreTraining, BigBirdModel
from ..registry import MASKED_LM, ModelFamily, register_family
from .bert import (_NO_SPECIAL_TOKENS, MLM_HEAD_RULES, _build_for_training, bert_rules,
                   register_bert_architecture, weight_and_bias)


# ---- HuggingFace checkpoints: BERT's key map; the pooler is one Linear named "pooler" ----------
def big_bird_rules(hf_prefix, prefix, pooler):
    """The key map of ``BigBirdModel`` under HuggingFace's ``hf_prefix`` and our ``prefix``."""
    rules = bert_rules(hf_prefix, prefix, pooler=False)
    if pooler:
        rules += weight_and_bias(f"{hf_prefix}pooler", f"{prefix}pooler.dense")
    return rules


register_bert_architecture(BigBirdModel, big_bird_rules("", "", pooler=True),
                           default_for_type=True)
register_bert_architecture(BigBirdForMaskedLM, big_bird_rules("bert.", "bert.", pooler=True)
                           + MLM_HEAD_RULES)
register_bert_architecture(BigBirdForPreTraining, big_bird_rules("bert.", "bert.", pooler=True)
                           + MLM_HEAD_RULES + weight_and_bias("cls.seq_relationship", "nsp"))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_big_bird_for_training(settings, tokenizer):
    """BERT's training build with BigBird's attention: blocks of block_size // 8 positions and
    one random block, so that a context of ``block_size`` >= 8 tokens (8 blocks or more, above
    the 7 attended in full) is attended sparsely."""
    return _build_for_training(settings, tokenizer, BigBirdForMaskedLM,
                               block_size=max(1, settings.block_size // 8), num_random_blocks=1)


register_family(ModelFamily(
    name="big_bird", summary="a BigBird encoder (block-sparse attention: window, global and "
                             "random blocks) trained with the masked-LM objective",
    objective=MASKED_LM, build=_build_big_bird_for_training, default_tokenizer="wordpiece",
    bpe_style="roberta", refused_tokenizers={"char": _NO_SPECIAL_TOKENS},
    hf_architectures=("BigBirdForMaskedLM",)))
