"""the character Transformer as the rest of the library sees it: its HuggingFace key map (our
parameter names <-> HuggingFace's, with the transposes and fused tensors) and its registrations
for ``from_pretrained`` and for training and generation from the command line
(``models.registry``). The model itself is ``models.char_transformer``."""
from __future__ import annotations

from ..char_transformer import CharTransformerLMHeadModel
from ..configs.char_transformer import CharTransformerConfig
from ..registry import CAUSAL_LM, ModelFamily, register_family

# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer):
    """The paper's model at a run's sizes (``training.TrainConfig``), every auxiliary loss on."""
    return CharTransformerLMHeadModel(CharTransformerConfig(
        vocab_size=len(tokenizer), n_positions=settings.block_size, n_embd=settings.n_embd,
        n_layer=settings.n_layer, n_head=settings.n_head, resid_pdrop=settings.dropout,
        embd_pdrop=settings.dropout, attn_pdrop=settings.dropout,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=None))


register_family(ModelFamily(
    name="char_transformer", summary="Al-Rfou et al.'s deep character Transformer: fixed "
    "segments, losses at every position, intermediate layer and 2 targets ahead (eq 85)",
    objective=CAUSAL_LM, build=_build_for_training, default_tokenizer="char", bpe_style="gpt2",
    progress=CharTransformerLMHeadModel.set_training_progress))
