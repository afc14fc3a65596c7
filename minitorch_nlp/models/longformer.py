"""Longformer: The Long-Document Transformer (Beltagy et al., 2020), the survey's section VIII-C,
as the released checkpoints and HuggingFace's ``LongformerModel`` have it.

The model is RoBERTa (``models.roberta``: its embeddings, position ids and post-LN layers, the
paper's section 5 starts from RoBERTa's checkpoint) with every self-attention replaced by
``attention.LongformerSelfAttention``: each token attends a window of ``attention_window / 2``
tokens on each side (the window can differ per layer, ``attention_window`` a list), and the
tokens marked in ``global_attention_mask`` attend every token and are attended by every token,
with their own projections ``query_global``, ``key_global``, ``value_global`` (section 3.1).
Cost and memory grow as n * (window + global tokens), not n^2.

HuggingFace pads the sequence to a multiple of the largest window before its chunked kernel and
cuts the padding off afterwards. The padding is masked, so it changes no real token's output;
our grouped window kernel takes any length, so no padding is added. (With per-layer windows
HuggingFace fails unless the padded length is a multiple of every layer's window: windows 4 and
6 fail on 13 tokens, padded to 18; ours have no such limit.)
Padding tokens cannot be global (the global mask is combined with ``attention_mask``, as
HuggingFace does). What a padded position outputs is left unspecified: HuggingFace zeroes
its attention, we let it attend as a real query would; no real token reads it either way.

Dilated windows and causal attention, which the paper uses for character-level language
modelling (section 4) and HuggingFace does not implement, are options of
``LongformerSelfAttention`` itself.
"""
from __future__ import annotations


import numpy as np

from .. import checks
from ..attention.longformer import LongformerSelfAttention
from ..autograd import Tensor
from .roberta import RobertaForMaskedLM, RobertaModel
from .configs.longformer import LongformerConfig

__all__ = ["LongformerConfig", "LongformerForMaskedLM", "LongformerModel"]


class LongformerModel(RobertaModel):
    """The Longformer encoder: ``RobertaModel`` whose layers attend with
    ``LongformerSelfAttention`` (window ``attention_window[i] / 2`` on each side in layer i).
    ``forward`` is ``BertModel.forward`` plus ``global_attention_mask`` (batch, time), keyword
    only (HuggingFace also takes it as the third positional argument): 1 / True on tokens with
    global attention ([CLS] for classification, the question for QA), 0 / False elsewhere.
    ``output_attentions`` gives each layer's (batch, heads, time, time) weights, built densely
    (HuggingFace returns the window's band and the global columns instead)."""

    config_class = LongformerConfig

    def build_encoder(self, config):
        """RoBERTa's layers, each with Longformer's self-attention in place of the full one."""
        encoder = super().build_encoder(config)
        for layer, window in zip(encoder.layers, config.layer_windows):
            layer.self_attn = LongformerSelfAttention(
                config.hidden_size, config.num_attention_heads, window // 2,
                dropout=config.attention_probs_dropout_prob)
        return encoder

    def forward(self, input_ids: Tensor | np.ndarray,
                attention_mask: Tensor | np.ndarray | None = None,
                token_type_ids: Tensor | np.ndarray | None = None,
                position_ids: Tensor | np.ndarray | None = None,
                head_mask: Tensor | np.ndarray | None = None, output_hidden_states: bool = False,
                output_attentions: bool = False, *,
                global_attention_mask: Tensor | np.ndarray | None = None):
        is_global = self.global_tokens(input_ids, attention_mask, global_attention_mask)
        return super().forward(input_ids, attention_mask, token_type_ids, position_ids,
                               head_mask, output_hidden_states, output_attentions,
                               layer_inputs={"global_attention_mask": is_global})

    def global_tokens(self, input_ids, attention_mask, global_attention_mask):
        """The (batch, time) bool mask of global tokens: ``global_attention_mask`` on the real
        tokens of ``attention_mask`` (HuggingFace's merged mask drops global flags on padding);
        None when there are none."""
        if global_attention_mask is None:
            return None
        name = type(self).__name__
        shape = checks.ids_array(input_ids, "input_ids", name).shape
        flags = np.asarray(global_attention_mask.numpy() if isinstance(global_attention_mask,
                                                                       Tensor)
                           else global_attention_mask)
        if flags.shape != shape:
            raise ValueError(f"{name}: global_attention_mask of shape {flags.shape} must be "
                             f"(batch, time) = {shape}, as input_ids")
        stray = flags[(flags != 0) & (flags != 1)]
        if stray.size:
            raise ValueError(f"{name}: global_attention_mask holds {stray[0].item()!r}; use 1 "
                             "for tokens with global attention and 0 for the others")
        real = checks.attention_mask(attention_mask, shape, name)
        is_global = flags.astype(bool) if real is None else flags.astype(bool) & real
        return is_global if is_global.any() else None


class LongformerForMaskedLM(RobertaForMaskedLM):
    """Longformer with RoBERTa's masked-LM head (HuggingFace's ``lm_head``); called as
    ``RobertaForMaskedLM`` plus ``global_attention_mask=`` (see ``LongformerModel``)."""

    base_model_class = LongformerModel
