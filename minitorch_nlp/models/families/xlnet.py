"""XLNet as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.xlnet``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ...io.huggingface import HFArchitecture, Rule, register_architecture
from ..configs.xlnet import XLNetConfig
from ..registry import CAUSAL_LM, ModelFamily, register_family
from ..xlnet import XLNetLMHeadModel, XLNetModel


# ---- HuggingFace checkpoints ---------------------------------------------------------------------
def _layer_rules(prefix, heads, head_dim):
    """One layer's tensors. HuggingFace keeps q, k, v, r and o as (d_model, heads, d_head)
    arrays applied with einsum: our q, k, v, W_R projections are their (heads d_head, d_model)
    transposes, our output projection their (d_model, heads d_head) reshape."""
    def to_projection(array):
        return np.ascontiguousarray(array.reshape(array.shape[0], -1).T)

    def from_projection(array):
        return np.ascontiguousarray(array.T.reshape(array.shape[1], heads, head_dim))

    def to_output(array):
        return np.ascontiguousarray(array.reshape(array.shape[0], -1))

    def from_output(array):
        return np.ascontiguousarray(array.reshape(array.shape[0], heads, head_dim))

    hf, ours = f"{prefix}layer.{{i}}.", f"{prefix}layers.{{i}}."
    attention, core = f"{ours}self_attn.", f"{ours}self_attn.core."
    rules = [Rule(f"{hf}rel_attn.{name}", f"{attention}{name}_proj.weight",
                  to_ours=to_projection, to_hf=from_projection) for name in "qkv"]
    rules += [Rule(f"{hf}rel_attn.r", f"{core}position_proj.weight", to_ours=to_projection,
                   to_hf=from_projection),
              Rule(f"{hf}rel_attn.o", f"{attention}out_proj.weight", to_ours=to_output,
                   to_hf=from_output),
              Rule(f"{hf}rel_attn.r_w_bias", f"{core}content_bias"),
              Rule(f"{hf}rel_attn.r_r_bias", f"{core}position_bias"),
              Rule(f"{hf}rel_attn.r_s_bias", f"{core}segment_bias"),
              Rule(f"{hf}rel_attn.seg_embed", f"{core}segment_embedding")]
    for kind in ("weight", "bias"):
        rules += [Rule(f"{hf}rel_attn.layer_norm.{kind}", f"{ours}norm1.{kind}"),
                  Rule(f"{hf}ff.layer_norm.{kind}", f"{ours}norm2.{kind}"),
                  Rule(f"{hf}ff.layer_1.{kind}", f"{ours}feed_forward.linear1.{kind}"),
                  Rule(f"{hf}ff.layer_2.{kind}", f"{ours}feed_forward.linear2.{kind}")]
    return rules


@dataclass(frozen=True)
class _XLNetArchitecture(HFArchitecture):
    """XLNet's key map: the head layout of the attention tensors is read from our model's u
    (content_bias, (heads, d_head)), so that the reshapes know it."""

    prefix: str = ""

    def expanded_rules(self, our_keys):
        u = our_keys[f"{self.prefix}layers.0.self_attn.core.content_bias"]
        heads, head_dim = u if isinstance(u, tuple) else u.shape   # shapes or arrays
        rules = (Rule(f"{self.prefix}word_embedding.weight", f"{self.prefix}word_embedding.weight"),
                 Rule(f"{self.prefix}mask_emb", f"{self.prefix}mask_emb"),
                 *_layer_rules(self.prefix, heads, head_dim), *self.rules)
        return HFArchitecture.expanded_rules(dataclasses.replace(self, rules=rules), our_keys)


register_architecture(_XLNetArchitecture(
    name="XLNetLMHeadModel", model_type="xlnet", model_class=XLNetLMHeadModel,
    from_config=lambda hf: XLNetLMHeadModel(XLNetConfig.from_hf(hf)),
    to_config=lambda model: model.config.to_hf(), rules=(Rule("lm_loss.bias", "lm_bias"),),
    ignore=(r"lm_loss\.weight",), base_prefix="transformer.", default_for_type=True,
    prefix="transformer."))
register_architecture(_XLNetArchitecture(
    name="XLNetModel", model_type="xlnet", model_class=XLNetModel,
    from_config=lambda hf: XLNetModel(XLNetConfig.from_hf(hf)),
    to_config=lambda model: model.config.to_hf(), rules=()))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer):
    """An XLNet trained on the permutation objective (``permutation_k=6``) for a run's
    ``settings``; no end-of-text id (samples are as long as asked)."""
    return XLNetLMHeadModel(XLNetConfig(
        vocab_size=len(tokenizer), d_model=settings.n_embd, n_layer=settings.n_layer,
        n_head=settings.n_head, d_inner=4 * settings.n_embd, dropout=settings.dropout,
        mem_len=settings.block_size, pad_token_id=None, bos_token_id=None, eos_token_id=None,
        permutation_k=6))


register_family(ModelFamily(
    name="xlnet", summary="XLNet: permutation language modelling with two-stream relative "
    "attention (eq 26-29)",
    objective=CAUSAL_LM, build=_build_for_training, default_tokenizer="char", bpe_style="gpt2",
    hf_architectures=("XLNetLMHeadModel",)))
