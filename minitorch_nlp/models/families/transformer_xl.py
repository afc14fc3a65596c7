"""Transformer-XL as the rest of the library sees it: its HuggingFace key map (our parameter names
<-> HuggingFace's, with the transposes and fused tensors) and its registrations for
``from_pretrained`` and for training and generation from the command line (``models.registry``).
The model itself is ``models.transformer_xl``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...io.huggingface import HFArchitecture, Rule, register_architecture, transpose
from ..configs.transformer_xl import TransfoXLConfig
from ..registry import CAUSAL_LM_WITH_MEMORY, ModelFamily, register_family
from ..transformer_xl import TransfoXLLMHeadModel


# ---- HuggingFace checkpoints (transformers 4.x TransfoXLLMHeadModel) -----------------------------
def _split_rows(array):
    """HuggingFace's fused ``qkv_net`` (3 h d_head, d_model) -> our three projections."""
    return tuple(np.ascontiguousarray(part) for part in np.split(array, 3, axis=0))


def _concat_rows(*arrays):
    return np.concatenate(arrays, axis=0)


def _layer_rules():
    hf, ours = "transformer.layers.{i}.", "transformer.layers.{i}."
    attention = f"{ours}self_attn."
    rules = [Rule(f"{hf}dec_attn.qkv_net.weight",
                  tuple(f"{attention}{n}_proj.weight" for n in "qkv"),
                  to_ours=_split_rows, to_hf=_concat_rows),
             Rule(f"{hf}dec_attn.o_net.weight", f"{attention}out_proj.weight"),
             Rule(f"{hf}dec_attn.r_net.weight", f"{attention}core.position_proj.weight"),
             Rule(f"{hf}dec_attn.r_w_bias", f"{attention}core.content_bias"),
             Rule(f"{hf}dec_attn.r_r_bias", f"{attention}core.position_bias")]
    for kind in ("weight", "bias"):
        rules += [Rule(f"{hf}dec_attn.layer_norm.{kind}", f"{ours}norm1.{kind}"),
                  Rule(f"{hf}pos_ff.layer_norm.{kind}", f"{ours}norm2.{kind}"),
                  Rule(f"{hf}pos_ff.CoreNet.0.{kind}", f"{ours}feed_forward.linear1.{kind}"),
                  Rule(f"{hf}pos_ff.CoreNet.3.{kind}", f"{ours}feed_forward.linear2.{kind}")]
    return tuple(rules)


# ``{i}`` runs over the clusters our model has. HuggingFace's ``out_projs`` are (d_proj, width)
# matrices applied as h @ P: our Linear stores P^T. The softmax's tied weights and projections,
# and the sinusoid's frequencies, are not ours to load.
ADAPTIVE_RULES = (
    Rule("transformer.word_emb.emb_layers.{i}.weight",
         "transformer.word_emb.embeddings.{i}.weight"),
    Rule("transformer.word_emb.emb_projs.{i}", "transformer.word_emb.projections.{i}.weight"),
    Rule("crit.out_projs.{i}", "crit.projections.{i}.weight", to_ours=transpose),
    Rule("crit.out_layers.{i}.bias", "crit.biases.{i}.bias"),
    Rule("crit.out_layers.0.bias", "crit.bias"),
    Rule("crit.cluster_weight", "crit.cluster_weight"),
    Rule("crit.cluster_bias", "crit.cluster_bias"))


@dataclass(frozen=True)
class _ConfigShapedArchitecture(HFArchitecture):
    """A key map whose rules hold only for some configs (one output bias or one per cluster, a
    head with or without cluster entries): rules naming tensors our model does not have are left
    out; every tensor is still checked both ways (unused checkpoint keys, unfilled ones of ours)."""

    def expanded_rules(self, our_keys):
        return [rule for rule in super().expanded_rules(our_keys)
                if all(name in our_keys for name in rule.ours)]


register_architecture(_ConfigShapedArchitecture(
    name="TransfoXLLMHeadModel", model_type="transfo-xl", model_class=TransfoXLLMHeadModel,
    from_config=lambda hf: TransfoXLLMHeadModel(TransfoXLConfig.from_hf(hf)),
    to_config=lambda model: model.config.to_hf(), rules=_layer_rules() + ADAPTIVE_RULES,
    ignore=(r"crit\.out_layers\.\d+\.weight", r"crit\.out_projs\.\d+",
            r"transformer\.pos_emb\.inv_freq"),
    default_for_type=True))


# ---- the model registry (minitorch_nlp.models.registry): training, command line, generation ------


def _build_for_training(settings, tokenizer):
    """A Transformer-XL for a run's ``settings`` (``training.TrainConfig``): ``n_embd`` wide,
    ``n_head`` heads, a plain softmax (a character or BPE vocabulary is small), memory
    ``block_size`` in training and in evaluation. Training reads consecutive segments and
    carries the memory from step to step (``CAUSAL_LM_WITH_MEMORY``), as the paper trains."""
    return TransfoXLLMHeadModel(TransfoXLConfig(
        vocab_size=len(tokenizer), cutoffs=[], d_model=settings.n_embd, d_embed=settings.n_embd,
        n_head=settings.n_head, d_head=settings.n_embd // settings.n_head,
        d_inner=4 * settings.n_embd, div_val=1, n_layer=settings.n_layer,
        mem_len=settings.block_size, clamp_len=0, dropout=settings.dropout,
        dropatt=settings.dropout))


register_family(ModelFamily(
    name="xl", summary="Transformer-XL: relative-position attention over a memory of the previous "
    "segment, next-token prediction (eq 86-91)",
    objective=CAUSAL_LM_WITH_MEMORY, build=_build_for_training, default_tokenizer="char",
    bpe_style="gpt2", hf_architectures=("TransfoXLLMHeadModel",)))
