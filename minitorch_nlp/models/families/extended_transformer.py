"""ETC, the Extended Transformer Construction, as the rest of the library sees it: its HuggingFace
key map (our parameter names <-> HuggingFace's, with the transposes and fused tensors) and its
registrations for ``from_pretrained`` and for training and generation from the command line
(``models.registry``). The model itself is ``models.extended_transformer``."""
from __future__ import annotations

from ..configs.extended_transformer import ETCConfig
from ..extended_transformer import ETCForMaskedLM
from ..registry import MASKED_LM, ModelFamily, register_family
from .bert import _NO_SPECIAL_TOKENS

# ---- the model registry (minitorch_nlp.models.registry): training, command line ------------------


def _build_for_training(settings, tokenizer):
    """ETC with its masked-LM head for a run's ``settings`` (``training.TrainConfig``):
    feed-forward width 4 d, a local radius of a quarter of ``block_size`` (at least 1), one
    global token per 4 long tokens."""
    return ETCForMaskedLM(ETCConfig(
        vocab_size=len(tokenizer), hidden_size=settings.n_embd,
        num_hidden_layers=settings.n_layer, num_attention_heads=settings.n_head,
        intermediate_size=4 * settings.n_embd, local_radius=max(1, settings.block_size // 4),
        max_distance=max(1, settings.block_size // 4), long_per_global=4,
        hidden_dropout_prob=settings.dropout, attention_probs_dropout_prob=settings.dropout,
        pad_token_id=tokenizer.pad_token_id))


register_family(ModelFamily(
    name="etc", summary="ETC's global-local encoder trained with the masked-LM objective",
    objective=MASKED_LM, build=_build_for_training, default_tokenizer="wordpiece",
    bpe_style="roberta", refused_tokenizers={"char": _NO_SPECIAL_TOKENS}))
